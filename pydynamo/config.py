"""The few knobs of pydynamo. This is the only module that reads PYDYNAMO_* variables.

``patch(...)`` changes knobs for a ``with`` block or each call of a decorated function, as
``torch._dynamo.config.patch`` does: ``patch(name=value, ...)``, ``patch({"name": value})`` or
``patch("name", value)``; unknown names raise AttributeError.
"""
import contextlib
import os


def _env_int(name, default):
    value = os.environ.get(name)
    return default if value is None or value == "" else int(value)


def _env_bool(name):
    return os.environ.get(name, "") not in ("", "0")


# Compiled entries kept per code object; past it the code runs eagerly (issue 3, item 5).
cache_size_limit = _env_int("PYDYNAMO_CACHE_SIZE_LIMIT", 8)

# Entries per code in all, where the limit above counts per module instance (the code's first
# argument is an nn.Module: the forward of a block class compiled once per block, as with FSDP2).
accumulated_cache_size_limit = _env_int("PYDYNAMO_ACCUMULATED_CACHE_SIZE_LIMIT", 256)

# How deep user functions are inlined into one graph before giving up.
inline_depth_limit = _env_int("PYDYNAMO_INLINE_DEPTH_LIMIT", 32)

# Instructions one frame may execute symbolically (guards against unrolling a huge loop).
max_instructions = _env_int("PYDYNAMO_MAX_INSTRUCTIONS", 200_000)

# Comma-separated log artifacts to turn on (see logs.py): graph_breaks,recompiles,guards,graph,...
logs = os.environ.get("PYDYNAMO_LOGS", "")

# A backend that raises: False -> BackendCompilerFailed reaches the caller; True -> the frame runs
# eagerly with a warning.
suppress_errors = _env_bool("PYDYNAMO_SUPPRESS_ERRORS")

# Tensor.item() / .tolist() (of an integer tensor) stay in the graph as unbacked SymInts /
# SymFloats instead of breaking it.
capture_scalar_outputs = _env_bool("PYDYNAMO_CAPTURE_SCALAR_OUTPUTS")

# Ops whose output size depends on the data (nonzero, x[mask], unique...) stay in the graph,
# their sizes unbacked SymInts, instead of breaking it.
capture_dynamic_output_shape_ops = _env_bool("PYDYNAMO_CAPTURE_DYNAMIC_OUTPUT_SHAPE_OPS")

# A graph compiled inside a DistributedDataParallel forward is split at DDP's gradient-bucket
# boundaries, each piece compiled on its own, so each bucket's all-reduce starts while the rest of
# the backward runs (backends/distributed.py). Off: one graph, all-reduces after its backward.
optimize_ddp = os.environ.get("PYDYNAMO_OPTIMIZE_DDP", "1") not in ("", "0")


def _knobs():
    return {k for k, v in globals().items()
            if not k.startswith("_") and type(v) in (bool, int, float, str)}


def patch(arg=None, value=None, **changes):
    """A context manager and decorator that sets knobs and restores them on exit."""
    if isinstance(arg, str):
        changes = {arg: value, **changes}
    elif isinstance(arg, dict):
        changes = {**arg, **changes}
    elif arg is not None:
        raise TypeError(f"pydynamo.config.patch takes a dict, a name and a value, or keywords; got {arg!r}")
    unknown = sorted(set(changes) - _knobs())
    if unknown:
        raise AttributeError(f"pydynamo.config.{unknown[0]} does not exist")
    return _Patch(changes)


class _Patch(contextlib.ContextDecorator):
    def __init__(self, changes):
        self.changes = changes
        self._saved = []  # a stack: the same patch may be entered again inside itself

    def __enter__(self):
        g = globals()
        self._saved.append({k: g[k] for k in self.changes})
        g.update(self.changes)
        return self

    def __exit__(self, *exc):
        globals().update(self._saved.pop())
        return False
