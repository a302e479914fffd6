"""Real models through pydynamo: graphs, graph breaks and their reasons, and correctness.

    python tools/bench_real.py [--device cuda] [--only name,name]

Models come from torchvision, timm and transformers when installed (random weights, built from
configs: nothing is downloaded). Each runs eagerly and through pydynamo.explain (eager backend)
and, for comparison, torch._dynamo.explain; the table gives graph and break counts for both, the
largest difference from eager, and pydynamo's most frequent break reasons.
"""
import argparse
import collections
import importlib
import traceback

import torch

import pydynamo


def _torchvision():
    import torchvision.models as tvm
    yield "tv.resnet18", lambda: tvm.resnet18(), lambda d: (torch.randn(2, 3, 224, 224, device=d),)
    yield "tv.mobilenet_v3_small", lambda: tvm.mobilenet_v3_small(), lambda d: (torch.randn(2, 3, 224, 224, device=d),)
    yield "tv.vit_b_16", lambda: tvm.vit_b_16(), lambda d: (torch.randn(1, 3, 224, 224, device=d),)
    yield "tv.convnext_tiny", lambda: tvm.convnext_tiny(), lambda d: (torch.randn(1, 3, 224, 224, device=d),)


def _timm():
    import timm
    for name in ("resnet50", "efficientnet_b0", "vit_small_patch16_224", "convnext_nano"):
        yield f"timm.{name}", (lambda n=name: timm.create_model(n, pretrained=False)), \
            (lambda d: (torch.randn(1, 3, 224, 224, device=d),))


def _transformers():
    import transformers as tr

    def ids(d, vocab=1000):
        return (torch.randint(0, vocab, (2, 32), device=d),)
    yield "hf.bert", lambda: tr.BertModel(tr.BertConfig(num_hidden_layers=2, vocab_size=1000)), ids
    yield "hf.gpt2", lambda: tr.GPT2Model(tr.GPT2Config(n_layer=2, vocab_size=1000)), ids
    yield "hf.t5", lambda: tr.T5EncoderModel(tr.T5Config(num_layers=2, vocab_size=1000)), ids
    yield "hf.llama", lambda: tr.LlamaModel(tr.LlamaConfig(num_hidden_layers=2, vocab_size=1000, hidden_size=256,
                                                           intermediate_size=512, num_attention_heads=4,
                                                           num_key_value_heads=4)), ids


def _models():
    for source in (_torchvision, _timm, _transformers):
        try:
            yield from source()
        except ImportError as e:
            print(f"skipping {source.__name__[1:]}: {e}")


def _first_tensor(out):
    if isinstance(out, torch.Tensor):
        return out
    if hasattr(out, "to_tuple"):
        out = out.to_tuple()
    if isinstance(out, (tuple, list)):
        for o in out:
            t = _first_tensor(o)
            if t is not None:
                return t
    if isinstance(out, dict):
        return _first_tensor(list(out.values()))
    return None


def run(name, make, inputs, device):
    torch.manual_seed(0)
    model = make().to(device).eval()
    args = inputs(device)
    with torch.no_grad():
        expected = _first_tensor(model(*args))
        report = pydynamo.explain(model)(*args)
        got = _first_tensor(pydynamo.compile(model, backend="eager")(*args))
        pydynamo.reset()
        try:
            torch_dynamo = importlib.import_module("torch._dynamo")  # tools may use it, to compare
            torch_dynamo.reset()
            theirs = torch_dynamo.explain(model)(*args)
            t_counts = f"{theirs.graph_count}/{theirs.graph_break_count}"
        except Exception as e:  # noqa: BLE001
            t_counts = f"error: {type(e).__name__}"
    err = (got.float() - expected.float()).abs().max().item() if got is not None else float("nan")
    reasons = collections.Counter(br.reason.splitlines()[0][:70] for br in report.break_reasons)
    return f"{report.graph_count}/{report.graph_break_count}", t_counts, err, reasons.most_common(3)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--only", default="")
    a = p.parse_args()
    only = set(filter(None, a.only.split(",")))
    print(f"{'model':<26}{'ours g/b':>10}{'torch g/b':>11}{'max err':>10}  top break reasons")
    for name, make, inputs in _models():
        if only and name not in only:
            continue
        try:
            ours, theirs, err, reasons = run(name, make, inputs, a.device)
            print(f"{name:<26}{ours:>10}{theirs:>11}{err:>10.2e}  {reasons}", flush=True)
        except Exception as e:  # noqa: BLE001
            print(f"{name:<26} FAILED: {type(e).__name__}: {str(e).splitlines()[0][:120]}", flush=True)
            traceback.print_exc(limit=3)


if __name__ == "__main__":
    main()
