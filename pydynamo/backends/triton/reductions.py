"""Reductions: sum, prod, mean, amax/amin, var, arg reductions and the cumsum scan; the split of
reductions with few outputs over many rows; softmax's one-pass denominator."""
import math
import os

import torch

from . import ops
from .ir import Affine, Node, Pointwise, Reduction, Scan, Unlowerable, View
from .lowerings import aten, broadcast_index, lowering, meta, reads_of
from . import scheduler
from .scheduler import Space, triton_next_pow2

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
    acc = torch.int64 if kind in ("sum", "prod") and not out_dtype.is_floating_point else ops.compute_dtype(
        out_dtype if kind in ("sum", "prod") else x.dtype)

    def inner(k, index):
        v = ops.cast(x.load(k, index), x.dtype, acc)
        return k.emit(pre(v) if pre else v)
    plan = _Plan(x.shape, _dims(x, dims), _traced_stride(node, x))
    if plan.parts > 1:
        split = _Split(plan, keepdim)
        partial = split.stage1(g, kind, plan.inner(inner), acc)
        return plan.back(split.stage2(g, kind, lambda k, index: partial.load(k, split.at(index)), out_dtype, acc,
                                      None if post is None else (lambda v, _n: post(v, plan.total))), keepdim)
    dims, stride = plan.dims, plan.stride
    red = Reduction(x.shape, dims, kind, inner, out_dtype, keepdim, stride)
    red.acc_dtype, red.post = acc, post
    return g.realize(red)


def _traced_stride(node, x):
    """The strides the reduced tensor (the node's first argument) had when traced, whose memory
    order the kernel walks; None where unknown (then: logical order)."""
    a = node.args[0] if node.args else None
    val = a.meta.get("val") if isinstance(a, torch.fx.Node) else None
    if isinstance(val, torch.Tensor) and tuple(val.shape) == tuple(x.shape):
        return tuple(val.stride())
    return None


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


def split_factor(shape, dims, stride=None):
    """How many slices to cut the reduced dims (see _split_block) into; 1: no split. ``stride``:
    as for Space."""
    if os.environ.get("PYDYNAMO_TRITON_SPLIT_REDUCTIONS", "1") == "0" or not dims:
        return 1
    rnumel = math.prod(shape[d] for d in dims)
    block = math.prod(shape[d] for d in _split_block(dims))
    xnumel = math.prod(shape) // max(1, rnumel)
    target, most = SPLIT_TARGET_PROGRAMS, SPLIT_MAX_PARTS
    if Space(shape, dims, stride).inner:  # rows along memory: a program per row, looping over it
        programs, min_rows, min_rnumel = xnumel, 2048, 16384
    else:                         # columns: 64 of them per program (kernel.COLUMN_XBLOCK)
        programs, min_rows, min_rnumel = -(-xnumel // 64), 32, 256
        if xnumel < 64:
            # narrower: a program holds fewer columns, so more of them keep as many loads in
            # flight (H100, a bf16 batch norm of 32 channels at 112 x 112, batch 64: the
            # statistics 0.135 -> 0.045 ms with 512 programs; 64 fp32 channels: 1024 were slower)
            target = most = SPLIT_TARGET_PROGRAMS * (64 // triton_next_pow2(xnumel))
    if programs >= SPLIT_MIN_PROGRAMS or rnumel < min_rnumel:
        return 1
    parts = 1
    while parts * 2 <= most and programs * parts < target \
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


class _Plan:
    """How a reduction of ``dims`` of ``shape`` (traced ``stride``, or None) runs: ``parts`` > 1
    splits it (see split_factor). A split whose reduced dims are one run of memory but not
    adjacent as dims (a channels-last batch norm's N, H, W) is planned on a permutation of the
    dims, ``perm``: the kept ones first in their order, then the reduced ones from outermost to
    innermost in memory, cut as one block (not held to the batch's size: 64 images of 64 channels
    would give 64 programs). ``shape``, ``dims``, ``stride``: permuted where perm is."""

    def __init__(self, shape, dims, stride):
        self.in_shape, self.total = tuple(shape), math.prod(shape[d] for d in dims)
        self.shape, self.dims, self.stride, self.perm = self.in_shape, list(dims), stride, None
        perm = _memory_run(shape, dims, stride)
        if perm is not None:
            pshape, pstride = tuple(shape[d] for d in perm), tuple(stride[d] for d in perm)
            pdims = list(range(len(perm) - len(dims), len(perm)))
            self.parts = split_factor(pshape, pdims, pstride)
            if self.parts > 1:
                self.shape, self.dims, self.stride, self.perm = pshape, pdims, pstride, perm
                return
        self.parts = split_factor(self.shape, self.dims, self.stride)

    def inner(self, fn):
        """``fn`` of a logical index, as a function of a planned (permuted) one."""
        perm = self.perm
        if perm is None:
            return fn

        def permuted(k, pindex):
            index = [None] * len(perm)
            for i, d in enumerate(perm):
                index[d] = pindex[i]
            return fn(k, index)
        return permuted

    def back(self, out, keepdim):
        """A planned reduction's result seen with the logical dims (without keepdim the kept dims
        are in their logical order already)."""
        if self.perm is None or not keepdim:
            return out
        reduced = set(self.perm[len(self.perm) - len(self.dims):])
        shape = tuple(1 if d in reduced else s for d, s in enumerate(self.in_shape))
        kept = [d for d in range(len(shape)) if d not in reduced]
        return View(out, shape, lambda index: [index[d] for d in kept] + [Affine()] * len(reduced),
                    (aten.view.default, [list(shape)], {}))


def _memory_run(shape, dims, stride):
    """_Plan's permutation, or None: where the reduced dims are one run of memory but not adjacent."""
    if stride is None or len(dims) < 2 or dims == list(range(dims[0], dims[-1] + 1)):
        return None
    run = sorted(dims, key=lambda d: (-stride[d], d))
    big = [d for d in run if shape[d] > 1]
    if any(stride[a] != stride[b] * shape[b] for a, b in zip(big, big[1:])):
        return None
    return [d for d in range(len(shape)) if d not in dims] + run


class _Split:
    """A reduction in two stages (see split_factor): the block of dims that is cut becomes
    (parts, rows); stage 1 reduces the rows and any other reduced dims into partials (``shape1``
    with those dims 1), stage 2 reduces the parts (``shape2``: the parts at dim ``b0``, the rest
    laid out as the output, keepdim's 1s where dims were reduced)."""

    def __init__(self, plan, keepdim):
        shape, dims, stride, parts = plan.shape, plan.dims, plan.stride, plan.parts
        self.keepdim, self.parts = keepdim, parts
        block = _split_block(dims)
        self.b0, self.bk = b0, bk = block[0], block[-1]
        self.stride1 = None
        if stride is not None and all(shape[d] == 1 or stride[d] == stride[d + 1] * shape[d + 1] for d in block[:-1]):
            # the block is one run of memory (a channels-last H, W): stage 1 walks it as it lies
            step = stride[bk]
            self.stride1 = stride[:b0] + (step * (math.prod(shape[d] for d in block) // parts), step) + stride[bk + 1:]
        self.shape, self.rest = shape, [d for d in dims if d not in block]  # rest: all after the block
        self.rows = math.prod(shape[d] for d in block) // parts
        self.count = plan.total // parts  # elements each partial reduces
        self.shape1 = shape[:b0] + (parts, self.rows) + shape[bk + 1:]
        shift = 1 - (len(block) - 1)       # where a dim after the block lands in shape1
        self.dims1 = [b0 + 1] + [d + shift for d in self.rest]
        tail = [d for d in range(bk + 1, len(shape)) if keepdim or d not in self.rest]
        self.ones = (1,) * (len(block) - 1) if keepdim else ()
        self.shape2 = shape[:b0] + (parts,) + self.ones + tuple(1 if d in self.rest else shape[d] for d in tail)

    def stage1(self, g, kind, inner, acc):
        """The partials of reducing ``inner`` (a function of an index into ``shape``)."""
        b0, bk, rows, shape = self.b0, self.bk, self.rows, self.shape

        def inner1(k, index):
            flat = Affine.lift(index[b0]) * rows + index[b0 + 1]
            return inner(k, list(index[:b0]) + _unflatten(flat, shape[b0:bk + 1]) + list(index[b0 + 2:]))
        red1 = Reduction(self.shape1, self.dims1, kind, inner1, acc, True, self.stride1)
        red1.acc_dtype, red1.post = acc, None
        return g.realize(red1)

    def at(self, index):
        """The index into a partial of a stage-2 index."""
        b0 = self.b0
        after = iter(index[b0 + 1 + len(self.ones):])  # shape2's entries after the parts
        at = list(index[:b0 + 1]) + [Affine()]          # the partial: ..., parts, 1 (the rows)
        for d in range(self.bk + 1, len(self.shape)):
            if d in self.rest:                          # reduced in stage 1: a 1 in the partial
                if self.keepdim:
                    next(after)                         # and a 1 in shape2
                at.append(Affine())
            else:
                at.append(next(after))
        return at

    def out_index(self, index):
        """The index into a stage-2 result of a stage-2 index."""
        return [Affine() if d == self.b0 else i for d, i in enumerate(index) if self.keepdim or d != self.b0]

    def stage2(self, g, kind, inner2, out_dtype, acc, post):
        """Reducing ``inner2`` (a function of an index into shape2) over the parts."""
        red2 = Reduction(self.shape2, [self.b0], kind, inner2, out_dtype, self.keepdim)
        red2.acc_dtype, red2.post = acc, post
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


@lowering(aten.prod.default, aten.prod.dim_int)
def prod(g, node, x, dim=None, keepdim=False, dtype=None):
    return reduction(g, node, x, None if dim is None else [dim], keepdim, "prod", meta(node).dtype)


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
    return v if triton_next_pow2(rnumel) > scheduler.PERSISTENT_MAX else None


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


@lowering(aten.any.dim, aten.any.dims, aten.any.default, aten.all.dim, aten.all.dims, aten.all.default)
def any_all(g, node, x, dims=None, keepdim=False):
    """Whether any (all) element is nonzero: the max (min) of ``x != 0`` as int32; NaN counts."""
    if not ops.supported_dtype(x.dtype):
        raise Unlowerable("dtype")
    nonzero = Pointwise(x.shape, torch.int32, lambda k, index: k.emit(
        f"({ops.cast(x.load(k, index), x.dtype, torch.bool)}).to(tl.int32)"), 1 + getattr(x, "cost", 0))
    nonzero.reads = reads_of(x)
    kind = "max" if node.target.overloadpacket is aten.any else "min"
    return reduction(g, node, nonzero, dims, keepdim, kind, torch.bool, post=lambda v, n: f"({v} != 0)")


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
    """(variance, mean), with ``keepdim``'s shape. Rows held in registers: two passes there, the mean first, then
    the mean of squared deviations. Longer rows, or a split: one pass over memory (_var_welford)."""
    dims = _dims(x, dims)
    n = math.prod(x.shape[d] for d in dims)
    corr = 1 if correction is None else correction
    scale = 1.0 / max(n - corr, 0) if n - corr > 0 else float("nan")
    plan = _Plan(x.shape, dims, _traced_stride(node, x))
    if plan.parts > 1 or not Space(plan.shape, plan.dims, plan.stride).persistent():
        var, m = _var_welford(g, x, plan, out_dtype, scale)
    else:
        m = reduction(g, node, x, dims, True, "sum", out_dtype, post=lambda v, n: f"{v} / {float(n)}")

        def fn(k, index):
            v = ops.cast(x.load(k, index), x.dtype, torch.float32)
            mu = ops.cast(m.load(k, broadcast_index(index, x.shape, m.shape)), m.dtype, torch.float32)
            return k.emit(f"({v} - {mu}) * ({v} - {mu})")
        dev = Pointwise(x.shape, torch.float32, fn)
        dev.reads = reads_of(x) | reads_of(m)
        var = reduction(g, node, dev, dims, True, "sum", out_dtype,
                        post=lambda v, _n: f"{v} * {ops.literal(scale)}")
    if keepdim:
        return var, m
    shape = tuple(s for d, s in enumerate(x.shape) if d not in dims)
    return tuple(View(t, shape, lambda index: _insert_zeros(index, dims, len(x.shape)), (aten.squeeze.dims, [dims], {}))
                 for t in (var, m))


def _var_welford(g, x, plan, out_dtype, scale):
    """(variance, mean), both keepdim, reading ``x`` once: per lane Welford's running mean and
    sum of squared deviations M2 (kind "welford", kernel.py) beside a plain sum for the mean.
    Split, each part gives its sum S_i and M2_i over n elements, and the parts combine as Chan
    et al.'s: M2 = sum(M2_i + n (S_i / n - mean)^2)."""
    if not ops.supported_dtype(x.dtype) or not ops.supported_dtype(out_dtype) or math.prod(x.shape) == 0:
        raise Unlowerable("var")  # (as reduction() refuses them)
    acc = ops.compute_dtype(x.dtype)
    if acc not in (torch.float32, torch.float64):
        acc = torch.float32

    def load(k, index):
        return k.emit(ops.cast(x.load(k, index), x.dtype, acc))
    inner, total = plan.inner(load), float(plan.total)
    mean_post = lambda v, _n: f"{v} / {total}"
    var_post = lambda v, _n: f"{v} * {ops.literal(scale)}"
    if plan.parts > 1:
        split = _Split(plan, True)
        sums, m2s = split.stage1(g, "sum", inner, acc), split.stage1(g, "welford", inner, acc)
        mean = mean2 = split.stage2(g, "sum", lambda k, index: sums.load(k, split.at(index)), acc, acc, mean_post)
        n = float(split.count)

        def m2(k, index):  # (inner functions run later: mean2 stays the stage-2 buffer)
            at = split.at(index)
            d = k.emit(f"{sums.load(k, at)} / {n} - {mean2.load(k, split.out_index(index))}")
            return k.emit(f"{m2s.load(k, at)} + {n} * {d} * {d}")
        var = split.stage2(g, "sum", m2, out_dtype, acc, var_post)
    else:
        red = Reduction(plan.shape, plan.dims, "sum", inner, acc, True, plan.stride)
        red.acc_dtype, red.post = acc, mean_post
        mean = g.realize(red)
        red = Reduction(plan.shape, plan.dims, "welford", inner, out_dtype, True, plan.stride)
        red.acc_dtype, red.post = acc, var_post
        var = g.realize(red)
    var, mean = plan.back(var, True), plan.back(mean, True)
    if out_dtype != acc:
        m32 = mean
        mean = Pointwise(m32.shape, out_dtype, lambda k, index: k.emit(ops.cast(m32.load(k, index), acc, out_dtype)))
        mean.reads = reads_of(m32)
    return var, mean


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
