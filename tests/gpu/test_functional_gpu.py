"""The functional surface on CUDA with Inductor: control-flow bodies, torch.func and
flex_attention (inference and training, Inductor's fused flex kernel), results equal eager's."""
import pytest
import torch
from functorch.experimental import control_flow
from torch._higher_order_ops.scan import scan
from torch._higher_order_ops.while_loop import while_loop
from torch.func import grad, vmap

import pydynamo
from pydynamo.testing import same

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def _check(fn, *args, atol=1e-4):
    expected = fn(*args)
    pydynamo.reset()
    got = pydynamo.optimize("inductor", fullgraph=True)(fn)(*args)
    assert same(expected, got, exact=False, atol=atol, rtol=1e-3)
    pydynamo.reset()


def test_control_flow_on_cuda():
    w = torch.randn(8, 8, device="cuda")
    x = torch.randn(4, 8, device="cuda")
    _check(lambda x: torch.cond(x.sum() > 0, lambda a: (a @ w).relu(), lambda a: a.sin() + w[0], (x,)), x)
    _check(lambda i, x: while_loop(lambda i, a: i < 5, lambda i, a: (i + 1, (a @ w).tanh()), (i, x)),
           torch.tensor(0, device="cuda"), x)
    _check(lambda xs: scan(lambda c, v: (c + v, (c * v).sum(-1)), torch.zeros(8, device="cuda"), xs), x)
    _check(lambda xs: control_flow.map(lambda a, w: a @ w, xs, w), x)


def test_torch_func_on_cuda():
    x = torch.randn(16, 8, device="cuda")
    w = torch.randn(8, device="cuda")
    _check(lambda x: vmap(lambda a: (a * w).softmax(-1))(x), x)
    _check(lambda x: vmap(grad(lambda a: (a.sin() * w).sum()))(x), x)


@pytest.mark.parametrize("train", [False, True], ids=["infer", "train"])
def test_flex_attention_on_cuda(train):
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    bias = torch.randn(128, 128, device="cuda")
    mask = create_block_mask(lambda b, h, m, n: m >= n, None, None, 128, 128, device="cuda")

    def f(q, k, v):
        return flex_attention(q, k, v, score_mod=lambda s, b, h, m, n: s + bias[m, n], block_mask=mask)
    q, k, v = (torch.randn(2, 4, 128, 64, device="cuda", requires_grad=train) for _ in range(3))
    expected = f(q, k, v)
    pydynamo.reset()
    got = pydynamo.optimize("inductor", fullgraph=True)(f)(q, k, v)
    assert torch.allclose(expected, got, atol=2e-3, rtol=2e-3)
    if train:
        g = torch.randn_like(expected)
        want = torch.autograd.grad(expected, (q, k, v), g)
        have = torch.autograd.grad(got, (q, k, v), g)
        assert all(torch.allclose(a, b, atol=2e-2, rtol=2e-2) for a, b in zip(want, have))
    pydynamo.reset()
