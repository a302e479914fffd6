"""DistributedDataParallel: the captured graph split at gradient-bucket boundaries.

DDP all-reduces gradients bucket by bucket, from autograd hooks that fire when a parameter's
gradient is ready. A graph compiled by AOTAutograd is one autograd node: every gradient of the
graph becomes ready when its whole backward has run, so no all-reduce could start before the end
of the backward. ``split_for_ddp`` cuts the forward graph into pieces whose parameters fill one
bucket each, walking the graph backwards (the order gradients become ready), with DDP's own sizes:
``bucket_bytes_cap`` of the module (``bucket_cap_mb``), and the smaller first bucket of c10d
(``dist._DEFAULT_FIRST_BUCKET_BYTES``). Each piece is compiled by the backend on its own and the
pieces are chained by an outer ``GraphModule``; so in backward, the last piece's gradients are
ready (and their all-reduce starts) while the earlier pieces' backward still runs.

It applies when a frame is compiled while a DDP forward runs (``DistributedDataParallel.
_get_active_ddp_module()``, set by DDP around its module's call) and ``config.optimize_ddp`` is
on. Splitting changes no result: each piece computes what its nodes computed in the one graph.
"""
import functools
import logging
import sys

import torch

from .. import config

log = logging.getLogger("pydynamo.ddp")


def active_ddp_module():
    """The DistributedDataParallel module whose forward runs now (DDP sets it around its
    wrapped module's call), or None."""
    mod = sys.modules.get("torch.nn.parallel.distributed")
    ddp_cls = getattr(mod, "DistributedDataParallel", None)
    get = getattr(ddp_cls, "_get_active_ddp_module", None)
    return get() if get is not None else None


def first_bucket_bytes(cap):
    """DDP's first bucket (c10d starts a small all-reduce early), never above ``cap``."""
    first = getattr(torch.distributed, "_DEFAULT_FIRST_BUCKET_BYTES", cap) \
        if torch.distributed.is_available() else cap
    return min(first, cap)


def ddp_aware(backend):
    """``backend``, splitting each graph for DDP's buckets when it is compiled inside a DDP
    forward and ``config.optimize_ddp`` is on; otherwise ``backend`` itself is called."""
    @functools.wraps(backend)
    def compile_graph(gm, example_inputs, **kwargs):
        ddp = active_ddp_module() if config.optimize_ddp else None
        if ddp is None:
            return backend(gm, example_inputs, **kwargs)
        cap = int(ddp.bucket_bytes_cap)
        return split_for_ddp(gm, example_inputs, backend, cap, first_bucket_bytes(cap), **kwargs)
    return compile_graph


class Bucket:
    def __init__(self):
        self.size = 0  # bytes of the trainable parameters its nodes use
        self.params = []  # their placeholder names, for logs and tests
        self.nodes = []  # in reverse graph order


def _trainable_params(gm, example_inputs):
    """placeholder node -> bytes, for the inputs DDP all-reduces: parameters that require grad
    and that DDP does not ignore (``_ddp_ignored``, set by ``parameters_and_buffers_to_ignore``)."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    out = {}
    for node, value in zip(placeholders, example_inputs):
        if isinstance(value, torch.nn.Parameter) and value.requires_grad and \
                not getattr(value, "_ddp_ignored", False):
            out[node] = value.untyped_storage().nbytes()
    return out


def _has_external_user(bucket):
    inside = set()
    for node in bucket.nodes:  # reverse order: a user inside the bucket was added before
        inside.add(node)
        if any(user not in inside for user in node.users):
            return True
    return False


def _cut_points(gm):
    """The nodes after which the graph may be cut: where the global state the graph switches
    (grad mode, autocast, inference mode, profiler ranges, SDPA backends; variables/ctx.py) is
    back to the state of the graph's entry. A piece compiled on its own must begin and end in
    that state: AOTAutograd traces each piece with the grad mode it is in, so a piece ending
    inside a ``no_grad`` block would drop the gradients of what it computed before it."""
    import operator
    grad_values = [n.args[0] for n in gm.graph.nodes
                   if n.op == "call_function" and n.target is torch._C._set_grad_enabled]
    entry_grad = grad_values[-1] if grad_values else None  # every graph ends in its entry state
    grad, depth, sdpa, out = entry_grad, 0, 0, set()
    for node in gm.graph.nodes:
        if node.op == "call_function":
            target = node.target
            name = getattr(target, "__name__", "") or str(target)
            module = getattr(target, "__module__", "") or ""
            if target is torch._C._set_grad_enabled:
                grad = node.args[0]
            elif name.startswith("_enter_") or name == "_record_function_enter_new" or \
                    "record_function_enter" in str(target):
                depth += 1
            elif name.startswith("_exit_") or name == "_record_function_exit" or \
                    "record_function_exit" in str(target):
                depth -= 1
            elif name == "_sdpa_kernel" and module.startswith("torch.nn.attention"):
                sdpa ^= 1  # set on entering the block, set back on leaving it
            elif target is not operator.getitem and module.startswith(("torch._C._autograd", "torch.autograd.grad_mode")):
                return set()  # some other switch of autograd state: no cut at all
        if grad == entry_grad and depth == 0 and not sdpa:
            out.add(node)
    return out


def bucket_nodes(gm, example_inputs, bucket_bytes_cap, first_bucket_cap):
    """The graph's nodes in buckets, first bucket first (in graph order), as DDP fills them:
    walking backwards, a bucket closes once its parameters reach the cap (the first one closed,
    the last in graph order, at ``first_bucket_cap``), at the next node, if some of its values
    are used outside it (a piece with no output would compute nothing)."""
    params = _trainable_params(gm, example_inputs)
    cut_after = _cut_points(gm)
    buckets = [Bucket()]
    counted = set()
    for node in reversed(gm.graph.nodes):
        if node.op in ("placeholder", "output"):
            continue
        current = buckets[0]
        cap = first_bucket_cap if len(buckets) == 1 else bucket_bytes_cap
        if current.size >= cap and node in cut_after and _has_external_user(current):
            buckets.insert(0, Bucket())
        for arg in node.all_input_nodes:
            if arg in params and arg not in counted:  # a parameter is in one bucket (DDP's)
                counted.add(arg)
                buckets[0].size += params[arg]
                buckets[0].params.append(arg.name)
        buckets[0].nodes.append(node)
    if len(buckets) > 1 and buckets[0].size == 0:  # a preamble without parameters
        buckets[1].nodes.extend(buckets.pop(0).nodes)
    return buckets


def split_for_ddp(gm, example_inputs, backend, bucket_bytes_cap, first_bucket_cap, **kwargs):
    """Compile ``gm`` as one backend call per DDP bucket (one call, unsplit, when all its
    parameters fit one bucket)."""
    sized, sizes = _with_size_inputs(gm)
    buckets = bucket_nodes(sized, example_inputs, bucket_bytes_cap, first_bucket_cap)
    if log.isEnabledFor(logging.DEBUG):
        log.debug("DDP buckets (cap %d bytes, first %d): %s", bucket_bytes_cap, first_bucket_cap,
                  [(b.size, b.params) for b in buckets])
    if len(buckets) == 1:
        return backend(gm, example_inputs, **kwargs)
    gm = sized
    partition = {node: i for i, b in enumerate(buckets) for node in b.nodes}
    from torch.fx.passes.split_module import split_module
    split = split_module(gm, None, lambda node: partition[node])
    _compile_pieces(gm, split, backend, kwargs)
    split.recompile()
    split._pydynamo_ddp_buckets = [list(b.params) for b in buckets]
    if not sizes:
        return split

    def with_sizes(*args):
        return split(*args, *[args[pos].size(dim) for pos, dim in sizes])
    with_sizes._pydynamo_ddp_buckets = split._pydynamo_ddp_buckets
    return with_sizes


def _with_size_inputs(gm):
    """(graph, sizes): ``gm`` itself and [] where no input has symbolic sizes; else a copy of it
    that also takes, as trailing inputs, each symbol of an input's sizes (``sizes``: the (input
    position, dim) it is read from). pydynamo's graphs read sizes off their tensors, and
    split_module must be able to hand each piece the symbols its inputs' sizes use, as graph
    inputs (torch.compile's graphs take them so)."""
    import sympy
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    defined = {v.node.expr for v in (n.meta.get("example_value") for n in placeholders)
               if isinstance(v, torch.SymInt)}
    wanted = []
    for pos, node in enumerate(placeholders):
        fake = node.meta.get("example_value")
        if not isinstance(fake, torch.Tensor):
            continue
        for dim, size in enumerate(fake.size()):
            if isinstance(size, torch.SymInt) and isinstance(size.node.expr, sympy.Symbol) \
                    and size.node.expr not in defined:
                defined.add(size.node.expr)
                wanted.append((pos, dim, size))
    if not wanted:
        return gm, []
    graph = torch.fx.Graph()
    env = {}
    out = graph.graph_copy(gm.graph, env)  # the output's value; its node is not copied
    last = [env[n] for n in placeholders][-1]
    with graph.inserting_after(last):
        for pos, dim, size in reversed(wanted):
            ph = graph.placeholder(f"size_{placeholders[pos].name}_{dim}")
            ph.meta["example_value"] = size
    graph.output(out)
    return torch.fx.GraphModule(gm, graph), [(pos, dim) for pos, dim, _ in wanted]


class _Piece(torch.nn.Module):
    """One compiled piece. Backends are given graphs that return a tuple; a piece with one
    output hands back the value itself, as split_module's caller expects."""

    def __init__(self, compiled, single):
        super().__init__()
        self.compiled, self.single = compiled, single

    def forward(self, *args):
        out = self.compiled(*args)
        return out[0] if self.single else out


def _compile_pieces(gm, split, backend, kwargs):
    """Compile each piece of ``split`` with ``backend``, in order. A piece's example inputs are
    fake tensors: the graph inputs' (from the trace) and, for values made by an earlier piece,
    what that piece's graph gives when run on fake tensors. Nothing runs on real data here (a
    piece may update a buffer in place)."""
    originals = {n.name: n for n in gm.graph.nodes if n.op == "placeholder"}
    fakes = [n.meta.get("example_value") for n in originals.values()]
    fake_mode = next((t.fake_mode for t in fakes if isinstance(t, torch._subclasses.FakeTensor)), None)
    if fake_mode is None:
        fake_mode = torch._subclasses.FakeTensorMode()
    env = {}
    for node in split.graph.nodes:
        if node.op == "placeholder":
            env[node] = originals[node.name].meta.get("example_value")
        elif node.op == "call_module":
            piece = getattr(split, node.target)
            args = [env[a] if isinstance(a, torch.fx.Node) else a for a in node.args]
            single = _returns_tuple(piece)
            for ph, value, arg in zip([n for n in piece.graph.nodes if n.op == "placeholder"], args, node.args):
                ph.meta["example_value"] = value
                source = originals.get(arg.name) if isinstance(arg, torch.fx.Node) and arg.op == "placeholder" else None
                ph.meta["pydynamo_static"] = bool(source is not None and source.meta.get("pydynamo_static"))
            with fake_mode:
                out = piece(*args)  # its outputs' metadata, for the pieces after it
            if single:
                out = out[0]
            compiled = backend(piece, args, **kwargs)
            split.delete_submodule(node.target)
            node.target = "compiled_" + node.target
            split.add_submodule(node.target, _Piece(compiled, single))
            env[node] = out
        elif node.op == "call_function":  # getitem of a piece's tuple
            args = [env[a] if isinstance(a, torch.fx.Node) else a for a in node.args]
            env[node] = node.target(*args, **node.kwargs)
        elif node.op in ("output", "get_attr"):  # (a region body split_module left unused here)
            pass
        else:
            raise AssertionError(f"unexpected node {node.op} in a DDP split graph")


def _returns_tuple(piece):
    """Make the piece's graph return a tuple (what AOTAutograd-based backends need); True if it
    returned a single value."""
    out = next(n for n in piece.graph.nodes if n.op == "output")
    if isinstance(out.args[0], (tuple, list)):
        return False
    out.args = ((out.args[0],),)
    piece.recompile()
    return True
