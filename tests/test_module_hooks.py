"""nn.Module hooks run as nn.Module.__call__ runs them, inside the graph; Tensor.register_hook.

Each program runs eagerly and compiled on identical fresh state; outputs, gradients and what
the hooks logged must be equal, and the graph count at most torch.compile's on the program.
"""
import pytest
import torch
import torch._dynamo
import torch.nn as nn
from torch.nn.modules import module as module_mod

import pydynamo
from pydynamo.exc import Unsupported
from pydynamo.testing import CompileCounter

LOG = []


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = nn.Linear(4, 3)

    def forward(self, x, scale=1.0):
        return self.b(self.a(x).relu() * scale)


def _pre_tensor(m, args):
    LOG.append("pre_tensor")
    return args[0] * 2  # not a tuple: wrapped into one


def _pre_tuple(m, args):
    LOG.append("pre_tuple")
    return (args[0] + 1,)


def _pre_none(m, args):
    LOG.append(("pre_none", type(m).__name__, len(args)))


def _pre_kwargs(m, args, kwargs):
    LOG.append(("pre_kwargs", sorted(kwargs)))
    return (args[0] - 1,), {**kwargs, "scale": 0.5}


def _post(m, args, out):
    LOG.append("post")
    return out * 3


def _post_none(m, args, out):
    LOG.append(("post_none", tuple(out.shape)))


def _post_kwargs(m, args, kwargs, out):
    LOG.append(("post_kwargs", sorted(kwargs)))
    return out + kwargs.get("scale", 0.0)


HOOKS = {
    "pre_tensor": lambda m: m.a.register_forward_pre_hook(_pre_tensor),
    "pre_tuple": lambda m: m.b.register_forward_pre_hook(_pre_tuple),
    "pre_none": lambda m: m.register_forward_pre_hook(_pre_none),
    "pre_kwargs": lambda m: m.register_forward_pre_hook(_pre_kwargs, with_kwargs=True),
    "post": lambda m: m.a.register_forward_hook(_post),
    "post_none": lambda m: m.register_forward_hook(_post_none),
    "post_kwargs": lambda m: m.register_forward_hook(_post_kwargs, with_kwargs=True),
    "prepend": lambda m: (m.a.register_forward_hook(_post_none),
                          m.a.register_forward_hook(_post, prepend=True)),
    "prepend_pre": lambda m: (m.register_forward_pre_hook(_pre_kwargs, with_kwargs=True),
                              m.register_forward_pre_hook(_pre_none, prepend=True)),
    "always_call": lambda m: m.b.register_forward_hook(_post, always_call=True),
    "all": lambda m: [HOOKS[k](m) for k in ("pre_tensor", "pre_tuple", "pre_none", "pre_kwargs",
                                            "post", "post_none", "post_kwargs", "always_call")],
}


def make(hooks):
    torch.manual_seed(0)
    net = Net()
    for h in hooks:
        HOOKS[h](net)
    x = torch.randn(2, 4, requires_grad=True)
    return net, x


def call_net(net, x):
    return net(x, scale=2.0).sin()


def run(fn, hooks, compiled):
    """Output, gradients (input and parameters) and the hook log of one forward and backward."""
    net, x = make(hooks)
    LOG.clear()
    out = compiled(fn)(net, x) if compiled else fn(net, x)
    out.sum().backward()
    return out.detach(), [x.grad] + [p.grad for p in net.parameters()], list(LOG)


def assert_as_eager(fn, hooks, backend, exact=True):
    want = run(fn, hooks, None)
    got = run(fn, hooks, pydynamo.optimize(backend))
    close = torch.equal if exact else (lambda a, b: torch.allclose(a, b, atol=1e-6))
    assert close(got[0], want[0])
    assert all(close(g, w) for g, w in zip(got[1], want[1]))
    assert got[2] == want[2]
    return want


def graph_counts(fn, *args):
    """(pydynamo's, torch.compile's) graph counts for ``fn(*args)``."""
    ours = pydynamo.explain(fn)(*args)
    torch._dynamo.reset()
    theirs = torch._dynamo.explain(fn)(*args)
    torch._dynamo.reset()
    LOG.clear()
    return ours, theirs


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
@pytest.mark.parametrize("hooks", [[k] for k in HOOKS] + [[]])
def test_forward_hooks_as_eager_in_one_graph(hooks, backend):
    assert_as_eager(call_net, hooks, backend)
    ours, theirs = graph_counts(call_net, *make(hooks))
    assert (ours.graph_count, ours.graph_break_count) == (1, 0), ours.break_reasons
    assert ours.graph_count <= theirs.graph_count


def test_hook_order_as_eager():
    want = run(call_net, ["prepend", "prepend_pre", "post_kwargs"], None)[2]
    assert want[0] == ("pre_none", "Net", 1) and want[1][0] == "pre_kwargs"
    assert_as_eager(call_net, ["prepend", "prepend_pre", "post_kwargs"], "eager")


@pytest.fixture
def global_hooks():
    handles = []
    yield handles
    for h in handles:
        h.remove()


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_global_hooks_as_eager(global_hooks, backend):
    global_hooks.append(module_mod.register_module_forward_pre_hook(_pre_none))
    global_hooks.append(module_mod.register_module_forward_hook(
        lambda m, a, o: LOG.append(("global_post", type(m).__name__)) or o * 2))
    global_hooks.append(module_mod.register_module_forward_hook(_post_kwargs, with_kwargs=True))
    global_hooks.append(module_mod.register_module_forward_hook(_post_none, always_call=True))
    want = assert_as_eager(call_net, ["pre_kwargs", "post"], backend)
    # global hooks first, on every module, then the module's own
    assert want[2][:2] == [("pre_none", "Net", 1), ("pre_kwargs", ["scale"])]
    ours, theirs = graph_counts(call_net, *make(["pre_kwargs", "post"]))
    assert ours.graph_count == 1 and ours.graph_count <= theirs.graph_count


def test_global_hook_runs_on_a_module_made_in_the_trace(global_hooks):
    global_hooks.append(module_mod.register_module_forward_hook(
        lambda m, a, o: LOG.append(type(m).__name__) or o + 1))

    def fn(x):
        return nn.ReLU()(x) * 2
    x = torch.randn(5)
    LOG.clear()
    want = fn(x)
    assert LOG == ["ReLU"]
    LOG.clear()
    assert torch.equal(pydynamo.optimize("eager")(fn)(x), want) and LOG == ["ReLU"]
    assert pydynamo.explain(fn)(x).graph_count == 1


def test_inductor_training_step_with_hooks():
    hooks = ["pre_tensor", "pre_kwargs", "post", "post_kwargs"]
    results = []
    for compiled in (False, True):
        net, x = make(hooks)
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        fwd = pydynamo.optimize("inductor")(call_net) if compiled else call_net
        LOG.clear()
        losses = []
        for _ in range(2):
            loss = fwd(net, x).square().mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses.append(loss.detach())
        results.append((losses, [p.detach().clone() for p in net.parameters()], list(LOG)))
    (l0, p0, log0), (l1, p1, log1) = results
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(l0 + p0, l1 + p1))
    assert log0 == log1


# ---- guards: adding, removing, changing a hook recompiles ----------------------------------

def test_adding_and_removing_hooks_recompiles(global_hooks, monkeypatch):
    monkeypatch.setattr(pydynamo.config, "cache_size_limit", 64)
    net, x = make([])
    cnt = CompileCounter()
    fn = pydynamo.optimize(cnt)(call_net)

    def check(compiles):
        LOG.clear()
        want, want_log = call_net(net, x), list(LOG)
        LOG.clear()
        assert torch.equal(fn(net, x), want) and LOG == want_log
        assert cnt.frame_count == compiles

    check(1)
    h = net.a.register_forward_hook(_post)
    check(2)
    check(2)  # cached
    h2 = net.register_forward_pre_hook(_pre_kwargs, with_kwargs=True)
    check(3)
    h.remove()
    check(4)
    h2.remove()
    check(4)  # back to no hooks: the first entry
    h3 = net.b.register_forward_hook(_post)
    check(5)
    net.b._forward_hooks[h3.id] = _post_none  # same key, another hook
    check(6)
    h4 = net.b.register_forward_hook(_post_kwargs, with_kwargs=True)
    check(7)
    net.b._forward_hooks.move_to_end(h4.id, last=False)  # the same hooks in another order
    check(8)
    global_hooks.append(module_mod.register_module_forward_pre_hook(_pre_tuple))
    check(9)
    global_hooks.pop().remove()
    check(9)
    h5 = net.b.register_forward_hook(_post_none, always_call=True)
    check(10)
    del net.b._forward_hooks_always_called[h5.id]  # always_call changes what an exception does
    check(11)


def test_closure_of_a_hook_is_guarded():
    net, x = make([])
    factor = [2.0]
    scale = factor[0]
    net.a.register_forward_hook(lambda m, a, o: o * scale)
    cnt = CompileCounter()
    fn = pydynamo.optimize(cnt)(call_net)
    assert torch.equal(fn(net, x), call_net(net, x))
    scale = 5.0  # noqa: F841 - the hook's closure cell
    assert torch.equal(fn(net, x), call_net(net, x)) and cnt.frame_count == 2


# ---- side effects and exceptions ---------------------------------------------------------

def test_hook_side_effects_replayed():
    seen = []
    net, x = make([])
    net.a.register_forward_hook(lambda m, a, o: seen.append(o.detach() * 1))
    net.register_forward_pre_hook(lambda m, a: seen.append(len(seen)))
    fn = pydynamo.optimize("aot_eager")(call_net)
    out = fn(net, x)
    assert pydynamo.explain(call_net)(net, x).graph_count == 1
    seen.clear()
    out = fn(net, x)
    assert len(seen) == 2 and seen[0] == 0 and torch.equal(seen[1], net.a.forward(x).detach())
    assert torch.equal(out, call_net(net, x))


class Boom(nn.Module):
    def forward(self, x):
        raise ValueError("boom")


def catch(m, x):
    try:
        return m(x)
    except ValueError:
        return x + 1


@pytest.mark.parametrize("always", [False, True])
def test_exception_in_forward_as_eager(always):
    m = Boom()
    m.register_forward_pre_hook(lambda mod, a: LOG.append("pre"))
    m.register_forward_hook(lambda mod, a, o: LOG.append("always"), always_call=always)
    x = torch.ones(2)
    for fn in (catch, lambda m, x: m(x) * 2):
        LOG.clear()
        try:
            want = fn(m, x)
        except ValueError as e:
            want = e
        want_log = list(LOG)
        LOG.clear()
        try:
            got = pydynamo.optimize("eager")(fn)(m, x)
        except ValueError as e:
            got = e
        assert LOG == want_log == (["pre", "always"] if always else ["pre"])
        assert type(got) is type(want) and (isinstance(want, Exception) or torch.equal(got, want))
    # without always_call the exception is simulated: caught inside the graph
    assert pydynamo.explain(catch)(m, x).graph_count == (0 if always else 1)


def test_pre_hook_with_kwargs_returning_a_bad_value_raises_as_eager():
    net, x = make([])
    net.register_forward_pre_hook(lambda m, a, k: a, with_kwargs=True)  # a 1-tuple
    with pytest.raises(RuntimeError, match="forward pre-hook must return None or a tuple"):
        call_net(net, x)
    with pytest.raises(RuntimeError, match="forward pre-hook must return None or a tuple"):
        pydynamo.optimize("eager")(call_net)(net, x)


def test_class_overriding_call_is_inlined():
    class Wrapped(nn.Linear):
        def __call__(self, x):
            return super().__call__(x) * 10

    m = Wrapped(3, 3)
    m.register_forward_hook(_post)
    x = torch.randn(2, 3)
    for fn in (lambda x: m(x) + 1, lambda x: nn.Module.__call__(m, x), lambda x: m._call_impl(x)):
        LOG.clear()
        want, want_log = fn(x), list(LOG)
        LOG.clear()
        assert torch.equal(pydynamo.optimize("eager")(fn)(x), want) and LOG == want_log == ["post"]
        assert pydynamo.explain(fn)(x).graph_count == 1
    cnt = CompileCounter()
    fn = pydynamo.optimize(cnt)(lambda x: m(x) + 1)
    fn(x)
    Wrapped.__call__ = lambda self, x: nn.Module.__call__(self, x) * 100  # the class is guarded
    assert torch.equal(fn(x), m(x) + 1) and cnt.frame_count == 2


# ---- backward hooks of modules: a graph break, exact -------------------------------------

BACKWARD_HOOKS = {
    "full": lambda m: m.a.register_full_backward_hook(
        lambda mod, gi, go: LOG.append(("full", [g.sum().item() for g in go])) or (gi[0] * 2,)),
    "full_pre": lambda m: m.b.register_full_backward_pre_hook(
        lambda mod, go: LOG.append("full_pre") or (go[0] * 3,)),
    "legacy": lambda m: m.a.register_backward_hook(lambda mod, gi, go: LOG.append("legacy")),
}


@pytest.mark.filterwarnings("ignore:Using a non-full backward hook")
@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
@pytest.mark.parametrize("kind", list(BACKWARD_HOOKS))
def test_backward_hooks_break_and_match_eager(kind, backend):
    HOOKS[kind] = BACKWARD_HOOKS[kind]
    try:
        assert_as_eager(call_net, [kind, "post"], backend, exact=False)
        ours, theirs = graph_counts(call_net, *make([kind, "post"]))
    finally:
        del HOOKS[kind]
    assert ours.graph_break_count >= 1 and "backward" in ours.break_reasons[0].reason
    assert ours.graph_count <= theirs.graph_count


def test_global_backward_hook_breaks(global_hooks):
    global_hooks.append(module_mod.register_module_full_backward_hook(lambda m, gi, go: LOG.append("bw")))
    assert_as_eager(call_net, [], "aot_eager", exact=False)
    ours, _ = graph_counts(call_net, *make([]))
    assert "backward hooks (global)" in ours.break_reasons[0].reason


# ---- Tensor.register_hook ---------------------------------------------------------------

def _grad_hook(g):
    LOG.append("tensor_hook")
    return g * 3


def on_input(x, w):
    x.register_hook(_grad_hook)
    w.register_hook(lambda g: g * w.shape[0])  # a lambda made in the trace, rebuilt after it
    return (x * w).sin().sum()


def on_intermediate(x, w):
    y = x * w
    y.register_hook(_grad_hook)
    return y.sin().sum()


def on_used_intermediate(x, w):
    y = x * w
    z = y * 3  # a use before the hook: its gradient passes through the hook in eager
    y.register_hook(_grad_hook)
    return (z + y.sin()).sum()


def retain(x, w):
    y = x * w
    y.retain_grad()
    return y, (y * 2).sum()


def on_parameter(m, x):
    m.weight.register_hook(_grad_hook)
    return m(x).sum()


def _tensor_run(fn, compiled, backend):
    torch.manual_seed(0)
    x, w = torch.randn(3, requires_grad=True), torch.randn(3, requires_grad=True)
    LOG.clear()
    out = pydynamo.optimize(backend)(fn)(x, w) if compiled else fn(x, w)
    y = None
    if isinstance(out, tuple):
        y, out = out
    out.backward()
    return [x.grad, w.grad] + ([y.grad] if y is not None else []), list(LOG)


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
@pytest.mark.parametrize("fn, graphs, breaks", [(on_input, 1, 0), (on_intermediate, 2, 1),
                                                (on_used_intermediate, 0, 1), (retain, 2, 1)])
def test_tensor_hooks_as_eager(fn, graphs, breaks, backend):
    want, got = _tensor_run(fn, False, backend), _tensor_run(fn, True, backend)
    assert all(torch.allclose(a, b) for a, b in zip(want[0], got[0])) and want[1] == got[1]
    x, w = torch.randn(3, requires_grad=True), torch.randn(3, requires_grad=True)
    ours = pydynamo.explain(fn)(x, w)
    assert (ours.graph_count, ours.graph_break_count) == (graphs, breaks), ours.break_reasons
    if fn is not retain:  # (torch.compile runs retain() eagerly: 0 graphs)
        torch._dynamo.reset()
        assert graphs <= torch._dynamo.explain(fn)(x, w).graph_count
        torch._dynamo.reset()


def test_tensor_hook_on_a_parameter_inside_a_module_call():
    want, got = [], []
    for out, compiled in ((want, False), (got, True)):
        torch.manual_seed(0)
        m, x = nn.Linear(3, 2), torch.randn(4, 3)
        LOG.clear()
        (pydynamo.optimize("aot_eager")(on_parameter) if compiled else on_parameter)(m, x).backward()
        out += [m.weight.grad, m.bias.grad, list(LOG)]
    assert torch.equal(want[0], got[0]) and torch.equal(want[1], got[1]) and want[2] == got[2] == ["tensor_hook"]
    assert pydynamo.explain(on_parameter)(m, x).graph_count == 1


def test_tensor_hook_errors_and_handles_as_eager():
    def no_grad_input(x):
        x.register_hook(_grad_hook)
        return x * 2

    with pytest.raises(RuntimeError, match="doesn't require gradient"):
        pydynamo.optimize("eager")(no_grad_input)(torch.ones(2))

    def uses_handle(x):
        h = x.register_hook(_grad_hook)
        y = (x * 2).sum()
        h.remove()
        return y

    x = torch.ones(2, requires_grad=True)
    LOG.clear()
    pydynamo.optimize("aot_eager")(uses_handle)(x).backward()
    assert LOG == [] and torch.equal(x.grad, torch.full((2,), 2.0))

    def changed_in_place(x):
        x.register_hook(_grad_hook)
        x.mul_(2)
        return x.sum()
    with pytest.raises(Unsupported, match="changed in place"):
        pydynamo.optimize("eager", fullgraph=True)(changed_in_place)(torch.ones(2).requires_grad_().clone())


def test_post_accumulate_grad_hook_and_retain_grad_on_inputs():
    def fn(x, y):
        x.register_post_accumulate_grad_hook(lambda p: LOG.append(("acc", p.grad.sum().item())))
        y.retain_grad()  # y is not a leaf: its .grad is kept
        return (x * y).sum()

    results = []
    for compiled in (False, True):
        x = torch.ones(3, requires_grad=True)
        y = torch.full((3,), 2.0, requires_grad=True) * 1
        LOG.clear()
        (pydynamo.optimize("aot_eager")(fn) if compiled else fn)(x, y).backward()
        results.append((x.grad, y.grad, list(LOG)))
    (xg0, yg0, log0), (xg1, yg1, log1) = results
    assert torch.equal(xg0, xg1) and torch.equal(yg0, yg1) and log0 == log1 == [("acc", 6.0)]
    x, y = torch.ones(3, requires_grad=True), torch.ones(3, requires_grad=True) * 1
    assert pydynamo.explain(fn)(x, y).graph_count == 1
    with pytest.raises(RuntimeError, match="non-leaf"):  # as eager raises
        pydynamo.optimize("eager")(fn)(torch.ones(3, requires_grad=True) * 1, torch.ones(3))


def test_hook_tables_changed_by_the_trace(global_hooks):
    lin = nn.Linear(3, 3)

    def fn(x):
        lin._forward_hooks[-1] = lambda m, a, o: o * 0  # written through the table itself
        r = lin(x)
        del lin._forward_hooks[-1]
        return r + lin(x)
    x = torch.randn(2, 3)
    assert torch.equal(pydynamo.optimize("eager")(fn)(x), fn(x)) and not lin._forward_hooks
    assert pydynamo.explain(fn)(x).graph_count == 1
    # a container sliced in the trace (a module made there) runs the global hooks too
    seq = nn.Sequential(nn.Linear(3, 3), nn.ReLU(), nn.Linear(3, 3))
    global_hooks.append(module_mod.register_module_forward_hook(
        lambda m, a, o: LOG.append(type(m).__name__) or o + 1))
    sliced = lambda x: seq[:2](x)  # noqa: E731
    LOG.clear()
    want, want_log = sliced(x), list(LOG)
    LOG.clear()
    assert torch.equal(pydynamo.optimize("eager")(sliced)(x), want) and LOG == want_log
    assert want_log == ["Linear", "ReLU", "Sequential"]
