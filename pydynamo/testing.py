"""Helpers shared by tests and tools: a counting backend, a recorder of compiled codes and
result comparison."""
import torch


class CompileCounter:
    """A backend that counts graphs and their call nodes, then runs them eagerly."""

    def __init__(self):
        self.frame_count = 0
        self.op_count = 0
        self.graphs = []

    def __call__(self, gm, example_inputs):
        self.frame_count += 1
        self.op_count += sum(1 for n in gm.graph.nodes if n.op in ("call_function", "call_method", "call_module"))
        self.graphs.append(gm)
        return gm.forward

    def clear(self):
        self.frame_count = self.op_count = 0
        self.graphs = []


class CompiledCodes:
    """While entered, records the code of every cache entry compiled (convert_frame's
    observers) in ``codes``."""

    def __init__(self):
        self.codes = []

    def on_entry(self, code, guards, seconds):
        self.codes.append(code)

    def on_break(self, exc):
        pass

    def __enter__(self):
        from . import convert_frame
        convert_frame.observers.append(self)
        return self

    def __exit__(self, *exc):
        from . import convert_frame
        convert_frame.observers.remove(self)


def same(a, b, *, exact=True, atol=1e-6, rtol=1e-5):
    """Equal results: same structure and types; tensors bit for bit (or close if not exact)."""
    if isinstance(a, torch.Tensor):
        if not isinstance(b, torch.Tensor) or a.shape != b.shape or a.dtype != b.dtype:
            return False
        if a.requires_grad != b.requires_grad:
            return False
        if exact:
            return torch.equal(a, b) or bool(torch.isnan(a).logical_and(torch.isnan(b)).logical_or(a == b).all())
        return torch.allclose(a, b, atol=atol, rtol=rtol, equal_nan=True)
    if type(a) is not type(b):
        return False
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y, exact=exact, atol=atol, rtol=rtol) for x, y in zip(a, b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k], exact=exact, atol=atol, rtol=rtol) for k in a)
    if isinstance(a, float) and a != a:
        return b != b
    return a == b
