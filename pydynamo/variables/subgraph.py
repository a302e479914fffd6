"""Tracing a call into a subgraph of its own: the bodies of ``autograd.Function.forward`` and
``backward`` (autograd_function.py) and of a checkpointed function (checkpoint.py).

A ``Region`` is traced like any inlined call, into the frame's graph; when it ends, the nodes it
made are moved out into a GraphModule whose inputs are, in order, the region's stand-ins (values
that exist only inside it: the gradients a backward receives) and the values of the frame's
graph it read (``lifted``). The caller then puts one node in the frame's graph that runs the
subgraph at run time.

What a region may do is what its subgraph can replay: compute tensors. Refused, so that the
call runs natively (or the frame's graph breaks there): changing anything outside the region
(a side effect, an in-place op on a tensor it did not create), and letting one of its values
reach the rest of the trace by any way other than its result (a list of the caller's, a
closure cell): the rest of the trace would use a node that is no longer in the graph.
"""
import contextlib

import torch
import torch.fx

from ..exc import ExceptionRaised, Unsupported


def _stand_in():
    """Target of a region's stand-in nodes; they become placeholders of the subgraph."""
    raise AssertionError("a region's stand-in node ran")


class Region:
    """``with Region(tx, what) as r:`` trace; then ``r.extract(...)``. On any exception the
    nodes the region made are removed and the grad mode is restored."""

    def __init__(self, tx, what, frozen=None):
        """``frozen``: None, or extra trackers (besides what the rest of the trace reaches) whose
        Python state the region must leave as it is, because its Python code runs at another
        time than the trace assumes (a backward), or again (a checkpoint's recomputation)."""
        self.tx, self.what = tx, what
        self.output = tx.output
        self.frozen = frozen

    def __enter__(self):
        from ..output_graph import _version
        out = self.output
        self.before = set(out.graph.nodes)
        self.effects = list(out.side_effects._effects.items())
        # (an inference tensor has no version counter: None, its in-place changes unseen, as the
        # memory-overlap rule's known limit, docs/soundness.md)
        self.versions = {n: _version(v) for n in out.graph.nodes
                         if isinstance(v := n.meta.get("example_value"), torch.Tensor)}
        self.grad_mode = torch.is_grad_enabled()
        self.managers = _entered_managers(self.tx)
        self.n_generators = len(out.generators)  # generators made inside are the region's own
        if self.frozen is not None:
            self.frozen = {id(v): (v, _python_state(v)) for v in _reachable(self.tx, self.frozen)}
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None:
            self.discard()
            if isinstance(exc, ExceptionRaised):  # raised inside: Python raises it natively
                raise Unsupported(f"{self.what} raises {exc.var.describe()}") from None
        return False

    def stand_in(self, example_value, name):
        """A node standing for a value that exists only inside the region."""
        node = self.output.graph.create_node("call_function", _stand_in, (), {}, name=name)
        node.meta["example_value"] = example_value
        return node

    def nodes(self):
        return [n for n in self.output.graph.nodes if n not in self.before and n.op != "placeholder"]

    def discard(self):
        torch._C._set_grad_enabled(self.grad_mode)
        graph = self.output.graph
        for node in reversed(self.nodes()):
            if not node.users:
                graph.erase_node(node)

    def check(self):
        """The region changed nothing outside itself, and its values reach the rest of the
        trace only through what it returned to the caller."""
        from ..output_graph import _version
        out = self.output
        if list(out.side_effects._effects.items()) != self.effects:
            raise Unsupported(f"{self.what} changes state outside it (a side effect the subgraph "
                              "cannot replay)")
        for node in out.graph.nodes:  # inputs first read inside the region: fresh fakes, version 0
            value = node.meta.get("example_value")
            if (node in self.versions or node.op == "placeholder") and isinstance(value, torch.Tensor) \
                    and _version(value) not in (None, self.versions.get(node, 0)):
                raise Unsupported(f"{self.what} changes a tensor in place that it did not create "
                                  f"({node.name})")
        if _entered_managers(self.tx) != self.managers:
            raise Unsupported(f"{self.what} leaves a context manager entered (or leaves one it did "
                              "not enter)")
        if self.frozen is not None:
            for var, state in self.frozen.values():
                if _python_state(var) != state:
                    raise Unsupported(f"{self.what} changes {var}, which its Python code would "
                                      "change again, or at another time, than the graph runs")
        region = set(self.nodes())
        for var in _reachable(self.tx, generators=self.n_generators):
            node = getattr(var, "node", None)
            if isinstance(node, torch.fx.Node) and node in region:
                raise Unsupported(f"a value computed in {self.what} is kept outside it (in a "
                                  "container, a closure or an object of the caller's)")
            if getattr(var, "region", None) is self:  # a tracker that must stay inside (a ctx)
                raise Unsupported(f"{var} escapes {self.what}")
        return region

    def extract(self, stand_ins, outputs, name):
        """Move the region's nodes into a GraphModule ``(*stand_ins, *lifted) -> outputs``.
        ``outputs`` are nodes (of the region, or values it read). Returns (module, lifted)."""
        graph = self.output.graph
        nodes = self.nodes()
        region = set(nodes)
        sub = torch.fx.Graph()
        env = {}
        for node in stand_ins:
            env[node] = _placeholder(sub, node, node.name)
        lifted = []
        for node in nodes:
            for arg in node.all_input_nodes:
                if arg not in region and arg not in env:
                    env[arg] = _placeholder(sub, arg, arg.name)
                    lifted.append(arg)
        for out in outputs:
            if out not in region and out not in env:
                env[out] = _placeholder(sub, out, out.name)
                lifted.append(out)
        for node in nodes:
            if node.target is not _stand_in:
                env[node] = sub.node_copy(node, lambda n: env[n])
            for user in node.users:
                if user not in region:
                    raise Unsupported(f"a value computed in {self.what} is used outside it")
        sub.output(tuple(env[o] for o in outputs))
        for node in reversed(nodes):
            graph.erase_node(node)
        module = torch.fx.GraphModule(self.output.root_module(sub), sub, class_name=name)
        return module, lifted


def _entered_managers(tx):
    """The torch context managers the trace has entered (ctx.py), innermost last."""
    from . import ctx
    state = ctx._states.get(tx.output)
    return list(state.active) if state is not None else []


def _placeholder(graph, node, name):
    ph = graph.placeholder(name)
    ph.meta.update(node.meta)
    return ph


_NO_STATE = object()


def _python_state(var):
    """What a mutation of ``var`` (a container, an object, a cell, an iterator) changes."""
    parts = []
    for name in ("items", "attrs", "slots", "contents", "index", "version"):
        value = var.__dict__.get(name, _NO_STATE)
        if isinstance(value, list):
            value = tuple(map(id, value))
        elif isinstance(value, dict):
            value = tuple((k, id(v)) for k, v in value.items())
        elif value is not _NO_STATE and not isinstance(value, (int, type(None))):
            value = id(value)
        parts.append(value)
    return tuple(parts)


def _reachable(tx, extra=(), generators=None):
    """Every tracker the rest of the trace can reach: translators' stacks, locals and cells,
    suspended generators (the first ``generators`` made, if given: a generator made inside a
    region is reached only through its tracker), side effects, values read from sources; and
    ``extra``. (What the region returns is not among them unless it is also kept there.)"""
    from ..output_graph import walk_values
    out = tx.output
    roots = list(extra)
    translators = [*out.generators[:generators]] if generators is not None else [*out.generators]
    t = tx
    while t is not None:
        translators.append(t)
        t = getattr(t, "parent", None)
    for t in translators:
        roots.extend([*t.stack, *t.symbolic_locals.values(), *t.cells.values(), t.exc_value])
    roots.extend([*out.side_effects.values(), *out.tracked_sources.values(), *out.closure_cells.values()])
    from .base import VariableTracker
    return walk_values([r for r in roots if isinstance(r, VariableTracker)])


class RegionGuards:
    """The frame's guards while a region is traced. Global state read inside a region is read
    when the subgraph runs: the forward of an autograd.Function runs with grad mode off (known:
    its reads are not guarded), a backward runs whenever autograd calls it, after the frame's
    guards were checked (refused)."""

    def __init__(self, guards, phase):
        self._guards, self._phase = guards, phase

    def __getattr__(self, name):
        return getattr(self._guards, name)

    def add(self, source, kind, value=None):
        getattr(self, kind)(source, value)

    def PREDICATE(self, source, fn, text):
        if source is None:
            if _in_backward(self):
                raise Unsupported(f"autograd.Function.backward reads global state ({text}): it "
                                  "runs after the compiled frame's guards were checked")
            if self._phase == "forward" and getattr(fn, "fn", None) is torch.is_grad_enabled:
                return  # off inside forward, as the trace saw
        self._guards.PREDICATE(source, fn, text)


@contextlib.contextmanager
def guards_for(tx, phase):
    """The frame's guards seen through RegionGuards while the body runs."""
    saved = tx.output.guards
    tx.output.guards = RegionGuards(saved, phase)
    try:
        yield
    finally:
        tx.output.guards = saved


def graph_value(node):
    """A tracker for a node of the frame's graph (a lifted value passed to a region's node)."""
    from .sym import SymNodeVariable
    from .tensor import TensorVariable
    value = node.meta["example_value"]
    if isinstance(value, torch.Tensor):
        return TensorVariable(node, value)
    return SymNodeVariable(node, value)


def _in_backward(guards):
    while isinstance(guards, RegionGuards):
        if guards._phase == "backward":
            return True
        guards = guards._guards
    return False


def in_backward(tx):
    """Tracing an autograd.Function's backward (or a region inside one)."""
    return _in_backward(tx.output.guards)


def check_global_state(tx, fn):
    """A torch function that reads or switches global state (grad mode, autocast...), called
    while a backward is traced: refused, since the backward runs in whatever state autograd
    runs it in, after the frame's guards were checked."""
    if not _in_backward(tx.output.guards):
        return
    from . import ctx
    from .torch import _GLOBAL_STATE, reads_flag
    if fn is torch.no_grad or fn is torch.enable_grad:  # blocks that restore what they find (ctx.py)
        return
    if any(fn is f for f in _GLOBAL_STATE) or ctx.is_factory(fn) or any(fn is f for f in ctx.READERS) \
            or reads_flag(fn):
        raise Unsupported(f"autograd.Function.backward calls {getattr(fn, '__name__', fn)} (global "
                          "state, read when autograd runs the backward)")
