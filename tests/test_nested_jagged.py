"""Jagged NestedTensors (issue 41): a wrapper subclass with a Python ``__torch_function__``, its
override inlined at each torch call, its ragged size a symbol (torch's nested int, passed as a
graph input of its own, as torch.compile passes it). Results, gradients, graph counts and
recompiles compared with eager and torch.compile."""
import os
import subprocess
import sys

import pytest
import torch
import torch._dynamo

import pydynamo
from pydynamo.testing import CompileCounter

BACKENDS = ["eager", "aot_eager", "inductor"]

# torch < 2.12 cannot leave a subclass's outer sizes untracked (its nested ints): refused there
from pydynamo.shapes import _TRACKS_OUTER_OPTIONAL  # noqa: E402
needs_njt = pytest.mark.skipif(not _TRACKS_OUTER_OPTIONAL, reason="torch < 2.12: jagged inputs refused")


def _nt(lens, dim=4, grad=False, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.nested.nested_tensor([torch.randn(n, dim, generator=g) for n in lens],
                                      layout=torch.jagged, requires_grad=grad)


def _same(got, want):
    assert type(got) is type(want)
    if getattr(want, "is_nested", False):
        assert torch.equal(got.offsets(), want.offsets())
        assert torch.allclose(got.values(), want.values(), atol=1e-5)
    else:
        assert torch.allclose(got, want, atol=1e-5)


_LIN = torch.nn.Linear(4, 6)

PROGRAMS = {
    "pointwise": lambda nt: (torch.sin(nt) + 1) * 2,
    "methods": lambda nt: nt.cos().mul(3).exp(),
    "linear_relu": lambda nt: torch.relu(_LIN(nt)),
    "softmax": lambda nt: torch.softmax(nt, dim=-1),
    "sizes": lambda nt: nt * nt.size(0) + nt.dim(),
    "sum_ragged": lambda nt: nt.sum(dim=1),
    "values_offsets": lambda nt: nt.values().sum() + nt.offsets().float().sum(),
    "unflatten_transpose": lambda nt: nt.unflatten(-1, (2, 2)).transpose(1, 2).sin(),
    "from_jagged": lambda nt: torch.nested.nested_tensor_from_jagged(nt.values() * 2, nt.offsets()),
}


def _tc_graphs(fn, *args):
    torch._dynamo.reset()
    explained = torch._dynamo.explain(fn)(*args)
    torch._dynamo.reset()
    return explained.graph_count, explained.graph_break_count


@needs_njt
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_jagged_programs_in_one_graph_like_torch_compile(name):
    fn = PROGRAMS[name]
    tc_graphs, tc_breaks = _tc_graphs(fn, _nt([3, 5]))
    pydynamo.reset()
    explained = pydynamo.explain(fn)(_nt([3, 5]))
    assert explained.graph_count <= tc_graphs and explained.graph_break_count <= tc_breaks, explained
    assert explained.graph_count == 1 and explained.graph_break_count == 0
    pydynamo.reset()
    compiled = pydynamo.optimize("eager", fullgraph=True)(fn)
    for lens in ([3, 5], [2, 6], [1, 4, 2]):
        _same(compiled(_nt(lens, seed=len(lens))), fn(_nt(lens, seed=len(lens))))


@needs_njt
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("name", ["pointwise", "linear_relu", "softmax", "sum_ragged", "from_jagged"])
def test_jagged_programs_through_aot_backends(backend, name):
    """AOTAutograd flattens the NestedTensor into its inner tensors; the nested int is a SymInt
    input of its own (without it AOTAutograd cannot track the output's ragged size)."""
    fn = PROGRAMS[name]
    pydynamo.reset()
    compiled = pydynamo.optimize(backend)(fn)
    for lens in ([3, 5], [2, 6]):
        _same(compiled(_nt(lens)), fn(_nt(lens)))


@needs_njt
@pytest.mark.parametrize("backend", BACKENDS)
def test_jagged_training_gradients_equal_eager(backend):
    lin = torch.nn.Linear(4, 3)
    ref_lin = torch.nn.Linear(4, 3)
    ref_lin.load_state_dict(lin.state_dict())

    def step(model, nt):
        return torch.relu(model(nt)).sin() * 2
    pydynamo.reset()
    compiled = pydynamo.optimize(backend)(step)
    for lens in ([3, 5], [2, 6], [1, 2, 3]):
        nt, ref_nt = _nt(lens, grad=True), _nt(lens, grad=True)
        out, ref = compiled(lin, nt), step(ref_lin, ref_nt)
        out.values().sum().backward()
        ref.values().sum().backward()
        _same(out, ref)
        assert torch.allclose(nt.grad.values(), ref_nt.grad.values(), atol=1e-5)
        assert torch.allclose(lin.weight.grad, ref_lin.weight.grad, atol=1e-5)


@needs_njt
def test_new_lengths_reuse_the_graph_a_new_batch_size_recompiles():
    """The ragged size and the cached min/max lengths are symbolic: new lengths for the same
    batch size hit; a new batch size recompiles (torch.compile makes it dynamic once changed)."""
    counter = CompileCounter()
    pydynamo.reset()
    compiled = pydynamo.optimize(counter)(PROGRAMS["pointwise"])
    for lens in ([3, 5], [2, 6], [5, 5], [9, 2]):
        _same(compiled(_nt(lens)), PROGRAMS["pointwise"](_nt(lens)))
    assert counter.frame_count == 1
    compiled(_nt([2, 3, 4]))
    assert counter.frame_count == 2


@needs_njt
def test_what_the_graph_depends_on_is_guarded():
    """A NestedTensor of another dtype, feature size or ragged dimension, or a dense tensor, is not
    served by the graph traced for the first one."""
    fn = PROGRAMS["sum_ragged"]
    counter = CompileCounter()
    pydynamo.reset()
    compiled = pydynamo.optimize(counter)(fn)
    first = _nt([3, 5])
    _same(compiled(first), fn(first))
    others = [_nt([3, 5]).to(torch.float64), _nt([3, 5], dim=6), _nt([3, 5]).transpose(1, 2), torch.randn(2, 3, 4)]
    for other in others:
        _same(compiled(other), fn(other))
    assert counter.frame_count == 1 + len(others)


@needs_njt
def test_attention_over_a_nested_tensor_breaks_with_a_reason():
    """SDPA on a NestedTensor builds torch's SDPAParams to pick a kernel: a C object the trace
    does not model yet. The call runs eagerly, with the reason, the result right."""
    def attend(nt):
        q = nt.unflatten(-1, (2, 2)).transpose(1, 2)
        return torch.nn.functional.scaled_dot_product_attention(q, q, q).transpose(1, 2)
    pydynamo.reset()
    explained = pydynamo.explain(attend)(_nt([3, 5]))
    assert any("SDPAParams" in str(b.reason) for b in explained.break_reasons)
    _same(pydynamo.optimize("eager")(attend)(_nt([3, 5])), attend(_nt([3, 5])))


def test_the_dispatch_mode_readers_of_its_override_are_guarded():
    """NestedTensor's ``__torch_function__`` asks whether a proxy mode is tracing
    (``maybe_enable_thunkify``): answered while tracing and guarded, so a call under a proxy mode
    does not reuse the answer."""
    from torch.fx.experimental.proxy_tensor import get_proxy_mode

    def f(x):
        return x + (1 if get_proxy_mode() is None else 2)
    pydynamo.reset()
    explained = pydynamo.explain(f)(torch.zeros(2))
    texts = [str(g) for g in explained.out_guards]
    assert any("_get_dispatch_mode(" in t and "None" in t for t in texts)
    assert any("_get_dispatch_mode_pre_dispatch(" in t for t in texts)
    assert explained.graph_break_count == 0


@needs_njt
@pytest.mark.skipif(os.environ.get("PYDYNAMO_TESTS_PORTABLE_GUARDS") == "1", reason="the rerun itself")
def test_jagged_inputs_with_the_portable_guards():
    """The same tests where pydynamo's C++ tensor module is not built (as CI's isolated build)."""
    env = dict(os.environ, PYDYNAMO_TESTS_PORTABLE_GUARDS="1")
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k",
                        "one_graph or guarded or recompiles", __file__],
                       env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]


@pytest.mark.skipif(_TRACKS_OUTER_OPTIONAL, reason="torch >= 2.12 traces jagged inputs")
def test_older_torch_refuses_jagged_inputs_with_the_reason():
    fn = PROGRAMS["pointwise"]
    pydynamo.reset()
    explained = pydynamo.explain(fn)(_nt([3, 5]))
    assert any("needs torch >= 2.12" in str(b.reason) for b in explained.break_reasons)
    _same(pydynamo.optimize("eager")(fn)(_nt([3, 5])), fn(_nt([3, 5])))
