"""Random chains of the ops the triton backend fuses (pointwise, reductions kept or broadcast
back, softmax, layer_norm, matmuls in ATen, views, cumsum, cat, max, pad, where), on shapes
whose rows are held in registers or looped, under optimize("triton", fullgraph=True), against
eager. Fixed seeds: the programs are the same every run."""
import os
import random

os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported: kernels run on the CPU

import pytest  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

pytest.importorskip("triton")

import pydynamo  # noqa: E402
from pydynamo.backends.triton import kernel, scheduler  # noqa: E402

os.environ["PYDYNAMO_TRITON_STRICT"] = "1"

UNARY = [torch.exp, torch.tanh, torch.sigmoid, torch.relu, lambda t: t * 2 + 1, torch.neg,
         lambda t: t.abs().sqrt(), F.gelu]
STEPS = ["un", "bin_self", "red_keep", "softmax", "ln", "mm", "view", "cumsum", "cat", "max",
         "pad", "where"]


def plan_for(seed):
    rng = random.Random(seed)
    steps = [(rng.choice(STEPS), rng.randrange(len(UNARY)), rng.choice([0, 1]))
             for _ in range(rng.randint(3, 9))]
    shape = rng.choice([(8, 8), (5, 12), (33, 16), (6, 70), (70, 6)])
    return steps, shape, rng.random() < 0.4


def run(plan, x, w):
    outs = []
    for step, u, d in plan:
        R, C = x.shape
        if step == "un":
            x = UNARY[u](x)
        elif step == "bin_self":
            x = x * x.flip(0) - x
        elif step == "red_keep":
            x = x - x.mean(d, keepdim=True)
        elif step == "softmax":
            x = torch.softmax(x, d)
        elif step == "ln":
            x = F.layer_norm(x, (C,))
        elif step == "mm":
            x = (x @ w[:C, :C]) + x
        elif step == "view":
            x = x.t().contiguous().view(R, C) if R == C else x.reshape(C, R).t()
        elif step == "cumsum":
            x = x.cumsum(d) * 0.1
        elif step == "cat":
            x = torch.cat([x[:, C // 2:], x[:, :C // 2]], 1) + x
        elif step == "max":
            x = x + x.max(1, keepdim=True).values + x.amin(0)
        elif step == "pad":
            x = x + F.pad(x[:, 1:], (0, 1))
        elif step == "where":   # a threshold away from the near-zero values red_keep makes
            x = torch.where(x > 0.25, x, x.sum(0, keepdim=True) * 0.5)
        outs.append(x.sum(1))
    return x, torch.stack(outs).sum(0)


def setup(seed, monkeypatch):
    """The seed's plan and inputs (x, w), with rows looped where the plan says so."""
    plan, (R, C), looped = plan_for(seed)
    if looped:
        monkeypatch.setattr(scheduler, "PERSISTENT_MAX", 16)
        monkeypatch.setattr(scheduler, "COLUMN_PERSISTENT_MAX", 4)
        monkeypatch.setattr(kernel, "LOOP_RBLOCK", 8)
    x = torch.randn(R, C, generator=torch.Generator().manual_seed(seed))
    w = torch.randn(128, 128, generator=torch.Generator().manual_seed(1000 + seed)) * 0.1
    return plan, x, w


@pytest.mark.parametrize("seed", range(24))
def test_random_chain_matches_eager(seed, monkeypatch):
    plan, x, w = setup(seed, monkeypatch)

    def fn(x, w):
        return run(plan, x, w)
    pydynamo.reset()
    got = pydynamo.optimize("triton", fullgraph=True)(fn)(x, w)
    want = fn(x, w)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, atol=2e-4, rtol=2e-4, equal_nan=True)
    pydynamo.reset()


@pytest.mark.parametrize("seed", [*range(12), 24])
def test_random_chain_gradients_match_eager(seed, monkeypatch):
    """The same chains (without max, whose ties make gradients ill-defined) trained: loss and the
    gradients of x and w against eager's. Seed 24's backward replays a view on a buffer that the
    trace had transposed: it must be laid out as traced, or the view cannot be made."""
    plan, x0, w0 = setup(seed, monkeypatch)
    plan = [p for p in plan if p[0] != "max"]

    def fn(x, w):
        a, b = run(plan, x, w)
        return (a * a).sum() + b.sum()
    results = []
    for compile_it in (True, False):
        x, w = x0.clone().requires_grad_(), w0.clone().requires_grad_()
        pydynamo.reset()
        loss = (pydynamo.optimize("triton", fullgraph=True)(fn) if compile_it else fn)(x, w)
        loss.backward()
        results.append((loss.detach(), x.grad, w.grad))
    pydynamo.reset()
    for got, want in zip(*results):
        torch.testing.assert_close(got, want, atol=1e-3, rtol=1e-3, equal_nan=True)


def test_a_view_that_cannot_be_made_runs_the_graph_with_aten(monkeypatch, caplog, tmp_path):
    """Were a buffer stored in a layout that a view replayed on it cannot take (seed 24's, with
    the traced layout not asked for), the generator refuses the graph, which then runs with
    ATen: no error at run time, the same gradients."""
    from pydynamo.backends.triton.lowering import GraphLowering
    realize = GraphLowering.realize
    monkeypatch.setattr(GraphLowering, "realize", lambda self, v, node=None, val=None, exact=False:
                        realize(self, v, node, None))
    monkeypatch.delenv("PYDYNAMO_TRITON_STRICT")
    monkeypatch.setenv("PYDYNAMO_CACHE_DIR", str(tmp_path))  # generated here, not found on disk
    test_random_chain_gradients_match_eager(24, monkeypatch)
    assert any("could not compile a graph" in r.getMessage() and "cannot be made" in r.getMessage()
               for r in caplog.records)
