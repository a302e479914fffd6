"""Real models through pydynamo beside torch.compile: graphs, breaks, fullgraph, correctness, compile time.

    python tools/bench_real.py [--device cuda] [--only bert,llama] [--skip-torch]
    python tools/bench_real.py --sweep [--limit N] [--start K] [--only-kind causal|base|timm]

Models: Hugging Face transformers families from tools/hf_models.py (small configs, random weights,
nothing downloaded; a BERT classification training step and a LLaMA KV-cache decode step among
them), and torchvision / timm models when those are installed. For each model, in this one run:

  ours g/b, torch g/b   graph / graph-break counts of pydynamo.explain and torch._dynamo.explain
  full                  whether fullgraph=True succeeds: pydynamo / torch.compile ("y" or "n")
  max err               largest difference from eager over every output tensor (and, for the
                        training step, every parameter's gradient); eager backend
  compile s, ratio      first call (eager backend) of pydynamo and of torch.compile, in seconds
                        (median of --repeat cold calls, each after a reset and with torch's
                        fake-tensor cache emptied, as in a new process), and ours / theirs
                        (issue 18's target: at most 0.5)

then pydynamo's most frequent break reasons.
"""
import argparse
import collections
import importlib
import os
import statistics
import sys
import time
import traceback

import torch

import pydynamo

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_models  # noqa: E402


def _images(batch=2, size=224):
    def inputs(model, d):
        return (torch.randn(batch, 3, size, size, generator=torch.Generator().manual_seed(1)).to(d),), {}
    return inputs


def _torchvision():
    import torchvision.models as tvm
    for name in ("resnet18", "mobilenet_v3_small", "vit_b_16", "convnext_tiny"):
        yield f"tv.{name}", (lambda n=name: getattr(tvm, n)().eval()), _images(1), "forward"


def _timm():
    import timm
    for name in ("resnet50", "efficientnet_b0", "vit_small_patch16_224", "convnext_nano"):
        yield f"timm.{name}", (lambda n=name: timm.create_model(n, pretrained=False).eval()), _images(1), "forward"


def _transformers():
    for name, (make, inputs, kind) in hf_models.models().items():
        yield f"hf.{name}", make, inputs, kind


def _models():
    for source in (_transformers, _torchvision, _timm):
        try:
            yield from source()
        except ImportError as e:
            print(f"skipping {source.__name__[1:]}: {e}")


def _torch_dynamo():
    return importlib.import_module("torch._dynamo")  # tools may use it, to compare


def _call(fn, model, inputs, kind, device):
    """One call on fresh inputs; what it returns (with the gradients, for a training step)."""
    args, kwargs = inputs(model, device)
    if kind == "train":
        model.zero_grad(set_to_none=True)
        out = fn(*args, **kwargs)
        out.loss.backward()
        return [out.loss] + [p.grad for p in model.parameters() if p.grad is not None]
    with torch.no_grad():
        return fn(*args, **kwargs)


def _cold(reset):
    """`reset`, and torch's fake-tensor kernel cache emptied, as in a new process: it is shared
    by both systems (pydynamo.reset empties it, torch._dynamo.reset does not), so without this
    one system's compile would start warm from the other's."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    reset()
    FakeTensorMode.cache_clear()


def _first_call(compile_fn, reset, model, inputs, kind, device, repeat):
    """What the first call after a reset returns, and the median of `repeat` such calls' times
    (each after a reset: a cold compile every time)."""
    times = []
    for _ in range(repeat):
        _cold(reset)
        t0 = time.perf_counter()
        out = _call(compile_fn(model), model, inputs, kind, device)
        times.append(time.perf_counter() - t0)
    reset()
    return out, statistics.median(times)


def _fullgraph_ok(compile_fn, model, inputs, kind, device):
    try:
        _call(compile_fn(model), model, inputs, kind, device)
        return "y"
    except Exception:  # noqa: BLE001 - any failure means fullgraph did not succeed
        return "n"


def run(name, make, inputs, kind, device, skip_torch=False, repeat=3):
    torch.manual_seed(0)
    model = make().to(device)
    expected = _call(model, model, inputs, kind, device)
    args, kwargs = inputs(model, device)
    with torch.set_grad_enabled(kind == "train"):
        pydynamo.reset()
        report = pydynamo.explain(model)(*args, **kwargs)
    got, ours_s = _first_call(lambda m: pydynamo.compile(m, backend="eager"), pydynamo.reset, model, inputs, kind,
                              device, repeat)
    ours_full = _fullgraph_ok(lambda m: pydynamo.compile(m, backend="eager", fullgraph=True), model, inputs, kind,
                              device)
    pydynamo.reset()
    row = {"ours": f"{report.graph_count}/{report.graph_break_count}", "err": hf_models.max_diff(got, expected),
           "ours_s": ours_s, "ours_full": ours_full, "torch": "-", "torch_full": "-", "torch_s": float("nan"),
           "reasons": collections.Counter(br.reason.splitlines()[0][:70] for br in report.break_reasons)}
    if skip_torch:
        return row
    td = _torch_dynamo()
    try:
        td.reset()
        args, kwargs = inputs(model, device)
        with torch.set_grad_enabled(kind == "train"):
            theirs = td.explain(model)(*args, **kwargs)
        row["torch"] = f"{theirs.graph_count}/{theirs.graph_break_count}"
        _, row["torch_s"] = _first_call(lambda m: torch.compile(m, backend="eager"), td.reset, model, inputs, kind,
                                        device, repeat)
        row["torch_full"] = _fullgraph_ok(lambda m: torch.compile(m, backend="eager", fullgraph=True), model,
                                          inputs, kind, device)
        td.reset()
    except Exception as e:  # noqa: BLE001
        row["torch"] = f"error: {type(e).__name__}"
    return row


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--only", default="", help="comma-separated names, with or without the hf./tv./timm. prefix")
    p.add_argument("--skip-torch", action="store_true", help="pydynamo's columns only")
    p.add_argument("--repeat", type=int, default=3, help="cold first calls timed per system (the median is shown)")
    p.add_argument("--sweep", action="store_true", help="every model type of transformers' auto mappings and "
                   "timm's families, tiny configs (tools/sweep.py)")
    p.add_argument("--limit", type=int, default=0, help="--sweep: at most this many models")
    p.add_argument("--start", type=int, default=0, help="--sweep: skip the first K models")
    p.add_argument("--only-kind", default="", choices=["", "causal", "base", "timm"], help="--sweep: one source")
    p.add_argument("--shard", default="", help="--sweep: I/N runs every N-th model from the I-th")
    p.add_argument("--jsonl", default="", help="--sweep: append each model's row to this file")
    p.add_argument("--model-timeout", type=int, default=300, help="--sweep: seconds per model before it is cut")
    p.add_argument("--names", default="", help="--sweep: only the models listed in this file, one per line")
    p.add_argument("--summarize", nargs="+", default=None, help="--sweep: totals of rows written by --jsonl")
    a = p.parse_args()
    if a.sweep:
        import sweep
        return sweep.main(a)
    only = set(filter(None, a.only.split(",")))
    print(f"{'model':<24}{'ours g/b':>9}{'torch g/b':>10}{'full':>6}{'max err':>10}"
          f"{'ours s':>8}{'torch s':>8}{'ratio':>7}  top break reasons")
    ratios = []
    for name, make, inputs, kind in _models():
        if only and name not in only and name.split(".", 1)[1] not in only:
            continue
        try:
            r = run(name, make, inputs, kind, a.device, a.skip_torch, a.repeat)
        except Exception as e:  # noqa: BLE001
            print(f"{name:<24} FAILED: {type(e).__name__}: {str(e).splitlines()[0][:120]}", flush=True)
            traceback.print_exc(limit=3)
            continue
        ratio = r["ours_s"] / r["torch_s"]
        if ratio == ratio:
            ratios.append(ratio)
        print(f"{name:<24}{r['ours']:>9}{r['torch']:>10}{r['ours_full'] + '/' + r['torch_full']:>6}"
              f"{r['err']:>10.2e}{r['ours_s']:>8.2f}{r['torch_s']:>8.2f}{ratio:>7.2f}  "
              f"{r['reasons'].most_common(3) if r['reasons'] else ''}", flush=True)
    if ratios:
        print(f"compile time ours/torch.compile: max {max(ratios):.2f}, "
              f"geomean {torch.tensor(ratios).log().mean().exp().item():.2f}")


if __name__ == "__main__":
    main()
