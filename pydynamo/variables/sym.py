"""Symbolic sizes: a Python int (or bool, float) computed from symbolic tensor sizes or a
dynamic int argument, known while tracing only as a ``torch.SymInt`` of the ShapeEnv.

It is a graph value (an FX node: ``x.size(0)``, ``s // 2``, a SymInt placeholder), so arithmetic
on it becomes graph nodes and it can be passed to torch calls (``x.view(n // 2, -1)``). Where the
trace needs its actual value (a branch, ``range(n)``, indexing a list) it is specialized: the
ShapeEnv records the fact it relied on (``s0 > 4``, ``s0 == 8``) and that becomes a guard.
"""
import torch

from ..exc import DataDependentError
from .base import VariableTracker
from .constant import ConstantVariable


class SymNodeVariable(VariableTracker):
    def __init__(self, node, value, source=None):
        super().__init__(source)
        self.node = node
        self.value = value  # torch.SymInt / SymFloat / SymBool

    @staticmethod
    def create(node, value, source=None):
        """A tracker for a node whose value is ``value``; a constant if the ShapeEnv already
        knows it (a size specialized to 0/1, ``s0 - s0``)."""
        if not value.node.expr.free_symbols:
            return ConstantVariable(_specialize(value))
        return SymNodeVariable(node, value, source)

    def python_type(self):
        return {torch.SymInt: int, torch.SymFloat: float, torch.SymBool: bool}[type(self.value)]

    def is_python_constant(self):
        return False  # folding must not specialize behind the user's back

    def as_python_constant(self):
        """The concrete value, guarded: this trace is then valid for this value only."""
        return _specialize(self.value)

    def truth(self, tx):
        return _concrete(bool, self.value)

    def call_method(self, tx, name, args, kwargs):
        from .builtin import call_builtin
        import operator
        fn = getattr(operator, name, None) if name.startswith("__") else None
        if fn is not None and callable(fn):
            return call_builtin(tx, fn, [self, *args], kwargs)
        return ConstantVariable(self.as_python_constant()).call_method(tx, name, args, kwargs)

    def _repr_value(self):
        return f"{self.node.name}: {self.value}"


def _specialize(value):
    return _concrete({torch.SymInt: int, torch.SymFloat: float, torch.SymBool: bool}[type(value)], value)


def _concrete(convert, value):
    """``convert(value)``: a Python value the ShapeEnv guards. A data-dependent value (an
    unbacked symbol of ``.item()``, ``nonzero()``) has none to guard: a graph break, never a guess."""
    from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode
    try:
        return convert(value)
    except GuardOnDataDependentSymNode:
        raise DataDependentError(f"data-dependent control flow: the value of {value} is needed in "
                                 "Python (it depends on tensor data)") from None
