"""``torch.compiler.nested_compile_region``: a marked function's call becomes one
``invoke_subgraph`` node whose body is a subgraph, and calls that trace to the same subgraph
(a model's repeated blocks) share one body, so a backend compiles it once.

Each call is traced (subgraph.Region, with stand-ins for its tensor arguments), so what the body
read is guarded at every call as for any inlined call: a block whose Python state differs traces
to a different body, never reuses a wrong one. Bodies are shared when their graphs are equal,
node for node (ops, constants, the metadata of their inputs). A call whose body cannot be a
subgraph (a side effect, a graph break, a Python value returned) is inlined instead: the trace
restarts with that function inlined (InlineRegion), as if it were not marked.
"""
import torch
import torch.fx

from ..exc import Unsupported
from .higher_order import _flatten, _like, _own_outputs, emit
from .subgraph import Region


class InlineRegion(Exception):
    """Trace again, inlining the marked function of ``code`` (its region could not be traced)."""

    def __init__(self, code, exc):
        super().__init__(code)
        self.code, self.exc = code, exc


def marked_region(fn):
    """The function a nested_compile_region wrapper marks, or None."""
    inner = getattr(fn, "__marked_compile_region_fn__", None)
    while inner is not None and hasattr(inner, "__marked_compile_region_fn__"):
        inner = inner.__marked_compile_region_fn__
    return inner


def call_compile_region(tx, wrapper_var, inner, args, kwargs):
    from .functions import UserFunctionVariable
    src = wrapper_var.source
    from ..source import AttrSource
    fn_var = UserFunctionVariable(inner, AttrSource(src, "__marked_compile_region_fn__") if src is not None else None)
    if src is not None:
        tx.output.guards.ID_MATCH(fn_var.source, inner)
    if inner.__code__ in tx.output.inline_regions:
        return fn_var.call_function(tx, args, kwargs)
    try:
        return _trace_region(tx, fn_var, inner, args, kwargs)
    except Unsupported as e:
        raise InlineRegion(inner.__code__, e) from None


def _trace_region(tx, fn_var, inner, args, kwargs):
    from .lists import TupleVariable
    from .dicts import DictVariable
    from .tensor import TensorVariable
    leaves, rebuild = _flatten(TupleVariable([TupleVariable(list(args)), DictVariable(dict(kwargs))]))
    tensors = [v for v in leaves if isinstance(v, TensorVariable)]
    what = f"the nested compile region {inner.__qualname__}"
    with Region(tx, what) as region:
        stand = {}
        for i, v in enumerate(tensors):
            node = region.stand_in(_like(tx, v.example_value), f"arg{i}")
            stand[id(v)] = TensorVariable(node, node.meta["example_value"])
        new = rebuild([stand.get(id(v), v) for v in leaves])
        call_args, call_kwargs = new.items[0].items, new.items[1].items
        out = fn_var.call_function(tx, list(call_args), dict(call_kwargs))
        region.check()
        out_leaves, out_rebuild = _flatten(out)
        if not all(isinstance(v, TensorVariable) for v in out_leaves):
            raise Unsupported(f"{what} returns values other than tensors")
        nodes = [stand[id(v)].node for v in tensors]
        outputs = _own_outputs(tx, region, nodes, out_leaves)
        gm, lifted = region.extract(nodes, outputs, "nested_compile_region")
    name = _shared_body(tx, gm)
    operands = (*(v.node for v in tensors), *lifted)
    attr = tx.output.graph.get_attr(name)
    # the body's outputs as traced are the node's values (invoke_subgraph run on fake tensors
    # that require grad would trace its joint graph, for nothing)
    items = emit(tx, _invoke, (attr, name, *operands), what, tuple(v.example_value for v in out_leaves))
    return out_rebuild(items)


def _invoke(subgraph, identifier, *operands):
    """The node of a region: torch's ``invoke_subgraph`` where a backend traces the graph
    (AOTAutograd partitions and compiles each body once); run eagerly, the body itself (the
    operator would trace a joint graph at every call)."""
    from .checkpoint import _traced
    if _traced(operands):
        from torch._higher_order_ops.invoke_subgraph import invoke_subgraph
        return invoke_subgraph(subgraph, identifier, *operands)
    return subgraph(*operands)


_invoke.__name__ = _invoke.__qualname__ = "invoke_subgraph"


def _shared_body(tx, gm):
    """The attribute name of a body equal to ``gm`` installed before, or of ``gm`` installed now."""
    out = tx.output
    key = _signature(gm)
    name = out.region_bodies.get(key)
    if name is None:
        for i, ph in enumerate(n for n in gm.graph.nodes if n.op == "placeholder"):
            ph.name = ph.target = f"arg{i}"
        gm.recompile()
        node = out.install_subgraph("subgraph", gm)
        out.graph.erase_node(node)  # (install_subgraph's get_attr: each call makes its own)
        name = node.target
        out.region_bodies[key] = name
    return name


def _signature(gm):
    index = {}
    parts = []
    for i, node in enumerate(gm.graph.nodes):
        index[node] = i
        if node.op == "placeholder":
            v = node.meta.get("example_value")
            meta = (tuple(map(str, v.shape)), tuple(map(str, v.stride())), v.dtype, v.device, v.requires_grad) \
                if isinstance(v, torch.Tensor) else str(v)
            parts.append(("placeholder", meta))
            continue
        args = torch.fx.node.map_aggregate(node.args, lambda a: ("node", index[a]) if isinstance(a, torch.fx.Node) else a)
        kwargs = torch.fx.node.map_aggregate(node.kwargs, lambda a: ("node", index[a]) if isinstance(a, torch.fx.Node) else a)
        parts.append((node.op, node.target if node.op != "get_attr" else ("attr", node.target), _freeze(args), _freeze(kwargs)))
    return tuple(parts)


def _freeze(value):
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, *(_freeze(v) for v in value))
    if isinstance(value, dict):
        return ("dict", *((k, _freeze(v)) for k, v in value.items()))
    if isinstance(value, slice):
        return ("slice", _freeze(value.start), _freeze(value.stop), _freeze(value.step))
    try:
        hash(value)
    except TypeError:
        return ("id", id(value), type(value).__name__)
    return (type(value).__name__, value)
