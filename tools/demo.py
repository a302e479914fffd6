"""A short demo of pydynamo's main job: capture a PyTorch program into an FX graph, hand it to a
backend, and serve later calls from the guarded cache in C.

    python tools/demo.py
"""
import time

import torch

import pydynamo
from pydynamo import _C


class Block(torch.nn.Module):
    def __init__(self, dim=64):
        super().__init__()
        self.norm = torch.nn.LayerNorm(dim)
        self.layers = torch.nn.ModuleList(torch.nn.Linear(dim, dim) for _ in range(2))

    def forward(self, x):
        h = self.norm(x)
        for layer in self.layers:
            h = torch.nn.functional.gelu(layer(h))
        return x + h


def show_graph(gm, example_inputs):
    """A backend is any callable with torch.compile's backend signature; this one prints the graph."""
    print(f"--- graph #{show_graph.count} ({len(example_inputs)} inputs) ---")
    print(gm.code.strip())
    show_graph.count += 1
    return gm.forward


show_graph.count = 1


def main():
    torch.manual_seed(0)
    model = Block()
    compiled = pydynamo.compile(model, backend=show_graph)
    x = torch.randn(8, 64)
    with torch.no_grad():
        assert torch.allclose(compiled(x), model(x))
        print("--- guards of the cache entry ---")
        print(_C.get_cache_entries(Block.forward)[0].guards)
        compiled(x)  # a cache hit: no new graph
        print("--- a new batch size recompiles ---")
        y = torch.randn(4, 64)
        assert torch.allclose(compiled(y), model(y))
        n = 2000
        t0 = time.perf_counter()
        for _ in range(n):
            compiled(x)
        ours = (time.perf_counter() - t0) / n * 1e6
        t0 = time.perf_counter()
        for _ in range(n):
            model(x)
        eager = (time.perf_counter() - t0) / n * 1e6
    print(f"graphs compiled: {show_graph.count - 1}; per call: eager {eager:.1f} µs, pydynamo {ours:.1f} µs")


if __name__ == "__main__":
    main()
