"""Which ATen ops the bundled Triton backend runs as fallbacks (not as generated kernels), per model.

    python tools/triton_fallbacks.py --models hf-gpt2,tv-resnet50 --modes infer,train [--dtype bf16] [--channels-last]

On CUDA with the benchmark sizes; on the CPU (TRITON_INTERPRET=1 is set) with the small ones.
Convolutions, matmuls and attention are ATen calls by design (as in Inductor's default mode);
the rest is what the backend does not lower yet. An internal error of the backend is shown too
(PYDYNAMO_TRITON_STRICT=1: it raises instead of running the graph with ATen).
"""
import argparse
import collections
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="resnet,gpt,bert")
    p.add_argument("--modes", default="infer,train")
    p.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"])
    p.add_argument("--channels-last", action="store_true")
    a = p.parse_args()
    import torch
    if not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")
    os.environ["PYDYNAMO_TRITON_STRICT"] = "1"
    import pydynamo
    import models
    from bench_models import _autocast, _first_tensor, _prepare
    from pydynamo.backends.triton import lowering
    device = "cuda" if torch.cuda.is_available() else "cpu"
    size = "bench" if device == "cuda" else "small"
    seen = collections.Counter()
    original = lowering.GraphLowering.fallback

    def counting(self, node, args, kwargs):
        seen[str(node.target)] += 1
        return original(self, node, args, kwargs)
    lowering.GraphLowering.fallback = counting
    by_design = ("convolution", "mm.", "addmm", "bmm", "attention", "_cudnn", "_efficient")
    for name in a.models.split(","):
        for mode in a.modes.split(","):
            seen.clear()
            pydynamo.reset()
            model, inputs = models.make(name, size, device)
            model, inputs = _prepare(model, inputs, mode, a.dtype, a.channels_last)
            model.train(mode == "train")
            status = "ok"
            try:
                with _autocast(a.dtype, mode, device), torch.set_grad_enabled(mode == "train"):
                    out = _first_tensor(pydynamo.optimize("triton")(model)(*inputs))
                if mode == "train":
                    out.float().pow(2).mean().backward()
            except Exception as e:
                status = f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"
            other = {k: v for k, v in seen.items() if not any(d in k for d in by_design)}
            aten = sum(v for k, v in seen.items() if k not in other)
            print(f"{name} {mode}: {status}; by design (conv/matmul/attention): {aten}; "
                  f"others: {dict(sorted(other.items())) or 'none'}", flush=True)


if __name__ == "__main__":
    main()
