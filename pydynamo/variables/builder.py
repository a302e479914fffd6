"""The one table from a Python value to its tracker and guards.

``wrap_value(tx, value, source)`` walks ``_TABLE`` in order; the first row whose test accepts
the value makes the tracker and installs the row's guards on ``source``. With ``source=None``
(values computed during tracing, or read from torch's own modules) no guard is installed, so
such values must be immutable or trusted. ``wrap_constant`` wraps results of constant folding.
"""
import collections
import dataclasses
import enum
import functools
import logging
import types
import warnings
import weakref

import torch

from ..exc import Unsupported
from ..guards import equals_supported
from ..source import AttrSource, GetItemSource
from .base import GetAttrVariable
from .autograd_function import AutogradFunctionApplyVariable, is_apply_method
from .builtin import BuiltinVariable, is_supported_builtin
from .checkpoint import CheckpointVariable, is_checkpoint
from .higher_order import HigherOrderVariable, is_higher_order
from .marked import SubstitutedVariable
from ..api import substitute_of
from .func_transforms import FuncTransformVariable, is_func_transform
from .flex_attention import FlexAttentionVariable, is_flex_attention
from .constant import ConstantVariable, is_constant_value
from .dicts import DictVariable, is_keyed_input, wrap_keyed_input
from .distributed import is_distributed_value, wrap_distributed
from .exceptions import ExceptionClassVariable
from .functions import UserFunctionVariable, UserMethodVariable
from .lists import ListVariable, RangeVariable, SizeVariable, SliceVariable, TupleVariable
from .rebuild import RebuildVariable, is_rebuild_function
from .marked import MarkedFunctionVariable, is_marked
from .ndarray import NumpyFunctionVariable, is_ndarray, is_numpy_function, wrap_ndarray
from .nn_module import NNModuleVariable
from .objects import BuiltinMethodVariable, is_base_method
from .sets import SetVariable, wrap_input_set
from .class_statement import DataclassVariable, FieldVariable, MadeClassVariable
from .catch_warnings import reenter as reenter_catch_warnings, FILTER_FUNCTIONS, CatchWarningsFactoryVariable, WarningsFilterVariable
from .deferred import DeferredFunctionVariable, GetLoggerVariable, LoggerVariable, is_deferred_function
from .stdlib import (COLLECTION_TYPES, SPEC_INSTANCE_TYPES, LruCacheVariable, PolyfillVariable, has_polyfill,
                     TypingVariable, is_typing_alias, wrap_collection, wrap_spec_instance, wrap_weakref)
from .thread_local import is_thread_local, wrap_thread_local
from .torch import LegacyConstructorVariable, TorchVariable, is_legacy_constructor, is_state_reader, is_torch_callable
from . import ctx
from .subclasses import NowrapFunctionsVariable, is_nowrap_functions
from .dtensor import DTensorAPIVariable, PlacementClassVariable, is_dtensor_api, is_placement_class
from .user_defined import PythonModuleVariable, UserDefinedClassVariable, UserDefinedObjectVariable


def _guard(tx, source, kind, value):
    if source is not None:
        tx.output.guards.add(source, kind, value)


def _tensor(tx, value, source):
    """A graph input. Refused: tensors with properties TENSOR_MATCH does not describe (a subclass
    may override any op or property; names, quantization parameters, non-strided layouts)."""
    if source is None:
        raise Unsupported("a tensor that is not reachable from the frame's inputs "
                          "(e.g. a constant inside a torch module)")
    if type(value) is not torch.Tensor and type(value) is not torch.nn.Parameter:
        from .subclasses import guard_subclass, is_plain_subclass
        if not is_plain_subclass(type(value)):
            from torch.utils._python_dispatch import is_traceable_wrapper_subclass
            from ..shapes import has_nested_int
            # a jagged NestedTensor (its ragged size symbolic), a wrapper whose sizes changed
            # (automatic dynamic): symbolic sizes (shapes.py)
            if has_nested_int(value) or is_traceable_wrapper_subclass(value) and \
                    tx.output.shapes.wrapper_dims(source, value) is not None:
                var = tx.output.add_graph_input(source, value)
                guard_subclass(tx.output.guards, source, value, var.example_value)
                for d, size in enumerate(var.example_value.size()):
                    # the nested int, a batch size once it changed (one placeholder per symbol)
                    if isinstance(size, torch.SymInt) and size.node.maybe_as_int() is None:
                        tx.output.add_size_input(source, d, size)
                return var
            guard_subclass(tx.output.guards, source, value)  # refuses the ones not traced
            return tx.output.add_graph_input(source, value, static=True)
        # a __torch_function__ subclass (or one with it disabled): a plain tensor underneath,
        # its class kept by the tracker and pinned by TENSOR_MATCH's exact type
    if value.layout is not torch.strided or value.is_nested:
        raise Unsupported(f"tensors with layout {value.layout} are not supported")
    if value.is_quantized:
        raise Unsupported("quantized tensors are not supported (their scale and zero point are "
                          "not guarded)")
    if getattr(value, "has_names", None) is not None and value.has_names():  # torch < 2.13
        raise Unsupported("named tensors are not supported")
    var = tx.output.add_graph_input(source, value)
    if not _has_symbolic_size(var.example_value):  # else guarded when the trace ends (shapes.py)
        _guard(tx, source, "TENSOR_MATCH", value)
    return var


def _has_symbolic_size(fake):
    return any(isinstance(s, torch.SymInt) for s in (*fake.size(), *fake.stride()))


def _module(tx, value, source):
    if source is None:
        raise Unsupported("an nn.Module that is not reachable from the frame's inputs")
    # by class, not identity: one compiled entry serves every instance whose reads agree, each
    # read being guarded at its own source (torch.compile shares a block class's graph between
    # the blocks). What identity alone decides pins it where it is used: `is` between modules and
    # tree walks (nn_module.pin_identities), id(), attribute stores (opcodes.store_attr)
    _guard(tx, source, "TYPE_MATCH", value)
    return NNModuleVariable(value, source)


def _constant(tx, value, source):
    if type(value) is int and source is not None and tx.output.shapes.policy.int_is_dynamic(source, value):
        _guard(tx, source, "TYPE_MATCH", value)  # its value: the SHAPE_ENV check
        return tx.output.add_symint_input(source, value)
    kind = "ID_MATCH" if isinstance(value, (torch.dtype, enum.Enum)) or value is Ellipsis \
        else "EQUALS_MATCH"
    _guard(tx, source, kind, value)
    return ConstantVariable(value, source)


def _size(tx, value, source):
    _guard(tx, source, "EQUALS_MATCH", value)
    return SizeVariable([ConstantVariable(s) for s in value], source)  # (numpy ints kept: torch.Size keeps them)


def _constant_tuple(tx, value, source):
    """A tuple of constants (a conv's stride, a shape): one equality check on the whole tuple
    instead of a type, a length and one check per item."""
    _guard(tx, source, "EQUALS_MATCH", value)

    def const(v, src):
        if type(v) is tuple:
            return TupleVariable([const(x, GetItemSource(src, i) if src is not None else None)
                                  for i, x in enumerate(v)], src)
        return ConstantVariable(v, src)
    return const(value, source)


def _sequence(tx, value, source):
    _guard(tx, source, "TYPE_MATCH", value)
    _guard(tx, source, "LEN", value)
    items = [wrap_value(tx, v, GetItemSource(source, i) if source is not None else None)
             for i, v in enumerate(value)]
    if isinstance(value, list):
        return ListVariable(items, source)
    return TupleVariable(items, source, tuple_cls=type(value))


def _dict(tx, value, source):
    from .dicts import valid_key
    for key in value:
        if not valid_key(key):
            raise Unsupported(f"dict with a key of type {type(key).__name__} (neither a constant nor "
                              "hashed by identity)")
    _guard(tx, source, "DICT_KEYS", value)
    items = {k: wrap_value(tx, v, GetItemSource(source, k) if source is not None else None)
             for k, v in value.items()}
    return DictVariable(items, source)


def _equal_constant(make):
    def wrap(tx, value, source):
        _guard(tx, source, "EQUALS_MATCH", value)
        return make(value)
    return wrap


def _class(tx, value, source):
    from .base import MADE_IN_TRACE
    if value in MADE_IN_TRACE:  # a class statement's, reached again (a cell, type(obj))
        return MadeClassVariable(value)
    _guard(tx, source, "ID_MATCH", value)
    return UserDefinedClassVariable(value, source)


def _identity(make):
    def wrap(tx, value, source):
        _guard(tx, source, "ID_MATCH", value)
        return make(value, source)
    return wrap


def _bound_method(tx, value, source):
    if not isinstance(value.__func__, types.FunctionType):
        raise Unsupported(f"bound method of a builtin: {value!r}")
    self_src = AttrSource(source, "__self__") if source is not None else None
    fn_src = AttrSource(source, "__func__") if source is not None else None
    _guard(tx, fn_src, "ID_MATCH", value.__func__)
    return UserMethodVariable(value.__func__, wrap_value(tx, value.__self__, self_src), fn_src)


def _apply_method(tx, value, source):
    """``MyFunction.apply`` as a value: a call of it is captured (autograd_function.py)."""
    cls_var = wrap_value(tx, value.__self__, AttrSource(source, "__self__") if source is not None else None)
    return AutogradFunctionApplyVariable(cls_var)


def _tensor_method(tx, value, source):
    """``x.add`` passed around as a value (e.g. to a resume function): the call stays a graph op."""
    from .base import GetAttrVariable
    _guard(tx, source, "TYPE_MATCH", value)
    _guard(tx, AttrSource(source, "__name__") if source is not None else None, "EQUALS_MATCH",
           value.__name__)
    obj = wrap_value(tx, value.__self__, AttrSource(source, "__self__") if source is not None else None)
    return GetAttrVariable(obj, value.__name__)


_CONTAINERS = (list, dict, set, collections.deque, collections.OrderedDict, collections.defaultdict)


def _is_container_method(value):
    """A method of a list, dict, set or collections container bound to it (``lst.append``)."""
    return isinstance(value, types.BuiltinMethodType) and type(value.__self__) in _CONTAINERS \
        and isinstance(getattr(type(value.__self__), value.__name__, None), types.MethodDescriptorType)


def _container_method(tx, value, source):
    """``obj.name`` read again from its ``__self__`` (one tracker for the container, so a call
    changes the contents the trace sees through every path). Guarded to be what that read
    gives: bound methods of C types compare equal when their self and C function are the same."""
    name = value.__name__
    self_src = AttrSource(source, "__self__") if source is not None else None
    if source is not None:
        _guard(tx, source, "TYPE_MATCH", value)
        tx.output.guards.PREDICATE(source, lambda m, name=name: type(m) is types.BuiltinMethodType
                                   and m == getattr(m.__self__, name, None),
                                   f"{source.name()} is {source.name()}.__self__.{name}")
    return GetAttrVariable(wrap_value(tx, value.__self__, self_src), name, source)


def _object(tx, value, source):
    _guard(tx, source, "TYPE_MATCH", value)
    return UserDefinedObjectVariable(value, source)


def _is_plain_tuple(v):
    return isinstance(v, (tuple, list)) and type(v) in (tuple, list) or \
        (isinstance(v, tuple) and hasattr(type(v), "_fields"))


# torch classes whose calls TorchVariable knows (the rest are refused like any class); the
# context managers' (ctx.py) also as generated code's constants (a resume function enters them).
_TORCH_CLASSES = (torch.Size, torch.device, *ctx.FACTORIES)

_TABLE = [
    (lambda v: isinstance(v, torch.Tensor), _tensor),
    (lambda v: isinstance(v, torch.nn.Module), _module),
    (is_ndarray, wrap_ndarray),
    (is_numpy_function, _identity(NumpyFunctionVariable)),
    (is_constant_value, _constant),
    (lambda v: type(v) is torch.Size, _size),
    (lambda v: type(v) is tuple and equals_supported(v), _constant_tuple),
    (_is_plain_tuple, _sequence),
    (is_keyed_input, wrap_keyed_input),  # an optimizer's state, a defaultdict (dicts.py)
    (lambda v: type(v) is dict, _dict),
    (lambda v: type(v) in (set, frozenset), wrap_input_set),
    (lambda v: type(v) in COLLECTION_TYPES, wrap_collection),
    (lambda v: type(v) is range, _equal_constant(RangeVariable)),
    (lambda v: type(v) is slice, _equal_constant(
        lambda s: SliceVariable(*(ConstantVariable(p) for p in (s.start, s.stop, s.step))))),
    (is_rebuild_function, _identity(lambda v, src: RebuildVariable(v))),
    (lambda v: substitute_of(v) is not None, _identity(SubstitutedVariable)),
    (is_marked, _identity(MarkedFunctionVariable)),  # graph_break, allow_in_graph, disallow_in_graph
    (lambda v: any(v is c for c in _TORCH_CLASSES), _identity(TorchVariable)),
    (is_legacy_constructor, _identity(LegacyConstructorVariable)),
    (ctx.is_context_manager_object, ctx.wrap_context_manager),
    (has_polyfill, _identity(PolyfillVariable)),
    (is_deferred_function, _identity(DeferredFunctionVariable)),
    (lambda v: v is logging.getLogger, _identity(GetLoggerVariable)),
    (lambda v: v is dataclasses.dataclass, _identity(DataclassVariable)),
    (lambda v: v is dataclasses.field, _identity(FieldVariable)),
    (lambda v: v is warnings.catch_warnings or v is reenter_catch_warnings, _identity(CatchWarningsFactoryVariable)),
    (lambda v: any(v is f for f in FILTER_FUNCTIONS), _identity(WarningsFilterVariable)),
    (is_nowrap_functions, _identity(NowrapFunctionsVariable)),  # (subclasses.py)
    (lambda v: isinstance(v, functools._lru_cache_wrapper), _identity(LruCacheVariable)),
    (lambda v: isinstance(v, logging.Logger), _identity(LoggerVariable)),
    (lambda v: type(v) in SPEC_INSTANCE_TYPES, wrap_spec_instance),
    (is_higher_order, _identity(HigherOrderVariable)),
    (is_func_transform, _identity(FuncTransformVariable)),
    (is_flex_attention, _identity(FlexAttentionVariable)),
    (is_torch_callable, _identity(TorchVariable)),
    (is_state_reader, _identity(TorchVariable)),  # torch._ops._get_dispatch_mode_pre_dispatch
    (is_supported_builtin, _identity(BuiltinVariable)),
    (is_checkpoint, _identity(CheckpointVariable)),
    (is_distributed_value, wrap_distributed),  # process groups, collectives (distributed.py)
    (is_dtensor_api, _identity(DTensorAPIVariable)),  # DTensor.from_local... (dtensor.py)
    (lambda v: isinstance(v, types.FunctionType), _identity(UserFunctionVariable)),
    (is_apply_method, _apply_method),
    (lambda v: isinstance(v, types.MethodType), _bound_method),
    (lambda v: isinstance(v, types.BuiltinMethodType) and isinstance(v.__self__, torch.Tensor),
     _tensor_method),
    (lambda v: isinstance(v, types.ModuleType), _identity(PythonModuleVariable)),
    (lambda v: isinstance(v, type) and issubclass(v, BaseException), _identity(ExceptionClassVariable)),
    (is_placement_class, _identity(PlacementClassVariable)),
    (lambda v: isinstance(v, type), _class),
    (lambda v: type(v) is weakref.ReferenceType, wrap_weakref),
    (is_thread_local, wrap_thread_local),  # threading.local(): per-thread attributes
    (is_typing_alias, _identity(TypingVariable)),
    (is_base_method, _identity(lambda v, src: BuiltinMethodVariable(v, None, src))),
    (_is_container_method, _container_method),
    (lambda v: isinstance(v, types.BuiltinMethodType) and v.__self__ is not None and _is_immutable_constant(v.__self__),
     _identity(lambda v, src: GetAttrVariable(wrap_constant(v.__self__), v.__name__, src))),
    (lambda v: True, _object),
]


def wrap_value(tx, value, source):
    """The tracker of ``value`` read from ``source``, with the guards that pin what was read.

    A source read twice gives the same tracker: a list mutated after the first read must be
    seen mutated by the second (the real object is only changed when the new code runs).
    """
    known = tx.output.tracked_sources
    if source is not None and source.name() in known:
        return known[source.name()]
    if source is not None and _MUTABLE_KINDS(value):
        # one object reached by two paths is one tracker: a mutation made through one path is
        # seen through the other (output_graph guards that the paths still alias, or not)
        same = tx.output.mutable_objects.get(id(value))
        if same is not None and same[1] is value:
            tx.output.mutable_sources[source.name()] = (source, value)
            known[source.name()] = same[0]
            return same[0]
    for accepts, make in _TABLE:
        if accepts(value):
            var = make(tx, value, source)
            if source is not None:
                known[source.name()] = var
                if _MUTABLE_KINDS(value):
                    tx.output.mutable_objects[id(value)] = (var, value)
                    tx.output.mutable_sources[source.name()] = (source, value)
            return var
    raise AssertionError("the last row accepts everything")


_HEAPTYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class made by a class statement


def _is_immutable_constant(value):
    """A str, int, frozenset... whose bound builtin methods (``frozenset(kw).__contains__``,
    ``"sep".join``) are calls of the constant's own methods."""
    return (is_constant_value(value) and not isinstance(value, enum.Enum)) or \
        (type(value) in (frozenset, tuple) and all(is_constant_value(v) for v in value))


def _MUTABLE_KINDS(value):
    """Values whose contents a trace may change and read back: lists, dicts, user objects.
    (Modules are guarded by class; what depends on their identity pins it where it is read:
    nn_module.pin_identities, builtin._id, opcodes.store_attr. Tensors have their own aliasing guard.)"""
    return type(value) in (list, dict, set, *COLLECTION_TYPES) or (
        not isinstance(value, (torch.Tensor, torch.nn.Module, type, types.ModuleType,
                               types.FunctionType, types.MethodType, tuple))
        and not is_constant_value(value)
        and (hasattr(value, "__dict__") or type(value).__flags__ & _HEAPTYPE))  # slots too


def wrap_constant(value):
    """A tracker for a value computed at trace time (no source, no guards)."""
    if is_constant_value(value):
        return ConstantVariable(value)
    if type(value) is torch.Size:  # items as torch keeps them (torch.Size([numpy.int64(2)]))
        return SizeVariable([ConstantVariable(s) for s in value])
    if isinstance(value, tuple):
        return TupleVariable([wrap_constant(v) for v in value], tuple_cls=type(value))
    if type(value) is list:
        return ListVariable([wrap_constant(v) for v in value])
    if type(value) is dict:
        return DictVariable({k: wrap_constant(v) for k, v in value.items()})
    if type(value) is range:
        return RangeVariable(value)
    if type(value) is slice:
        return SliceVariable(*(ConstantVariable(p) for p in (value.start, value.stop, value.step)))
    if type(value) is frozenset:
        return SetVariable.new(value, ("const", value))  # immutable: rebuilt as this very object
    if type(value) is set:  # a fold gave back a set tracker's replica: two trackers, one object
        raise Unsupported("a set computed by constant folding")
    if isinstance(value, (frozenset, types.CodeType, types.UnionType)):
        return ConstantVariable(value)
    if any(value is c for c in _TORCH_CLASSES):
        return TorchVariable(value)  # the grad-mode classes a resume function's prologue enters
    if value is reenter_catch_warnings:
        return CatchWarningsFactoryVariable(value)
    if is_rebuild_function(value):  # what a resume function's prologue calls (rebuild.py)
        return RebuildVariable(value)
    if isinstance(value, type):
        if issubclass(value, BaseException):
            return ExceptionClassVariable(value)
        return UserDefinedClassVariable(value)
    if is_supported_builtin(value):
        return BuiltinVariable(value)
    raise Unsupported(f"a value of type {type(value).__name__} computed while tracing")
