"""The standard library inside compiled code: sets, functools, itertools, operator, collections,
math, str, contextlib, logging and warnings. Each program is compiled with fullgraph=True (one
graph, no break) and compared with eager execution: same values, same types, and for sets and
dicts the same iteration order."""
import collections
import contextlib
import functools
import itertools
import logging
import math
import operator
import warnings

import pytest
import torch

import pydynamo
from pydynamo.exc import Unsupported
from pydynamo.testing import CompileCounter, same


def exact(a, b):
    """``same``, plus the iteration order of sets and the type and order of containers."""
    if type(a) is not type(b):
        return False
    if isinstance(a, (set, frozenset)):
        return list(a) == list(b) and all(type(x) is type(y) for x, y in zip(a, b))
    if isinstance(a, (list, tuple, collections.deque)):
        return len(a) == len(b) and all(exact(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(exact(a[k], b[k]) for k in a) and (
            not isinstance(a, collections.defaultdict) or a.default_factory is b.default_factory)
    return same(a, b)


def compiled(fn, fullgraph=True):
    cnt = CompileCounter()
    return pydynamo.optimize(cnt, fullgraph=fullgraph)(fn), cnt


def check(fn, *args, graphs=1):
    """Compiled twice (the second call hits the cache) against eager; returns the counter."""
    pydynamo.reset()
    opt, cnt = compiled(fn)
    for _ in range(2):
        expected, got = fn(*args), opt(*args)
        assert exact(got, expected), (got, expected)
    assert cnt.frame_count == graphs
    return cnt


x = torch.randn(4)


# ---- sets -----------------------------------------------------------------------------------

def test_set_literals_comprehensions_and_algebra():
    def fn(x):
        s = {3, 1, 2}
        s.add(9)
        s |= {5, 40}
        t = {v * 2 for v in s if v > 1}
        u = (s | t) - {4}
        return (x * len(u), s, t, u, s & t, s ^ t, s - t, frozenset(t), 3 in s, 7 not in s,
                s <= u, s < u, u >= t, s == {1, 2, 3, 9, 5, 40}, s.isdisjoint({100}),
                sorted(s), list(u), set(), frozenset())
    check(fn, x)


def test_set_methods_and_iteration_order_of_a_table_with_deletions():
    # {1, 8} left in a 32-slot table iterates 1, 8; rebuilt from that order it would be 8, 1
    def fn(x):
        s = set(range(16))
        for i in range(16):
            if i not in (1, 8):
                s.discard(i)
        out = [x * v for v in s]
        t = s.copy()
        t.update([20, 21], (30,))
        t.intersection_update(range(25))
        t.symmetric_difference_update({1, 99})
        t.difference_update([20])
        popped = t.pop()
        t.remove(8)
        return out, s, t, popped, s.union([5]), s.intersection({8}), s.difference(), s.issubset(t)
    check(fn, x)


def test_returned_sets_keep_their_table():
    """The caller's later operations on a returned set order its items as in eager execution."""
    def fn(x):
        s = set(range(20))
        s -= set(range(2, 18))
        s.add(33)
        return x + 1, s
    pydynamo.reset()
    opt, _ = compiled(fn)
    expected, got = fn(x)[1], opt(x)[1]
    for s in (expected, got):
        for i in range(100, 160, 7):
            s.add(i)
            s.discard(i - 30)
    assert list(got) == list(expected)
    assert [got.pop() for _ in range(4)] == [expected.pop() for _ in range(4)]


def test_set_of_strings_dict_keys_and_views():
    def fn(x):
        d = {"a": 1, "b": 2, "c": 3}
        k = d.keys() & {"a", "c", "z"}
        return (x + len(k), k, d.keys() - {"a"}, d.keys() | ["q"], d.keys() ^ {"b", "y"},
                d.items() & {("a", 1), ("b", 5)}, d.keys() == {"a", "b", "c"},
                d.keys().isdisjoint(["z"]), {"b", "a"} & d.keys())
    check(fn, x)


SETTINGS = {"relu", "scale"}


def test_set_read_from_a_global_is_guarded():
    def fn(x):
        y = x.relu() if "relu" in SETTINGS else x
        return y * len(SETTINGS), sorted(SETTINGS), list(SETTINGS)
    pydynamo.reset()
    opt, cnt = compiled(fn)
    assert exact(opt(x), fn(x))
    SETTINGS.discard("relu")
    try:
        assert exact(opt(x), fn(x))
        assert cnt.frame_count == 2  # recompiled, not a stale hit
    finally:
        SETTINGS.add("relu")


def test_sets_computed_from_an_input_set_are_not_iterated():
    def fn(x):
        t = SETTINGS | {"z"}
        return x * len(t), "z" in t, t == SETTINGS | {"z"}
    check(fn, x)

    def iterates(x):
        return x, list(SETTINGS | {"z"})  # the order depends on the input's hash table
    with pytest.raises(Unsupported, match="order"):
        compiled(iterates)[0](x)


def test_sets_from_iterators_and_folds():
    def fn(x):
        return x + 1, set(v * 2 for v in range(3)), frozenset(iter([1, 2])), {1}.union(v for v in "ab")
    check(fn, x)

    def folded(x):
        s = {1, 2}
        r = [s] * 2  # one set object twice: not a set a fold may copy
        r[0].add(5)
        return x, s
    pydynamo.reset()
    with pytest.raises(Unsupported):
        compiled(folded)[0](x)
    assert exact(compiled(folded, fullgraph=False)[0](x), folded(x))


def test_refused_set_uses():
    def tensor_element(x):
        return [t + 1 for t in {x, x * 2}]  # its order follows the tensors' addresses

    def mutated_while_iterated(x):
        s = {1, 2}
        for v in s:
            s.add(v + 10)
        return x

    def mutates_a_global_set(x):
        SETTINGS.add("new")
        return x
    for fn in (tensor_element, mutated_while_iterated, mutates_a_global_set):
        pydynamo.reset()
        with pytest.raises(Unsupported):
            compiled(fn)[0](x)
    assert "new" not in SETTINGS


def test_a_graph_break_inside_a_loop_over_a_set_runs_the_frame_eagerly():
    seen = []

    def fn(x):
        s = {3, 1, 2}
        for v in s:
            seen.append(str(v))  # str() of a constant: folded; the append is a side effect
            x = x + v
            print(end="")  # a graph break: the set iterator cannot be rebuilt, so no break
        return x, s
    pydynamo.reset()
    opt, cnt = compiled(fn, fullgraph=False)
    expected = fn(x)
    assert exact(opt(x), expected) and seen == ["1", "2", "3"] * 2


def test_mutating_a_global_set_breaks_the_graph_and_runs_it():
    def fn(x):
        SETTINGS.add("new")
        return x + len(SETTINGS)
    pydynamo.reset()
    opt, _ = compiled(fn, fullgraph=False)
    try:
        out = opt(x)
        assert "new" in SETTINGS and same(out, x + 3)
    finally:
        SETTINGS.discard("new")


# ---- functools --------------------------------------------------------------------------------

SCALED_ADD = functools.partial(torch.add, alpha=2)


def test_partial_calls_attributes_flattening_and_rebuild():
    def fn(x):
        p = functools.partial(torch.mul, x)
        q = functools.partial(p, 3)
        kw = functools.partial(torch.add, alpha=3)
        return (p(2), q(), q.func is torch.mul, len(q.args), q.keywords, kw(x, x),
                SCALED_ADD(x, x), SCALED_ADD.keywords, kw)
    pydynamo.reset()
    opt, cnt = compiled(fn)
    got, expected = opt(x), fn(x)
    assert exact(got[:-1], expected[:-1]) and cnt.frame_count == 1
    rebuilt = got[-1]
    assert type(rebuilt) is functools.partial and rebuilt.func is torch.add and rebuilt.keywords == {"alpha": 3}


def test_partial_read_from_a_global_recompiles_when_it_changes():
    global SCALED_ADD

    def fn(x):
        return SCALED_ADD(x, 1.0)
    pydynamo.reset()
    opt, cnt = compiled(fn)
    assert same(opt(x), fn(x))
    old = SCALED_ADD
    SCALED_ADD = functools.partial(torch.add, alpha=5)
    try:
        assert same(opt(x), fn(x)) and cnt.frame_count == 2
    finally:
        SCALED_ADD = old


def test_reduce_and_operator_callables():
    def fn(x):
        total = functools.reduce(operator.add, [x, x * 2, x * 3])
        prod = functools.reduce(lambda a, b: a * b, range(1, 5), 10)
        g = operator.itemgetter(1)
        return (total, prod, g([x, x + 1]), operator.itemgetter(0, 2)("abc"),
                operator.attrgetter("shape")(x), operator.attrgetter("real.shape", "ndim")(x),
                operator.methodcaller("add", 1, alpha=2)(x), g)
    pydynamo.reset()
    opt, cnt = compiled(fn)
    got, expected = opt(x), fn(x)
    assert exact(got[:-1], expected[:-1]) and cnt.frame_count == 1
    assert type(got[-1]) is operator.itemgetter and got[-1]("xyz") == "y"


def test_wraps_and_lru_cache():
    def deco(f):
        @functools.wraps(f)
        def inner(t):
            return f(t) + 1
        return inner

    def base(t):
        return t * 2

    @functools.lru_cache(maxsize=None)
    def squares(n):
        return tuple(i * i for i in range(n))

    def fn(x):
        g = deco(base)
        return g(x), g.__name__, g.__wrapped__ is base, x * squares(4)[3]
    check(fn, x)


LIMIT = 3
CALLS = []


def test_lru_cache_of_an_impure_function_is_refused():
    @functools.lru_cache(maxsize=None)
    def limit():
        return LIMIT  # a cache keeps the first value: not what a call computes later

    @functools.lru_cache(maxsize=None)
    def counted(n):
        CALLS.append(n)  # runs only on a miss
        return n

    @functools.lru_cache(maxsize=None)
    def new_tensor(n):
        return torch.ones(n)  # the same tensor object on every hit

    for fn in (lambda x: x * limit(), lambda x: x * counted(2), lambda x: x + new_tensor(4),
               lambda x: x * counted([1])):
        pydynamo.reset()
        with pytest.raises(Unsupported, match="lru_cache"):
            compiled(fn)[0](x)
    assert CALLS == []


# ---- itertools and lazy builtins --------------------------------------------------------------

def test_itertools():
    def fn(x):
        return (list(itertools.chain([x], (x + 1,))), list(itertools.chain.from_iterable([[1], [2, 3]])),
                list(itertools.islice(range(10), 2, 8, 2)), list(itertools.islice("abcdef", 3)),
                list(itertools.accumulate([1, 2, 3])), list(itertools.accumulate([1, 2, 3], operator.mul, initial=5)),
                list(itertools.repeat(x, 2)), list(zip(itertools.count(5, 2), "ab")),
                [(k, list(g)) for k, g in itertools.groupby("aabbbca")],
                [(k, len(list(g))) for k, g in itertools.groupby([1, 3, 2, 4, 5], key=lambda v: v % 2)],
                list(itertools.starmap(pow, [(2, 3), (3, 2)])), list(itertools.pairwise([1, 2, 3])),
                list(itertools.zip_longest([1, 2], "abc", fillvalue=0)), list(itertools.product([1, 2], "ab")),
                list(itertools.product([0, 1], repeat=2)), list(itertools.compress("abcd", [1, 0, 1])),
                list(itertools.takewhile(lambda v: v < 3, [1, 2, 5, 1])),
                list(itertools.dropwhile(lambda v: v < 3, [1, 2, 5, 1])),
                list(itertools.filterfalse(None, [0, 1, 2])), list(map(operator.add, [1, 2], [3, 4, 5])),
                list(filter(None, [0, 1, 2])), sum(itertools.chain([x], [x])))
    check(fn, x)


def test_iterators_are_read_lazily_as_in_python():
    def fn(x):
        it = iter([1, 2, 3, 4, 5, 6])
        first = list(itertools.islice(it, 2))
        pairs = list(zip(it, "a"))  # reads one item of it, then stops
        rest = list(it)
        gen = (v * x for v in range(3))
        head = next(itertools.islice(gen, 1, None))
        return first, pairs, rest, head, list(enumerate(gen))
    check(fn, x)


def test_heapq_sorted_with_a_key_and_list_sort():
    import heapq

    def fn(x):
        h = [5, 1, 4, 1, 3]
        heapq.heapify(h)
        heapq.heappush(h, 0)
        smallest = [heapq.heappop(h), heapq.heappop(h)]
        top = heapq.nlargest(2, [(3, "c"), (1, "a"), (3, "b")], key=lambda p: p[0])
        pairs = [("b", 2), ("a", 2), ("c", 1)]
        pairs.sort(key=lambda p: p[1], reverse=True)
        ts = sorted([x * 3, x, x * 2], key=lambda t: int(t.shape[0]) * 0)
        return h, smallest, top, pairs, ts, sorted({"b": 1, "a": 2}.items(), key=operator.itemgetter(1))
    check(fn, x)


def test_iterator_types():
    def fn(x):
        c = itertools.chain([1])
        return x + 1, type(c) is itertools.chain, isinstance(map(abs, [1]), map)
    check(fn, x)


# ---- collections ------------------------------------------------------------------------------

def test_deque():
    def fn(x):
        q = collections.deque([1, 2, 3], maxlen=4)
        q.append(x)
        q.appendleft(0)
        q.extend([7, 8])
        q.rotate(1)
        left = q.popleft()
        q.extendleft("ab")
        r = collections.deque(range(3))
        r.pop()
        r += [9]
        return x * 2, q, left, q.maxlen, len(q), q[1], r, list(r), 8 in q
    check(fn, x)


def test_defaultdict_ordereddict_counter():
    def fn(x):
        d = collections.defaultdict(list)
        d["a"].append(x)
        d["b"]
        d["a"].append(1)
        o = collections.OrderedDict(a=1, b=2, c=3)
        o.move_to_end("a")
        o.move_to_end("c", last=False)
        popped = o.popitem()
        o2 = collections.OrderedDict([("b", 2), ("c", 3)])
        c = collections.Counter("abracadabra")
        return (d, d["a"][0] * 2, d.default_factory is list, o, popped, o == o2, list(o),
                o2.copy(), c, c["a"], c.most_common(2), sorted(c.elements()))
    check(fn, x)


QUEUE = collections.deque([1, 2], maxlen=3)


def test_deque_read_from_a_global_is_guarded_and_mutations_replayed():
    def fn(x):
        QUEUE.append(5)
        return x * len(QUEUE), list(QUEUE)
    def run(f, start):
        QUEUE.clear()
        QUEUE.extend(start)
        return f(x), list(QUEUE)
    pydynamo.reset()
    opt, cnt = compiled(fn)
    try:
        for start in ([1, 2], [1, 2], [1, 2, 3]):
            assert exact(run(opt, start), run(fn, start))
        assert cnt.frame_count == 2  # the length changed: recompiled
    finally:
        QUEUE.clear()
        QUEUE.extend([1, 2])


# ---- math, str, contextlib --------------------------------------------------------------------

def test_math_str_methods_and_fstrings():
    def fn(x):
        n = x.shape[0]
        name = f"{n:03d}-{'ab'.upper()}-{math.pi:.2f}-{n!r}"
        return (x * math.floor(2.5) + math.sqrt(4), math.isclose(1.0, 1.0), math.gcd(12, 8), name,
                "a,b".split(","), str.join("-", ["a", "b"]), " x ".strip(), "abc".replace("b", "z"),
                "Ab".lower().startswith("a"), str.upper("q"), "{}+{}".format(1, n))
    check(fn, x)


def test_nullcontext_and_contextmanager():
    @contextlib.contextmanager
    def doubled(k):
        yield k * 2

    def fn(x):
        with contextlib.nullcontext():
            y = x + 1
        with contextlib.nullcontext(5) as k:
            y = y * k
        with doubled(3) as m:
            y = y * m
        return y
    check(fn, x)


def test_inspect_signature_breaks_the_graph():
    import inspect

    def fn(x):
        return x * len(inspect.signature(torch.add if False else (lambda a, b: a)).parameters)
    pydynamo.reset()
    opt, _ = compiled(fn, fullgraph=False)
    assert same(opt(x), fn(x))


# ---- logging and warnings ---------------------------------------------------------------------

log = logging.getLogger("pydynamo.tests.stdlib")


@functools.lru_cache(None)
def warning_once(self, *args, **kwargs):  # as transformers adds it to logging.Logger
    self.warning(*args, **kwargs)


def _helper(t):
    log.info("helper %s %d", "a", 3)
    warnings.warn("from the helper's caller", stacklevel=2)
    return t * 2


def _logging_program(x):
    log.warning("start %s", tuple(x.shape))
    y = _helper(x + 1)
    warnings.warn("careful", UserWarning)
    log.warning_once("once!")
    if log.isEnabledFor(logging.DEBUG):
        log.debug("debug %s", y.sum())
    log.error("values %s", y)
    return y


def _records(caplog, w):
    logs = [(r.levelname, r.getMessage(), r.funcName, r.lineno, r.pathname) for r in caplog.records]
    warns = [(str(m.message), m.category, m.lineno, m.filename) for m in w]
    caplog.clear()
    w.clear()
    return logs, warns


def test_logging_and_warnings_are_replayed_in_order(caplog, monkeypatch):
    monkeypatch.setattr(logging.Logger, "warning_once", warning_once, raising=False)
    warning_once.cache_clear()
    pydynamo.reset()
    opt, cnt = compiled(_logging_program)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        caplog.set_level(logging.INFO, logger=log.name)
        _logging_program(x), _logging_program(x)
        expected = _records(caplog, w)
        warning_once.cache_clear()
        got_y = opt(x), opt(x)
        got = _records(caplog, w)
    assert got == expected and cnt.frame_count == 1
    assert same(got_y[0], _logging_program(x))
    assert [m for _, m, *_ in expected[0]].count("once!") == 1


def test_logger_level_is_guarded(caplog, monkeypatch):
    monkeypatch.setattr(logging.Logger, "warning_once", warning_once, raising=False)
    pydynamo.reset()
    opt, cnt = compiled(_logging_program)
    with warnings.catch_warnings(record=True):
        caplog.set_level(logging.INFO, logger=log.name)
        opt(x)
        caplog.clear()
        caplog.set_level(logging.DEBUG, logger=log.name)
        opt(x)
        assert "debug" in [r.getMessage().split()[0] for r in caplog.records]
    assert cnt.frame_count == 2


def test_logging_is_replayed_before_a_graph_break():
    events = []

    class Handler(logging.Handler):
        def emit(self, record):
            events.append(record.getMessage())

    @pydynamo.disable
    def native(tag):
        events.append(tag)

    def fn(x):
        log.warning("before %d", 1)
        y = x + 1
        native("break")
        log.warning("after")
        return y
    handler = Handler()
    log.addHandler(handler)
    try:
        pydynamo.reset()
        opt, cnt = compiled(fn, fullgraph=False)
        fn(x)
        expected, events[:] = list(events), []
        assert same(opt(x), x + 1)
        assert events == expected == ["before 1", "break", "after"]
    finally:
        log.removeHandler(handler)


def test_logging_a_tensor_changed_in_place_later_is_refused():
    def fn(x):
        y = x + 1
        log.warning("y=%s", y)
        y.add_(1)
        return y
    pydynamo.reset()
    with pytest.raises(Unsupported, match="in place"):
        compiled(fn)[0](x)


def test_a_stacklevel_above_the_compiled_frame_is_refused():
    def fn(x):
        warnings.warn("up", stacklevel=2)
        return x
    pydynamo.reset()
    with pytest.raises(Unsupported, match="stacklevel"):
        compiled(fn)[0](x)


def test_a_warning_the_filters_make_an_error_raises_where_it_is_made():
    def fn(x):
        warnings.warn("stop", RuntimeWarning)
        x.add_(1)  # never runs: the warning raised first
        return x
    pydynamo.reset()
    opt, _ = compiled(fn, fullgraph=False)
    t = torch.zeros(2)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        with pytest.raises(RuntimeWarning):
            opt(t)
    assert t.tolist() == [0.0, 0.0]
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        assert same(opt(t), torch.ones(2)) and len(w) == 1  # filters changed: recompiled
