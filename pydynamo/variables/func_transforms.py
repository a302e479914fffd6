"""``torch.func``: ``vmap``, ``grad``, ``grad_and_value``, ``jacrev``, ``jacfwd``, ``hessian``,
``vjp``, ``jvp``, ``linearize`` and ``functional_call``, captured in the frame's graph.

The transformed function is traced by the same translator into a subgraph (subgraph.Region,
as higher_order.py traces a branch), with stand-ins that look like what the function sees under
the transform: the real transform is first run on the fake arguments with a probe in place of
the function, which records the metadata of its inputs (a vmapped input without its batch
dimension, a differentiated input requiring grad) and stops. The frame's graph then gets one
node, a ``_TransformSite``, that applies the real transform, with the user's own options, to the
subgraph: the same code runs eagerly under the ``eager`` backend, and AOTAutograd traces through
it for the others (functorch's transforms decompose into ATen ops there).

What the result holds besides tensors: a ``vjp``'s or ``linearize``'s function, called later in
the trace, becomes another site that recomputes the transform and applies it (refused if the
function draws random numbers: the recomputation would draw new ones).

``functional_call(module, params, args, kwargs)`` is traced as a call of the module whose
parameter and buffer reads give the dict's tensors (nn_module.py's member overrides), tied
weights following ``tie_weights`` as torch does.
"""
import types

import torch
import torch.utils._pytree as pytree

from ..exc import Unsupported
from .base import ObjectVariable
from .higher_order import _as_tracker, _flatten, bind_call, emit, trace_body, unify

_WRAPPING = ("vmap", "grad", "grad_and_value", "jacrev", "jacfwd", "hessian")
_IMMEDIATE = ("vjp", "jvp", "linearize")


def _table():
    import torch.func as F
    table = {getattr(F, n): n for n in (*_WRAPPING, *_IMMEDIATE)}
    table[torch.vmap] = "vmap"
    table[F.functional_call] = "functional_call"
    table[torch.nn.utils.stateless.functional_call] = "functional_call"
    return table


_TABLE = None


def transform_name(value):
    """By identity: hashing a user's object would run its ``__hash__``."""
    global _TABLE
    if type(value) is not types.FunctionType:
        return None
    if _TABLE is None:
        _TABLE = {id(fn): (fn, name) for fn, name in _table().items()}
    entry = _TABLE.get(id(value))
    return entry[1] if entry is not None and entry[0] is value else None


def is_func_transform(value):
    return transform_name(value) is not None


class FuncTransformVariable(ObjectVariable):
    """A ``torch.func`` transform (the function itself)."""

    def call_function(self, tx, args, kwargs):
        name = transform_name(self.value)
        arguments = bind_call(self.value, args, kwargs, f"torch.func.{name}")
        if name == "functional_call":
            return _functional_call(tx, arguments)
        fn = arguments.pop("func")
        if name in _WRAPPING:
            opts = {k: _option(v, name, k) for k, v in arguments.items()}
            return TransformedVariable(self.value, name, fn, opts)
        if name == "jvp":
            opts = {k: _option(v, name, k) for k, v in arguments.items() if k not in ("primals", "tangents")}
            args_var = _as_tracker((arguments["primals"], arguments["tangents"]))
        else:  # vjp, linearize: primals positional (a tuple of trackers, bound as *primals)
            opts = {k: _option(v, name, k) for k, v in arguments.items() if k != "primals"}
            args_var = arguments["primals"]
        return _apply(tx, _Apply(self.value, name, opts), fn, args_var)

    def _repr_value(self):
        return f"torch.func.{transform_name(self.value)}"


def _option(var, name, key):
    if isinstance(var, tuple):
        var = _as_tracker(var)
    if not hasattr(var, "is_python_constant") or not var.is_python_constant():
        raise Unsupported(f"torch.func.{name}'s {key} must be a constant (it is {var})")
    value = var.as_python_constant()
    return value


class TransformedVariable(ObjectVariable):
    """``vmap(f, ...)``, ``grad(f, ...)``...: called, it traces ``f`` under the transform."""

    def __init__(self, transform, name, fn, opts):
        super().__init__(transform)
        self.name, self.fn, self.opts = name, fn, opts

    def python_type(self):
        return type(lambda: None)

    def as_python_constant(self):
        raise Unsupported(f"torch.func.{self.name}(...) is not a constant")

    def call_function(self, tx, args, kwargs):
        if kwargs:
            if self.name != "vmap":
                raise Unsupported(f"keyword arguments to a torch.func.{self.name}-transformed function")
            raise Unsupported("keyword arguments to a vmapped function (vmap does not map them: "
                              "passed as they are)")
        return _apply(tx, _Apply(self.value, self.name, self.opts, wrapping=True), self.fn, _as_tracker(tuple(args)))

    def reconstruct(self, codegen):
        raise Unsupported(f"a torch.func.{self.name}-transformed function cannot be rebuilt in Python code")

    def _repr_value(self):
        return f"torch.func.{self.name}({self.fn})"


class _Apply:
    """How a transform is applied to a function ``fn`` and the call's arguments ``args``."""

    def __init__(self, transform, name, opts, wrapping=False, then=None):
        self.transform, self.name, self.opts, self.wrapping = transform, name, opts, wrapping
        self.then = then  # (index in the result, extra args): call the function found there

    def __call__(self, fn, args, extra=()):
        if self.wrapping:
            result = self.transform(fn, **self.opts)(*args)
        elif self.name == "jvp":
            result = self.transform(fn, args[0], args[1], **self.opts)
        elif self.name == "linearize":
            # linearize's own jvp_fn is a graph it traces with make_fx, which cannot run inside
            # a backend's tracing; the same linear map is jvp at the primals
            result = (fn(*args), lambda *t: torch.func.jvp(fn, tuple(args), t)[1])
        else:
            result = self.transform(fn, *args, **self.opts)
        if self.then is not None:
            return result[self.then](*extra)
        return result


class _Stop(Exception):
    pass


def _seen_inputs(tx, apply, fake_args):
    """The metadata of what the transformed function receives: the real transform run on
    the fake arguments, with a probe for the function."""
    seen = []

    def probe(*a):
        seen.append([(tuple(t.size()), t.dtype, t.device, t.requires_grad) if isinstance(t, torch.Tensor)
                     else t for t in pytree.tree_leaves(a)])
        raise _Stop
    try:
        with tx.output.fake_mode:
            apply(probe, fake_args)
    except _Stop:
        pass
    except Exception as e:  # noqa: BLE001 - the transform's own checks: eager raises the same
        raise Unsupported(f"torch.func.{apply.name}: {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}") from None
    if not seen:
        raise Unsupported(f"torch.func.{apply.name} did not call the function")
    return seen[0]


def _stand_in_value(tx, meta):
    size, dtype, device, requires_grad = meta
    with tx.output.fake_mode:
        t = torch.empty(size, dtype=dtype, device=device)
    if requires_grad:
        t.requires_grad_(True)
    return t


def _fn_args(apply, args_var):
    """The tuple of the transformed function's arguments, from the call's arguments: jvp's
    primals, or all of them."""
    from .lists import TupleVariable
    if apply.name == "jvp":
        primals = args_var.items[0]
        if type(primals) is not TupleVariable:
            raise Unsupported("torch.func.jvp's primals must be a tuple (torch raises)")
        return primals
    return args_var


def _body(tx, apply, fn, args_var):
    """(call leaves, in_spec, Body, lifted-unified module, lifted): ``fn`` traced with stand-ins
    like what the transform passes it."""
    from .tensor import TensorVariable
    leaves = _flatten(args_var)[0]
    if not all(isinstance(v, TensorVariable) for v in leaves):
        raise Unsupported(f"torch.func.{apply.name} of arguments other than tensors (or tuples, lists, "
                          "dicts of them)")
    in_spec = _spec(args_var)
    fake_args = pytree.tree_unflatten([v.example_value for v in leaves], in_spec)
    seen = _seen_inputs(tx, _Apply(apply.transform, apply.name, apply.opts, apply.wrapping), fake_args)
    fn_leaves, fn_rebuild = _flatten(_fn_args(apply, args_var))
    if len(seen) != len(fn_leaves) or not all(isinstance(m, tuple) for m in seen):
        raise Unsupported(f"torch.func.{apply.name} passes the function other values than its tensors")
    examples = [_stand_in_value(tx, m) for m in seen]
    body = trace_body(tx, fn, examples, lambda stand: list(fn_rebuild(stand).items),
                      f"the function torch.func.{apply.name} transforms")
    (gm,), lifted = unify([body])
    return leaves, in_spec, body, gm, lifted, examples


def _apply(tx, apply, fn, args_var):
    """``apply(fn, args)`` in the graph: ``fn`` traced as a body, one _TransformSite node."""
    leaves, in_spec, body, gm, lifted, examples = _body(tx, apply, fn, args_var)
    site = _TransformSite(apply, gm, in_spec, _spec(body.rebuild(body.out_leaves)))
    node_args = tuple(v.node for v in leaves) + tuple(lifted)
    result = _fake_result(tx, site, node_args, f"torch.func.{apply.name}")
    flat, result_spec = pytree.tree_flatten(result)
    follow = [i for i, v in enumerate(flat) if callable(v) and not isinstance(v, torch.Tensor)]
    if any(not isinstance(v, torch.Tensor) for i, v in enumerate(flat) if i not in follow):
        raise Unsupported(f"torch.func.{apply.name} returns values other than tensors")
    if follow and _draws_random(tx, gm, lifted, examples):
        raise Unsupported(f"the function returned by torch.func.{apply.name} of a function that draws "
                          "random numbers (applying it recomputes the function)")
    site.keep = [i for i in range(len(flat)) if i not in follow]
    items = iter(emit(tx, site, node_args, f"torch.func.{apply.name}") if site.keep else [])
    values = [FollowUpVariable(apply, fn, args_var, _index_in(result, flat[i]), flat[i]) if i in follow
              else next(items) for i in range(len(flat))]
    return _to_tracker(pytree.tree_unflatten(values, result_spec))


def _fake_result(tx, site, node_args, what):
    try:
        with tx.output.fake_mode:
            return site.result(*[n.meta["example_value"] for n in node_args])
    except Exception as e:  # noqa: BLE001 - the transform's own checks: eager raises the same
        raise Unsupported(f"higher-order op {what} failed on fake tensors: {type(e).__name__}: "
                          f"{str(e).splitlines()[0][:200] if str(e) else ''}") from None


def _index_in(result, fn):
    for i, v in enumerate(result):
        if v is fn:
            return i
    raise Unsupported("a function nested in torch.func's result")


def _draws_random(tx, gm, lifted, examples):
    from .checkpoint import _SeededOps
    mode = _SeededOps()
    try:
        with tx.output.fake_mode, mode:
            gm(*examples, *(n.meta["example_value"] for n in lifted))
    except Exception:  # noqa: BLE001 - cannot tell: assume it does
        return True
    return mode.found


class _TransformSite:
    """The graph node of one transformed call: ``site(*argument tensors, *lifted)`` returns the
    tensors of ``apply(body, args)``'s result, in pytree order."""

    def __init__(self, apply, gm, in_spec, out_spec):
        self.apply, self.gm, self.in_spec, self.out_spec = apply, gm, in_spec, out_spec
        self.n_in = in_spec.num_leaves
        self.keep = None
        self.__name__ = self.__qualname__ = f"func_{apply.name}"

    def _fn(self, lifted):
        gm, out_spec = self.gm, self.out_spec

        def fn(*a):
            return pytree.tree_unflatten(list(gm(*pytree.tree_leaves(a), *lifted)), out_spec)
        return fn

    def result(self, *flat, extra=()):
        args = pytree.tree_unflatten(list(flat[:self.n_in]), self.in_spec)
        return self.apply(self._fn(flat[self.n_in:]), args, extra)

    def __call__(self, *flat):
        leaves = pytree.tree_leaves(self.result(*flat))
        return tuple(leaves[i] for i in self.keep)

    def __repr__(self):
        return f"<torch.func.{self.apply.name} site>"


class FollowUpVariable(ObjectVariable):
    """The function a ``vjp`` or ``linearize`` returned: called, a site recomputes the
    transform and applies the function found at ``index`` of its result."""

    def __init__(self, apply, fn, args_var, index, value):
        super().__init__(value)
        self.apply, self.fn, self.args_var, self.index = apply, fn, args_var, index

    def as_python_constant(self):
        raise Unsupported("the function torch.func returned is not a constant")

    def call_function(self, tx, args, kwargs):
        if kwargs:
            raise Unsupported("keyword arguments to torch.func's returned function")
        from .lists import TupleVariable
        from .tensor import TensorVariable
        if not all(isinstance(a, TensorVariable) for a in args):
            raise Unsupported("torch.func's returned function called with values other than tensors")
        then = _Apply(self.apply.transform, self.apply.name, self.apply.opts, self.apply.wrapping,
                      then=self.index)
        return _apply_then(tx, then, self.fn, self.args_var, TupleVariable(list(args)))

    def reconstruct(self, codegen):
        raise Unsupported(f"the function torch.func.{self.apply.name} returned cannot be rebuilt in Python code")


def _apply_then(tx, apply, fn, args_var, extra_var):
    """Like _apply, with the follow-up's arguments as extra graph inputs of the site."""
    leaves, in_spec, body, gm, lifted, _ = _body(tx, apply, fn, args_var)
    site = _FollowUpSite(apply, gm, in_spec, _spec(body.rebuild(body.out_leaves)), len(extra_var.items))
    node_args = tuple(v.node for v in leaves) + tuple(v.node for v in extra_var.items) + tuple(lifted)
    what = f"torch.func.{apply.name}'s returned function"
    flat, spec = pytree.tree_flatten(_fake_result(tx, site, node_args, what))
    if not all(isinstance(v, torch.Tensor) for v in flat):
        raise Unsupported(f"{what} returns values other than tensors")
    site.keep = list(range(len(flat)))
    return _to_tracker(pytree.tree_unflatten(emit(tx, site, node_args, what), spec))


class _FollowUpSite(_TransformSite):
    def __init__(self, apply, gm, in_spec, out_spec, n_extra):
        super().__init__(apply, gm, in_spec, out_spec)
        self.n_extra = n_extra
        self.__name__ = self.__qualname__ = f"func_{apply.name}_apply"

    def result(self, *flat, extra=()):
        n, k = self.n_in, self.n_extra
        args = pytree.tree_unflatten(list(flat[:n]), self.in_spec)
        fn = self._fn(flat[n + k:])
        return self.apply(fn, args, tuple(flat[n:n + k]))


# ---- trees of trackers and pytree specs --------------------------------------------------------

def _spec(var):
    """The pytree spec of a tuple/list/dict tree of trackers (its leaves as _flatten finds them)."""
    return pytree.tree_flatten(_shape(var))[1]


class _Leaf:
    pass


def _shape(var):
    from .constant import ConstantVariable
    from .dicts import DictVariable
    from .lists import ListVariable, TupleVariable
    if type(var) in (TupleVariable, ListVariable):
        items = [_shape(v) for v in var.items]
        if type(var) is ListVariable:
            return items
        cls = var.tuple_cls
        return cls(*items) if cls is not tuple and hasattr(cls, "_fields") else tuple(items)
    if type(var) is DictVariable:
        return {k: _shape(v) for k, v in var.items.items()}
    if isinstance(var, ConstantVariable) and var.value is None:
        return None
    return _Leaf()


def _to_tracker(value):
    """A tree of trackers (Python containers holding trackers) as tracker containers."""
    from .base import VariableTracker
    from .constant import ConstantVariable
    from .dicts import DictVariable
    from .lists import ListVariable, TupleVariable
    if isinstance(value, VariableTracker):
        return value
    if value is None:
        return ConstantVariable(None)
    if isinstance(value, list):
        return ListVariable([_to_tracker(v) for v in value])
    if isinstance(value, tuple):
        items = [_to_tracker(v) for v in value]
        return TupleVariable(items, tuple_cls=type(value) if hasattr(type(value), "_fields") else tuple)
    if isinstance(value, dict):
        return DictVariable({k: _to_tracker(v) for k, v in value.items()})
    raise Unsupported(f"torch.func returns a {type(value).__name__}")


# ---- functional_call ---------------------------------------------------------------------------

def _functional_call(tx, a):
    from .constant import ConstantVariable
    from .dicts import DictVariable
    from .lists import BaseListVariable, TupleVariable
    from .nn_module import NNModuleVariable
    from .tensor import TensorVariable
    module, dicts, args, kwargs = a["module"], a["parameter_and_buffer_dicts"], a["args"], a["kwargs"]
    tie = _option(a["tie_weights"], "functional_call", "tie_weights")
    strict = _option(a["strict"], "functional_call", "strict")
    if not isinstance(module, NNModuleVariable):
        raise Unsupported(f"functional_call of {module} (a module the trace holds as itself is needed)")
    if isinstance(dicts, DictVariable):
        dicts = [dicts]
    elif isinstance(dicts, BaseListVariable) and all(isinstance(d, DictVariable) for d in dicts.items):
        dicts = list(dicts.items)
    else:
        raise Unsupported("functional_call's parameter_and_buffer_dicts must be a dict or a sequence of dicts")
    given = {}
    for d in dicts:
        for k, v in d.items.items():
            if not isinstance(k, str) or not isinstance(v, TensorVariable):
                raise Unsupported("functional_call's dicts must map names to tensors")
            if k in given:
                raise Unsupported(f"functional_call: {k!r} appears in several dicts (torch raises)")
            given[k] = v
    mod = module.module
    overrides = _overrides(mod, given, tie, strict)
    if module.source is None:
        raise Unsupported("functional_call of a module created in the trace")
    _guard_tables(tx, module.source, mod)  # the names checked above (unknown keys, strict)
    if isinstance(args, ConstantVariable) and args.value is None:
        call_args = []
    elif type(args) is TupleVariable:
        call_args = list(args.items)
    else:
        call_args = [args]
    call_kwargs = {}
    if not (isinstance(kwargs, ConstantVariable) and kwargs.value is None):
        if not isinstance(kwargs, DictVariable) or not all(isinstance(k, str) for k in kwargs.items):
            raise Unsupported("functional_call's kwargs must be a dict of names")
        call_kwargs = dict(kwargs.items)
    table = tx.output.member_overrides
    saved = dict(table)
    table.update(overrides)
    try:
        return module.call_function(tx, call_args, call_kwargs)
    finally:
        table.clear()
        table.update(saved)


def _guard_tables(tx, source, mod):
    """Guard the keys of every parameter and buffer table in ``mod``'s tree, which
    _overrides read to check the dict's names."""
    from ..source import AttrSource, ModuleMemberSource
    for prefix, sub in mod.named_modules(remove_duplicate=False):
        src = source
        for part in prefix.split(".") if prefix else ():
            src = ModuleMemberSource(src, "_modules", part)
        for table in ("_parameters", "_buffers"):
            tx.output.guards.DICT_KEYS(AttrSource(src, table), sub.__dict__[table])


def _overrides(mod, given, tie, strict):
    """{(id(submodule), table, name): tracker} for the members ``given`` replaces."""
    members = {}  # full name -> (submodule, table, leaf name, tensor)
    for prefix, sub in mod.named_modules(remove_duplicate=False):
        for table in ("_parameters", "_buffers"):
            for name, t in sub.__dict__[table].items():
                if t is not None:
                    members[f"{prefix}.{name}" if prefix else name] = (sub, table, name, t)
    unknown = [k for k in given if k not in members]
    if unknown:
        raise Unsupported(f"functional_call: {unknown[0]!r} is not a parameter or buffer of the module "
                          "(runs natively)")
    if strict:
        missing = [k for k in members if k not in given]
        if missing:
            raise Unsupported(f"functional_call(strict=True) without {missing[0]!r} (torch raises)")
    out = {}
    for full, (sub, table, name, t) in members.items():
        if full in given:
            repl = given[full]
        elif tie:
            tied = [k for k, m in members.items() if m[3] is t and k in given]
            if not tied:
                continue
            if len({id(given[k]) for k in tied}) > 1:
                raise Unsupported("functional_call: tied weights given different tensors (torch raises)")
            repl = given[tied[0]]
        else:
            continue
        out[(id(sub), table, name)] = repl
    return out
