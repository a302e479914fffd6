"""Python scalars known at trace time: None, bool, int, float, complex, str, bytes, dtypes,
devices, Ellipsis, torch.finfo/iinfo. Their operations are folded at trace time; the guards that made them known
were installed when they were read."""
import enum

import torch

from ..exc import Unsupported
from .base import GetAttrVariable, VariableTracker

CONSTANT_TYPES = (type(None), bool, int, float, complex, str, bytes, type(Ellipsis),
                  type(NotImplemented), torch.dtype, torch.device, torch.layout,
                  torch.memory_format, torch.finfo, torch.iinfo, enum.Enum)


def is_constant_value(value):
    if isinstance(value, CONSTANT_TYPES):
        return not isinstance(value, torch.Tensor)
    from .dtensor import is_placement  # DTensor's Shard(0), Replicate(): immutable values
    return is_placement(value)


class ConstantVariable(VariableTracker):
    def __init__(self, value, source=None):
        super().__init__(source)
        self.value = value

    def python_type(self):
        return type(self.value)

    def as_python_constant(self):
        return self.value

    def truth(self, tx):
        return bool(self.value)

    def unpack_var_sequence(self, tx):
        if not isinstance(self.value, (str, bytes, frozenset)):
            raise Unsupported(f"iterating over {type(self.value).__name__}")
        return [ConstantVariable(v) for v in self.value]


    def _as_object(self):
        """An enum member as the object it is: its class's attributes (properties, methods) can
        be patched, so they are read by the attribute protocol, guarded on the class."""
        from ..source import ConstObjectSource
        from .objects import UserDefinedObjectVariable
        return UserDefinedObjectVariable(self.value, self.source or ConstObjectSource(self.value))

    def has_attr(self, tx, name):
        if isinstance(self.value, enum.Enum):
            return self._as_object().has_attr(tx, name)
        return hasattr(self.value, name)

    def var_getattr(self, tx, name):
        if isinstance(self.value, enum.Enum):
            return self._as_object().var_getattr(tx, name)
        try:
            attr = getattr(self.value, name)
        except AttributeError:
            raise Unsupported(f"{type(self.value).__name__} has no attribute {name!r}") from None
        if callable(attr):
            return GetAttrVariable(self, name)
        from .builder import wrap_constant
        return wrap_constant(attr)

    def call_method(self, tx, name, args, kwargs):
        from .builder import wrap_constant
        if isinstance(self.value, enum.Enum) and not (name.startswith("__") and name.endswith("__")):
            return self._as_object().call_method(tx, name, args, kwargs)
        try:
            const_args = [a.as_python_constant() for a in args]
            const_kwargs = {k: v.as_python_constant() for k, v in kwargs.items()}
        except Unsupported:
            raise Unsupported(f"{type(self.value).__name__}.{name} with non-constant "
                              "arguments") from None
        method = getattr(self.value, name, None)
        if method is None:
            raise Unsupported(f"{type(self.value).__name__} has no method {name!r}")
        try:
            result = method(*const_args, **const_kwargs)
        except Exception as e:  # the method of an immutable constant: what Python raises
            from .exceptions import raise_exception
            raise_exception(e)
        return wrap_constant(result)

    def reconstruct(self, codegen):
        codegen.load_const(self.value)

    def _repr_value(self):
        return repr(self.value)
