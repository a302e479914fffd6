"""Which ATen ops the bundled Triton backend runs as fallbacks (not as generated kernels), per model.

    python tools/triton_fallbacks.py --models hf-gpt2,tv-resnet50 --modes infer,train [--dtype bf16] [--channels-last]

On CUDA with the benchmark sizes; on the CPU (TRITON_INTERPRET=1 is set) with the small ones.
Convolutions, matmuls and attention are ATen calls by design (as in Inductor's default mode);
the rest is what the backend does not lower yet. Whole-graph fallbacks (a graph the backend
could not compile, run wholly with ATen, logged on pydynamo.errors) are counted with their
reasons: the target is none. Also shown, for the
second call: the ATen results copied into another layout because their strides differ from the
traced ones (runtime.restride: each a launch and an allocation per call), and the peak memory
(CUDA) of that call beyond what was allocated before it.
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
    import atexit
    import shutil
    import tempfile
    # a fresh cache: a graph found in the disk cache is not lowered again (nothing to count)
    cache = tempfile.mkdtemp(prefix="pydynamo-fallbacks-")
    atexit.register(shutil.rmtree, cache, True)
    os.environ["PYDYNAMO_CACHE_DIR"] = cache
    import torch
    if not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")
    import importlib
    import pydynamo
    import models
    from bench_models import _autocast, _first_tensor, _prepare
    from pydynamo.backends.triton import lowering
    backend = importlib.import_module("pydynamo.backends.triton")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    size = "bench" if device == "cuda" else "small"
    seen = collections.Counter()
    original = lowering.GraphLowering.fallback

    def counting(self, node, args, kwargs):
        seen[str(node.target)] += 1
        return original(self, node, args, kwargs)
    lowering.GraphLowering.fallback = counting
    from pydynamo.backends.triton import runtime
    copies, ncopies = collections.Counter(), collections.Counter()
    restride = runtime.restride

    def counting_restride(t, size, stride):  # generated modules import it when they are loaded
        out = restride(t, size, stride)
        if out is not t:
            copies[(tuple(size), tuple(t.stride()), tuple(stride))] += t.numel() * t.element_size()
            ncopies["all"] += 1
        return out
    runtime.restride = counting_restride
    by_design = ("convolution", "mm.", "addmm", "bmm", "attention", "_cudnn", "_efficient")
    for name in a.models.split(","):
        for mode in a.modes.split(","):
            seen.clear()
            pydynamo.reset()
            model, inputs = models.make(name, size, device)
            model, inputs = _prepare(model, inputs, mode, a.dtype, a.channels_last)
            model.train(mode == "train")
            status, peak, whole = "ok", float("nan"), len(backend.fallbacks)
            compiled = pydynamo.optimize("triton")(model)

            def call():
                with _autocast(a.dtype, mode, device), torch.set_grad_enabled(mode == "train"):
                    out = _first_tensor(compiled(*inputs))
                if mode == "train":
                    out.float().pow(2).mean().backward()
            try:
                call()
                copies.clear()
                ncopies.clear()
                if device == "cuda":
                    torch.cuda.synchronize()
                    base = torch.cuda.memory_allocated()
                    torch.cuda.reset_peak_memory_stats()
                call()
                if device == "cuda":
                    torch.cuda.synchronize()
                    peak = (torch.cuda.max_memory_allocated() - base) / 2 ** 20
            except Exception as e:
                status = f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"
            other = {k: v for k, v in seen.items() if not any(d in k for d in by_design)}
            aten = sum(v for k, v in seen.items() if k not in other)
            whole = backend.fallbacks[whole:]
            print(f"{name} {mode}: {status}; whole-graph fallbacks: {len(whole)}{(' ' + repr(whole)) if whole else ''}; "
                  f"by design (conv/matmul/attention): {aten}; "
                  f"others: {dict(sorted(other.items())) or 'none'}; peak MB {peak:.0f}; layout copies per "
                  f"call: {ncopies['all']} ({sum(copies.values()) / 2 ** 20:.1f} MB)", flush=True)
            for (size, got, want), nbytes in copies.most_common(5):
                print(f"    copied {size}: strides {got} -> {want}, {nbytes / 2 ** 20:.1f} MB", flush=True)


if __name__ == "__main__":
    main()
