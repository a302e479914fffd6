"""Training coverage of the triton backend: small modules under pydynamo.optimize("triton")
(norms, attention, pooling, convolutions, losses, activations, half precision), forward output,
input gradient and every parameter gradient against eager, through Triton's CPU interpreter."""
import copy
import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported: kernels run on the CPU

import pytest  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

pytest.importorskip("triton")

import pydynamo  # noqa: E402

os.environ["PYDYNAMO_TRITON_STRICT"] = "1"  # an internal error fails the test instead of hiding
torch.manual_seed(0)


class Wrap(nn.Module):
    def __init__(self, fn, *mods):
        super().__init__()
        self.mods, self.fn = nn.ModuleList(mods), fn

    def forward(self, x):
        return self.fn(self.mods, x)


CASES = {
 "groupnorm": (Wrap(lambda m, x: m[0](x), nn.GroupNorm(2, 4)), (3, 4, 5, 5)),
 "instancenorm": (Wrap(lambda m, x: m[0](x), nn.InstanceNorm2d(4, affine=True)), (3, 4, 5, 5)),
 "batchnorm_train": (Wrap(lambda m, x: m[0](x), nn.BatchNorm2d(4)), (3, 4, 5, 5)),
 "rmsnorm": (Wrap(lambda m, x: m[0](x), nn.RMSNorm(8)), (3, 5, 8)),
 "mha": (Wrap(lambda m, x: m[0](x, x, x, need_weights=False)[0], nn.MultiheadAttention(8, 2, batch_first=True)), (2, 5, 8)),
 "sdpa_causal": (Wrap(lambda m, x: F.scaled_dot_product_attention(m[0](x), x, x, is_causal=True), nn.Linear(8, 8)), (2, 2, 5, 8)),
 "avgpool_maxpool": (Wrap(lambda m, x: F.avg_pool2d(m[0](x), 2) + F.max_pool2d(x, 2), nn.Conv2d(4, 4, 3, padding=1)), (2, 4, 6, 6)),
 "adaptive_avg": (Wrap(lambda m, x: F.adaptive_avg_pool2d(m[0](x), 1).flatten(1), nn.Conv2d(4, 4, 1)), (2, 4, 6, 6)),
 "interpolate": (Wrap(lambda m, x: F.interpolate(m[0](x), scale_factor=2, mode="nearest"), nn.Conv2d(4, 4, 1)), (2, 4, 3, 3)),
 "bilinear": (Wrap(lambda m, x: F.interpolate(m[0](x), scale_factor=2, mode="bilinear"), nn.Conv2d(4, 4, 1)), (2, 4, 3, 3)),
 "pad": (Wrap(lambda m, x: F.pad(m[0](x), (1, 2)), nn.Linear(6, 6)), (3, 6)),
 "silu_mlp": (Wrap(lambda m, x: m[1](F.silu(m[0](x)) * m[0](x)), nn.Linear(8, 16), nn.Linear(16, 8)), (4, 8)),
 "gelu_tanh": (Wrap(lambda m, x: F.gelu(m[0](x), approximate="tanh"), nn.Linear(8, 8)), (4, 8)),
 "softplus_elu": (Wrap(lambda m, x: F.softplus(m[0](x)) + F.elu(x) + F.leaky_relu(x) + F.hardswish(x), nn.Linear(8, 8)), (4, 8)),
 "logsumexp": (Wrap(lambda m, x: torch.logsumexp(m[0](x), -1), nn.Linear(8, 8)), (4, 8)),
 "cumsum_cols": (Wrap(lambda m, x: m[0](x).cumsum(0) * x, nn.Linear(8, 8)), (40, 8)),
 "cumsum": (Wrap(lambda m, x: m[0](x).cumsum(-1), nn.Linear(8, 8)), (4, 8)),
 "std_mean": (Wrap(lambda m, x: m[0](x).std(-1) + x.mean(), nn.Linear(8, 8)), (4, 8)),
 "norm": (Wrap(lambda m, x: F.normalize(m[0](x), dim=-1) + x.norm(dim=-1, keepdim=True), nn.Linear(8, 8)), (4, 8)),
 "max_min": (Wrap(lambda m, x: m[0](x).max(-1).values + x.min(0).values.sum(), nn.Linear(8, 8)), (4, 8)),
 "topk_sort": (Wrap(lambda m, x: m[0](x).topk(3, -1).values.sum(-1) + x.sort(-1).values[:, 0], nn.Linear(8, 8)), (4, 8)),
 "where_mask": (Wrap(lambda m, x: torch.where(x > 0, m[0](x), -m[0](x)).masked_fill(x < -1, 0), nn.Linear(8, 8)), (4, 8)),
 "conv1d_glu": (Wrap(lambda m, x: F.glu(m[0](x), 1), nn.Conv1d(4, 8, 3, padding=1)), (2, 4, 7)),
 "conv_transpose": (Wrap(lambda m, x: m[0](x).relu(), nn.ConvTranspose2d(4, 2, 2, stride=2)), (2, 4, 3, 3)),
 "embedding_bag": (Wrap(lambda m, x: m[0](x.long().abs() % 10), nn.Embedding(10, 4)), (3, 5)),
 "bce": (Wrap(lambda m, x: F.binary_cross_entropy(torch.sigmoid(m[0](x)), (x > 0).float()), nn.Linear(8, 8)), (4, 8)),
 "kl_div": (Wrap(lambda m, x: F.kl_div(F.log_softmax(m[0](x), -1), F.softmax(x, -1), reduction="batchmean"), nn.Linear(8, 8)), (4, 8)),
 "huber": (Wrap(lambda m, x: F.huber_loss(m[0](x), x) + F.smooth_l1_loss(m[0](x), x * 2), nn.Linear(8, 8)), (4, 8)),
 "ce_3d": (Wrap(lambda m, x: F.cross_entropy(m[0](x).transpose(1, 2), (x[..., 0].abs() * 3).long() % 8), nn.Linear(8, 8)), (2, 5, 8)),
 "ce_smooth": (Wrap(lambda m, x: F.cross_entropy(m[0](x), (x[:, 0].abs() * 3).long() % 8, label_smoothing=0.2), nn.Linear(8, 8)), (6, 8)),
 "dropout_eval": (Wrap(lambda m, x: F.dropout(m[0](x), 0.5, training=False), nn.Linear(8, 8)), (4, 8)),
 "chunk_cat": (Wrap(lambda m, x: torch.cat(m[0](x).chunk(2, -1)[::-1], -1) * torch.stack([x, x]).sum(0), nn.Linear(8, 8)), (4, 8)),
 "einsum": (Wrap(lambda m, x: torch.einsum("bij,bkj->bik", m[0](x), x), nn.Linear(8, 8)), (2, 3, 8)),
 "rope": (Wrap(lambda m, x: (lambda q: torch.cat([-q[..., 4:], q[..., :4]], -1) * 0.5 + q * torch.cos(torch.arange(8.0)))(m[0](x)), nn.Linear(8, 8)), (2, 3, 8)),
 "half_mlp": (Wrap(lambda m, x: m[1](F.gelu(m[0](x.half()))).float(), nn.Linear(8, 16).half(), nn.Linear(16, 8).half()), (4, 8)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_training_step_matches_eager(name):
    mod, shape = CASES[name]
    ref = copy.deepcopy(mod)
    x = torch.randn(shape, generator=torch.Generator().manual_seed(1))
    x2 = x.clone().requires_grad_()
    x.requires_grad_()
    pydynamo.reset()
    out, want = pydynamo.optimize("triton")(mod)(x), ref(x2)
    tol = dict(atol=2e-3, rtol=2e-3) if "half" in name else dict(atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(out, want, **tol)
    g = torch.randn(want.shape, generator=torch.Generator().manual_seed(2))  # an upstream gradient
    (out.float() * g).sum().backward()
    (want.float() * g).sum().backward()
    torch.testing.assert_close(x.grad, x2.grad, **tol)
    for (pname, p), q in zip(mod.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, **tol, msg=lambda m: f"{pname}: {m}")
    pydynamo.reset()
