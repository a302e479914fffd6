"""torch functions, torch.nn.functional and tensor methods called as functions.

Anything callable that lives in torch and runs on fake tensors becomes one graph node; a few
functions that only read global state are answered at trace time (and guarded globally), and
functions that change torch's global state are refused.
"""
import torch

from ..exc import Unsupported
from .base import ObjectVariable
from .constant import ConstantVariable

# Functions that read True under torch.compile; libraries pick trace-friendly paths by them.
_COMPILING_TRUE = [getattr(torch.compiler, n) for n in ("is_compiling", "is_dynamo_compiling")
                   if hasattr(torch.compiler, n)]
_FOLD = {torch.jit.is_scripting: False, torch.jit.is_tracing: False,
         torch._C._get_tracing_state: None, torch.compiler.is_exporting: False,
         torch.overrides.has_torch_function: False,
         torch.overrides.has_torch_function_unary: False,
         torch.overrides.has_torch_function_variadic: False}
# Zero-argument readers of global state: answered at trace time, and guarded to stay the same.
_GLOBAL_STATE = [f for f in (torch.is_grad_enabled, torch.get_default_dtype,
                             torch.is_autocast_enabled, torch.is_inference_mode_enabled,
                             torch.are_deterministic_algorithms_enabled,
                             getattr(torch, "get_default_device", None)) if f is not None]

# Guarded at every frame's entry (convert), changed in the trace only by its context managers:
# what they read now follows from that (inference mode: its entry value, where read; ctx.py).
_ENTRY_GUARDED = (torch.is_grad_enabled, torch.get_default_dtype)


class GlobalStateIs:
    """A guard: ``fn()`` still returns ``value``."""

    def __init__(self, fn, value):
        self.fn, self.value = fn, value

    def __call__(self):
        return self.fn() == self.value
_REFUSED_PREFIXES = ("set_", "_set_", "manual_seed", "seed", "use_deterministic", "initial_seed",
                     "autocast_increment_nesting", "autocast_decrement_nesting", "clear_autocast_cache")


def is_compiling_function(value):
    try:
        return any(value is f for f in _COMPILING_TRUE)
    except TypeError:
        return False


# torch's machinery rather than its math: never a graph node (calling them on fake tensors can
# run real kernels launchers, I/O or global-state changes). They are refused like any unknown
# function.
_NOT_OPS = ("torch._inductor", "torch._dynamo", "torch._functorch", "torch.fx", "torch.utils", "torch.distributed",
            "torch.cuda", "torch.backends", "torch.jit", "torch.autograd", "torch.profiler", "torch.export",
            "torch._subclasses", "torch.multiprocessing", "torch.hub", "torch.serialization", "torch.testing",
            "torch._library", "torch._higher_order_ops", "torch.onnx", "torch.package", "torch.mps", "torch.xpu")


def is_torch_callable(value):
    if isinstance(value, type) or not callable(value):
        return False
    if isinstance(value, (torch._ops.OpOverloadPacket, torch._ops.OpOverload)):
        return True
    objclass = getattr(value, "__objclass__", None)
    if objclass is not None and isinstance(objclass, type) and issubclass(objclass, torch._C.TensorBase):
        return True
    module = getattr(value, "__module__", None) or ""
    if any(module == p or module.startswith(p + ".") for p in _NOT_OPS):
        return False
    return (module == "torch" or module.startswith("torch.")) and _named_where_it_lives(value)


_resolves = {}


def _named_where_it_lives(fn):
    """Whether the name FX's generated code will use for ``fn`` (``torch.nn.functional.relu``)
    reads ``fn`` itself. A function reached another way (a staticmethod of a torch class, a
    closure made inside torch) is not a graph node: generated code must read a value exactly
    where the trace read it. Python functions of that kind are inlined like user code."""
    try:
        return _resolves[fn]
    except (KeyError, TypeError):
        pass
    try:
        import builtins
        import importlib
        from torch.fx.node import _get_qualified_name
        parts = _get_qualified_name(fn).split(".")
        obj = builtins if len(parts) == 1 else importlib.import_module(parts[0])
        for part in parts[1:] if len(parts) > 1 else parts:
            obj = getattr(obj, part)
        ok = obj is fn
    except Exception:
        ok = False
    try:
        _resolves[fn] = ok
    except TypeError:
        pass
    return ok


class TorchVariable(ObjectVariable):
    def var_getattr(self, tx, name):
        from .builder import wrap_value
        return wrap_value(tx, getattr(self.value, name), self.attr_source(name))

    def call_function(self, tx, args, kwargs):
        fn = self.value
        if is_compiling_function(fn):
            return ConstantVariable(True)
        if fn in _FOLD:
            return ConstantVariable(_FOLD[fn])
        from .subgraph import check_global_state
        check_global_state(tx, fn)  # refused inside an autograd.Function's backward
        if fn is torch.is_autocast_enabled:  # its device's state, as ctx.py reads it
            from . import ctx
            return ctx.read_state(tx, fn, args, kwargs)
        if any(fn is f for f in _GLOBAL_STATE) and not args and not kwargs:
            value = fn()
            from . import ctx
            if fn is torch.is_inference_mode_enabled:
                ctx.guard_entry_inference_mode(tx)
            elif not any(fn is f for f in _ENTRY_GUARDED):
                tx.output.guards.PREDICATE(None, GlobalStateIs(fn, value),
                                           f"torch.{fn.__name__}() == {value!r}")
            return ConstantVariable(value)
        from . import ctx
        if ctx.is_factory(fn):  # torch.no_grad(), torch.autocast(...), ...
            return ctx.create(tx, fn, args, kwargs)
        if any(fn is f for f in ctx.READERS):
            return ctx.read_state(tx, fn, args, kwargs)
        name = getattr(fn, "__name__", "")
        if name.startswith(_REFUSED_PREFIXES):
            raise Unsupported(f"torch.{name} changes global torch state")
        if fn is torch.device:
            from .builtin import fold
            return fold(fn, args, kwargs)
        from .ndarray import ARRAY_TO_TENSOR, NdarrayVariable, tensor_from_array
        if any(fn is f for f in ARRAY_TO_TENSOR) and any(isinstance(a, NdarrayVariable) for a in args):
            return tensor_from_array(tx, fn, args, kwargs)
        if fn is torch.Size:
            from .lists import SizeVariable
            items = args[0].unpack_var_sequence(tx) if args else []
            return SizeVariable(items)
        return tx.output.call_graph(tx, "call_function", fn, tuple(args), kwargs)

    def _repr_value(self):
        return getattr(self.value, "__qualname__", None) or repr(self.value)
