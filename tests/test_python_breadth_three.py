"""Python breadth, third part: sets of tensors, frozenset dict keys, ``logging.getLogger``,
``warnings.catch_warnings`` blocks and class statements (``LOAD_BUILD_CLASS``, dataclasses)
inside compiled code. Each is compared with eager, captured in one graph under
``fullgraph=True``, and (where torch.compile captures the program) in no more graphs than
torch.compile; what cannot be made soundly is refused with a reason, never answered wrongly."""
import abc
import dataclasses
import logging
import warnings

import pytest
import torch

import pydynamo
from pydynamo.exc import Unsupported
from pydynamo.testing import CompileCounter, same


class Base:
    def g(self):
        return 3


# ---- programs captured whole ------------------------------------------------------------------

def set_of_tensors(x, y):
    s = {x, y}
    s.add(x)  # the same tensor: no new element
    t = set([x, x * 2])
    u = s - t
    return x + 1, len(s), x in s, y in t, len(u), y in u, len(s | t)


def frozenset_keys(x):
    table = {frozenset({"a", "b"}): 2.0, frozenset(): 3.0}
    return x * table[frozenset(["b", "a"])] + table[frozenset()]


def get_logger(x):
    log = logging.getLogger(__name__ + ".breadth")
    log.info("scaling %s", 2)
    if log.isEnabledFor(logging.DEBUG):
        x = x * 10
    return x * 2


def catch_warnings_block(x):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        y = x.sin()
    with warnings.catch_warnings(action="ignore", category=UserWarning):
        y = y + 1
    return y


def class_statement(x):
    class A(Base):
        k = 2

        def __init__(self, v):
            self.v = v

        def f(self):
            return self.v * self.k * self.g()
    return A(x).f()


def class_with_super(x):
    class B(Base):
        def g(self):
            return super().g() + 1
    return x * B().g()


def class_closing_over_a_local(x):
    n = 3

    class C:
        def f(self):
            return x * n
    c = C()
    n = 5  # the method reads the enclosing function's cell: 5
    return c.f()


def dataclass_statement(x):
    @dataclasses.dataclass
    class P:
        a: torch.Tensor
        b: int = 2
        c: list = dataclasses.field(default_factory=list)
    p = P(x)
    p.c.append(1)
    return p.a * p.b + len(p.c)


def frozen_dataclass(x):
    @dataclasses.dataclass(frozen=True)
    class P:
        a: torch.Tensor
        b: int = 3
    return P(x, b=4).a * P(x).b


def abc_and_descriptors(x):
    class I(abc.ABC):
        @abc.abstractmethod
        def f(self):
            ...

    class J(I):
        @staticmethod
        def s(a):
            return a + 1

        @property
        def p(self):
            return 5

        def f(self):
            return 2
    return J.s(x) * J().p * J().f()


CASES = [set_of_tensors, frozenset_keys, get_logger, catch_warnings_block, class_statement,
         class_with_super, class_closing_over_a_local, dataclass_statement, frozen_dataclass,
         abc_and_descriptors]


def _inputs(fn):
    return [torch.arange(4.0), torch.ones(4)][:fn.__code__.co_argcount]


def _torch_graphs(fn):
    import torch._dynamo
    torch._dynamo.reset()
    try:
        return torch._dynamo.explain(fn)(*_inputs(fn)).graph_count
    finally:
        torch._dynamo.reset()


@pytest.mark.parametrize("fn", CASES, ids=[c.__name__ for c in CASES])
def test_breadth_three_fullgraph(fn):
    pydynamo.reset()
    expected = fn(*_inputs(fn))
    cnt = CompileCounter()
    compiled = pydynamo.optimize(cnt, fullgraph=True)(fn)
    assert same(compiled(*_inputs(fn)), expected)
    assert same(compiled(*_inputs(fn)), expected)  # the cache hit
    assert cnt.frame_count == 1
    assert cnt.frame_count <= max(_torch_graphs(fn), 1)


# ---- sets of tensors --------------------------------------------------------------------------

def test_a_set_of_tensors_returned_is_rebuilt_with_the_run_time_tensors():
    def fn(x, y):
        s = {x, y}
        s.discard(y)
        return s, x + 1
    x, y = torch.ones(2), torch.zeros(2)
    got, _ = pydynamo.optimize("eager", fullgraph=True)(fn)(x, y)
    assert type(got) is set and len(got) == 1 and next(iter(got)) is x


def test_iterating_a_set_of_tensors_is_refused():
    def fn(x):
        return [t + 1 for t in {x, x * 2}]  # the order follows the tensors' addresses
    pydynamo.reset()
    with pytest.raises(Unsupported, match="held tensors"):
        pydynamo.optimize("eager", fullgraph=True)(fn)(torch.ones(2))


def test_a_set_of_tensors_across_a_graph_break():
    def fn(x, y):
        s = {x}
        print(end="")
        s.add(y)
        s.add(x)
        return len(s), x in s, s
    x, y = torch.ones(2), torch.zeros(2)
    n, found, s = pydynamo.optimize("eager")(fn)(x, y)
    assert (n, found) == (2, True) and {id(t) for t in s} == {id(x), id(y)}


def test_aliased_inputs_are_one_set_element():
    def fn(x, y):
        return len({x, y}), x + 1
    compiled = pydynamo.optimize("eager")(fn)
    a, b = torch.ones(2), torch.ones(2)
    assert compiled(a, b)[0] == 2
    assert compiled(a, a)[0] == 1  # the aliasing guard fails: a new entry answers 1


# ---- frozenset keys ---------------------------------------------------------------------------

def test_frozenset_keys_of_an_input_dict_are_guarded():
    def fn(x, d):
        return x * d[frozenset({"a"})]
    compiled = pydynamo.optimize("eager")(fn)
    x = torch.ones(2)
    assert same(compiled(x, {frozenset({"a"}): 2.0}), x * 2)
    assert same(compiled(x, {frozenset({"a"}): 5.0, frozenset({1}): 1.0}), x * 5)


# ---- logging.getLogger -----------------------------------------------------------------------

def test_get_logger_level_is_guarded():
    name = __name__ + ".level"
    logger = logging.getLogger(name)
    logger.setLevel(logging.INFO)

    def fn(x):
        if logging.getLogger(name).isEnabledFor(logging.DEBUG):
            return x * 10
        return x * 2
    compiled = pydynamo.optimize("eager", fullgraph=True)(fn)
    x = torch.ones(2)
    assert same(compiled(x), x * 2)
    logger.setLevel(logging.DEBUG)
    try:
        assert same(compiled(x), x * 10)
    finally:
        logger.setLevel(logging.NOTSET)


def test_get_logger_with_a_name_that_is_not_a_string_raises_like_python():
    def fn(x):
        logging.getLogger(3)
        return x
    with pytest.raises(Unsupported, match="A logger name must be a string"):
        pydynamo.optimize("eager", fullgraph=True)(fn)(torch.ones(2))


# ---- warnings.catch_warnings ------------------------------------------------------------------

def _caught(fn, x):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = fn(x)
    return result, [str(w.message) for w in caught]


def test_catch_warnings_leaves_the_filters_and_shows_what_eager_shows():
    def fn(x):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            y = x + 1
        warnings.warn("after the block")
        return y
    before = list(warnings.filters)
    expected = _caught(fn, torch.ones(2))
    got = _caught(pydynamo.optimize("eager", fullgraph=True)(fn), torch.ones(2))
    assert same(got[0], expected[0]) and got[1] == expected[1] == ["after the block"]
    assert warnings.filters == before


def test_a_break_inside_a_catch_warnings_block_enters_it_again_with_its_filters():
    def fn(x):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            y = x + 1
            print(end="")  # a graph break inside the block
            warnings.warn("hidden")
            y = y * 2
        warnings.warn("shown")
        return y
    expected = _caught(fn, torch.ones(2))
    assert expected[1] == ["shown"]
    compiled = pydynamo.optimize("eager")(fn)
    for _ in range(2):  # the first call traces, the second runs the cached code
        got = _caught(compiled, torch.ones(2))
        assert same(got[0], expected[0]) and got[1] == expected[1]


def test_catch_warnings_record_and_filters_outside_a_block_are_refused():
    def recorded(x):
        with warnings.catch_warnings(record=True) as w:
            y = x + 1
        return y, len(w)

    def outside(x):
        warnings.simplefilter("ignore")
        return x + 1
    before = list(warnings.filters)
    for fn, reason in ((recorded, "record=True"), (outside, "outside a warnings.catch_warnings")):
        pydynamo.reset()
        with pytest.raises(Unsupported, match=reason):
            pydynamo.optimize("eager", fullgraph=True)(fn)(torch.ones(2))
    assert warnings.filters == before


# ---- class statements -------------------------------------------------------------------------

def test_a_class_made_in_compiled_code_is_new_at_each_call():
    def fn(x):
        class C:
            pass
        return x + 1, C
    compiled = pydynamo.optimize("eager")(fn)
    first, second = compiled(torch.ones(2))[1], compiled(torch.ones(2))[1]
    assert first is not second and first.__name__ == "C"
    pydynamo.reset()
    with pytest.raises(Unsupported, match="outlives the trace"):
        pydynamo.optimize("eager", fullgraph=True)(fn)(torch.ones(2))


def test_an_instance_of_a_class_made_in_compiled_code_is_refused_as_a_result():
    def fn(x):
        class C:
            def __init__(self):
                self.t = x + 1
        return C()
    got = pydynamo.optimize("eager")(fn)(torch.ones(2))
    assert type(got).__name__ == "C" and same(got.t, torch.ones(2) + 1)
    pydynamo.reset()
    with pytest.raises(Unsupported, match="outlives the trace"):
        pydynamo.optimize("eager", fullgraph=True)(fn)(torch.ones(2))


class Registry:
    seen = []

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        Registry.seen.append(cls.__name__)


class Named:
    def __set_name__(self, owner, name):
        Registry.seen.append(name)


NAMED = Named()


class Meta(type):
    pass


class Plain:
    pass


def test_class_statements_that_would_run_user_code_are_refused():
    def registered(x):
        class R(Registry):
            pass
        return x + 1

    def with_metaclass(x):
        class M(metaclass=Meta):
            pass
        return x + 1

    def set_name(x):
        class E:
            d = NAMED
        return x + 1
    for fn, reason in ((registered, "__init_subclass__"), (with_metaclass, "keywords"),
                       (set_name, "__set_name__")):
        pydynamo.reset()
        with pytest.raises(Unsupported, match=reason):
            pydynamo.optimize("eager", fullgraph=True)(fn)(torch.ones(2))
    assert Registry.seen == []  # nothing ran while tracing
    assert same(pydynamo.optimize("eager")(registered)(torch.ones(2)), torch.ones(2) + 1)
    assert Registry.seen == ["R"]  # ran eagerly, once
    Registry.seen.clear()


def test_init_subclass_added_to_a_base_later_recompiles():
    def fn(x):
        class P(Plain):
            pass
        return x + 1
    cnt = CompileCounter()
    compiled = pydynamo.optimize(cnt)(fn)
    compiled(torch.ones(2))
    seen = []
    Plain.__init_subclass__ = classmethod(lambda cls: seen.append(cls.__name__))
    try:
        compiled(torch.ones(2))
        assert seen == ["P"]  # the guard failed: the statement ran it (eagerly)
    finally:
        del Plain.__init_subclass__


class Scaled:
    k = 2

    def g(self):
        return 3


def test_what_a_class_statement_finds_on_its_bases_is_guarded():
    def fn(x):
        class C(Scaled):
            def f(self, t):
                return t * self.k * self.g() * super().g()
        return C().f(x), C.k
    compiled = pydynamo.optimize("eager")(fn)
    x = torch.ones(2)
    assert same(compiled(x), fn(x))
    old_k, old_g = Scaled.k, Scaled.g
    try:
        Scaled.k = 5  # read through the instance and through the class
        assert same(compiled(x), fn(x))
        Scaled.g = lambda self: -1  # read through the instance and through super()
        assert same(compiled(x), fn(x))
    finally:
        Scaled.k, Scaled.g = old_k, old_g


# ---- id() keys of a defaultdict that existed before the frame -----------------------------------

class _Obj:
    pass


def test_id_keys_inserted_into_an_input_defaultdict_are_the_real_ids():
    import collections
    obj = _Obj()

    def fn(x, d, o):
        d[id(o)].append(1)  # __missing__ inserts the key: the real id of o (pinned)
        return x + 1

    def made(x, d):
        d[id(_Obj())].append(1)  # an object made in the trace: no run-time number, a break
        return x + 1, len(d)
    for f, args in ((fn, (obj,)), (made, ())):
        pydynamo.reset()
        eager, compiled = collections.defaultdict(list), collections.defaultdict(list)
        f(torch.ones(1), eager, *args)
        pydynamo.optimize("eager")(f)(torch.ones(1), compiled, *args)
        assert [type(k) for k in compiled] == [int] and len(compiled) == len(eager) == 1
        if args:
            assert dict(compiled) == dict(eager) == {id(obj): [1]}
