"""Regression tests for issue 37 (soundness, part three) that are not about one modelled API:

- replay order: the objects side effects write into are read (by their Sources) before any
  write, so a write into a container on the path to another target cannot redirect it
  (transformers' ``deprecate_kwarg``: ``kwargs[new] = kwargs.pop(old)``, then a KV cache
  update through ``kwargs[old]``);
- who asked: cache entries are keyed by the backend and the options that change what is
  compiled (fullgraph, dynamic, mode), as torch.compile's are;
- torch's own code: frames of torch's package, of code its compilers generate, and of the
  import system are never compiled as entries.
"""
import functools

import pytest
import torch

import pydynamo
from pydynamo import convert_frame
from pydynamo.testing import CompileCounter


@pytest.fixture(autouse=True)
def _reset():
    pydynamo.reset()
    yield
    pydynamo.reset()


# ---- replay order ----------------------------------------------------------------------------

class _Layer:
    def __init__(self):
        self.keys = None


class _Cache:
    def __init__(self):
        self.layers = [_Layer()]


def test_store_through_a_key_the_replay_removed():
    def step(x, **kwargs):
        kwargs["cache"] = kwargs.pop("old")
        kwargs["cache"].layers[0].keys = x * 2
        return kwargs

    def run(f):
        c, x = _Cache(), torch.ones(2)
        kw = f(x, old=c, m=1)
        return sorted(kw), kw["cache"] is c, c.layers[0].keys

    eager, comp = run(step), run(pydynamo.optimize("eager")(step))
    assert eager[:2] == comp[:2] and torch.equal(eager[2], comp[2])


def test_store_through_a_key_removed_before_a_graph_break():
    def step(x, **kwargs):
        kwargs["cache"] = kwargs.pop("old")
        kwargs["cache"].layers[0].keys = x * 2
        pydynamo.graph_break()
        return kwargs["cache"].layers[0].keys + 1

    c = _Cache()
    out = pydynamo.optimize("eager")(step)(torch.ones(2), old=c)
    assert torch.equal(out, torch.full((2,), 3.0)) and torch.equal(c.layers[0].keys, torch.full((2,), 2.0))


def test_transformers_decode_step_with_an_eager_cache():
    """One step of generate(): the cache of an eager call passed back in (issue 37 item 6)."""
    transformers = pytest.importorskip("transformers")
    import copy
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32)
    m = transformers.LlamaForCausalLM(cfg).eval()
    ids = torch.randint(0, 64, (1, 5))
    with torch.no_grad():
        pkv = m(ids, use_cache=True).past_key_values
        step = dict(attention_mask=torch.ones(1, 6, dtype=torch.long), cache_position=torch.tensor([5]),
                    use_cache=True)
        nxt = torch.randint(0, 64, (1, 1))
        pkv2 = copy.deepcopy(pkv)
        ref = m(nxt, past_key_values=pkv, **step).logits
        got = pydynamo.optimize("eager")(m)(nxt, past_key_values=pkv2, **step).logits
    torch.testing.assert_close(got, ref)
