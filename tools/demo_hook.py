"""A short demo of pydynamo's frame-evaluation hook: a guarded per-code cache served from C.

A hand-made callback stands in for the compiler here: on a cache miss it answers with an entry
that replaces `scale`'s code, under guards on the argument (a tensor of this dtype/shape/strides)
and on a global, by code that computes the same thing differently. The demo shows cache hits,
a recompile when a guard fails, the readable guard failure, and the overhead of a hit.
"""
import time

import torch

from pydynamo import _C

FACTOR = 2.0


def scale(x):
    return x * FACTOR


def scale_fast(x):  # what a compiler would produce: same arguments, other code
    return torch.mul(x, FACTOR)


def compile_callback(frame, cache_size):
    if frame.f_code is not scale.__code__:
        return None  # every other function runs as it is
    x = frame.f_locals["x"]
    gs = _C.GuardSet()
    gs.add((("L", 0),), "TENSOR_MATCH",
           (type(x), x.dtype, x.device, x.layout, x.requires_grad, tuple(x.shape), x.stride()),
           f"L['x']: {x.dtype} {tuple(x.shape)}")
    gs.add((("G", "FACTOR"),), "EQUALS_MATCH", FACTOR, f"G['FACTOR'] == {FACTOR!r}")
    for entry in _C.get_cache_entries(frame.f_code):
        print(f"  recompiling: {frame.check_guards(entry.guards)}")
    print(f"  compiled entry #{cache_size + 1} for {frame.f_code.co_name}:\n    " + "\n    ".join(gs.texts()))
    return _C.CacheEntry(gs, scale_fast.__code__, scale.__code__)


def main():
    global FACTOR
    a, b = torch.randn(4, 4), torch.randn(8, dtype=torch.float64)
    prev = _C.set_eval_frame(compile_callback)
    try:
        print("call 1 (miss):"); assert torch.equal(scale(a), a * 2)
        print("call 2 (hit)"); assert torch.equal(scale(a), a * 2)
        print("call 3, new dtype and shape (miss):"); assert torch.equal(scale(b), b * 2)
        FACTOR = 3.0
        print("call 4, global changed (miss):"); assert torch.equal(scale(a), a * 3)
        counters = _C.debug_counters()
        print(f"hits={counters['hits']} misses={counters['misses']} entries={_C.cache_size(scale)}")
        n = 100_000
        t0 = time.perf_counter()
        for _ in range(n):
            scale(a)
        hit = (time.perf_counter() - t0) / n * 1e6
    finally:
        _C.set_eval_frame(prev)
    t0 = time.perf_counter()
    for _ in range(n):
        scale_fast(a)
    plain = (time.perf_counter() - t0) / n * 1e6
    print(f"per call: plain {plain:.2f} µs, served by a cache hit {hit:.2f} µs (+{hit - plain:.2f} µs)")


if __name__ == "__main__":
    main()
