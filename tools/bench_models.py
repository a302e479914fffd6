"""Model step times: eager, torch.compile(inductor) and pydynamo(inductor), in one run.

    python tools/bench_models.py [--models resnet,gpt,bert] [--modes infer,train] [--iters 20]
    python tools/bench_models.py --models hf-gpt2,hf-bert,hf-llama   # transformers models
    python tools/bench_models.py --backend triton    # pydynamo with its bundled Triton backend
    python tools/bench_models.py --models tv-resnet50 --modes infer --dtype bf16 --channels-last
    python tools/bench_models.py --models tv-vit,timm-effnet,hf-gpt2 --dtype bf16  # bf16 (autocast in training)
    python tools/bench_models.py --models hf-gpt2 --modes train-opt --dtype bf16  # the whole step compiled,
                                                # AdamW (foreach) included: the compiled-optimizer recipe

For each model and mode it prints the step time of each system (CUDA events; the systems are
timed in turns: 10 rounds, each the mean of iters/10 steps run back to back as a training or
serving loop runs them; the best round), the ratio pydynamo / torch.compile (target: <= 1.02;
the median over rounds of the two systems' times in the same round, so slow drifts cancel), the
number of graphs each compiled (target: equal), the first-call (compile) time, the spread of
each system's rounds (max/min - 1: how much of the ratio is noise), the first call's largest
relative difference from eager (of norms: the output, or the loss and every gradient; models
with dropout differ by their random streams), and the peak memory of three steps beyond what was allocated
before them (CUDA). Run with
TORCHINDUCTOR_FORCE_DISABLE_CACHES=1 for honest cold compile times (otherwise the second system
may hit Inductor's cache for the same graph). Runs on CUDA when available, else on the CPU with
the small model sizes (a smoke run, not a measurement).
"""
import argparse
import functools
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models  # noqa: E402

import pydynamo  # noqa: E402


class Counting:
    """A backend wrapper that counts the graphs it is given."""

    def __init__(self, backend):
        self.backend, self.graphs = backend, 0

    def __call__(self, gm, example_inputs):
        self.graphs += 1
        return self.backend(gm, example_inputs)


def _sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def _time_steps(step, iters, device):
    """Time per step of `iters` steps run back to back, as a training or serving loop runs them
    (one synchronisation at the end: the host's work overlaps the device's, as it does there)."""
    if device == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            step()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) / iters
    t0 = time.perf_counter()
    for _ in range(iters):
        step()
    return (time.perf_counter() - t0) * 1e3 / iters


def _first_tensor(out):
    return out if isinstance(out, torch.Tensor) else out[0]  # a transformers ModelOutput: its first tensor


def _first_result(fn, model, inputs, mode, amp=None):
    """The first call (it compiles), from one RNG seed: the output (inference), or the loss and
    every parameter's gradient (training; no optimizer step)."""
    import contextlib
    torch.manual_seed(1)
    if mode == "infer":
        with torch.no_grad():
            return [_first_tensor(fn(*inputs)).float()]
    with (amp or contextlib.nullcontext)():
        loss = _first_tensor(fn(*inputs)).float().pow(2).mean()
    loss.backward()
    result = [loss.detach()] + [p.grad.detach().clone() for p in model.parameters() if p.grad is not None]
    model.zero_grad(set_to_none=True)
    return result


def _rel_err(got, want):
    """The largest over all tensors (the output, or the loss and every gradient) of the norm of
    the difference relative to the norm of eager's tensor. (The largest elementwise difference,
    used before, reached 0.6-1.9 on the training rows for both compilers alike: a single
    gradient of a batch norm deep in a network, or one under dropout, says little.)"""
    return max(float((g.double() - w.double()).norm() / w.double().norm().clamp_min(1e-12)) for g, w in zip(got, want))


def _peak_mb(step, device):
    """Memory a few steps take at their peak beyond what was allocated before them (activations,
    gradients, temporaries)."""
    if device != "cuda":
        return float("nan")
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - base) / 2 ** 20


def _prepare(model, inputs, mode, dtype, channels_last):
    """The model and inputs in the run's layout and precision: channels-last images; bf16
    weights and inputs for inference (bf16 training runs under autocast, see _make_step)."""
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
        inputs = tuple(i.contiguous(memory_format=torch.channels_last) if i.dim() == 4 else i for i in inputs)
    if dtype == "bf16" and mode == "infer":
        model = model.to(torch.bfloat16)
        inputs = tuple(i.to(torch.bfloat16) if i.is_floating_point() else i for i in inputs)
    return model, inputs


def _autocast(dtype, mode, device):
    import contextlib
    if dtype == "bf16" and mode == "train":
        return torch.autocast(device, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def _make_step(fn, model, inputs, mode, amp=None, wrap=None):
    """One step of ``mode``: inference, a training step (SGD, eager optimizer), or "train-opt",
    forward, backward, AdamW (foreach) and zero_grad as one function that ``wrap`` compiles."""
    import contextlib
    amp = amp or contextlib.nullcontext
    if mode == "infer":
        def step():
            with torch.no_grad():
                return fn(*inputs)
        return step
    params = [p for p in model.parameters() if p.requires_grad]
    if mode == "train-opt":  # the compiled-optimizer recipe: the whole step compiled
        opt = torch.optim.AdamW(params, lr=1e-4, foreach=True)

        def whole():
            with amp():
                loss = _first_tensor(fn(*inputs)).float().pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            return loss.detach()
        return (wrap or (lambda f: f))(whole)
    opt = torch.optim.SGD(params, lr=1e-4)

    def step():
        with amp():
            loss = _first_tensor(fn(*inputs)).float().pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss
    return step


def bench(name, mode, device, size, iters, rounds=10, backend="inductor", dtype="fp32", channels_last=False,
          compile_mode=None):
    """All three systems built first, then timed in turns (`rounds` rounds of iters/rounds steps
    each), so drifts in clocks or load hit all alike. Each system gets its own copy of the model
    with the same weights."""
    import torch._dynamo  # tools may use torch._dynamo, to compare
    import torch._inductor.compile_fx
    torch._dynamo.reset()
    pydynamo.reset()
    steps, first, graphs, results = {}, {}, {}, {}
    for system in ("eager", "torch.compile", "pydynamo"):
        torch.manual_seed(0)
        model, inputs = models.make(name, size, device)
        model, inputs = _prepare(model, inputs, mode, dtype, channels_last)
        model.train(mode == "train")
        amp = lambda: _autocast(dtype, mode, device)  # noqa: E731
        counter, wrap = None, None
        if mode == "train-opt":  # the model runs inside the compiled step function
            fn = model
            if system == "torch.compile":
                counter = Counting(torch._inductor.compile_fx.compile_fx)
                wrap = functools.partial(torch.compile, backend=counter)
            elif system == "pydynamo":
                counter = Counting(pydynamo.lookup_backend(backend))
                wrap = pydynamo.optimize(counter)
        elif system == "eager":
            fn = model
        elif system == "torch.compile":
            from torch._inductor.compile_fx import compile_fx
            patches = {"triton.cudagraphs": True} if compile_mode == "reduce-overhead" else None
            counter = Counting(functools.partial(compile_fx, config_patches=patches))
            fn = torch.compile(model, backend=counter)
        else:
            ours = pydynamo.lookup_backend(backend)
            if compile_mode is not None:
                ours = functools.partial(ours, mode=compile_mode)
            counter = Counting(ours)
            fn = pydynamo.compile(model, backend=counter)
        step = _make_step(fn, model, inputs, mode, amp, wrap)
        t0 = time.perf_counter()
        results[system] = [step()] if mode == "train-opt" else _first_result(fn, model, inputs, mode, amp)
        _sync(device)
        first[system] = time.perf_counter() - t0
        for _ in range(3):
            step()
        _sync(device)
        steps[system], graphs[system] = step, counter
    times = {s: [] for s in steps}
    order = list(steps)
    for r in range(rounds):
        for system in (order if r % 2 == 0 else order[::-1]):  # alternate who goes first
            times[system].append(_time_steps(steps[system], max(1, iters // rounds), device))
    paired = statistics.median(o / t for o, t in zip(times["pydynamo"], times["torch.compile"]))
    return {s: (min(times[s]), first[s], graphs[s].graphs if graphs[s] else None,
                max(times[s]) / min(times[s]) - 1, _rel_err(results[s], results["eager"]),
                _peak_mb(steps[s], device)) for s in steps}, paired


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="resnet,gpt,bert")
    p.add_argument("--modes", default="infer,train")
    p.add_argument("--iters", type=int, default=60, help="timed steps per system, over all rounds")
    p.add_argument("--rounds", type=int, default=10, help="alternating rounds (ratio: their median)")
    p.add_argument("--backend", default="inductor", help="pydynamo's backend (torch.compile's is inductor)")
    p.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"],
                   help="bf16: bf16 weights and inputs for inference, autocast to bf16 for training")
    p.add_argument("--channels-last", action="store_true", help="images and convolution weights channels-last")
    p.add_argument("--mode", default=None, choices=["reduce-overhead"],
                   help="both compilers' mode (reduce-overhead: CUDA graphs)")
    a = p.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    size = "bench" if device == "cuda" else "small"
    if device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    print(f"device: {torch.cuda.get_device_name() if device == 'cuda' else 'cpu (smoke run, small models)'}; "
          f"torch {torch.__version__}; python {sys.version.split()[0]}; pydynamo backend: {a.backend}; "
          f"{a.dtype}{', channels-last' if a.channels_last else ''}{f', mode {a.mode}' if a.mode else ''}")
    print(f"{'model':<9}{'mode':<6}{'eager ms':>10}{'torch ms':>10}{'ours ms':>10}{'ours/torch':>12}"
          f"{'graphs t/o':>12}{'1st call t/o s':>18}{'spread t/o':>16}{'rel err t/o':>20}{'peak MB t/o':>15}")
    for name in a.models.split(","):
        for mode in a.modes.split(","):
            r, paired = bench(name, mode, device, size, a.iters, rounds=a.rounds, backend=a.backend, dtype=a.dtype,
                              channels_last=a.channels_last, compile_mode=a.mode)
            e, (t, tf, tg, ts, te, tm), (o, of, og, os_, oe, om) = r["eager"][0], r["torch.compile"], r["pydynamo"]
            print(f"{name:<9}{mode:<6}{e:>10.3f}{t:>10.3f}{o:>10.3f}{paired:>12.3f}{f'{tg}/{og}':>12}"
                  f"{f'{tf:.1f}/{of:.1f}':>18}{f'{ts:.1%}/{os_:.1%}':>16}{f'{te:.1e}/{oe:.1e}':>20}"
                  f"{f'{tm:.0f}/{om:.0f}':>15}", flush=True)


if __name__ == "__main__":
    main()
