"""Tensor subclasses as graph inputs.

A *traceable wrapper subclass* (``__torch_dispatch__`` with the ``__tensor_flatten__`` /
``__tensor_unflatten__`` protocol: ``TwoTensor``, DTensor, float8 wrappers) whose
``__torch_function__`` is torch's disabled one is traced as torch.compile traces it: the graph
input's fake value is an instance of the subclass around fake inner tensors (torch's fake mode
converts it through the protocol), so each op the trace records runs the subclass's
``__torch_dispatch__`` on fakes and its results are instances again (``tensor.result_class``).
The backend receives the real subclass instances; AOTAutograd flattens them into their inner
tensors and rebuilds the outputs (its subclass support), and the ``eager`` backend runs the ops on
them as they are.

Guards: the outer tensor's TENSOR_MATCH (exact type, sizes, strides, dtype, device...), the
flatten context (``__tensor_flatten__()[1]``: placements, a scale's dtype...) by equality, each
inner tensor's, recursively, and an opaque inner object (DTensor's device mesh) by identity. Sizes
are static until they change between calls (automatic dynamic, shapes.ShapeTracker.wrapper_dims).

A wrapper subclass with a Python ``__torch_function__`` (the jagged NestedTensor) is traced the
same way, its override inlined at each torch call as a plain subclass's is (below), and the graph
called with the override off. Refused with the subclass's name: a non-traceable one.
"""
import torch
from torch.utils._python_dispatch import is_traceable_wrapper_subclass

from ..exc import Unsupported
from ..source import AttrSource
from .base import VariableTracker


def is_wrapper_subclass(value):
    return type(value) not in (torch.Tensor, torch.nn.Parameter) and is_traceable_wrapper_subclass(value)


def is_wrapper_subclass_class(cls):
    """A traceable wrapper subclass whose ``__torch_function__`` is disabled: made in the trace
    (``Float8TrainingTensor(data, scale, ...)``), its construction is one graph node evaluated on
    the fakes, as DTensor.from_local is (dtensor.record_call)."""
    return isinstance(cls, type) and issubclass(cls, torch.Tensor) and \
        is_traceable_wrapper_subclass_type(cls) and \
        cls.__torch_function__ is torch._C._disabled_torch_function_impl


def check_supported(value):
    cls = type(value)
    if not is_traceable_wrapper_subclass(value):
        raise Unsupported(f"tensor subclass {cls.__name__} (neither torch.Tensor nor a traceable "
                          "wrapper subclass with __tensor_flatten__/__tensor_unflatten__)")


def guard_subclass(guards, source, value, fake=None):
    """TENSOR_MATCH of ``value`` and, through the flatten protocol, of its inner tensors; the
    flatten context by equality. ``fake``: the input's fake where its sizes are symbolic (a
    jagged NestedTensor): an inner size that is symbolic there is left to the SHAPE_ENV check."""
    check_supported(value)
    with torch._C.DisableTorchFunctionSubclass():
        symbolic = any(isinstance(s, torch.SymInt) for s in (*value.size(), *value.stride()))
    if symbolic:  # a jagged NestedTensor's ragged size: a nested int its inner tensors determine
        guards.PREDICATE(source, _OuterMatches(value), f"{source.name()}: {_OuterMatches(value)}")
    elif fake is not None:  # sizes the fake left symbolic: the SHAPE_ENV check's
        from ..shapes import concrete_ints
        guards.TENSOR_MATCH(source, value, sizes=concrete_ints(fake.size()), strides=concrete_ints(fake.stride()))
    else:
        guards.TENSOR_MATCH(source, value)
    attrs, ctx = value.__tensor_flatten__()
    guards.PREDICATE(source, _FlattensTo(tuple(attrs), ctx),
                     f"{source.name()}.__tensor_flatten__() == ({list(attrs)!r}, {ctx!r})")
    for name in attrs:
        inner = getattr(value, name)
        inner_fake = getattr(fake, name) if fake is not None else None
        if not isinstance(inner, torch.Tensor):  # an opaque object (DTensor's device mesh)
            guards.ID_MATCH(AttrSource(source, name), inner)
        elif is_wrapper_subclass(inner):
            guard_subclass(guards, AttrSource(source, name), inner, inner_fake)
        elif inner_fake is not None:
            from ..shapes import concrete_ints
            guards.TENSOR_MATCH(AttrSource(source, name), inner, sizes=concrete_ints(inner_fake.size()),
                                strides=concrete_ints(inner_fake.stride()))
        else:
            guards.TENSOR_MATCH(AttrSource(source, name), inner)


def _outer_metadata(v):
    """What TENSOR_MATCH reads of a wrapper whose sizes are symbolic, but its sizes and strides
    (they follow from its inner tensors and flatten context, guarded on their own): read through
    TensorBase's getters with the subclass's override off."""
    base = torch._C.TensorBase
    with torch._C.DisableTorchFunctionSubclass():
        return (type(v), base.dtype.__get__(v), base.device.__get__(v), base.layout.__get__(v),
                base.requires_grad.__get__(v), base.dim(v), base.is_inference(v), base.is_conj(v),
                base.is_neg(v))


class _OuterMatches:
    """A guard: a wrapper subclass input with symbolic outer sizes has the same exact type,
    dtype, device, layout, requires_grad, rank and inference/conj/neg bits."""

    def __init__(self, value):
        self.info = _outer_metadata(value)

    def __call__(self, v):
        return isinstance(v, torch.Tensor) and _outer_metadata(v) == self.info

    def __str__(self):
        cls, dtype, device, layout, grad, ndim = self.info[:6]
        return f"{cls.__name__}({dtype}, {device}, {layout}, ndim={ndim}, requires_grad={grad})"


class _FlattensTo:
    """The subclass instance flattens to the same inner-tensor names and an equal context (the
    metadata its ops read: DTensor's spec, a float8 tensor's dtype)."""

    def __init__(self, attrs, ctx):
        self.attrs, self.ctx = attrs, ctx

    def __call__(self, v):
        attrs, ctx = v.__tensor_flatten__()
        return tuple(attrs) == self.attrs and type(ctx) is type(self.ctx) and ctx == self.ctx


# ---- __torch_function__ subclasses -----------------------------------------------------------
#
# A subclass with a Python ``__torch_function__`` (torch's default one, which converts results
# to the subclass, or the user's override) whose instances are plain tensors underneath (made by
# ``as_subclass``, not wrappers): a graph input's fake is a plain fake tensor and its tracker
# keeps the class (``python_cls``). Each torch call the trace records with such an argument, while
# torch-function dispatch of subclasses is on, is first offered to the classes'
# ``__torch_function__`` as torch's handle_torch_function does: inlined by the translator (its
# Python is traced, the user's override too), subclasses before their bases, NotImplemented
# passing to the next. Torch's default implementation runs ``func`` inside
# ``DisableTorchFunctionSubclass`` (ctx.py: a count on the output graph), so the call is then
# recorded, and its ``_convert`` calls ``as_subclass``: the same values under a tracker of the
# class, rebuilt on the way out by ``.as_subclass(cls)`` (codegen). Metadata reads (shape, dtype,
# device, requires_grad...) are answered from the tensor, not offered to the override; other
# property reads of such a tensor (``x.T``) are refused.

def is_plain_subclass(cls):
    """A tensor subclass whose instances are plain tensors underneath (``as_subclass``,
    ``Parameter`` subclasses): no ``__torch_dispatch__`` of its own, no flatten protocol."""
    return issubclass(cls, torch.Tensor) and not is_traceable_wrapper_subclass_type(cls) and \
        getattr(cls, "__torch_dispatch__", torch._C._disabled_torch_dispatch_impl) is \
        torch._C._disabled_torch_dispatch_impl


def has_python_torch_function(cls):
    """A tensor class whose ``__torch_function__`` is Python: torch calls on its instances are
    offered to it while tracing (a plain subclass, or a wrapper subclass such as the jagged
    NestedTensor)."""
    if cls is torch.Tensor or cls is torch.nn.Parameter or not issubclass(cls, torch.Tensor):
        return False
    return cls.__torch_function__ is not torch._C._disabled_torch_function_impl


def is_wrapper_with_torch_function(cls):
    """A traceable wrapper subclass with a Python ``__torch_function__`` (the jagged NestedTensor):
    the trace inlines the override and records what it runs with the override off, so the graph
    is called with the override off (subclass_inputs)."""
    return has_python_torch_function(cls) and is_traceable_wrapper_subclass_type(cls)


def is_traceable_wrapper_subclass_type(cls):
    return hasattr(cls, "__tensor_flatten__") and hasattr(cls, "__tensor_unflatten__")


def _overloaded(tx, args, kwargs):
    """The tensor trackers whose class takes part in torch-function dispatch, in torch's order."""
    from .lists import ListVariable, TupleVariable
    from .tensor import TensorVariable
    if tx.output.torch_function_subclass_disabled:
        return []
    found = []
    for a in [*args, *kwargs.values()]:
        items = a.items if isinstance(a, (ListVariable, TupleVariable)) else [a]
        for v in items:
            if isinstance(v, TensorVariable) and has_python_torch_function(v.python_cls):
                found.append(v)
    return found


def has_torch_function(tx, args, kwargs):
    return bool(_overloaded(tx, args, kwargs))


def _ordered_types(overloaded):
    types = []
    for v in overloaded:
        cls = v.python_cls
        if cls in types:
            continue
        # a subclass goes before any of its bases already listed (torch's rule)
        at = next((i for i, t in enumerate(types) if issubclass(cls, t)), len(types))
        types.insert(at, cls)
    return types


class _Stop(Exception):
    pass


def _probe_operators():
    """What torch passes to ``__torch_function__`` for each Python operator on a tensor, the tensor
    first and (binary ones) a number first: ``(func, tensor_first)``, found by running each on a
    probe subclass once (``1 + x`` gives ``Tensor.add`` with ``(x, 1)``, ``1 - x``
    ``Tensor.__rsub__``, ``x / 2`` ``Tensor.div``...)."""
    import operator
    seen = []

    class _Probe(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            seen.append((func, bool(args) and isinstance(args[0], _Probe)))
            raise _Stop

    binary = (operator.add, operator.sub, operator.mul, operator.truediv, operator.floordiv, operator.mod,
              operator.pow, operator.matmul, operator.and_, operator.or_, operator.xor, operator.lshift,
              operator.rshift, operator.lt, operator.le, operator.gt, operator.ge, operator.eq, operator.ne,
              operator.getitem)
    unary = (operator.neg, operator.pos, operator.invert, operator.abs)
    inplace = (operator.iadd, operator.isub, operator.imul, operator.itruediv, operator.ifloordiv,
               operator.imod, operator.ipow, operator.imatmul, operator.iand, operator.ior, operator.ixor,
               operator.ilshift, operator.irshift)
    binary = binary + inplace
    table = {}
    t = torch.ones(2).as_subclass(_Probe)
    for op in (*binary, *unary):
        for number_first in ((False, True) if op in binary and op is not operator.getitem
                             and op not in inplace else (False,)):
            seen.clear()
            try:
                if op in unary:
                    op(t)
                elif number_first:
                    op(2, t)
                else:
                    op(t, 0 if op is operator.getitem else 2)
            except _Stop:
                pass
            except Exception:  # noqa: BLE001 - an operator torch does not offer: not mapped
                continue
            if seen:
                table[(op, number_first)] = seen[0]
    return table


_OPERATORS = {}


def probe_operators():
    """Fill the operator table once, before a compile enters its DisableTorchFunctionSubclass
    (convert_frame); where dispatch is off anyway (a compile started inside such a block), the
    table stays empty and operators on these subclasses are refused."""
    if not _OPERATORS and not torch._C._is_torch_function_enabled():
        return
    if not _OPERATORS:
        _OPERATORS.update(_probe_operators())


def _tensor_dunder(target, args):
    """``operator.add(a, b)`` on tensors: the function and argument order torch offers to
    ``__torch_function__`` (_probe_operators); None for another target."""
    from .tensor import TensorVariable
    number_first = len(args) == 2 and not isinstance(args[0], TensorVariable)
    found = _OPERATORS.get((target, number_first))
    if found is None:
        return None
    func, tensor_first = found
    if len(args) == 2 and number_first and tensor_first:
        return func, (args[1], args[0])
    return func, tuple(args)


def maybe_dispatch(tx, kind, target, args, kwargs):
    """``target(*args, **kwargs)`` offered to the ``__torch_function__`` of the subclasses among
    its arguments; None when none takes part (the caller records the call)."""
    overloaded = _overloaded(tx, args, kwargs)
    if not overloaded:
        return None
    if kind == "call_method":
        func, args = getattr(torch.Tensor, target), tuple(args)
    elif target is getattr:
        raise Unsupported(f"attribute {args[1].as_python_constant()!r} of a {overloaded[0].python_cls.__name__} "
                          "(a __torch_function__ subclass): not offered to its __torch_function__")
    else:
        dunder = _tensor_dunder(target, args)
        if dunder is None and getattr(target, "__module__", None) in ("_operator", "operator"):
            raise Unsupported(f"operator.{target.__name__} on a {overloaded[0].python_cls.__name__} (a "
                              "__torch_function__ subclass): not offered to its __torch_function__")
        func, args = dunder if dunder is not None else (target, tuple(args))
    return dispatch(tx, func, overloaded, args, kwargs)


def dispatch(tx, func, overloaded, args, kwargs):
    """torch's handle_torch_function: each class's ``__torch_function__(func, types, args,
    kwargs)``, inlined, until one returns something else than NotImplemented."""
    from ..source import ConstObjectSource
    from .builder import wrap_value
    from .dicts import DictVariable
    from .lists import TupleVariable
    types = _ordered_types(overloaded)
    func_var = func if isinstance(func, VariableTracker) else wrap_value(tx, func, None)
    types_var = TupleVariable([wrap_value(tx, t, ConstObjectSource(t)) for t in types])
    for cls in types:
        method = wrap_value(tx, cls, ConstObjectSource(cls)).var_getattr(tx, "__torch_function__")
        result = method.call_function(tx, [func_var, types_var, TupleVariable(list(args)),
                                           DictVariable(dict(kwargs))], {})
        if not (result.is_python_constant() and result.as_python_constant() is NotImplemented):
            return result
    raise Unsupported(f"TypeError: no implementation found for {getattr(func, '__name__', func)} "
                      f"on types {[t.__name__ for t in types]} (every __torch_function__ returned NotImplemented)")


def as_subclass(tx, var, cls):
    """``t.as_subclass(cls)``: a new tensor object of ``cls`` on t's memory (an alias node)."""
    from .tensor import TensorVariable
    out = tx.output
    with out.fake_mode:
        fake = torch.ops.aten.alias.default(var.example_value)
    node = out.graph.call_function(torch.ops.aten.alias.default, (var.node,))
    node.meta["example_value"] = fake
    return TensorVariable(node, fake, python_cls=cls)


class NowrapFunctionsVariable(VariableTracker):
    """``torch.overrides.get_default_nowrap_functions()`` (torch's default ``__torch_function__``
    asks it): a fixed set of torch's own getters, a constant frozenset."""

    def __init__(self, value, source=None):
        super().__init__(source)
        self.value = value

    def call_function(self, tx, args, kwargs):
        if args or kwargs:
            raise Unsupported("TypeError: get_default_nowrap_functions() takes no arguments")
        from .constant import ConstantVariable
        return ConstantVariable(frozenset(self.value()))


def is_nowrap_functions(value):
    return value is torch.overrides.get_default_nowrap_functions


def subclass_inputs(compiled, positions, wrappers):
    """The compiled graph called with the plain ``__torch_function__`` subclass inputs at
    ``positions`` as plain tensors (aliases, autograd kept) and, where some inputs are wrappers
    with a Python ``__torch_function__`` (``wrappers``), with torch-function dispatch of
    subclasses off: their overrides ran while tracing, the graph holds what they did (and the
    calls they made with it off)."""
    positions = frozenset(positions)

    def call(*args):
        with torch._C.DisableTorchFunctionSubclass():
            args = [a.as_subclass(torch.Tensor) if i in positions else a for i, a in enumerate(args)]
            if wrappers:
                return compiled(*args)
        return compiled(*args)
    call.__wrapped__ = compiled
    return call
