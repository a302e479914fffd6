"""DTensor in traced code (torch.distributed.tensor), on top of the wrapper-subclass inputs of
subclasses.py.

- **Placements** (``Shard(0)``, ``Replicate()``, ``Partial()``) are immutable value objects: trace
  constants (constant.is_constant_value), made by folding their constructors on constant
  arguments (``PlacementClassVariable``), compared and ``isinstance``-checked for real.
- **Device meshes** are held by identity (an input's, guarded ID_MATCH; one read from a DTensor
  graph value, its fake's mesh, pinned by a ConstObjectSource).
- **The DTensor API** that crosses between DTensor and plain tensors or changes placements
  (``DTensor.from_local``, ``x.to_local()``, ``x.redistribute(...)``, ``x.full_tensor()``,
  ``distribute_tensor``) is one graph node each, its fake result computed by running the call on
  the fakes, as torch.compile records them; AOTAutograd traces through them. Their non-tensor
  arguments are constants of the node (``_DTensorCall``). ``x.placements`` and ``x.device_mesh``
  are read from the fake (its spec follows from the guarded inputs' specs).
"""
import sys

from ..exc import Unsupported
from .base import VariableTracker
from .constant import ConstantVariable

_METHODS = ("to_local", "redistribute", "full_tensor")
_PROPERTIES = ("placements", "device_mesh")


def _module():
    return sys.modules.get("torch.distributed.tensor")


def _placement_module():
    return sys.modules.get("torch.distributed.tensor.placement_types")


def is_placement(value):
    mod = _placement_module()
    return mod is not None and isinstance(value, mod.Placement)


def is_placement_class(value):
    mod = _placement_module()
    return mod is not None and isinstance(value, type) and issubclass(value, mod.Placement)


def is_dtensor_class(cls):
    mod = _module()
    return mod is not None and isinstance(cls, type) and issubclass(cls, mod.DTensor)


def is_dtensor_api(fn):
    """``DTensor.from_local`` / ``distribute_tensor``: recorded as graph nodes."""
    mod = _module()
    return mod is not None and (fn is mod.DTensor.from_local or fn is mod.distribute_tensor)


class PlacementClassVariable(VariableTracker):
    """``Shard`` / ``Replicate`` / ``Partial``: called with constants, a constant placement."""

    def __init__(self, value, source=None):
        super().__init__(source)
        self.value = value

    def python_type(self):
        return type(self.value)

    def is_python_constant(self):
        return True

    def as_python_constant(self):
        return self.value

    def call_function(self, tx, args, kwargs):
        try:
            const_args = [a.as_python_constant() for a in args]
            const_kwargs = {k: v.as_python_constant() for k, v in kwargs.items()}
        except Unsupported:
            raise Unsupported(f"{self.value.__name__}(...) with non-constant arguments") from None
        return ConstantVariable(self.value(*const_args, **const_kwargs))

    def var_getattr(self, tx, name):
        from .builder import wrap_constant
        return wrap_constant(getattr(self.value, name))

    def _repr_value(self):
        return self.value.__name__


class _DTensorCall:
    """A graph node's target: ``fn(*tensors merged with the constants)``. Printed by FX as a
    global of the generated code."""

    def __init__(self, fn, template, kw_template, name):
        self.fn, self.template, self.kw_template = fn, template, kw_template
        self.__name__ = self.__qualname__ = name

    def __call__(self, *tensors):
        it = iter(tensors)
        args = [next(it) if a is _TENSOR else a for a in self.template]
        kwargs = {k: next(it) if v is _TENSOR else v for k, v in self.kw_template.items()}
        return self.fn(*args, **kwargs)

    def __repr__(self):
        return f"<dtensor {self.__name__}>"


_TENSOR = object()


def _constant_arg(tx, v, what):
    """The real value of a non-tensor argument: a constant, a placement list, a mesh (guarded)."""
    from .lists import ListVariable, TupleVariable
    from .objects import UserDefinedObjectVariable
    if v.is_python_constant():  # (a namedtuple of constants stays one)
        return v.as_python_constant()
    if isinstance(v, (ListVariable, TupleVariable)):
        items = [_constant_arg(tx, i, what) for i in v.items]
        return items if isinstance(v, ListVariable) else tuple(items)
    if isinstance(v, UserDefinedObjectVariable) and v.value is not None and v.source is not None:
        tx.output.guards.ID_MATCH(v.source, v.value)
        return v.value
    if v.is_python_constant():
        return v.as_python_constant()
    raise Unsupported(f"{what}: argument {v} is neither a tensor nor a constant")


def record_call(tx, fn, name, args, kwargs):
    """``fn(*args, **kwargs)`` as one graph node over its tensor arguments."""
    from .tensor import TensorVariable
    tensors, template, kw_template = [], [], {}
    for a in args:
        if isinstance(a, TensorVariable):
            tensors.append(a)
            template.append(_TENSOR)
        else:
            template.append(_constant_arg(tx, a, name))
    for k, v in kwargs.items():
        if isinstance(v, TensorVariable):
            tensors.append(v)
            kw_template[k] = _TENSOR
        else:
            kw_template[k] = _constant_arg(tx, v, name)
    if not tensors:
        raise Unsupported(f"{name} with no tensor argument")
    target = _DTensorCall(fn, template, kw_template, name.replace(".", "_"))
    return tx.output.call_graph(tx, "call_function", target, tuple(tensors), {})


class DTensorMethodVariable(VariableTracker):
    """``x.to_local`` / ``x.redistribute`` / ``x.full_tensor`` of a DTensor graph value."""

    def __init__(self, obj, name):
        super().__init__(None)
        self.obj, self.name = obj, name

    def call_function(self, tx, args, kwargs):
        fn = getattr(self.obj.python_type(), self.name)
        return record_call(tx, fn, f"DTensor.{self.name}", [self.obj, *args], kwargs)

    def _repr_value(self):
        return f"{self.obj}.{self.name}"


def dtensor_attr(tx, var, name):
    """``x.name`` of a DTensor graph value for the DTensor API's names; None for the others."""
    if name in _METHODS:
        return DTensorMethodVariable(var, name)
    if name in _PROPERTIES:
        from ..source import ConstObjectSource
        from .builder import wrap_constant, wrap_value
        value = getattr(var.example_value, name)
        if name == "device_mesh":
            return wrap_value(tx, value, ConstObjectSource(value))
        return wrap_constant(value)
    return None


class DTensorAPIVariable(VariableTracker):
    """``DTensor.from_local`` / ``distribute_tensor``: a graph node (see the module docstring)."""

    def __init__(self, value, source=None):
        super().__init__(source)
        self.value = value

    def call_function(self, tx, args, kwargs):
        return record_call(tx, self.value, self.value.__qualname__, args, kwargs)

    def _repr_value(self):
        return self.value.__qualname__
