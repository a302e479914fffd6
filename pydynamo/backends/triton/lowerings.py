"""ATen op -> lazy IR value, one small function per family of ops.

Each lowering gets the GraphLowering ``g``, the FX node (for its fake-tensor ``meta["val"]``:
output shape and dtype are taken from there, never re-derived) and the node's arguments with
tensors replaced by IR values.  Raising ``Unlowerable`` sends that one node to ATen instead.
"""
import math
import operator
import os

import torch

from . import ops
from .ir import Affine, Buffer, Node, Pointwise, Reduction, Scan, Unlowerable, View

aten = torch.ops.aten
prims = torch.ops.prims
LOWERINGS = {}


def lowering(*targets):
    def register(fn):
        for t in targets:
            LOWERINGS[t] = fn
        return fn
    return register


def meta(node):
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor):
        raise Unlowerable("no tensor meta")
    return val


def reads_of(v):
    if isinstance(v, Buffer):
        return frozenset([v.name])
    if isinstance(v, View):
        return reads_of(v.base)
    return getattr(v, "reads", frozenset())


def broadcast_index(index, out_shape, in_shape):
    """Index into an input broadcast (right-aligned) to ``out_shape``."""
    lead = len(out_shape) - len(in_shape)
    return [Affine() if s == 1 else index[lead + d] for d, s in enumerate(in_shape)]


def pointwise(node, args, fmt, operand_dtype=None, result_dtype=None):
    """A Pointwise value whose element is ``fmt(*operand texts)``; operands are cast to
    ``operand_dtype`` (default: the output's compute dtype) and the result, in
    ``result_dtype`` (default: operand_dtype), is cast to the output's dtype."""
    val = meta(node)
    shape, out = tuple(val.shape), val.dtype
    if not ops.supported_dtype(out) or any(isinstance(a, Node) and not ops.supported_dtype(a.dtype) for a in args):
        raise Unlowerable(f"dtype {out}")
    opd = operand_dtype or ops.compute_dtype(out)
    opds = opd if isinstance(opd, list) else [opd] * len(args)
    res = result_dtype or opds[-1]
    tensors = [a for a in args if isinstance(a, Node)]

    def fn(k, index):
        texts = []
        for a, dt in zip(args, opds):
            if isinstance(a, Node):
                v = a.load(k, broadcast_index(index, shape, a.shape))
                texts.append(ops.cast(v, a.dtype, dt))
            else:
                texts.append(ops.literal(a, dt))
        return k.emit(ops.cast(fmt(*texts), res, out))

    pw = Pointwise(shape, out, fn, 1 + sum(getattr(t, "cost", 0) for t in tensors))
    pw.reads = frozenset().union(*(reads_of(t) for t in tensors)) if tensors else frozenset()
    return pw


def promoted(args):
    """The dtype operands of a comparison are compared in (torch's promotion, simplified)."""
    dts = [a.dtype for a in args if isinstance(a, Node)]
    out = dts[0]
    for d in dts[1:]:
        out = torch.promote_types(out, d)
    if not out.is_floating_point and any(isinstance(a, float) for a in args):
        out = torch.float32
    return ops.compute_dtype(out)


def _binary(fmt):
    def lower(g, node, a, b, alpha=1):
        if alpha != 1:
            return pointwise(node, [a, b, alpha], lambda x, y, al: fmt(x, f"{al} * {y}"))
        return pointwise(node, [a, b], fmt)
    return lower


for _t, _f in [(("add", "Tensor"), "({} + {})"), (("add", "Scalar"), "({} + {})"),
               (("sub", "Tensor"), "({} - {})"), (("sub", "Scalar"), "({} - {})"),
               (("mul", "Tensor"), "({} * {})"), (("mul", "Scalar"), "({} * {})"),
               (("div", "Tensor"), "({} / {})"), (("div", "Scalar"), "({} / {})")]:
    LOWERINGS[getattr(getattr(aten, _t[0]), _t[1])] = _binary(_f.format)
LOWERINGS[prims.div.default] = _binary("({} / {})".format)


@lowering(aten.div.Tensor_mode, aten.div.Scalar_mode)
def div_mode(g, node, a, b, rounding_mode=None):
    """True, floor or trunc division. Triton's integer ``//`` truncates (as C does): floor
    division steps down where the signs differ and something remains."""
    if rounding_mode is None:
        return pointwise(node, [a, b], "({} / {})".format)
    floating = meta(node).dtype.is_floating_point
    if rounding_mode == "floor" and floating:
        return pointwise(node, [a, b], "tl.floor({} / {})".format)
    if rounding_mode == "trunc" and floating:
        return pointwise(node, [a, b], lambda x, y: ops.unary("trunc", f"({x} / {y})"))
    if rounding_mode == "trunc":
        return pointwise(node, [a, b], "({} // {})".format)
    if rounding_mode == "floor":
        return pointwise(node, [a, b], lambda x, y: f"(({x} // {y}) - ((({x} % {y}) != 0) & (({x} < 0) != ({y} < 0))))")
    raise Unlowerable(f"div rounding {rounding_mode}")


@lowering(aten.fmod.Tensor, aten.fmod.Scalar)
def fmod(g, node, a, b):
    """C's remainder, the sign of the dividend: Triton's ``%`` on floats and integers."""
    return pointwise(node, [a, b], "({} % {})".format)


@lowering(aten.remainder.Tensor, aten.remainder.Scalar, aten.remainder.Scalar_Tensor)
def remainder(g, node, a, b):
    """Python's remainder, the sign of the divisor: fmod, plus the divisor where the signs differ."""
    def fmt(x, y):
        return f"tl.where((({x} % {y}) != 0) & ((({x} % {y}) < 0) != ({y} < 0)), ({x} % {y}) + {y}, {x} % {y})"
    return pointwise(node, [a, b], fmt)


@lowering(aten.rsub.Scalar, aten.rsub.Tensor)
def rsub(g, node, a, b, alpha=1):
    return pointwise(node, [b, a, alpha], lambda y, x, al: f"({y} - {al} * {x})")


def _unary(name):
    def lower(g, node, a):
        if not ops.has_unary(name):
            raise Unlowerable(name)
        opd = None if name in ops.FLOAT_ONLY else ops.compute_dtype(a.dtype)
        return pointwise(node, [a], lambda x: ops.unary(name, x), operand_dtype=opd)
    return lower


for _name in ["exp", "exp2", "log", "log2", "sqrt", "rsqrt", "sin", "cos", "abs", "neg",
              "reciprocal", "sigmoid", "erf", "floor", "ceil", "tanh", "expm1", "log1p",
              "relu", "sign", "trunc", "round"]:
    LOWERINGS[getattr(aten, _name).default] = _unary(_name)
LOWERINGS[aten.isnan.default] = lambda g, node, a: pointwise(
    node, [a], lambda x: ops.unary("isnan", x), operand_dtype=ops.compute_dtype(a.dtype), result_dtype=torch.bool)
LOWERINGS[aten.logical_not.default] = lambda g, node, a: pointwise(
    node, [a], lambda x: ops.unary("logical_not", x), operand_dtype=ops.compute_dtype(a.dtype), result_dtype=torch.bool)


@lowering(aten.pow.Tensor_Scalar)
def pow_tensor_scalar(g, node, a, e):
    if not isinstance(e, (int, float)):
        raise Unlowerable("pow exponent")
    out = meta(node).dtype
    if not out.is_floating_point and (e < 0 or not float(e).is_integer() or e > 4):
        raise Unlowerable("integer pow")
    return pointwise(node, [a], lambda x: ops.power(x, e, out))


@lowering(aten.pow.Scalar)
def pow_scalar(g, node, base, a):
    if not isinstance(base, (int, float)) or base <= 0:
        raise Unlowerable("pow base")
    return pointwise(node, [a], lambda x: f"tl.exp2({ops.literal(math.log2(base))} * {x})")


def _minmax(fn):
    def lower(g, node, a, b):
        float_ = meta(node).dtype.is_floating_point
        nan = ", propagate_nan=tl.PropagateNan.ALL" if float_ else ""
        return pointwise(node, [a, b], lambda x, y: f"tl.{fn}({x}, {y}{nan})")
    return lower


LOWERINGS[aten.maximum.default] = _minmax("maximum")
LOWERINGS[aten.minimum.default] = _minmax("minimum")


@lowering(aten.clamp.default)
def clamp(g, node, a, lo=None, hi=None):
    cdt = ops.compute_dtype(meta(node).dtype)

    def fmt(x):  # where, not maximum: clamp keeps NaN
        if lo is not None:
            x = f"tl.where({x} < {ops.literal(lo, cdt)}, {ops.literal(lo, cdt)}, {x})"
        if hi is not None:
            x = f"tl.where({x} > {ops.literal(hi, cdt)}, {ops.literal(hi, cdt)}, {x})"
        return x
    return pointwise(node, [a], fmt)


def _compare(sym):
    def lower(g, node, a, b):
        return pointwise(node, [a, b], lambda x, y: f"({x} {sym} {y})", operand_dtype=promoted([a, b]),
                         result_dtype=torch.bool)
    return lower


for _op, _sym in [("eq", "=="), ("ne", "!="), ("lt", "<"), ("le", "<="), ("gt", ">"), ("ge", ">=")]:
    LOWERINGS[getattr(aten, _op).Tensor] = LOWERINGS[getattr(aten, _op).Scalar] = _compare(_sym)


def _logical(sym):
    def lower(g, node, a, b):
        return pointwise(node, [a, b], lambda x, y: f"(({x} != 0) {sym} ({y} != 0))",
                         operand_dtype=promoted([a, b]), result_dtype=torch.bool)
    return lower


LOWERINGS[aten.logical_and.default] = _logical("&")
LOWERINGS[aten.logical_or.default] = _logical("|")


@lowering(aten.bitwise_not.default)
def bitwise_not(g, node, a):
    if a.dtype == torch.bool:
        return pointwise(node, [a], lambda x: f"({x} == 0)", operand_dtype=torch.bool)
    if a.dtype.is_floating_point:
        raise Unlowerable("float bitwise_not")
    return pointwise(node, [a], lambda x: f"(~{x})")


@lowering(aten.bitwise_and.Tensor, aten.bitwise_or.Tensor)
def bitwise_bool(g, node, a, b):
    if meta(node).dtype != torch.bool:
        raise Unlowerable("integer bitwise")
    sym = "&" if node.target is aten.bitwise_and.Tensor else "|"
    return pointwise(node, [a, b], lambda x, y: f"({x} {sym} {y})")


@lowering(aten.where.self, aten.where.ScalarSelf, aten.where.ScalarOther, aten.where.Scalar)
def where(g, node, c, a, b):
    out = ops.compute_dtype(meta(node).dtype)
    return pointwise(node, [c, a, b], lambda cc, x, y: f"tl.where({cc}, {x}, {y})",
                     operand_dtype=[torch.bool, out, out])


def _identity(g, node, a, *args, **kwargs):
    val = meta(node)
    if isinstance(a, Node) and tuple(val.shape) != a.shape:
        raise Unlowerable("shape change")
    if kwargs.get("device") is not None and torch.device(kwargs["device"]) != val.device:
        raise Unlowerable("device change")
    src = a.dtype if isinstance(a, Node) else val.dtype
    if val.dtype != src and ops.compute_dtype(val.dtype) != val.dtype:
        # a conversion to half precision rounds there, as in eager, even when a fused consumer
        # goes on in float32 (x.half().float() is not x)
        low = ops.TL_DTYPE[val.dtype]
        return pointwise(node, [a], lambda x: f"{x}.to({low}).to(tl.float32)", operand_dtype=torch.float32)
    return pointwise(node, [a], lambda x: x, operand_dtype=ops.compute_dtype(src))


for _t in [aten._to_copy.default, prims.convert_element_type.default, aten.clone.default,
           aten.lift_fresh_copy.default]:
    LOWERINGS[_t] = _identity


@lowering(aten.copy.default)
def copy(g, node, dst, src, non_blocking=False):
    return pointwise(node, [src], lambda x: x, operand_dtype=ops.compute_dtype(src.dtype))


@lowering(aten.scalar_tensor.default, aten.full.default, aten.full_like.default, aten.fill.Scalar,
          aten.zeros_like.default, aten.ones_like.default, aten.zeros.default, aten.ones.default)
def constant(g, node, *args, **kwargs):
    t = node.target
    value = {aten.scalar_tensor.default: lambda: args[0], aten.full.default: lambda: args[1],
             aten.full_like.default: lambda: args[1], aten.fill.Scalar: lambda: args[1],
             aten.zeros_like.default: lambda: 0, aten.ones_like.default: lambda: 1,
             aten.zeros.default: lambda: 0, aten.ones.default: lambda: 1}[t]()
    if not isinstance(value, (int, float, bool)):
        raise Unlowerable("fill value")
    val = meta(node)
    text = ops.literal(value, val.dtype)

    def fn(k, index):
        return k.emit(f"tl.full([1], {text}, {ops.TL_DTYPE[ops.compute_dtype(val.dtype)]})")
    pw = Pointwise(val.shape, val.dtype, fn)
    pw.reads = frozenset()
    return pw


@lowering(prims.iota.default, aten.arange.start_step, aten.arange.default, aten.arange.start)
def arange(g, node, *args, **kwargs):
    val = meta(node)
    if node.target is prims.iota.default:      # iota(length, *, start, step, ...)
        start, step = kwargs.get("start", 0), kwargs.get("step", 1)
    elif node.target is aten.arange.default:  # arange(end)
        start, step = 0, 1
    else:                                     # arange(start, end[, step])
        start, step = args[0], (args[2] if len(args) > 2 else kwargs.get("step", 1))
    if not all(isinstance(v, int) for v in (start, step)):
        raise Unlowerable("float arange")

    def fn(k, index):
        i = k.index_value(index[0])
        return k.emit(ops.cast(f"({start} + {step} * {i})", torch.int64, val.dtype))
    pw = Pointwise(val.shape, val.dtype, fn)
    pw.reads = frozenset()
    return pw


# ---- indexing with one index per position along a dim: gather, scatter onto a tensor ----

def _index_tensor(index):
    if not isinstance(index, Node) or index.dtype not in (torch.int64, torch.int32):
        raise Unlowerable("index tensor")


@lowering(aten.gather.default)
def gather(g, node, x, dim, index, sparse_grad=False):
    """``out[i] = x[i with dim -> index[i]]``: an indirect load (the nll_loss pick of each
    row's target, which then needs no log-probabilities in memory)."""
    _index_tensor(index)
    val = meta(node)
    if not x.shape or not ops.supported_dtype(x.dtype):
        raise Unlowerable("gather")
    dim %= len(x.shape)

    def fn(k, idx):
        at = list(idx)
        at[dim] = Affine.indirect(index.load(k, idx), x.shape[dim], idx)
        return x.load(k, at)
    pw = Pointwise(val.shape, val.dtype, fn, 2 + getattr(x, "cost", 0))
    pw.reads = reads_of(x) | reads_of(index)
    return pw


@lowering(aten.cat.default)
def cat(g, node, tensors, dim=0):
    """Each element from the input whose slice of ``dim`` holds it: loads masked to that slice,
    so a concatenation fuses with what it reads and what reads it (rotate_half in RoPE)."""
    val = meta(node)
    if not all(isinstance(t, Node) for t in tensors) or not ops.supported_dtype(val.dtype) \
            or any(not ops.supported_dtype(t.dtype) for t in tensors):
        raise Unlowerable("cat inputs")
    dim %= len(val.shape)
    parts = [t for t in tensors if t.numel() > 0]  # a legacy empty 1-D tensor adds nothing
    if not parts or len(parts) > 8:
        raise Unlowerable("cat of many")
    out = ops.compute_dtype(val.dtype)

    def fn(k, idx):
        pos = k.index_value(idx[dim])
        result, start = None, 0
        for t in parts:
            end = start + t.shape[dim]
            at = list(idx)
            at[dim] = Affine.lift(idx[dim]) + (-start)
            with k.masked(k.emit(f"({pos} >= {start}) & ({pos} < {end})")):
                v = ops.cast(t.load(k, at), t.dtype, out)
            result = v if result is None else k.emit(f"tl.where({pos} < {start}, {result}, {v})")
            start = end
        return k.emit(ops.cast(result, out, val.dtype))
    pw = Pointwise(val.shape, val.dtype, fn, 1 + sum(getattr(t, "cost", 0) for t in parts))
    pw.reads = frozenset().union(*(reads_of(t) for t in parts))
    return pw


@lowering(aten.max_pool2d_with_indices.default)
def max_pool2d(g, node, x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    """(values, indices) of the largest element in each window: kernel_size masked loads per
    output, out-of-bounds positions -inf, the first maximum winning, NaN winning over numbers
    (as ATen); indices are flat positions in the input plane (h * W + w), what the ATen
    backward expects."""
    def pair(v, default=None):
        v = list(v) if isinstance(v, (list, tuple)) else [v]
        v = v or default
        return v * 2 if len(v) == 1 else v
    kh, kw = pair(kernel_size)
    sh, sw = pair(stride, [kh, kw])
    ph, pw = pair(padding)
    dh, dw = pair(dilation)
    vals, inds = node.meta.get("val")
    if len(x.shape) not in (3, 4) or not x.dtype.is_floating_point or not ops.supported_dtype(x.dtype) \
            or kh * kw > 64:
        raise Unlowerable("max_pool2d")
    H, W = x.shape[-2:]
    acc = ops.compute_dtype(x.dtype)

    def window(k, idx):
        best = where = None
        for i in range(kh):
            for j in range(kw):
                h = Affine.lift(idx[-2]) * sh + (i * dh - ph)
                w = Affine.lift(idx[-1]) * sw + (j * dw - pw)
                hv, wv = k.index_value(h), k.index_value(w)
                inside = k.emit(f"({hv} >= 0) & ({hv} < {H}) & ({wv} >= 0) & ({wv} < {W})")
                with k.masked(inside):
                    v = ops.cast(x.load(k, list(idx[:-2]) + [h, w]), x.dtype, acc)
                v = k.emit(f"tl.where({inside}, {v}, float(\"-inf\"))")
                pos = k.emit(f"({hv} * {W} + {wv}).to(tl.int64)")
                if best is None:
                    best, where = v, pos
                    continue
                take = k.emit(f"({v} > {best}) | (({v} != {v}) & ({best} == {best}))")
                best = k.emit(f"tl.where({take}, {v}, {best})")
                where = k.emit(f"tl.where({take}, {pos}, {where})")
        return best, where

    value = Pointwise(vals.shape, vals.dtype,
                      lambda k, idx: k.emit(ops.cast(window(k, idx)[0], acc, vals.dtype)), 2 * kh * kw)
    index = Pointwise(inds.shape, inds.dtype, lambda k, idx: window(k, idx)[1], 2 * kh * kw)
    value.reads = index.reads = reads_of(x)
    # both stored now, by one kernel: the indices are mostly kept for the backward, and stored
    # later they would read every window again
    return g.realize(value), g.realize(index)


@lowering(aten.embedding.default)
def embedding(g, node, weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    """``out[..., j] = weight[indices[...], j]``: rows picked by an indirect load, so the
    embedding sum (tokens + positions) and the LayerNorm after it are one kernel."""
    _index_tensor(indices)
    if len(weight.shape) != 2:
        raise Unlowerable("embedding weight")
    return _take(node, weight, 0, indices)


@lowering(aten.index.Tensor)
def index(g, node, x, indices):
    """``x[idx]`` with one integer index tensor (after any number of full slices): an indirect
    load, negative indices counted from the end as in eager."""
    tensors = [(d, i) for d, i in enumerate(indices) if i is not None]
    if len(tensors) != 1 or any(i is not None for i in indices[:tensors[0][0]]):
        raise Unlowerable("index pattern")
    dim, idx = tensors[0]
    _index_tensor(idx)
    return _take(node, x, dim, idx, wrap=True)


def _take(node, x, dim, idx, wrap=False):
    """``x`` with dim ``dim`` replaced by the dims of ``idx``, read at ``idx``'s values."""
    val = meta(node)
    if not ops.supported_dtype(x.dtype) or not x.shape:
        raise Unlowerable("take")
    n, k_dims = x.shape[dim], len(idx.shape)

    def fn(k, out):
        i = idx.load(k, out[dim:dim + k_dims])
        if wrap:
            i = k.emit(f"tl.where({i} < 0, {i} + {n}, {i})")
        at = list(out[:dim]) + [Affine.indirect(i, n, out[dim:dim + k_dims])] + list(out[dim + k_dims:])
        return x.load(k, at)
    pw = Pointwise(val.shape, val.dtype, fn, 2 + getattr(x, "cost", 0))
    pw.reads = reads_of(x) | reads_of(idx)
    return pw


@lowering(aten.scatter.value, aten.scatter.src)
def scatter(g, node, x, dim, index, src):
    """One index per position along ``dim`` (index of size 1 there, the input's size elsewhere):
    each element is ``src`` where its position equals the index, else the input's. The
    nll_loss backward scatters onto zeros: this is a one-hot computed in the kernel."""
    _index_tensor(index)
    val = meta(node)
    dim %= len(x.shape)
    if index.shape[dim] != 1 or any(index.shape[d] != s for d, s in enumerate(x.shape) if d != dim):
        raise Unlowerable("scatter index shape")
    out = ops.compute_dtype(val.dtype)
    if not ops.supported_dtype(val.dtype) or (isinstance(src, Node) and not ops.supported_dtype(src.dtype)):
        raise Unlowerable("dtype")

    def fn(k, idx):
        at = list(idx)
        at[dim] = Affine()
        hit = k.emit(f"({k.index_value(idx[dim])} == {index.load(k, at)})")
        new = ops.cast(src.load(k, at), src.dtype, out) if isinstance(src, Node) else ops.literal(src, out)
        old = ops.cast(x.load(k, idx), x.dtype, out)
        return k.emit(ops.cast(f"tl.where({hit}, {new}, {old})", out, val.dtype))
    pw = Pointwise(val.shape, val.dtype, fn, 2 + getattr(x, "cost", 0))
    pw.reads = reads_of(x) | reads_of(index) | (reads_of(src) if isinstance(src, Node) else frozenset())
    return pw


# ---- views: index arithmetic, and the ATen call replaying them on real tensors ----

def view_node(node, base, reindex, args):
    return View(base, meta(node).shape, reindex, (node.target, args, dict(node.kwargs)))


def reshape_reindex(old, new):
    """new index -> old index for a row-major reshape, group by group so that merging or
    splitting dims costs one multiply-add or one div/mod, not a full flatten."""
    groups, i, j = [], 0, 0
    while i < len(old) or j < len(new):
        oi, nj, po, pn = i, j, 1, 1
        if i < len(old):
            po, i = old[i], i + 1
        if j < len(new):
            pn, j = new[j], j + 1
        while po != pn:
            if po < pn:
                po, i = po * old[i], i + 1
            else:
                pn, j = pn * new[j], j + 1
        while i < len(old) and old[i] == 1 and (j >= len(new) or new[j] != 1):
            i += 1
        while j < len(new) and new[j] == 1 and (i >= len(old) or old[i] != 1):
            j += 1
        groups.append((oi, i, nj, j))

    def reindex(index):
        out = []
        for oi, oe, ni, ne in groups:
            flat = Affine()
            for d in range(ni, ne):
                flat = flat * new[d] + index[d]
            for d in range(oi, oe):
                inner = math.prod(old[d + 1:oe])
                out.append(flat.floordiv(inner).mod(old[d]) if d > oi else flat.floordiv(inner))
        return out
    return reindex


@lowering(aten.view.default, aten._unsafe_view.default, aten.reshape.default)
def view(g, node, a, size):
    new = tuple(meta(node).shape)
    return view_node(node, a, reshape_reindex(a.shape, new), [size])


@lowering(aten.permute.default)
def permute(g, node, a, dims):
    dims = [d % len(a.shape) for d in dims]

    def reindex(index):
        out = [None] * len(dims)
        for i, d in enumerate(dims):
            out[d] = index[i]
        return out
    return view_node(node, a, reindex, [dims])


@lowering(aten.transpose.int)
def transpose(g, node, a, d0, d1):
    n = len(a.shape)
    d0, d1 = d0 % n, d1 % n

    def reindex(index):
        out = list(index)
        out[d0], out[d1] = index[d1], index[d0]
        return out
    return view_node(node, a, reindex, [d0, d1])


@lowering(aten.t.default)
def t(g, node, a):
    return view_node(node, a, lambda index: list(reversed(index)), [])


@lowering(aten.expand.default)
def expand(g, node, a, size, implicit=False):
    new = tuple(meta(node).shape)
    return view_node(node, a, lambda index: broadcast_index(index, new, a.shape), [size])


@lowering(aten.unsqueeze.default)
def unsqueeze(g, node, a, dim):
    dim = dim % (len(a.shape) + 1)
    return view_node(node, a, lambda index: index[:dim] + index[dim + 1:], [dim])


@lowering(aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default)
def squeeze(g, node, a, dims=None):
    n = len(a.shape)
    dims = range(n) if dims is None else ([dims] if isinstance(dims, int) else dims)
    gone = {d % n for d in dims if a.shape[d % n] == 1} if n else set()

    def reindex(index):
        it = iter(index)
        return [Affine() if d in gone else next(it) for d in range(n)]
    return view_node(node, a, reindex, [] if dims is None or node.target is aten.squeeze.default
                     else [node.args[1]])


@lowering(aten.slice.Tensor)
def slice_(g, node, a, dim=0, start=None, end=None, step=1):
    dim = dim % len(a.shape)
    size = a.shape[dim]
    start = 0 if start is None else (start + size if start < 0 else start)
    start = min(max(start, 0), size)

    def reindex(index):
        out = list(index)
        out[dim] = Affine.lift(index[dim]) * step + start
        return out
    return view_node(node, a, reindex, [dim, node.args[2] if len(node.args) > 2 else None,
                                        node.args[3] if len(node.args) > 3 else None, step])


@lowering(aten.select.int)
def select(g, node, a, dim, i):
    dim = dim % len(a.shape)
    i = i + a.shape[dim] if i < 0 else i
    return view_node(node, a, lambda index: list(index[:dim]) + [Affine(const=i)] + list(index[dim:]), [dim, i])


@lowering(aten.flip.default)
def flip(g, node, a, dims):
    """Index arithmetic like a view (i -> n - 1 - i); replayed with aten.flip (a copy) where a
    real tensor is needed."""
    n = len(a.shape)
    dims = {d % n for d in dims}

    def reindex(index):
        return [Affine.lift(i) * -1 + (a.shape[d] - 1) if d in dims else i for d, i in enumerate(index)]
    return view_node(node, a, reindex, [node.args[1]])


@lowering(aten.constant_pad_nd.default)
def constant_pad_nd(g, node, a, pad, value=0):
    """F.pad with a constant: the input where the index falls inside it (a masked load), else
    ``value``. Negative pads crop."""
    val = meta(node)
    if not ops.supported_dtype(val.dtype):
        raise Unlowerable("dtype")
    n = len(a.shape)
    lows = {n - 1 - i // 2: pad[i] for i in range(0, len(pad), 2)}
    out = ops.compute_dtype(val.dtype)

    def fn(k, index):
        at, conds = list(index), []
        for d, lo in lows.items():
            at[d] = Affine.lift(index[d]) + (-lo)
            pos = k.index_value(index[d])
            conds.append(f"({pos} >= {lo}) & ({pos} < {lo + a.shape[d]})")
        inside = k.emit(" & ".join(conds)) if conds else None
        if inside is None:
            return k.emit(ops.cast(a.load(k, at), a.dtype, val.dtype))
        with k.masked(inside):
            v = ops.cast(a.load(k, at), a.dtype, out)
        return k.emit(ops.cast(f"tl.where({inside}, {v}, {ops.literal(value, out)})", out, val.dtype))
    pw = Pointwise(val.shape, val.dtype, fn, 2 + getattr(a, "cost", 0))
    pw.reads = reads_of(a)
    return pw


@lowering(aten.alias.default, aten.detach.default)
def alias(g, node, a):
    return view_node(node, a, lambda index: index, [])


@lowering(aten.split_with_sizes.default, aten.split.Tensor)
def split(g, node, a, sizes, dim=0):
    dim = dim % len(a.shape)
    if isinstance(sizes, int):
        n = a.shape[dim]
        sizes = [min(sizes, n - s) for s in range(0, n, sizes)] or [0]
    outs, start = [], 0
    for s in sizes:
        def reindex(index, start=start):
            out = list(index)
            out[dim] = Affine.lift(index[dim]) + start
            return out
        shape = list(a.shape)
        shape[dim] = s
        outs.append(View(a, shape, reindex, (aten.slice.Tensor, [dim, start, start + s], {})))
        start += s
    return outs


# ---- reductions ----

def _dims(x, dims):
    n = len(x.shape)
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        return list(range(n))
    dims = [dims] if isinstance(dims, int) else dims
    return sorted({d % n for d in dims}) if n else []


def reduction(g, node, x, dims, keepdim, kind, out_dtype, post=None, pre=None):
    """Realized buffer of reducing ``pre(x)`` over ``dims``; ``post(text, n)`` finishes each
    result before its store (mean's division) so half-precision outputs round only once."""
    if not ops.supported_dtype(x.dtype) or not ops.supported_dtype(out_dtype):
        raise Unlowerable("dtype")
    if math.prod(x.shape) == 0:  # reducing nothing (ATen gives the identity, or NaN for a mean)
        raise Unlowerable("empty reduction")
    acc = torch.int64 if kind == "sum" and not out_dtype.is_floating_point else ops.compute_dtype(
        out_dtype if kind == "sum" else x.dtype)

    def inner(k, index):
        v = ops.cast(x.load(k, index), x.dtype, acc)
        return k.emit(pre(v) if pre else v)
    dims = _dims(x, dims)
    parts = split_factor(x.shape, dims)
    if parts > 1:
        return _split_reduction(g, tuple(x.shape), dims, keepdim, kind, out_dtype, acc, inner, post, parts)
    red = Reduction(x.shape, dims, kind, inner, out_dtype, keepdim)
    red.acc_dtype, red.post = acc, post
    return g.realize(red)


# Split reductions: a reduction with few outputs over many rows - a bias gradient, [2048, 512]
# summed over dim 0 - would run as a handful of programs, each walking every row. Split, the
# first kernel reduces `parts` slices of the rows in parallel into partials, the second reduces
# the partials. PYDYNAMO_TRITON_SPLIT_REDUCTIONS=0 turns it off.
SPLIT_MIN_PROGRAMS = 128     # a reduction with this many programs already is not split
SPLIT_TARGET_PROGRAMS = 256  # split until about this many (two per SM on an H100)
SPLIT_MAX_PARTS = 128


def _split_block(dims):
    """The reduced dims a split cuts: all of them when adjacent (taken as one), else the
    outermost (the batch of a batch norm over N, H, W)."""
    dims = list(dims)
    return dims if dims == list(range(dims[0], dims[-1] + 1)) else dims[:1]


def split_factor(shape, dims):
    """How many slices to cut the reduced dims (see _split_block) into; 1: no split."""
    if os.environ.get("PYDYNAMO_TRITON_SPLIT_REDUCTIONS", "1") == "0" or not dims:
        return 1
    rnumel = math.prod(shape[d] for d in dims)
    block = math.prod(shape[d] for d in _split_block(dims))
    xnumel = math.prod(shape) // max(1, rnumel)
    big = [d for d, s in enumerate(shape) if s > 1]
    if big and big[-1] in dims:   # rows along memory: a program per row, looping over it
        programs, min_rows, min_rnumel = xnumel, 2048, 16384
    else:                         # columns: 64 of them per program (kernel.COLUMN_XBLOCK)
        programs, min_rows, min_rnumel = -(-xnumel // 64), 32, 256
    if programs >= SPLIT_MIN_PROGRAMS or rnumel < min_rnumel:
        return 1
    parts = 1
    while parts * 2 <= SPLIT_MAX_PARTS and programs * parts < SPLIT_TARGET_PROGRAMS \
            and block % (parts * 2) == 0 and rnumel // (parts * 2) >= min_rows:
        parts *= 2
    return parts


def _unflatten(flat, sizes):
    """Indices into dims of ``sizes`` from a row-major flat index over them."""
    out, inner = [], math.prod(sizes)
    for i, s in enumerate(sizes):
        inner //= s
        q = flat.floordiv(inner)
        out.append(q if i == 0 else q.mod(s))
    return out


def _split_reduction(g, shape, dims, keepdim, kind, out_dtype, acc, inner, post, parts):
    """Reduce ``dims`` of ``shape`` in two stages (see split_factor): the block of dims that is
    cut becomes (parts, rows); stage 1 reduces the rows and any other reduced dims into
    partials, stage 2 reduces the parts."""
    block = _split_block(dims)
    b0, bk = block[0], block[-1]
    rest = [d for d in dims if d not in block]   # all after the block
    total = math.prod(shape[d] for d in dims)
    rows = math.prod(shape[d] for d in block) // parts
    shape1 = shape[:b0] + (parts, rows) + shape[bk + 1:]
    shift = 1 - (len(block) - 1)                 # where a dim after the block lands in shape1

    def inner1(k, index):
        flat = Affine.lift(index[b0]) * rows + index[b0 + 1]
        return inner(k, list(index[:b0]) + _unflatten(flat, shape[b0:bk + 1]) + list(index[b0 + 2:]))
    red1 = Reduction(shape1, [b0 + 1] + [d + shift for d in rest], kind, inner1, acc, True)
    red1.acc_dtype, red1.post = acc, None
    partial = g.realize(red1)  # shape1 with the rows and the rest reduced to 1s
    # stage 2: reduce the parts, laid out as the output (keepdim's 1s where dims were reduced)
    tail = [d for d in range(bk + 1, len(shape)) if keepdim or d not in rest]
    ones = (1,) * (len(block) - 1) if keepdim else ()
    shape2 = shape[:b0] + (parts,) + ones + tuple(1 if d in rest else shape[d] for d in tail)

    def inner2(k, index):
        after = iter(index[b0 + 1 + len(ones):])  # shape2's entries after the parts
        at = list(index[:b0 + 1]) + [Affine()]     # the partial: ..., parts, 1 (the rows)
        for d in range(bk + 1, len(shape)):
            if d in rest:                          # reduced in stage 1: a 1 in the partial
                if keepdim:
                    next(after)                    # and a 1 in shape2
                at.append(Affine())
            else:
                at.append(next(after))
        return partial.load(k, at)
    red2 = Reduction(shape2, [b0], kind, inner2, out_dtype, keepdim)
    red2.acc_dtype = acc
    red2.post = None if post is None else (lambda v, _n: post(v, total))
    return g.realize(red2)


@lowering(aten.cumsum.default)
def cumsum(g, node, x, dim, dtype=None):
    """A scan along ``dim`` (kernel.py), accumulated in float32 or int64 like eager."""
    val = meta(node)
    if not x.shape or math.prod(x.shape) == 0 or not ops.supported_dtype(x.dtype) \
            or not ops.supported_dtype(val.dtype):
        raise Unlowerable("cumsum")
    acc = ops.compute_dtype(val.dtype) if val.dtype.is_floating_point else torch.int64

    def inner(k, index):
        return k.emit(ops.cast(x.load(k, index), x.dtype, acc))
    scan = Scan(x.shape, dim % len(x.shape), "sum", inner, val.dtype)
    scan.acc_dtype, scan.post = acc, None
    return g.realize(scan)


@lowering(aten.sum.dim_IntList, aten.sum.default)
def sum_(g, node, x, dims=None, keepdim=False, dtype=None):
    v = _softmax_input(g, node, x, dims)
    if v is not None:
        return _sumexp(g, node, v, dims, keepdim)
    return reduction(g, node, x, dims, keepdim, "sum", meta(node).dtype)


def _softmax_input(g, node, x, dims):
    """``v`` when this sum is softmax's denominator ``sum(exp(v - amax(v, dims, keepdim)), dims)``
    over rows too long for registers (a vocabulary's logits), else None."""
    ex = node.args[0]
    sub = ex.args[0] if getattr(ex, "target", None) is aten.exp.default else None
    if getattr(sub, "target", None) is not aten.sub.Tensor or len(sub.args) != 2 or sub.kwargs:
        return None
    vn, mx = sub.args
    if getattr(mx, "target", None) is not aten.amax.default or mx.args[0] is not vn \
            or len(mx.args) < 3 or not mx.args[2] or not isinstance(vn, torch.fx.Node):
        return None
    v = g.lookup(vn)
    dims = _dims(v, dims)
    if not isinstance(v, Node) or _dims(v, mx.args[1]) != dims or not v.dtype.is_floating_point \
            or meta(node).dtype != v.dtype or split_factor(v.shape, dims) != 1:
        return None
    rnumel = math.prod(v.shape[d] for d in dims)
    from .scheduler import PERSISTENT_MAX, triton_next_pow2
    return v if triton_next_pow2(rnumel) > PERSISTENT_MAX else None


def _sumexp(g, node, v, dims, keepdim):
    """sum(exp(v - max(v))) in one pass over each row: a running max and a sum rescaled whenever
    the max grows (kernel.py, kind "sumexp"), instead of one pass for the max and one for the sum."""
    acc = ops.compute_dtype(v.dtype)

    def inner(k, index):
        return ops.cast(v.load(k, index), v.dtype, acc)
    red = Reduction(v.shape, _dims(v, dims), "sumexp", inner, meta(node).dtype, keepdim)
    red.acc_dtype, red.post = acc, None
    return g.realize(red)


@lowering(aten.mean.dim, aten.mean.default)
def mean(g, node, x, dims=None, keepdim=False, dtype=None):
    return reduction(g, node, x, dims, keepdim, "sum", meta(node).dtype, post=lambda v, n: f"{v} / {float(n)}")


@lowering(aten.amax.default, aten.amin.default)
def amax(g, node, x, dims=(), keepdim=False):
    kind = "max" if node.target is aten.amax.default else "min"
    return reduction(g, node, x, dims, keepdim, kind, meta(node).dtype)


def _arg_reduction(g, x, dims, keepdim, kind):
    if not x.shape or math.prod(x.shape) == 0 or not ops.supported_dtype(x.dtype) or x.dtype == torch.bool:
        raise Unlowerable("arg reduction")
    acc = ops.compute_dtype(x.dtype)

    def inner(k, index):
        return k.emit(ops.cast(x.load(k, index), x.dtype, acc))
    red = Reduction(x.shape, _dims(x, dims), kind, inner, torch.int64, keepdim)
    red.acc_dtype, red.post = acc, None
    return g.realize(red)


@lowering(aten.argmax.default, aten.argmin.default)
def argmax(g, node, x, dim=None, keepdim=False):
    """The first index of the largest (smallest) element, over one dim or all of them."""
    kind = "argmax" if node.target is aten.argmax.default else "argmin"
    return _arg_reduction(g, x, dim, keepdim and dim is not None, kind)


@lowering(aten.max.dim, aten.min.dim)
def max_dim(g, node, x, dim, keepdim=False):
    """(values, indices): the two reductions share a kernel."""
    big = node.target is aten.max.dim
    values = reduction(g, node, x, [dim], keepdim, "max" if big else "min", x.dtype)
    return values, _arg_reduction(g, x, [dim], keepdim, "argmax" if big else "argmin")


def _var(g, node, x, dims, correction, keepdim, out_dtype):
    """Two-pass variance: mean first, then the mean of squared deviations (stable, and both
    passes fuse into one row kernel)."""
    dims = _dims(x, dims)
    n = math.prod(x.shape[d] for d in dims)
    corr = 1 if correction is None else correction
    m = reduction(g, node, x, dims, True, "sum", out_dtype, post=lambda v, n: f"{v} / {float(n)}")
    def fn(k, index):
        v = ops.cast(x.load(k, index), x.dtype, torch.float32)
        mu = ops.cast(m.load(k, broadcast_index(index, x.shape, m.shape)), m.dtype, torch.float32)
        return k.emit(f"({v} - {mu}) * ({v} - {mu})")
    dev = Pointwise(x.shape, torch.float32, fn)
    dev.reads = reads_of(x) | reads_of(m)
    scale = 1.0 / max(n - corr, 0) if n - corr > 0 else float("nan")
    var = reduction(g, node, dev, dims, keepdim, "sum", out_dtype,
                    post=lambda v, _n: f"{v} * {ops.literal(scale)}")
    if keepdim:
        return var, m
    return var, View(m, var.shape, lambda index: _insert_zeros(index, dims, len(x.shape)), (aten.squeeze.dims, [dims], {}))


def _insert_zeros(index, dims, n):
    it = iter(index)
    return [Affine() if d in dims else next(it) for d in range(n)]


@lowering(aten.var.correction, aten.var_mean.correction)
def var(g, node, x, dims=None, *, correction=None, keepdim=False):
    out = node.meta["val"]
    dtype = (out[0] if isinstance(out, (tuple, list)) else out).dtype
    if not dtype.is_floating_point:
        raise Unlowerable("integer var")
    v, m = _var(g, node, x, dims, correction, keepdim, dtype)
    return (v, m) if node.target is aten.var_mean.correction else v


LOWERINGS[operator.getitem] = lambda g, node, seq, i: seq[i]
