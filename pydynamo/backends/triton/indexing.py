"""Lowerings that read at computed positions: gather, embedding and x[idx] (indirect loads),
scatter of one index per row (a one-hot), cat and constant padding (masked loads), pooling and
its gradients (masked window loads); and that write at computed positions: index_put and
scatter_add (a kernel of atomic adds)."""
import math
import operator

import torch

from . import ops
from .ir import Affine, Node, Pointwise, Scatter, Unlowerable
from .lowerings import aten, broadcast_index, lowering, meta, reads_of

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
    if x.shape[dim] == 0:
        raise Unlowerable("gather from an empty dim")

    def fn(k, idx):
        at = list(idx)
        i = index.load(k, idx)
        k.check_index(i, x.shape[dim], idx)
        at[dim] = Affine.indirect(i, x.shape[dim], idx)
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


def _pool_input(x, kh, kw, what):
    if len(x.shape) not in (3, 4) or not x.dtype.is_floating_point or not ops.supported_dtype(x.dtype) \
            or kh * kw > 64:
        raise Unlowerable(what)


def _window(k, x, idx, step, offset, fill):
    """The elements of ``x``'s plane under one window position, for output position ``idx``:
    ``step`` (sh, sw) and ``offset`` (h, w) place it; outside the input the value is ``fill``.
    Returns (value, h index value, w index value)."""
    H, W = x.shape[-2:]
    h = Affine.lift(idx[-2]) * step[0] + offset[0]
    w = Affine.lift(idx[-1]) * step[1] + offset[1]
    hv, wv = k.index_value(h), k.index_value(w)
    inside = k.emit(f"({hv} >= 0) & ({hv} < {H}) & ({wv} >= 0) & ({wv} < {W})")
    with k.masked(inside):
        v = ops.cast(x.load(k, list(idx[:-2]) + [h, w]), x.dtype, ops.compute_dtype(x.dtype))
    return k.emit(f"tl.where({inside}, {v}, {fill})"), hv, wv


def _pair(v, default=None):
    """A pooling argument as [height, width] (an int, a 1- or 2-list, or empty for default)."""
    v = list(v) if isinstance(v, (list, tuple)) else [v]
    v = v or default
    return v * 2 if len(v) == 1 else v


@lowering(aten.avg_pool2d.default)
def avg_pool2d(g, node, x, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    """The window's in-bounds sum (masked loads) over ATen's divisor: the window clipped to the
    padded input (count_include_pad), or to the input itself, or divisor_override."""
    kh, kw = _pair(kernel_size)
    sh, sw = _pair(stride, [kh, kw])
    ph, pw = _pair(padding)
    val = meta(node)
    _pool_input(x, kh, kw, "avg_pool2d")
    H, W = x.shape[-2:]
    acc = ops.compute_dtype(x.dtype)

    def fn(k, idx):
        total = None
        for i in range(kh):
            for j in range(kw):
                v, _, _ = _window(k, x, idx, (sh, sw), (i - ph, j - pw), "0.0")
                total = v if total is None else k.emit(f"({total} + {v})")
        hs, ws = (k.index_value(Affine.lift(idx[-2]) * sh + (-ph)),
                  k.index_value(Affine.lift(idx[-1]) * sw + (-pw)))
        div = _avg_divisor(k, hs, ws, (kh, kw), (H, W), (ph, pw), count_include_pad, divisor_override, acc)
        return k.emit(ops.cast(f"({total} / {div})", acc, val.dtype))
    pw_ = Pointwise(val.shape, val.dtype, fn, 2 * kh * kw)
    pw_.reads = reads_of(x)
    return pw_


def _avg_divisor(k, hs, ws, kernel, size, padding, count_include_pad, divisor_override, acc):
    """What avg_pool2d divides the window at rows ``hs``..., columns ``ws``... (texts: where it
    starts, padding included) by: the window clipped to the padded input (count_include_pad), or
    to the input itself, or divisor_override."""
    if divisor_override:
        return str(float(divisor_override))
    (kh, kw), (H, W), (ph, pw) = kernel, size, padding
    he, we = f"tl.minimum({hs} + {kh}, {H + ph})", f"tl.minimum({ws} + {kw}, {W + pw})"
    if not count_include_pad:
        hs, ws = f"tl.maximum({hs}, 0)", f"tl.maximum({ws}, 0)"
        he, we = f"tl.minimum({he}, {H})", f"tl.minimum({we}, {W})"
    return k.emit(f"(({he} - {hs}) * ({we} - {ws})).to({ops.TL_DTYPE[acc]})")


def _windows_over(k, idx, out_size, step, pad, kernel, dilation=1):
    """The output positions, along one dim, whose windows may hold input position ``idx``:
    [(index, its value text, whether it exists and its window holds idx)], in increasing order,
    the order in which ATen's CUDA backward adds them. Dilated: one candidate per window
    element j, the window starting j * dilation before idx, if one starts there."""
    if dilation != 1:
        out = []
        for j in reversed(range(kernel)):
            start = Affine.lift(idx) + (pad - j * dilation)
            o = start.floordiv(step)
            sv, ov = k.index_value(start), k.index_value(o)
            out.append((o, ov, f"({sv} >= 0) & ({sv} % {step} == 0) & ({ov} < {out_size})"))
        return out
    top = (Affine.lift(idx) + pad).floordiv(step)  # the last window starting at or before idx
    iv, out = k.index_value(idx), []
    for back in reversed(range(-(-kernel // step))):
        o = top + (-back)
        ov = k.index_value(o)
        out.append((o, ov, f"({ov} >= 0) & ({ov} < {out_size}) & ({iv} + {pad} - {ov} * {step} < {kernel})"))
    return out


def _pool_backward(node, grad, x, kernel, stride, padding, term, dilation=(1, 1)):
    """The gradient of a 2-d pooling: for each input position, the sum over the windows that
    hold it of ``term(k, index, out_index, row text, column text, holds, grad value)``, computed where
    the input is (a gather: no atomic adds, no zeroed buffer)."""
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = kernel, stride, padding, dilation
    val = meta(node)
    _pool_input(x, kh, kw, "pooling backward")
    windows = (kh if dh > 1 else -(-kh // sh)) * (kw if dw > 1 else -(-kw // sw))  # per input element
    if grad.dtype != val.dtype or windows > 16:
        raise Unlowerable("pooling backward")
    OH, OW = grad.shape[-2:]
    acc = ops.compute_dtype(grad.dtype)

    def fn(k, idx):
        total = None
        for oh, ohv, hold_h in _windows_over(k, idx[-2], OH, sh, ph, kh, dh):
            for ow, owv, hold_w in _windows_over(k, idx[-1], OW, sw, pw, kw, dw):
                at = list(idx[:-2]) + [oh, ow]
                holds = k.emit(f"{hold_h} & {hold_w}")
                with k.masked(holds):
                    v = ops.cast(grad.load(k, at), grad.dtype, acc)
                t = term(k, idx, at, ohv, owv, holds, v)
                total = t if total is None else k.emit(f"({total} + {t})")
        return k.emit(ops.cast(total, acc, val.dtype))
    return Pointwise(val.shape, val.dtype, fn, 2 * windows), acc


@lowering(aten.avg_pool2d_backward.default)
def avg_pool2d_backward(g, node, grad, x, kernel_size, stride, padding, ceil_mode, count_include_pad,
                        divisor_override=None):
    """Each input position gathers grad / divisor from the windows that hold it."""
    kh, kw = _pair(kernel_size)
    sh, sw = _pair(stride, [kh, kw])
    ph, pw = _pair(padding)
    H, W = x.shape[-2:]

    def term(k, idx, at, ohv, owv, holds, v):
        div = _avg_divisor(k, f"({ohv} * {sh} - {ph})", f"({owv} * {sw} - {pw})", (kh, kw), (H, W), (ph, pw),
                           count_include_pad, divisor_override, acc)
        return k.emit(f"tl.where({holds}, {v} / {div}, 0.0)")
    out, acc = _pool_backward(node, grad, x, (kh, kw), (sh, sw), (ph, pw), term)
    out.reads = reads_of(grad)
    return out


@lowering(aten.max_pool2d_with_indices_backward.default)
def max_pool2d_backward(g, node, grad, x, kernel_size, stride, padding, dilation, ceil_mode, indices):
    """Each input position gathers the grad of the windows whose saved index is that position."""
    _index_tensor(indices)
    kh, kw = _pair(kernel_size)
    W = x.shape[-1]

    def term(k, idx, at, ohv, owv, holds, v):
        with k.masked(holds):
            i = indices.load(k, at)
        here = k.emit(f"({k.index_value(idx[-2])} * {W} + {k.index_value(idx[-1])})")
        return k.emit(f"tl.where({holds} & ({i} == {here}), {v}, 0.0)")
    out, _ = _pool_backward(node, grad, x, (kh, kw), _pair(stride, [kh, kw]), _pair(padding), term, _pair(dilation))
    out.reads = reads_of(grad) | reads_of(indices)
    return out


@lowering(aten.max_pool2d_with_indices.default)
def max_pool2d(g, node, x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    """(values, indices) of the largest element in each window: kernel_size masked loads per
    output, out-of-bounds positions -inf, the first maximum winning, NaN winning over numbers
    (as ATen); indices are flat positions in the input plane (h * W + w), what the ATen
    backward expects."""
    kh, kw = _pair(kernel_size)
    sh, sw = _pair(stride, [kh, kw])
    ph, pw = _pair(padding)
    dh, dw = _pair(dilation)
    vals, inds = node.meta.get("val")
    _pool_input(x, kh, kw, "max_pool2d")
    H, W = x.shape[-2:]
    acc = ops.compute_dtype(x.dtype)

    def window(k, idx):
        best = where = None
        for i in range(kh):
            for j in range(kw):
                v, hv, wv = _window(k, x, idx, (sh, sw), (i * dh - ph, j * dw - pw), 'float("-inf")')
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
    # both stored now, by one kernel, laid out as traced (a channels-last input gives
    # channels-last results, walked in that order): the indices are mostly kept for the backward,
    # and stored later they would read every window again. Unused (inference), they are never
    # computed: int64 indices are four times the bytes of bf16 values
    value = g.realize(value, val=vals)
    if any(u.target is not operator.getitem or u.args[1] != 0 for u in node.users):
        index = g.realize(index, val=inds)
    return value, index


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
    if n == 0:
        raise Unlowerable("take from an empty dim")

    def fn(k, out):
        i = idx.load(k, out[dim:dim + k_dims])
        if wrap:
            i = k.emit(f"tl.where({i} < 0, {i} + {n}, {i})")
        k.check_index(i, n, out[dim:dim + k_dims])
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


# ---- writing at computed positions: index_put, scatter_add (a kernel of atomic adds) ----

def _scatter(g, node, x, space, target, values, at, accumulate):
    """``x`` with ``values`` (read at ``at(index)``) added or written at ``target(k, index)``
    for each index into ``space`` (ir.Scatter). Atomic adds accumulate half precision in a
    float32 copy of ``x``, cast back once. Adding in whatever order the atomics meet is not
    deterministic: torch.use_deterministic_algorithms keeps ATen's call."""
    val = meta(node)
    if accumulate and (torch.are_deterministic_algorithms_enabled() or val.dtype not in ACCUMULATE):
        raise Unlowerable("scatter with atomic adds")
    if not ops.supported_dtype(val.dtype) or not ops.supported_dtype(values.dtype) or math.prod(space) == 0:
        raise Unlowerable("scatter")
    dtype = ACCUMULATE[val.dtype] if accumulate else val.dtype
    init = Pointwise(x.shape, dtype, lambda k, index: k.emit(ops.cast(x.load(k, index), x.dtype, dtype)))
    init.reads = reads_of(x)
    init = g.realize(init)  # a buffer of its own, dead after the scatter

    def value(k, index):
        return k.emit(ops.cast(values.load(k, at(index)), values.dtype, dtype))
    out = g.realize(Scatter(init, space, target, value, accumulate))  # laid out as init
    if dtype == val.dtype:
        return out
    back = Pointwise(val.shape, val.dtype, lambda k, index: k.emit(ops.cast(out.load(k, index), dtype, val.dtype)))
    back.reads = frozenset([out.name])
    return back


ACCUMULATE = {torch.float32: torch.float32, torch.float16: torch.float32, torch.bfloat16: torch.float32,
              torch.float64: torch.float64, torch.int32: torch.int32, torch.int64: torch.int64}


@lowering(aten.index_put.default)
def index_put(g, node, x, indices, values, accumulate=False):
    """``x[..., idx, ...] = values`` (``+=`` when accumulating: an embedding's gradient) with one
    integer index tensor after any number of full slices, negative indices counted from the end.
    Written (not accumulated) with repeated indices, which element wins is undefined, as in ATen."""
    tensors = [(d, i) for d, i in enumerate(indices) if i is not None]
    if len(tensors) != 1 or any(i is not None for i in indices[:tensors[0][0]]):
        raise Unlowerable("index pattern")
    dim, idx = tensors[0]
    _index_tensor(idx)
    n, k_dims = x.shape[dim], len(idx.shape)
    space = x.shape[:dim] + idx.shape + x.shape[dim + 1:]
    if len(values.shape) > len(space) or any(s not in (1, t) for s, t in zip(values.shape[::-1], space[::-1])):
        raise Unlowerable("index_put values")

    def target(k, at):
        i = idx.load(k, at[dim:dim + k_dims])
        i = k.emit(f"tl.where({i} < 0, {i} + {n}, {i})")
        k.check_index(i, n, at[dim:dim + k_dims])
        return list(at[:dim]) + [Affine.indirect(i, n, at[dim:dim + k_dims])] + list(at[dim + k_dims:])
    return _scatter(g, node, x, space, target, values, lambda at: broadcast_index(at, space, values.shape),
                    accumulate)


@lowering(aten.scatter_add.default)
def scatter_add(g, node, x, dim, index, src):
    """``out[.., index[i], ..] += src[i]`` along ``dim`` for each position i of ``index``."""
    _index_tensor(index)
    dim %= len(x.shape)

    def target(k, at):
        i = index.load(k, at)
        k.check_index(i, x.shape[dim], at)
        return list(at[:dim]) + [Affine.indirect(i, x.shape[dim], at)] + list(at[dim + 1:])
    return _scatter(g, node, x, index.shape, target, src, lambda at: at, True)  # src may be larger


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
