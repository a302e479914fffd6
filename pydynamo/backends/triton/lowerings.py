"""ATen op -> lazy IR value, one small function per family of ops.

Each lowering gets the GraphLowering ``g``, the FX node (for its fake-tensor ``meta["val"]``:
output shape and dtype are taken from there, never re-derived) and the node's arguments with
tensors replaced by IR values.  Raising ``Unlowerable`` sends that one node to ATen instead.
"""
import math
import operator

import torch

from . import ops
from .ir import Affine, Buffer, InputBuffer, Node, Pointwise, Unlowerable, View

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
    elif out == torch.bool and any(isinstance(a, int) and not isinstance(a, bool) for a in args):
        out = torch.int64  # torch's ``mask == 2`` is False; in bool, 2 is written 1 (ops.literal)
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
    if not meta(node).dtype.is_floating_point:  # exp2 rounds: int64 3 ** 4 + 1 came out 81
        raise Unlowerable("integer pow")
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
    if isinstance(a, Node) and not isinstance(a, InputBuffer) and val.dtype == src and _same_layout(a, val) \
            and node not in g.user_outputs and id(a) not in g.user_output_values:
        # a copy of a value into the layout it already has (layout.py's clone to channels-last
        # in front of a convolution whose input is channels-last) is the value itself: stored
        # again, it doubled a ResNet's activation stores and kept two copies alive (the clone
        # and the value both saved for the backward). Only what the caller sees keeps memory of
        # its own: an output the user may change in place shares it with nothing, nor does a
        # copy of an input (saved, it would be the caller's tensor, which the caller may change)
        return a
    if val.dtype != src and ops.compute_dtype(val.dtype) != val.dtype:
        # a conversion to half precision rounds there, as in eager, even when a fused consumer
        # goes on in float32 (x.half().float() is not x)
        low = ops.TL_DTYPE[val.dtype]
        return pointwise(node, [a], lambda x: f"{x}.to({low}).to(tl.float32)", operand_dtype=torch.float32)
    return pointwise(node, [a], lambda x: x, operand_dtype=ops.compute_dtype(src))


def _same_layout(a, val):
    """Whether ``a`` (a lazy value: laid out where it is stored, as its reader asks) can stand
    for the traced tensor ``val``: a stored one must have val's strides (on dims of size > 1)."""
    if not isinstance(a, Buffer):
        return isinstance(a, Pointwise)
    return all(x == y for n, x, y in zip(val.shape, val.stride(), a.stride) if n > 1)


for _t in [aten._to_copy.default, prims.convert_element_type.default, aten.clone.default,
           aten.lift_fresh_copy.default]:
    LOWERINGS[_t] = _identity


@lowering(aten.native_dropout.default)
def native_dropout(g, node, x, p, train):
    """(x * mask / (1 - p), mask), mask = uniform >= p drawn in the kernel (wrapper.HEADER's
    rand_uniform) at the element's row-major position under this op's seed (GraphLowering.seed):
    the two values, and any recomputation of either, see the same mask. Dropped NaNs stay NaN,
    as in eager (x * 0)."""
    out, mask = node.meta["val"]
    if not out.dtype.is_floating_point or not ops.supported_dtype(out.dtype) or not 1 < x.numel() < 2**32:
        raise Unlowerable("dropout")
    if train is False:
        kept = Pointwise(mask.shape, torch.bool, lambda k, index: k.emit("tl.full([1], 1, tl.int1)"))
        kept.reads = frozenset()
        return pointwise(_Meta(out), [x], lambda v: v), kept
    scale = 0.0 if p == 1 else 1.0 / (1.0 - p)
    kept = _uniform(g, node, mask.shape, torch.bool, lambda u: f"{u} >= {ops.literal(float(p))}")
    return pointwise(_Meta(out), [x, kept], lambda v, m: f"{v} * {m} * {ops.literal(scale)}"), kept


def _uniform(g, node, shape, dtype, fmt):
    """A Pointwise of ``fmt(u)``, u uniform in [0, 1) drawn in the kernel (wrapper.HEADER's
    rand_uniform) at the element's row-major position under ``node``'s seed."""
    seeds, at = g.seed(node)
    strides = [math.prod(shape[d + 1:]) for d in range(len(shape))]

    def draw(k, index):
        seed = seeds.load(k, [Affine(const=at)])
        offset = k.index_value(sum((Affine.lift(i) * s for i, s in zip(index, strides)), Affine()))
        return k.emit(fmt(f"rand_uniform({seed}, {offset})"))
    value = Pointwise(shape, dtype, draw)
    value.reads = reads_of(seeds)
    return value


@lowering(aten.rand_like.default)
def rand_like(g, node, x, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    """Uniform floats in [0, 1) drawn in the kernel, as native_dropout's mask is (our
    decomposition of native_dropout draws its mask so). float32 only: another dtype rounds
    values below 1 up to 1, and stays ATen's."""
    val = node.meta["val"]
    if val.dtype != torch.float32 or val.device != g.device or layout not in (None, torch.strided) \
            or pin_memory or not 0 < val.numel() < 2**32:
        raise Unlowerable("rand_like")
    return _uniform(g, node, val.shape, torch.float32, lambda u: u)


class _Meta:
    """Stands for an FX node whose value is ``val`` (one output of a multi-output op)."""

    def __init__(self, val):
        self.meta = {"val": val}


@lowering(aten.copy.default)
def copy(g, node, dst, src, non_blocking=False):
    return pointwise(node, [src], lambda x: x, operand_dtype=ops.compute_dtype(src.dtype))


@lowering(aten.copy_.default)
def copy_(g, node, dst, src, non_blocking=False):
    """The graph's write into one of its inputs, at its end (GraphLowering.copy_into_input)."""
    return g.copy_into_input(node, dst, src)


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


# ---- views: index arithmetic, and the ATen call replaying them on real tensors ----

def view_node(node, base, reindex, args):
    return View(base, meta(node).shape, reindex, (node.target, args, dict(node.kwargs)), _val_of(node.args[0]))


def _val_of(arg):
    """The traced meta tensor of an fx argument (None for a constant)."""
    return arg.meta.get("val") if isinstance(arg, torch.fx.Node) else None


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
        outs.append(View(a, shape, reindex, (aten.slice.Tensor, [dim, start, start + s], {}), _val_of(node.args[0])))
        start += s
    return outs


LOWERINGS[operator.getitem] = lambda g, node, seq, i: seq[i]


# the indexing and reduction lowerings register themselves in LOWERINGS on import
from . import indexing, reductions  # noqa: E402
REGISTERED_BY = (indexing, reductions)
