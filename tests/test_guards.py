"""Guards: what each input produces, and that a change recompiles exactly once."""
import pytest
import torch
import torch.nn as nn

from _compile import compile_fn, first_failure
from pydynamo.guards import Check, GuardBuilder, build_guard_set
from pydynamo.source import AttrSource, GetItemSource, GlobalSource, LocalSource
from pydynamo.testing import same

x3 = torch.randn(3)
FLAG = True
SCALE = 2


def recompiles(fn, first, second):
    """Call compiled fn on ``first`` twice then ``second``: return compile count and results."""
    c = compile_fn(fn)
    for args in (first, first, second, second, first):
        assert same(c(*args), fn(*args))
    return c


def test_source_names_and_steps():
    src = AttrSource(AttrSource(LocalSource("self", 0), "lin"), "weight")
    assert src.name() == "L['self'].lin.weight"
    assert src.steps() == (("L", 0), ("a", "lin"), ("a", "weight"))
    assert src.graph_input_name() == "L_self_lin_weight"
    g = GetItemSource(GlobalSource("cfg"), "k")
    assert g.name() == "G['cfg']['k']" and g.steps() == (("G", "cfg"), ("i", "k"))


def test_guard_builder_kinds_and_dedup():
    gb = GuardBuilder()
    src = LocalSource("x", 0)
    gb.EQUALS_MATCH(src, 3)
    gb.EQUALS_MATCH(src, 3)
    gb.TYPE_MATCH(src, 3)
    gb.EQUALS_MATCH(LocalSource("d", 1), torch.device("cpu"))
    assert [c.kind for c in gb.checks] == ["EQUALS_MATCH", "TYPE_MATCH", "TYPE_MATCH", "PREDICATE"]
    assert isinstance(gb.checks[0], Check) and gb.checks[0].text == "L['x'] == 3"


def test_tensor_guard_fields():
    c = compile_fn(lambda x: x + 1)
    c(x3)
    (check,) = [k for k in c.checks if k.kind == "TENSOR_MATCH"]
    assert check.steps == (("L", 0),)
    # ..., requires_grad, sizes, strides, then the inference, conjugate and negative bits
    assert check.value == (torch.Tensor, torch.float32, torch.device("cpu"), torch.strided, False, (3,), (1,),
                           False, False, False)


def test_global_state_guards_present():
    c = compile_fn(lambda x: x + 1)
    c(x3)
    texts = c.guard_texts()
    assert "torch.is_grad_enabled() == True" in texts
    assert "torch.get_default_dtype() == torch.float32" in texts
    assert all(k.steps == () for k in c.checks if k.kind == "PREDICATE" and "torch." in k.text)


def test_recompile_on_dtype_change():
    c = recompiles(lambda x: x * 2, (x3,), (x3.double(),))
    assert c.compiles == 2 and c.backend.frame_count == 2


def test_recompile_on_shape_change():
    c = recompiles(lambda x: x * 2, (x3,), (torch.randn(4),))
    assert c.compiles == 2


def test_recompile_on_requires_grad_change():
    c = recompiles(lambda x: x * 2, (x3,), (x3.clone().requires_grad_(),))
    assert c.compiles == 2


def test_recompile_on_constant_argument():
    c = recompiles(lambda x, n: x * n, (x3, 2), (x3, 3))
    assert c.compiles == 2
    assert "L['n'] == 3" in c.guard_texts() and "L['n'] == 2" in [k.text for k in c.entries[1][0]]


def test_int_and_float_argument_are_different():
    c = recompiles(lambda x, n: x * n, (x3, 2), (x3, 2.0))
    assert c.compiles == 2


def test_recompile_on_global_change():
    def fn(x):
        return x * SCALE if FLAG else x
    c = compile_fn(fn)
    assert same(c(x3), fn(x3))
    assert "G['FLAG'] == True" in c.guard_texts() and "G['SCALE'] == 2" in c.guard_texts()
    global SCALE
    old = SCALE
    try:
        SCALE = 5
        assert same(c(x3), x3 * 5)
        assert c.compiles == 2
        assert same(c(x3), x3 * 5) and c.compiles == 2
    finally:
        SCALE = old


def test_recompile_on_module_attribute_change():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.eps = 1.0

        def forward(self, x):
            return x + self.eps
    m = M()
    c = compile_fn(m.forward)
    assert same(c(x3), x3 + 1.0)
    m.eps = 2.0
    assert same(c(x3), x3 + 2.0)
    m.train(False)
    assert same(c(x3), x3 + 2.0)
    assert c.compiles == 2  # self.training was never read, so eval() does not recompile


def test_recompile_on_training_flag():
    m = nn.Sequential(nn.Dropout(0.5))
    c = compile_fn(m.forward)
    m.eval()
    assert same(c(x3), x3)
    m.train()
    torch.manual_seed(0)
    a = c(x3)
    torch.manual_seed(0)
    assert same(a, m(x3))
    assert c.compiles == 2


def test_module_layer_appended_recompiles():
    layers = nn.ModuleList([nn.Linear(3, 3)])

    def fn(x):
        for layer in layers:
            x = layer(x)
        return x
    c = compile_fn(fn)
    assert same(c(x3), fn(x3))
    layers.append(nn.Linear(3, 3))
    assert same(c(x3), fn(x3))
    assert c.compiles == 2


def test_closure_cell_change_recompiles():
    k = 1

    def fn(x):
        return x + k
    c = compile_fn(fn)
    assert same(c(x3), x3 + 1)
    k = 2  # noqa: F841 (changes the cell fn reads)
    assert same(c(x3), x3 + 2) and c.compiles == 2


def test_grad_mode_change_recompiles():
    w = torch.randn(3, requires_grad=True)

    def fn(x):
        return x * w
    c = compile_fn(fn)
    assert c(x3).requires_grad
    with torch.no_grad():
        assert not c(x3).requires_grad
    assert c.compiles == 2


def test_default_dtype_change_recompiles():
    def fn(x):
        return x + torch.ones(3)
    c = compile_fn(fn)
    c(x3)
    old = torch.get_default_dtype()
    try:
        torch.set_default_dtype(torch.float64)
        assert first_failure(c.checks, [x3], fn.__globals__) == "torch.get_default_dtype() == torch.float32"
    finally:
        torch.set_default_dtype(old)


def test_builtin_shadowing_guarded():
    def fn(x):
        return x * len([1, 2])
    c = compile_fn(fn)
    c(x3)
    assert "G['len'] does not exist" in c.guard_texts()
    assert any(t.startswith("B['len'] is") for t in c.guard_texts())


def test_list_and_dict_inputs_guarded_by_len_and_keys():
    def fn(xs, d):
        return xs[0] + d["a"]
    c = recompiles(fn, ([x3], {"a": x3}), ([x3, x3], {"a": x3}))
    assert c.compiles == 2
    assert "L['d'].keys() == ['a']" in c.guard_texts()
    assert "len(L['xs']) == 2" in c.guard_texts()


def test_nothing_stale_runs_after_many_changes():
    c = compile_fn(lambda x, n: x * n)
    for n in [1, 2, 3, 1, 2, 3]:
        assert same(c(x3, n), x3 * n)
    assert c.compiles == 3


def test_build_guard_set_with_c_extension():
    _C = pytest.importorskip("pydynamo._C")
    if not hasattr(_C, "GuardSet"):
        pytest.skip("the C extension has no GuardSet yet")
    c = compile_fn(lambda x, n: x * n)
    c(x3, 2)
    gs = build_guard_set(c.checks)
    assert len(gs) == len(c.checks)
    assert gs.check([x3, 2], globals())
    assert not gs.check([x3, 3], globals())


def test_global_state_reader_is_folded_and_guarded():
    def fn(x):
        if torch.are_deterministic_algorithms_enabled():
            return x + 1
        return x - 1
    c = compile_fn(fn)
    assert same(c(x3), fn(x3))
    assert "torch.are_deterministic_algorithms_enabled() == False" in c.guard_texts()
    assert c.backend.op_count == 1
