"""Channels-last convolutions: an inference graph whose 2-d convolutions take NCHW tensors is
rewritten so that they take channels-last ones (NHWC in memory), as Inductor's layout
optimization does. cuDNN's NHWC kernels are much faster for depthwise and 1x1 convolutions in
half precision (EfficientNet-B0 bf16 on the H100: ATen's NCHW depthwise kernels took 1.9 of the
step's 3.8 ms), and everything between two convolutions (batch norm, activations, residual adds)
then stays channels-last: the pointwise kernels walk it in memory order.

The rewrite puts a ``clone(memory_format=channels_last)`` before each convolution input or
weight that is not channels-last, and traces the graph again on fake tensors so every node's
``meta["val"]`` has the strides it now gets. Graph outputs keep the strides they had (a clone
back where they changed), so callers see what eager gives. Nothing changes where any of this
could change a value rather than a layout: a node that reads memory through strides
(``as_strided``) of a tensor whose layout changed, an output that is a view, an op the fake
tensors cannot run. Inference graphs only: a training graph's saved tensors have the layout its
backward graph was traced with.
"""
import logging
import os

import torch
from torch.fx.node import map_arg

log = logging.getLogger(__name__)
aten = torch.ops.aten

# ops whose result's values depend on their input's strides, not only on its values
STRIDE_READERS = {aten.as_strided.default, aten.as_strided_copy.default, aten.as_strided_scatter.default,
                  aten._reshape_alias.default}


def _channels_last(val):
    return val.dim() == 4 and val.is_contiguous(memory_format=torch.channels_last)


def _same_layout(a, b):
    """Same shape, and the same strides on every dim of size > 1 (a size-1 dim's stride
    addresses nothing)."""
    return tuple(a.shape) == tuple(b.shape) and all(
        s == 1 or x == y for s, x, y in zip(a.shape, a.stride(), b.stride()))


def wanted(gm):
    """Whether to rewrite ``gm``: PYDYNAMO_TRITON_LAYOUT_OPT=1 always, 0 never, else (auto) when
    its tensors are on CUDA."""
    setting = os.environ.get("PYDYNAMO_TRITON_LAYOUT_OPT", "auto")
    if setting in ("0", "1"):
        return setting == "1"
    vals = [n.meta.get("val") for n in gm.graph.nodes if n.op == "placeholder"]
    return any(isinstance(v, torch.Tensor) and v.device.type == "cuda" for v in vals)


def _candidates(gm):
    """The convolutions to rewrite: 2-d (4-d input), not transposed, floating point, with an
    input or weight not channels-last."""
    out = []
    for n in gm.graph.nodes:
        if n.op != "call_function" or n.target is not aten.convolution.default or n.kwargs or len(n.args) != 9:
            continue
        x, w, transposed = n.args[0], n.args[1], n.args[6]
        vals = [getattr(a, "meta", {}).get("val") for a in (x, w)]
        if transposed or not all(isinstance(v, torch.Tensor) and v.dim() == 4 and v.is_floating_point()
                                 for v in vals):
            continue
        if not all(_channels_last(v) for v in vals):
            out.append(n)
    return out


def channels_last_convolutions(gm):
    """Rewrite ``gm`` in place (see the module's docstring); returns whether it changed."""
    convs = _candidates(gm)
    if not convs:
        return False
    graph = gm.graph
    before = {n: n.meta.get("val") for n in graph.nodes}
    added = []
    for conv in convs:
        for i in (0, 1):
            a = conv.args[i]
            if _channels_last(a.meta["val"]):
                continue
            with graph.inserting_before(conv):
                c = graph.call_function(aten.clone.default, (a,), {"memory_format": torch.channels_last})
            conv.update_arg(i, c)
            added.append(c)
    try:
        _retrace(gm)
        _check_and_fix_outputs(gm, before, added)
    except Exception as e:  # anything unexpected: the graph as it was
        log.debug("channels-last rewrite not applied: %s", e)
        for c in reversed(added):
            c.replace_all_uses_with(c.args[0])
            graph.erase_node(c)
        for n, v in before.items():
            if v is not None:
                n.meta["val"] = v
        return False
    gm.recompile()
    return True


class _NotApplicable(Exception):
    pass


def _retrace(gm):
    """Every call's meta["val"] again, on fake tensors, from the placeholders' (unchanged)."""
    from torch._guards import detect_fake_mode
    placeholders = [n.meta.get("val") for n in gm.graph.nodes if n.op == "placeholder"]
    mode = detect_fake_mode([v for v in placeholders if isinstance(v, torch.Tensor)])
    if mode is None:
        raise _NotApplicable("no fake mode")
    env = {}
    for n in gm.graph.nodes:
        if n.op == "placeholder":
            env[n] = n.meta.get("val")
        elif n.op == "get_attr":
            v = getattr(gm, n.target)
            env[n] = mode.from_tensor(v) if isinstance(v, torch.Tensor) else v
        elif n.op == "call_function":
            args, kwargs = map_arg((n.args, n.kwargs), lambda m: env[m])
            with mode:
                env[n] = n.target(*args, **kwargs)
            n.meta["val"] = env[n]
        elif n.op != "output":
            raise _NotApplicable(f"{n.op} node")


def _check_and_fix_outputs(gm, before, added):
    changed = {n for n, v in before.items() if isinstance(v, torch.Tensor)
               and not _same_layout(v, n.meta["val"])}
    for n in gm.graph.nodes:
        if n.target in STRIDE_READERS and any(m in changed for m in n.all_input_nodes):
            raise _NotApplicable(f"{n.target} reads a tensor whose layout changed")
    out = next(n for n in reversed(gm.graph.nodes) if n.op == "output")

    def fix(a):
        if not isinstance(a, torch.fx.Node) or a not in changed:
            return a
        want = before[a]
        schema = getattr(a.target, "_schema", None)
        if schema is None or any(r.alias_info is not None for r in schema.returns):
            raise _NotApplicable("an output whose layout changed is a view")
        if want.is_contiguous():
            fmt = torch.contiguous_format
        elif _channels_last(want):
            fmt = torch.channels_last
        else:
            raise _NotApplicable("an output whose layout changed had neither standard layout")
        with gm.graph.inserting_before(out):
            c = gm.graph.call_function(aten.clone.default, (a,), {"memory_format": fmt})
        c.meta["val"] = a.meta["val"].clone(memory_format=fmt)
        added.append(c)
        return c
    out.args = map_arg(out.args, fix)


__all__ = ["channels_last_convolutions", "wanted"]
