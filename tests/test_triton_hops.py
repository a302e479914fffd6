"""The bundled triton backend given graphs with higher-order ops (issue 43): the op is called as
is from the generated wrapper, its bodies passed to it, the rest of the graph in kernels; never
the whole graph with ATen. Triton's CPU interpreter; inference and training against eager."""
import importlib
import os

import pytest
import torch

os.environ.setdefault("TRITON_INTERPRET", "1")
pytest.importorskip("triton")

import pydynamo  # noqa: E402
from torch._higher_order_ops.scan import scan  # noqa: E402
from torch._higher_order_ops.while_loop import while_loop  # noqa: E402
from torch.nn.attention.flex_attention import flex_attention  # noqa: E402

backend = importlib.import_module("pydynamo.backends.triton")


def f_cond(x):
    return torch.cond(x.sum() > 0, lambda t: t.sin() * 2, lambda t: t.cos() + 1, (x,)) * x


def f_while(x):
    return while_loop(lambda i, t: i < 3, lambda i, t: (i + 1, t * 2 + 1), (torch.tensor(0), x))[1].relu()


def f_scan(x):
    def combine(carry, xs):
        return carry + xs, (carry * xs).sin()
    return scan(combine, torch.zeros(x.shape[1]), x)[1] + 1


def f_map(x):
    from functorch.experimental.control_flow import map as control_map
    return control_map(lambda t: t.relu() * 3, x) - x


def f_flex(q):
    return flex_attention(q, q * 2, q.cos(), score_mod=lambda s, b, h, qi, ki: s + (qi - ki) * 0.1)


CASES = {"cond": (f_cond, (4, 8)), "while_loop": (f_while, (4, 8)), "scan": (f_scan, (5, 8)),
         "map": (f_map, (3, 4)), "flex_attention": (f_flex, (1, 2, 16, 8))}


@pytest.mark.parametrize("name", sorted(CASES))
def test_inference(name):
    fn, shape = CASES[name]
    x = torch.randn(shape, generator=torch.Generator().manual_seed(0))
    before = len(backend.fallbacks)
    pydynamo.reset()
    with torch.no_grad():
        got = pydynamo.optimize("triton")(fn)(x)
    torch.testing.assert_close(got, fn(x), atol=1e-5, rtol=1e-4)
    assert backend.fallbacks[before:] == []
    pydynamo.reset()


@pytest.mark.parametrize("name", ["cond"])  # (flex_attention has no CPU backward: tests/gpu)
def test_training(name):
    fn, shape = CASES[name]
    x = torch.randn(shape, generator=torch.Generator().manual_seed(1), requires_grad=True)
    before = len(backend.fallbacks)
    pydynamo.reset()
    got = pydynamo.optimize("triton")(fn)(x)
    got.sum().backward()
    grad, x.grad = x.grad, None
    want = fn(x)
    want.sum().backward()
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(grad, x.grad, atol=1e-5, rtol=1e-4)
    assert backend.fallbacks[before:] == []
    pydynamo.reset()


def test_a_whole_graph_fallback_is_logged_and_in_the_trace(tmp_path, monkeypatch, caplog):
    """A graph the backend cannot compile runs with ATen (correct), and says why: on the
    pydynamo.errors logger, in backends.triton.fallbacks and in the trace report's event."""
    import json
    import logging

    from pydynamo import debug
    from pydynamo.backends.triton import lowering

    def refuse(self):
        raise NotImplementedError("a test's refusal")
    monkeypatch.setattr(lowering.GraphLowering, "run", refuse)
    monkeypatch.delenv("PYDYNAMO_TRITON_STRICT", raising=False)  # (other test files raise instead)
    monkeypatch.setenv("PYDYNAMO_CACHE_DIR", str(tmp_path / "cache"))  # (nothing served from the disk cache)
    before = len(backend.fallbacks)
    x = torch.randn(4, 8)
    pydynamo.reset()
    try:
        with caplog.at_level(logging.WARNING, logger="pydynamo.errors"), debug.trace(tmp_path / "t") as tr:
            with torch.no_grad():
                got = pydynamo.optimize("triton")(lambda t: (t.sin() * 2).sum(-1))(x)
    finally:
        pydynamo.reset()
    torch.testing.assert_close(got, (x.sin() * 2).sum(-1))
    assert backend.fallbacks[before:] == ["NotImplementedError: a test's refusal"]
    assert any("whole graph runs with ATen" in r.getMessage() for r in caplog.records if r.name == "pydynamo.errors")
    events = [json.loads(line) for line in open(tr.path)]
    assert any("a test's refusal" in (e.get("error") or "") for e in events if e["event"] == "compile")
