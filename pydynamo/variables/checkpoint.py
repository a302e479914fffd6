"""``torch.utils.checkpoint.checkpoint(fn, *args, use_reentrant=False, ...)`` captured in the
graph: ``fn`` is traced into a subgraph (subgraph.Region) and the frame's graph calls it through
one ``_CheckpointSite`` node, whose outputs are the tensors ``fn`` computed.

At run time the site calls torch's non-reentrant checkpoint on the subgraph, with the user's
``preserve_rng_state``, ``context_fn``, ``determinism_check``, ``debug`` and ``early_stop``:
exactly what eager does, the backward recomputing the subgraph. A backend that traces the graph
(AOTAutograd: ``aot_eager``, ``inductor``, ``triton``) meets the site on fake or functional
tensors; there it is torch's ``tag_activation_checkpoint`` higher-order op, as in
torch.compile's graphs, whose ops the partitioners recompute in the backward (selective
checkpointing through the ``context_fn`` of ``create_selective_checkpoint_contexts``).

Refused (the checkpoint call runs natively): ``use_reentrant=True`` and an omitted
``use_reentrant`` (the reentrant variant: different autograd semantics, and a warning), a
``context_fn`` other than torch's default or selective checkpointing, values ``fn`` cannot
replay (subgraph.py), a body that leaves the grad mode changed.
"""
import functools
import operator
import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.checkpoint import create_selective_checkpoint_contexts, noop_context_fn

from ..exc import Unsupported
from .base import ObjectVariable
from .subgraph import Region, graph_value, in_backward

_DETERMINISM_MODES = ("default", "none")


def is_checkpoint(value):
    return value is torch.utils.checkpoint.checkpoint


class CheckpointVariable(ObjectVariable):
    """``torch.utils.checkpoint.checkpoint`` (the function)."""

    def call_function(self, tx, args, kwargs):
        return trace_checkpoint(tx, list(args), dict(kwargs))


def _constant(var, what):
    if not var.is_python_constant():
        raise Unsupported(f"checkpoint(..., {what}={var}): a value not known while tracing")
    return var.as_python_constant()


def _options(kwargs):
    """Split checkpoint's own keywords from ``fn``'s; check each of checkpoint's."""
    use_reentrant = _constant(kwargs.pop("use_reentrant"), "use_reentrant") if "use_reentrant" in kwargs else None
    if use_reentrant is None:
        raise Unsupported("checkpoint without use_reentrant: the reentrant variant, with a warning "
                          "(pass use_reentrant=False to capture it)")
    if use_reentrant:
        raise Unsupported("checkpoint(use_reentrant=True) is not captured (its autograd semantics "
                          "differ: pass use_reentrant=False)")
    opts = {"preserve_rng_state": bool(_constant(kwargs.pop("preserve_rng_state"), "preserve_rng_state"))
            if "preserve_rng_state" in kwargs else True}
    for name, default in (("determinism_check", "default"), ("debug", False), ("early_stop", True)):
        opts[name] = _constant(kwargs.pop(name), name) if name in kwargs else default
    if opts["determinism_check"] not in _DETERMINISM_MODES:
        raise Unsupported(f"checkpoint(determinism_check={opts['determinism_check']!r}) (checkpoint "
                          "raises ValueError)")
    return opts


def _context_fn(var):
    """None for torch's default; else the arguments of a selective-checkpointing context_fn
    (``functools.partial(create_selective_checkpoint_contexts, policy, ...)``), which the caller
    rebuilds at run time: a policy function (held weakly: its identity is guarded) or a list of
    ops."""
    from .stdlib import SpecInstanceVariable
    if getattr(var, "value", None) is noop_context_fn:
        return None
    if isinstance(var, SpecInstanceVariable) and var.cls is functools.partial \
            and getattr(var.state["func"], "value", None) is create_selective_checkpoint_contexts:
        from .dicts import DictVariable
        args, keywords = var.state["args"].unpack_var_sequence(None), var.state["keywords"]
        if len(args) == 1 and isinstance(keywords, DictVariable) and not keywords.items:
            return _policy(args[0])
    raise Unsupported(f"checkpoint(context_fn={var}): only torch's default and "
                      "functools.partial(create_selective_checkpoint_contexts, policy) are captured")


def _policy(var):
    from .functions import UserFunctionVariable
    from .lists import BaseListVariable
    if isinstance(var, UserFunctionVariable) and var.source is not None:
        return weakref.ref(var.value)
    if isinstance(var, BaseListVariable):
        ops = [getattr(v, "value", None) for v in var.items]
        if all(isinstance(op, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)) for op in ops):
            return lambda: ops
    raise Unsupported(f"a selective-checkpointing policy {var}")


def trace_checkpoint(tx, args, kwargs):
    if not args:
        raise Unsupported("checkpoint() without a function (TypeError)")
    fn, fn_args = args[0], args[1:]
    if in_backward(tx):
        raise Unsupported("checkpoint inside an autograd.Function's backward")
    context = _context_fn(kwargs.pop("context_fn")) if "context_fn" in kwargs else None
    opts = _options(kwargs)
    grad_mode = torch.is_grad_enabled()
    with Region(tx, "the checkpointed function", frozen=()) as region:  # (the backward reruns it)
        out = fn.call_function(tx, fn_args, kwargs)
        if torch.is_grad_enabled() != grad_mode:
            raise Unsupported("the checkpointed function leaves the grad mode changed")
        nodes = region.check()
        leaves = []
        rebuilt = _replace_tensors(out, nodes, leaves)
        body, lifted = region.extract([], [v.node for v in leaves], "CheckpointBody")
        if not opts["preserve_rng_state"] and _draws_random_numbers(tx, body, lifted):
            # eager's recomputation draws new numbers; a backend's partitioner would not
            raise Unsupported("checkpoint(preserve_rng_state=False) of a function that draws random numbers")
    if not leaves:
        return rebuilt(iter(()))
    site = _CheckpointSite(body, context, opts)
    node = tx.output.graph.create_node("call_function", site, tuple(lifted), {})
    values = []
    for i, leaf in enumerate(leaves):
        item = tx.output.graph.create_node("call_function", operator.getitem, (node, i), {})
        item.meta["example_value"] = leaf.example_value
        values.append(graph_value(item))
    node.meta["example_value"] = tuple(v.example_value for v in values)
    return rebuilt(iter(values))


def _replace_tensors(var, region, leaves):
    """A function rebuilding ``var`` with the tensors computed in the region replaced, in order,
    by the site's outputs; ``leaves`` gets those tensors. Containers that hold none of them
    are kept as they are (the same object)."""
    from .dicts import DictVariable
    from .lists import ListVariable, TupleVariable
    from .tensor import TensorVariable
    from ..output_graph import walk_values
    if isinstance(var, TensorVariable) and var.node in region:
        leaves.append(var)
        return lambda values: next(values)
    inside = [v for v in walk_values([var]) if getattr(v, "node", None) in region]
    if not inside:
        return lambda values: var
    if type(var) in (TupleVariable, ListVariable):
        parts = [_replace_tensors(v, region, leaves) for v in var.items]
        if isinstance(var, TupleVariable):
            return lambda values: _same_class(TupleVariable([p(values) for p in parts], tuple_cls=var.tuple_cls), var)
        return lambda values: ListVariable([p(values) for p in parts])
    if type(var) is DictVariable:
        parts = {k: _replace_tensors(v, region, leaves) for k, v in var.items.items()}
        return lambda values: DictVariable({k: p(values) for k, p in parts.items()})
    raise Unsupported(f"the checkpointed function returns {var}, holding values it computed")


def _same_class(new, old):
    if hasattr(old, "cls_var"):  # a namedtuple's class as the trace read it
        new.cls_var = old.cls_var
    return new


class _SeededOps(TorchDispatchMode):
    found = False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if torch.Tag.nondeterministic_seeded in getattr(func, "tags", ()):
            self.found = True
        return func(*args, **(kwargs or {}))


def _draws_random_numbers(tx, body, lifted):
    """Whether the body runs an op that draws from a random generator (on fake inputs)."""
    mode = _SeededOps()
    try:
        with tx.output.fake_mode, mode:
            body.forward(*(n.meta["example_value"] for n in lifted))
    except Exception as e:
        raise Unsupported(f"the checkpointed function could not be re-run on fake tensors: {e}") from None
    return mode.found


def _traced(args):
    """The site is being traced (AOTAutograd, fake propagation), not run."""
    from torch._subclasses.fake_tensor import FakeTensor
    from torch._subclasses.functional_tensor import FunctionalTensor
    if any(isinstance(a, (FakeTensor, FunctionalTensor)) for a in args):
        return True
    key = torch._C._TorchDispatchModeKey
    return any(torch._C._get_dispatch_mode(k) is not None for k in (key.FAKE, key.PROXY, key.FUNCTIONAL))


class _CheckpointSite:
    """The graph node of one traced checkpoint: ``site(*lifted)`` returns the body's tensors."""

    def __init__(self, body, context, opts):
        self.__name__ = self.__qualname__ = "checkpoint"
        self.body, self.context, self.opts = body, context, opts

    def _context_fn(self):
        if self.context is None:
            return noop_context_fn
        policy = self.context()
        if policy is None:
            raise RuntimeError("the checkpoint's selective-checkpointing policy is gone")
        return functools.partial(create_selective_checkpoint_contexts, policy)

    def __call__(self, *args):
        if _traced(args):
            from torch._higher_order_ops.wrap import tag_activation_checkpoint
            if self.context is not None:
                self.body.meta["_checkpoint_context_fn"] = self._context_fn()
            try:
                return tag_activation_checkpoint(self.body, *args)
            finally:
                self.body.meta.pop("_checkpoint_context_fn", None)
        return torch.utils.checkpoint.checkpoint(self.body.forward, *args, use_reentrant=False,
                                                 context_fn=self._context_fn(), **self.opts)

    def __repr__(self):
        return "<checkpoint>"
