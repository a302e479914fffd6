"""Layouts in the bundled triton backend on CUDA (run on the GPU machine): NCHW inference graphs
run their convolutions channels-last by default (layout.py); channels-last inputs stay so end to
end; results and output strides equal eager's, in float32 and bfloat16."""
import logging

import pytest
import torch
import torch.nn.functional as F

import pydynamo

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


class Net(torch.nn.Module):
    """Stem, max-pool, a depthwise-separable block with squeeze-excite, a residual, pooling."""

    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 32, 3, stride=2, padding=1, bias=False)
        self.bn = torch.nn.BatchNorm2d(32)
        self.dw = torch.nn.Conv2d(32, 32, 3, padding=1, groups=32, bias=False)
        self.se_r, self.se_e = torch.nn.Conv2d(32, 8, 1), torch.nn.Conv2d(8, 32, 1)
        self.pw = torch.nn.Conv2d(32, 32, 1, bias=False)
        self.bn2 = torch.nn.BatchNorm2d(32)
        self.fc = torch.nn.Linear(32, 10)

    def forward(self, x):
        x = F.max_pool2d(F.silu(self.bn(self.stem(x))), 3, 2, 1)
        y = self.dw(x)
        y = y * self.se_e(F.silu(self.se_r(y.mean((2, 3), keepdim=True)))).sigmoid()
        x = F.relu(self.bn2(self.pw(y)) + x)
        return self.fc(x.mean((2, 3))), x


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("channels_last", [False, True])
def test_convolution_nets_in_both_layouts(caplog, dtype, channels_last):
    caplog.set_level(logging.INFO, logger="pydynamo.output_code")
    pydynamo.reset()
    torch.manual_seed(0)
    m = Net().cuda().eval().to(dtype)
    x = torch.randn(8, 3, 64, 64, device="cuda", dtype=dtype)
    if channels_last:
        m, x = m.to(memory_format=torch.channels_last), x.contiguous(memory_format=torch.channels_last)
    with torch.no_grad():
        want = m(x)
        got = pydynamo.optimize("triton")(m)(x)
    tol = dict(atol=1e-4, rtol=1e-4) if dtype == torch.float32 else dict(atol=3e-2, rtol=3e-2)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, **tol)
        assert g.stride() == w.stride()
    (src,) = [r.args[1] for r in caplog.records if r.name == "pydynamo.output_code"]
    # every convolution's result is channels-last, whatever the input's layout
    assert "restride(" in src and "(32768, 1, 1024, 32)" in src
    assert "torch.int64" not in src  # max-pool indices unused in inference: not stored
    pydynamo.reset()


def test_training_step_matches_eager():
    torch.manual_seed(0)
    m = Net().cuda()
    ref = Net().cuda()
    ref.load_state_dict(m.state_dict())
    x = torch.randn(4, 3, 32, 32, device="cuda")
    opt = pydynamo.optimize("triton")(m)
    for model, fn in ((m, opt), (ref, ref)):
        out = fn(x)
        (out[0].square().mean() + out[1].mean()).backward()
    for p, q in zip(m.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-3, rtol=1e-3)
    pydynamo.reset()
