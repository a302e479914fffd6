"""torch.autograd.Function subclasses called with .apply inside compiled code: the forward is
captured in the frame's graph, the gradient is the user's backward (variables/autograd_function.py).
Outputs and gradients are compared with eager; graph counts with torch.compile's."""
import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported: kernels run on the CPU

import pytest
import torch
from torch.autograd.function import once_differentiable

import pydynamo
from pydynamo.testing import CompileCounter

BACKENDS = ["eager", "aot_eager", "inductor"]


def _grads(out, inputs):
    loss = sum(o.float().sum() for o in (out if isinstance(out, tuple) else (out,))
               if isinstance(o, torch.Tensor) and o.requires_grad)
    return torch.autograd.grad(loss, inputs, allow_unused=True)


def check(fn, *args, backend="eager"):
    """fn compiled gives eager's outputs and gradients (w.r.t. the arguments that require grad)."""
    inputs = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
    pydynamo.reset()
    out = pydynamo.optimize(backend)(fn)(*args)
    got = _grads(out, inputs)
    ref = fn(*args)
    want = _grads(ref, inputs)
    exact = backend == "eager"
    outs = out if isinstance(out, tuple) else (out,)
    refs = ref if isinstance(ref, tuple) else (ref,)
    assert len(outs) == len(refs)
    for o, r in zip(outs, refs):
        if isinstance(r, torch.Tensor):
            assert o.requires_grad == r.requires_grad
            assert torch.equal(o, r) if exact else torch.allclose(o, r, atol=1e-5, rtol=1e-4)
        else:
            assert o == r
    for g, w in zip(got, want):
        assert (g is None) == (w is None)
        if g is not None:
            assert torch.equal(g, w) if exact else torch.allclose(g, w, atol=1e-5, rtol=1e-4)
    return out


def counts(fn, *args):
    """(ours, torch.compile's) (graph count, graph break count) for fn(*args)."""
    import torch._dynamo
    pydynamo.reset()
    ours = pydynamo.explain(fn)(*args)
    torch._dynamo.reset()
    theirs = torch._dynamo.explain(fn)(*args)
    torch._dynamo.reset()
    return (ours.graph_count, ours.graph_break_count), (theirs.graph_count, theirs.graph_break_count), ours


# ---- Functions used below -----------------------------------------------------------------

class RoundSTE(torch.autograd.Function):
    """Straight-through rounding: autograd's own gradient of round is zero, the user's is 1."""

    @staticmethod
    def forward(ctx, x):
        return torch.round(x)

    @staticmethod
    def backward(ctx, g):
        return g


class ScaledExp(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, scale, shift):
        y = x.exp() * scale
        ctx.save_for_backward(y)
        ctx.scale, ctx.shift = scale, shift
        return y + shift

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        return g * y * 3 + ctx.shift, None, None  # not exp's derivative: the user's wins


class Mixed(torch.autograd.Function):
    """Several outputs: a tensor, an int, a non-differentiable argmax and a marked one."""

    @staticmethod
    def forward(ctx, x, w, k):
        ctx.save_for_backward(x, w)
        ctx.k = k
        out = x @ w
        idx = out.argmax(dim=-1)
        doubled = out * 2
        ctx.mark_non_differentiable(doubled)
        ctx.intermediate = out.sin()  # a tensor stored on ctx, not saved
        return out * k, 7, idx, doubled

    @staticmethod
    def backward(ctx, g, g_int, g_idx, g_doubled):
        assert g_int is None
        x, w = ctx.saved_tensors
        gx = g @ w.t() + ctx.intermediate.sum() if ctx.needs_input_grad[0] else None
        gw = x.t() @ (g + g_doubled) * ctx.k if ctx.needs_input_grad[1] else None
        return gx, gw, None


class Mul(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, y):
        ctx.save_for_backward(x, y)
        return x * y

    @staticmethod
    def backward(ctx, g):
        x, y = ctx.saved_tensors
        gx = g * y if ctx.needs_input_grad[0] else None
        gy = g * x if ctx.needs_input_grad[1] else None
        return gx, gy


class SetupStyle(torch.autograd.Function):
    @staticmethod
    def forward(x, power=2.0):
        return x ** power

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, power = inputs
        ctx.power = power
        ctx.save_for_backward(x, output)

    @staticmethod
    def backward(ctx, g):
        x, out = ctx.saved_tensors
        return g * ctx.power * x ** (ctx.power - 1) + 0 * out, None


class OnceDiff(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    @once_differentiable
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 2 * g * x


class Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 2 * g * x


class DataDependent(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * 2

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        if g.sum() > 0:
            return g * 2
        return g * 3


class Materialize(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, off):
        ctx.set_materialize_grads(off)
        return x * 2, x * 3

    @staticmethod
    def backward(ctx, g1, g2):
        if g2 is None:
            return g1 * 2, None
        return g1 * 2 + g2 * 3, None


class WithParams(torch.autograd.Function):
    """Non-tensor arguments: a list of tensors and a module (only read: no gradient flows to
    them through the Function, as in eager)."""

    @staticmethod
    def forward(ctx, x, others, lin):
        ctx.lin = lin
        ctx.save_for_backward(x)
        return lin(x) * others[0]

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g @ ctx.lin.weight * 2, None, None


# ---- outputs and gradients equal to eager -------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
def test_user_backward_gives_the_gradient(backend):
    def fn(x):
        return RoundSTE.apply(x * 3).sin() + ScaledExp.apply(x, 2.0, 0.5)

    x = torch.randn(5, requires_grad=True)
    check(fn, x, backend=backend)
    g, = torch.autograd.grad(pydynamo.optimize(backend)(fn)(x).sum(), x)
    assert g.abs().sum() > 0  # the straight-through gradient, not round's zero


@pytest.mark.parametrize("backend", BACKENDS)
def test_ctx_features_and_mixed_outputs(backend):
    def fn(x, w):
        out, n, idx, doubled = Mixed.apply(x, w, 3.0)
        return out.tanh() * n + doubled.sum(), idx, doubled

    x, w = torch.randn(3, 4, requires_grad=True), torch.randn(4, 5, requires_grad=True)
    out = check(fn, x, w, backend=backend)
    assert not out[1].requires_grad and not out[2].requires_grad  # argmax, marked
    ours, theirs, _ = counts(fn, x, w)
    assert ours == (1, 0) and ours[0] <= theirs[0]


@pytest.mark.parametrize("backend", BACKENDS)
def test_needs_input_grad(backend):
    def fn(x, y):
        return Mul.apply(x, y)

    x, y = torch.randn(4, requires_grad=True), torch.randn(4)
    check(fn, x, y, backend=backend)
    check(fn, y, x, backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_setup_context_style_with_default(backend):
    def fn(x):
        return SetupStyle.apply(x) + SetupStyle.apply(x, 3.0)

    check(fn, torch.randn(4, requires_grad=True), backend=backend)
    ours, theirs, _ = counts(fn, torch.randn(4, requires_grad=True))
    assert ours == (1, 0) and ours[0] <= theirs[0]


@pytest.mark.parametrize("backend", BACKENDS)
def test_non_tensor_arguments(backend):
    lin = torch.nn.Linear(4, 4)

    def fn(x, y):
        return WithParams.apply(x, [y], lin)

    x, y = torch.randn(2, 4, requires_grad=True), torch.randn(4, requires_grad=True)
    check(fn, x, y, backend=backend)
    out = pydynamo.optimize(backend)(fn)(x, y)
    out.sum().backward()
    assert y.grad is None and lin.weight.grad is None  # not inputs of the Function: as eager
    ours, theirs, _ = counts(fn, x, y)
    assert ours == (1, 0) and ours[0] <= theirs[0]


@pytest.mark.parametrize("backend", BACKENDS)
def test_once_differentiable(backend):
    def fn(x):
        return OnceDiff.apply(x.sin())

    check(fn, torch.randn(4, requires_grad=True), backend=backend)


def test_once_differentiable_double_backward_fails_as_eager():
    def fn(x):
        return OnceDiff.apply(x)

    def second_grad(f, x):
        g, = torch.autograd.grad(f(x).sum(), x, create_graph=True)
        with pytest.raises(RuntimeError) as info:
            torch.autograd.grad(g.sum(), x)
        return str(info.value)

    x = torch.randn(3, requires_grad=True)
    assert second_grad(pydynamo.optimize("eager")(fn), x) == second_grad(fn, x)


def test_double_backward_through_the_traced_backward():
    def fn(x):
        return Square.apply(Square.apply(x) + 1)

    x = torch.randn(3, requires_grad=True)
    out = pydynamo.optimize("eager")(fn)(x)
    g, = torch.autograd.grad(out.sum(), x, create_graph=True)
    gg, = torch.autograd.grad(g.sum(), x)
    rg, = torch.autograd.grad(fn(x).sum(), x, create_graph=True)
    rgg, = torch.autograd.grad(rg.sum(), x)
    assert torch.equal(g, rg) and torch.equal(gg, rgg)


def test_set_materialize_grads():
    def on(x):
        a, b = Materialize.apply(x, True)
        return a

    def off(x):
        a, b = Materialize.apply(x, False)
        return a  # eager's backward gets None for b: refused, the apply runs natively

    x = torch.randn(3, requires_grad=True)
    check(on, x)
    check(off, x)
    ours, _, explained = counts(on, x)
    assert ours == (1, 0)
    ours, _, explained = counts(off, x)
    assert ours[1] >= 1 and "set_materialize_grads(False)" in str(explained.break_reasons[0])


@pytest.mark.parametrize("backend", BACKENDS)
def test_function_used_twice_in_one_graph(backend):
    def fn(x):
        return Square.apply(Square.apply(x).sin())

    check(fn, torch.randn(4, requires_grad=True), backend=backend)
    cnt = CompileCounter()
    pydynamo.reset()
    pydynamo.optimize(cnt)(fn)(torch.randn(4, requires_grad=True))
    assert cnt.frame_count == 1
    sites = [n for n in cnt.graphs[0].graph.nodes if "autograd_function_Square" in str(n.target)]
    assert len(sites) == 2


@pytest.mark.parametrize("backend", BACKENDS)
def test_data_dependent_backward(backend):
    def fn(x):
        return DataDependent.apply(x.sin()).cos()

    x = torch.randn(6, requires_grad=True)
    check(fn, x, backend=backend)
    ours, theirs, explained = counts(fn, x)
    assert ours[0] <= theirs[0]
    assert "data-dependent" in str(explained.break_reasons[0])


def test_no_grad_apply_does_not_trace_the_backward():
    def fn(x):
        with torch.no_grad():
            a = DataDependent.apply(x)  # never differentiated: its backward is not traced
        return a + x

    x = torch.randn(4, requires_grad=True)
    check(fn, x)
    ours, theirs, _ = counts(fn, x)
    assert ours == (1, 0) and ours[0] <= theirs[0]


def test_recompiles_when_the_methods_are_replaced():
    class Fn(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g * 2

    def fn(x):
        return Fn.apply(x)

    cnt = CompileCounter()
    opt = pydynamo.optimize(cnt)(fn)
    x = torch.randn(3, requires_grad=True)

    def grad(f):
        g, = torch.autograd.grad(f(x).sum(), x)
        return g

    assert torch.equal(grad(opt), torch.full((3,), 2.0)) and cnt.frame_count == 1
    Fn.backward = staticmethod(lambda ctx, g: g * 5)
    assert torch.equal(grad(opt), torch.full((3,), 5.0)) and cnt.frame_count == 2
    Fn.forward = staticmethod(lambda ctx, x: x * 7)
    assert torch.equal(opt(x), x * 7) and cnt.frame_count == 3
    assert torch.equal(grad(opt), torch.full((3,), 5.0)) and cnt.frame_count == 3


def test_apply_read_as_a_value():
    square = Square.apply

    def fn(x):
        return square(x) + 1

    check(fn, torch.randn(3, requires_grad=True))
    ours, theirs, _ = counts(fn, torch.randn(3, requires_grad=True))
    assert ours == (1, 0) and ours[0] <= theirs[0]


def test_saved_tensors_are_checked_and_hooked_as_in_eager():
    def fn(x):
        return Square.apply(x)

    opt = pydynamo.optimize("eager")(fn)
    a = torch.randn(3, requires_grad=True)
    b = a * 1
    out = opt(b)
    b.add_(1)  # modified after it was saved: autograd refuses, as in eager
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.sum().backward()

    packed = []

    def run(f):
        packed.clear()
        with torch.autograd.graph.saved_tensors_hooks(lambda t: packed.append(t) or t, lambda t: t):
            y = f(a)
        y.sum().backward()
        return len(packed)

    opt(a)  # compiled outside the hooks
    assert run(opt) == run(fn) == 1


def test_dynamic_shapes_one_graph():
    def fn(x):
        return Square.apply(x.view(x.shape[0], -1)).sum(1)

    cnt = CompileCounter()
    opt = pydynamo.optimize(cnt, dynamic=True)(fn)
    for n in (3, 5, 7):
        x = torch.randn(n, 4, requires_grad=True)
        out = opt(x)
        g, = torch.autograd.grad(out.sum(), x)
        assert torch.equal(out, fn(x)) and torch.equal(g, 2 * x)
    assert cnt.frame_count == 1


# ---- refused: the apply runs natively, with eager's result ---------------------------------

class InplaceInput(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        x.mul_(2)
        return x

    @staticmethod
    def backward(ctx, g):
        return g * 2


class Dirty(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        x.mul_(2)
        ctx.mark_dirty(x)
        return x

    @staticmethod
    def backward(ctx, g):
        return g * 2


_LOG = []


class SideEffect(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        _LOG.append(1)
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return g * 2


class Escapes(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, store):
        y = x * 2
        store.append(y)
        return y

    @staticmethod
    def backward(ctx, g):
        return g * 2, None


class ReadsGradMode(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return g * (3 if torch.is_grad_enabled() else 2)


def _escapes(x):
    store = []
    out = Escapes.apply(x, store)
    return out + store[0]


class BackwardMutates(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.calls = []
        return x * 2

    @staticmethod
    def backward(ctx, g):
        ctx.calls.append(1)  # a second backward (retain_graph) sees two entries
        return g * len(ctx.calls)


@pytest.mark.parametrize("fn, reason", [
    (lambda x: InplaceInput.apply(x * 1).cos(), "in place"),
    (lambda x: Dirty.apply(x * 1).cos(), "mark_dirty"),
    (lambda x: SideEffect.apply(x).cos(), "side effect"),
    (_escapes, "kept outside"),
    (lambda x: ReadsGradMode.apply(x).cos(), "global state"),
    (lambda x: BackwardMutates.apply(x).cos(), "would change again"),
])
def test_refused_applies_run_natively(fn, reason):
    x = torch.randn(4, requires_grad=True)
    _LOG.clear()
    check(fn, x)
    _, _, explained = counts(fn, x)
    assert explained.graph_break_count >= 1
    assert reason in str(explained.break_reasons[0])


def test_backward_with_grad_enabled_matches_eager():
    """create_graph=True: the backward runs with grad mode on; one that reads it is refused."""
    def fn(x):
        return ReadsGradMode.apply(x)

    x = torch.randn(3, requires_grad=True)
    g, = torch.autograd.grad(pydynamo.optimize("eager")(fn)(x).sum(), x, create_graph=True)
    r, = torch.autograd.grad(fn(x).sum(), x, create_graph=True)
    assert torch.equal(g, r)


class NoGradInBackward(torch.autograd.Function):
    """torchao's float8 backward computes its scales under no_grad."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * 2

    @staticmethod
    def backward(ctx, g):
        x, = ctx.saved_tensors
        with torch.no_grad():
            s = (x * x).sum()
        return g * x * s + g


@pytest.mark.parametrize("create_graph", [False, True])
def test_a_no_grad_block_in_backward_switches_when_it_runs(create_graph):
    """The block is traced, and switches grad mode when the backward runs, restoring the mode it
    found then (create_graph=True: on), not the mode the trace assumed: second derivatives equal
    eager's (the block's ops are not differentiated again in either)."""
    def fn(x):
        return NoGradInBackward.apply(x).sin().sum()

    def grads(f):
        x = torch.arange(1.0, 4.0, requires_grad=True)
        g, = torch.autograd.grad(f(x), x, create_graph=create_graph)
        if not create_graph:
            return g, None
        gg, = torch.autograd.grad(g.sum(), x)
        return g.detach(), gg
    pydynamo.reset()
    explained = pydynamo.explain(fn)(torch.arange(1.0, 4.0, requires_grad=True))
    assert explained.graph_count == 1 and explained.graph_break_count == 0
    pydynamo.reset()
    got, want = grads(pydynamo.optimize("eager")(fn)), grads(fn)
    assert torch.allclose(got[0], want[0])
    assert create_graph is False or torch.allclose(got[1], want[1])


class Inner(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.round()

    @staticmethod
    def backward(ctx, g):  # straight-through
        return g


class OuterCallsInner(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * 3

    @staticmethod
    def backward(ctx, g):
        x, = ctx.saved_tensors
        return Inner.apply(g * x) + g


def test_an_apply_inside_a_backward_is_traced_with_grad_off():
    """In a backward run without create_graph=True, autograd records no node for a Function
    applied there: traced as its forward only, equal to eager. Under create_graph=True its own
    backward would be needed: a clear error, never a gradient without it."""
    def fn(x):
        return OuterCallsInner.apply(x).sum()
    pydynamo.reset()
    explained = pydynamo.explain(fn)(torch.randn(4, requires_grad=True))
    assert explained.graph_count == 1 and explained.graph_break_count == 0
    x = torch.linspace(-2, 2, 5, requires_grad=True)
    got, = torch.autograd.grad(pydynamo.optimize("eager")(fn)(x), x)
    want, = torch.autograd.grad(fn(x), x)
    assert torch.equal(got, want)
    g, = torch.autograd.grad(pydynamo.optimize("eager")(fn)(x), x, create_graph=True)
    with pytest.raises(RuntimeError, match="differentiate it outside compiled code"):
        torch.autograd.grad(g.sum(), x)


# ---- training --------------------------------------------------------------------------------

class LinearFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, b):
        ctx.save_for_backward(x, w)
        return x @ w.t() + b

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        return g @ w, g.t() @ x, g.sum(0)


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(8, 16)
        self.b = torch.nn.Linear(16, 4)

    def forward(self, x):
        h = LinearFn.apply(x, self.a.weight, self.a.bias)
        h = RoundSTE.apply(torch.relu(h) * 4) / 4
        return LinearFn.apply(h, self.b.weight, self.b.bias)


@pytest.mark.parametrize("backend", [*BACKENDS, "triton"])
def test_training_step(backend):
    if backend == "triton":
        pytest.importorskip("triton")
    torch.manual_seed(0)
    ref = Net()
    model = Net()
    model.load_state_dict(ref.state_dict())
    opt_model = pydynamo.optimize(backend)(model)
    sgd, ref_sgd = (torch.optim.SGD(m.parameters(), lr=0.1) for m in (model, ref))
    for step in range(3):
        x, y = torch.randn(5, 8), torch.randn(5, 4)
        for m, o in ((opt_model, sgd), (ref, ref_sgd)):
            o.zero_grad()
            torch.nn.functional.mse_loss(m(x), y).backward()
            o.step()
    for p, q in zip(model.parameters(), ref.parameters()):
        assert torch.allclose(p, q, atol=1e-5, rtol=1e-4)
    ours, theirs, _ = counts(model, torch.randn(5, 8))
    assert ours == (1, 0) and ours[0] <= theirs[0]


# ---- nesting and guards ------------------------------------------------------------------

class CheckpointInside(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w):
        from torch.utils.checkpoint import checkpoint
        ctx.save_for_backward(x, w)
        return Square.apply(checkpoint(lambda a, b: (a @ b).sin(), x, w, use_reentrant=False))

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        return g @ w.t(), x.t() @ g


@pytest.mark.parametrize("backend", BACKENDS)
def test_nested_in_checkpoint_and_checkpoint_in_forward(backend):
    from torch.utils.checkpoint import checkpoint

    def in_checkpoint(x, w):
        return checkpoint(lambda a, b: Square.apply(a @ b).cos(), x, w, use_reentrant=False)

    def in_forward(x, w):
        return CheckpointInside.apply(x, w)

    x, w = torch.randn(4, 4, requires_grad=True), torch.randn(4, 4, requires_grad=True)
    for fn in (in_checkpoint, in_forward):
        check(fn, x, w, backend=backend)
        pydynamo.reset()
        pydynamo.optimize(backend, fullgraph=True)(fn)(x, w)  # one graph, no break


SCALE = 2.0


class ReadsGlobal(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * SCALE

    @staticmethod
    def backward(ctx, g):
        return g * SCALE * 10


def test_globals_read_by_forward_and_backward_are_guarded():
    global SCALE
    cnt = CompileCounter()
    opt = pydynamo.optimize(cnt)(lambda x: ReadsGlobal.apply(x))
    x = torch.randn(3, requires_grad=True)
    try:
        for scale in (2.0, 3.0):
            SCALE = scale
            out = opt(x)
            g, = torch.autograd.grad(out.sum(), x)
            assert torch.equal(out, x * scale) and torch.equal(g, torch.full((3,), scale * 10))
        assert cnt.frame_count == 2
    finally:
        SCALE = 2.0


def test_compiling_under_saved_tensors_hooks_does_not_call_them():
    """The trace's ops on fake tensors never reach the saved-tensor hooks active around it."""
    def fn(x):
        return Square.apply(x).sin()

    def packed(f, x):
        seen = []
        with torch.autograd.graph.saved_tensors_hooks(lambda t: seen.append(type(t)) or t, lambda t: t):
            f(x).sum().backward()
        return seen

    x = torch.randn(3, requires_grad=True)
    pydynamo.reset()
    assert packed(pydynamo.optimize("eager")(fn), x) == packed(fn, x) == [torch.Tensor, torch.Tensor]
