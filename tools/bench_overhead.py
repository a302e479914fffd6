"""Per-call overhead of a pydynamo cache hit, against torch.compile(backend="eager"), in one run.

    python tools/bench_overhead.py [--calls N] [--repeat R]

Rows:
  plain            the small torch function called directly
  pydynamo hit     the same function served by a cache hit of the C hook: one TENSOR_MATCH guard
                   on its argument, the entry running the same code (hook switched on around the loop)
  pydynamo wrapped the same, switching the hook on and off around every call, as a decorator does
  pydynamo.optimize  @pydynamo.optimize("eager") of the function: the whole user-facing path
                   (wrapper, hook, guards the translator made, the compiled graph's call)
  torch.compile    torch.compile(fn, backend="eager"), a torch._dynamo cache hit

Overheads are the time added per call over `plain`; the ratio is torch.compile's overhead / ours.

    python tools/bench_overhead.py --module resnet   # or gpt, bert, hf.bert, hf.all

A real module instead: the per-call cost of pydynamo and torch.compile on the benchmark models of
tools/models.py (ResNet-18 has about 100 parameter tensors and 500 guards), or the transformers
models of tools/hf_models.py (``hf.all``: every inference forward there), each compiled with a
backend whose compiled graph returns outputs computed once, so only the capturer's own work is
timed: guards, reading the parameters, calling the graph.
"""
import argparse
import os
import sys
import time

import torch

import pydynamo
from pydynamo import _C


def fn(x):
    return torch.add(x, 1)


def _same_code_copy(f):
    """A distinct code object with the same behaviour: a cache entry's code must not be the original's."""
    return f.__code__.replace(co_name=f.__code__.co_name + "_entry")


def _tensor_guard(t):
    gs = _C.GuardSet()
    gs.add((("L", 0),), "TENSOR_MATCH",
           (type(t), t.dtype, t.device, t.layout, t.requires_grad, tuple(t.shape), t.stride()), "L['x']")
    return gs


def _time_once(call, x, calls):
    t0 = time.perf_counter()
    for _ in range(calls):
        call(x)
    return (time.perf_counter() - t0) / calls * 1e6  # µs per call


def _time_rows(rows, x, calls, repeat):
    """Best of `repeat`, the rows taken in turn each round so drifts in machine speed hit all alike."""
    best = {name: float("inf") for name in rows}
    for _ in range(repeat):
        for name, (call, setting) in rows.items():
            prev = _C.set_eval_frame(setting)
            try:
                best[name] = min(best[name], _time_once(call, x, calls))
            finally:
                _C.set_eval_frame(prev)
    return best


def _stored_outputs_backend(gm, example_inputs):
    """A backend whose graph runs once; later calls return what that call returned."""
    outs = []

    def run(*args):
        if not outs:
            outs.append(gm(*args))
        return outs[0]
    return run


def _module_and_inputs(name):
    import os
    import sys
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    if name.startswith("hf."):
        import hf_models
        make, inputs, kind = hf_models.models()[name[3:]]
        if kind != "forward":
            raise SystemExit(f"{name}: only inference forwards are timed here")
        torch.manual_seed(0)
        model = make()
        args, kwargs = inputs(model, "cpu")
        return model, args, kwargs
    import models
    model, inputs = models.make(name, "bench" if name == "resnet" else "small")
    if name == "resnet":
        inputs = (torch.randn(1, 3, 32, 32),)
    return model, inputs, {}


def module_overhead(name, calls, repeat):
    model, inputs, kwargs = _module_and_inputs(name)
    model.eval()
    systems = {"torch.compile": torch.compile(model, backend=_stored_outputs_backend),
               "pydynamo": pydynamo.compile(model, backend=_stored_outputs_backend)}
    best = {k: float("inf") for k in systems}
    with torch.no_grad():
        for fn in systems.values():
            for _ in range(3):
                fn(*inputs, **kwargs)
        for _ in range(repeat):
            for k, fn in systems.items():  # in turns: drifts in machine speed hit both alike
                t0 = time.perf_counter()
                for _ in range(calls):
                    fn(*inputs, **kwargs)
                best[k] = min(best[k], (time.perf_counter() - t0) / calls * 1e6)
    print(f"{name}: per call, graph work excluded: pydynamo {best['pydynamo']:.1f} µs, "
          f"torch.compile {best['torch.compile']:.1f} µs (ratio {best['pydynamo'] / best['torch.compile']:.2f})",
          flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=100_000)
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--module", help="time a model's calls instead: resnet, gpt, bert (tools/models.py), "
                   "hf.<name> (tools/hf_models.py), a comma-separated list, or hf.all")
    a = p.parse_args()
    if a.module:
        names = a.module.split(",")
        if names == ["hf.all"]:
            sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
            import hf_models
            names = [f"hf.{n}" for n, (_, _, kind) in hf_models.models().items() if kind == "forward"]
        for name in names:
            pydynamo.reset()
            module_overhead(name, min(a.calls, 500 if name.startswith("hf.") else 2000), a.repeat)
        return
    x = torch.ones(8)
    entry_code = _same_code_copy(fn)

    def callback(frame, size):
        if frame.f_code is fn.__code__:
            return _C.CacheEntry(_tensor_guard(frame.f_locals["x"]), entry_code, fn.__code__)
        return _C.SKIP  # everything else (the timing loop itself) runs as it is

    def wrapped(x):
        prev = _C.set_eval_frame(callback)
        try:
            return fn(x)
        finally:
            _C.set_eval_frame(prev)

    prev = _C.set_eval_frame(callback)
    try:
        fn(x)  # compile: one entry
    finally:
        _C.set_eval_frame(prev)
    assert _C.cache_size(fn) == 1
    compiled = torch.compile(fn, backend="eager")
    compiled(x)
    ours = pydynamo.optimize("eager")(fn)
    ours(x)
    assert torch.equal(compiled(x), fn(x)) and torch.equal(wrapped(x), fn(x)) and torch.equal(ours(x), fn(x))
    hits = _C.debug_counters()["hits"]
    rows = _time_rows({"plain": (fn, None), "pydynamo hit": (fn, callback), "pydynamo wrapped": (wrapped, None),
                       "pydynamo.optimize": (ours, None), "torch.compile": (compiled, None)}, x, a.calls, a.repeat)
    assert _C.debug_counters()["hits"] - hits == 3 * a.calls * a.repeat, "not every call was a cache hit"

    base = rows["plain"]
    print(f"{'path':<18}{'µs/call':>10}{'overhead µs':>14}")
    for name, us in rows.items():
        print(f"{name:<18}{us:>10.3f}{us - base:>14.3f}")
    ours, theirs = rows["pydynamo hit"] - base, rows["torch.compile"] - base
    wrapped_ours = rows["pydynamo wrapped"] - base
    print(f"\ntorch.compile overhead / pydynamo hit overhead:     {theirs / max(ours, 1e-9):.1f}x")
    print(f"torch.compile overhead / pydynamo wrapped overhead: {theirs / max(wrapped_ours, 1e-9):.1f}x")
    full = rows["pydynamo.optimize"] - base
    print(f"torch.compile overhead / pydynamo.optimize overhead: {theirs / max(full, 1e-9):.1f}x")
    print(f"target: hit path adds < 1 µs -> {'met' if ours < 1.0 else 'NOT met'} ({ours:.3f} µs)")


if __name__ == "__main__":
    main()
