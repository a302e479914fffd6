"""Regional compilation: a graph whose nested compile regions share bodies (variables/
compile_region.py) is compiled piece by piece, each distinct region body once.

A backend given the whole graph (Inductor through AOTAutograd) lowers every ``invoke_subgraph``
call site again, so a model of 24 equal blocks costs 24 blocks of backend time. Here the graph
is cut at its region calls (torch.fx's split_module, as the DDP split does): the code between
regions is one piece each, every region call a piece of its own, and the region pieces of one
body (same body, same input metadata) are compiled once and the compiled function reused at
each call site. Pieces are chained by an outer GraphModule; each piece compiled by AOTAutograd
is its own autograd node, so training works as with the DDP split. Nothing changes a result:
each piece computes what its nodes computed in the one graph.

It applies to the ``inductor`` and ``triton`` backends when some body is called at two sites
or more; other backends get the one graph, as torch.compile gives it.
"""
import functools
import logging

import torch

from .distributed import _compile_pieces

log = logging.getLogger("pydynamo.regions")

_LOWERING = ("inductor", "triton")  # the backends whose per-call-site lowering this saves


def _is_region_call(node):
    return node.op == "call_function" and getattr(node.target, "__name__", "") == "invoke_subgraph" \
        and len(node.args) >= 2 and isinstance(node.args[0], torch.fx.Node) and node.args[0].op == "get_attr"


def shared_regions(gm):
    """The region call nodes of ``gm`` whose body is called at two sites or more."""
    calls = [n for n in gm.graph.nodes if _is_region_call(n)]
    count = {}
    for n in calls:
        count[n.args[0].target] = count.get(n.args[0].target, 0) + 1
    return [n for n in calls if count[n.args[0].target] > 1]


def regions_aware(backend):
    """``backend``, compiling a graph with shared region bodies piece by piece."""
    from . import lookup_backend
    inner = getattr(backend, "func", backend)  # (a functools.partial with options)
    if not any(inner is lookup_backend(name) for name in _LOWERING):
        return backend  # other backends get the graph as torch.compile gives it

    @functools.wraps(backend)
    def compile_graph(gm, example_inputs, **kwargs):
        if not shared_regions(gm):
            return backend(gm, example_inputs, **kwargs)
        return split_at_regions(gm, backend, **kwargs)
    return compile_graph


def split_at_regions(gm, backend, **kwargs):
    partition, piece = {}, 0
    region_calls = set(shared_regions(gm))
    for node in gm.graph.nodes:
        if node.op in ("placeholder", "output"):
            continue
        if node in region_calls:
            piece += 1
            partition[node] = piece
            for user in node.users:  # its getitems go with it
                partition[user] = piece
            piece += 1
        elif node.op == "get_attr" and any(u in region_calls for u in node.users):
            partition[node] = piece + 1  # the body, with its call
        elif node not in partition:
            partition[node] = piece
    from torch.fx.passes.split_module import split_module
    split = split_module(gm, None, lambda node: partition[node])
    compiled = {}

    def once(piece_gm, example_inputs, **kw):
        key = _region_key(piece_gm, example_inputs)
        if key is None:
            return backend(piece_gm, example_inputs, **kw)
        if key not in compiled:
            compiled[key] = backend(piece_gm, example_inputs, **kw)
        return compiled[key]
    _compile_pieces(gm, split, once, kwargs)
    split.recompile()
    log.debug("regional compilation: %d pieces, %d region bodies compiled", piece + 1, len(compiled))
    split._pydynamo_region_bodies = len(compiled)
    return split


def _region_key(piece_gm, example_inputs):
    """(body code, input metadata) for a piece that is one region call; None for other pieces."""
    calls = [n for n in piece_gm.graph.nodes if n.op == "call_function" and _is_region_call(n)]
    if len(calls) != 1:
        return None
    call = calls[0]
    body = getattr(piece_gm, call.args[0].target)
    placeholders = [n for n in piece_gm.graph.nodes if n.op == "placeholder"]
    if list(call.args[2:]) != placeholders or len(piece_gm.graph.nodes) != len(placeholders) + 3 + len(call.users):
        return None  # not exactly body(*inputs) and its items
    meta = tuple((tuple(map(str, t.shape)), tuple(map(str, t.stride())), t.dtype, t.device, t.requires_grad)
                 if isinstance(t, torch.Tensor) else repr(t) for t in example_inputs)
    return body.code, meta, len(call.users)
