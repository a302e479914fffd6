"""torch.utils.checkpoint.checkpoint(fn, ..., use_reentrant=False) inside compiled code: one graph,
eager's outputs and gradients, and a backward that recomputes the checkpointed ops
(variables/checkpoint.py). The recomputation is counted by a custom op that counts its runs."""
import functools
import os
import warnings

os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported: kernels run on the CPU

import pytest
import torch
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

import pydynamo
from pydynamo.testing import CompileCounter

BACKENDS = ["eager", "aot_eager", "inductor"]
RUNS = [0]


@torch.library.custom_op("pydynamo_test::counted_sin", mutates_args=())
def counted_sin(x: torch.Tensor) -> torch.Tensor:
    RUNS[0] += 1
    return torch.sin(x)


@counted_sin.register_fake
def _(x):
    return torch.empty_like(x)


def _setup(ctx, inputs, output):
    ctx.save_for_backward(inputs[0])


counted_sin.register_autograd(lambda ctx, g: g * torch.cos(ctx.saved_tensors[0]), setup_context=_setup)


def body(x, w, scale=1.0):
    return counted_sin(x @ w).cos() * scale


def plain(x, w):
    return body(x, w).sum()


def checkpointed(x, w):
    return checkpoint(body, x, w, use_reentrant=False).sum()


def counts(fn, *args):
    import torch._dynamo
    pydynamo.reset()
    ours = pydynamo.explain(fn)(*args)
    torch._dynamo.reset()
    theirs = torch._dynamo.explain(fn)(*args)
    torch._dynamo.reset()
    return (ours.graph_count, ours.graph_break_count), (theirs.graph_count, theirs.graph_break_count), ours


def step(fn, backend, *args, seed=0):
    """Output, gradients and the counted op's runs in forward and in backward (second call:
    the first one compiles)."""
    opt = pydynamo.optimize(backend)(fn) if backend else fn
    inputs = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
    torch.manual_seed(seed)
    opt(*args)
    RUNS[0] = 0
    torch.manual_seed(seed)
    out = opt(*args)
    forward_runs = RUNS[0]
    for a in inputs:
        a.grad = None
    out.backward()  # (not autograd.grad: the reentrant checkpoint refuses it)
    grads = [a.grad for a in inputs]
    for a in inputs:
        a.grad = None
    return out, grads, forward_runs, RUNS[0] - forward_runs


def same(a, b, exact):
    return torch.equal(a, b) if exact else torch.allclose(a, b, atol=1e-5, rtol=1e-4)


def assert_like_eager(fn, backend, *args):
    pydynamo.reset()
    out, grads, fwd, bwd = step(fn, backend, *args)
    ref, ref_grads, ref_fwd, ref_bwd = step(fn, None, *args)
    exact = backend == "eager"
    assert same(out, ref, exact) and all(same(g, r, exact) for g, r in zip(grads, ref_grads))
    return fwd, bwd, ref_fwd, ref_bwd


@pytest.mark.parametrize("backend", [*BACKENDS, "triton"])
def test_one_graph_same_gradients_and_the_backward_recomputes(backend):
    if backend == "triton":
        pytest.importorskip("triton")
    x, w = torch.randn(4, 8, requires_grad=True), torch.randn(8, 8, requires_grad=True)
    assert assert_like_eager(checkpointed, backend, x, w) == (1, 1, 1, 1)  # recomputed once
    assert assert_like_eager(plain, backend, x, w) == (1, 0, 1, 0)  # saved, not recomputed
    ours, theirs, _ = counts(checkpointed, x, w)
    assert ours == (1, 0) and ours[0] <= theirs[0]


def test_the_graph_calls_the_body_through_one_node():
    cnt = CompileCounter()
    x, w = torch.randn(4, 8, requires_grad=True), torch.randn(8, 8, requires_grad=True)
    pydynamo.optimize(cnt)(checkpointed)(x, w)
    assert cnt.frame_count == 1
    targets = [getattr(n.target, "__name__", n.target) for n in cnt.graphs[0].graph.nodes if n.op == "call_function"]
    assert "checkpoint" in targets and "counted_sin" not in str(targets)


@pytest.mark.parametrize("backend", BACKENDS)
def test_dropout_inside_checkpoint_preserves_the_rng_state(backend):
    def fn(x, w):
        return checkpoint(lambda a, b: torch.nn.functional.dropout(body(a, b), 0.5), x, w,
                          use_reentrant=False).sum()

    x, w = torch.randn(4, 8, requires_grad=True), torch.randn(8, 8, requires_grad=True)
    if backend == "inductor":  # its random numbers are not eager's: compare with itself
        pydynamo.reset()
        a = step(fn, backend, x, w)
        assert torch.isfinite(a[1][0]).all()
        return
    assert_like_eager(fn, backend, x, w)


@pytest.mark.parametrize("backend", BACKENDS)
def test_kwargs_tuple_outputs_and_inputs_returned(backend):
    def region(x, w, scale=1.0):
        h = body(x, w, scale)
        return h, x, {"double": h * 2}

    def fn(x, w):
        h, same_x, d = checkpoint(region, x, w, use_reentrant=False, scale=3.0,
                                  determinism_check="none", preserve_rng_state=False, debug=False)
        assert same_x is x  # an input returned by the body is that object, as in eager
        return (h + d["double"]).sum() + same_x.sum()

    x, w = torch.randn(4, 8, requires_grad=True), torch.randn(8, 8, requires_grad=True)
    assert assert_like_eager(fn, backend, x, w)[:2] == (1, 1)
    ours, theirs, _ = counts(fn, x, w)
    assert ours == (1, 0) and ours[0] <= theirs[0]


def _must_save_sin(ctx, op, *args, **kwargs):
    return CheckpointPolicy.MUST_SAVE if "counted_sin" in str(op) else CheckpointPolicy.PREFER_RECOMPUTE


SAC = functools.partial(create_selective_checkpoint_contexts, _must_save_sin)


@pytest.mark.parametrize("backend", BACKENDS)
def test_selective_checkpointing_context_fn(backend):
    def fn(x, w):
        return checkpoint(body, x, w, use_reentrant=False, context_fn=SAC).sum()

    x, w = torch.randn(4, 8, requires_grad=True), torch.randn(8, 8, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fwd, bwd, ref_fwd, ref_bwd = assert_like_eager(fn, backend, x, w)
    assert (fwd, bwd) == (ref_fwd, ref_bwd) == (1, 0)  # the policy saved it: not recomputed
    ours, theirs, _ = counts(fn, x, w)
    assert ours == (1, 0) and ours[0] <= theirs[0]


@pytest.mark.parametrize("backend", BACKENDS)
def test_checkpointed_module_in_a_training_step(backend):
    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(8, 8)

        def forward(self, x):
            return torch.relu(self.lin(x)) + x

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = torch.nn.ModuleList([Block() for _ in range(2)])

        def forward(self, x):
            for block in self.blocks:
                x = checkpoint(block, x, use_reentrant=False)
            return x

    torch.manual_seed(0)
    ref, model = Net(), Net()
    model.load_state_dict(ref.state_dict())
    opt = pydynamo.optimize(backend)(model)
    sgd, ref_sgd = (torch.optim.SGD(m.parameters(), lr=0.1) for m in (model, ref))
    for _ in range(3):
        x = torch.randn(4, 8)
        for m, o in ((opt, sgd), (ref, ref_sgd)):
            o.zero_grad()
            m(x).square().mean().backward()
            o.step()
    for p, q in zip(model.parameters(), ref.parameters()):
        assert torch.allclose(p, q, atol=1e-5, rtol=1e-4)
    ours, theirs, _ = counts(model, torch.randn(4, 8))
    assert ours == (1, 0) and ours[0] <= theirs[0]


def test_saved_tensors_show_the_recomputation():
    """Fewer tensors are saved for backward with checkpoint than without, as in eager."""
    def saved(fn, *args):
        n = []
        with torch.autograd.graph.saved_tensors_hooks(lambda t: n.append(1) or t, lambda t: t):
            out = fn(*args)
        out.backward()
        return len(n)

    x, w = torch.randn(4, 8, requires_grad=True), torch.randn(8, 8, requires_grad=True)
    pydynamo.reset()
    opt_ckpt, opt_plain = pydynamo.optimize("eager")(checkpointed), pydynamo.optimize("eager")(plain)
    opt_ckpt(x, w), opt_plain(x, w)  # compiled outside the hooks
    assert saved(opt_ckpt, x, w) == saved(checkpointed, x, w) < saved(opt_plain, x, w) == saved(plain, x, w)


@pytest.mark.parametrize("kwargs, reason", [
    ({"use_reentrant": True}, "use_reentrant=True"),
    ({}, "without use_reentrant"),
    ({"use_reentrant": False, "context_fn": lambda: (torch.no_grad(), torch.no_grad())}, "context_fn"),
])
def test_refused_forms_run_natively(kwargs, reason):
    def fn(x, w):
        return checkpoint(body, x, w, **kwargs).sum()

    x, w = torch.randn(4, 8, requires_grad=True), torch.randn(8, 8, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if "context_fn" not in kwargs:
            assert_like_eager(fn, "eager", x, w)
            assert_like_eager(fn, "aot_eager", x, w)
        pydynamo.reset()
        explained = pydynamo.explain(fn)(x, w)
    assert explained.graph_break_count == 1 and reason in str(explained.break_reasons[0])


def test_preserve_rng_state_false_with_random_ops_is_refused():
    def fn(x, w):
        return checkpoint(lambda a, b: torch.nn.functional.dropout(body(a, b), 0.5), x, w,
                          use_reentrant=False, preserve_rng_state=False).sum()

    x, w = torch.randn(4, 8, requires_grad=True), torch.randn(8, 8, requires_grad=True)
    for backend in ("eager", "aot_eager"):
        assert_like_eager(fn, backend, x, w)
    pydynamo.reset()
    explained = pydynamo.explain(fn)(x, w)
    assert "preserve_rng_state=False" in str(explained.break_reasons[0])


def test_body_with_side_effect_is_refused():
    log = []

    def region(x, w):
        log.append(1)
        return body(x, w)

    def fn(x, w):
        return checkpoint(region, x, w, use_reentrant=False).sum()

    x, w = torch.randn(4, 8, requires_grad=True), torch.randn(8, 8, requires_grad=True)
    assert_like_eager(fn, "aot_eager", x, w)
    pydynamo.reset()
    explained = pydynamo.explain(fn)(x, w)
    assert "side effect" in str(explained.break_reasons[0])


def test_body_mutating_the_callers_objects_is_refused():
    """The recomputation would run the body's Python again: eager appends twice."""
    def fn(x, w):
        log = []
        out = checkpoint(lambda a, b: (log.append(1), body(a, b))[1], x, w, use_reentrant=False).sum()
        return out, log

    x, w = torch.randn(4, 8, requires_grad=True), torch.randn(8, 8, requires_grad=True)
    pydynamo.reset()
    out, log = pydynamo.optimize("eager")(fn)(x, w)
    out.backward()
    ref, ref_log = fn(x, w)
    ref.backward()
    assert log == ref_log == [1, 1]
    pydynamo.reset()
    explained = pydynamo.explain(fn)(x, w)
    assert "would change again" in str(explained.break_reasons[0])
