"""Reference counts, the thread's data stack, cache lifetime and reset()."""
import gc
import sys
import weakref

from pydynamo import _C
from c_support import Redirect, guards, hooked


def orig(x, *args, k=1, **kw):
    return x


def new(x, *args, k=1, **kw):
    return x


class Arg:
    pass


def _int_guard(frame):
    return guards(((("L", 0),), "TYPE_MATCH", type(frame.f_locals["x"]), "type(L['x'])"))


def _live():
    gc.collect()
    return len(gc.get_objects())


def test_100k_hits_and_misses_leak_nothing():
    arg = Arg()
    r = Redirect(orig, new, _int_guard)
    refs = lambda: (sys.getrefcount(arg), sys.getrefcount(orig.__code__), sys.getrefcount(new.__code__))  # noqa
    with hooked(r):
        orig(arg, k=2)  # compile once (entry guarded on type Arg)
        before, live, top = refs(), _live(), _C.debug_counters()["datastack_top"]
        for _ in range(25_000):
            orig(arg, k=2)           # hit, keyword-only argument
            orig(arg, 1, 2, z=3)     # hit, *args and **kwargs
        with hooked(False):          # run-only: guard misses run the original
            for _ in range(25_000):
                orig(1.5)
                orig("s", 1, z=2)
        after, live_after, top_after = refs(), _live(), _C.debug_counters()["datastack_top"]
    assert after == before
    assert top_after == top
    assert live_after - live < 50  # a few objects may appear in the gc lists; 100k calls would show
    assert _C.cache_size(orig) == 1


def test_callback_misses_leak_nothing():
    arg = Arg()
    asked = [0]

    def cb(frame, n):
        asked[0] += 1
        return None

    with hooked(cb):
        orig(arg)
        before, live = sys.getrefcount(arg), _live()
        for _ in range(20_000):
            orig(arg, k=3)
        after, live_after = sys.getrefcount(arg), _live()
    assert asked[0] >= 20_001
    assert after == before and live_after - live < 50


def test_exceptions_on_the_hit_path_leak_nothing():
    def f(x):
        return x

    def g(x):
        raise ValueError(x)

    arg = Arg()
    with hooked(Redirect(f, g)):
        for _ in range(2):
            try:
                f(arg)
            except ValueError:
                pass
        before, top = sys.getrefcount(arg), _C.debug_counters()["datastack_top"]
        for _ in range(5000):
            try:
                f(arg)
            except ValueError:
                pass
        assert sys.getrefcount(arg) == before
        assert _C.debug_counters()["datastack_top"] == top


def _make_function():
    ns = {}
    exec("def f(x):\n    return x\n", ns)
    return ns["f"]


def test_cache_dies_with_its_code_and_holds_no_function():
    f, g = _make_function(), _make_function()
    fn_ref, code_ref = weakref.ref(f), weakref.ref(f.__code__)
    gc.collect()
    live_states = _C.debug_counters()["live_extra_states"]
    with hooked(Redirect(f, g, _int_guard)):
        f(1)
    assert _C.cache_size(f) == 1
    assert _C.debug_counters()["live_extra_states"] == live_states + 2  # f's cache + g's code's mark
    del f
    gc.collect()
    assert fn_ref() is None and code_ref() is None  # nothing in the cache kept them alive
    assert _C.debug_counters()["live_extra_states"] == live_states + 1  # f's state was freed
    del g
    gc.collect()
    assert _C.debug_counters()["live_extra_states"] == live_states


def test_reset_drops_every_entry_and_frees_guarded_objects():
    obj = Arg()
    obj_ref = weakref.ref(obj)

    def make(frame):
        return guards(((("L", 0),), "ID_MATCH", frame.f_locals["x"], "L['x'] is obj"),
                      ((), "PREDICATE", lambda: obj_ref() is not None, "holds nothing strongly"))

    with hooked(Redirect(orig, new, make)):
        orig(obj)
    entry = _C.get_cache_entries(orig)
    assert len(entry) == 1
    del entry
    _C.reset()
    assert _C.cache_size(orig) == 0
    del obj
    gc.collect()
    assert obj_ref() is None
