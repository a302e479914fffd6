"""Batch norm + activation training steps: GPU time per step of pydynamo's Triton backend against
torch.compile (Inductor), per shape, measured in the same process (torch.profiler, sum of the
step's kernels, median of 5 profiled steps after warm-up).

    python tools/bench_batchnorm.py                      # fp32 BN + ReLU, ResNet-50's shapes
    python tools/bench_batchnorm.py --dtype bf16         # bf16 autocast BN + SiLU, EfficientNet's
    TRITON_INTERPRET=1 python tools/bench_batchnorm.py --device cpu --tiny   # smoke run

Inputs are channels-last, batch 64 (2 with --tiny), as layout optimization makes a convolution
network's activations. Prints per shape: ours ms, Inductor ms, ratio ours / Inductor, and our
slowest kernels.
"""
import argparse
import collections
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import pydynamo  # noqa: E402

SHAPES = {"fp32": [(64, 64, 112, 112), (64, 256, 56, 56), (64, 128, 28, 28), (64, 2048, 7, 7)],
          "bf16": [(64, 32, 112, 112), (64, 96, 56, 56), (64, 240, 28, 28), (64, 480, 14, 14), (64, 1152, 7, 7)]}


def step_time(compile_fn, shape, dtype, device):
    """(ms of kernel time per step, {kernel: ms}) of one BN + activation forward and backward."""
    from torch.profiler import ProfilerActivity, profile
    bf16 = dtype == "bf16"
    m = torch.nn.Sequential(torch.nn.BatchNorm2d(shape[1]), torch.nn.SiLU() if bf16 else torch.nn.ReLU()).to(device)
    x = torch.randn(*shape, device=device, dtype=torch.bfloat16 if bf16 else torch.float32)
    x = x.contiguous(memory_format=torch.channels_last).requires_grad_()
    f = compile_fn(m)

    def step():
        with torch.autocast(device, torch.bfloat16, enabled=bf16):
            y = f(x)
        y.backward(y)
    for _ in range(3):
        step()
    per_step, kernels = [], collections.Counter()
    gpu = device == "cuda"
    for _ in range(5):
        with profile(activities=[ProfilerActivity.CUDA if gpu else ProfilerActivity.CPU]) as p:
            step()
            if gpu:
                torch.cuda.synchronize()
        times = collections.Counter()
        for e in p.events():
            if (e.device_type == torch.autograd.DeviceType.CUDA) if gpu else (e.cpu_parent is None):
                times[e.name] += (e.device_time if gpu else e.cpu_time) / 1e3
        per_step.append(sum(times.values()))
        kernels.update(times)
    return statistics.median(per_step), {k: v / 5 for k, v in kernels.most_common(3)}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--tiny", action="store_true", help="batch 2 at a quarter of the size (smoke run)")
    a = p.parse_args()
    if a.device == "cuda":
        torch.backends.cudnn.allow_tf32 = True
    print(f"{'shape':<22}{'ours ms':>10}{'Inductor ms':>13}{'ratio':>10}   our slowest kernels")
    for shape in SHAPES[a.dtype]:
        if a.tiny:
            shape = (2, shape[1], max(1, shape[2] // 4), max(1, shape[3] // 4))
        pydynamo.reset()
        ours, top = step_time(lambda m: pydynamo.optimize("triton")(m), shape, a.dtype, a.device)
        theirs, _ = step_time(torch.compile, shape, a.dtype, a.device)
        names = ", ".join(f"{k[:40]} {v:.3f}" for k, v in top.items())
        print(f"{str(shape):<22}{ours:>10.3f}{theirs:>13.3f}{ours / theirs:>10.3f}   {names}", flush=True)


if __name__ == "__main__":
    main()
