"""torch functions, torch.nn.functional and tensor methods called as functions.

Anything callable that lives in torch and runs on fake tensors becomes one graph node; a few
functions that only read global state are answered at trace time (and guarded globally), and
functions that change torch's global state are refused.
"""
import operator
import re
import types

import torch
import torch.fx._symbolic_trace

from ..exc import Unsupported
from .base import ObjectVariable
from .constant import ConstantVariable
from .user_defined import UserDefinedClassVariable

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

# Readers of torch's other process-wide flags, by torch's naming of them (``_get_cudnn_allow_tf32``,
# ``_get_float32_matmul_precision``, ``is_anomaly_enabled``, ``_profiler_enabled``...): a call on
# constants is answered by calling it for real, and guarded to keep returning what it read
# (read_flag). The Python readers of torch.backends, torch.autograd... are inlined and reach one
# of these (``torch.backends.cuda.flash_sdp_enabled()``, ``matmul.allow_tf32``'s ``__getattr__``).
_FLAG_READER_NAME = re.compile(r"^_?(get|is|are)_|_enabled$")
# Autocast readers by device, answered as ctx.read_state answers torch.is_autocast_enabled(device)
_AUTOCAST_ALIASES = {getattr(torch, name): (reader, device) for name, reader, device in (
    ("is_autocast_cpu_enabled", torch.is_autocast_enabled, "cpu"),
    ("get_autocast_cpu_dtype", torch.get_autocast_dtype, "cpu"),
    ("get_autocast_gpu_dtype", torch.get_autocast_dtype, "cuda"),
    ("is_autocast_xla_enabled", torch.is_autocast_enabled, "xla"),
    ("get_autocast_xla_dtype", torch.get_autocast_dtype, "xla"),
    ("is_autocast_ipu_enabled", torch.is_autocast_enabled, "ipu"),
    ("get_autocast_ipu_dtype", torch.get_autocast_dtype, "ipu")) if hasattr(torch, name)}
_HAS_TORCH_FUNCTION = (torch.overrides.has_torch_function, torch.overrides.has_torch_function_unary,
                       torch.overrides.has_torch_function_variadic)


# torch's Python readers of its dispatch and tracing state, answered as the C ones are (read_flag):
# called for real and guarded on what they return; inlined, they would read module objects
# sourceless (is_fx_tracing also logs once through an lru_cache'd function).
_PYTHON_STATE_READERS = tuple(f for f in (getattr(torch._ops, "_get_dispatch_mode_pre_dispatch", None),
                                          getattr(torch.fx._symbolic_trace, "is_fx_tracing", None))
                              if f is not None)


def is_state_reader(value):
    return any(value is f for f in _PYTHON_STATE_READERS)


def reads_flag(fn):
    """A torch function named as a reader of global state (see _FLAG_READER_NAME)."""
    return _FLAG_READER_NAME.search(getattr(fn, "__name__", "") or "") is not None


def _guardable(value):
    if type(value) is tuple:
        return all(_guardable(v) for v in value)
    return type(value) in (bool, int, float, str, type(None)) or isinstance(value, (torch.dtype, torch.device)) \
        or hasattr(type(value), "__members__")  # an enum (torch's pybind ones included)


def enum_member(tx, var):
    """A member of one of torch's pybind enums (``torch._C._TorchDispatchModeKey.PROXY``), as a
    constant: pinned by identity where read from the inputs (members are singletons). None for
    anything else."""
    from .objects import UserDefinedObjectVariable
    value = getattr(var, "value", None)
    if not isinstance(var, UserDefinedObjectVariable) or value is None:
        return None
    members = getattr(type(value), "__members__", None)
    if type(type(value)).__name__ != "pybind11_type" or not isinstance(members, dict) or \
            not any(value is m for m in members.values()):
        return None
    if var.source is not None:  # (sourceless: read by torch's own code from its modules)
        tx.output.guards.ID_MATCH(var.source, value)
    return ConstantVariable(value)


def read_flag(tx, fn, args, kwargs):
    """``fn(*args)``, a reader of global state called on constants: answered now, guarded by
    the value read (a global PREDICATE). None where it returns a tensor (a graph node, as any
    other torch call); refused where its result cannot be compared, or where it reads state the
    trace changes other than by sdpa_kernel (autocast's other readers)."""
    from ..guards import CallIs
    from . import ctx
    what = f"{getattr(fn, '__module__', None) or 'torch'}.{fn.__name__}"
    if "autocast" in fn.__name__:
        raise Unsupported(f"{what} reads autocast state that the trace's blocks change")
    if kwargs:
        raise Unsupported(f"{what} reads global state, called with keywords")
    consts = tuple(a.as_python_constant() for a in args)
    try:
        value = fn(*consts)
    except Exception as e:  # noqa: BLE001 - the call raises natively
        raise Unsupported(f"{what}{consts} raised {type(e).__name__}: {e}") from None
    if isinstance(value, torch.Tensor):
        return None
    if not _guardable(value):
        raise Unsupported(f"{what}() returned a {type(value).__name__}, which no guard compares")
    # inside an sdpa_kernel block the SDPA flags follow from their entry values, guarded on entering
    if not ("sdp" in fn.__name__ and ctx.sdpa_block_active(tx)):
        shown = ", ".join(repr(a) for a in consts)
        tx.output.guards.PREDICATE(None, CallIs(fn, consts, value), f"{what}({shown}) == {value!r}")
    from .builder import wrap_constant
    return wrap_constant(value)


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
            "torch._library", "torch._higher_order_ops", "torch.onnx", "torch.package", "torch.mps", "torch.xpu",
            # Python code over tensors, inlined: optimizers, LR schedulers, grad clipping, GradScaler,
            # the default __torch_function__'s _convert, the jagged NestedTensor's __torch_function__ and
            # constructors
            "torch.optim", "torch.nn.utils.clip_grad", "torch.amp", "torch._tensor", "torch.nested")


def _graph_functions():
    """torch's Python functions recorded as one graph node each, as torch.compile records them:
    the jagged NestedTensor's view constructors (they pass a cached dummy NestedTensor to an ATen
    op, which the trace cannot hold)."""
    from torch.nested._internal import nested_tensor as njt
    return tuple(getattr(njt, n) for n in ("nested_view_from_values_offsets",
                                           "nested_view_from_values_offsets_lengths") if hasattr(njt, n))


def is_torch_callable(value):
    if isinstance(value, type) or not callable(value):
        return False
    if isinstance(value, types.FunctionType) and any(value is f for f in _graph_functions()):
        return True
    if isinstance(value, (torch._ops.OpOverloadPacket, torch._ops.OpOverload)):
        return True
    objclass = getattr(value, "__objclass__", None)
    if objclass is not None and isinstance(objclass, type) and issubclass(objclass, torch._C.TensorBase):
        return True
    module = getattr(value, "__module__", None) or ""
    if any(module == p or module.startswith(p + ".") for p in _NOT_OPS):
        return False
    return (module == "torch" or module.startswith("torch.")) and _named_where_it_lives(value)


# the legacy CPU tensor types, called with data: torch.tensor(data, dtype=...)
LEGACY_CONSTRUCTORS = {torch.FloatTensor: torch.float32, torch.DoubleTensor: torch.float64,
                       torch.HalfTensor: torch.float16, torch.BFloat16Tensor: torch.bfloat16,
                       torch.LongTensor: torch.int64, torch.IntTensor: torch.int32,
                       torch.ShortTensor: torch.int16, torch.CharTensor: torch.int8,
                       torch.ByteTensor: torch.uint8, torch.BoolTensor: torch.bool}


def is_legacy_constructor(value):
    return any(value is t for t in LEGACY_CONSTRUCTORS)


class LegacyConstructorVariable(UserDefinedClassVariable):
    """``torch.LongTensor([1, 2])``: a CPU tensor of that dtype holding the data, which is what
    ``torch.tensor(data, dtype=...)`` makes from a (nested) list or tuple of numbers. The sizes
    form (``torch.FloatTensor(2, 3)``: uninitialized memory) and tensor arguments are refused.
    Otherwise it is the class it is (an argument of ``t.type(...)``, of isinstance)."""

    def call_function(self, tx, args, kwargs):
        from .builder import wrap_value
        name = self.value.__name__
        if kwargs or len(args) != 1 or not args[0].is_python_constant():
            raise Unsupported(f"torch.{name}() with arguments other than one list of numbers")
        data = args[0].as_python_constant()
        if not isinstance(data, (list, tuple)) or not _numbers(data):
            raise Unsupported(f"torch.{name}({type(data).__name__}) is not the data form")
        return wrap_value(tx, torch.tensor, None).call_function(
            tx, [args[0]], {"dtype": ConstantVariable(LEGACY_CONSTRUCTORS[self.value]),
                            "device": ConstantVariable("cpu")})  # (a CPU type, whatever the default device)


def _numbers(data):
    return all(_numbers(v) if isinstance(v, (list, tuple)) else type(v) in (int, float, bool) for v in data)


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
            if any(fn is f for f in _HAS_TORCH_FUNCTION):  # no mode active: guarded at the entry
                tx.output.guards.TORCH_FUNCTION_MODE()
                from .subclasses import has_torch_function
                relevant = args[0].unpack_var_sequence(tx) if fn is torch.overrides.has_torch_function \
                    else list(args)
                return ConstantVariable(has_torch_function(tx, relevant, {}))
            return ConstantVariable(_FOLD[fn])
        if fn is torch.overrides.handle_torch_function and args:
            from .subclasses import _overloaded, dispatch
            overloaded = _overloaded(tx, args[1].unpack_var_sequence(tx), {})
            if not overloaded:
                raise Unsupported("handle_torch_function with no __torch_function__ subclass argument")
            return dispatch(tx, args[0], overloaded, args[2:], kwargs)
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
        if fn is torch._C._set_grad_enabled and len(args) == 1 and not kwargs \
                and args[0].is_python_constant() and type(args[0].as_python_constant()) is bool:
            ctx.set_grad_mode(tx, args[0].as_python_constant())  # as set_grad_enabled(mode) without `with`
            return ConstantVariable(None)
        name = getattr(fn, "__name__", "")
        if name.startswith(_REFUSED_PREFIXES):
            raise Unsupported(f"torch.{name} changes global torch state")
        if fn in _AUTOCAST_ALIASES:
            reader, device = _AUTOCAST_ALIASES[fn]
            if args or kwargs:
                raise Unsupported(f"torch.{name} with arguments")
            return ctx.read_state(tx, reader, [ConstantVariable(device)], {})
        if reads_flag(fn) and all(isinstance(a, ConstantVariable) or enum_member(tx, a) is not None
                                  for a in [*args, *kwargs.values()]):
            value = read_flag(tx, fn, [a if isinstance(a, ConstantVariable) else enum_member(tx, a)
                                       for a in args], kwargs)
            if value is not None:
                return value
        if fn is torch.device:
            from .builtin import fold
            return fold(fn, args, kwargs)
        from .ndarray import ARRAY_TO_TENSOR, NdarrayVariable, tensor_from_array
        if any(fn is f for f in ARRAY_TO_TENSOR) and any(isinstance(a, NdarrayVariable) for a in args):
            return tensor_from_array(tx, fn, args, kwargs)
        if fn is torch.Size:
            return make_size(tx, args, kwargs)
        if fn is torch._C._group_tensors_by_device_and_dtype:
            return group_by_device_and_dtype(tx, args, kwargs)
        rewritten = scalar_tensor_rewrite(tx, getattr(fn, "__name__", ""), args, kwargs, method=False)
        if rewritten is not None:
            return rewritten
        return tx.output.call_graph(tx, "call_function", fn, tuple(args), kwargs)

    def _repr_value(self):
        return getattr(self.value, "__qualname__", None) or repr(self.value)


def make_size(tx, args, kwargs):
    """``torch.Size(iterable)`` as torch builds it: ``tuple.__new__`` (its TypeErrors for other
    argument counts or keywords), then each item must be an int: a bool becomes an int, a NumPy
    integer stays one, a symbolic size stays symbolic, anything else is torch's TypeError. A
    tensor item (or a tensor to iterate) is read by ``__index__``: its data, refused."""
    from ..exc import DataDependentError
    from .builtin import fold, iterate
    from .lists import SizeVariable
    from .sym import SymNodeVariable
    from .tensor import TensorVariable
    if kwargs or len(args) > 1:  # tuple's own error, which depends on the form only
        return fold(torch.Size, [ConstantVariable(())] * len(args),
                    {k: ConstantVariable(()) for k in kwargs}, exact=True)
    if not args or isinstance(args[0], ConstantVariable):  # an int, a string...: the real call
        return fold(torch.Size, args, exact=True)
    if isinstance(args[0], TensorVariable):
        raise DataDependentError("torch.Size() needs the tensor's data (it iterates a tensor)")
    items = list(iterate(tx, args[0]))  # (not is_python_constant(): it would specialize sizes)
    for item in items:
        if isinstance(item, TensorVariable):
            raise DataDependentError("torch.Size() needs the tensor's data (an item is a tensor, read by __index__)")
        if not (item.is_python_constant() or isinstance(item, SymNodeVariable) and item.python_type() is int):
            raise Unsupported(f"torch.Size of an item {item}")
    # the real constructor on the constant items (symbolic ones as 0): its errors and conversions
    probe = fold(torch.Size, [ConstantVariable([0 if isinstance(i, SymNodeVariable) else i.as_python_constant()
                                                for i in items])], exact=True)
    return SizeVariable([i if isinstance(i, SymNodeVariable) else p for i, p in zip(items, probe.items)])


# ---- Scalar arguments given as tensors -------------------------------------------------------

_SCALED = {"addcdiv", "addcdiv_", "addcmul", "addcmul_"}
_FOREACH_SCALED = {"_foreach_addcdiv", "_foreach_addcdiv_", "_foreach_addcmul", "_foreach_addcmul_"}


def scalar_tensor_rewrite(tx, name, args, kwargs, method):
    """``t.addcdiv_(t1, t2, value=v)`` and ``torch._foreach_addcdiv_(ts, t1s, t2s, scalars)``
    (and addcmul) with the scalar a tensor, as torch's optimizers pass it while compiling
    (``_get_value``): eager ATen reads the scalar's number (a data-dependent ``.item()``). The
    kernel computes ``self + (scalar * t1) / t2`` (``* t2``); the graph computes the same, in the
    same order: ``t1 * scalar`` first, then the op with the scalar 1. None where this does not
    apply."""
    from .lists import BaseListVariable, ListVariable
    from .tensor import TensorVariable
    if name in _SCALED:
        params = ("tensor1", "tensor2", "value")
        bound = dict(zip(params, args[1:] if method else args[1:]))
        if set(kwargs) - set(params) or len(args) > 4:
            return None
        bound.update(kwargs)
        value = bound.get("value")
        if not isinstance(value, TensorVariable) or "tensor1" not in bound or "tensor2" not in bound:
            return None
        scaled = tx.output.call_graph(tx, "call_function", torch.mul, (bound["tensor1"], value), {})
        kind, target = ("call_method", name) if method else ("call_function", getattr(torch, name))
        return tx.output.call_graph(tx, kind, target, (args[0], scaled, bound["tensor2"]), {})
    if name in _FOREACH_SCALED and not method and not kwargs and len(args) == 4:
        selfs, t1s, t2s, scalars = args
        if not all(isinstance(v, BaseListVariable) for v in (selfs, t1s, t2s)):
            return None
        t1 = t1s.unpack_var_sequence(tx)
        if isinstance(scalars, TensorVariable):  # one scalar per tensor, stacked
            parts = [tx.output.call_graph(tx, "call_function", operator.getitem, (scalars, ConstantVariable(i)), {})
                     for i in range(len(t1))]
        elif isinstance(scalars, BaseListVariable) and any(
                isinstance(v, TensorVariable) for v in scalars.unpack_var_sequence(tx)):
            parts = scalars.unpack_var_sequence(tx)
        else:
            return None
        if len(parts) != len(t1):
            return None
        scaled = ListVariable([tx.output.call_graph(tx, "call_function", torch.mul, (a, b), {})
                               for a, b in zip(t1, parts)])
        return tx.output.call_graph(tx, "call_function", getattr(torch, name), (selfs, scaled, t2s), {})
    return None


def group_by_device_and_dtype(tx, args, kwargs):
    """``torch._C._group_tensors_by_device_and_dtype(tensorlistlist, with_indices)`` (foreach
    utilities, grad clipping): the tensors of each list grouped by the device and dtype of the
    first list's tensor at each position, as the C function does, from the tensors' metadata
    (pinned by their guards): ``{(device, dtype): ([list per input list], indices)}``, groups in
    first-seen order."""
    from .dicts import DictVariable
    from .lists import ListVariable, TupleVariable
    from .tensor import TensorVariable
    names = ("tensorlistlist", "with_indices")
    bound = dict(zip(names, args))
    bound.update(kwargs)
    if set(bound) - set(names) or "tensorlistlist" not in bound:
        raise Unsupported("torch._C._group_tensors_by_device_and_dtype with these arguments")
    with_indices = bound.get("with_indices", ConstantVariable(False)).as_python_constant()
    lists = [v.unpack_var_sequence(tx) for v in bound["tensorlistlist"].unpack_var_sequence(tx)]
    if not lists or not all(isinstance(v, TensorVariable) for v in lists[0]):
        raise Unsupported("torch._C._group_tensors_by_device_and_dtype of lists that are not tensors")
    if any(len(lst) != len(lists[0]) for lst in lists):
        raise Unsupported("RuntimeError: _group_tensors_by_device_and_dtype: lists of different lengths")
    groups = {}
    for i, t in enumerate(lists[0]):
        key = (t.example_value.device, t.example_value.dtype)
        lsts, idx = groups.setdefault(key, ([[] for _ in lists], []))
        for j, lst in enumerate(lists):
            lsts[j].append(lst[i])
        idx.append(i)
    return DictVariable({key: TupleVariable([ListVariable([ListVariable(g) for g in lsts]),
                                             ListVariable([ConstantVariable(i) for i in idx]) if with_indices
                                             else ListVariable([])])
                         for key, (lsts, idx) in groups.items()})
