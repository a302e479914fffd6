"""Higher-order operators: ``torch.cond``, ``while_loop``, ``scan``, ``associative_scan`` and
``control_flow.map``, captured as torch.compile captures them: each function argument (a branch,
a loop's condition and body, a combine function) is traced by the same translator into a
subgraph of its own (subgraph.Region), and the frame's graph gets one node of the operator torch
defines (``torch.ops.higher_order.cond`` and friends) whose function arguments are ``get_attr``
nodes of those subgraphs. AOTAutograd and Inductor then lower the node as they lower
torch.compile's graphs; the ``eager`` backend runs the operator's own implementation.

A body is traced with stand-ins: fresh fake tensors with the operands' metadata (a slice of
them for scan and map), as torch traces it. What a body reads from outside (a closure, a
parameter, a global) becomes an extra operand of the node (``lifted``); the bodies of one
operator get the union of their lifted values, in one order. The guards of what a body read
join the frame's guards (both branches of a cond are traced, so both are guarded).

A body is captured whole or not at all: if any of it cannot be traced (a graph break inside,
a side effect, a Python value returned), the whole call is refused with the body's reason and
line, and the frame's graph breaks at the call (under ``fullgraph=True`` that is the error).
"""
import inspect
import operator
import types

import torch
import torch.fx

from ..exc import Unsupported
from .base import ObjectVariable
from .subgraph import Region, _placeholder

_PUBLIC = None


def _public():
    """{public function: handler}; imported on first use (torch's control-flow modules are slow
    to import)."""
    global _PUBLIC
    if _PUBLIC is None:
        from functorch.experimental import control_flow
        from torch._higher_order_ops.associative_scan import associative_scan
        from torch._higher_order_ops.map import map as hop_map
        from torch._higher_order_ops.scan import scan
        from torch._higher_order_ops.while_loop import while_loop
        _PUBLIC = {torch.cond: _cond, while_loop: _while_loop, scan: _scan,
                   associative_scan: _associative_scan, hop_map: _map}
        if control_flow.map is not hop_map:
            _PUBLIC[control_flow.map] = _map
        if hasattr(torch, "_higher_order_ops") and getattr(torch._higher_order_ops, "cond", None) is not None:
            _PUBLIC.setdefault(torch._higher_order_ops.cond, _cond)
    return _PUBLIC


def is_higher_order(value):
    """By identity (hashing a user's object would run its ``__hash__``); all are functions."""
    if type(value) is not types.FunctionType:
        return False
    return any(value is fn for fn in _public())


class HigherOrderVariable(ObjectVariable):
    """A public control-flow function of torch (``torch.cond``...)."""

    def call_function(self, tx, args, kwargs):
        return _public()[self.value](tx, bind_call(self.value, args, kwargs, self.value.__name__))

    def _repr_value(self):
        return self.value.__name__


def bind_call(fn, args, kwargs, what):
    """The call's arguments bound by ``fn``'s own signature, defaults applied, as trackers: every
    form Python accepts is honoured; one it rejects runs natively (and raises as eager)."""
    try:
        bound = inspect.signature(fn).bind(*args, **kwargs)
    except TypeError as e:
        raise Unsupported(f"higher-order op {what}() called with {e}") from None
    bound.apply_defaults()
    return {k: _as_tracker(v) for k, v in bound.arguments.items()}


def _as_tracker(value):
    """A bound argument as a tracker: a default value, or a ``*args`` tuple of trackers."""
    from .base import VariableTracker
    from .builder import wrap_constant
    from .lists import TupleVariable
    if isinstance(value, VariableTracker):
        return value
    if isinstance(value, tuple) and all(isinstance(v, VariableTracker) for v in value):
        return TupleVariable(list(value))
    return wrap_constant(value)


# ---- trackers as trees ------------------------------------------------------------------------

def _flatten(var):
    """(leaves, rebuild): the leaves of a tuple/list/dict tree of trackers, and a function
    making the same tree of new leaves."""
    from .constant import ConstantVariable
    from .dicts import DictVariable
    from .lists import ListVariable, TupleVariable
    if type(var) in (TupleVariable, ListVariable):
        parts = [_flatten(v) for v in var.items]
        leaves = [leaf for p in parts for leaf in p[0]]

        def rebuild(new):
            it = iter(new)
            items = [p[1]([next(it) for _ in p[0]]) for p in parts]
            if isinstance(var, TupleVariable):
                out = TupleVariable(items, tuple_cls=var.tuple_cls)
                if hasattr(var, "cls_var"):
                    out.cls_var = var.cls_var
                return out
            return ListVariable(items)
        return leaves, rebuild
    if type(var) is DictVariable:
        keys = list(var.items)
        parts = [_flatten(var.items[k]) for k in keys]
        leaves = [leaf for p in parts for leaf in p[0]]

        def rebuild_dict(new):
            it = iter(new)
            return DictVariable({k: p[1]([next(it) for _ in p[0]]) for k, p in zip(keys, parts)})
        return leaves, rebuild_dict
    if isinstance(var, ConstantVariable) and var.value is None:
        return [], lambda new: var
    return [var], lambda new: new[0]


def _tensor_leaves(var, what):
    from .tensor import TensorVariable
    leaves, rebuild = _flatten(var)
    for leaf in leaves:
        if not isinstance(leaf, TensorVariable):
            raise Unsupported(f"higher-order op operands: {what} must be tensors (or tuples, lists, dicts of them), "
                              f"not {leaf}")
    return leaves, rebuild


# ---- bodies -----------------------------------------------------------------------------------

def _like(tx, fake, drop_first=False):
    """A fresh fake tensor with ``fake``'s metadata (without its first dimension)."""
    size, stride = fake.size(), fake.stride()
    if drop_first:
        size, stride = size[1:], stride[1:]
    with tx.output.fake_mode:
        t = torch.empty_strided(size, stride, dtype=fake.dtype, device=fake.device)
    if fake.requires_grad and (t.dtype.is_floating_point or t.dtype.is_complex):
        t.requires_grad_(True)
    return t


class Body:
    """One traced body: ``gm(*stand_ins, *lifted)`` returns the body's tensor leaves."""

    def __init__(self, gm, n_inputs, lifted, out_leaves, rebuild):
        self.gm, self.n_inputs, self.lifted = gm, n_inputs, lifted
        self.out_leaves, self.rebuild = out_leaves, rebuild


def _location(fn):
    code = getattr(getattr(fn, "value", None), "__code__", None)
    if code is None and hasattr(fn, "fn"):
        code = getattr(fn.fn, "__code__", None)
    return f" ({code.co_filename}:{code.co_firstlineno})" if code is not None else ""


def trace_body(tx, fn, examples, make_args, what, out_what=None, alias_ok=False):
    """Trace ``fn(*make_args(stand_in_trackers))`` into a Body. ``examples``: the fake values
    of the stand-ins. ``alias_ok``: the operator takes bodies that return their inputs
    (flex_attention's identity score_mod)."""
    from .tensor import TensorVariable
    try:
        with Region(tx, what) as region:
            nodes = [region.stand_in(v, f"arg{i}") for i, v in enumerate(examples)]
            args = make_args([TensorVariable(n, v) for n, v in zip(nodes, examples)])
            out = fn.call_function(tx, args, {})
            region.check()
            leaves, rebuild = _tensor_leaves(out, out_what or f"what {what} returns")
            outputs = [v.node for v in leaves] if alias_ok else _own_outputs(tx, region, nodes, leaves)
            gm, lifted = region.extract(nodes, outputs, what.replace(" ", "_"))
    except Unsupported as e:
        err = Unsupported(f"{what}{_location(fn)} cannot be captured whole (torch traces the whole "
                          f"body): {e.reason}")
        err.user_stack = list(e.user_stack)
        raise err from None
    return Body(gm, len(examples), lifted, leaves, rebuild)


def _own_outputs(tx, region, stand_ins, leaves):
    """The nodes a body returns. A body that returns one of its inputs, or a view of one, is
    refused, as torch refuses it ("higher order ops do not support aliasing")."""
    from torch.multiprocessing.reductions import StorageWeakRef
    made = set(region.nodes()) - set(stand_ins)
    inputs = {StorageWeakRef(n.meta["example_value"].untyped_storage()) for n in stand_ins}
    for node in made:
        for arg in node.all_input_nodes:
            if arg not in made and isinstance(arg.meta.get("example_value"), torch.Tensor):
                inputs.add(StorageWeakRef(arg.meta["example_value"].untyped_storage()))
    outputs = []
    for leaf in leaves:
        if leaf.node not in made or StorageWeakRef(leaf.example_value.untyped_storage()) in inputs:
            raise Unsupported("a body returns one of its inputs or a view of one (torch refuses the "
                              "aliasing: return a clone)")
        outputs.append(leaf.node)
    return outputs


def unify(bodies):
    """The bodies' modules, each taking ``(*stand_ins, *lifted)`` with one ``lifted`` for all
    (the union of what they read, in order)."""
    lifted = []
    for body in bodies:
        for node in body.lifted:
            if node not in lifted:
                lifted.append(node)
    return [_with_inputs(b, lifted) for b in bodies], lifted


def _with_inputs(body, lifted):
    old = body.gm.graph
    phs = [n for n in old.nodes if n.op == "placeholder"]
    own = dict(zip(body.lifted, phs[body.n_inputs:]))
    graph = torch.fx.Graph()
    env = {}
    for ph in phs[:body.n_inputs]:
        env[ph] = _placeholder(graph, ph, ph.name)
    for i, node in enumerate(lifted):
        if node in own:
            env[own[node]] = _placeholder(graph, own[node], own[node].name)
        else:
            _placeholder(graph, node, f"unused_{node.name}")
    for node in old.nodes:
        if node.op != "placeholder":
            env[node] = graph.node_copy(node, lambda n: env[n])
    gm = torch.fx.GraphModule(body.gm, graph, class_name=type(body.gm).__name__)
    return gm


def _single_output(gm):
    output = next(n for n in gm.graph.nodes if n.op == "output")
    output.args = (output.args[0][0],)
    gm.recompile()


# ---- the node ---------------------------------------------------------------------------------

def emit(tx, op, args, what, value=None):
    """One node ``op(*args)`` in the frame's graph (args: nodes, get_attr nodes, tuples of
    them, constants); its value computed by running ``op`` on the fake values, unless given.
    Returns the trackers of its result's items (a tuple or list of tensors)."""
    import contextlib
    out = tx.output
    if value is not None:
        node = out.graph.create_node("call_function", op, args, {})
        node.meta["example_value"] = value
        return _items(tx, node, value)

    def fake(n):
        if n.op == "get_attr":
            return out.subgraphs[n.target]
        return n.meta["example_value"]
    fake_args = torch.fx.node.map_arg(args, fake)
    try:
        with out.fake_mode, (torch._C._EnablePythonDispatcher() if out.shapes.used else contextlib.nullcontext()):
            value = op(*fake_args)
    except Exception as e:  # noqa: BLE001 - torch's own checks of the bodies (shapes, aliasing)
        raise Unsupported(f"higher-order op {what} failed on fake tensors: {type(e).__name__}: "
                          f"{str(e).splitlines()[0][:300] if str(e) else ''}") from None
    node = out.graph.create_node("call_function", op, args, {})
    node.meta["example_value"] = value
    return _items(tx, node, value)


def _items(tx, node, value):
    from .tensor import TensorVariable
    from .sym import SymNodeVariable
    items = []
    for i, v in enumerate(value):
        item = tx.output.graph.call_function(operator.getitem, (node, i))
        item.meta["example_value"] = v
        items.append(TensorVariable(item, v) if isinstance(v, torch.Tensor) else SymNodeVariable.create(item, v))
    return items


def _nodes(vars_):
    return tuple(v.node for v in vars_)


def _same_meta(a, b):
    return a.shape == b.shape and a.dtype == b.dtype and a.device == b.device


# ---- the operators ----------------------------------------------------------------------------

def _constant_int(var, what):
    if not var.is_python_constant():
        raise Unsupported(f"higher-order op argument {what} must be a constant")
    return var.as_python_constant()


def _cond(tx, a):
    from torch._higher_order_ops.cond import cond_op
    from .constant import ConstantVariable
    from .sym import SymNodeVariable
    from .tensor import TensorVariable
    pred, true_fn, false_fn, operands = a["pred"], a["true_fn"], a["false_fn"], a["operands"]
    leaves, rebuild = _tensor_leaves(operands, "torch.cond's operands")
    if isinstance(pred, ConstantVariable) and type(pred.value) is bool:
        # a known predicate: torch.compile also calls the branch (no cond in the graph)
        branch = true_fn if pred.value else false_fn
        return branch.call_function(tx, list(_unpack(rebuild(leaves))), {})
    if isinstance(pred, TensorVariable):
        if pred.example_value.numel() != 1:
            raise Unsupported("torch.cond's pred must be a one-element tensor (eager raises)")
    elif not isinstance(pred, SymNodeVariable):
        raise Unsupported(f"torch.cond's pred {pred} is neither a tensor, a bool nor a symbolic bool")
    examples = [_like(tx, v.example_value) for v in leaves]
    make = lambda stand: list(_unpack(rebuild(stand)))  # noqa: E731
    bodies = [trace_body(tx, true_fn, examples, make, "torch.cond's true_fn"),
              trace_body(tx, false_fn, examples, make, "torch.cond's false_fn")]
    _check_same_outputs(bodies, "torch.cond's branches")
    (t, f), lifted = unify(bodies)
    out = tx.output
    items = emit(tx, cond_op, (pred.node, out.install_subgraph("cond_true", t),
                               out.install_subgraph("cond_false", f), (*_nodes(leaves), *lifted)),
                 "torch.cond")
    return bodies[0].rebuild(items)


def _unpack(var):
    """Operands as the branch's arguments: ``branch(*operands)``."""
    return var.items if hasattr(var, "items") and isinstance(var.items, list) else [var]


def _check_same_outputs(bodies, what):
    first = bodies[0].out_leaves
    for body in bodies[1:]:
        if len(body.out_leaves) != len(first):
            raise Unsupported(f"higher-order op bodies: {what} return different numbers of tensors (torch raises)")


def _while_loop(tx, a):
    from torch._higher_order_ops.while_loop import while_loop_op
    cond_fn, body_fn, carried = a["cond_fn"], a["body_fn"], a["carried_inputs"]
    leaves, rebuild = _tensor_leaves(carried, "while_loop's carried_inputs")
    if not leaves:
        raise Unsupported("while_loop without carried inputs")
    examples = [_like(tx, v.example_value) for v in leaves]
    make = lambda stand: list(_unpack(rebuild(stand)))  # noqa: E731
    cond_body = trace_body(tx, cond_fn, examples, make, "while_loop's cond_fn")
    if len(cond_body.out_leaves) != 1:
        raise Unsupported("while_loop's cond_fn must return one boolean tensor")
    body = trace_body(tx, body_fn, examples, make, "while_loop's body_fn")
    if len(body.out_leaves) != len(leaves) or not all(
            _same_meta(o.example_value, i.example_value) for o, i in zip(body.out_leaves, leaves)):
        raise Unsupported("while_loop's body_fn must return tensors like its carried inputs "
                          "(same number, shapes, dtypes and devices; torch raises)")
    (c, b), lifted = unify([cond_body, body])
    _single_output(c)  # the condition returns its boolean itself, not a tuple
    out = tx.output
    items = emit(tx, while_loop_op, (out.install_subgraph("while_loop_cond_graph", c),
                                     out.install_subgraph("while_loop_body_graph", b),
                                     _nodes(leaves), tuple(lifted)), "while_loop")
    return rebuild(items)


# torch 2.13's scan moves the stacked outputs back to ``dim``; earlier ones leave them at 0
_SCAN_MOVES_YS_BACK = tuple(int(p) for p in torch.__version__.split(".")[:2]) >= (2, 13)


def _scan(tx, a):
    from torch._higher_order_ops.scan import scan_op
    from .lists import TupleVariable
    combine_fn, init, xs = a["combine_fn"], a["init"], a["xs"]
    dim = _constant_int(a["dim"], "scan's dim")
    reverse = _constant_int(a["reverse"], "scan's reverse")
    if type(dim) is not int or type(reverse) is not bool:
        raise Unsupported("scan's dim must be an int and reverse a bool (torch raises)")
    init_leaves, init_rebuild = _tensor_leaves(init, "scan's init")
    xs_leaves, xs_rebuild = _tensor_leaves(xs, "scan's xs")
    if not init_leaves or not xs_leaves:
        raise Unsupported("scan needs init and xs leaves (torch raises)")
    ndim = xs_leaves[0].example_value.dim()
    if not -ndim <= dim < ndim or any(x.example_value.dim() <= (dim % ndim) for x in xs_leaves):
        raise Unsupported("scan's dim is out of range for xs (torch raises)")
    dim %= ndim
    if dim and not _SCAN_MOVES_YS_BACK:
        raise Unsupported("scan over a dim other than 0 with this torch (its ys layout changed in 2.13)")
    if any(x.example_value.shape[dim] == 0 for x in xs_leaves):
        raise Unsupported("scan over an empty dimension (torch raises)")
    moved = [_call(tx, torch.movedim, x, dim, 0) if dim else x for x in xs_leaves]
    if reverse:
        moved = [_call(tx, torch.flip, x, [0]) for x in moved]
    n_init = len(init_leaves)
    examples = [_like(tx, v.example_value) for v in init_leaves] + \
        [_like(tx, v.example_value, drop_first=True) for v in moved]

    def make(stand):
        return [init_rebuild(stand[:n_init]), xs_rebuild(stand[n_init:])]
    body = trace_body(tx, combine_fn, examples, make, "scan's combine_fn")
    # combine_fn returns (next_carry, y): its carry like init, then the per-step outputs
    carry_leaves, _ = _flatten(_out_part(body, 0))
    if len(carry_leaves) != n_init or not all(_same_meta(o.example_value, i.example_value)
                                              for o, i in zip(carry_leaves, init_leaves)):
        raise Unsupported("scan's combine_fn must return (next_carry, y) with next_carry like init "
                          "(torch raises)")
    (gm,), lifted = unify([body])
    items = emit(tx, scan_op, (tx.output.install_subgraph("scan_combine_graph", gm), _nodes(init_leaves),
                               _nodes(moved), tuple(lifted)), "scan")
    carry, ys = items[:n_init], items[n_init:]
    if reverse:
        ys = [_call(tx, torch.flip, y, [0]) for y in ys]
    if dim:
        ys = [_call(tx, torch.movedim, y, 0, dim) if dim < y.example_value.dim() else y for y in ys]
    return TupleVariable([_out_rebuild(body, 0, carry), _out_rebuild(body, 1, ys)])


def _out_part(body, i):
    """Item ``i`` of what a (next_carry, y)-returning body returned, as traced."""
    return body.rebuild(body.out_leaves).items[i]


def _out_rebuild(body, i, new):
    _, rebuild = _flatten(_out_part(body, i))
    return rebuild(new)


def _call(tx, fn, *args):
    from .builder import wrap_constant
    wrapped = [a if hasattr(a, "node") else wrap_constant(a) for a in args]
    return tx.output.call_graph(tx, "call_function", fn, wrapped, {})


def _associative_scan(tx, a):
    from torch._higher_order_ops.associative_scan import associative_scan_op
    combine_fn, xs = a["combine_fn"], a["xs"]
    dim = _constant_int(a["dim"], "associative_scan's dim")
    reverse = _constant_int(a["reverse"], "associative_scan's reverse")
    mode = _constant_int(a["combine_mode"], "associative_scan's combine_mode")
    if type(dim) is not int or type(reverse) is not bool or mode not in ("pointwise", "generic"):
        raise Unsupported("associative_scan's dim, reverse or combine_mode is invalid (torch raises)")
    leaves, rebuild = _tensor_leaves(xs, "associative_scan's xs")
    if not leaves:
        raise Unsupported("associative_scan without xs leaves (torch raises)")
    if mode == "pointwise" and not all(x.example_value.device.type in ("cuda", "xpu") for x in leaves):
        raise Unsupported("associative_scan(combine_mode='pointwise') needs CUDA tensors (torch raises)")
    ndim = leaves[0].example_value.dim()
    if not -ndim <= dim < ndim:
        raise Unsupported("associative_scan's dim is out of range (torch raises)")
    dim %= ndim
    if any(x.example_value.dim() <= dim or x.example_value.shape[dim] == 0 for x in leaves):
        raise Unsupported("associative_scan's xs must have the scan dimension, not empty (torch raises)")
    moved = [_call(tx, torch.movedim, x, dim, 0) for x in leaves]
    if reverse:
        moved = [_call(tx, torch.flip, x, [0]) for x in moved]
    n = len(moved)
    # the combine function sees single elements (generic mode maps it over the scan dim with vmap)
    examples = [_like(tx, v.example_value, drop_first=True) for v in moved] * 2

    def make(stand):
        return [rebuild(stand[:n]), rebuild(stand[n:])]
    body = trace_body(tx, combine_fn, examples, make, "associative_scan's combine_fn")
    if len(body.out_leaves) != n:
        raise Unsupported("associative_scan's combine_fn must return a tree like xs (torch raises)")
    (gm,), lifted = unify([body])
    if mode == "generic":
        items = emit(tx, _GenericScan(), (tx.output.install_subgraph("associative_scan_combine_graph", gm),
                                          _nodes(moved), tuple(lifted)), "associative_scan")
    else:
        items = emit(tx, associative_scan_op, (tx.output.install_subgraph("associative_scan_combine_graph", gm),
                                               _nodes(moved), tuple(lifted)), "associative_scan")
    if reverse:
        items = [_call(tx, torch.flip, y, [0]) for y in items]
    items = [_call(tx, torch.movedim, y, 0, dim) for y in items]
    return rebuild(items)


class _GenericScan:
    """``associative_scan(combine_mode='generic')`` as eager runs it: torch's
    ``generic_associative_scan`` over the body mapped with vmap along dim 0."""

    __name__ = __qualname__ = "generic_associative_scan"

    def __call__(self, combine_gm, xs, additional):
        from torch._higher_order_ops.associative_scan import generic_associative_scan

        def flat(*args):
            return list(combine_gm(*args, *additional))
        mapped = torch.vmap(flat, in_dims=(0,) * (2 * len(xs)), out_dims=0)
        return tuple(generic_associative_scan(mapped, list(xs), additional_inputs=()))

    def __repr__(self):
        return "generic_associative_scan"


def _map(tx, a):
    from torch._higher_order_ops.map import map_impl
    f, xs, extra = a["f"], a["xs"], a["args"]
    xs_leaves, xs_rebuild = _tensor_leaves(xs, "map's xs")
    if not xs_leaves:
        raise Unsupported("map without xs (torch raises)")
    sizes = [x.example_value.shape[0] if x.example_value.dim() else None for x in xs_leaves]
    if any(s is None for s in sizes) or any(s != sizes[0] for s in sizes) or sizes[0] == 0:
        raise Unsupported("map's xs must share a nonzero leading dimension (torch raises)")
    arg_leaves, arg_rebuild = _tensor_leaves(extra, "map's extra arguments")
    n = len(xs_leaves)
    examples = [_like(tx, x.example_value, drop_first=True) for x in xs_leaves] + \
        [_like(tx, x.example_value) for x in arg_leaves]

    def make(stand):
        return [xs_rebuild(stand[:n]), *arg_rebuild(stand[n:]).items]
    body = trace_body(tx, f, examples, make, "map's f")
    (gm,), lifted = unify([body])
    items = emit(tx, map_impl, (tx.output.install_subgraph("map_body", gm), _nodes(xs_leaves),
                                (*_nodes(arg_leaves), *lifted)), "map")
    return body.rebuild(items)
