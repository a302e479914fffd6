"""GraphLowering: walks an ATen FX graph once and turns it into an ordered list of *items*:
``ComputedBuffer`` (work for generated kernels), ``FallbackOp`` (an ATen call made by the
wrapper) and ``ViewOp`` (a view replayed on a real tensor, free).

Pointwise values stay lazy and are inlined into their users; a value becomes a buffer only
when something needs memory: a reduction, an ATen fallback, a graph output, or a pointwise
value so widely used that recomputing it would cost more reads than storing it.
"""
import math
import operator
import re

import torch
from torch.fx.node import map_arg

from .ir import (Buffer, ComputedBuffer, FallbackBuffer, InputBuffer, Node, Pointwise, Reduction,
                 Unlowerable, View, contiguous_strides)
from .lowerings import LOWERINGS, reads_of

aten = torch.ops.aten

# A pointwise value with u > 1 users is stored rather than recomputed in each user when that
# reads less: recomputing reads its r buffers u times, storing writes once and reads u times, so
# store when (u - 1) * r > u + REALIZE_READS - 1 (at u = 2: r >= 4); or when it inlines more than
# REALIZE_COST ops. A residual stream x + f(x) + g(..) is the case in point: left lazy, every
# layer's LayerNorm would re-add all the layers before it.
REALIZE_READS = 2
REALIZE_COST = 30


# ops that only reindex: a use through them is a use of what they view
VIEW_OPS = {aten.view.default, aten._unsafe_view.default, aten.reshape.default, aten.permute.default,
            aten.transpose.int, aten.t.default, aten.expand.default, aten.unsqueeze.default,
            aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default, aten.slice.Tensor, aten.select.int,
            aten.alias.default, aten.detach.default}


def unfuse_bias(gm):
    """Convolutions' biases as adds (see _unfuse_conv_bias), and ``addmm(bias, a, b)`` ->
    ``mm(a, b) + bias`` in float32, where every use of the result
    (through views) is a pointwise op we lower: the add then fuses into that kernel, and cuBLAS's
    float32 GEMM with a bias epilogue can be much slower than without (a GPT's fc2 on the H100: 125
    against 103 us). In bfloat16 the epilogue measured as fast or a little faster (the bf16 MLP of
    bench_triton: 0.98-1.00 of Inductor's time with addmm, 1.01-1.02 without), so addmm stays; as
    it does where the result is saved or feeds ATen. In place on gm."""
    graph = gm.graph

    def pointwise_uses(node, lowered=False):
        """Every use (through views) is a pointwise op we lower (``lowered``: any op we lower)."""
        for user in node.users:
            if user.op != "call_function":
                return False
            if user.target in VIEW_OPS:
                if not pointwise_uses(user, lowered):
                    return False
            elif not (isinstance(user.target, torch._ops.OpOverload) and user.target in LOWERINGS
                      and (lowered or torch.Tag.pointwise in user.target.tags)):
                return False
        return True

    changed = False
    for node in list(graph.nodes):
        if node.op == "call_function" and node.target is aten.convolution.default and len(node.args) == 9 \
                and not node.kwargs and isinstance(node.args[2], torch.fx.Node) and node.users \
                and pointwise_uses(node, lowered=True):
            changed |= _unfuse_conv_bias(graph, node)
            continue
        if node.op != "call_function" or node.target is not aten.addmm.default or node.kwargs \
                or len(node.args) != 3 or not node.users or not pointwise_uses(node):
            continue
        bias, a, b = node.args
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor) or val.dtype != torch.float32 or not isinstance(bias, torch.fx.Node) or \
                getattr(bias.meta.get("val"), "dtype", None) != val.dtype:
            continue
        with graph.inserting_before(node):
            mm = graph.call_function(aten.mm.default, (a, b))
            mm.meta.update(node.meta)
            add = graph.call_function(aten.add.Tensor, (mm, bias))
            add.meta.update(node.meta)
        node.replace_all_uses_with(add)
        graph.erase_node(node)
        changed = True
    if changed:
        gm.recompile()
    return gm


def _unfuse_conv_bias(graph, node):
    """``convolution(x, w, b)`` -> ``convolution(x, w, None) + b`` viewed as [C, 1, ...]: ATen adds
    a convolution's bias with a kernel of its own after cuDNN's (EfficientNet's squeeze-excite
    convolutions: 32 launches a step); the add then fuses into the pointwise op after it. The
    same rounding as eager: the convolution's result is rounded to its dtype before the add."""
    bias = node.args[2]
    val, bval = node.meta.get("val"), bias.meta.get("val")
    if not isinstance(val, torch.Tensor) or not isinstance(bval, torch.Tensor) or bval.dim() != 1 \
            or val.dim() < 3 or bval.shape[0] != val.shape[1] or bval.dtype != val.dtype:
        return False
    shape = [bval.shape[0]] + [1] * (val.dim() - 2)
    with graph.inserting_before(node):
        conv = graph.call_function(aten.convolution.default, (node.args[0], node.args[1], None) + tuple(node.args[3:]))
        conv.meta.update(node.meta)
        view = graph.call_function(aten.view.default, (bias, shape))
        view.meta["val"] = bval.view(shape)
        add = graph.call_function(aten.add.Tensor, (conv, view))
        add.meta.update(node.meta)
    node.replace_all_uses_with(add)
    graph.erase_node(node)
    return True


class TensorRef:
    """A wrapper variable standing for a tensor inside a FallbackOp's arguments."""

    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return self.name


class FallbackOp:
    """``name = op(*args, **kwargs)`` in the wrapper; ``outputs`` are the FallbackBuffers
    (``name[i]`` for ops returning several tensors)."""

    def __init__(self, name, op, args, kwargs, outputs, aliasing):
        self.name, self.op, self.args, self.kwargs = name, op, args, kwargs
        self.outputs, self.aliasing = outputs, aliasing
        self.reads = set()
        map_aggregate(args, lambda a: self.reads.add(a.name) if isinstance(a, TensorRef) else None)
        map_aggregate(kwargs, lambda a: self.reads.add(a.name) if isinstance(a, TensorRef) else None)


class ViewOp:
    """``name = op(base, *args, **kwargs)``: a view of a real tensor, for fallbacks and outputs."""

    def __init__(self, name, base, op, args, kwargs):
        self.name, self.base, self.op, self.args, self.kwargs = name, base, op, args, kwargs
        self.reads = {base}


def _origins(node, args):
    """The ops a lowered value computes, for kernel names: the node's op (before AOTAutograd's
    decompositions: native_layer_norm_backward rather than its sub and mul) and what it inlines
    of its lazy arguments (a buffer in memory is a load, not part of the value)."""
    op = node.meta.get("original_aten") or node.target
    name = getattr(getattr(op, "overloadpacket", op), "__name__", str(op)).strip("_")
    out = {name}
    map_aggregate(args, lambda a: out.update(getattr(a, "origins", ())) if isinstance(a, (Pointwise, View)) else None)
    return frozenset(out)


# names the generated module defines or imports, and the patterns of the ones it makes up: a
# graph input named like one (a saved tensor called "empty_strided", a placeholder "buf0") is
# renamed, or it would shadow it
_WRAPPER_NAMES = {"torch", "triton", "tl", "libdevice", "empty_strided", "Launch", "launch_stream",
                  "precompile", "restride", "index_put_accumulate", "aten", "prims", "DEVICE", "make", "call",
                  "args", "stream", "fallback", "constants", "aligned", "sum_op", "prod_op", "max_op", "min_op",
                  "max_nan", "min_nan", "rsqrt_ftz", "rand_uniform"}
_MADE_UP = re.compile(r"(buf|view|const|launch_|in_)\d+(_\d+)?$|triton_")


def _input_name(name):
    return f"in_{name}" if name in _WRAPPER_NAMES or _MADE_UP.match(name) else name


def map_aggregate(a, fn):
    if isinstance(a, (list, tuple)):
        return type(a)(map_aggregate(x, fn) for x in a)
    if isinstance(a, dict):
        return {k: map_aggregate(v, fn) for k, v in a.items()}
    return fn(a)


def dense_strides(shape, stride):
    """``stride`` if it lays ``shape`` out densely (some permutation of row-major), else None."""
    dims = sorted((d for d in range(len(shape)) if shape[d] != 1), key=lambda d: stride[d])
    acc = 1
    for d in dims:
        if stride[d] != acc:
            return None
        acc *= shape[d]
    return tuple(stride)


def _root(value):
    """What a chain of views reads: a Buffer, or a lazy value."""
    while isinstance(value, View):
        value = value.base
    return value


def _given_to_aten(node):
    """Whether an op we do not lower (a matmul) takes ``node``'s value, through views: the value
    is then stored whatever its other users do, and they had better read it than recompute it
    from its inputs (ViT's training: the bias gradient of a GELU backward summed its two 74 MB
    inputs again beside the kernel storing it for the weight gradient's matmul)."""
    for user in node.users:
        if user.op != "call_function":
            continue
        if user.target in VIEW_OPS:
            if _given_to_aten(user):
                return True
        elif user.target not in LOWERINGS:
            return True
    return False


def _kernel_device(gm):
    """The device the generated kernels run on: the GPU the tensor inputs are on. CPU tensors
    beside them (a CPU ``cache_position``, ``inv_freq``, a step counter) are read by ATen ops
    (``_lowerable``), or, 0-d, copied to it (``_on_device``); inputs on two GPUs are refused."""
    devices = []
    for node in gm.graph.nodes:
        val = node.meta.get("val") if node.op == "placeholder" else None
        if isinstance(val, torch.Tensor) and val.device not in devices:
            devices.append(val.device)
    gpus = [d for d in devices if d.type != "cpu"]
    if len(gpus) > 1:
        raise NotImplementedError(f"inputs on several GPUs ({', '.join(map(str, gpus))})")
    return gpus[0] if gpus else (devices[0] if devices else None)


class GraphLowering:
    def __init__(self, gm):
        self.gm = gm
        self.items = []          # ComputedBuffer | FallbackOp | ViewOp, in execution order
        self.inputs = []         # InputBuffer per placeholder
        self.constants = []      # (InputBuffer, tensor) for get_attr tensors
        self.outputs = []        # wrapper expressions for the graph's outputs
        self.device = None
        self.env = {}
        self._realized = {}      # id(lazy value) -> ComputedBuffer
        self._views = {}         # id(View) -> wrapper name
        self._numel = {}         # buffer name -> its number of elements
        self._count = 0
        self._origins = frozenset()  # names of the ops the value being lowered computes
        self._seeds = None       # (buffer of per-call random seeds, node -> its seed's position)
        self._cpu_scalars = {}   # id(InputBuffer) -> [0-d CPU input, its copy on the device or None]
        # the graph's writes into its inputs (AOTAutograd's kept input mutations: a batch norm's
        # running statistics): ComputedBuffer name -> the InputBuffer whose memory takes its value
        self.mutations = {}
        # nodes the caller sees as outputs: a forward's outputs from pydynamo_saved_from on are
        # only saved for the backward (layout.partition_with_layouts)
        out = next(n for n in reversed(gm.graph.nodes) if n.op == "output").args[0]
        out = out if isinstance(out, (list, tuple)) else [out]
        self.user_outputs = set(out[:gm.meta.get("pydynamo_saved_from", len(out))])
        self.user_output_values = set()  # ids of those nodes' values (lazy and stored)

    def new_name(self, prefix="buf"):
        self._count += 1
        return f"{prefix}{self._count - 1}"

    def run(self):
        self.device = _kernel_device(self.gm)
        for node in self.gm.graph.nodes:
            if node.op == "placeholder":
                self.env[node] = self.input(node, node.name)
                self.inputs.append(self.env[node])
            elif node.op == "get_attr":
                value = getattr(self.gm, node.target)
                if isinstance(value, torch.nn.Module):  # a higher-order op's body: passed to it as is
                    ref = TensorRef(self.new_name("const"))
                    self.constants.append((ref, value))
                    self.env[node] = ref
                    continue
                buf = self.input(node, self.new_name("const"), value)
                self.constants.append((buf, value))
                self.env[node] = buf
            elif node.op == "call_function":
                self.env[node] = self.lower(node)
                if node in self.user_outputs:
                    self.user_output_values |= {id(self.env[node]), id(self.lookup(node))}
            elif node.op == "output":
                outs = node.args[0]
                outs = outs if isinstance(outs, (list, tuple)) else [outs]
                self.outputs = [self.output(a) for a in outs]
            else:
                raise NotImplementedError(node.op)
        return self

    def input(self, node, name, value=None):
        val = value if value is not None else node.meta.get("val")
        if isinstance(val, torch.ScriptObject) or type(val).__name__ == "FakeScriptObject":
            return TensorRef(_input_name(name))  # an opaque object (DTensor's process group): passed to ATen calls
        if not isinstance(val, torch.Tensor) or val.layout != torch.strided:
            raise NotImplementedError(f"input {name} is not a strided tensor")
        if self.device is None:
            self.device = val.device
        self._numel[_input_name(name)] = val.numel()
        buf = InputBuffer(_input_name(name), val.shape, val.stride(), val.dtype, val.device)
        if val.device != self.device and val.dim() == 0 and val.device.type == "cpu":
            self._cpu_scalars[id(buf)] = [buf, None]  # a CPU scalar beside GPU tensors (a step count)
        return buf

    def _on_device(self, value):
        """A 0-d CPU input as an op on the kernels' device reads it: copied to that device once
        per call (an ATen copy; the same values and type promotion as eager's CPU 0-d operand),
        so the op still fuses into a kernel. Anything else is itself."""
        entry = self._cpu_scalars.get(id(value))
        if entry is None:
            return value
        if entry[1] is None:
            name = self.new_name()
            val = torch.empty((), dtype=value.dtype, device=self.device)
            out = self._fallback_out(name, val)
            item = FallbackOp(name, aten._to_copy.default, [TensorRef(value.name)], {"device": self.device}, [out], False)
            item.multi = False
            self.items.append(item)
            entry[1] = out
        return entry[1]

    def lookup(self, n):
        v = self.env[n]
        return self._realized.get(id(v), v)

    def lower(self, node):
        args = map_arg(node.args, self.lookup)
        kwargs = map_arg(node.kwargs, self.lookup)
        val = node.meta.get("val")
        if self._cpu_scalars and all(isinstance(v, torch.Tensor) and v.device == self.device
                                     for v in (val if isinstance(val, (list, tuple)) else [val])):
            args, kwargs = map_aggregate(args, self._on_device), map_aggregate(kwargs, self._on_device)
        if isinstance(val, torch.Tensor) and val.numel() == 0 and isinstance(node.target, torch._ops.OpOverload) \
                and not node.target._schema.is_mutable:
            # no elements to compute: the result is an allocation
            return self.call(aten.empty_strided.default, [list(val.shape), list(val.stride())],
                             {"dtype": val.dtype, "device": val.device}, val)
        fn = LOWERINGS.get(node.target)
        if fn is not None and self._lowerable(node, args, kwargs):
            self._origins = _origins(node, (args, kwargs))
            try:
                value = fn(self, node, *args, **kwargs)
                if value is not None:
                    map_aggregate(value, self._label)
                    value = self._maybe_realize(node, value)
                    if isinstance(value, Pointwise) and any(u.op == "output" for u in node.users):
                        # a graph output (a tensor saved for the backward) is stored where it
                        # is computed, in its producer's kernel, not by one kernel of them all
                        # at the end (hf-gpt2: 13 outputs, 3.6 s to compile of 12.5)
                        value = self.realize(value, node)
                    return value
            except Unlowerable:
                pass
            finally:
                self._origins = frozenset()  # buffers realized later (for outputs) keep their own
        return self.fallback(node, args, kwargs)

    def _higher_order(self, node, args, kwargs):
        """A higher-order op (cond, while_loop, scan, map, flex_attention...) of an ATen graph:
        called as is by the wrapper, its bodies (graph modules) passed as constants, its
        tensors as real tensors. Its outputs may be its inputs (an aliasing op, for the buffer
        planning)."""
        nodes = {id(self.lookup(n)): n for n in node.all_input_nodes}

        def ref(a):
            if isinstance(a, Node):
                return TensorRef(self.as_tensor(a, nodes.get(id(a)), exact=True))
            return a
        args, kwargs = map_aggregate(args, ref), map_aggregate(kwargs, ref)
        name, val = self.new_name(), node.meta.get("val")
        multi = isinstance(val, (list, tuple))
        outs = [self._fallback_out(f"{name}_{i}", v) for i, v in enumerate(val)] if multi else [self._fallback_out(name, val)]
        item = FallbackOp(name, node.target, args, kwargs, outs, True)
        item.multi = multi
        self.items.append(item)
        return outs if multi else outs[0]

    def _label(self, value):
        if isinstance(value, Node) and not isinstance(value, (InputBuffer, FallbackBuffer)):
            value.origins = getattr(value, "origins", frozenset()) | self._origins
        return value

    def _lowerable(self, node, args, kwargs):
        """Only tensors on the graph's device, with elements, reach our kernels."""
        if node.target is operator.getitem:
            return True
        val = node.meta.get("val")
        vals = val if isinstance(val, (list, tuple)) else [val]
        bufs = []
        map_aggregate((args, kwargs), lambda a: bufs.append(a) if isinstance(a, Buffer) else None)
        return all(isinstance(v, torch.Tensor) and v.numel() > 0 and v.device == self.device for v in vals) and \
            all(b.device == self.device for b in bufs)

    def _maybe_realize(self, node, value):
        users = len(node.users)
        if isinstance(value, Pointwise) and users > 1 and (
                (users - 1) * self._big_reads(value) > users + REALIZE_READS - 1 or value.cost > REALIZE_COST):
            return self.realize(value, node)
        if isinstance(value, (Pointwise, View)) and not isinstance(_root(value), Buffer) and users > 1 \
                and self._big_reads(value) > 1 and _given_to_aten(node):
            return self.realize(value, node)
        return value

    def _big_reads(self, value):
        """How many of the buffers ``value`` reads cost memory traffic to read again: those of at
        least 1/8 of its elements. A batch norm's per-channel mean, rstd, weight and bias are
        read from cache (a bf16 batch norm's backward stored its fp32 normalized input, 2x the
        input's bytes, because they counted)."""
        n = math.prod(value.shape)
        return sum(1 for name in reads_of(value) if self._numel.get(name, n) * 8 >= n)

    def realize(self, value, node=None, val=None, exact=False):
        """The value as a Buffer, adding a ComputedBuffer to the items if it is lazy, laid out
        as the traced tensor (``val``, or ``node``'s) was where that is dense. ``exact``: a value
        already stored in another layout is copied into that one, for ATen calls whose result
        depends on its strides (a ``view`` or ``as_strided`` replayed on it)."""
        if val is None and node is not None:
            val = node.meta.get("val")
        want = None
        if isinstance(val, torch.Tensor) and tuple(val.shape) == tuple(value.shape):
            want = dense_strides(value.shape, val.stride())
        buf = value if isinstance(value, Buffer) else self._realized.get(id(value))
        if buf is not None:
            if not exact or not isinstance(buf, ComputedBuffer) or want is None or tuple(buf.stride) == want:
                return buf
            copy = self._realized.get((id(buf), want))
            if copy is None:
                body = Pointwise(buf.shape, buf.dtype, buf.load)
                body.reads = frozenset([buf.name])
                copy = self._realized[(id(buf), want)] = self._store(body, want)
            return copy
        if isinstance(value, View):
            value = Pointwise(value.shape, value.dtype, value.load)
        buf = self._store(value, want or contiguous_strides(value.shape))
        self._realized[id(value)] = buf
        return buf

    def _store(self, value, stride):
        buf = ComputedBuffer(self.new_name(), value, stride, self.device)
        self._numel[buf.name] = math.prod(value.shape)
        buf.origins = getattr(value, "origins", frozenset()) | self._origins
        self.items.append(buf)
        return buf

    def as_tensor(self, value, node=None, val=None, exact=False):
        """Name of a wrapper variable holding ``value`` as a real tensor (laid out as ``val``, or
        ``node``'s traced tensor, was; see realize() for ``exact``)."""
        if isinstance(value, View):
            if id(value) not in self._views:
                base = self.as_tensor(value.base, val=value.base_val, exact=True)
                op, args, kwargs = value.aten
                name = self.new_name("view")
                self.items.append(ViewOp(name, base, op, args, kwargs))
                self._views[id(value)] = name
            return self._views[id(value)]
        return self.realize(value, node, val, exact).name

    def copy_into_input(self, node, dst, src):
        """``aten.copy_(dst, src)`` with ``dst`` a graph input (AOTAutograd keeps an input's
        mutation in the graph as one, at its end): a buffer holding src's values in dst's layout,
        recorded in ``self.mutations``. The wrapper has the kernel that computes it store it
        into dst's memory where no later item reads dst; otherwise it copies it over at the end
        of the call (WrapperCodegen._into_inputs)."""
        if not isinstance(dst, InputBuffer) or any(d.name == dst.name for d in self.mutations.values()):
            raise NotImplementedError("a copy_ into something other than a graph input, or twice into one")
        value = LOWERINGS[aten.copy.default](self, node, dst, src)
        stride = dense_strides(dst.shape, dst.stride) or contiguous_strides(dst.shape)
        buf = self._store(value, stride)
        self.mutations[buf.name] = dst
        return buf

    def fallback(self, node, args, kwargs):
        op = node.target
        if isinstance(op, torch._ops.HigherOrderOperator):
            return self._higher_order(node, args, kwargs)
        if not isinstance(op, torch._ops.OpOverload):
            raise NotImplementedError(f"call to {op} in an ATen graph")
        if op._schema.is_mutable:
            # values are computed lazily, where first needed: one reading what this op writes
            # could be computed after it. AOTAutograd's graphs are functional; others run with ATen
            raise NotImplementedError(f"in-place op {op} in the graph")
        nodes = {id(a): a for a in node.all_input_nodes}
        lookup_node = {id(self.lookup(n)): n for n in nodes.values()}

        # an op returning a view of its argument (as_strided, a view that is not lowered) sees
        # the argument's strides: it gets them as traced
        aliasing = any(r.alias_info is not None for r in op._schema.returns)

        def ref(a):
            if isinstance(a, Node):
                return TensorRef(self.as_tensor(a, lookup_node.get(id(a)), exact=aliasing))
            return a
        args, kwargs = map_aggregate(args, ref), map_aggregate(kwargs, ref)
        name = self.new_name()
        val = node.meta.get("val")
        if isinstance(val, (list, tuple)):
            outs = [self._fallback_out(f"{name}_{i}", v) for i, v in enumerate(val)]
            result = outs
        else:
            outs = [self._fallback_out(name, val)]
            result = outs[0]
        item = FallbackOp(name, op, args, kwargs, outs, aliasing)
        item.multi = isinstance(val, (list, tuple))
        self.items.append(item)
        return result

    def call(self, op, args, kwargs, val):
        """A FallbackBuffer holding ``op(*args, **kwargs)`` (no tensor arguments), called by the
        wrapper at this point; its traced result is ``val``."""
        name = self.new_name()
        out = self._fallback_out(name, val)
        item = FallbackOp(name, op, args, kwargs, [out], False)
        item.multi = False
        self.items.append(item)
        return out

    def seed(self, node):
        """(buffer, position) of the random seed of ``node`` (a random op): one ``randint`` per
        call of the graph draws a seed for each such op from torch's generator, so every call
        gets new randomness and ``torch.manual_seed`` reproduces it."""
        if self._seeds is None:
            nodes = [n for n in self.gm.graph.nodes if n.target in (aten.native_dropout.default, aten.rand_like.default)]
            val = torch.empty(len(nodes), dtype=torch.int64, device=self.device)
            buf = self.call(aten.randint.default, [2**63 - 1, [len(nodes)]],
                            {"dtype": torch.int64, "device": self.device}, val)
            self.items.insert(0, self.items.pop())  # first: every kernel may read it
            self._seeds = buf, {n: i for i, n in enumerate(nodes)}
        buf, at = self._seeds
        return buf, at[node]

    def _fallback_out(self, name, val):
        if isinstance(val, torch.Tensor):
            self._numel[name] = val.numel()
            return FallbackBuffer(name, val.shape, val.stride(), val.dtype, val.device)
        if isinstance(val, torch.ScriptObject):  # an opaque handle (a profiler range's): a wrapper variable
            return TensorRef(name)
        return val  # a static int or None: a Python constant

    def output(self, a):
        if isinstance(a, torch.fx.Node):
            v = self.lookup(a)
            if isinstance(v, (Node,)):
                return self.as_tensor(v, a)
            if isinstance(v, (list, tuple)):
                raise NotImplementedError("list output")
            return repr(v)
        return repr(a)


__all__ = ["GraphLowering", "FallbackOp", "ViewOp", "TensorRef", "Reduction", "Pointwise"]
