"""pydynamo.export(fn)(*args, **kwargs): one whole graph of ``fn``, as ``torch._dynamo.export``.

    gm, guards = pydynamo.export(model)(x, {"mask": m})
    out = gm(x2, {"mask": m2})                  # the original call structure, in and out
    ep = pydynamo.export(model)(x, {"mask": m}).to_exported_program()  # a torch.export program

How: ``fn(*args, **kwargs)`` is traced as the call inside ``_call`` below (so an nn.Module's
hooks run as ``Module.__call__`` runs them), with ``fullgraph=True``: any graph break is raised
(``pydynamo.exc.Unsupported``, with the reason and the user's file:line). The backend keeps the
graph; the frame's compiled code then runs once with the graph's outputs replaced by their fake
tensors, which gives the output structure without computing anything. The graph is rewritten to
take the pytree leaves of ``(args, kwargs)`` and return the leaves of the result:

* a graph input read from the arguments is the leaf at the same pytree path (two aliased
  leaves stay two inputs);
* a parameter or buffer of ``fn`` (a module) becomes an attribute of the graph module under its
  own qualified name (``lin.weight``), so ``state_dict()`` keys match ``fn``'s; any other tensor
  the program reads (a global, a closure's, a plain tensor attribute) is frozen into the graph
  module as a constant (``_const_*``, a non-persistent buffer; a parameter stays a parameter);
* an output leaf is a graph output, an input leaf, one of those attributes, or a constant.

The graph module carries torch.fx's pytree code generation (``_PyTreeCodeGen``: ``_in_spec``,
``_out_spec``), so it is called like ``fn`` and answers like ``fn``; its graph itself is flat
(``torch.fx.Interpreter(gm).run(*leaves, enable_io_processing=False)`` gives the output leaves).

Refused (``ExportError``): argument leaves that are not tensors or constants, tensors read from an
argument other than its leaves, an output (or input) that is an argument tensor passed at
several leaves (identity cannot tell which leaf it is), and side effects on Python state (a list,
dict, attribute, global or closure variable changed by ``fn``, a tensor hook registered): an
exported graph cannot replay them. Allowed: an object attribute set and set back to the constant
it holds (transformers' output collector does that around each forward), and logging / warnings
calls (made by the export's run only; the graph has none).
"""
import dataclasses
import functools
import inspect
import re
import types
import warnings
from typing import NamedTuple

import torch
import torch.fx
import torch.utils._pytree as pytree

from . import _C, convert_frame
from .convert_frame import ConvertFrame, request_compile
from .exc import PydynamoError, Unsupported
from .shapes import ConstraintViolationError
from .source import ModuleMemberSource

_CONSTANT_TYPES = (type(None), bool, int, float, complex, str, bytes, torch.dtype, torch.device,
                   torch.layout, torch.memory_format, type(Ellipsis))


class ExportError(PydynamoError):
    """``fn`` was captured, but the capture cannot be a graph of its argument leaves: why."""


def _call(fn, *args, **kwargs):
    """The frame export traces: ``fn`` is inlined from here, module hooks included."""
    return fn(*args, **kwargs)


_ARG_ROOTS = ("args", "kwargs")  # _call's locals that hold the user's arguments


class ExportGuards(list):
    """The guard texts of the capture: what must hold of another call's arguments (and of the
    globals and modules it read) for the graph to compute what ``fn`` computes, named as in
    ``fn``'s frame (``L['x']``, ``L['self'].lin.weight``, ``G['table']``; ``L['args'][i]`` is a
    positional argument past fn's named ones). ``check(*args, **kwargs)`` evaluates them."""

    def __init__(self, guard_set, fn, user_name=lambda text: text):
        super().__init__(user_name(t) for t in guard_set.texts())
        self.guard_set, self._fn, self._user_name = guard_set, fn, user_name

    def check(self, *args, **kwargs):
        """Whether the guards hold for ``fn(*args, **kwargs)``."""
        return self.first_failure(*args, **kwargs) is None

    def first_failure(self, *args, **kwargs):
        """The text of the first guard that fails for these arguments, or None."""
        failure = self.guard_set.first_failure([self._fn, args, kwargs], _call.__globals__)
        return None if failure is None else self._user_name(failure)

    def __str__(self):
        return "\n".join(self)


class ExportResult(NamedTuple):
    graph_module: torch.fx.GraphModule
    guards: ExportGuards

    def to_exported_program(self, dynamic_shapes=None):
        """A ``torch.export.ExportedProgram`` of the captured graph module, traced by
        ``torch.export.export`` (non-strict) with the example arguments of the capture and the
        same call structure. ``dynamic_shapes`` (torch.export's format, keyed by fn's parameter
        names) defaults to the one given to ``export``, else ``Dim.AUTO`` for every dimension
        the capture kept symbolic."""
        gm = self.graph_module
        info = gm.meta["pydynamo_export"]
        args, kwargs = pytree.tree_unflatten(info.flat_args, info.in_spec)
        shapes = info.dynamic_shapes if dynamic_shapes is None else dynamic_shapes
        if shapes is None:
            shapes = _auto_dynamic_shapes(info)
        elif isinstance(shapes, dict):  # the graph module's forward renames a parameter called self
            shapes = {info.rename.get(k, k): v for k, v in shapes.items()}
        return torch.export.export(gm, tuple(args), kwargs, dynamic_shapes=shapes, strict=False)


@dataclasses.dataclass
class _ExportInfo:
    flat_args: list
    in_spec: object
    out_spec: object
    dynamic_shapes: object  # as given to export
    names: list  # the graph module's forward's parameters: one per positional argument, then the keywords
    rename: dict  # fn's parameter names -> the graph module's forward's, where they differ
    leaf_dims: list  # per argument leaf, the dimensions the capture kept symbolic


def _auto_dynamic_shapes(info):
    from torch.export import Dim
    specs = [{d: Dim.AUTO for d in sorted(dims)} or None for dims in info.leaf_dims]
    args_spec, kwargs_spec = pytree.tree_unflatten(specs, info.in_spec)
    if not any(specs):
        return None
    return dict(zip(info.names, [*args_spec, *kwargs_spec.values()]))


def exported_program(fn, args=(), kwargs=None, *, dynamic_shapes=None, **export_options):
    """``export(fn, dynamic_shapes=...)(*args, **kwargs).to_exported_program()``."""
    return export(fn, dynamic_shapes=dynamic_shapes, **export_options)(*args, **(kwargs or {})).to_exported_program()


def export(fn, *extra_args, aten_graph=False, pre_dispatch=False, decomposition_table=None,
           tracing_mode="symbolic", dynamic_shapes=None, specialize_float=True, assume_static_by_default=False,
           same_signature=True, disable_constraint_solver=False, prefer_deferred_runtime_asserts_over_guards=False,
           constraints=None, **extra_kwargs):
    """``export(fn, ...)(*args, **kwargs) -> ExportResult(graph_module, guards)``, as
    ``torch._dynamo.export``: one graph of ``fn`` (a function or an nn.Module) called with
    ``args``/``kwargs``; a graph break raises ``pydynamo.exc.Unsupported``.

    ``aten_graph=True``: ATen operators (``make_fx`` over the captured graph, with
    ``decomposition_table`` and ``pre_dispatch`` as torch's). ``tracing_mode="symbolic"`` with
    ``assume_static_by_default=False`` (the defaults) makes the sizes of the argument tensors
    symbolic (except 0 and 1; a size the program relies on is specialized and guarded);
    ``tracing_mode="real"``/``"fake"`` or ``assume_static_by_default=True`` keeps them static,
    except the dimensions named in ``dynamic_shapes`` (torch.export's format: per parameter of
    ``fn``, a dict ``{dim: Dim}`` or a tuple of ``Dim``/None per dimension, nested like the
    argument), which must stay symbolic (else ``ConstraintViolationError``). Python ints and
    floats in the arguments are specialized (guarded). ``disable_constraint_solver`` is
    accepted (there is no solver); ``specialize_float=False``,
    ``prefer_deferred_runtime_asserts_over_guards=True``, ``same_signature=False`` and the old
    ``constraints`` are not supported."""
    if not same_signature:
        raise NotImplementedError("pydynamo.export: same_signature=False is not supported")
    if not specialize_float:
        raise NotImplementedError("pydynamo.export: specialize_float=False is not supported (floats are constants)")
    if prefer_deferred_runtime_asserts_over_guards:
        raise NotImplementedError("pydynamo.export: prefer_deferred_runtime_asserts_over_guards is not supported")
    if constraints:
        raise NotImplementedError("pydynamo.export: constraints= is not supported; use dynamic_shapes=")
    if decomposition_table is not None and not aten_graph:
        raise AssertionError("Specifying a decomposition_table table or tracing mode is illegal without "
                             "setting aten_graph=True")
    if pre_dispatch and not aten_graph:
        raise AssertionError("pre_dispatch=True can only be used when aten_graph=True")
    if tracing_mode not in ("symbolic", "real", "fake"):
        raise ValueError(f"pydynamo.export: unknown tracing_mode {tracing_mode!r}")
    all_dynamic = tracing_mode == "symbolic" and not assume_static_by_default

    def inner(*args, **kwargs):
        return _export(fn, args, kwargs, aten_graph=aten_graph, pre_dispatch=pre_dispatch,
                       decomposition_table=decomposition_table, all_dynamic=all_dynamic,
                       dynamic_shapes=dynamic_shapes)

    if extra_args or extra_kwargs:
        warnings.warn("export(f, *args, **kwargs) is deprecated, use export(f)(*args, **kwargs) instead.",
                      FutureWarning, stacklevel=2)
        return inner(*extra_args, **extra_kwargs)
    return inner


def _user_fn(fn):
    from .eval_frame import OptimizedModule, innermost_fn
    while isinstance(fn, OptimizedModule):
        fn = fn._orig_mod
    return innermost_fn(fn)


def _export(fn, args, kwargs, *, aten_graph, pre_dispatch, decomposition_table, all_dynamic, dynamic_shapes):
    fn = _user_fn(fn)
    try:
        sig = inspect.signature(fn.forward if isinstance(fn, torch.nn.Module) else fn)
    except (TypeError, ValueError):  # a builtin without one: (*args, **kwargs)
        sig = inspect.Signature([inspect.Parameter("args", inspect.Parameter.VAR_POSITIONAL),
                                 inspect.Parameter("kwargs", inspect.Parameter.VAR_KEYWORD)])
    flat_args, in_spec = pytree.tree_flatten((args, kwargs))
    for leaf in flat_args:
        if not isinstance(leaf, (torch.Tensor, *_CONSTANT_TYPES)):
            raise ExportError(f"pydynamo.export: an argument leaf of type {type(leaf).__qualname__} is neither a "
                              "tensor nor a constant; register it as a pytree node (torch.utils._pytree) or pass "
                              "its tensors as arguments")
    names, positional, rename = _argument_names(sig, args, kwargs)
    user_name = functools.partial(_user_name, fn, positional)
    capture = _Capture(user_name)
    marks = _marked_dims(sig, args, kwargs, flat_args, all_dynamic, dynamic_shapes)
    with _dynamic_marks(marks):
        result = capture.run(fn, args, kwargs)
    flat_results, out_spec = pytree.tree_flatten(result)
    gm = capture.graph_module()
    inputs = list(capture.sources)  # (source, real value), as the graph's placeholders
    if aten_graph:
        gm = _aten_graph(gm, capture.fake_mode, decomposition_table, pre_dispatch)
    new_gm, frozen = _flatten_signature(fn, gm, inputs, capture.graph_outputs, args, kwargs, flat_args, flat_results,
                                user_name)
    new_gm.graph._codegen = torch.fx.graph._PyTreeCodeGen(torch.fx.graph._PyTreeInfo(names, in_spec, out_spec))
    new_gm.recompile()
    leaf_dims = [_symbolic_dims(n.meta.get("val")) for n in new_gm.graph.nodes if n.op == "placeholder"]
    for (path, leaf), dims in zip(pytree.tree_flatten_with_path((args, kwargs))[0], leaf_dims):
        # a trace retried static (shapes.DynamicPolicy.static) has no symbol left to check
        if isinstance(leaf, torch.Tensor) and id(leaf) in marks and capture.uses(leaf):
            lost = {d for d in marks[id(leaf)][2] - dims if leaf.size(d) not in (0, 1)}
            if lost:
                raise ConstraintViolationError(f"{user_name(_path_source_name(path))}: dimensions {sorted(lost)} are "
                                               "dynamic in dynamic_shapes but were captured static")
    new_gm.meta["pydynamo_export"] = _ExportInfo(flat_args, in_spec, out_spec, dynamic_shapes, names, rename,
                                                 leaf_dims)
    for source, value, name in frozen:  # another tensor there: the graph module still holds this one
        capture.guards.add(source.steps(), "ID_MATCH", value, f"{source.name()} is the graph module's {name}")
    return ExportResult(new_gm, ExportGuards(capture.guards, fn, user_name))


def _symbolic_dims(value):
    if not isinstance(value, torch.Tensor):
        return set()
    return {d for d, size in enumerate(value.size())
            if isinstance(size, torch.SymInt) and size.node.maybe_as_int() is None}


class _Capture:
    """One trace of ``_call(fn, *args, **kwargs)``: the graph, its inputs' sources, the guards."""

    def __init__(self, user_name):
        self.user_name = user_name
        self.output = None  # the OutputGraph whose code was compiled
        self.gm = None
        self.guards = None
        self.graph_outputs = ()
        self._backend = functools.partial(_capture_backend, self)
        self._backend.pydynamo_export_hook = self.trace_end  # OutputGraph.begin_code calls it

    def trace_end(self, output):
        """Called by OutputGraph.begin_code as the trace of ``_call`` ends (a retried trace
        calls it again: the last one wins)."""
        self.output, self.gm = output, None
        effects = [self.user_name(e) for e in _side_effects(output)]
        if effects:
            raise ExportError("pydynamo.export: fn changes Python state, which an exported graph cannot replay: "
                              + "; ".join(effects))

    def run(self, fn, args, kwargs):
        # _call with a code object of this export's own: its cache entry serves no other call
        # (another thread's export, a later one) and goes when the code does
        self.code = _call.__code__.replace()
        call = types.FunctionType(self.code, _call.__globals__, "_call")
        request_compile(call)
        convert = ConvertFrame(self._backend, fullgraph=True, dynamic=False)

        def callback(frame, cache_size):
            # only _call is compiled: frames its compiled code starts run as they are
            return convert(frame, cache_size) if frame.f_code is self.code else None

        convert_frame.observers.append(self)
        prev = _C.set_eval_frame(callback)
        try:
            result = call(fn, *args, **kwargs)
        except Unsupported as e:  # a graph break: where in the user's code, without our _call
            e.user_stack = [f for f in e.user_stack if f[0] != self.code.co_filename] or e.user_stack
            raise
        except ConstraintViolationError as e:
            e.args = (self.user_name(str(e)).replace("(pydynamo.mark_dynamic)", "(dynamic_shapes)"),)
            raise
        finally:
            _C.set_eval_frame(prev)
            convert_frame.observers.remove(self)
            _C.reset_code(self.code)
            if self.output is not None and self.output.compiled_fn_name is not None:
                _call.__globals__.pop(self.output.compiled_fn_name, None)
        if self.guards is None or self.output is None:
            raise ExportError("pydynamo.export: the call was not captured (is pydynamo switched off here?)")
        return result

    # observer protocol of convert_frame
    def on_entry(self, code, guards, seconds):
        if code is self.code:
            self.guards = guards

    def on_break(self, exc):
        pass

    def uses(self, value):
        return any(v is value for _, v in self.sources)

    @property
    def sources(self):
        return [(source, value) for source, value, _ in self.output.graph_inputs()]

    @property
    def fake_mode(self):
        return self.output.fake_mode

    def graph_module(self):
        if self.gm is None:  # nothing computed: a graph of the inputs alone
            self.output.graph.output(())
            self.gm = torch.fx.GraphModule(torch.nn.Module(), self.output.graph)
            self.graph_outputs = ()
        return self.gm


def _capture_backend(capture, gm, example_inputs):
    """Keep the graph; the compiled code gets the outputs' fake tensors (nothing is computed)."""
    capture.gm = gm
    out_node = next(n for n in gm.graph.nodes if n.op == "output")
    fakes = tuple(n.meta["example_value"] for n in out_node.args[0])
    capture.graph_outputs = fakes
    return lambda *inputs: fakes


def _side_effects(output):
    """What the trace changed outside itself, described (logging and warnings calls excepted)."""
    out = []
    for key, effect in output.side_effects._effects.items():
        kind = key[0]
        if kind == "contents":
            out.append(f"the contents of {key[1]}")
        elif kind == "attr":
            out.append(f"attribute {effect[1].source.name()}.{key[2]}")
        elif kind == "objattr":
            if not _restored(effect):
                source = getattr(effect[1], "source", None)
                out.append(f"attribute {effect[2]!r} of {source.name() if source is not None else 'an object'}")
        elif kind == "global":
            out.append(f"global {key[1]}")
        elif kind == "cell":
            out.append(f"closure variable {key[1]}")
        elif kind == "call":
            from .variables.deferred import DeferredCall
            if not isinstance(effect[1], DeferredCall):  # logging and warnings: made by this run only
                out.append(f"a call of {getattr(effect[1], 'name', type(effect[1]).__name__)}()")
        else:
            out.append(str(key))
    return out


def _restored(effect):
    """Whether an object attribute's final state is the state it has now: a constant set, then
    set back (transformers' output collector does it around each forward), or added, then deleted."""
    from .side_effects import _object_attr
    from .variables.constant import ConstantVariable
    _, obj, name, slot = effect
    final, missing = _object_attr(effect), object()
    try:
        now = object.__getattribute__(obj.value, name) if slot else vars(obj.value).get(name, missing)
    except AttributeError:
        now = missing
    if final is None:
        return now is missing
    if not isinstance(final, ConstantVariable) or now is missing:
        return False
    return type(now) is type(final.value) and (now is final.value or type(now) in (bool, int, str, type(None))
                                               and now == final.value)


# ---- dynamic sizes --------------------------------------------------------------------------


def _marked_dims(sig, args, kwargs, flat_args, all_dynamic, dynamic_shapes):
    """{id(tensor): (tensor, maybe-dynamic dims, dynamic dims, static dims)} for the argument leaves."""
    marks = {}
    if all_dynamic:  # every dimension, but those the user marked static
        from .shapes import _STATIC_ATTR
        for t in flat_args:
            if isinstance(t, torch.Tensor):
                dims = set(range(t.dim())) - set(getattr(t, _STATIC_ATTR, ()))
                marks.setdefault(id(t), (t, dims, set(), set()))
    if dynamic_shapes is None:
        return marks
    try:
        bound = sig.bind(*args, **kwargs)
    except TypeError as e:
        raise ExportError(f"pydynamo.export: the arguments do not match fn's signature: {e}") from None
    values = bound.arguments
    if isinstance(dynamic_shapes, dict):
        unknown = set(dynamic_shapes) - set(values)
        if unknown:
            raise ExportError(f"pydynamo.export: dynamic_shapes names {sorted(unknown)}, which are not arguments "
                              f"of this call ({list(values)})")
        pairs = [(values[k], spec) for k, spec in dynamic_shapes.items()]
    elif isinstance(dynamic_shapes, (tuple, list)):
        if len(dynamic_shapes) != len(values):
            raise ExportError(f"pydynamo.export: dynamic_shapes has {len(dynamic_shapes)} entries for "
                              f"{len(values)} arguments")
        pairs = list(zip(values.values(), dynamic_shapes))
    else:
        raise ExportError(f"pydynamo.export: dynamic_shapes must be a dict, tuple or list, not "
                          f"{type(dynamic_shapes).__name__}")
    for value, spec in pairs:
        _walk_spec(value, spec, marks)
    return marks


def _walk_spec(value, spec, marks):
    if spec is None:
        return
    if isinstance(value, torch.Tensor):
        if isinstance(spec, dict):
            per_dim = spec.items()
        elif isinstance(spec, (tuple, list)):
            per_dim = enumerate(spec)
        else:
            raise ExportError(f"pydynamo.export: the dynamic_shapes entry of a tensor is a dict or a tuple, "
                              f"not {spec!r}")
        _, maybe, dynamic, static = marks.setdefault(id(value), (value, set(), set(), set()))
        for dim, d in per_dim:
            if not isinstance(dim, int) or not -value.dim() <= dim < value.dim():
                raise ExportError(f"pydynamo.export: dynamic_shapes names dimension {dim!r} of a tensor of "
                                  f"{value.dim()} dimensions")
            dim %= value.dim()
            kind = _dim_kind(d)
            maybe.discard(dim)
            (dynamic if kind == "dynamic" else maybe if kind == "auto" else static if kind == "static" else
             set()).add(dim)
        return
    if isinstance(value, (tuple, list)) and isinstance(spec, (tuple, list)) and len(spec) == len(value):
        for v, s in zip(value, spec):
            _walk_spec(v, s, marks)
    elif isinstance(value, dict) and isinstance(spec, dict):
        for k, s in spec.items():
            if k not in value:
                raise ExportError(f"pydynamo.export: dynamic_shapes names key {k!r} absent from the argument")
            _walk_spec(value[k], s, marks)
    else:
        raise ExportError(f"pydynamo.export: dynamic_shapes entry {spec!r} does not match an argument of "
                          f"type {type(value).__name__}")


def _dim_kind(d):
    """torch.export's per-dimension specs: a Dim (dynamic), Dim.DYNAMIC (dynamic), Dim.AUTO
    (dynamic unless the program specializes it), Dim.STATIC / an int / None (static)."""
    from torch.export.dynamic_shapes import Dim, _DimHint, _DimHintType, _StaticDim
    if d is None or isinstance(d, (int, _StaticDim)):
        return "static"
    if isinstance(d, _DimHint):
        return {_DimHintType.DYNAMIC: "dynamic", _DimHintType.AUTO: "auto"}.get(d.type, "static")
    if isinstance(d, Dim):  # its range and relations are torch.export's to check (to_exported_program)
        return "dynamic"
    raise ExportError(f"pydynamo.export: {d!r} is not a dimension spec (torch.export.Dim, Dim.AUTO, an int or None)")


class _dynamic_marks:
    """For the trace only: the argument tensors' dims marked as shapes.py reads them (the
    user's own marks are kept and put back afterwards)."""

    def __init__(self, marks):
        self.marks = marks

    def __enter__(self):
        from . import shapes
        self.saved = []
        for t, maybe, dynamic, static in self.marks.values():
            own = {a: t.__dict__[a] for a in shapes._ATTRS if a in t.__dict__}
            self.saved.append((t, own))
            t.__dict__.update({a: set(v) for a, v in own.items()})  # marking changes these sets in place
            for index, mark in ((maybe, shapes.maybe_mark_dynamic), (dynamic, shapes.mark_dynamic),
                                (static, shapes.mark_static)):
                if index:
                    mark(t, sorted(index))

    def __exit__(self, *exc):
        from . import shapes
        for t, attrs in self.saved:
            for a in shapes._ATTRS:
                t.__dict__.pop(a, None)
            t.__dict__.update(attrs)
        return False


# ---- the graph of the argument leaves -----------------------------------------------------


def _root(source):
    while hasattr(source, "base"):
        source = source.base
    return source


def _aten_graph(gm, fake_mode, decomposition_table, pre_dispatch):
    """The captured graph traced to ATen operators (its placeholders stay the same inputs)."""
    from torch._dispatch.python import enable_python_dispatcher
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    from torch.fx.experimental.proxy_tensor import make_fx
    fakes = [n.meta["example_value"] for n in gm.graph.nodes if n.op == "placeholder"]

    def run(*inputs):
        with torch.fx.traceback.preserve_node_meta():
            return torch.fx.Interpreter(gm).run(*inputs)

    with unset_fake_temporarily(), enable_python_dispatcher(), fake_mode:
        return make_fx(run, decomposition_table=decomposition_table, tracing_mode="real",
                       _allow_non_fake_inputs=True, pre_dispatch=pre_dispatch)(*fakes)


def _flatten_signature(fn, gm, inputs, graph_outputs, args, kwargs, flat_args, flat_results, user_name):
    """A GraphModule whose placeholders are the argument leaves and whose output is the list of
    result leaves; what the captured graph read elsewhere becomes attributes of it."""
    # id(tensor) -> the leaf holding it (None: several do, then identity cannot tell which one
    # the program read); source name -> leaf
    leaf_index, by_path = {}, {}
    for i, (path, leaf) in enumerate(pytree.tree_flatten_with_path((args, kwargs))[0]):
        if isinstance(leaf, torch.Tensor):
            leaf_index[id(leaf)] = None if id(leaf) in leaf_index else i
            by_path[_path_source_name(path)] = i
    members = _module_members(fn)
    graph = torch.fx.Graph()
    new_inputs = [graph.placeholder(f"arg{i}") for i in range(len(flat_args))]
    root, attrs = torch.nn.Module(), {}  # attrs: id(tensor) -> attribute name
    frozen = []  # (source, tensor, attribute name) of the graph inputs made attributes
    for name, _, _, value in members.values():  # all of fn's state, as fn orders it (state_dict keys)
        attrs[id(value)] = _add_attr(root, members, None, value, user_name)
    env, by_id = {}, {}  # by_id: id(value) -> node, for output leaves that are inputs or attributes
    old_inputs = [n for n in gm.graph.nodes if n.op == "placeholder"]
    assert len(old_inputs) == len(inputs), (len(old_inputs), len(inputs))
    for node, (source, value) in zip(old_inputs, inputs):
        if not isinstance(value, torch.Tensor):
            raise ExportError(f"pydynamo.export: graph input {source.name()} is a {type(value).__name__}, not a tensor")
        root_name = getattr(_root(source), "local_name", None)
        if root_name in _ARG_ROOTS:
            # the leaf at the same path (aliased leaves stay distinct inputs), else the same tensor
            i = by_path.get(source.name(), leaf_index.get(id(value)))
            if i is None and id(value) in leaf_index:
                raise ExportError(f"pydynamo.export: fn reads {user_name(source.name())}, a tensor passed at several "
                                  "positions of the arguments; which one is unknown: export it with distinct tensors")
            if i is None or flat_args[i] is not value:
                raise ExportError(f"pydynamo.export: fn reads the tensor {user_name(source.name())}, which is not "
                                  "an argument leaf; pass it as an argument of its own")
            new = new_inputs[i]
        else:
            if id(value) not in attrs:
                attrs[id(value)] = _add_attr(root, members, source, value, user_name)
            new = graph.get_attr(attrs[id(value)])
            frozen.append((source, value, attrs[id(value)]))
        new.meta.update({k: node.meta[k] for k in ("val", "example_value", "tensor_meta") if k in node.meta})
        if "val" not in new.meta and "example_value" in node.meta:
            new.meta["val"] = node.meta["example_value"]
        env[node] = new
        if leaf_index.get(id(value), 0) is not None:
            by_id.setdefault(id(value), new)
    for i, leaf in enumerate(flat_args):
        if isinstance(leaf, torch.Tensor):
            if leaf_index[id(leaf)] is not None:
                by_id.setdefault(id(leaf), new_inputs[i])
            if "val" not in new_inputs[i].meta:
                new_inputs[i].meta["val"] = leaf
        elif "val" not in new_inputs[i].meta:
            new_inputs[i].meta["val"] = leaf
    out_nodes = ()
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            continue
        if node.op == "output":
            out_nodes = node.args[0]
            continue
        if node.op == "get_attr":  # aten graphs: a constant make_fx lifted, a higher-order op's subgraph
            name, value = _fresh_name(root, node.target), getattr(gm, node.target)
            if isinstance(value, torch.nn.Module):
                root.add_module(name, value)
            elif isinstance(value, torch.Tensor):
                root.register_buffer(name, value, persistent=False)
            else:
                setattr(root, name, value)
            env[node] = graph.get_attr(name)
            env[node].meta.update(node.meta)
            continue
        env[node] = graph.node_copy(node, lambda n: env[n])
    from_graph = {id(v): env[n] for v, n in zip(graph_outputs, out_nodes) if isinstance(n, torch.fx.Node)}
    results = []
    for leaf in flat_results:
        if id(leaf) in from_graph:
            results.append(from_graph[id(leaf)])
        elif id(leaf) in by_id:
            results.append(by_id[id(leaf)])
        elif leaf_index.get(id(leaf), 0) is None:
            raise ExportError("pydynamo.export: fn returns an argument tensor passed at several positions of the "
                              "arguments; which one it returns is unknown: export it with distinct tensors")
        elif isinstance(leaf, _CONSTANT_TYPES):
            results.append(leaf)
        else:
            raise ExportError(f"pydynamo.export: fn returns a {type(leaf).__qualname__}, which is neither a tensor "
                              "computed by the graph, an input, nor a constant")
    graph.output(results)
    out = torch.fx.GraphModule(torch.nn.Module(), torch.fx.Graph())
    for name, mod in root._modules.items():  # root's state as it is (GraphModule(root, graph) would copy
        out.add_module(name, mod)            # only what get_attr reads, with buffers made persistent)
    for name, p in root._parameters.items():
        out.register_parameter(name, p)
    for name, b in root._buffers.items():
        out.register_buffer(name, b, persistent=name not in root._non_persistent_buffers_set)
    out.graph = graph
    return out, frozen


def _path_source_name(path):
    """The name of the Source by which ``_call`` reads the leaf at pytree key path ``path`` of
    ``(args, kwargs)``: ``L['args'][0]['y']``, ``L['kwargs']['mask']``, ``L['args'][1].field``."""
    out = f"L[{_ARG_ROOTS[path[0].idx]!r}]"
    for key in path[1:]:
        if isinstance(key, pytree.SequenceKey):
            out += f"[{key.idx!r}]"
        elif isinstance(key, pytree.MappingKey):
            out += f"[{key.key!r}]"
        elif isinstance(key, pytree.GetAttrKey):
            out += f".{key.name}"
        else:
            return None
    return out


def _user_name(fn, positional_names, text):
    """A guard text or source name of the trace of ``_call``, in the names of ``fn``'s frame:
    ``L['args'][0]`` -> ``L['x']``, ``L['kwargs']['y']`` -> ``L['y']``, ``L['fn']`` ->
    ``L['self']`` (a module), ``L['fn'].__globals__['G']`` -> ``G['G']``, a closure cell of
    ``fn`` -> ``L['name']`` (as torch names the guards of fn's own frame)."""
    text = re.sub(r"L\['fn'\]\.__globals__\[('[^']*')\]", r"G[\1]", text)
    freevars = getattr(getattr(fn, "__code__", None), "co_freevars", ())
    text = re.sub(r"L\['fn'\]\.__closure__\[(\d+)\]\.cell_contents", lambda m: f"L[{freevars[int(m.group(1))]!r}]"
                  if int(m.group(1)) < len(freevars) else m.group(0), text)
    text = re.sub(r"L\['args'\]\[(\d+)\]", lambda m: f"L[{positional_names[int(m.group(1))]!r}]"
                  if int(m.group(1)) < len(positional_names) else m.group(0), text)
    text = re.sub(r"L\['kwargs'\]\[('[^']*')\]", r"L[\1]", text)
    if isinstance(getattr(fn, "__self__", None), torch.nn.Module):  # a module's bound method
        text = text.replace("L['fn'].__self__", "L['self']")
    return text.replace("L['fn']", "L['self']") if isinstance(fn, torch.nn.Module) else text


def _module_members(fn):
    """{id(tensor): (qualified name, kind, persistent, tensor)} of fn's parameters and buffers."""
    if not isinstance(fn, torch.nn.Module):
        fn = getattr(fn, "__self__", None)  # a module's bound method
        if not isinstance(fn, torch.nn.Module):
            return {}
    members = {}
    for name, p in fn.named_parameters(remove_duplicate=False):
        members.setdefault(id(p), (name, "parameter", True, p))
    for mod_name, mod in fn.named_modules(remove_duplicate=False):
        for name, b in mod._buffers.items():
            if b is not None:
                qual = f"{mod_name}.{name}" if mod_name else name
                members.setdefault(id(b), (qual, "buffer", name not in mod._non_persistent_buffers_set, b))
    return members


def _add_attr(root, members, source, value, user_name):
    """Register ``value`` on ``root``; returns its qualified name."""
    if id(value) in members:
        name, kind, persistent, _ = members[id(value)]
    else:
        name = _fresh_name(root, "_const_" + _const_name(user_name(source.name())))
        is_buffer = isinstance(source, ModuleMemberSource) and source.table == "_buffers"
        kind = "parameter" if isinstance(value, torch.nn.Parameter) else "buffer"
        persistent = is_buffer
    *path, field = name.split(".")
    mod = root
    for part in path:
        if part not in mod._modules:
            mod.add_module(part, torch.nn.Module())
        mod = mod._modules[part]
    if kind == "parameter":
        mod.register_parameter(field, value)
    else:
        mod.register_buffer(field, value, persistent=persistent)
    return name


_NOISE = {"self", "fn", "__globals__", "__closure__", "cell_contents", "__defaults__", "__kwdefaults__",
          "_parameters", "_buffers", "_modules", "__dict__"}


def _const_name(name):
    """``G['mask']`` -> ``mask``, ``L['self'].table`` -> ``table``."""
    words = re.findall(r"[A-Za-z0-9_]+", re.sub(r"^[LGCB]\[", "", name))
    return "_".join(w for w in words if w not in _NOISE) or "tensor"


def _fresh_name(root, base):
    base = re.sub(r"[^0-9a-zA-Z_]", "_", base) or "_const"
    name, k = base, 0
    while hasattr(root, name):
        k += 1
        name = f"{base}_{k}"
    return name


def _argument_names(sig, args, kwargs):
    """Names for the graph module's forward (pytree code generation): fn's parameter names for
    the positional arguments (``<varargs>_<i>`` past them), then the keyword names. Returns
    (those names, fn's names of the positional arguments, {fn's name: forward's} where they
    differ: a parameter called ``self``, a keyword that is no identifier)."""
    params = list(sig.parameters.values())
    positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    varargs = next((p.name for p in params if p.kind == p.VAR_POSITIONAL), "args")
    wanted = [positional[i] if i < len(positional) else f"{varargs}_{i - len(positional)}"
              for i in range(len(args))]
    wanted += list(kwargs)
    names, rename = [], {}
    for i, want in enumerate(wanted):
        name = want if isinstance(want, str) and want.isidentifier() else f"kwarg_{i}"
        base, k = name, 0
        while name in names or name == "self":
            k += 1
            name = f"{base}_{k}"
        names.append(name)
        if name != want:
            rename[want] = name
    return names, wanted[:len(args)], rename
