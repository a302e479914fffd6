"""Python breadth, second part: threading.local attributes, numpy.dtype constants, typing alias
equality, ``cls.__subclasses__()`` and ``weakref.ref`` made in the trace. Each compared with
eager and captured in one graph under fullgraph=True (and with torch.compile's result, which
captures all of these); the values read from outside the frame are guarded, so a changed one
recompiles and gives the new answer."""
import gc
import threading
import typing
import weakref

import numpy as np
import pytest
import torch

import pydynamo
from pydynamo.testing import CompileCounter, same

tl = threading.local()
tl.scale = 3


class Base:
    pass


class Child(Base):
    pass


class Box:
    def __init__(self, t):
        self.t = t


def thread_local_read(x):
    return x * tl.scale + getattr(tl, "offset", 10), hasattr(tl, "scale"), hasattr(tl, "nothing")


def dtype_constants(x):
    d = np.dtype("float32")
    e = np.dtype(np.int64)
    f = np.dtype(d)
    return x * d.itemsize + e.itemsize, d.name, e.kind, e.name, f is d, d == np.float32, \
        np.dtype(int) == np.int64, d


LIST_INT, LIST_INT_TOO, INT_OR_NONE = list[int], list[int], int | None


def typing_equality(x):
    same_list = typing.List[int] == typing.List[int]
    optional = typing.Optional[int] == typing.Union[int, None]
    differ = typing.List[int] != typing.List[str]
    other = typing.Dict[str, int] == typing.Dict[str, float]
    union_order = typing.Union[int, str] == typing.Union[str, int]
    builtin = LIST_INT == LIST_INT_TOO and INT_OR_NONE == typing.Optional[int]
    mixed = typing.List[int] == LIST_INT
    return x + 1, same_list, optional, differ, other, union_order, builtin, mixed, typing.List[int] == 3


def subclasses(x):
    subs = Base.__subclasses__()
    return x * len(subs), subs, [c.__name__ for c in subs], Child.__subclasses__()


def weakref_of_input(x, o):
    r = weakref.ref(o)
    return x * r().t, r() is o, r() is None


def weakref_of_new_object(x, o):
    b = Box(x * 2)
    r = weakref.ref(b)
    return r().t + 1, r() is b, callable(r)


CASES = [thread_local_read, dtype_constants, typing_equality, subclasses, weakref_of_input,
         weakref_of_new_object]
_BOX = Box(4)


def _inputs(fn):
    x = torch.arange(4.0)
    return [x, _BOX][:fn.__code__.co_argcount]


@pytest.mark.parametrize("fn", CASES, ids=[c.__name__ for c in CASES])
def test_breadth_fullgraph(fn):
    import torch._dynamo
    pydynamo.reset()
    expected = fn(*_inputs(fn))
    cnt = CompileCounter()
    got = pydynamo.optimize(cnt, fullgraph=True)(fn)(*_inputs(fn))
    assert same(got, expected), f"{got} != {expected}"
    assert cnt.frame_count == 1
    torch._dynamo.reset()
    try:  # torch.compile's answer, where it captures the program
        theirs = torch.compile(fn, backend="eager", fullgraph=True)(*_inputs(fn))
    except torch._dynamo.exc.Unsupported:
        theirs = expected
    finally:
        torch._dynamo.reset()
    assert same(theirs, expected)


# ---- threading.local --------------------------------------------------------------------------

def test_thread_local_value_is_guarded():
    local = threading.local()
    local.scale = 3

    def fn(x):
        return x * local.scale

    cnt = CompileCounter()
    f = pydynamo.optimize(cnt, fullgraph=True)(fn)
    x = torch.ones(2)
    assert same(f(x), x * 3)
    local.scale = 5
    assert same(f(x), x * 5) and cnt.frame_count == 2
    assert same(f(x), x * 5) and cnt.frame_count == 2


def test_thread_local_reads_the_running_threads_value():
    """The guards run in the thread that runs the frame: another thread's own value (or its
    absence, an AttributeError as in Python) is never the first thread's."""
    local = threading.local()
    local.scale = 3

    def fn(x):
        return x * local.scale

    cnt = CompileCounter()
    f = pydynamo.optimize(cnt)(fn)  # (not fullgraph: the AttributeError leaves the frame)
    x = torch.ones(2)
    assert same(f(x), x * 3)
    results = {}

    def other(value):
        if value is not None:
            local.scale = value
        try:
            results[value] = f(x)
        except AttributeError as e:
            results[value] = e

    for value in (7, None):
        t = threading.Thread(target=other, args=(value,))
        t.start()
        t.join()
    assert same(results[7], x * 7)
    assert isinstance(results[None], AttributeError) and "scale" in str(results[None])
    assert same(f(x), x * 3)  # this thread's value: still 3


def test_thread_local_absent_attribute_raises_and_is_guarded():
    local = threading.local()

    def fn(x):
        try:
            return x * local.extra
        except AttributeError as e:
            return x + 1, str(e)

    cnt = CompileCounter()
    f = pydynamo.optimize(cnt, fullgraph=True)(fn)
    x = torch.ones(2)
    assert same(f(x), fn(x))
    local.extra = 4
    assert same(f(x), x * 4) and cnt.frame_count == 2


def test_thread_local_store_is_refused():
    local = threading.local()

    def fn(x):
        local.scale = 2
        return x * local.scale
    with pytest.raises(pydynamo.exc.Unsupported):
        pydynamo.optimize("eager", fullgraph=True)(fn)(torch.ones(2))


def test_thread_local_subclass_is_refused():
    class MyLocal(threading.local):
        pass
    local = MyLocal()
    local.scale = 2

    def fn(x):
        return x * local.scale
    with pytest.raises(pydynamo.exc.Unsupported):
        pydynamo.optimize("eager", fullgraph=True)(fn)(torch.ones(2))


# ---- numpy.dtype ------------------------------------------------------------------------------

def test_dtype_error_raises_like_python():
    def fn(x):
        try:
            np.dtype("no such type")
        except TypeError as e:
            return x + 1, str(e)
    x = torch.ones(2)
    assert same(pydynamo.optimize("eager", fullgraph=True)(fn)(x), fn(x))


@pytest.mark.parametrize("spec", [">f4", [("a", "f4")], "U5"], ids=["byteswapped", "structured", "str"])
def test_dtype_not_builtin_native_is_refused(spec):
    def fn(x):
        return x * np.dtype(spec).itemsize
    with pytest.raises(pydynamo.exc.Unsupported):
        pydynamo.optimize("eager", fullgraph=True)(fn)(torch.ones(2))


def test_dtype_of_an_object_with_a_dtype_attribute_is_refused():
    class HasDtype:
        dtype = np.dtype("float32")

    def fn(x, o):
        return x * np.dtype(o).itemsize
    with pytest.raises(pydynamo.exc.Unsupported):
        pydynamo.optimize("eager", fullgraph=True)(fn)(torch.ones(2), HasDtype())


# ---- typing -----------------------------------------------------------------------------------

def test_typing_comparison_through_a_metaclass_eq_is_refused():
    class Meta(type):
        def __eq__(cls, other):
            return True

        __hash__ = type.__hash__

    class C(metaclass=Meta):
        pass

    def fn(x):
        return x + 1, typing.List[C] == typing.List[int]
    with pytest.raises(pydynamo.exc.Unsupported, match="may run code"):
        pydynamo.optimize("eager", fullgraph=True)(fn)(torch.ones(2))


# ---- __subclasses__ ---------------------------------------------------------------------------

def test_subclasses_are_guarded():
    class Root:
        pass

    class A(Root):
        pass

    def fn(x):
        return x * len(Root.__subclasses__()), Root.__subclasses__()

    cnt = CompileCounter()
    f = pydynamo.optimize(cnt, fullgraph=True)(fn)
    x = torch.ones(2)
    got = f(x)
    assert same(got, fn(x)) and got[1] == [A]
    assert same(f(x), fn(x)) and cnt.frame_count == 1

    class B(Root):  # a new subclass: the guard fails, the trace sees it
        pass
    got = f(x)
    assert same(got, (x * 2, [A, B])) and cnt.frame_count == 2
    del B, got
    gc.collect()  # collected: it leaves the list, and the first entry serves again
    assert same(f(x), (x * 1, [A])) and cnt.frame_count == 2


def test_subclasses_overridden_on_the_class_is_not_types():
    class Root:
        @classmethod
        def __subclasses__(cls):
            return ["mine"]

    def fn(x):
        return x + 1, Root.__subclasses__()
    x = torch.ones(2)
    assert same(pydynamo.optimize("eager", fullgraph=True)(fn)(x), fn(x))


# ---- weakref.ref made in the trace ------------------------------------------------------------

def test_weakref_of_an_input_returned_is_rebuilt():
    def fn(x, o):
        return x + 1, weakref.ref(o)
    o = Box(2)
    got = pydynamo.optimize("eager", fullgraph=True)(fn)(torch.ones(2), o)
    assert type(got[1]) is weakref.ref and got[1]() is o and got[1] is weakref.ref(o)


def test_weakref_across_a_graph_break():
    def fn(x, o):
        r = weakref.ref(o)
        y = x * 2
        pydynamo.graph_break()
        return y * r().t, r() is o
    cnt = CompileCounter()
    o = Box(3)
    assert same(pydynamo.optimize(cnt)(fn)(torch.ones(2), o), fn(torch.ones(2), o))
    assert cnt.frame_count == 2


def test_weakref_whose_referent_may_be_dead_is_refused():
    def temporary(x):
        return x, weakref.ref(Box(1))()  # None in CPython: the Box is freed at once

    def deleted(x):
        b = Box(1)
        r = weakref.ref(b)
        del b
        return x, r()

    def returned(x):
        b = Box(x)
        return x + 1, weakref.ref(b)
    for fn in (temporary, deleted, returned):
        with pytest.raises(pydynamo.exc.Unsupported):
            pydynamo.optimize("eager", fullgraph=True)(fn)(torch.ones(2))
    # without fullgraph, Python runs what the trace refuses
    assert same(pydynamo.optimize("eager")(temporary)(torch.ones(2)), (torch.ones(2), None))


def test_weakref_callback_is_refused():
    def fn(x, o):
        return x, weakref.ref(o, lambda r: None)() is o
    with pytest.raises(pydynamo.exc.Unsupported, match="callback"):
        pydynamo.optimize("eager", fullgraph=True)(fn)(torch.ones(2), Box(1))


def test_weakref_of_an_object_without_weakref_slot_raises_like_python():
    class Slotted:
        __slots__ = ("t",)

    def fn(x, o):
        try:
            weakref.ref(o)
        except TypeError as e:
            return x + 1, str(e)
    x, o = torch.ones(2), Slotted()
    assert same(pydynamo.optimize("eager", fullgraph=True)(fn)(x, o), fn(x, o))


def test_two_weakrefs_identity_is_refused():
    def fn(x, o):
        return x, weakref.ref(o) is weakref.ref(o)  # CPython shares a plain ref: not modelled
    with pytest.raises(pydynamo.exc.Unsupported):
        pydynamo.optimize("eager", fullgraph=True)(fn)(torch.ones(2), Box(1))
