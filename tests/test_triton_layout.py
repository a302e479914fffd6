"""Channels-last layouts in the triton backend (CPU, Triton's interpreter): the inference-graph
rewrite that runs convolutions channels-last (layout.py, on by default on CUDA, forced here with
PYDYNAMO_TRITON_LAYOUT_OPT=1), and pooling results laid out as eager lays them out."""
import logging
import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

pytest.importorskip("triton")

import pydynamo  # noqa: E402
from pydynamo.backends.triton import layout  # noqa: E402

os.environ["PYDYNAMO_TRITON_STRICT"] = "1"


@pytest.fixture
def layout_opt(monkeypatch, caplog):
    """Turns the rewrite on; yields the generated sources logged meanwhile."""
    monkeypatch.setenv("PYDYNAMO_TRITON_LAYOUT_OPT", "1")
    caplog.set_level(logging.INFO, logger="pydynamo.output_code")
    calls = []
    orig = layout.channels_last_convolutions

    def spy(gm):
        calls.append(orig(gm))
        return calls[-1]
    monkeypatch.setattr(layout, "channels_last_convolutions", spy)
    pydynamo.reset()
    yield lambda: ([r.args[1] for r in caplog.records if r.name == "pydynamo.output_code"], calls)
    pydynamo.reset()


class Block(torch.nn.Module):
    """An EfficientNet-like block: stem conv, batch norm, SiLU, depthwise conv, squeeze-excite
    gate, pointwise conv."""

    def __init__(self):
        super().__init__()
        self.c1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.dw = torch.nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.pw = torch.nn.Conv2d(8, 16, 1)

    def forward(self, x):
        y = F.silu(self.bn(self.c1(x)))
        z = self.pw(self.dw(y) * y.mean((2, 3), keepdim=True).sigmoid())
        return z, z.mean((2, 3)), y.sum(1, keepdim=True), y + 1


def _same(got, want):
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, atol=1e-5, rtol=1e-5)
        assert g.stride() == w.stride(), "an output's strides differ from eager's"


def test_inference_convolutions_run_channels_last(layout_opt):
    torch.manual_seed(0)
    m = Block().eval()
    x = torch.randn(2, 3, 12, 12)
    with torch.no_grad():
        got = pydynamo.optimize("triton")(m)(x)
        _same(got, m(x))
    srcs, calls = layout_opt()
    assert calls == [True]
    (src,) = srcs
    # the image and the stem's weight are copied channels-last; every convolution's result is
    # channels-last (restride to NHWC strides), and NCHW outputs come back as eager gives them
    assert "empty_strided((2, 3, 12, 12), (432, 1, 36, 3)" in src
    assert src.count("torch.convolution(") == 3
    assert "restride(buf2, (2, 8, 12, 12), (1152, 1, 96, 8))" in src or "(1152, 1, 96, 8)" in src


def test_training_graphs_run_channels_last_forward_and_backward(layout_opt, monkeypatch):
    """The forward saves channels-last activations, the backward's convolution backwards take
    them as they are; outputs, gradients and running statistics equal eager's."""
    done = []
    orig = layout.channels_last_training
    monkeypatch.setattr(layout, "channels_last_training", lambda *a: done.append(orig(*a)) or done[-1])
    torch.manual_seed(0)
    m, ref = Block(), Block()
    ref.load_state_dict(m.state_dict())
    x = torch.randn(2, 3, 12, 12, requires_grad=True)
    x2 = x.detach().clone().requires_grad_()
    outs = pydynamo.optimize("triton")(m)(x)
    want = ref(x2)
    _same(outs, want)
    sum(o.square().mean() for o in outs).backward()
    sum(o.square().mean() for o in want).backward()
    torch.testing.assert_close(x.grad, x2.grad, atol=1e-5, rtol=1e-5)
    for p, q in zip(m.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(m.bn.running_mean, ref.bn.running_mean)
    torch.testing.assert_close(m.bn.running_var, ref.bn.running_var)
    srcs, calls = layout_opt()
    assert done == [True] and calls == []  # the training pair rewritten; no inference graph
    fw, bw = srcs
    assert "convolution_backward" in bw and "(1152, 1, 96, 8)" in bw  # channels-last activations
    assert "(1152, 1, 96, 8)" in fw


class Residual(torch.nn.Module):
    """A stem and two ResNet-style blocks: the second's shortcut is a strided 1x1 convolution
    that reads the first block's output, as its main path does."""

    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.c1, self.b1 = torch.nn.Conv2d(8, 8, 3, padding=1, bias=False), torch.nn.BatchNorm2d(8)
        self.c2, self.b2 = torch.nn.Conv2d(8, 16, 3, stride=2, padding=1, bias=False), torch.nn.BatchNorm2d(16)
        self.down = torch.nn.Conv2d(8, 16, 1, stride=2, bias=False)

    def forward(self, x):
        x = self.stem(x)
        x = torch.relu(self.b1(self.c1(x)) + x)
        return torch.relu(self.b2(self.c2(x)) + self.down(x))


def test_channels_last_values_are_not_copied_again_for_their_convolutions(layout_opt):
    """layout.py puts a clone to channels-last in front of every convolution's input; where the
    value is channels-last already, the clone is the value: no kernel stores one value twice
    and no copy kernel runs, beside the image's and the weights' own layout changes."""
    import re
    torch.manual_seed(0)
    m, ref = Residual(), Residual()
    ref.load_state_dict(m.state_dict())
    x = torch.randn(2, 3, 12, 12)
    out, want = pydynamo.optimize("triton")(m)(x), ref(x)
    _same([out], [want])
    out.square().mean().backward()
    want.square().mean().backward()
    for p, q in zip(m.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-5, rtol=1e-4)
    fw = layout_opt()[0][0]
    for name, body in re.findall(r"def (triton_\w+)\(.*?\):(.*?)(?=\n# |\n@|\Z)", fw, re.S):
        stored = re.findall(r"tl\.store\(\w+ \+ \(.*?\), (\w+),", body)
        assert len(stored) == len(set(stored)), f"{name} stores one value twice"
    copied = [line for line in fw.splitlines() if line.startswith("def triton_") and "_copy(" in line]
    # the first block's output is stored once: saved for the backward (as the shortcut's and the
    # second block's convolution input, and for the relu's backward) and read by both convolutions
    assert fw.count("empty_strided((2, 8, 12, 12)") == 1
    assert len(copied) <= 4, copied  # the image, the stem's, c1's and c2's weights (3x3: NCHW -> NHWC)


def test_a_view_output_of_a_changed_tensor_leaves_the_graph_as_it_was(layout_opt):
    m = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU()).eval()
    x = torch.randn(2, 3, 9, 9)
    with torch.no_grad():
        got = pydynamo.optimize("triton")(lambda x: m(x)[:, :4])(x)
        want = m(x)[:, :4]
    _same([got], [want])
    assert layout_opt()[1] == [False]


def test_as_strided_of_a_changed_tensor_leaves_the_graph_as_it_was(layout_opt):
    m = torch.nn.Conv2d(3, 4, 3).eval()
    x = torch.randn(1, 3, 5, 5)

    def f(x):
        y = m(x) * 2   # NCHW (1, 4, 3, 3): as_strided reads its memory in that order
        return torch.as_strided(y, (4, 9), (1, 4)) + 1
    with torch.no_grad():
        got = pydynamo.optimize("triton")(f)(x)
        want = f(x)
    _same([got], [want])
    assert layout_opt()[1] == [False]


def test_channels_last_inputs_need_no_rewrite(layout_opt):
    m = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.ReLU()).eval()
    m = m.to(memory_format=torch.channels_last)
    x = torch.randn(2, 3, 9, 9).contiguous(memory_format=torch.channels_last)
    with torch.no_grad():
        got = pydynamo.optimize("triton")(m)(x)
        _same([got], [m(x)])
    assert layout_opt()[1] == [False]  # nothing to rewrite


def test_max_pool_follows_a_channels_last_input_and_skips_unused_indices(caplog):
    caplog.set_level(logging.INFO, logger="pydynamo.output_code")
    pydynamo.reset()
    m = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                            torch.nn.MaxPool2d(3, 2, 1)).eval().to(memory_format=torch.channels_last)
    x = torch.randn(2, 3, 16, 16).contiguous(memory_format=torch.channels_last)
    with torch.no_grad():
        got = pydynamo.optimize("triton")(m)(x)
        _same([got], [m(x)])
    (src,) = [r.args[1] for r in caplog.records if r.name == "pydynamo.output_code"]
    assert "torch.int64" not in src  # the indices are not stored: nothing reads them
    pydynamo.reset()


@pytest.mark.parametrize("shape", [(4, 32, 16, 16), (2, 8, 3, 5), (3, 1, 4, 4)])
def test_reductions_of_channels_last_tensors_walk_memory_order(caplog, shape):
    """A mean over H and W of a channels-last tensor reduces columns with neighbouring channels
    side by side (split in two stages when there are few outputs), a sum over channels reduces
    rows along memory, batch-norm statistics over N, H, W likewise: all equal eager."""
    caplog.set_level(logging.INFO, logger="pydynamo.output_code")
    pydynamo.reset()
    x = torch.randn(shape).contiguous(memory_format=torch.channels_last)

    def f(x):
        return ((x.sigmoid() * x).mean((2, 3), keepdim=True), x.sum(1), x.amax((2, 3)),
                torch.var_mean(x, (0, 2, 3)))
    got = pydynamo.optimize("triton")(f)(x)
    want = f(x)
    for g, w in zip(torch.utils._pytree.tree_leaves(got), torch.utils._pytree.tree_leaves(want)):
        torch.testing.assert_close(g, w, atol=1e-5, rtol=1e-5)
    (src,) = [r.args[1] for r in caplog.records if r.name == "pydynamo.output_code"]
    if shape == (4, 32, 16, 16):
        # the first kernel (the mean's first stage) counts channels fastest: x1 is the channel
        first = src[src.index("\ndef triton_"):]
        assert "x1 = xindex % 32" in first.split("\n@triton.jit")[0]
    pydynamo.reset()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_convolution_bias_fuses_into_what_follows(caplog, dtype):
    """A squeeze-excite gate: convolutions with biases whose uses we lower get no bias in the
    ATen call; the add is part of the next kernel, rounded as eager rounds it."""
    caplog.set_level(logging.INFO, logger="pydynamo.output_code")
    pydynamo.reset()
    torch.manual_seed(0)
    c = torch.nn.Conv2d(16, 16, 3, padding=1).to(dtype)
    r, e = torch.nn.Conv2d(16, 4, 1).to(dtype), torch.nn.Conv2d(4, 16, 1).to(dtype)

    def f(x):
        x = c(x)
        return x * e(F.silu(r(x.mean((2, 3), keepdim=True)))).sigmoid()
    x = torch.randn(2, 16, 8, 8, dtype=dtype)
    with torch.no_grad():
        got = pydynamo.optimize("triton")(f)(x)
        want = f(x)
    torch.testing.assert_close(got, want, atol=1e-5 if dtype == torch.float32 else 1e-2, rtol=1e-2)
    (src,) = [r.args[1] for r in caplog.records if r.name == "pydynamo.output_code"]
    calls = [line for line in src.splitlines() if "torch.convolution(" in line]
    assert len(calls) == 3 and all(", None, [" in line for line in calls)
    pydynamo.reset()
