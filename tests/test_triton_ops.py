"""Op coverage of the triton backend as a user meets it: small functions under
pydynamo.optimize("triton", fullgraph=True) (Dynamo capture, AOTAutograd, our lowering, Triton's
CPU interpreter) against eager. Ops the generator does not lower run with ATen; either way the
answer must match."""
import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported: kernels run on the CPU

import pytest  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

pytest.importorskip("triton")

import pydynamo  # noqa: E402

os.environ["PYDYNAMO_TRITON_STRICT"] = "1"  # an internal error fails the test instead of hiding

g = torch.Generator().manual_seed(0)
x = torch.randn(4, 6, generator=g)
y = torch.randn(4, 6, generator=g)
b = torch.randn(6, generator=g)
i = torch.randint(-5, 5, (4, 6), generator=g)

CASES = {
 "full": lambda x: x + torch.full((4, 6), 2.5),
 "full_like": lambda x: torch.full_like(x, 3) * x,
 "zeros_ones": lambda x: torch.zeros(4, 6) + torch.ones_like(x) + x,
 "fill": lambda x: torch.ops.aten.fill.Scalar(x, 7) + x,
 "scalar_tensor": lambda x: x * torch.scalar_tensor(3.0),
 "clamp": lambda x: x.clamp(-0.5, 0.5) + x.clamp(min=0.1) + x.clamp(max=-0.1),
 "clamp_min_max": lambda x: torch.clamp_min(x, 0.2) + torch.clamp_max(x, 0.3),
 "div_floor": lambda x: torch.div(x, 0.3, rounding_mode="floor"),
 "div_trunc": lambda x: torch.div(x, 0.3, rounding_mode="trunc"),
 "int_div_floor": lambda x: torch.div(i, 3, rounding_mode="floor") + x,
 "int_true_div": lambda x: i / 3 + x,
 "remainder": lambda x: torch.remainder(x, 0.7),
 "fmod": lambda x: torch.fmod(x, 0.7),
 "int_remainder": lambda x: torch.remainder(i, 3) + x,
 "pow": lambda x: x.pow(2) + x.abs().pow(0.5) + x.pow(3) + torch.pow(2.0, x),
 "int_pow": lambda x: i.pow(2) + x,
 "rsub": lambda x: 1 - x + torch.rsub(x, y, alpha=2),
 "add_alpha": lambda x: torch.add(x, y, alpha=3) + torch.sub(x, y, alpha=0.5),
 "where": lambda x: torch.where(x > 0, x, y) + torch.where(x > 0, 1.0, x) + torch.where(x > 0, x, 2.0),
 "compare": lambda x: (x > y).float() + (x <= 0.1).float() + (i == 2).float() + (x != y).float(),
 "logical": lambda x: ((x > 0) & (y > 0)).float() + ((x > 0) | (y > 0)).float() + (~(x > 0)).float() + torch.logical_not(x > 0).float() + torch.logical_xor(x > 0, y > 0).float(),
 "minmax": lambda x: torch.maximum(x, y) + torch.minimum(x, y),
 "unary": lambda x: x.exp() + x.sigmoid() + x.tanh() + x.abs().log() + x.abs().sqrt() + x.abs().rsqrt() + x.sin() + x.cos() + x.floor() + x.ceil() + x.round() + x.trunc() + x.sign() + x.erf() + x.expm1() + x.abs().log1p() + x.reciprocal(),
 "casts": lambda x: x.to(torch.int32).float() + x.half().float() + (x > 0).long().float() + i.double().float(),
 "bool_math": lambda x: ((x > 0) + (y > 0)).float() + (x > 0).sum(1, keepdim=True).float(),
 "softplus": lambda x: F.softplus(x) + F.elu(x) + F.leaky_relu(x, 0.1) + F.hardtanh(x) + F.silu(x) + F.mish(x) + F.hardswish(x) + F.hardsigmoid(x),
 "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
 "views": lambda x: x.t().reshape(3, 8) + x.view(3, 8) + x.permute(1, 0).flip(0).reshape(3, 8),
 "slice_step": lambda x: x[:, 1::2] + x[:, ::2] + x[1:3].sum(0)[::2],
 "slice_neg": lambda x: x[:, -3:] + x[-2:, :3].repeat(2, 1),
 "select_neg": lambda x: x[:, -1:] + x[-1],
 "expand": lambda x: x[:, :1].expand(4, 6) + b.expand(4, 6),
 "unsqueeze_squeeze": lambda x: x.unsqueeze(1).squeeze(1) + x.sum(1, keepdim=True).squeeze()[:, None],
 "split": lambda x: torch.cat([a * 2 for a in x.split(2, dim=1)], 1) + sum(x.split([1, 5], 1)[1].sum(1, keepdim=True) for _ in range(1)),
 "reductions": lambda x: x.sum() + x.mean() + x.amax() + x.amin() + x.sum(0).sum() + x.std() + x.var(1).sum() + x.prod(),
 "argmax": lambda x: x.argmax(1).float() + x.max(1).values,
 "logsumexp": lambda x: torch.logsumexp(x, 1),
 "cumsum": lambda x: x.cumsum(1),
 "norms": lambda x: F.normalize(x, dim=1) + F.layer_norm(x, (6,)) + F.rms_norm(x, (6,)),
 "mse": lambda x: F.mse_loss(x, y) + F.l1_loss(x, y) + F.smooth_l1_loss(x, y) + F.binary_cross_entropy_with_logits(x, (y > 0).float()),
 "ce_ls": lambda x: F.cross_entropy(x, torch.tensor([0, 5, 2, 3]), label_smoothing=0.1),
 "ce_ignore": lambda x: F.cross_entropy(x, torch.tensor([0, -100, 2, 3])),
 "nll_weight": lambda x: F.nll_loss(F.log_softmax(x, 1), torch.tensor([0, 5, 2, 3]), weight=b.abs()),
 "masked_fill": lambda x: x.masked_fill(x > 0.5, float("-inf")).softmax(1),
 "nan": lambda x: torch.nan_to_num(x.log()) + torch.isnan(x.log()).float(),
 "arange_float": lambda x: x + torch.arange(6.0) * 0.5 + torch.arange(0, 3, 0.5),
 "linspace": lambda x: x + torch.linspace(0, 1, 6),
 "tril": lambda x: x.tril() + x.triu(1),
 "index_select": lambda x: x.index_select(1, torch.tensor([0, 2, 5])).sum(1, keepdim=True) + x,
 "bitwise_not": lambda x: (~i).float() + x + (~(x > 0)).float() + (~i.int()).float(),
 "int_ops": lambda x: (i * 3 + 2 - i // 2).float() + x + (i % 3).float(),
 "abs_neg_int": lambda x: (-i).abs().float() + x,
 "scalar_out": lambda x: (x.sum() * 2).view(1) + 1,
 "copy_into_zeros": lambda x: torch.zeros_like(x).copy_(x) * 2,
 "sigmoid_bwd": lambda x: torch.ops.aten.sigmoid_backward(x, y) + torch.ops.aten.tanh_backward(x, y),
 "lerp": lambda x: torch.lerp(x, y, 0.3) + torch.addcmul(x, x, y, value=0.5) + torch.addcdiv(x, x, y.abs() + 1, value=2),
 "gather_neg": lambda x: torch.gather(x, 1, torch.tensor([[0], [5], [2], [3]])) + 1,
 "scatter_add": lambda x: torch.zeros(4, 6).scatter_add(1, torch.tensor([[0], [5], [2], [3]]), x[:, :1]),
 "empty_reductions": lambda x: (x[:0].sum(0), x[:0].float().mean(0), x[:, :0].sum(1) + 1),
 "embedding": lambda x: F.embedding(torch.tensor([[0, 3], [3, 1]]), x) * 2 + F.embedding(torch.tensor([1]), x),
 "index_rows": lambda x: x[torch.tensor([2, -1, 0])] + x[torch.tensor([[1], [3], [0]])].sum(1),
 "index_cols": lambda x: x[:, torch.tensor([5, 0, -2])] * 3,
 "remainder_fmod_mixed_signs": lambda x: (torch.remainder(x * 3, -0.7), torch.fmod(x * 3, -0.7), torch.remainder(i, -3),
                                          torch.fmod(i, 3), torch.remainder(i, i.abs() + 1), torch.remainder(5.0, x.abs() + 1)),
 "int_div_modes": lambda x: (torch.div(i, 3, rounding_mode="floor"), torch.div(i, -3, rounding_mode="trunc"),
                             torch.div(i, i.abs() + 1, rounding_mode="floor"), torch.div(x, -0.3, rounding_mode="trunc")),
 "flip": lambda x: x.flip(0) + x.flip(1) * 2 + x.flip(0, 1).sum(0),
 "pad": lambda x: F.pad(x, (1, 2)) + 1 + F.pad(x, (0, 0, 2, 1), value=-3.5).sum() + F.pad(x, (-1, -2)).sum(),
 "one_hot": lambda x: F.one_hot(torch.tensor([0, 5, 2, 3]), 6).float() * x,
 "any_all": lambda x: ((x > 0).any(-1), (x > 2).any(), x.all(0, keepdim=True), (x > -1).all(), i.any(1),
                       torch.ops.aten.any.dims(x * 0, [0, 1]), x.float().nan_to_num().log().any(1)),
 "index_put_acc": lambda x: (torch.index_put(x * 2, (torch.tensor([0, 2, 2, -1]),), x[:4] + 1, accumulate=True),
                             torch.index_put(x, (torch.tensor([1, 1, 3]),), torch.ones(6), accumulate=True),
                             torch.ops.aten.index_put(x, [None, torch.tensor([[5, 5], [0, 5]])], x[:, :4].view(4, 2, 2), True)),
 "index_put_acc_int": lambda x: torch.index_put(i, (torch.tensor([1, 1]),), i[:2] * 3, accumulate=True),
 "index_put": lambda x: torch.index_put(x, (torch.tensor([2, 0]),), x[1:3] * 3) + torch.index_put(x, (torch.tensor([-1]),), b),
 "scatter_add_2d": lambda x: (x.scatter_add(0, torch.tensor([[0, 1, 1, 0, 3, 3], [0, 0, 0, 0, 3, 3]]), x[2:4] * 2),
                              torch.zeros(4, 3).scatter_add(1, torch.tensor([[0, 0], [2, 2], [1, 0], [2, 1]]), x[:, :3])),
 "empty_results": lambda x: (x[:0] * 2, torch.cat([torch.tensor([]), x.view(-1)]) + 1, x[:, :0].exp()),
 "sort_topk": lambda x: (torch.sort(x, 1)[0] * 2, torch.topk(x, 2).values + 1, torch.topk(x, 2, dim=0).indices),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_op_matches_eager(name):
    fn = CASES[name]
    pydynamo.reset()
    got = pydynamo.optimize("triton", fullgraph=True)(fn)(x.clone())
    torch.testing.assert_close(got, fn(x.clone()), atol=1e-5, rtol=1e-5, equal_nan=True)


# ---- layouts and dtypes ----

g = torch.Generator().manual_seed(0)
base = torch.randn(6, 8, generator=g)
INPUTS = {
 "transposed": base.t(),
 "sliced": base[:, ::2],
 "expanded": base[:1].expand(6, 8),
 "offset": base[2:, 3:],
 "zero_d": torch.tensor(1.5),
 "size1": base[:, :1],
 "fp16": base.half(),
 "bf16": base.bfloat16(),
 "int": (base * 3).int(),
 "bool": base > 0,
 "empty": torch.empty(0, 8),
 "channels_last": torch.randn(2, 3, 4, 5, generator=g).to(memory_format=torch.channels_last),
 "f64": base.double(),
}
FNS = {
 "cat_flip": lambda x: torch.cat([x, x.flip(-1)], -1) if x.dim() else x,
 "argmax_cumsum": lambda x: (x.argmax(-1), x.cumsum(-1)) if x.dim() and x.numel() else x,
 "pad_max": lambda x: (F.pad(x, (1, 1)).amax(-1), x.max(-1).indices) if x.dim() and x.numel() else x,
 "pointwise": lambda x: (x * 2 + 1) if x.dtype != torch.bool else (x & True),
 "sum": lambda x: x.sum(-1) if x.dim() else x * 1,
 "softmax": lambda x: torch.softmax(x.float(), -1) if x.dim() else x * 1.0,
 "mean0": lambda x: x.float().mean(0) if x.dim() else x + 0,
 "amax": lambda x: x.amax(-1) if x.dim() and x.numel() else x + 0 if x.dtype != torch.bool else x,
 "cast_back": lambda x: (x.float().exp() * 0.5).to(x.dtype),
 "where": lambda x: torch.where(x > 0, x, torch.zeros_like(x)),
 "cumsum": lambda x: x.cumsum(-1) if x.dim() else x,
}


@pytest.mark.parametrize("fname", sorted(FNS))
@pytest.mark.parametrize("iname", sorted(INPUTS))
def test_layouts_and_dtypes(iname, fname):
    """Each small function on strided, offset, expanded, 0-d, empty, channels-last, half, int,
    bool and double inputs gives eager's values, dtype and shape (cases eager rejects skip)."""
    x, fn = INPUTS[iname], FNS[fname]
    try:
        want = fn(x.clone())
    except Exception:
        pytest.skip("eager rejects it")
    pydynamo.reset()
    got = pydynamo.optimize("triton", fullgraph=True)(fn)(x)
    low = x.dtype in (torch.float16, torch.bfloat16)
    torch.testing.assert_close(got, want, atol=1e-2 if low else 1e-5, rtol=1e-2 if low else 1e-5, equal_nan=True)
    for a, b in zip(*((t,) if isinstance(t, torch.Tensor) else t for t in (got, want))):
        assert a.dtype == b.dtype and a.shape == b.shape
