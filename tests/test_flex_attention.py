"""flex_attention captured in one graph: score_mod closures, block masks made outside, both,
return_lse, GQA; results equal eager's and no more graphs than torch.compile's. (Training and
the fused kernel need a GPU: tests/gpu/test_functional_gpu.py.)"""
import pytest
import torch
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

import pydynamo
from pydynamo.testing import CompileCounter

from functional_support import compare, raises_like_eager, targets

Q = torch.randn(2, 4, 32, 16)
KV = torch.randn(2, 2, 32, 16)
BIAS = torch.randn(32, 32)
DOCS = torch.zeros(32, dtype=torch.int64)
DOCS[16:] = 1


def causal(b, h, m, n):
    return m >= n


def sliding(b, h, m, n):
    return (m >= n) & (m - n < 8)


def document(b, h, m, n):
    return DOCS[m] == DOCS[n]


CAUSAL = create_block_mask(causal, None, None, 32, 32, device="cpu", BLOCK_SIZE=16)
SLIDING = create_block_mask(sliding, None, None, 32, 32, device="cpu", BLOCK_SIZE=16)
DOCUMENT = create_block_mask(document, None, None, 32, 32, device="cpu", BLOCK_SIZE=16)


def plain(q, k, v):
    return flex_attention(q, k, v)


def relative(q, k, v):
    return flex_attention(q, k, v, score_mod=lambda s, b, h, m, n: s + (m - n))


def alibi(q, k, v):
    slopes = torch.exp2(-torch.arange(1, 5, dtype=torch.float32))
    return flex_attention(q, k, v, score_mod=lambda s, b, h, m, n: s + slopes[h] * (n - m))


def softcap(q, k, v):
    return flex_attention(q, k, v, score_mod=lambda s, b, h, m, n: 20 * torch.tanh(s / 20))


def captured_bias(q, k, v):
    return flex_attention(q, k, v, score_mod=lambda s, b, h, m, n: s + BIAS[m, n])


def causal_mask(q, k, v):
    return flex_attention(q, k, v, block_mask=CAUSAL)


def sliding_window(q, k, v):
    return flex_attention(q, k, v, block_mask=SLIDING)


def document_mask(q, k, v):
    return flex_attention(q, k, v, block_mask=DOCUMENT)


def score_and_mask(q, k, v):
    return flex_attention(q, k, v, score_mod=lambda s, b, h, m, n: s + (m - n), block_mask=CAUSAL) * 2


def with_lse(q, k, v):
    return flex_attention(q, k, v, block_mask=CAUSAL, return_lse=True)


def gqa(q, k, v):
    return flex_attention(q, k, v, enable_gqa=True, block_mask=CAUSAL)


def ops_around(q, k, v):
    return flex_attention(q.sin(), k, v, scale=0.3).cos()


CASES = [plain, relative, alibi, softcap, captured_bias, causal_mask, sliding_window, document_mask,
         score_and_mask, with_lse, gqa, ops_around]


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("fn", CASES, ids=[f.__name__ for f in CASES])
def test_captured_like_torch_compile(fn):
    args = (Q, KV, KV) if fn is gqa else (Q, Q, Q)
    cnt = compare(fn, *args, atol=1e-5)
    assert cnt.frame_count == 1


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("fn", [relative, causal_mask, document_mask], ids=["relative", "causal", "document"])
def test_one_flex_attention_node_with_bodies(fn):
    pydynamo.reset()
    cnt = CompileCounter()
    pydynamo.optimize(cnt, fullgraph=True)(fn)(Q, Q, Q)
    gm = cnt.graphs[0]
    assert any(n.op == "get_attr" and n.target.startswith("sdpa_score") for n in gm.graph.nodes)
    assert any(getattr(t, "__name__", "") == "flex_attention" for t in targets(cnt))
    pydynamo.reset()


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("fn", [relative, captured_bias, causal_mask, document_mask], ids=["relative", "bias", "causal", "document"])
def test_inductor_on_cpu(fn):
    expected = fn(Q, Q, Q)
    pydynamo.reset()
    got = pydynamo.optimize("inductor", fullgraph=True)(fn)(Q, Q, Q)
    assert torch.allclose(expected, got, atol=1e-4)
    pydynamo.reset()


@pytest.mark.filterwarnings("ignore")
def test_a_new_block_mask_object_is_guarded():
    other = create_block_mask(sliding, None, None, 32, 32, device="cpu", BLOCK_SIZE=16)

    def f(q, mask):
        return flex_attention(q, q, q, block_mask=mask)
    pydynamo.reset()
    c = pydynamo.optimize("eager")(f)
    assert torch.allclose(c(Q, CAUSAL), f(Q, CAUSAL), atol=1e-5)
    assert torch.allclose(c(Q, other), f(Q, other), atol=1e-5)  # another mask_mod: not the first body
    pydynamo.reset()


@pytest.mark.filterwarnings("ignore")
def test_wrong_sequence_length_raises_like_eager():
    q = torch.randn(2, 4, 16, 16)
    raises_like_eager(causal_mask, q, q, q, expected=ValueError)


@pytest.mark.filterwarnings("ignore")
def test_a_block_mask_of_another_layout_recompiles():
    from torch.nn.attention.flex_attention import BlockMask
    partial_only = BlockMask.from_kv_blocks(CAUSAL.kv_num_blocks, CAUSAL.kv_indices, BLOCK_SIZE=CAUSAL.BLOCK_SIZE,
                                            mask_mod=causal, seq_lengths=CAUSAL.seq_lengths)
    assert partial_only.full_kv_num_blocks is None and CAUSAL.full_kv_num_blocks is not None

    def f(q, mask):
        return flex_attention(q, q, q, block_mask=mask)
    pydynamo.reset()
    cnt = CompileCounter()
    c = pydynamo.optimize(cnt)(f)
    assert torch.allclose(c(Q, partial_only), f(Q, partial_only), atol=1e-5)
    assert torch.allclose(c(Q, CAUSAL), f(Q, CAUSAL), atol=1e-5)
    assert cnt.frame_count == 2  # the full blocks' absence is guarded, not assumed
    pydynamo.reset()
