"""Symbolic sizes: a Python int (or bool, float) computed from symbolic tensor sizes or a
dynamic int argument, known while tracing only as a ``torch.SymInt`` of the ShapeEnv.

It is a graph value (an FX node: ``x.size(0)``, ``s // 2``, a SymInt placeholder), so arithmetic
on it becomes graph nodes and it can be passed to torch calls (``x.view(n // 2, -1)``). Where the
trace needs its actual value (a branch, ``range(n)``, indexing a list) it is specialized: the
ShapeEnv records the fact it relied on (``s0 > 4``, ``s0 == 8``) and that becomes a guard.
"""
import math
import operator

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


# ---- arithmetic Python would refuse, and math kept symbolic -------------------------------------

# math functions defined (never raising) on every finite float, kept symbolic (a learning-rate
# schedule's math.cos of a step counter): a SymFloat node, so a changing counter does not recompile.
# (sqrt, acos, log2... raise outside their domain: their argument is specialized, as before.)
SYM_MATH = {math.cos: torch._sym_cos, math.sin: torch._sym_sin, math.tan: torch._sym_tan,
            math.tanh: torch._sym_tanh, math.atan: torch._sym_atan}

DIVIDING = (operator.truediv, operator.floordiv, operator.mod, operator.pow)


def _may_be_zero(value):
    """Whether the symbolic ``value`` may be 0 for the values its symbols may take."""
    from torch.utils._sympy.value_ranges import bound_sympy
    try:
        bound = bound_sympy(value.node.expr, value.node.shape_env.var_to_range)
    except Exception:
        return True
    return not (bound.lower > 0 or bound.upper < 0)


def guard_nonzero_divisor(op, a, b):
    """``a / b`` on symbolic numbers: Python raises ZeroDivisionError for a zero divisor (and for
    ``0 ** negative``), a compiled graph computes inf or garbage. A divisor that may be zero is
    guarded nonzero (a float one cannot be: its frame recompiles with static values); one that is
    zero now is specialized, so the division raises while tracing, as Python does."""
    if op not in DIVIDING:
        return
    if op is operator.pow:
        # 0 ** -1 raises: a symbolic exponent is specialized; a base that may be 0 with a negative
        # exponent is guarded nonzero
        exponent = b.as_python_constant()
        if not (isinstance(a, SymNodeVariable) and exponent < 0):
            return
        b = a
    if isinstance(b, SymNodeVariable) and _may_be_zero(b.value):
        if not _concrete(bool, b.value != 0):
            b.as_python_constant()  # zero: specialized, the operation raises while tracing


# |int symbol| bound guarded before a symbolic math call, so its argument is provably finite
_SYM_INT_BOUND = 2 ** 53


def finite_for_guarded_ints(value):
    """Whether ``value`` (a SymInt/SymFloat) is finite for every value its symbols may take once
    each integer symbol is guarded to |s| <= 2**53: Python's math.cos(inf) raises where the
    symbolic cos would give nan, so a possibly infinite argument is refused (specialized)."""
    import sympy
    from torch.utils._sympy.value_ranges import ValueRanges, bound_sympy
    expr = value.node.expr
    env = value.node.shape_env
    hints = getattr(env, "backed_var_to_val", None) or env.var_to_val
    syms = expr.free_symbols
    if not syms or not all(hints.get(s) is not None and s.is_integer for s in syms):
        return False
    ranges = {s: ValueRanges(-_SYM_INT_BOUND, _SYM_INT_BOUND) for s in syms}
    try:
        bound = bound_sympy(expr, ranges)
    except Exception:
        return False
    if not all(v.is_finite and abs(float(v)) < 1e300 for v in (sympy.sympify(bound.lower),
                                                                 sympy.sympify(bound.upper))):
        return False
    for s in syms:  # the guards the bound relied on
        n = env.create_symintnode(s, hint=int(hints[s]))
        if not (bool(n <= _SYM_INT_BOUND) and bool(n >= -_SYM_INT_BOUND)):
            return False
    return True
