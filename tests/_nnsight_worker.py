"""Run by tests/test_nnsight.py in a subprocess: importing nnsight patches torch globally
(Tensor.backward, Tensor.save, Tensor.__torch_function__), which must not reach other tests.
Prints one JSON object: for each case, pydynamo's and torch.compile's graph counts, break
count and equality with eager."""
import contextlib
import io
import json
import sys
import warnings

import torch

import pydynamo
from pydynamo.testing import CompileCounter, same

import nnsight  # noqa: E402  (after torch and pydynamo, as a user would)


class Logits(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, ids):
        return self.model(ids).logits


def mlp(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2)), torch.randn(3, 4)


def gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=100, n_positions=32, bos_token_id=0, eos_token_id=0)
    return Logits(GPT2LMHeadModel(cfg).eval()), torch.randint(0, 100, (1, 8))


def graphs(compile_fn, model, x):
    cnt = CompileCounter()
    out = compile_fn(model, cnt)(x)
    again = compile_fn(model, cnt)(x)
    return out, again, cnt.frame_count


def case(make, fullgraph):
    import torch._dynamo
    net, x = make()
    model = nnsight.NNsight(net)
    with torch.no_grad():
        expected = net(x)
        pydynamo.reset()
        out, again, ours = graphs(lambda m, c: pydynamo.optimize(c, fullgraph=fullgraph)(m), model, x)
        torch._dynamo.reset()
        _, _, theirs = graphs(lambda m, c: torch.compile(m, backend=c, fullgraph=fullgraph), model, x)
        torch._dynamo.reset()
        pydynamo.reset()
        breaks = pydynamo.explain(model)(x).graph_break_count
    return {"ours": ours, "theirs": theirs, "breaks": breaks,
            "equal": bool(same(out, expected, exact=False) and same(again, expected, exact=False))}


def second_model():
    """Two wrapped models, one after the other, in one process: each one graph."""
    pydynamo.reset()
    counts = []
    with torch.no_grad():
        for net, inp in (mlp(0), (torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Tanh()), torch.randn(2, 4))):
            cnt = CompileCounter()
            out = pydynamo.optimize(cnt, fullgraph=True)(nnsight.NNsight(net))(inp)
            counts.append((cnt.frame_count, bool(same(out, net(inp), exact=False))))
    return counts


def main():
    results = {}
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        for name, make in (("mlp", mlp), ("gpt2", gpt2)):
            for fullgraph in (False, True):
                results[f"{name}-{'full' if fullgraph else 'breaks'}"] = case(make, fullgraph)
        results["second"] = second_model()
    sys.stdout.write(json.dumps(results) + "\n")


if __name__ == "__main__":
    main()
