"""The PEP 523 hook: settings, installation, what is intercepted, the hit path, failures."""
import asyncio
import gc
import logging
import sys
import threading
import traceback

import pytest

from pydynamo import _C
from c_support import Redirect, guards, hooked

L0_INT = (("L", 0),), "TYPE_MATCH", int, "type(L['x']) is int"


def x_equals(v):
    return (("L", 0),), "EQUALS_MATCH", v, f"L['x'] == {v!r}"


def orig(x):
    return ("orig", x)


def new(x):
    return ("new", x)


# ---------------------------------------------------------------- settings and installation

def test_set_eval_frame_returns_previous_setting():
    cb = lambda frame, n: None  # noqa: E731
    assert _C.set_eval_frame(cb) is None
    assert _C.get_eval_frame() is cb
    assert _C.set_eval_frame(False) is cb
    assert _C.set_eval_frame(None) is False
    assert _C.get_eval_frame() is None


def test_set_eval_frame_rejects_non_callables():
    with pytest.raises(TypeError, match="None, False or a callable"):
        _C.set_eval_frame(3)
    assert _C.get_eval_frame() is None


def test_installed_only_while_some_thread_is_on():
    assert not _C.is_installed()
    with hooked(False):
        assert _C.is_installed()
        with hooked(None):  # this thread off, no other thread on
            assert not _C.is_installed()
        assert _C.is_installed()
    assert not _C.is_installed()
    assert _C.debug_counters()["active_threads"] == 0


def test_setting_is_per_thread():
    seen = []
    r = Redirect(orig, new)
    started, stop = threading.Event(), threading.Event()

    def other():
        with hooked(False):  # keeps the hook installed from another thread
            started.set()
            stop.wait()

    t = threading.Thread(target=other)
    t.start()
    started.wait()
    try:
        assert _C.is_installed()
        assert _C.get_eval_frame() is None
        seen.append(orig(1))  # this thread is off: not intercepted although the hook is installed
        assert r.calls == []
        assert _C.cache_size(orig) == 0
    finally:
        stop.set()
        t.join()
    assert seen == [("orig", 1)]
    assert not _C.is_installed()


def test_thread_started_while_on_is_not_intercepted_unless_it_opts_in():
    r = Redirect(orig, new)
    out = {}

    def plain():
        out["plain"] = orig(1)

    def opted_in():
        with hooked(r):
            out["opted"] = orig(2)

    with hooked(r):
        for fn in (plain, opted_in):
            t = threading.Thread(target=fn)
            t.start()
            t.join()
    assert out == {"plain": ("orig", 1), "opted": ("new", 2)}
    assert [c[0] for c in r.calls] == [{"x": 2}]


# ---------------------------------------------------------------- callback answers and the cache

def test_redirect_under_type_and_value_guards():
    r = Redirect(orig, new, lambda f: guards(L0_INT, x_equals(f.f_locals["x"])))
    with hooked(r):
        assert orig(1) == ("new", 1)     # miss: compiled, run now
        assert orig(1) == ("new", 1)     # hit
        assert orig(2) == ("new", 2)     # value guard fails: recompiled
        assert orig(1.0) == ("new", 1.0)  # type guard fails (1.0 == 1, but not an int)
    assert [c[0]["x"] for c in r.calls] == [1, 2, 1.0]
    assert [c[1] for c in r.calls] == [0, 1, 2]  # cache size as the callback saw it
    assert _C.cache_size(orig) == 3
    entries = _C.get_cache_entries(orig)
    assert [e.guards.texts()[1] for e in entries] == ["L['x'] == 1.0", "L['x'] == 2", "L['x'] == 1"]  # newest first
    assert all(e.code is new.__code__ for e in entries)
    assert orig(1) == ("orig", 1)  # hook off: the original runs


def test_none_answer_runs_original_and_asks_again():
    asked = []

    def cb(frame, n):
        if frame.f_code is orig.__code__:
            asked.append(n)
        return None

    with hooked(cb):
        assert [orig(i) for i in range(3)] == [("orig", i) for i in range(3)]
    assert asked == [0, 0, 0]
    assert _C.cache_size(orig) == 0


def test_skip_answer_is_never_asked_again():
    asked = []

    def cb(frame, n):
        if frame.f_code is orig.__code__:
            asked.append(n)
            return _C.SKIP
        return None

    with hooked(cb):
        assert orig(1) == ("orig", 1)
        assert orig(2) == ("orig", 2)
    assert asked == [0]
    assert _C.is_skipped(orig)
    _C.reset()
    assert not _C.is_skipped(orig)


def test_mark_skip_and_reset_code():
    r = Redirect(orig, new)
    _C.mark_skip(orig)
    with hooked(r):
        assert orig(1) == ("orig", 1)
        _C.reset_code(orig)
        assert orig(1) == ("new", 1)
    assert len(r.calls) == 1


def test_run_only_mode_runs_hits_but_never_compiles():
    r = Redirect(orig, new, lambda f: guards(x_equals(f.f_locals["x"])))
    with hooked(r):
        orig(1)
    with hooked(False):
        assert orig(1) == ("new", 1)
        assert orig(2) == ("orig", 2)
    assert len(r.calls) == 1
    assert _C.cache_size(orig) == 1


def test_python_guard_callable():
    def cb(frame, n):
        if frame.f_code is orig.__code__:
            return _C.CacheEntry(lambda loc: loc["x"] > 0, new.__code__, orig.__code__)

    with hooked(cb):
        assert orig(5) == ("new", 5)
        assert orig(6) == ("new", 6)  # hit through the Python guard
        assert _C.cache_size(orig) == 1
        assert orig(-1) == ("new", -1)  # miss: a second entry
        assert _C.cache_size(orig) == 2


def test_entry_must_match_the_original_signature():
    def other(x, y):
        return x

    def cells(x):
        return lambda: x

    with pytest.raises(ValueError, match="same arguments"):
        _C.CacheEntry(guards(), other.__code__, orig.__code__)
    with pytest.raises(ValueError, match="free variables"):
        _C.CacheEntry(guards(), cells(1).__code__, (lambda: None).__code__)
    with pytest.raises(TypeError, match="GuardSet or a callable"):
        _C.CacheEntry(3, new.__code__, orig.__code__)
    with pytest.raises(ValueError, match="not an argument"):
        _C.CacheEntry(guards(((("L", 1),), "TYPE_MATCH", int, "t")), new.__code__, orig.__code__)


# ---------------------------------------------------------------- argument shapes

def test_all_argument_kinds_reach_the_entry_code():
    def f(a, b=2, /, c=3, *args, d, e=5, **kw):
        return ("orig", a, b, c, args, d, e, kw)

    def g(a, b=2, /, c=3, *args, d, e=5, **kw):
        return ("new", a, b, c, args, d, e, kw)

    r = Redirect(f, g)
    with hooked(r):
        assert f(1, d=4) == ("new", 1, 2, 3, (), 4, 5, {})
        assert f(1, 20, 30, 40, 50, d=4, e=6, z=7, w=8) == ("new", 1, 20, 30, (40, 50), 4, 6, {"z": 7, "w": 8})
        assert f(*range(20), d=0) == ("new", 0, 1, 2, tuple(range(3, 20)), 0, 5, {})
        assert f(1, **{f"k{i}": i for i in range(20)}, d=1)[-1] == {f"k{i}": i for i in range(20)}
    assert r.calls[0][0] == {"a": 1, "b": 2, "c": 3, "args": (), "d": 4, "e": 5, "kw": {}}


def test_closures_and_cell_variables():
    base = 10

    def f(x):
        inner = lambda: x + base  # noqa: E731  (x becomes a cell; base is a free variable)
        return ("orig", inner())

    def make_g():
        base = None  # same free variable name as f

        def g(x):
            y = x * 2
            inner = lambda: x + base + y  # noqa: E731
            return ("new", inner())
        return g

    g = make_g()
    r = Redirect(f, g)
    with hooked(r):
        assert f(1) == ("new", 1 + 10 + 2)  # g ran with f's closure
        base = 100
        assert f(1) == ("new", 1 + 100 + 2)
    assert r.calls[0][0] == {"x": 1, "base": 10}


def test_guard_on_closure_cell_and_global():
    scale = 2

    def f(x):
        return ("orig", x * scale)

    def g(x):
        return ("new", x * scale)

    def make(frame):
        return guards(((("C", 0),), "EQUALS_MATCH", frame.f_locals["scale"], "scale"),
                      ((("G", "GLOBAL_FLAG"),), "EQUALS_MATCH", GLOBAL_FLAG, "G['GLOBAL_FLAG']"))

    r = Redirect(f, g, make)
    global GLOBAL_FLAG
    with hooked(r):
        f(1)
        f(1)
        assert len(r.calls) == 1
        scale = 3
        assert f(1) == ("new", 3)
        assert len(r.calls) == 2
        GLOBAL_FLAG = "changed"
        f(1)
        assert len(r.calls) == 3
    GLOBAL_FLAG = "initial"


GLOBAL_FLAG = "initial"


# ---------------------------------------------------------------- what is never intercepted

def _intercepted_codes(fn):
    seen = []

    def cb(frame, n):
        seen.append(frame.f_code.co_name)
        return None

    with hooked(cb):
        fn()
    return seen


def test_generators_coroutines_and_async_generators_are_not_intercepted():
    def gen():
        yield 1
        yield 2

    async def coro():
        return 3

    async def agen():
        yield 4

    def run():
        g = gen()
        assert list(g) == [1, 2]
        g2 = gen()
        next(g2)
        g2.close()
        c = coro()
        try:
            c.send(None)
        except StopIteration as e:
            assert e.value == 3

        async def collect():
            return [v async for v in agen()]
        assert asyncio.run(collect()) == [4]

    seen = _intercepted_codes(run)
    assert "run" in seen
    assert not {"gen", "coro", "agen"} & set(seen)


def test_module_and_class_bodies_are_not_intercepted():
    def run():
        exec("class K:\n    a = 1\n", {})
        exec("def fn():\n    return 1\nfn()\n", {})

    seen = _intercepted_codes(run)
    assert "fn" in seen
    assert "<module>" not in seen and "K" not in seen


def test_frames_started_by_the_callback_are_not_intercepted():
    seen = []

    def helper():
        return 1

    def cb(frame, n):
        if frame.f_code.co_filename == __file__ and frame.f_code.co_name in ("orig", "helper"):
            seen.append(frame.f_code.co_name)
        helper()  # runs normally: the hook is off while the callback runs
        return None

    with hooked(cb):
        orig(1)
    assert seen == ["orig"]


def test_entry_code_itself_is_never_intercepted():
    r = Redirect(orig, new)
    seen = []

    def cb(frame, n):
        if frame.f_code.co_name in ("orig", "new"):
            seen.append(frame.f_code.co_name)
        return r(frame, n)

    with hooked(cb):
        assert orig(1) == ("new", 1)
        assert new(2) == ("new", 2)  # called directly: its code is an entry's code
    assert seen == ["orig"]
    assert _C.is_skipped(new)


def test_recursive_function_is_intercepted_at_every_level():
    def fact(n):
        return 1 if n <= 1 else n * fact(n - 1)

    seen = []

    def cb(frame, size):
        if frame.f_code is fact.__code__:
            seen.append(frame.f_locals["n"])
        return None

    with hooked(cb):
        assert fact(5) == 120
    assert seen == [5, 4, 3, 2, 1]


_DEEP_RECURSION = """
import importlib.machinery, importlib.util, sys
loader = importlib.machinery.ExtensionFileLoader("pydynamo._C", sys.argv[1])
_C = importlib.util.module_from_spec(importlib.util.spec_from_loader("pydynamo._C", loader))
loader.exec_module(_C)

def rec(n):
    return 0 if n == 0 else 1 + rec(n - 1)

def rec_entry(n):
    return 0 if n == 0 else 1 + rec(n - 1)

def cb(frame, size):
    if frame.f_code is rec.__code__:
        return _C.CacheEntry(_C.GuardSet(), rec_entry.__code__, rec.__code__)
    return None

sys.setrecursionlimit(1_000_000)
_C.set_eval_frame(cb)
try:
    print("depth", rec(200_000))
except RecursionError:
    print("RecursionError")
_C.set_eval_frame(None)
print("hits", _C.debug_counters()["hits"] > 100)
"""


@pytest.mark.skipif(sys.version_info < (3, 12), reason="3.11 has no C recursion guard: a raised limit "
                    "plus any PEP 523 hook can overflow the C stack (shared/notes/cpython-frame-eval.md)")
def test_deep_recursion_through_the_hit_path_raises_recursion_error_instead_of_crashing():
    """Every level of the hit path nests C calls (hook, vectorcall, evaluator); 3.12+ counts them
    against the C recursion limit, whatever sys.setrecursionlimit says. In a child process, so a
    crash fails the test instead of the run."""
    import subprocess
    proc = subprocess.run([sys.executable, "-c", _DEEP_RECURSION, _C.__file__], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split("\n")[:2] == ["RecursionError", "hits True"], proc.stdout


def test_tracing_function_frames_are_not_intercepted_and_results_stay_right():
    r = Redirect(orig, new)
    traced = []

    def tracer(frame, event, arg):
        traced.append(frame.f_code.co_name)
        return None

    def run():
        return orig(1)

    sys.settrace(tracer)
    try:
        with hooked(r):
            result = run()
    finally:
        sys.settrace(None)
    assert result == ("new", 1)
    assert "new" in traced  # the entry code ran and was traced


# ---------------------------------------------------------------- failures

def test_exception_in_entry_code_propagates_with_user_traceback():
    def f(x):
        return x

    def g(x):
        return 1 / x  # the user's line

    with hooked(Redirect(f, g)):
        with pytest.raises(ZeroDivisionError) as info:
            f(0)
    frames = traceback.extract_tb(info.tb)
    assert frames[-1].name == "g" and frames[-1].line == "return 1 / x  # the user's line"
    assert any(fr.name == "test_exception_in_entry_code_propagates_with_user_traceback" for fr in frames)
    gc.collect()
    tb = info.tb
    while tb.tb_next:
        tb = tb.tb_next
    assert tb.tb_frame.f_locals == {"x": 0}  # the frame outlived its evaluation intact


def test_exception_in_callback_is_logged_and_frame_runs_eagerly(caplog):
    def cb(frame, n):
        if frame.f_code is orig.__code__:
            raise RuntimeError("compiler bug")

    with caplog.at_level(logging.WARNING, logger="pydynamo.errors"):
        with hooked(cb):
            assert orig(1) == ("orig", 1)
    assert "could not compile" in caplog.text
    assert "compiler bug" in caplog.text


def test_bad_callback_answer_is_logged_and_frame_runs_eagerly(caplog):
    with caplog.at_level(logging.WARNING, logger="pydynamo.errors"):
        with hooked(lambda frame, n: 42):
            assert orig(1) == ("orig", 1)
    assert "must return a CacheEntry" in caplog.text


def test_entry_for_another_code_is_refused(caplog):
    other_entry = _C.CacheEntry(guards(), new.__code__, (lambda x: x).__code__)
    with caplog.at_level(logging.WARNING, logger="pydynamo.errors"):
        with hooked(lambda frame, n: other_entry if frame.f_code is orig.__code__ else None):
            assert orig(1) == ("orig", 1)
    assert "must return a CacheEntry" in caplog.text


def test_frame_view_is_invalid_after_the_callback():
    kept = []

    def cb(frame, n):
        kept.append(frame)
        assert frame.f_func is orig and frame.f_globals is globals() and frame.closure is None
        assert frame.f_lineno == orig.__code__.co_firstlineno
        return None

    with hooked(cb):
        orig(1)
    with pytest.raises(RuntimeError, match="after its callback returned"):
        kept[0].f_code


def test_error_handler_answering_true_makes_the_frame_raise():
    from pydynamo import logs

    class FullGraphError(Exception):
        pass

    def cb(frame, n):
        if frame.f_code is orig.__code__:
            raise FullGraphError("cannot capture")

    arg = object()
    _C.set_error_handler(lambda exc: isinstance(exc, FullGraphError))
    try:
        with hooked(cb):
            before = sys.getrefcount(arg)
            for _ in range(100):
                with pytest.raises(FullGraphError, match="cannot capture"):
                    orig(arg)
            assert sys.getrefcount(arg) == before  # the frame that never ran was released
            assert (lambda: 7)() == 7  # other errors still run eagerly
    finally:
        _C.set_error_handler(logs.report_callback_error)
