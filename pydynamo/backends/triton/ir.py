"""The loop-level IR between ATen graphs and Triton source.

A lowered tensor is a *lazy* value: something that, asked for the element at an index, emits
the code that computes it into a kernel under construction.  Three kinds exist:

* ``Buffer``: memory (a graph input, an ATen fallback's result, or a ``ComputedBuffer`` that a
  kernel writes).  Loading it is ``tl.load(ptr + offset)``.
* ``Pointwise``: an element function of other lazy values; loading it inlines that function,
  which is how chains of pointwise ops end up fused without any fusion pass.
* ``View``: an index remapping of another value, so views cost index arithmetic, never a copy.

``Reduction`` describes reducing a lazy value over some dimensions; the scheduler always
realizes it into a ``ComputedBuffer`` (one per output row), and fuses those buffers into kernels.

Indices are ``Affine`` expressions over named loop variables (x0, r1, ...).  Keeping them affine
is what lets the code generator see that ``x0 + 8*x1`` over a contiguous [.., 8] space is just
the flat index (coalesced, vectorizable loads) without a symbolic algebra package.
"""
import math

import torch


class Affine:
    """``sum(coef * term) + const`` where a term is a loop variable or an opaque ``(e // k)``
    / ``(e % k)`` sub-expression; ``bounds[term]`` is its exclusive upper bound (all terms are
    non-negative), which is enough to simplify the div/mod that reshapes introduce."""
    __slots__ = ("coefs", "const", "bounds", "deps", "ops")

    def __init__(self, coefs=None, const=0, bounds=None, deps=None, ops=None):
        self.coefs = {t: c for t, c in (coefs or {}).items() if c != 0}
        self.const = const
        self.bounds = bounds or {}
        self.deps = deps or {}  # opaque term -> the loop variables inside it
        self.ops = ops or {}    # opaque term -> ("//" or "%", base Affine, k)

    @staticmethod
    def var(name, size):
        return Affine({name: 1}, 0, {name: size}, {name: frozenset([name])})

    @staticmethod
    def indirect(text, bound, index):
        """A value loaded in the kernel (``text``) used as an index, as gather does: an opaque
        term in [0, bound) that varies with the loop variables of ``index``."""
        deps = frozenset().union(*(Affine.lift(i).loop_vars() for i in index))
        return Affine({text: 1}, 0, {text: bound}, {text: deps})

    def loop_vars(self):
        out = set()
        for t in self.coefs:
            out |= set(self.deps.get(t, ()))
        return out

    @staticmethod
    def lift(v):
        return v if isinstance(v, Affine) else Affine(const=int(v))

    def __add__(self, other):
        other = Affine.lift(other)
        coefs = dict(self.coefs)
        for t, c in other.coefs.items():
            coefs[t] = coefs.get(t, 0) + c
        out = Affine(coefs, self.const + other.const, {**self.bounds, **other.bounds},
                     {**self.deps, **other.deps}, {**self.ops, **other.ops})
        return out._fold()

    __radd__ = __add__

    def __mul__(self, k):
        return Affine({t: c * k for t, c in self.coefs.items()}, self.const * k, self.bounds, self.deps, self.ops)

    def _fold(self):
        """``c*m*(e // (a*m)) + c*((e // a) % m)`` is ``c*(e // a)`` (``a`` may be 1: ``c*e``),
        whatever form the first term took (``e // (a*m)`` may have simplified to a loop
        variable). What reshapes that split dims and loads that merge them back leave behind:
        the n, h, w of a channels-last batch norm's reduction fold back into one stride."""
        for m, cm in list(self.coefs.items()):
            op = self.ops.get(m)
            if not op or op[0] != "%":
                continue
            _, base, k = op
            e, a = _divided(base)
            if e is None:
                e, a = base, 1
            above = e.floordiv(a * k) * (cm * k)
            if not above.coefs or any(self.coefs.get(t) != c for t, c in above.coefs.items()):
                continue
            rest = Affine({t: c for t, c in self.coefs.items() if t != m and t not in above.coefs},
                          self.const - above.const, self.bounds, self.deps, self.ops)
            return (rest + base * cm)._fold()
        return self

    __rmul__ = __mul__

    def max(self):
        """Largest value the expression takes (terms range over [0, bound))."""
        return self.const + sum(c * (self.bounds[t] - 1) for t, c in self.coefs.items() if c > 0)

    def _split(self, k):
        """(part divisible by k, remainder) when the remainder provably lies in [0, k)."""
        div = Affine({t: c for t, c in self.coefs.items() if c % k == 0}, 0, self.bounds, self.deps, self.ops)
        rest = Affine({t: c for t, c in self.coefs.items() if c % k != 0}, self.const, self.bounds, self.deps,
                      self.ops)
        if all(c > 0 for c in rest.coefs.values()) and rest.const >= 0 and rest.max() < k:
            return div, rest
        return None

    def floordiv(self, k):
        if k == 1:
            return self
        if not self.coefs:
            return Affine(const=self.const // k)
        split = self._split(k)
        if split is not None:
            div, _ = split
            return Affine({t: c // k for t, c in div.coefs.items()}, 0, self.bounds, self.deps, self.ops)
        # (g*q + r) // k is q // (k / g) when g divides k and r lies in [0, g): one form for one
        # value, whichever way it was reached ((r2 + 32*x1) // 1024 and x1 // 32 alike)
        for g in sorted({math.gcd(c, k) for c in self.coefs.values()}, reverse=True):
            split = self._split(g) if 1 < g < k else None
            if split is not None:
                div, _ = split
                return Affine({t: c // g for t, c in div.coefs.items()}, 0, self.bounds, self.deps,
                              self.ops).floordiv(k // g)
        return self._opaque(f"(({self.render()}) // {k})", -(-(self.max() + 1) // k), ("//", self, k))

    def mod(self, k):
        if k == 1:
            return Affine()
        if not self.coefs:
            return Affine(const=self.const % k)
        split = self._split(k)
        if split is not None:
            return split[1]
        return self._opaque(f"(({self.render()}) % {k})", k, ("%", self, k))

    def _opaque(self, text, bound, op):
        deps = frozenset().union(*(self.deps[t] for t in self.coefs))
        return Affine({text: 1}, 0, {**self.bounds, text: bound}, {**self.deps, text: deps},
                      {**self.ops, text: op})

    def render(self, plan=None):
        """Text of the expression; ``plan`` maps merged loop variables (see kernel.py)."""
        parts = []
        for t in sorted(self.coefs, key=_term_order):
            c = self.coefs[t]
            if plan is not None and t in plan:
                name, scale = plan[t]
                if name is None:
                    continue
                t, c = name, c * scale
            parts.append(t if c == 1 else f"{c}*{t}")
        if self.const or not parts:
            parts.append(str(self.const))
        return " + ".join(parts).replace("+ -", "- ")

    def key(self):
        return self.render()

    def __repr__(self):
        return f"Affine({self.render()})"


def _divided(a):
    """(e, k) when ``a`` is exactly the opaque term ``e // k``, else (None, None)."""
    if a.const or len(a.coefs) != 1:
        return None, None
    (t, c), = a.coefs.items()
    op = a.ops.get(t)
    if c != 1 or op is None or op[0] != "//":
        return None, None
    return op[1], op[2]


def _term_order(t):
    return (len(t) > 4, t)


def contiguous_strides(shape):
    strides, acc = [], 1
    for s in reversed(shape):
        strides.append(acc)
        acc *= max(s, 1)
    return tuple(reversed(strides))


def offset_of(index, stride):
    off = Affine()
    for i, s in zip(index, stride):
        off = off + Affine.lift(i) * s
    return off


class Node:
    """A lazy tensor value: ``load(k, index)`` emits code for one element into kernel ``k``."""
    shape: tuple
    dtype: torch.dtype

    def numel(self):
        return math.prod(self.shape)


class Buffer(Node):
    """A tensor in memory; ``name`` is its variable in the generated wrapper."""

    def __init__(self, name, shape, stride, dtype, device):
        self.name, self.shape, self.stride = name, tuple(shape), tuple(stride)
        self.dtype, self.device = dtype, device

    def load(self, k, index):
        return k.load(self, offset_of(index, self.stride))

    def __repr__(self):
        return f"{type(self).__name__}({self.name}, {list(self.shape)}, {self.dtype})"


class InputBuffer(Buffer):
    pass


class FallbackBuffer(Buffer):
    """The result of an ATen call made by the wrapper."""


class ComputedBuffer(Buffer):
    """A buffer a generated kernel computes from ``body`` (a Pointwise or a Reduction)."""

    def __init__(self, name, body, stride, device):
        super().__init__(name, body.shape, stride, body.dtype, device)
        self.body = body


class Pointwise(Node):
    def __init__(self, shape, dtype, fn, cost=1):
        self.shape, self.dtype, self.fn, self.cost = tuple(shape), dtype, fn, cost

    def load(self, k, index):
        return k.memo(self, index, lambda: self.fn(k, index))


class View(Node):
    """``base`` seen through ``reindex`` (view index -> base index); ``aten`` = (op, args, kwargs)
    replays the view on a real tensor when a fallback or an output needs one, on a base laid out
    as ``base_val`` (the traced base's meta tensor) was: a ``view`` valid for those strides may not
    be for others."""

    def __init__(self, base, shape, reindex, aten, base_val=None):
        self.base, self.shape, self.reindex, self.aten = base, tuple(shape), reindex, aten
        self.dtype, self.base_val = base.dtype, base_val

    def load(self, k, index):
        return self.base.load(k, self.reindex(index))


class Reduction(Node):
    """Reduce ``inner`` (a function of an index into ``in_shape``) over ``dims`` with ``kind``:
    sum, max, min, sumexp (sum(exp(v - max(v))), softmax's denominator, in one pass) or welford
    (the sum of squared deviations from the mean, a variance's M2, in one pass).  The
    output has ``in_shape`` with ``dims`` dropped (or kept as 1s). ``in_stride``: the strides of
    what it reads, whose memory order its kernel walks (None: logical order)."""

    def __init__(self, in_shape, dims, kind, inner, dtype, keepdim, in_stride=None):
        self.in_shape, self.dims, self.kind, self.inner = tuple(in_shape), tuple(sorted(dims)), kind, inner
        self.in_stride = None if in_stride is None else tuple(in_stride)
        self.dtype, self.keepdim = dtype, keepdim
        self.shape = tuple((1 if d in self.dims else s) for d, s in enumerate(in_shape)
                           if keepdim or d not in self.dims)

    def out_index(self, full_index):
        """The output element a full input index contributes to."""
        return [(0 if d in self.dims else i) for d, i in enumerate(full_index)
                if self.keepdim or d not in self.dims]

    def rnumel(self):
        return math.prod(self.in_shape[d] for d in self.dims)


class Scan(Reduction):
    """A running ``kind`` (cumsum) along one dim: iterated like a reduction over that dim (one
    row per program), but with a value at every element."""

    def __init__(self, shape, dim, kind, inner, dtype):
        super().__init__(shape, [dim], kind, inner, dtype, True)
        self.shape = tuple(shape)

    def out_index(self, full_index):
        return list(full_index)


class Scatter(Node):
    """``init`` (a buffer that only this reads) with, for each index into ``in_shape``, the
    element ``value(k, index)`` added (``accumulate``: atomically, as duplicates may meet) or
    written at index ``target(k, index)`` of it. Its kernel iterates ``in_shape`` and writes into
    ``init``'s memory, which becomes this buffer's (wrapper.py): index_put, scatter_add."""

    def __init__(self, init, in_shape, target, value, accumulate):
        self.init, self.in_shape, self.target, self.value = init, tuple(in_shape), target, value
        self.accumulate, self.shape, self.dtype = accumulate, init.shape, init.dtype


class Unlowerable(Exception):
    """Raised by a lowering that cannot handle its arguments: the node falls back to ATen."""
