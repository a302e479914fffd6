"""``torch.nn.attention.flex_attention.flex_attention`` captured as torch.compile captures it:
``score_mod`` and the block mask's ``mask_mod`` are traced by the same translator into subgraphs
(with the 0-d stand-ins torch traces them with: the score in the query's dtype, the batch,
head, query and key indices as int32), and the frame's graph gets one node that calls torch's
``flex_attention`` higher-order operator with them. Inductor lowers that operator to its fused
attention kernel; the ``eager`` backend runs the operator's reference implementation, which is
what eager ``flex_attention`` runs.

The checks and defaults of torch's ``flex_attention`` (input validation, the default scale and
block mask, kernel options) are made while tracing by calling torch's own helpers on the fake
inputs, so they follow the installed torch; anything they reject runs natively (and raises as
eager does). A ``block_mask`` is read attribute by attribute (its tensors become graph inputs,
its block sizes and lengths are guarded); one created inside the trace is refused.
"""
import inspect
import math

import torch

from ..exc import Unsupported
from .base import ObjectVariable
from .higher_order import _single_output, bind_call, trace_body, unify

_TENSOR = object()  # a block-mask layout's slot for one of its tensors (_block_mask)


def is_flex_attention(value):
    fa = _module()
    return fa is not None and value is fa.flex_attention


def _module():
    import sys
    return sys.modules.get("torch.nn.attention.flex_attention")


class FlexAttentionVariable(ObjectVariable):
    def call_function(self, tx, args, kwargs):
        return _flex(tx, bind_call(self.value, args, kwargs, "flex_attention"))


def _constant(var, what):
    if not var.is_python_constant():
        raise Unsupported(f"flex_attention's {what} must be a constant")
    return var.as_python_constant()


def _flex(tx, a):
    from .constant import ConstantVariable
    from .tensor import TensorVariable
    fa = _module()
    q, k, v = a["query"], a["key"], a["value"]
    if not all(isinstance(t, TensorVariable) for t in (q, k, v)):
        raise Unsupported("flex_attention's query, key and value must be tensors")
    scale = _constant(a["scale"], "scale")
    enable_gqa = _constant(a["enable_gqa"], "enable_gqa")
    return_lse = _constant(a["return_lse"], "return_lse")
    kernel_options = _constant(a["kernel_options"], "kernel_options")
    if not (isinstance(a["return_aux"], ConstantVariable) and a["return_aux"].value is None):
        raise Unsupported("flex_attention(return_aux=...) is not captured (runs natively)")
    fq, fk, fv = (t.example_value for t in (q, k, v))
    for t in (fq, fk, fv):
        for d in (-3, -1):
            if t.dim() >= 3 and isinstance(t.size(d), torch.SymInt):
                raise Unsupported("flex_attention with a symbolic number of heads or head size")
    try:
        with tx.output.fake_mode:
            _torch_checks(fa, fq, fk, fv)
            enforce = getattr(fa, "_enforce_mem_layouts", None)
            laid = enforce(fq, fk, fv) if enforce is not None else (fq, fk, fv)
            options = _call_accepting(fa._apply_kernel_options, fq, fk, fv, return_lse, kernel_options,
                                      return_aux=None)
    except Exception as e:  # noqa: BLE001 - eager raises the same: the call runs natively
        raise Unsupported(f"flex_attention: {type(e).__name__}: {e}") from None
    if any(x is not y for x, y in zip(laid, (fq, fk, fv))):
        raise Unsupported("flex_attention of float8 inputs in another memory layout (torch copies them)")
    if fq.dim() != 4 or fk.dim() != 4 or fv.dim() != 4:
        raise Unsupported("flex_attention: query, key and value must be 4-D (torch raises)")
    if not enable_gqa and fq.size(-3) != fk.size(-3) or enable_gqa and fq.size(1) % fk.size(1):
        raise Unsupported("flex_attention: the numbers of query and key heads do not match (torch raises)")
    block = _block_mask(tx, a["block_mask"], fq, fk)
    if fq.size(0) != fk.size(0) and (block is None or block[2][0].example_value.size(0) != fq.size(0)):
        raise Unsupported("flex_attention: query and key batch sizes differ (torch raises)")
    if scale is None:
        scale = 1.0 / math.sqrt(fq.size(-1))
    score_mod = a["score_mod"]
    if isinstance(score_mod, ConstantVariable) and score_mod.value is None:
        from .functions import UserFunctionVariable
        score_mod = UserFunctionVariable(fa._identity)
    idx = lambda: _index(tx, fq.device)  # noqa: E731
    with tx.output.fake_mode:
        score_example = torch.empty((), dtype=fq.dtype, device=fq.device)
    score = _vmapped_body(tx, score_mod, [score_example, idx(), idx(), idx(), idx()], "flex_attention's score_mod")
    if len(score.out_leaves) != 1:
        raise Unsupported("flex_attention's score_mod must return one tensor")
    (score_gm,), score_lifted = unify([score])
    _single_output(score_gm)
    if block is None:
        from .functions import UserFunctionVariable
        mask_fn, layout, tensors = UserFunctionVariable(fa.noop_mask), None, []
    else:
        mask_fn, layout, tensors = block
    mask = _vmapped_body(tx, mask_fn, [idx(), idx(), idx(), idx()], "the block mask's mask_mod")
    if len(mask.out_leaves) != 1:
        raise Unsupported("the block mask's mask_mod must return one tensor")
    (mask_gm,), mask_lifted = unify([mask])
    _single_output(mask_gm)
    out = tx.output
    site = _FlexSite(layout, len(tensors), scale, options, return_lse, len(score_lifted), len(mask_lifted))
    args = (q.node, k.node, v.node, out.install_subgraph("sdpa_score", score_gm),
            out.install_subgraph("sdpa_mask", mask_gm), *(t.node for t in tensors),
            *score_lifted, *mask_lifted)
    from .higher_order import emit
    items = emit(tx, site, args, "flex_attention")
    if return_lse:
        from .lists import TupleVariable
        return TupleVariable(items)
    return items[0]


# torch's own input checks of flex_attention, those this torch has (their set differs by version)
_CHECKS = ("_validate_no_nested_tensors", "_validate_nestedness", "_validate_sdpa_input", "_validate_embed_dim",
           "_validate_device")


def _torch_checks(fa, fq, fk, fv):
    for name in _CHECKS:
        check = getattr(fa, name, None)
        if check is not None:
            _call_accepting(check, fq, fk, fv, allow_lowp_kv=True)


def _call_accepting(fn, *args, **optional):
    """``fn(*args, **those of optional it takes)``: keywords a torch version may not have."""
    params = inspect.signature(fn).parameters
    return fn(*args, **{k: v for k, v in optional.items() if k in params})


def _vmapped_body(tx, fn, examples, what):
    """A body torch runs under vmap over the indices: tensor indexing there gathers."""
    tx.output.gather_indexing += 1
    try:
        return trace_body(tx, fn, examples, list, what, alias_ok=True)
    finally:
        tx.output.gather_indexing -= 1


def _index(tx, device):
    with tx.output.fake_mode:
        return torch.empty((), dtype=torch.int32, device=device)


def _block_mask(tx, var, fq, fk):
    """None for no block mask; else (mask_mod tracker, layout, [tensor trackers]): ``layout``
    is this torch's ``BlockMask.as_tuple()`` with each tensor replaced by _TENSOR (the site puts
    the graph's tensors there, in order) and the mask_mod last; tensors are read by attribute (graph
    inputs), every other attribute is read (guarded), so another mask gets its own layout. The checks are those torch's flex_attention makes."""
    from .constant import ConstantVariable
    from .tensor import TensorVariable
    fa = _module()
    if isinstance(var, ConstantVariable) and var.value is None:
        return None
    bm = getattr(var, "value", None)
    if type(bm) is not fa.BlockMask or var.source is None:
        raise Unsupported("flex_attention's block_mask must be a BlockMask made outside the compiled code")
    real = bm.as_tuple()
    fields = dict(vars(bm)) if hasattr(bm, "__dict__") else {}
    for k in getattr(type(bm), "__slots__", ()):
        if hasattr(bm, k):
            fields.setdefault(k, getattr(bm, k))
    attrs = {id(v): k for k, v in fields.items() if isinstance(v, torch.Tensor)}
    for k, v in fields.items():
        if not isinstance(v, torch.Tensor):
            var.var_getattr(tx, k)  # guarded: as_tuple()'s layout (Nones, sizes) follows from them
    layout, tensors = [], []
    for item in real[:-1]:
        if isinstance(item, torch.Tensor):
            name = attrs.get(id(item))
            if name is None:
                raise Unsupported("the block mask's tensors are not its attributes")
            t = var.var_getattr(tx, name)
            if not isinstance(t, TensorVariable):
                raise Unsupported(f"the block mask's {name} is {t}")
            tensors.append(t)
            layout.append(_TENSOR)
        elif isinstance(item, (int, bool)) or item is None:
            layout.append(item)
        else:
            raise Unsupported(f"the block mask holds a {type(item).__name__}")
    seq = _constant(var.var_getattr(tx, "seq_lengths"), "block mask's seq_lengths")  # guarded
    size = _constant(var.var_getattr(tx, "BLOCK_SIZE"), "block mask's BLOCK_SIZE")
    mask_mod = var.var_getattr(tx, "mask_mod")
    if getattr(mask_mod, "value", None) is getattr(fa, "_sliced_mask_mod_error", object()):
        raise Unsupported("flex_attention with the mask_mod of a sliced BlockMask (torch raises)")
    large = getattr(fa, "_LARGE_SPARSE_BLOCK_SIZE", None)
    if not (size[0] == large and size[1] == large) and (fq.size(-2) != seq[0] or fk.size(-2) != seq[1]):
        raise Unsupported("flex_attention: the block mask was made for other sequence lengths (torch raises)")
    if tensors[0].example_value.device != fq.device:
        raise Unsupported("flex_attention: the block mask is on another device than q/k/v (torch raises)")
    return mask_mod, tuple(layout), tensors


class _FlexSite:
    """The node of one flex_attention call: ``site(q, k, v, score_gm, mask_gm, *block mask
    tensors, *score_mod buffers, *mask_mod buffers)`` calls torch's higher-order operator and
    returns ``(out,)`` or ``(out, lse)`` as ``flex_attention`` returns them."""

    __name__ = __qualname__ = "flex_attention"

    def __init__(self, layout, n_block, scale, options, return_lse, n_score, n_mask):
        self.layout, self.n_block, self.scale, self.options = layout, n_block, scale, options
        self.return_lse, self.n_score, self.n_mask = return_lse, n_score, n_mask

    def __call__(self, q, k, v, score_gm, mask_gm, *rest):
        from torch._higher_order_ops.flex_attention import flex_attention as flex_hop
        fa = _module()
        n_block = self.n_block
        block_tensors, rest = rest[:n_block], rest[n_block:]
        score_bufs, mask_bufs = tuple(rest[:self.n_score]), tuple(rest[self.n_score:])
        if self.layout is None:
            block = fa._create_empty_block_mask(q, k).as_tuple()[:-1]
        else:
            it = iter(block_tensors)
            block = tuple(next(it) if item is _TENSOR else item for item in self.layout)
        result = flex_hop(q, k, v, score_gm, (*block, mask_gm), self.scale, self.options, score_bufs, mask_bufs)
        out, lse = result[0], result[1]  # (out, lse) or (out, lse, max_scores), by torch version
        if not self.return_lse:
            return (out,)
        if self.options.get("BACKEND") != "FLASH":
            lse = lse * math.log(2.0)
        return (out, lse)

    def __repr__(self):
        return "flex_attention"
