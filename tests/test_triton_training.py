"""The triton backend on whole blocks, forward and backward (AOTAutograd hands it both graphs),
through Triton's CPU interpreter: a GELU MLP, attention with its matmuls in ATen, a small
transformer block with cross-entropy.  Loss and every gradient are compared with eager."""
import copy
import math
import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported: kernels run on the CPU

import logging  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

pytest.importorskip("triton")

from pydynamo.backends.triton import triton_backend  # noqa: E402
from pydynamo.backends.triton.compile_worker import WRAPPER_MARK  # noqa: E402

os.environ["PYDYNAMO_TRITON_STRICT"] = "1"


class MLP(nn.Module):
    def __init__(self, d=16, h=32):
        super().__init__()
        self.lin1, self.lin2 = nn.Linear(d, h), nn.Linear(h, d)

    def forward(self, x):
        return self.lin2(F.gelu(self.lin1(x))) + x


class Attention(nn.Module):
    def __init__(self, d=16, heads=2):
        super().__init__()
        self.heads, self.qkv, self.proj = heads, nn.Linear(d, 3 * d), nn.Linear(d, d)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q = q.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        k = k.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        v = v.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // self.heads))
        mask = torch.ones_like(att[0, 0]).tril() == 0
        att = torch.softmax(att.masked_fill(mask, float("-inf")), dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.proj(y)


class Block(nn.Module):
    def __init__(self, d=16, vocab=11):
        super().__init__()
        self.emb, self.ln1, self.attn = nn.Embedding(vocab, d), nn.LayerNorm(d), Attention(d)
        self.ln2, self.mlp, self.head = nn.LayerNorm(d), MLP(d), nn.Linear(d, vocab)

    def forward(self, idx, targets):
        x = self.emb(idx)
        x = x + self.attn(self.ln1(x))
        x = self.mlp(self.ln2(x))
        logits = self.head(x)
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def compile_module(model, *inputs):
    gm = torch.fx.symbolic_trace(model)
    return triton_backend(gm, list(inputs))


def train_step_matches(model, inputs, atol=1e-5, rtol=1e-4):
    ref = copy.deepcopy(model)
    compiled = compile_module(model, *inputs)
    out = compiled(*inputs)
    loss = out.float().pow(2).mean() if out.dim() else out
    loss.backward()
    ref_out = ref(*inputs)
    ref_loss = ref_out.float().pow(2).mean() if ref_out.dim() else ref_out
    ref_loss.backward()
    torch.testing.assert_close(loss, ref_loss, atol=atol, rtol=rtol)
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, atol=atol, rtol=rtol, msg=lambda m: f"{name}: {m}")


def test_gelu_mlp_inference(caplog):
    caplog.set_level(logging.INFO, logger="pydynamo.output_code")
    model = MLP()
    x = torch.randn(4, 16)
    with torch.no_grad():
        torch.testing.assert_close(compile_module(model, x)(x), model(x), atol=1e-5, rtol=1e-5)
    src = [r.args[1] for r in caplog.records][-1]
    # both linears feed pointwise ops only: plain GEMMs, their biases added in those kernels
    assert "torch.addmm(" not in src and src.count("torch.mm(") == 2
    assert src.count("\ndef triton_") == 2  # bias + gelu, and bias + residual


def test_addmm_kept_where_its_result_is_not_only_pointwise(caplog):
    """A linear whose result is a graph output (or is saved for backward) stays one addmm."""
    caplog.set_level(logging.INFO, logger="pydynamo.output_code")
    w, b = torch.randn(8, 16), torch.randn(8)

    def f(x):
        y = F.linear(x, w, b)
        return y, torch.relu(y)
    x = torch.randn(4, 16)
    out = triton_backend(torch.fx.symbolic_trace(f), [x])(x)
    ref = f(x)
    torch.testing.assert_close(out[0], ref[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out[1], ref[1], atol=1e-5, rtol=1e-5)
    src = [r.args[1] for r in caplog.records][-1]
    assert src.count("torch.addmm(") == 1 and "torch.mm(" not in src


def test_addmm_kept_in_bfloat16(caplog):
    """cuBLAS's bf16 GEMM with its bias epilogue measured as fast as mm + a fused add: kept."""
    caplog.set_level(logging.INFO, logger="pydynamo.output_code")
    model = MLP().to(torch.bfloat16)
    x = torch.randn(4, 16, dtype=torch.bfloat16)
    with torch.no_grad():
        torch.testing.assert_close(compile_module(model, x)(x), model(x), atol=2e-2, rtol=2e-2)
    src = [r.args[1] for r in caplog.records][-1]
    assert src.count("torch.addmm(") == 2 and "torch.mm(" not in src


def test_gelu_mlp_training():
    x = torch.randn(2, 3, 16, requires_grad=False)
    train_step_matches(MLP(), [x])


def test_input_gradients():
    x = torch.randn(4, 12, requires_grad=True)
    w = torch.randn(12)
    f = lambda x: (F.layer_norm(x, (12,), w) * torch.softmax(x, -1)).sum()  # noqa: E731
    compiled = triton_backend(torch.fx.symbolic_trace(f), [x])
    loss = compiled(x)
    (g,) = torch.autograd.grad(loss, x)
    x2 = x.detach().clone().requires_grad_()
    (g_ref,) = torch.autograd.grad(f(x2), x2)
    torch.testing.assert_close(g, g_ref, atol=1e-5, rtol=1e-4)


def test_attention_training():
    torch.manual_seed(0)
    train_step_matches(Attention(), [torch.randn(2, 5, 16)])


def test_transformer_block_cross_entropy_training():
    torch.manual_seed(0)
    idx, tgt = torch.randint(0, 11, (2, 6)), torch.randint(0, 11, (2, 6))
    train_step_matches(Block(), [idx, tgt], atol=2e-5, rtol=1e-4)


def test_backward_generated_with_the_forward(monkeypatch, caplog):
    """PYDYNAMO_TRITON_EAGER_BACKWARD=1: both graphs are generated when the module is compiled
    (before any call), and the training step still matches eager."""
    import logging
    caplog.set_level(logging.INFO, logger="pydynamo.output_code")
    monkeypatch.setenv("PYDYNAMO_TRITON_EAGER_BACKWARD", "1")
    torch.manual_seed(0)
    compile_module(Attention(), torch.randn(2, 5, 16))
    assert len([r for r in caplog.records if r.name == "pydynamo.output_code"]) == 2
    train_step_matches(Attention(), [torch.randn(2, 5, 16)])


def test_aot_autograd_makes_lazy_graph_modules(monkeypatch):
    """AOTAutograd runs with lazy graph modules, so the GraphModules its tracer and partitioner
    make on the way generate their Python code only if called (a cold compile's cost); the
    forward, and the backward compiled at the first backward outside that setting, match eager."""
    from torch._functorch import partitioners
    from torch.fx import _lazy_graph_module
    lazy = []
    partition = partitioners.min_cut_rematerialization_partition

    def spy(joint, *args, **kwargs):
        lazy.append(_lazy_graph_module._use_lazy_graph_module_flag)
        return partition(joint, *args, **kwargs)
    monkeypatch.setattr(partitioners, "min_cut_rematerialization_partition", spy)
    train_step_matches(MLP(), [torch.randn(4, 16, requires_grad=True)])
    assert lazy == [True] and not _lazy_graph_module._use_lazy_graph_module_flag


def test_deferred_precompile_submits_every_launch_once_in_order(monkeypatch):
    """While both graphs are generated, precompile() only queues; on leaving, one submission in
    the order the launches came (forward first), and into an outer queue when nested."""
    from pydynamo.backends.triton import runtime
    queue_then = runtime.precompile
    submitted = []
    with runtime.deferred_precompile():
        queue_then(["fw1", "fw2"])
        with runtime.deferred_precompile():
            queue_then(["bw1"])
        monkeypatch.setattr(runtime, "precompile", lambda launches: submitted.append(list(launches)))
        assert submitted == []
    assert submitted == [["fw1", "fw2", "bw1"]]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_mlp_training_half(dtype):
    torch.manual_seed(0)
    model = MLP().to(dtype)
    x = torch.randn(4, 16, dtype=dtype)
    train_step_matches(model, [x], atol=5e-2, rtol=5e-2)


@pytest.mark.parametrize("name", ["resnet", "gpt", "bert", "hf-llama", "hf-gpt2", "hf-bert"])
def test_benchmark_models_through_the_hook(name):
    """tools/models.py's models (small; the transformers ones with dropout off, so eager's random
    masks are not compared with the kernels') under pydynamo.optimize("triton") in Triton's CPU
    interpreter: one inference step and one training step, outputs and every gradient against
    eager, with no graph run wholly by ATen."""
    import importlib
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tools"))
    import models

    import pydynamo
    backend = importlib.import_module("pydynamo.backends.triton")
    before = len(backend.fallbacks)
    for train in (False, True):
        pytest.importorskip("transformers") if name.startswith("hf-") else None
        model, inputs = models.make(name, "small")
        model.train(train)
        for mod in model.modules():
            if isinstance(mod, torch.nn.Dropout):
                mod.p = 0.0
        ref = copy.deepcopy(model)
        pydynamo.reset()
        opt = pydynamo.optimize("triton")(model)
        with torch.set_grad_enabled(train):
            out, want = _first(opt(*inputs)), _first(ref(*inputs))
        torch.testing.assert_close(out, want, atol=1e-5, rtol=1e-4)
        if train:
            out.float().pow(2).mean().backward()
            want.float().pow(2).mean().backward()
            for (pname, p), q in zip(model.named_parameters(), ref.parameters()):
                if p.grad is None or q.grad is None:  # (a pooler the loss does not reach: zeros vs None)
                    assert (p.grad is None or not p.grad.any()) and (q.grad is None or not q.grad.any()), pname
                    continue
                torch.testing.assert_close(p.grad, q.grad, atol=2e-5, rtol=1e-4, msg=lambda m: f"{pname}: {m}")
    assert backend.fallbacks[before:] == []
    pydynamo.reset()


def _first(out):
    """The first tensor of a model's output (a transformers ModelOutput's first field)."""
    if isinstance(out, torch.Tensor):
        return out
    if hasattr(out, "to_tuple"):
        return out.to_tuple()[0]
    return out[0]


def generated(caplog):
    return [r.args[1] for r in caplog.records if r.name == "pydynamo.output_code"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_embedding_gradient_is_a_scatter_kernel(caplog, dtype):
    """The embedding gradient (zeros, index_put(accumulate=True)) is a kernel of atomic adds into
    the zeros a kernel just wrote, not an ATen call; repeated and negative-free indices
    accumulate as in eager (bfloat16 through a float32 buffer)."""
    caplog.set_level(logging.INFO, logger="pydynamo.output_code")
    emb = nn.Embedding(10, 8).to(dtype)
    idx = torch.tensor([[1, 3, 3, 9], [0, 1, 1, 1]])
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    train_step_matches(emb, [idx], atol=tol, rtol=tol)
    bw = generated(caplog)[-1]
    assert "tl.atomic_add(" in bw and "index_put_accumulate(" not in bw.split("def make(")[1], bw


def test_embedding_gradient_deterministic_mode_keeps_aten(caplog):
    """Atomic adds meet in any order: under torch.use_deterministic_algorithms the gradient is
    ATen's index_put."""
    caplog.set_level(logging.INFO, logger="pydynamo.output_code")
    prev = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        train_step_matches(nn.Embedding(10, 8), [torch.tensor([[1, 3, 3, 9]])])
    finally:
        torch.use_deterministic_algorithms(prev)
    bw = generated(caplog)[-1]
    assert "tl.atomic_add(" not in bw and "index_put_accumulate(" in bw


def test_index_put_accumulate_into_an_input():
    """``x.index_put_((idx,), v, accumulate=True)`` on a graph input (functionalized: a scatter
    into a copy, copied back) and on an intermediate, with repeated indices."""
    import pydynamo

    def f(x, v, idx):
        x.index_put_((idx,), v, accumulate=True)
        y = x * 2
        y.index_put_((idx[:2],), v[:2] + 1, accumulate=True)
        return y
    x, v, idx = torch.randn(6, 3), torch.randn(5, 3), torch.tensor([4, 4, 0, 5, 4])
    pydynamo.reset()
    x1 = x.clone()
    got = pydynamo.optimize("triton", fullgraph=True)(f)(x1, v, idx)
    x2 = x.clone()
    torch.testing.assert_close(got, f(x2, v, idx))
    torch.testing.assert_close(x1, x2)
    pydynamo.reset()


def dropout_step(fn, x, seed=None):
    """fn's output on x and x's gradient from the sum of it, compiled; under manual_seed(seed)."""
    import pydynamo
    x = x.detach().clone().requires_grad_(True)
    if seed is not None:
        torch.manual_seed(seed)
    out = pydynamo.optimize("triton", fullgraph=True)(fn)(x)
    out.sum().backward()
    return out.detach(), x.grad


@pytest.mark.parametrize("p", [0.1, 0.5])
def test_dropout_in_the_kernel(caplog, p):
    """native_dropout is computed in the kernel (no ATen call): about 1 - p of the elements
    kept, each scaled by 1 / (1 - p); the gradient is mask / (1 - p) exactly where the forward
    kept; two dropouts of one graph draw different masks."""
    import pydynamo
    caplog.set_level(logging.INFO, logger="pydynamo.output_code")
    pydynamo.reset()
    x = torch.randn(128, 256) + 5  # never 0: an output of 0 means dropped
    out, grad = dropout_step(lambda x: torch.stack([F.dropout(x, p), F.dropout(x * 1, p)]), x)
    kept = out != 0
    assert abs(kept.float().mean().item() - (1 - p)) < 0.01
    torch.testing.assert_close(out[kept], (torch.stack([x, x]) * (1.0 / (1 - p)))[kept], atol=0, rtol=1e-6)
    scale = torch.tensor(1.0 / (1 - p))
    assert torch.equal(grad, (kept[0] * scale) + (kept[1] * scale))
    assert (kept[0] != kept[1]).float().mean() > 0.05
    srcs = generated(caplog)
    assert any("rand_uniform(" in s.split("def make(")[0] for s in srcs)
    assert all("aten.native_dropout" not in s for s in srcs)
    pydynamo.reset()


def test_dropout_saves_its_mask_not_its_output():
    """The backward of dropout(tanh(x)) * w needs the dropped-out value: it is recomputed from
    the saved mask and x (dropout is decomposed into its mask and a product), not saved."""
    import pydynamo
    pydynamo.reset()
    x, w = torch.randn(64, 32), torch.randn(64, 32, requires_grad=True)
    fn = pydynamo.optimize("triton", fullgraph=True)(lambda x, w: F.dropout(torch.tanh(x), 0.2) * w)
    saved = []

    def pack(t):
        saved.append((t.dtype, t is x))
        return t
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn(x, w)
    out.sum().backward()
    assert (torch.bool, False) in saved
    assert all(dtype == torch.bool or is_x for dtype, is_x in saved), saved
    kept = out != 0
    torch.testing.assert_close(w.grad[kept], (torch.tanh(x) / 0.8)[kept])
    assert torch.equal(w.grad[~kept], torch.zeros_like(w.grad[~kept]))
    pydynamo.reset()


def test_rand_like_in_the_kernel(caplog):
    """torch.rand_like of float32 is drawn in the kernel: values in [0, 1), new each call, the
    same under the same manual_seed; of bfloat16 it stays ATen's (rounding could reach 1)."""
    import pydynamo
    caplog.set_level(logging.INFO, logger="pydynamo.output_code")
    pydynamo.reset()
    fn = pydynamo.optimize("triton", fullgraph=True)(lambda x: torch.rand_like(x) + x * 0)
    x = torch.zeros(256, 64)
    torch.manual_seed(3)
    a = fn(x)
    b = fn(x)
    torch.manual_seed(3)
    assert torch.equal(fn(x), a) and not torch.equal(a, b)
    assert 0 <= a.min() and a.max() < 1 and abs(a.mean().item() - 0.5) < 0.01
    srcs = generated(caplog)
    assert any("rand_uniform(" in s.split("def make(")[0] for s in srcs)
    assert all("aten.rand_like" not in s for s in srcs)
    pydynamo.reset()
    caplog.clear()
    c = pydynamo.optimize("triton", fullgraph=True)(lambda x: torch.rand_like(x) + x * 0)(x.bfloat16())
    assert c.dtype == torch.bfloat16 and 0 <= c.min() and c.max() < 1
    assert any("aten.rand_like" in s for s in generated(caplog))
    pydynamo.reset()


def test_dropout_reproducible_under_manual_seed():
    """The seeds come from torch's generator at each call: the same seed gives the same mask,
    the next call a new one."""
    import pydynamo
    pydynamo.reset()
    fn = lambda x: F.dropout(x * 2, 0.3)  # noqa: E731
    x = torch.randn(64, 40)
    a, ga = dropout_step(fn, x, seed=7)
    b, gb = dropout_step(fn, x, seed=7)
    c, _ = dropout_step(fn, x)
    assert torch.equal(a, b) and torch.equal(ga, gb)
    assert not torch.equal(a, c)
    pydynamo.reset()


@pytest.mark.parametrize("p", [0.0, 1.0])
def test_dropout_edge_probabilities(p):
    """p = 0 keeps everything (x, gradient 1), p = 1 drops everything (0, gradient 0), as in
    eager; whether through F.dropout or native_dropout itself."""
    import pydynamo
    for fn in (lambda x: F.dropout(x, p), lambda x: torch.native_dropout(x * 1, p, True)[0]):
        pydynamo.reset()
        x = torch.randn(16, 8)
        out, grad = dropout_step(fn, x)
        xe = x.clone().requires_grad_(True)
        fn(xe).sum().backward()
        assert torch.equal(out, fn(x)) and torch.equal(grad, xe.grad)
    pydynamo.reset()


def test_dropout_eval_and_bfloat16():
    """In eval mode dropout is the identity; native_dropout(train=False) too (mask all true);
    bfloat16 keeps x / (1 - p) (within an ulp: the interpreter's bfloat16 casts truncate)."""
    import pydynamo
    pydynamo.reset()
    model = nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.5)).eval()
    x = torch.randn(4, 8)
    with torch.no_grad():
        torch.testing.assert_close(pydynamo.optimize("triton")(model)(x), model(x))
    pydynamo.reset()
    out, mask = pydynamo.optimize("triton", fullgraph=True)(lambda x: torch.native_dropout(x * 1, 0.5, False))(x)
    assert torch.equal(out, x) and mask.dtype == torch.bool and mask.all()
    pydynamo.reset()
    xb = torch.randn(64, 64).bfloat16() + 4
    out = pydynamo.optimize("triton", fullgraph=True)(lambda x: F.dropout(x, 0.25))(xb)
    kept = out != 0
    assert out.dtype == torch.bfloat16 and 0.7 < kept.float().mean() < 0.8
    torch.testing.assert_close(out[kept], (xb.float() * (1 / 0.75)).bfloat16()[kept], atol=0, rtol=1e-2)
    pydynamo.reset()


def test_clones_the_caller_sees_or_may_change_keep_their_own_memory():
    """A clone into the layout a value has is that value (lowerings._identity), except where the
    caller could tell: outputs it receives stay distinct tensors (a training graph's forward
    too, whose later outputs, saved for the backward, may share memory)."""
    import pydynamo

    def f(x):
        y = x.sin()
        return y, y.clone()
    x = torch.randn(4, 8, requires_grad=True)
    for fn in (f, pydynamo.optimize("triton")(f)):
        a, b = fn(x)
        b_before = b.detach().clone()
        with torch.no_grad():
            a.add_(1.0)
        assert torch.equal(b, b_before)  # b is not a's memory
        torch.testing.assert_close(b, x.sin())
    pydynamo.reset()


def test_value_given_to_a_matmul_is_read_not_recomputed_by_its_other_users(monkeypatch, tmp_path):
    """A GELU backward feeds both the weight gradient's matmul (ATen: so it is stored) and the
    bias gradient's sum: the sum reads the stored value (in the kernel that stores it) rather
    than recomputing it from its two inputs (lowering._given_to_aten)."""
    import pydynamo
    from pydynamo.backends.triton import runtime
    monkeypatch.setenv("PYDYNAMO_CACHE_DIR", str(tmp_path / "cache"))
    seen, load = [], runtime.load_source
    monkeypatch.setattr(runtime, "load_source", lambda src, key: (seen.append(src), load(src, key))[1])
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 64), nn.GELU(), nn.Linear(64, 16))
    ref = copy.deepcopy(model)
    x = torch.randn(4, 32, 16)
    pydynamo.reset()
    pydynamo.optimize("triton")(model)(x).square().mean().backward()
    ref(x).square().mean().backward()
    for a, b in zip(ref.parameters(), model.parameters()):
        torch.testing.assert_close(b.grad, a.grad, rtol=1e-4, atol=1e-5)
    backward = [s for s in seen if "gelu_backward" in s]
    assert len(backward) == 1
    kernels = backward[0].split(WRAPPER_MARK)[0]
    assert kernels.count("tl.erf(") == 1, kernels  # one kernel computes it, stores it and sums it
    pydynamo.reset()


@pytest.mark.parametrize("name", ["Adam", "AdamW", "SGD"])
def test_compiled_optimizer_step(name):
    """An optimizer step compiled with the triton backend (its profiler range, the record_function
    handle, is a wrapper variable): parameters equal eager's after three steps, and no graph runs
    wholly with ATen."""
    import importlib

    import pydynamo
    backend = importlib.import_module("pydynamo.backends.triton")
    kwargs = {"Adam": dict(lr=1e-2), "AdamW": dict(lr=1e-2, weight_decay=0.1), "SGD": dict(lr=0.1, momentum=0.9)}[name]
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    ref = copy.deepcopy(model)
    opt, ref_opt = getattr(torch.optim, name)(model.parameters(), **kwargs), getattr(torch.optim, name)(ref.parameters(), **kwargs)
    step = pydynamo.optimize("triton")(lambda: opt.step())
    before = len(backend.fallbacks)
    pydynamo.reset()
    for _ in range(3):
        x = torch.randn(4, 8)
        model(x).pow(2).mean().backward()
        ref(x).pow(2).mean().backward()
        step()
        ref_opt.step()
        opt.zero_grad()
        ref_opt.zero_grad()
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p, q, atol=1e-6, rtol=1e-5)
    assert backend.fallbacks[before:] == []
    pydynamo.reset()
