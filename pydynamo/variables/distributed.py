"""torch.distributed in traced code: DDP and FSDP2 modules, process groups, collectives.

- A call of a ``DistributedDataParallel`` module, or of a module managed by FSDP2's
  ``fully_shard``, is never inlined: their forwards and hooks drive C++ state (DDP's reducer,
  FSDP's all-gathers, streams and resharding) and run natively, as under torch.compile; the
  module they wrap is compiled as a frame of its own. The call breaks the graph.
"""
import sys

import torch

from ..exc import Unsupported
from .base import ObjectVariable


def _fsdp_module_class():
    mod = sys.modules.get("torch.distributed.fsdp._fully_shard._fully_shard")
    return getattr(mod, "FSDPModule", None)


def _ddp_class():
    mod = sys.modules.get("torch.nn.parallel.distributed")
    return getattr(mod, "DistributedDataParallel", None)


def refuse_distributed_module(module):
    """Raise Unsupported for a DDP module or an FSDP2-managed module called in traced code."""
    ddp = _ddp_class()
    if ddp is not None and isinstance(module, ddp):
        raise Unsupported("a call of a DistributedDataParallel module (its forward runs natively, as "
                          "under torch.compile; the module it wraps is compiled on its own)")
    fsdp = _fsdp_module_class()
    if fsdp is not None and isinstance(module, fsdp):
        raise Unsupported(f"a call of {type(module).__name__}, managed by FSDP2's fully_shard (its "
                          "hooks all-gather and reshard natively, as under torch.compile; its forward "
                          "is compiled on its own)")


# ---- process groups, reduce ops, collectives ---------------------------------------------------
#
# - A ``ProcessGroup`` is guarded by identity; its rank, size and name are fixed for its life, so
#   they are answered at trace time. ``None`` for a group (and ``dist.group.WORLD``) is the
#   default group, guarded to stay the same object (``DefaultGroupIs``).
# - ``dist.get_rank`` / ``get_world_size`` / ``is_initialized`` are answered at trace time, so
#   guarded.
# - Collectives become graph nodes of torch's functional collectives (``_c10d_functional``: the
#   ops torch.compile puts in its graphs), each followed by its ``wait_tensor``:
#   ``funcol.all_reduce / all_gather_single / all_gather_tensor / reduce_scatter_single /
#   reduce_scatter_tensor / broadcast`` as they are (what funcol itself does under a compiler);
#   ``dist.all_reduce``,
#   ``dist.all_gather_into_tensor`` / ``all_gather_single``, ``dist.reduce_scatter_tensor`` /
#   ``reduce_scatter_single`` (which write their result
#   into a tensor) as the functional op followed by ``copy_`` into that tensor, which is how the
#   in-place write reaches the graph's mutation handling. Forms not modelled exactly are
#   refused (a graph break: the call runs natively): ``async_op=True``, a tensor that requires
#   grad (the in-place c10d ops are not differentiable), non-contiguous tensors, shapes other
#   than the concatenated layout, symbolic sizes, groups given by name, ranks or a device mesh.
#   (The FutureWarning eager ``all_gather_into_tensor`` / ``reduce_scatter_tensor`` give is not
#   given by compiled code.)

_REDUCE_OPS = ("SUM", "AVG", "PRODUCT", "MIN", "MAX")


def _c10d():
    return sys.modules.get("torch.distributed.distributed_c10d")


def _funcol():
    return sys.modules.get("torch.distributed._functional_collectives")


def _handlers():
    """id(function) -> (function, handler) of the distributed functions modelled here."""
    c10d, funcol = _c10d(), _funcol()
    key = (id(c10d), id(funcol))
    if _cache.get("key") != key:
        table = {}
        if c10d is not None:
            for name, handler in (("all_reduce", _dist_all_reduce),
                                  ("all_gather_into_tensor", _dist_all_gather_into_tensor),
                                  ("all_gather_single", _dist_all_gather_into_tensor),
                                  ("reduce_scatter_tensor", _dist_reduce_scatter_tensor),
                                  ("reduce_scatter_single", _dist_reduce_scatter_tensor),
                                  ("get_rank", _get_rank), ("get_world_size", _get_world_size),
                                  ("is_initialized", _is_initialized)):
                fn = getattr(c10d, name, None)
                if fn is not None:
                    table[id(fn)] = (fn, handler)
        if funcol is not None:
            for name, handler in (("all_reduce", _funcol_all_reduce),
                                  ("all_gather_single", _funcol_all_gather),
                                  ("all_gather_tensor", _funcol_all_gather),
                                  ("reduce_scatter_single", _funcol_reduce_scatter),
                                  ("reduce_scatter_tensor", _funcol_reduce_scatter),
                                  ("broadcast", _funcol_broadcast)):
                fn = getattr(funcol, name, None)
                if fn is not None:
                    table[id(fn)] = (fn, handler)
        _cache.update(key=key, table=table)
    return _cache["table"]


_cache = {}


def _handler_of(value):
    entry = _handlers().get(id(value))
    return entry[1] if entry is not None and entry[0] is value else None


def is_distributed_value(value):
    """A value this file models: a ProcessGroup, a reduce op, ``dist.group``, or one of the
    modelled functions."""
    c10d = _c10d()
    if c10d is None:
        return False
    if value is getattr(c10d, "group", None):
        return True
    pg, reduce_op = getattr(c10d, "ProcessGroup", None), getattr(c10d, "ReduceOp", None)
    if pg is not None and isinstance(value, pg):
        return True
    if reduce_op is not None and isinstance(value, reduce_op.RedOpType):
        return True
    return callable(value) and _handler_of(value) is not None


def wrap_distributed(tx, value, source):
    from .constant import ConstantVariable
    c10d = _c10d()
    if source is not None:
        tx.output.guards.ID_MATCH(source, value)
    if value is c10d.group:
        return GroupNamespaceVariable(value, source)
    if isinstance(value, c10d.ProcessGroup):
        return ProcessGroupVariable(value, source)
    if isinstance(value, c10d.ReduceOp.RedOpType):
        return ConstantVariable(value, source)  # a singleton of its enum (ID_MATCH above)
    return DistributedFunctionVariable(value, source)


class DefaultGroupIs:
    """A guard: the default process group is still ``pg`` (a process group destroyed and made
    again may have another size, rank or backend)."""

    def __init__(self, pg):
        import weakref
        self.ref = weakref.ref(pg) if pg is not None else (lambda: None)

    def __call__(self):
        c10d = _c10d()
        return c10d is not None and c10d.group.WORLD is self.ref()


def _default_group(tx):
    c10d = _c10d()
    pg = c10d.group.WORLD if c10d is not None else None
    tx.output.guards.PREDICATE(None, DefaultGroupIs(pg), "the default process group is unchanged"
                               if pg is not None else "no default process group")
    if pg is None:
        raise Unsupported("torch.distributed: the default process group is not initialized")
    return pg


def _group(tx, var):
    """The ProcessGroup a ``group`` argument names: None (the default group) or a group."""
    from .constant import ConstantVariable
    if var is None or (isinstance(var, ConstantVariable) and var.value is None):
        return _default_group(tx)
    if isinstance(var, ProcessGroupVariable):
        return var.value
    raise Unsupported(f"torch.distributed: a group given as {var} (only a ProcessGroup or None "
                      "is modelled)")


class ProcessGroupVariable(ObjectVariable):
    """A ProcessGroup, held as itself."""

    def var_getattr(self, tx, name):
        from .constant import ConstantVariable
        if name == "group_name":
            return ConstantVariable(self.value.group_name)
        if name in ("rank", "size"):
            from .base import GetAttrVariable
            return GetAttrVariable(self, name)
        raise Unsupported(f"ProcessGroup.{name}")

    def call_method(self, tx, name, args, kwargs):
        from .constant import ConstantVariable
        if name in ("rank", "size") and not args and not kwargs:
            return ConstantVariable(getattr(self.value, name)())
        raise Unsupported(f"ProcessGroup.{name}()")

    def reconstruct(self, codegen):
        if self.source is None:
            raise Unsupported("a process group read in the trace cannot be returned")
        self.source.reconstruct(codegen)

    def _repr_value(self):
        return f"ProcessGroup {self.value.group_name}"


class GroupNamespaceVariable(ObjectVariable):
    """``torch.distributed.group``: its ``WORLD`` is the default process group."""

    def var_getattr(self, tx, name):
        if name == "WORLD":
            from ..source import AttrSource
            # rebuilt by reading it again: DefaultGroupIs pins what it reads
            return ProcessGroupVariable(_default_group(tx), AttrSource(self.source, "WORLD")
                                        if self.source is not None else None)
        raise Unsupported(f"torch.distributed.group.{name}")

    def _repr_value(self):
        return "torch.distributed.group"


class DistributedFunctionVariable(ObjectVariable):
    """A torch.distributed function whose call is modelled (see _handler_of)."""

    def call_function(self, tx, args, kwargs):
        import inspect
        try:
            bound = inspect.signature(self.value).bind(*args, **kwargs)
        except TypeError as e:
            raise Unsupported(f"{self.value.__qualname__} called with these arguments ({e})") from None
        bound.apply_defaults()
        return _handler_of(self.value)(tx, bound.arguments)

    def reconstruct(self, codegen):
        if self.source is not None:
            return self.source.reconstruct(codegen)
        codegen.load_const(self.value)

    def _repr_value(self):
        return f"{self.value.__module__}.{self.value.__qualname__}"


# ---- the handlers: ``a`` maps each parameter to its tracker, or to its default value ----------

def _const(v, what):
    from .base import VariableTracker as VT
    if not isinstance(v, VT):
        return v  # a default
    try:
        return v.as_python_constant()
    except Unsupported:
        raise Unsupported(f"torch.distributed: {what} must be a constant, got {v}") from None


def _tensor(v, what):
    from .tensor import TensorVariable
    if not isinstance(v, TensorVariable) or v.python_type() is not torch.Tensor and \
            v.python_type() is not torch.nn.Parameter:
        raise Unsupported(f"torch.distributed: {what} must be a tensor, got {v}")
    fake = v.example_value
    if any(isinstance(s, torch.SymInt) for s in (*fake.size(), *fake.stride())):
        raise Unsupported(f"torch.distributed: {what} with symbolic sizes")
    return v


def _reduce_op_name(op, for_dist):
    c10d = _c10d()
    if for_dist:
        if not isinstance(op, c10d.ReduceOp.RedOpType) or op.name not in _REDUCE_OPS:
            raise Unsupported(f"torch.distributed: reduce op {op!r} (only {', '.join(_REDUCE_OPS)} "
                              "are modelled)")
        return op.name.lower()
    if not isinstance(op, str) or op.upper() not in _REDUCE_OPS:
        raise Unsupported(f"functional collective with reduce op {op!r}")
    return op.lower()


def _no_async(a):
    if _const(a["async_op"], "async_op") is not False:
        raise Unsupported("torch.distributed collective with async_op=True (its Work handle is "
                          "not modelled)")


def _writable(tx, v, what):
    """A tensor a dist.* collective reads or writes: refused where the c10d op would not behave
    as its functional form followed by copy_ (autograd: the c10d ops are not differentiable, and
    copy_ from a tensor that requires grad would be; layout: c10d wants contiguous tensors)."""
    v = _tensor(v, what)
    fake = v.example_value
    if fake.requires_grad:
        raise Unsupported(f"torch.distributed collective on a tensor that requires grad ({what})")
    if not fake.is_contiguous():
        raise Unsupported(f"torch.distributed collective on a non-contiguous tensor ({what})")
    return v


def _emit(tx, op, tensor, *consts):
    """``wait_tensor(op(tensor, *consts))`` in the graph."""
    from .constant import ConstantVariable
    out = tx.output.call_graph(tx, "call_function", op, (tensor, *(ConstantVariable(c) for c in consts)), {})
    return tx.output.call_graph(tx, "call_function", torch.ops._c10d_functional.wait_tensor.default, (out,), {})


def _same_kind(a, b, what):
    fa, fb = a.example_value, b.example_value
    if fa.dtype != fb.dtype or fa.device != fb.device:
        raise Unsupported(f"torch.distributed.{what}: tensors of different dtype or device")


def _concatenates(whole, part, n, what):
    """``whole`` must be ``n`` tensors shaped like ``part`` concatenated along dim 0."""
    p, w = tuple(part.example_value.size()), tuple(whole.example_value.size())
    if not p or w != (n * p[0], *p[1:]):
        raise Unsupported(f"torch.distributed.{what} along dim 0 is modelled")


def _dist_all_reduce(tx, a):
    from .constant import ConstantVariable
    _no_async(a)
    t = _writable(tx, a["tensor"], "tensor")
    op = _reduce_op_name(_const(a["op"], "op"), for_dist=True)
    pg = _group(tx, a["group"])
    out = _emit(tx, torch.ops._c10d_functional.all_reduce.default, t, op, pg.group_name)
    t.call_method(tx, "copy_", [out], {})
    return ConstantVariable(None)


def _dist_all_gather_into_tensor(tx, a):
    from .constant import ConstantVariable
    _no_async(a)
    out_t = _writable(tx, a["output_tensor"], "output_tensor")
    inp = _writable(tx, a["input_tensor"], "input_tensor")
    _same_kind(out_t, inp, "all_gather_into_tensor")
    pg = _group(tx, a["group"])
    n = pg.size()
    _concatenates(out_t, inp, n, "all_gather_into_tensor: only an output that concatenates the inputs")
    res = _emit(tx, torch.ops._c10d_functional.all_gather_into_tensor.default, inp, n, pg.group_name)
    out_t.call_method(tx, "copy_", [res], {})
    return ConstantVariable(None)


def _dist_reduce_scatter_tensor(tx, a):
    from .constant import ConstantVariable
    _no_async(a)
    out_t = _writable(tx, a["output"], "output")
    inp = _writable(tx, a["input"], "input")
    _same_kind(out_t, inp, "reduce_scatter_tensor")
    op = _reduce_op_name(_const(a["op"], "op"), for_dist=True)
    pg = _group(tx, a["group"])
    n = pg.size()
    _concatenates(inp, out_t, n, "reduce_scatter_tensor: only an input that concatenates the outputs")
    res = _emit(tx, torch.ops._c10d_functional.reduce_scatter_tensor.default, inp, op, n, pg.group_name)
    out_t.call_method(tx, "copy_", [res], {})
    return ConstantVariable(None)


def _get_rank(tx, a):
    from .constant import ConstantVariable
    return ConstantVariable(_c10d().get_rank(_group(tx, a["group"])))


def _get_world_size(tx, a):
    from .constant import ConstantVariable
    return ConstantVariable(_c10d().get_world_size(_group(tx, a["group"])))


def _is_initialized(tx, a):
    from .constant import ConstantVariable
    from .torch import GlobalStateIs
    fn = _c10d().is_initialized
    value = fn()
    tx.output.guards.PREDICATE(None, GlobalStateIs(fn, value), f"torch.distributed.is_initialized() == {value}")
    return ConstantVariable(value)


def _funcol_group(tx, a):
    if _const(a.get("tag", ""), "tag") != "":
        raise Unsupported("functional collective with a tag")
    return _group(tx, a["group"])


def _funcol_all_reduce(tx, a):
    t = _tensor(a["self"], "self")
    op = _reduce_op_name(_const(a["reduceOp"], "reduceOp"), for_dist=False)
    pg = _funcol_group(tx, a)
    return _emit(tx, torch.ops._c10d_functional.all_reduce.default, t, op, pg.group_name)


def _funcol_all_gather(tx, a):
    t = _tensor(a["self"], "self")
    if _const(a["gather_dim"], "gather_dim") != 0 or t.example_value.dim() == 0:
        raise Unsupported("functional all_gather with gather_dim other than 0")
    pg = _funcol_group(tx, a)
    return _emit(tx, torch.ops._c10d_functional.all_gather_into_tensor.default, t, pg.size(), pg.group_name)


def _funcol_reduce_scatter(tx, a):
    t = _tensor(a["self"], "self")
    if _const(a["scatter_dim"], "scatter_dim") != 0 or t.example_value.dim() == 0:
        raise Unsupported("functional reduce_scatter with scatter_dim other than 0")
    op = _reduce_op_name(_const(a["reduceOp"], "reduceOp"), for_dist=False)
    pg = _funcol_group(tx, a)
    if t.example_value.size(0) % pg.size():
        raise Unsupported("functional reduce_scatter of a size not divisible by the group size")
    return _emit(tx, torch.ops._c10d_functional.reduce_scatter_tensor.default, t, op, pg.size(), pg.group_name)


def _funcol_broadcast(tx, a):
    t = _tensor(a["self"], "self")
    src = _const(a["src"], "src")
    if type(src) is not int:
        raise Unsupported("functional broadcast with a non-int src")
    pg = _funcol_group(tx, a)
    return _emit(tx, torch.ops._c10d_functional.broadcast.default, t, src, pg.group_name)

