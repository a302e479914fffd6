"""Every tensor property a trace reads is pinned by TENSOR_MATCH, guarded where read, or refused.

Each end-to-end test calls a compiled function with a tensor, then one differing only in the
property the function reads, then the first again: every result must equal eager, and the second
call must compile a new entry (fullgraph: no fallback to eager hides a wrong cache hit).
"""
import pytest
import torch

import pydynamo
from _compile import compile_fn, first_failure
from pydynamo import _C
from pydynamo.exc import Unsupported
from pydynamo.guards import GuardBuilder
from pydynamo.source import LocalSource
from pydynamo.testing import CompileCounter, same

x3 = torch.randn(3)
c3 = torch.randn(3, dtype=torch.complex64)
with torch.inference_mode():
    inference3 = torch.randn(3)


def compiles_per_input(fn, inputs, frames):
    """``fn`` compiled (the C hook, C guards, fullgraph) called on each of ``inputs`` in turn:
    each result equals eager, and ``frames`` graphs were compiled in all."""
    cnt = CompileCounter()
    opt = pydynamo.optimize(cnt, fullgraph=True)(fn)
    try:
        for args in inputs:
            assert same(opt(*args), fn(*args)), args
        assert cnt.frame_count == frames
    finally:
        pydynamo.reset()
    # the same through the pure-Python guard evaluator of the tests
    c = compile_fn(fn)
    for args in inputs:
        assert same(c(*args), fn(*args)), args
    assert c.compiles == frames


def leaf_and_nonleaf():
    leaf = torch.randn(3, requires_grad=True)
    return leaf, leaf * 2


# ---- TENSOR_MATCH: the inference, conjugate and negative bits -----------------------------------

def is_inference_branch(x):
    return x + (1 if x.is_inference() else 3)


def is_conj_branch(x):
    return x + (1 if x.is_conj() else 3)


def is_neg_branch(x):
    return x + (1 if x.is_neg() else 3)


@pytest.mark.parametrize("fn,plain,other", [
    (is_inference_branch, x3, inference3),
    (lambda x: x + (1 if torch.is_inference(x) else 3), x3, inference3),
    (is_conj_branch, c3, c3.conj()),
    (lambda x: x + (1 if torch.is_conj(x) else 3), c3, c3.conj()),
    (is_neg_branch, c3, torch._neg_view(c3)),
    (lambda x: x * 2, c3, c3.conj()),  # no read: the graph still depends on the bit
], ids=["is_inference", "torch.is_inference", "is_conj", "torch.is_conj", "is_neg", "conj_math"])
def test_tensor_match_bits_recompile(fn, plain, other):
    compiles_per_input(fn, [(plain,), (other,), (plain,), (other,)], frames=2)


def test_bits_are_guarded_for_symbolic_inputs_too():
    cnt = CompileCounter()
    opt = pydynamo.optimize(cnt, fullgraph=True, dynamic=True)(is_inference_branch)
    with torch.inference_mode():
        inference5 = torch.randn(5)
    try:
        for arg in (x3, torch.randn(5), inference3, inference5, x3):
            assert same(opt(arg), is_inference_branch(arg))
        assert cnt.frame_count == 2
    finally:
        pydynamo.reset()


@pytest.mark.parametrize("kind", ["fast", "portable"])
def test_c_tensor_match_checks_bits(kind):
    with torch.inference_mode():
        inference = torch.randn(3, dtype=torch.complex64)
    views = {"plain": c3, "inference": inference, "conj": c3.conj(), "neg": torch._neg_view(c3)}
    order = list(views)  # the order the check reads the bits in, after "plain"
    for name, t in views.items():
        # requires_grad given as an int instead of a bool takes the portable (Python getter) path
        rg = t.requires_grad if kind == "fast" else int(t.requires_grad)
        spec = (type(t), t.dtype, t.device, t.layout, rg, tuple(t.shape), t.stride(),
                t.is_inference(), t.is_conj(), t.is_neg())
        gs = _C.GuardSet()
        gs.add((("L", 0),), "TENSOR_MATCH", spec, "L['x']")
        assert gs.check([t], {})
        for other_name, other in views.items():
            if other_name != name:
                detail = min({name, other_name} - {"plain"}, key=order.index)
                assert gs.first_failure([other], {}) == f"L['x'] ({detail})", (name, other_name)


def test_c_tensor_match_without_bits_is_a_plain_tensor():
    t = c3
    gs = _C.GuardSet()
    gs.add((("L", 0),), "TENSOR_MATCH", (type(t), t.dtype, t.device, t.layout, False, (3,), (1,)), "L['x']")
    assert gs.check([c3], {})
    assert gs.first_failure([c3.conj()], {}) == "L['x'] (conj)"
    assert gs.first_failure([inference3.to(torch.complex64)], {}) is None  # made outside: plain
    with pytest.raises(TypeError, match="the last three bools"):
        gs.add((("L", 0),), "TENSOR_MATCH", (type(t), t.dtype, t.device, t.layout, False, (3,), (1,), 0, 0, 0), "x")
    with pytest.raises(TypeError, match="TENSOR_MATCH value"):
        gs.add((("L", 0),), "TENSOR_MATCH", (type(t), t.dtype, t.device, t.layout, False, (3,), (1,), False), "x")


def test_guard_builder_tensor_match_value_and_text():
    gb = GuardBuilder()
    gb.TENSOR_MATCH(LocalSource("x", 0), c3.conj())
    gb.TENSOR_MATCH(LocalSource("y", 1), x3)
    conj, plain = gb.checks
    assert conj.value[7:] == (False, True, False) and plain.value[7:] == (False, False, False)
    assert conj.text == "L['x']: Tensor(torch.complex64, cpu, size=[3], stride=[1], requires_grad=False, conj=True)"
    assert plain.text == "L['y']: Tensor(torch.float32, cpu, size=[3], stride=[1], requires_grad=False)"
    assert first_failure(gb.checks, [c3, x3], {}) == conj.text
    assert first_failure(gb.checks, [c3.conj(), x3], {}) is None


# ---- guarded where read: facts about the input object -------------------------------------------

def test_is_leaf_of_an_input():
    leaf, nonleaf = leaf_and_nonleaf()
    compiles_per_input(lambda x: x * (1 if x.is_leaf else 3), [(leaf,), (nonleaf,), (leaf,)], frames=2)


def test_is_leaf_of_a_parameter_is_guarded_by_attribute():
    lin = torch.nn.Linear(2, 2)
    c = compile_fn(lambda x: lin(x) + lin.weight.is_leaf)
    c(torch.ones(2))
    assert "C['lin'].weight.is_leaf == True" in c.guard_texts()


def test_storage_offset_of_an_input():
    base = torch.arange(8.)
    compiles_per_input(lambda x: x + x.storage_offset(), [(base[:3],), (base[1:4],), (base[:3],)], frames=2)
    c = compile_fn(lambda x: x + x.storage_offset())
    c(base[2:5])
    assert "L['x'].storage_offset() == 2" in c.guard_texts()


def test_storage_offset_of_a_view_of_an_input():
    base = torch.arange(8.)
    compiles_per_input(lambda x: x[1:] + x[1:].storage_offset(), [(base[:3],), (base[1:4],)], frames=2)


def test_storage_offset_after_an_in_place_metadata_change():
    def fn(x):
        return x.as_strided_((2,), (1,), 1).storage_offset() + torch.zeros(2)

    c = compile_fn(fn)
    for _ in range(2):  # each call changes its input: fresh ones for eager and compiled
        assert same(c(torch.arange(4.)), fn(torch.arange(4.)))
    assert c.compiles == 1 and "L['x'].storage_offset() == 0" in c.guard_texts()


def test_is_view_of_an_input():
    base = torch.arange(8.)
    compiles_per_input(lambda x: x + (1 if x._is_view() else 3), [(base[:3].clone(),), (base[:3],)], frames=2)


def test_is_shared_of_an_input():
    shared = torch.randn(3).share_memory_()
    compiles_per_input(lambda x: x + (1 if x.is_shared() else 3), [(x3,), (shared,), (x3,)], frames=2)


def test_is_pinned_of_an_input_is_guarded():
    c = compile_fn(lambda x: x + (1 if x.is_pinned() else 3))
    assert same(c(x3), x3 + 3)
    assert "L['x'].is_pinned() == False" in c.guard_texts()


def test_a_tensor_returned_by_an_in_place_op_is_its_input():
    def fn(x):
        with torch.no_grad():
            y = x.mul_(1)  # y is x: its is_leaf is the input's
        return torch.zeros(1) + y.is_leaf

    leaf, nonleaf = leaf_and_nonleaf()
    compiles_per_input(fn, [(leaf,), (nonleaf,), (leaf,)], frames=2)


# ---- values computed in the graph ---------------------------------------------------------------

def test_is_leaf_of_a_computed_value():
    leaf, _ = leaf_and_nonleaf()
    compiles_per_input(lambda x: x + (1 if (x * 2).is_leaf else 3), [(x3,), (leaf,), (x3,)], frames=2)


def test_is_inference_of_a_computed_value_follows_inference_mode():
    def fn(x):
        y = x * 2
        return y + (1 if y.is_inference() else 3)

    cnt = CompileCounter()
    opt = pydynamo.optimize(cnt, fullgraph=True)(fn)
    try:
        for mode in (torch.no_grad, torch.inference_mode, torch.no_grad, torch.inference_mode):
            with mode():
                assert same(opt(x3), fn(x3)), mode
        assert cnt.frame_count == 2  # is_grad_enabled() is False under both
    finally:
        pydynamo.reset()


def test_storage_offset_of_a_computed_value():
    compiles_per_input(lambda x: (x + 1)[1:].storage_offset() + x, [(x3,), (torch.randn(3),)], frames=1)


def test_pinned_memory_of_a_computed_value_is_refused():
    with pytest.raises(Unsupported, match="is_pinned.. of a tensor computed in the graph"):
        compile_fn(lambda x: (x + 1).is_pinned())(x3)


# ---- the forms of the methods answered at trace time --------------------------------------------

x2345 = torch.randn(2, 3, 4, 5)


@pytest.mark.parametrize("fn", [
    lambda x: x.size(dim=1), lambda x: x.size(1), lambda x: x.size(-1), lambda x: x.size(dim=-1),
    lambda x: x.size(dim=None), lambda x: x.size(), lambda x: x.shape[-2],
    lambda x: x.stride(dim=0), lambda x: x.stride(-1), lambda x: x.stride(), lambda x: x.stride(dim=-3),
    lambda x: x.dim(), lambda x: x.ndimension(), lambda x: x.ndim, lambda x: len(x),
    lambda x: x.numel(), lambda x: x.nelement(), lambda x: x.element_size(),
    lambda x: x.is_contiguous(), lambda x: x.is_contiguous(memory_format=torch.channels_last),
    lambda x: x.get_device(),
    lambda x: x.is_floating_point(), lambda x: x.is_complex(), lambda x: x.is_signed(),
])
def test_metadata_method_forms_match_eager(fn):
    c = compile_fn(lambda x: (x + 1, fn(x)))
    for arg in (x2345, x2345.contiguous(memory_format=torch.channels_last)):
        assert same(c(arg), (arg + 1, fn(arg)))


@pytest.mark.parametrize("fn,error", [
    (lambda x: x.size(4), IndexError), (lambda x: x.size(dim=-5), IndexError),
    (lambda x: x.stride(7), IndexError), (lambda x: x.dim(0), TypeError),
    (lambda x: x.size(0, 1), TypeError), (lambda x: len(x.sum()), TypeError),
    (lambda x: x.is_contiguous(torch.channels_last), TypeError),  # memory_format is keyword-only
])
def test_metadata_method_errors_match_eager(fn, error):
    with pytest.raises(error):
        fn(x2345)
    with pytest.raises(error):
        pydynamo.optimize("eager")(fn)(x2345)


# ---- folding non-tensor results: only what guards pin -------------------------------------------

@pytest.mark.parametrize("fn,match", [
    (lambda x: x._is_zerotensor(), "_is_zerotensor.. gives a bool result that no guard pins"),
    (lambda x: x.__repr__(), "__repr__.. gives a str result that no guard pins"),
    (lambda x: torch._is_zerotensor(x), "_is_zerotensor gives a bool result computed from tensors"),
    (lambda x: torch.ops.aten.sym_storage_offset(x), "aten.sym_storage_offset gives a int result"),
])
def test_unpinned_results_are_not_folded(fn, match):
    with pytest.raises(Unsupported, match=match):
        compile_fn(fn)(x3)


def test_aten_metadata_ops_fold_by_name():
    c = compile_fn(lambda x: x + torch.ops.aten.sym_size.int(x, 1) + torch.ops.aten.sym_stride(x, 0))
    assert same(c(x2345), x2345 + 3 + 60)


def test_torch_helpers_fold_only_pinned_reads(monkeypatch):
    """A Python function of torch's that the graph calls (not inlined) and that returns a
    constant: folded where what it read of its tensors is pinned, refused where not."""
    from torch.nn.modules.activation import _arg_requires_grad, _check_arg_device
    leaf, nonleaf = leaf_and_nonleaf()
    compiles_per_input(lambda x: x * (1 if _arg_requires_grad(x) and _check_arg_device(x) else 3),
                       [(x3,), (leaf,), (x3,)], frames=2)

    def _pyd_test_reads_is_leaf(x):
        return x.is_leaf
    _pyd_test_reads_is_leaf.__module__ = "torch.nn.functional"
    monkeypatch.setattr(torch.nn.functional, "_pyd_test_reads_is_leaf", _pyd_test_reads_is_leaf,
                        raising=False)

    def fn(x):
        return x * (1 if torch.nn.functional._pyd_test_reads_is_leaf(x) else 3)
    with pytest.raises(Unsupported, match="_pyd_test_reads_is_leaf reads is_leaf of a tensor, which no guard pins"):
        compile_fn(fn)(leaf)
    opt = pydynamo.optimize("eager")(fn)
    try:
        for arg in (leaf, nonleaf, leaf):
            assert same(opt(arg), fn(arg))
    finally:
        pydynamo.reset()


def test_multihead_attention_still_one_graph():
    mha = torch.nn.MultiheadAttention(8, 2)
    q = torch.randn(5, 1, 8)
    c = compile_fn(lambda q: mha(q, q, q)[0])
    assert same(c(q), mha(q, q, q)[0])


# ---- refused inputs: what TENSOR_MATCH cannot describe ------------------------------------------

@pytest.mark.filterwarnings("ignore:torch.quantize_per_tensor")
@pytest.mark.parametrize("make,match", [
    (lambda: torch.quantize_per_tensor(torch.randn(3), 0.1, 0, torch.qint8), "quantized tensors"),
    (lambda: torch.randn(3).to_sparse(), "layout torch.sparse_coo"),
])
def test_tensors_guards_cannot_describe_are_refused(make, match):
    t = make()
    fn = lambda x: x.clone()  # noqa: E731
    with pytest.raises(Unsupported, match=match):
        compile_fn(fn)(t)
    cnt = CompileCounter()
    opt = pydynamo.optimize(cnt)(fn)  # no fullgraph: the frame runs eagerly
    try:
        assert type(opt(t)) is type(fn(t)) and cnt.frame_count == 0
    finally:
        pydynamo.reset()


def test_parameter_is_accepted_and_pinned_by_type():
    p = torch.nn.Parameter(torch.randn(3))
    compiles_per_input(lambda x: x * 2, [(p,), (p.detach().requires_grad_(True),), (p,)], frames=2)
