"""Inductor on CUDA through pydynamo: inference and training match eager (run on the GPU machine)."""
import os
import sys

import pytest
import torch

import pydynamo
from pydynamo.testing import CompileCounter

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tools"))
import models  # noqa: E402


class CountingInductor(CompileCounter):
    def __call__(self, gm, example_inputs):
        super().__call__(gm, example_inputs)
        return pydynamo.lookup_backend("inductor")(gm, example_inputs)


def test_pointwise_function_on_cuda():
    def f(x, y):
        return torch.nn.functional.gelu(x * y + 1) * torch.sigmoid(y)

    cnt = CountingInductor()
    opt = pydynamo.optimize(cnt)(f)
    x, y = torch.randn(1024, device="cuda"), torch.randn(1024, device="cuda")
    torch.testing.assert_close(opt(x, y), f(x, y))
    opt(x, y)
    assert cnt.frame_count == 1


@pytest.mark.parametrize("name", ["resnet", "gpt", "bert"])
def test_model_inference_and_training_on_cuda(name):
    torch.manual_seed(0)
    model, inputs = models.make(name, "small", "cuda")
    ref, _ = models.make(name, "small", "cuda")
    ref.load_state_dict(model.state_dict())
    cnt = CountingInductor()
    compiled = pydynamo.compile(model, backend=cnt)
    model.eval(), ref.eval()
    with torch.no_grad():
        torch.testing.assert_close(compiled(*inputs), ref(*inputs), rtol=1e-3, atol=1e-3)
    model.train(), ref.train()
    loss = compiled(*inputs).float().pow(2).mean()
    loss.backward()
    ref_loss = ref(*inputs).float().pow(2).mean()
    ref_loss.backward()
    torch.testing.assert_close(loss, ref_loss, rtol=1e-3, atol=1e-3)
    for (n, p), q in zip(model.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=2e-3, atol=2e-3, msg=lambda m: f"{name}.{n}: {m}")
    assert cnt.frame_count == 2  # one graph per mode
