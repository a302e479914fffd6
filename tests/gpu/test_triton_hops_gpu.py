"""Higher-order ops under the bundled triton backend on CUDA (issue 43): correct in inference
and training, no whole-graph fallback. Run on the GPU machine."""
import importlib

import pytest
import torch

import pydynamo

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
backend = importlib.import_module("pydynamo.backends.triton")


def _flex(q, k, v):
    from torch.nn.attention.flex_attention import flex_attention
    return flex_attention(q, k, v, score_mod=lambda s, b, h, qi, ki: s + (qi - ki) * 0.01)


def _cond(x):
    return torch.cond(x.sum() > 0, lambda t: t.sin() * 2, lambda t: t.cos() + 1, (x,)) * x


@pytest.mark.parametrize("name", ["flex_attention", "cond"])
def test_training_on_cuda(name):
    g = torch.Generator(device="cuda").manual_seed(0)
    if name == "flex_attention":
        fn, args = _flex, [torch.randn(2, 4, 128, 64, device="cuda", generator=g, requires_grad=True) for _ in range(3)]
    else:
        fn, args = _cond, [torch.randn(64, 32, device="cuda", generator=g, requires_grad=True)]
    before = len(backend.fallbacks)
    pydynamo.reset()
    got = pydynamo.optimize("triton")(fn)(*args)
    got.float().pow(2).sum().backward()
    grads = [a.grad.clone() for a in args]
    for a in args:
        a.grad = None
    want = fn(*args)
    want.float().pow(2).sum().backward()
    torch.testing.assert_close(got, want, atol=2e-4, rtol=2e-4)
    for a, gr in zip(args, grads):
        torch.testing.assert_close(gr, a.grad, atol=2e-4, rtol=2e-4)
    assert backend.fallbacks[before:] == []
    pydynamo.reset()
