"""The context a backend compiles in (issue 42, first part): as under torch.compile, a
TracingContext holding the graph's fake mode is installed while the backend runs, so
``detect_fake_mode(example_inputs)`` and ``TracingContext.try_get()`` find it, and backends built
on torch's helpers (``aot_autograd``) work unchanged."""
import pytest
import torch
from torch._guards import TracingContext, detect_fake_mode

import pydynamo


class Recorder:
    """A backend that records what it finds in its compile context, then runs the graph."""

    def __init__(self):
        self.seen = []

    def __call__(self, gm, example_inputs):
        ctx = TracingContext.try_get()
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        fakes = [n.meta["example_value"] for n in placeholders if isinstance(n.meta.get("example_value"), torch.Tensor)]
        self.seen.append({
            "context": ctx,
            "mode": detect_fake_mode(example_inputs),
            "fake_modes": {id(f.fake_mode) for f in fakes},
        })
        return gm.forward


def _checks(seen):
    assert seen, "the backend was not called"
    for entry in seen:
        assert entry["context"] is not None
        assert entry["mode"] is not None and entry["context"].fake_mode is entry["mode"]
        assert entry["fake_modes"] <= {id(entry["mode"])}  # the graph's own fakes are that mode's


@pytest.mark.parametrize("dynamic", [False, True])
def test_the_backend_finds_the_graphs_fake_mode(dynamic):
    def f(x, y):
        return (x @ y).relu().sum(0)
    rec = Recorder()
    pydynamo.reset()
    compiled = pydynamo.optimize(rec, dynamic=dynamic)(f)
    for n in (3, 5):
        x, y = torch.randn(n, 4), torch.randn(4, 2)
        assert torch.allclose(compiled(x, y), f(x, y))
    _checks(rec.seen)


def test_a_module_and_a_graph_break():
    lin = torch.nn.Linear(4, 4)

    def f(x):
        y = lin(x).sin()
        print("", end="")  # a break: two graphs, each compiled in its own context
        return lin(y).cos()
    rec = Recorder()
    pydynamo.reset()
    x = torch.randn(2, 4)
    assert torch.allclose(pydynamo.optimize(rec)(f)(x), f(x))
    assert len(rec.seen) == 2
    _checks(rec.seen)
    assert rec.seen[0]["mode"] is not rec.seen[1]["mode"]


def test_torchs_aot_autograd_helper_as_a_user_backend():
    """``torch._dynamo.backends.common.aot_autograd`` (the helper third-party backends build on)
    reads the compile context; training through it equals eager."""
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    compiled_graphs = []

    def compiler(gm, example_inputs):
        compiled_graphs.append(gm)
        return make_boxed_func(gm.forward)
    backend = aot_autograd(fw_compiler=compiler, bw_compiler=compiler)
    w = torch.randn(4, 3, requires_grad=True)

    def f(x):
        return (x @ w).tanh().sum()
    pydynamo.reset()
    x = torch.randn(5, 4)
    out = pydynamo.optimize(backend)(f)(x)
    out.backward()
    got = w.grad.clone()
    w.grad = None
    f(x).backward()
    assert torch.allclose(got, w.grad)
    assert len(compiled_graphs) == 2  # forward and backward
