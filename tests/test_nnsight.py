"""A library idiom from outside: models wrapped by nnsight 0.8 (NNsight(model)), compiled whole.
nnsight's Envoy installs a controller object as each module's forward, holding the module by a
weakref and reading the module's __dict__: pydynamo must give one graph where torch.compile
does, with fullgraph=True too, and compile a second wrapped model in the same process."""
import contextlib
import io
import warnings

import pytest
import torch

import pydynamo
from pydynamo.testing import CompileCounter, same

nnsight = pytest.importorskip("nnsight")


class Logits(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, ids):
        return self.model(ids).logits


def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2)), torch.randn(3, 4)


def _gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=100, n_positions=32, bos_token_id=0, eos_token_id=0)
    return Logits(GPT2LMHeadModel(cfg).eval()), torch.randint(0, 100, (1, 8))


def _graphs(compile_fn, model, x):
    cnt = CompileCounter()
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        out = compile_fn(model, cnt)(x)
        again = compile_fn(model, cnt)(x)
    return out, again, cnt.frame_count


@pytest.mark.parametrize("make", [_mlp, _gpt2], ids=["mlp", "gpt2"])
@pytest.mark.parametrize("fullgraph", [False, True])
def test_nnsight_model_one_graph_like_torch_compile(make, fullgraph):
    import torch._dynamo
    net, x = make()
    model = nnsight.NNsight(net)
    with torch.no_grad():
        expected = net(x)
        pydynamo.reset()
        out, again, ours = _graphs(lambda m, c: pydynamo.optimize(c, fullgraph=fullgraph)(m), model, x)
        torch._dynamo.reset()
        _, _, theirs = _graphs(lambda m, c: torch.compile(m, backend=c, fullgraph=fullgraph), model, x)
        torch._dynamo.reset()
    assert same(out, expected, exact=False) and same(again, expected, exact=False)
    assert ours == theirs == 1
    pydynamo.reset()
    report = pydynamo.explain(model)(x)
    assert report.graph_break_count == 0


def test_a_second_nnsight_model_still_compiles():
    first, x = _mlp()
    torch.manual_seed(1)
    second = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Tanh())
    pydynamo.reset()
    with torch.no_grad():
        for net, inp in ((first, x), (second, torch.randn(2, 4))):
            model = nnsight.NNsight(net)
            cnt = CompileCounter()
            out = pydynamo.optimize(cnt, fullgraph=True)(model)(inp)
            assert same(out, net(inp), exact=False)
            assert cnt.frame_count == 1


def test_weakref_referent_is_guarded_alive():
    """A weakref read from the inputs: calling it gives the referent (guarded through the ref:
    a dead referent fails the guards and gives None, as in eager)."""
    import gc
    import weakref

    class Box:
        def __init__(self, t):
            self.t = t

    def fn(x, ref):
        obj = ref()
        return x + 1 if obj is None else x * obj.t

    cnt = CompileCounter()
    f = pydynamo.optimize(cnt, fullgraph=True)(fn)
    box = Box(3)
    ref = weakref.ref(box)
    assert same(f(torch.ones(2), ref), torch.ones(2) * 3)
    box.t = 5
    assert same(f(torch.ones(2), ref), torch.ones(2) * 5)
    del box
    gc.collect()
    assert same(f(torch.ones(2), ref), torch.ones(2) + 1)
    assert cnt.frame_count == 3
