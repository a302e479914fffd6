"""The bundled triton backend given CPU tensors beside CUDA ones (issue 43): kernels on the GPU,
the CPU tensors' own ops as ATen calls, a 0-d CPU tensor copied to the GPU for the kernel that
reads it; never the whole graph with ATen. Run on the GPU machine."""
import importlib

import pytest
import torch

import pydynamo

triton_backend = importlib.import_module("pydynamo.backends.triton")  # (the package, not the registered function)

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def _compiled(fn):
    pydynamo.reset()
    return pydynamo.optimize("triton", dynamic=False)(fn)


def _no_whole_graph_fallback(before):
    assert triton_backend.fallbacks[before:] == []


def test_a_cpu_scalar_tensor_beside_cuda_tensors():
    def f(x, step):
        return (x * step + 1).relu().sum(-1)
    before = len(triton_backend.fallbacks)
    opt = _compiled(f)
    for k in (1.0, 2.5):
        x, step = torch.randn(8, 32, device="cuda"), torch.tensor(k)
        torch.testing.assert_close(opt(x, step), f(x, step))
    _no_whole_graph_fallback(before)


def test_cpu_tensors_computed_on_then_moved():
    """A CPU ``inv_freq`` and ``cache_position`` (transformers' rotary embedding): their product
    is computed on the CPU, moved, and the rest fuses on the GPU."""
    inv = 1.0 / (10000 ** (torch.arange(0, 16, 2).float() / 16))

    def f(x, pos):
        freqs = (pos[:, None].float() * inv[None, :]).to(x.device)
        emb = torch.cat((freqs, freqs), dim=-1)
        return x * emb.cos() + x.flip(-1) * emb.sin()
    before = len(triton_backend.fallbacks)
    opt = _compiled(f)
    x, pos = torch.randn(2, 4, 10, 16, device="cuda"), torch.arange(10)
    torch.testing.assert_close(opt(x, pos), f(x, pos))
    _no_whole_graph_fallback(before)


def test_outputs_on_the_cpu_keep_their_device():
    def f(x, c):
        return x * 2, c + 1, (x.sum() * c).cpu()
    opt = _compiled(f)
    x, c = torch.randn(16, device="cuda"), torch.tensor(3.0)
    got, want = opt(x, c), f(x, c)
    assert [t.device for t in got] == [t.device for t in want]
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)


def test_training_with_a_cpu_scalar():
    w = torch.randn(32, 32, device="cuda", requires_grad=True)

    def f(x, scale):
        return ((x @ w) * scale).tanh().sum()
    before = len(triton_backend.fallbacks)
    opt = _compiled(f)
    x, scale = torch.randn(8, 32, device="cuda"), torch.tensor(0.5)
    opt(x, scale).backward()
    got = w.grad.clone()
    w.grad = None
    f(x, scale).backward()
    torch.testing.assert_close(got, w.grad)
    _no_whole_graph_fallback(before)


def test_a_mistral_decoder_has_no_whole_graph_fallback():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.MistralConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                     sliding_window=16)
    torch.manual_seed(0)
    model = transformers.MistralForCausalLM(cfg).cuda().eval()
    ids = torch.randint(0, 128, (2, 12), device="cuda")
    before = len(triton_backend.fallbacks)
    pydynamo.reset()
    opt = pydynamo.optimize("triton")(model)
    with torch.no_grad():
        torch.testing.assert_close(opt(ids).logits, model(ids).logits, atol=2e-4, rtol=2e-4)
    _no_whole_graph_fallback(before)
