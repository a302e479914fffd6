"""Regression tests for wrong answers found by trying pydynamo as a user would (issues 17, 24).

Each test compiles a small program, calls it, changes the state it depends on, and calls it
again: every call must give what eager Python gives. The classes each one stands for:

- absence: a read that found nothing (``getattr`` default, ``hasattr``) is guarded as absent;
- call forms: a modelled builtin or method takes exactly the real one's argument forms or
  refuses the call, never dropping an argument;
- lifetime: compiled entries hold user objects weakly; an entry whose object died is dropped;
- placement: generated code reads a value exactly where the trace read it;
- exceptions: a graph break never lets an exception escape a user's handler; a break inside a
  ``with`` block restores the grad mode when the native instruction raises;
- exact types: iterators and namedtuple subclasses keep their real types;
- literals: constants with no literal form never reach a graph's code as text.
"""
import collections
import gc
import traceback
import weakref
from typing import NamedTuple

import pytest
import torch

import pydynamo
from pydynamo.testing import CompileCounter


class Obj:
    pass


# ---- absence -----------------------------------------------------------------------------------

def test_getattr_default_guards_absence():
    o = Obj()

    @pydynamo.optimize("eager")
    def f(x, o):
        return x + 1 if getattr(o, "flag", False) else x - 1

    x = torch.ones(2)
    assert f(x, o)[0] == 0
    o.flag = True
    assert f(x, o)[0] == 2
    del o.flag
    assert f(x, o)[0] == 0


def test_hasattr_guards_presence_and_absence():
    o = Obj()

    @pydynamo.optimize("eager")
    def f(x, o):
        return x + 1 if hasattr(o, "flag") else x - 1

    x = torch.ones(2)
    assert f(x, o)[0] == 0
    o.flag = 1
    assert f(x, o)[0] == 2
    del o.flag
    assert f(x, o)[0] == 0


def test_hasattr_on_class_and_module_attribute():
    class C:
        pass
    import types
    mod = types.ModuleType("fake_mod")

    @pydynamo.optimize("eager")
    def f(x, c, m):
        return x + (1 if hasattr(c, "k") else 0) + (10 if hasattr(m, "k") else 0)

    x = torch.zeros(1)
    assert f(x, C, mod)[0] == 0
    C.k = 1
    assert f(x, C, mod)[0] == 1
    mod.k = 2
    assert f(x, C, mod)[0] == 11


def test_hasattr_sees_a_store_made_in_the_trace():
    @pydynamo.optimize("eager")
    def f(x, o):
        o.flag = 3
        return x + (1 if hasattr(o, "flag") else 0)

    o = Obj()
    assert f(torch.zeros(1), o)[0] == 1 and o.flag == 3


def test_hasattr_on_namedtuple_field():
    P = collections.namedtuple("P", "a b")

    @pydynamo.optimize("eager")
    def f(x, p):
        return x + 1 if hasattr(p, "a") and not hasattr(p, "c") else x - 1

    assert f(torch.ones(2), P(1, 2))[0] == 2


# ---- call forms --------------------------------------------------------------------------------

def test_builtin_keywords_it_does_not_take_are_refused():
    @pydynamo.optimize("eager")
    def f(x, o):
        return x + getattr(o, name="a")

    o = Obj()
    o.a = 1
    with pytest.raises(TypeError):
        f(torch.ones(1), o)


def test_list_and_dict_method_forms():
    @pydynamo.optimize("eager")
    def f(x, lst, d):
        out = [lst.index(2), d.get("b", 7), d.pop("a"), lst.pop(0)]
        return x + sum(out)

    lst, d = [1, 2, 3], {"a": 1}
    assert f(torch.zeros(1), lst, d)[0] == 1 + 7 + 1 + 1
    assert lst == [2, 3] and d == {}

    @pydynamo.optimize("eager")
    def g(x, d):
        return x + d.len()  # not a dict method: AttributeError as in Python

    with pytest.raises(AttributeError):
        g(torch.zeros(1), {"a": 1})


# ---- lifetime ----------------------------------------------------------------------------------

@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_compiled_module_and_inputs_are_freed(backend):
    m = torch.nn.Linear(2, 2)
    refs = [weakref.ref(m), weakref.ref(m.weight)]
    opt = pydynamo.optimize(backend)(m)
    x = torch.ones(1, 2)
    refs.append(weakref.ref(x))
    opt(x)
    del m, opt, x
    gc.collect()
    assert all(r() is None for r in refs)


def test_entries_of_dead_objects_do_not_fill_the_cache():
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(2, 2)

        def forward(self, x):
            return self.lin(x) + 1

    cnt = CompileCounter()
    x = torch.ones(1, 2)
    for _ in range(pydynamo.config.cache_size_limit + 3):
        m = Net()
        assert torch.equal(pydynamo.optimize(cnt)(m)(x), m(x))
        del m
        gc.collect()
    from pydynamo import _C
    assert _C.cache_size(Net.forward.__code__) <= 1
    assert cnt.frame_count == 1  # modules are guarded by class: one entry serves every new Net


# ---- placement ---------------------------------------------------------------------------------

def test_staticmethod_of_a_torch_class_is_read_where_it_lives():
    @pydynamo.optimize("eager")
    def f(x):
        return x + torch.nn.Transformer.generate_square_subsequent_mask(4)

    x = torch.ones(4, 4)
    assert torch.equal(f(x), x + torch.nn.Transformer.generate_square_subsequent_mask(4))


def test_transformer_with_a_causal_mask():
    torch.manual_seed(0)
    m = torch.nn.Transformer(d_model=8, nhead=2, num_encoder_layers=1, num_decoder_layers=1,
                             dim_feedforward=16, dropout=0.0)
    src, tgt = torch.randn(5, 2, 8), torch.randn(4, 2, 8)

    def f(src, tgt):
        mask = torch.nn.Transformer.generate_square_subsequent_mask(4)
        return m(src, tgt, tgt_mask=mask)

    torch.testing.assert_close(pydynamo.optimize("eager")(f)(src, tgt), f(src, tgt))


# ---- exceptions --------------------------------------------------------------------------------

def test_exception_of_a_break_is_caught_by_the_users_handler():
    @pydynamo.optimize("eager")
    def f(x):
        try:
            v = {"a": 1}["b"]
        except KeyError:
            v = 2
        return x + v

    assert f(torch.ones(1))[0] == 3


def test_raise_inside_try_except_finally():
    @pydynamo.optimize("eager")
    def f(x):
        y = x + 1
        try:
            raise ValueError("boom")
        except ValueError as e:
            y = y + len(str(e))
        finally:
            y = y * 2
        return y

    assert f(torch.ones(1))[0] == 12


def test_callee_exception_reaches_the_callers_handler():
    def g(x):
        raise KeyError("k")

    @pydynamo.optimize("eager")
    def f(x):
        try:
            return g(x)
        except KeyError:
            return x - 1

    assert f(torch.ones(1))[0] == 0


def test_exception_in_a_no_grad_block_restores_grad_mode():
    @pydynamo.optimize("eager")
    def f(x, d):
        y = x * 2
        with torch.no_grad():
            z = y + 1
            v = d["b"]
        return z + v

    with pytest.raises(KeyError):
        f(torch.ones(1, requires_grad=True), {"a": 1})
    assert torch.is_grad_enabled()
    r = f(torch.ones(1, requires_grad=True), {"a": 1, "b": 2})
    assert r[0] == 5 and not r.requires_grad


def test_uncaught_exception_has_the_users_message_and_line():
    @pydynamo.optimize("eager")
    def f(x):
        y = x + 1
        return y + [1, 2].index(3)  # the line that raises

    with pytest.raises(ValueError, match="3 is not in list") as info:
        f(torch.ones(1))
    lines = [fr.line for fr in traceback.extract_tb(info.value.__traceback__)]
    assert any("the line that raises" in (line or "") for line in lines)


# ---- exact types -------------------------------------------------------------------------------

@pytest.mark.parametrize("make", [
    lambda: iter(range(3)), lambda: iter([1, 2]), lambda: iter((1, 2)), lambda: iter({"a": 1}),
    lambda: iter("ab"), lambda: zip([1], [2]), lambda: enumerate([1]), lambda: reversed([1, 2]),
    lambda: reversed((1, 2)), lambda: reversed(range(2)), lambda: iter({"a": 1}.items()),
], ids=["range", "list", "tuple", "dict", "str", "zip", "enumerate", "reversed_list",
        "reversed_tuple", "reversed_range", "dict_items"])
def test_iterator_types_are_real(make):
    expected = type(make())

    @pydynamo.optimize("eager")
    def f(x):
        return x + (1 if type(make()) is expected else 3)

    assert f(torch.ones(1))[0] == 2


class NT(NamedTuple):
    a: int
    b: int = 5


class NT2(NT):
    __slots__ = ()

    def __add__(self, other):
        return NT2(self.a + other.a, self.b + other.b)


def test_namedtuple_subclass_operator_and_construction():
    cnt = CompileCounter()

    @pydynamo.optimize(cnt)
    def f(x, p, q):
        r = p + q
        return x + r.a, r, NT(3), r == NT2(4, 6)

    out = f(torch.ones(1), NT2(1, 2), NT2(3, 4))
    assert type(out[1]) is NT2 and out[1] == (4, 6)
    assert type(out[2]) is NT and out[2] == (3, 5)
    assert out[0][0] == 5 and out[3] is True
    assert cnt.frame_count == 1


# ---- literals ----------------------------------------------------------------------------------

def test_tensor_type_class_argument():
    cnt = CompileCounter()

    @pydynamo.optimize(cnt, fullgraph=True)
    def f(a, b):
        return b.type(a.type(torch.HalfTensor).type()), a.type(torch.DoubleTensor)

    h, d = f(torch.ones(2), torch.ones(2))
    assert h.dtype == torch.float16 and d.dtype == torch.float64 and cnt.frame_count == 1


# ---- aliasing of mutable objects ---------------------------------------------------------------

def test_list_mutated_through_an_alias():
    @pydynamo.optimize("eager")
    def f(x, a, b):
        a.append(1)
        return x + len(b)

    x = torch.zeros(1)
    assert f(x, [], [])[0] == 0
    shared = []
    assert f(x, shared, shared)[0] == 1
    assert f(x, [], [])[0] == 0


def test_one_list_reached_by_two_paths():
    @pydynamo.optimize("eager")
    def f(x, d, lst):
        d["k"].append(1)
        return x + len(lst), lst

    x = torch.zeros(1)
    lst = []
    out, ret = f(x, {"k": lst}, lst)
    assert out[0] == 1 and ret is lst and lst == [1]
    other = []
    out, ret = f(x, {"k": []}, other)
    assert out[0] == 0 and ret is other and other == []


def test_attribute_store_seen_through_an_alias():
    @pydynamo.optimize("eager")
    def f(x, o1, o2):
        o1.v = 5
        return x + o2.v

    a, b = Obj(), Obj()
    a.v = b.v = 1
    assert f(torch.zeros(1), a, b)[0] == 1
    assert f(torch.zeros(1), a, a)[0] == 5


# ---- modelled methods of torch classes ---------------------------------------------------------

def test_container_subclass_methods_are_its_own():
    class Rev(torch.nn.ModuleList):
        def __getitem__(self, i):
            return list(self._modules.values())[len(self._modules) - 1 - i]

        def __len__(self):
            return 1

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = Rev([torch.nn.Linear(2, 2), torch.nn.Identity()])

        def forward(self, x):
            return self.layers[0](x), len(self.layers)

    m = Net()
    x = torch.ones(1, 2)
    out, n = pydynamo.optimize("eager")(m)(x)
    assert torch.equal(out, m(x)[0]) and n == 1


def test_container_lacks_a_method_it_does_not_have():
    m = torch.nn.ModuleList([torch.nn.Identity()])

    @pydynamo.optimize("eager")
    def f(x):
        return x, m.keys()

    with pytest.raises(AttributeError):
        f(torch.ones(1))


def test_grad_mode_context_types():
    @pydynamo.optimize("eager")
    def f(x):
        return x + (type(torch.enable_grad()) is torch.enable_grad) + (type(torch.no_grad()) is torch.no_grad)

    assert f(torch.zeros(1))[0] == 2


def test_isinstance_follows_the_metaclass():
    import collections.abc
    import typing

    @typing.runtime_checkable
    class HasFoo(typing.Protocol):
        def foo(self): ...

    class A:
        def foo(self):
            return 1

    def f(x, p, d):
        return (x + isinstance(x, torch.nn.Parameter) + 2 * isinstance(d, collections.abc.Mapping)
                + 4 * isinstance(p, HasFoo) + 8 * isinstance(x, int | torch.Tensor))

    opt = pydynamo.optimize("eager")(f)
    for x in (torch.ones(1), torch.nn.Parameter(torch.ones(1))):
        assert torch.equal(opt(x, A(), {}), f(x, A(), {}))


# ---- found by tools/fuzz.py --------------------------------------------------------------------

class Klass:
    k = 2


def test_class_attribute_read_through_type_is_guarded():
    o = Klass()

    @pydynamo.optimize("eager")
    def f(x):
        return x + type(o).k

    assert f(torch.zeros(1))[0] == 2
    Klass.k = 5
    try:
        assert f(torch.zeros(1))[0] == 5
    finally:
        Klass.k = 2


def test_identity_of_two_equal_lists_is_guarded():
    shared = []
    box = {"v": []}

    @pydynamo.optimize("eager")
    def f(x, c):
        return c["v"] is shared

    assert f(torch.ones(1), box) is False
    box["v"] = shared
    assert f(torch.ones(1), box) is True


def test_stride_of_a_size_one_dimension_matches_eager():
    x = torch.randn(1, 4).transpose(0, -1)

    def f(x):
        return (x + 1).stride(), (x + 1).movedim(0, -1).stride()

    assert pydynamo.optimize("eager")(f)(x) == f(x)


@pydynamo.disable
def _grad_mode():
    return torch.is_grad_enabled()


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_set_grad_enabled_outlives_the_frame(backend):
    @pydynamo.optimize(backend)
    def f(x):
        torch.set_grad_enabled(False)
        y = x * 2
        torch.set_grad_enabled(True)
        return y

    prev = torch.is_grad_enabled()
    try:
        torch.set_grad_enabled(False)
        f(torch.ones(2))
        assert _grad_mode()
    finally:
        torch.set_grad_enabled(prev)


def test_list_slice_with_a_float_raises_as_in_python():
    @pydynamo.optimize("eager")
    def f(x, lst):
        return x, lst[0.5:]

    with pytest.raises(TypeError):
        f(torch.ones(1), [1, 2])


def test_reset_frees_shape_envs():
    import torch.fx.experimental.symbolic_shapes as ss

    def shape_envs():
        gc.collect()
        gc.collect()  # the first pass runs finalizers that release the rest
        return {id(o) for o in gc.get_objects() if isinstance(o, ss.ShapeEnv)}

    @pydynamo.optimize("eager", dynamic=True)
    def f(x):
        return x * 2

    before = shape_envs()  # others' (a torch.compile run earlier in the process) may live on
    f(torch.ones(3))
    f(torch.ones(4))
    assert shape_envs() - before
    pydynamo.reset()
    assert not shape_envs() - before


def test_grad_mode_set_by_a_call_survives_an_exception_at_a_break():
    import pydynamo as _pd

    def set_then_raise(x):
        torch.set_grad_enabled(True)
        x = x + 1
        raise TypeError("boom")

    def with_then_raise(x):
        torch.set_grad_enabled(False)
        with torch.enable_grad():
            x = x + 1
            raise TypeError("boom")
    for fn, start in ((set_then_raise, False), (with_then_raise, True)):
        modes = []
        for f in (fn, _pd.compile(fn, backend="eager")):
            torch.set_grad_enabled(start)
            try:
                f(torch.ones(2))
            except TypeError:
                pass
            modes.append(torch.is_grad_enabled())
        torch.set_grad_enabled(True)
        assert modes[0] == modes[1], (fn.__name__, modes)


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_input_changed_in_place_while_another_input_views_it(backend):
    """Two distinct tensor objects may share memory (``x`` and ``x[:]``): a functionalized graph
    traced with them apart writes ``x`` back after reading the old ``y``. The memory overlap of
    inputs the graph changes is guarded, so the shared case compiles anew."""
    def f(x, y):
        x.add_(1)
        return y * 2

    cf = pydynamo.optimize(backend)(f)
    pydynamo.reset()
    x, y = torch.zeros(3), torch.zeros(3)
    assert torch.equal(cf(x, y), torch.zeros(3)) and torch.equal(x, torch.ones(3))
    x = torch.zeros(3)
    assert torch.equal(cf(x, x[:]), torch.full((3,), 2.0))
    x = torch.zeros(4)
    assert torch.equal(cf(x[:3], x[1:]), torch.tensor([2.0, 2.0, 0.0]))  # partial overlap
    assert torch.equal(cf(torch.zeros(3), torch.ones(3)), torch.full((3,), 2.0))
    x = torch.zeros(3)
    assert torch.equal(cf(x, x), torch.full((3,), 2.0))  # one object twice: ALIASING's case


def test_overlapping_inputs_changed_in_place_break_with_a_reason():
    def f(x, y):
        x.mul_(2)
        return y + 1

    x = torch.ones(4)
    report = pydynamo.explain(f)(x, x[1:])
    assert any("share memory" in str(b) for b in report.break_reasons)
    x = torch.ones(4)
    assert torch.equal(pydynamo.optimize("aot_eager")(f)(x[:3], x[1:]), torch.tensor([3.0, 3.0, 2.0]))
