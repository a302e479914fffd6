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
tensors cannot run.

Training: the forward and backward graphs are rewritten together, right after AOTAutograd's
partition (the only step that has both): the tensors the forward saves for the backward stay
channels-last, and the backward's placeholders for them are given those strides before it is
traced again; its convolution backwards then run channels-last too, and the gradients come back
in the layout they had.
"""
import logging
import operator
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


# the convolution ops rewritten, and which of their arguments must be channels-last
CONV_ARGS = {aten.convolution.default: (0, 1), aten.convolution_backward.default: (0, 1, 2)}


def _candidates(gm):
    """(node, argument positions) of the convolutions to rewrite: 2-d (4-d input), not
    transposed, floating point, with an argument not channels-last."""
    out = []
    for n in gm.graph.nodes:
        args = CONV_ARGS.get(n.target) if n.op == "call_function" else None
        if args is None or n.kwargs or n.args[7 if n.target is aten.convolution_backward.default else 6]:
            continue
        vals = [getattr(n.args[i], "meta", {}).get("val") for i in args]
        if not all(isinstance(v, torch.Tensor) and v.dim() == 4 and v.is_floating_point() for v in vals):
            continue
        if not all(_channels_last(v) for v in vals):
            out.append((n, args))
    return out


class _NotApplicable(Exception):
    pass


class _Rewrite:
    """One graph's rewrite, undoable: clones added, ``meta["val"]`` as it was."""

    def __init__(self, gm):
        self.gm, self.graph = gm, gm.graph
        self.before = {n: n.meta.get("val") for n in gm.graph.nodes}
        self.added = []

    def convolutions(self):
        for conv, args in _candidates(self.gm):
            for i in args:
                a = conv.args[i]
                if _channels_last(a.meta["val"]):
                    continue
                with self.graph.inserting_before(conv):
                    c = self.graph.call_function(aten.clone.default, (a,), {"memory_format": torch.channels_last})
                conv.update_arg(i, c)
                self.added.append(c)

    def placeholders(self, layouts):
        """Placeholders named in ``layouts`` (name -> strides) get those strides."""
        for n in self.graph.nodes:
            if n.op == "placeholder" and n.name in layouts:
                v = n.meta["val"]
                with _fake_mode(self.gm):
                    n.meta["val"] = torch.empty_strided(v.shape, layouts[n.name], dtype=v.dtype, device=v.device,
                                                        requires_grad=v.requires_grad)

    def retrace(self):
        """Every call's meta["val"] again, on fake tensors, from the placeholders'."""
        mode = _fake_mode(self.gm)
        env = {}
        for n in self.graph.nodes:
            if n.op == "placeholder":
                env[n] = n.meta.get("val")
            elif n.op == "get_attr":
                v = getattr(self.gm, n.target)
                env[n] = mode.from_tensor(v) if isinstance(v, torch.Tensor) else v
            elif n.op == "call_function":
                args, kwargs = map_arg((n.args, n.kwargs), lambda m: env[m])
                with mode:
                    env[n] = n.target(*args, **kwargs)
                n.meta["val"] = env[n]
            elif n.op != "output":
                raise _NotApplicable(f"{n.op} node")
        self.changed = {n for n, v in self.before.items() if isinstance(v, torch.Tensor)
                        and isinstance(n.meta.get("val"), torch.Tensor) and not _same_layout(v, n.meta["val"])}
        for n in self.graph.nodes:
            if n.target in STRIDE_READERS and any(m in self.changed for m in n.all_input_nodes):
                raise _NotApplicable(f"{n.target} reads a tensor whose layout changed")

    def outputs(self, keep):
        """Outputs at the positions ``keep`` returns true for get back the layout they had (a
        clone where it changed); returns {name: strides} of the other outputs that changed."""
        out = next(n for n in reversed(self.graph.nodes) if n.op == "output")
        flat = list(out.args[0]) if isinstance(out.args[0], (list, tuple)) else [out.args[0]]
        moved = {}
        for i, a in enumerate(flat):
            if not isinstance(a, torch.fx.Node) or a not in self.changed:
                continue
            if not keep(i):
                moved[a.name] = tuple(a.meta["val"].stride())
                continue
            want = self.before[a]
            if _is_view(a):
                raise _NotApplicable(f"an output whose layout changed is a view ({a.format_node()})")
            if want.is_contiguous():
                fmt = torch.contiguous_format
            elif _channels_last(want):
                fmt = torch.channels_last
            else:
                raise _NotApplicable("an output whose layout changed had neither standard layout")
            with self.graph.inserting_before(out):
                c = self.graph.call_function(aten.clone.default, (a,), {"memory_format": fmt})
            c.meta["val"] = a.meta["val"].clone(memory_format=fmt)
            self.added.append(c)
            flat[i] = c
        out.args = (type(out.args[0])(flat) if isinstance(out.args[0], (list, tuple)) else flat[0],)
        return moved

    def undo(self):
        for c in reversed(self.added):
            c.replace_all_uses_with(c.args[0])
            self.graph.erase_node(c)
        for n, v in self.before.items():
            if v is not None:
                n.meta["val"] = v

    def done(self):
        if self.added:
            self.gm.recompile()
        return bool(self.added)


def _is_view(node):
    """Whether ``node`` may alias another tensor (True where unknown)."""
    if node.target is operator.getitem:
        src, i = node.args
        schema = getattr(getattr(src, "target", None), "_schema", None)
        if schema is None or not isinstance(i, int) or not 0 <= i < len(schema.returns):
            return True
        return schema.returns[i].alias_info is not None
    schema = getattr(node.target, "_schema", None)
    return schema is None or any(r.alias_info is not None for r in schema.returns)


def _fake_mode(gm):
    from torch._guards import detect_fake_mode
    vals = [n.meta.get("val") for n in gm.graph.nodes if n.op == "placeholder"]
    mode = detect_fake_mode([v for v in vals if isinstance(v, torch.Tensor)])
    if mode is None:
        raise _NotApplicable("no fake mode")
    return mode


def channels_last_convolutions(gm):
    """Rewrite the inference graph ``gm`` in place (see the module's docstring); returns whether
    it changed."""
    if not _candidates(gm):
        return False
    r = _Rewrite(gm)
    try:
        r.convolutions()
        r.retrace()
        r.outputs(lambda i: True)
    except Exception as e:  # anything unexpected: the graph as it was
        log.debug("channels-last rewrite not applied: %s", e)
        r.undo()
        return False
    return r.done()


def channels_last_training(fw, bw, num_fwd_outputs):
    """Rewrite a forward and backward pair in place: the forward's convolutions channels-last,
    its first ``num_fwd_outputs`` outputs (what the caller gets) as they were, the tensors it
    saves for the backward in their new layout; the backward's placeholders of those (matched
    by name, as the partitioner names them) get the new strides, its convolutions'
    backwards run channels-last, its outputs (gradients) come back as they were. Both or
    neither; returns whether they changed."""
    if not _candidates(fw):
        return False
    rf, rb = _Rewrite(fw), _Rewrite(bw)
    try:
        rf.convolutions()
        rf.retrace()
        moved = rf.outputs(lambda i: i < num_fwd_outputs)
        rb.placeholders(moved)
        rb.convolutions()
        rb.retrace()
        rb.outputs(lambda i: True)
    except Exception as e:
        log.debug("channels-last rewrite of a training graph not applied: %s", e)
        rb.undo()
        rf.undo()
        return False
    rb.done()
    return rf.done()


def partition_with_layouts(partition_fn):
    """``partition_fn`` (AOTAutograd's signature) followed by channels_last_training where
    wanted(): the rewrite needs both graphs at once, which only the partition step has."""
    def partition(joint, joint_inputs, *args, num_fwd_outputs, **kwargs):
        fw, bw = partition_fn(joint, joint_inputs, *args, num_fwd_outputs=num_fwd_outputs, **kwargs)
        # the forward's outputs from here on are saved for the backward, never seen by the user
        # (lowering may let them share memory, see lowerings._identity)
        fw.meta["pydynamo_saved_from"] = num_fwd_outputs
        if wanted(fw):
            channels_last_training(fw, bw, num_fwd_outputs)
        return fw, bw
    return partition


__all__ = ["channels_last_convolutions", "channels_last_training", "partition_with_layouts", "wanted"]
