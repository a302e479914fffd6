"""Triton spellings of dtypes, constants and math functions.

Only Triton builtins and our own jitted helpers appear in kernels, not triton.language's
jitted library (tl.sum, tl.sigmoid): under the interpreter those are only usable if triton was
imported after TRITON_INTERPRET was set, which a process that imported triton earlier breaks.

Kernels compute in float32 for float16/bfloat16 data (rounding once, at the store) like eager's
own kernels do internally.  A few math functions only exist in libdevice, which the CPU
interpreter (TRITON_INTERPRET=1) does not implement; for it we emit an exact-enough formula.
"""
import math
import os

import torch

TL_DTYPE = {
    torch.float32: "tl.float32", torch.float16: "tl.float16", torch.bfloat16: "tl.bfloat16",
    torch.float64: "tl.float64", torch.int64: "tl.int64", torch.int32: "tl.int32",
    torch.int16: "tl.int16", torch.int8: "tl.int8", torch.uint8: "tl.uint8", torch.bool: "tl.int1",
}


def interpreting():
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def compute_dtype(dtype):
    """The dtype a kernel does arithmetic in for values stored as ``dtype``."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def supported_dtype(dtype):
    return dtype in TL_DTYPE


def cast(value, src, dst):
    """Text converting ``value`` (in compute dtype of ``src``) to compute dtype ``dst``."""
    src, dst = compute_dtype(src), compute_dtype(dst)
    if src == dst or isinstance(value, (int, float, bool)):
        return value
    if dst == torch.bool:
        return f"({value} != 0)"
    return f"{value}.to({TL_DTYPE[dst]})"


def literal(v, dtype=None):
    """A Python scalar as Triton source text; given ``dtype``, text of that kind, whatever
    Python type ``v`` has. Triton types a literal by its text, and a float literal beside an
    integer tensor makes the expression float32: a ``-100.0`` padding int64 labels
    (``F.pad(labels, (0, 1), value=-100)``: the schema's Scalar is a float) turned the padded
    labels into float32, which the kernel then used as an index (pointer plus float: a Triton
    type error), and would round any integer above 2**24. An integer dtype takes the value
    truncated, as torch converts a Scalar to it."""
    if isinstance(v, bool) or dtype == torch.bool:
        return "1" if v else "0"
    if dtype is not None and not dtype.is_floating_point:
        return str(int(v))
    if isinstance(v, float) or dtype is not None:
        v = float(v)
        if math.isnan(v):
            return 'float("nan")'
        if math.isinf(v):
            return 'float("inf")' if v > 0 else 'float("-inf")'
        return repr(v)
    return str(int(v))


def neutral(kind, dtype):
    """The identity of a reduction, as text."""
    if kind == "sum":
        return "0"
    if kind == "prod":
        return "1"
    if dtype.is_floating_point:
        return 'float("-inf")' if kind == "max" else 'float("inf")'
    info = torch.iinfo(dtype) if dtype != torch.bool else None
    if info is None:
        return "0" if kind == "max" else "1"
    return str(info.min if kind == "max" else info.max)


# Unary math, x is the operand's text.  (gpu form, interpreter form)
_UNARY = {
    "exp": ("tl.exp({x})", None), "exp2": ("tl.exp2({x})", None), "log": ("tl.log({x})", None),
    "log2": ("tl.log2({x})", None), "sqrt": ("tl.sqrt({x})", None),
    "rsqrt": ("rsqrt_ftz({x})", "tl.rsqrt({x})"),  # (wrapper.HEADER's helper)
    "sin": ("tl.sin({x})", None), "cos": ("tl.cos({x})", None), "abs": ("tl.abs({x})", None),
    "neg": ("-{x}", None), "reciprocal": ("1.0 / {x}", None), "sigmoid": ("(1.0 / (1.0 + tl.exp(-{x})))", None),
    "erf": ("tl.erf({x})", None), "floor": ("tl.floor({x})", None), "ceil": ("tl.ceil({x})", None),
    "tanh": ("libdevice.tanh({x})", "(2.0 / (1.0 + tl.exp(-2.0 * {x})) - 1.0)"),
    "expm1": ("libdevice.expm1({x})", "(tl.exp({x}) - 1.0)"),
    "log1p": ("libdevice.log1p({x})", "tl.log(1.0 + {x})"),
    "logical_not": ("({x} == 0)", None),
    "relu": ("tl.where({x} < 0, 0, {x})", None),  # keeps NaN, like eager
    "sign": ("(({x} > 0).to({x}.dtype) - ({x} < 0).to({x}.dtype))", None),
    "isnan": ("({x} != {x})", None),
    "trunc": ("libdevice.trunc({x})", "tl.where({x} < 0, tl.ceil({x}), tl.floor({x}))"),
    "round": ("libdevice.nearbyint({x})", None),
}
FLOAT_ONLY = {"exp", "exp2", "log", "log2", "sqrt", "rsqrt", "sin", "cos", "sigmoid", "erf", "tanh",
              "expm1", "log1p", "reciprocal", "floor", "ceil", "trunc", "round"}


def unary(name, x):
    gpu, interp = _UNARY[name]
    if interpreting():
        if interp is None and gpu.startswith("libdevice"):
            raise KeyError(name)
        return (interp or gpu).format(x=x)
    return gpu.format(x=x)


def has_unary(name):
    if name not in _UNARY:
        return False
    gpu, interp = _UNARY[name]
    return not (interpreting() and interp is None and gpu.startswith("libdevice"))


def power(x, e, dtype):
    """x ** e for a scalar exponent e; small integer exponents become multiplications."""
    if e == 0:
        return "1.0" if dtype.is_floating_point else "1"
    if e == 1:
        return x
    if e == 0.5:
        return f"tl.sqrt({x})"
    if e == -0.5:
        return unary("rsqrt", x)
    if float(e).is_integer() and 2 <= abs(e) <= 4:
        prod = " * ".join([x] * int(abs(e)))
        return f"({prod})" if e > 0 else f"(1.0 / ({prod}))"
    if float(e).is_integer() and e == -1:
        return f"(1.0 / {x})"
    if not interpreting():
        return f"libdevice.pow({x}, {literal(float(e))})"
    if float(e).is_integer():  # odd/even sign of a negative base
        mag = f"tl.exp2({literal(float(e))} * tl.log2(tl.abs({x})))"
        return mag if int(e) % 2 == 0 else f"tl.where({x} < 0, -{mag}, {mag})"
    return f"tl.exp2({literal(float(e))} * tl.log2({x}))"
