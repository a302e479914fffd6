"""Python breadth (issue 39, mechanisms 2 and 3): C types of the standard library and tensor
idioms, each compared with eager and captured in one graph under fullgraph=True (torch.compile's
result checked in the same test where it captures the program: it refuses
combinations_with_replacement and length_hint of an iterator)."""
import itertools
import operator
import sys

import pytest
import torch

import pydynamo
from pydynamo.testing import CompileCounter, same


def fromkeys(x):
    d = dict.fromkeys(["a", "b"], 2)
    e = dict.fromkeys("xy")
    return x * d["b"] + len(d), e


def perms(x):
    return [x * a + b for a, b in itertools.permutations([1, 2, 3], 2)], list(itertools.permutations("ab"))


def combos(x):
    return ([x * a - b for a, b in itertools.combinations([1, 2, 3], 2)],
            list(itertools.combinations_with_replacement([1, 2], 2)), list(itertools.combinations([1], 3)))


def cycles(x):
    c = itertools.cycle([1, 2])
    return x * next(c) + next(c) * 10 + next(c) * 100


def length_hints(x):
    it = iter([1, 2, 3])
    next(it)
    return x + operator.length_hint(it) + operator.length_hint([1, 2]) * 10 + \
        operator.length_hint(zip([1], [2]), 7) * 100


def interned(x):
    return x * len(sys.intern("abc"))


def no_grad_decorated(x):
    @torch.no_grad()
    def inner(t):
        return t * 2

    @torch.enable_grad()
    def other(t):
        return t * 3
    y = inner(x)
    return y, y.requires_grad, other(x).requires_grad, torch.is_grad_enabled()


def c_set_grad_enabled(x):
    prev = torch.is_grad_enabled()
    torch._C._set_grad_enabled(False)
    y = x * 2
    torch._C._set_grad_enabled(prev)
    return y, y.requires_grad, (x * 3).requires_grad


def tensor_identity(x, y):
    z = x + 1
    return x is y, z is x, x is x, z is not y, z is z


CASES = [(fromkeys, 1), (perms, 1), (combos, 1), (cycles, 1), (length_hints, 1), (interned, 1),
         (no_grad_decorated, 1), (c_set_grad_enabled, 1), (tensor_identity, 1)]


def _inputs(fn):
    x = torch.randn(4, generator=torch.Generator().manual_seed(0), requires_grad=True)
    n = fn.__code__.co_argcount
    return [x] * n if fn is not tensor_identity else [x, torch.ones(4)]


@pytest.mark.parametrize("fn,graphs", CASES, ids=[c[0].__name__ for c in CASES])
def test_breadth_fullgraph(fn, graphs):
    import torch._dynamo
    pydynamo.reset()
    expected = fn(*_inputs(fn))
    cnt = CompileCounter()
    got = pydynamo.optimize(cnt, fullgraph=True)(fn)(*_inputs(fn))
    assert same(got, expected), f"{got} != {expected}"
    assert cnt.frame_count == graphs
    torch._dynamo.reset()
    try:  # torch.compile's answer, where it captures the program (it refuses some of these)
        theirs = torch.compile(fn, backend="eager", fullgraph=True)(*_inputs(fn))
    except torch._dynamo.exc.Unsupported:
        theirs = expected
    finally:
        torch._dynamo.reset()
    assert same(theirs, expected)


def test_tensor_identity_is_guarded():
    """``x is y`` between two inputs is what it was when traced: passing one tensor twice
    recompiles rather than reusing the answer."""
    cnt = CompileCounter()
    f = pydynamo.optimize(cnt, fullgraph=True)(tensor_identity)
    a, b = torch.ones(2), torch.zeros(2)
    assert f(a, b)[0] is False
    assert f(a, a)[0] is True
    assert cnt.frame_count == 2


def test_identity_of_a_view_is_refused():
    def fn(x):
        v = x.view(-1)
        return v is x
    with pytest.raises(pydynamo.exc.Unsupported, match="share memory"):
        pydynamo.optimize("eager", fullgraph=True)(fn)(torch.ones(2))


def test_permutations_negative_r_raises_like_python():
    def fn(x):
        try:
            itertools.permutations([1], -1)
        except ValueError as e:
            return x + 1, str(e)
    # raised inside the polyfill a model calls: a break there, Python raises it natively
    assert same(pydynamo.optimize("eager")(fn)(torch.ones(2)), fn(torch.ones(2)))


def test_decorated_function_restores_grad_mode_when_it_raises():
    def fn(x):
        @torch.no_grad()
        def bad(t):
            raise ValueError("no")
        try:
            bad(x)
        except ValueError:
            pass
        return x * 2, torch.is_grad_enabled()
    x = torch.ones(2, requires_grad=True)
    got = pydynamo.optimize("eager", fullgraph=True)(fn)(x)
    assert same(got, fn(x)) and got[0].requires_grad


def test_legacy_tensor_types_data_form():
    def fn(x):
        return x + torch.LongTensor([1, 2, 3, 4]) + torch.FloatTensor([[0.5, 1, 2, 3]]).sum(0), \
            torch.BoolTensor([True, False]).dtype, torch.IntTensor((1, 2)).dtype
    x = torch.zeros(4)
    assert same(pydynamo.optimize("eager", fullgraph=True)(fn)(x), fn(x))


def test_legacy_tensor_types_sizes_form_is_refused():
    def fn(x):
        return torch.FloatTensor(2, 3).shape
    with pytest.raises(pydynamo.exc.Unsupported, match="FloatTensor"):
        pydynamo.optimize("eager", fullgraph=True)(fn)(torch.zeros(1))


def test_typing_aliases_are_constants():
    import typing

    def fn(x):
        t = typing.List[int]
        o = typing.Optional[int]
        return x + 1, t, o, t.__origin__ is list, t.__args__
    cnt = CompileCounter()
    got = pydynamo.optimize(cnt, fullgraph=True)(fn)(torch.zeros(2))
    assert same(got[0], torch.ones(2)) and got[1:] == fn(torch.zeros(2))[1:] and cnt.frame_count == 1


def test_weakref_referent_is_guarded_alive():
    """A weakref read from the inputs: calling it gives the referent (guarded through the ref:
    a dead referent fails the guards and gives None, as in eager)."""
    import gc
    import weakref

    class Box:
        def __init__(self, t):
            self.t = t

    def fn(x, ref):
        obj = ref()
        return x + 1 if obj is None else x * obj.t

    cnt = CompileCounter()
    f = pydynamo.optimize(cnt, fullgraph=True)(fn)
    box = Box(3)
    ref = weakref.ref(box)
    assert same(f(torch.ones(2), ref), torch.ones(2) * 3)
    box.t = 5
    assert same(f(torch.ones(2), ref), torch.ones(2) * 5)
    del box
    gc.collect()
    assert same(f(torch.ones(2), ref), torch.ones(2) + 1)
    assert cnt.frame_count == 3


def test_class_dict_reads_are_guarded():
    class C:
        @classmethod
        def make(cls, t):
            return t * 2

    def fn(x, obj):
        d = type(obj).__dict__
        y = d["make"].__func__(C, x) if "make" in d else x
        return y + (1 if d.get("extra") is None else d.get("extra"))

    cnt = CompileCounter()
    f = pydynamo.optimize(cnt, fullgraph=True)(fn)
    x = torch.ones(2)
    assert same(f(x, C()), fn(x, C()))
    C.extra = 5  # a key added to the class's dict: the absence read is guarded
    assert same(f(x, C()), fn(x, C())) and cnt.frame_count == 2
    del C.make
    assert same(f(x, C()), fn(x, C())) and cnt.frame_count == 3
