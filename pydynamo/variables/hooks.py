"""Hooks: what ``nn.Module.__call__`` runs around ``forward``, and ``Tensor.register_hook``.

Calling a module (``call_module``) does what ``nn.Module._call_impl`` does. With no hook
anywhere (the module's four hook tables and torch's four global ones empty) it calls
``forward``, under one C check of the module's tables and one of the global ones. Otherwise the
hook tables are read as the trace reads any OrderedDict of the inputs (keys and their order
guarded, each hook guarded where read: a function by identity), and ``_run_forward_hooks``
below, inlined like user code, runs forward pre-hooks, ``forward`` and forward hooks in
``_call_impl``'s order with its rules for what they return; the hooks themselves are inlined
like any function. A hook added, removed, reordered or replaced after the compile fails a guard.

Backward hooks of modules (``register_full_backward_hook``, ``register_full_backward_pre_hook``,
``register_backward_hook``, and their global versions) are refused: ``_call_impl`` wraps the
module's inputs and outputs in an autograd Function whose backward calls Python hooks, which a
graph cannot hold (torch.compile breaks there too). The break runs the module call natively,
which is exact: the wrapped tensors are the real ones and their gradients come only from uses
inside the call and after it.

An exception leaving ``forward`` or a hook passes through unchanged, as ``_call_impl`` re-raises
it, unless a forward hook has ``always_call=True`` (eager runs it before re-raising): then the
exception is a graph break and Python runs the call.

``Tensor.register_hook`` (``register_post_accumulate_grad_hook``, ``retain_grad``) on a graph
input (an argument, a parameter) is replayed after the graph, like the other side effects: no
gradient can be computed inside the graph, so the hook is in place before any backward runs.
The tensor must not be changed in place in the graph (the hook would attach to another
version). On a tensor computed in the graph it is a graph break, which is exact only if
nothing in the graph used the tensor (its gradient from those uses would reach the graph's
backward without passing through the hook registered on the graph's output): otherwise the
frame runs eagerly.
"""
import collections
import contextlib

import torch

from ..exc import Unsupported
from ..polyfills import refuse
from ..source import AttrSource, ConstObjectSource, GetItemSource, TypeLookupSource
from .base import VariableTracker

_module_mod = torch.nn.modules.module
# (the module's table, torch's global table) in the order _call_impl reads them
_TABLES = (("_backward_pre_hooks", "_global_backward_pre_hooks"),
           ("_backward_hooks", "_global_backward_hooks"),
           ("_forward_pre_hooks", "_global_forward_pre_hooks"),
           ("_forward_hooks", "_global_forward_hooks"))


def _real_tables(mod):
    d = mod.__dict__
    if any(own not in d for own, _ in _TABLES):
        raise Unsupported(f"{type(mod).__name__} lacks nn.Module's hook tables (was "
                          "nn.Module.__init__ called?)")
    return [d[own] for own, _ in _TABLES] + [getattr(_module_mod, glob) for _, glob in _TABLES]


def call_module(tx, var, args, kwargs, entry=None):
    """``module(*args, **kwargs)`` for an NNModuleVariable ``var`` (``entry`` None: what
    ``type(module).__call__`` does), or ``entry(module, *args, **kwargs)`` for ``entry``
    nn.Module's ``__call__`` or ``_call_impl``, called explicitly (``super().__call__(x)``)."""
    from ..guards import no_global_module_hooks
    mod = var.module
    from .distributed import refuse_distributed_module
    refuse_distributed_module(mod)
    transparent = tx.transparent_call  # set by a CALL: what forward raises reaches the caller
    if entry is None:
        call = _class_attr(tx, var, "__call__")
        if call is not torch.nn.Module.__call__:  # the class's own: inlined
            return _call_override(tx, var, call, args, kwargs)
        entry = call
    if entry is torch.nn.Module.__call__:  # it calls self._call_impl
        if _class_attr(tx, var, "_call_impl") is not torch.nn.Module._call_impl or "_call_impl" in vars(mod):
            raise Unsupported(f"calling a {type(mod).__qualname__} whose _call_impl is not nn.Module's")
        if var.source is not None:  # self._call_impl finds an instance-dict entry first
            tx.output.guards.NOT_PRESENT(GetItemSource(AttrSource(var.source, "__dict__"), "_call_impl"))
    forward = var.var_getattr(tx, "forward")  # _call_impl reads self.forward first
    with _module_scope(tx.output, var):
        if all(_empty(tx, t) for t in _real_tables(mod)) and no_global_module_hooks():
            if var.source is not None:
                tx.output.guards.NN_MODULE_NO_HOOKS(var.source)
            else:  # made by the trace: no hooks of its own (create_module); the global ones are read
                tx.output.guards.PREDICATE(None, no_global_module_hooks, "no global nn.Module hooks")
            tx.transparent_call = transparent
            return forward.call_function(tx, args, kwargs)
        return _call_with_hooks(tx, var, forward, args, kwargs, transparent)


@contextlib.contextmanager
def _module_scope(output, var):
    """The nodes recorded inside this module call carry it in their ``nn_module_stack``."""
    key = str(id(var.module))
    pushed = key not in output.module_stack  # (a module calling itself again: one entry)
    if pushed:
        name = var.source.name() if var.source is not None else f"<{type(var.module).__name__} made in the trace>"
        output.module_stack[key] = (name, type(var.module))
    try:
        yield
    finally:
        if pushed:
            output.module_stack.pop(key, None)


def _empty(tx, table):
    """A hook table is empty, as the trace sees it (the trace may have read and changed it)."""
    from .dicts import DictVariable
    tracked = tx.output.mutable_objects.get(id(table))
    if tracked is not None and tracked[1] is table:
        return isinstance(tracked[0], DictVariable) and not tracked[0].items and not table
    return not table


def _class_attr(tx, var, name):
    """``name`` as the module's class finds it along its MRO, guarded by identity. Guarded on
    the class (the module's class is pinned with it: ``__class__`` assignment is not guarded),
    so a model of many modules of a few classes pays a few checks."""
    from ..source import type_lookup
    cls = type(var.module)
    value = type_lookup(cls, name)
    tx.output.guards.ID_MATCH(TypeLookupSource(ConstObjectSource(cls), name), value)
    return value


def _call_override(tx, var, call, args, kwargs):
    """``type(module).__call__(module, ...)`` for a class with its own ``__call__``: inlined
    (its ``super().__call__(...)`` comes back to call_module)."""
    import types
    from .functions import UserMethodVariable
    if not isinstance(call, types.FunctionType):
        raise Unsupported(f"calling a {type(var.module).__qualname__}, whose __call__ is a "
                          f"{type(call).__name__}")
    src = TypeLookupSource(ConstObjectSource(type(var.module)), "__call__")
    return UserMethodVariable(call, var, src).call_function(tx, list(args), dict(kwargs))


def _table(tx, var, name):
    """The module's hook table ``name`` as the trace sees it (a module made by the trace has
    empty ones it cannot change: create_module checks)."""
    if var.source is None:
        if var.module.__dict__[name]:
            raise Unsupported(f"{type(var.module).__name__} made in the trace has {name}")
        from .dicts import OrderedDictVariable
        return OrderedDictVariable({})
    if tx.output.side_effects.load_attr(tx, var, name) is not None:
        raise Unsupported(f"{var.source.name()}.{name} is reassigned by the compiled code")
    if name not in var.module.__dict__:
        raise Unsupported(f"{var.source.name()} has no {name} (not made by nn.Module.__init__)")
    return _checked(tx, var.module.__dict__[name], var.source.name() + "." + name,
                    lambda: var.var_getattr(tx, name))


def _global_table(tx, name):
    from .builder import wrap_value
    value = getattr(_module_mod, name)
    return _checked(tx, value, f"torch.nn.modules.module.{name}",
                    lambda: wrap_value(tx, value, AttrSource(ConstObjectSource(_module_mod), name)))


def _checked(tx, value, shown, read):
    """A hook table is an OrderedDict (or dict) keyed by hook ids (ints); anything else is
    refused before the trace reads it."""
    if type(value) not in (collections.OrderedDict, dict) or not all(type(k) is int for k in value):
        raise Unsupported(f"hook table {shown} is a {type(value).__name__} not keyed by hook ids: "
                          "not modelled")
    return read()


def _call_with_hooks(tx, var, forward, args, kwargs, transparent):
    from .dicts import DictVariable
    from .lists import TupleVariable
    name = type(var.module).__name__
    tables = {}
    for own, glob in _TABLES:
        tables[own], tables[glob] = _table(tx, var, own), _global_table(tx, glob)
        if own.startswith("_backward") and (tables[own].items or tables[glob].items):
            kind = "full backward pre-hooks" if "pre" in own else "backward hooks"
            where = "" if tables[own].items else " (global)"
            raise Unsupported(f"{name} has {kind}{where}: nn.Module wraps its inputs and outputs in an "
                              "autograd Function calling Python hooks at backward time, which a "
                              "graph cannot hold (torch.compile breaks here too)")
    pre_kw = _table(tx, var, "_forward_pre_hooks_with_kwargs")
    hooks_kw = _table(tx, var, "_forward_hooks_with_kwargs")
    g_hooks_kw = _global_table(tx, "_global_forward_hooks_with_kwargs")
    # an always_call forward hook runs when forward raises: such an exception is not simulated
    always = _always_called(tables["_forward_hooks"], lambda: _table(tx, var, "_forward_hooks_always_called")) \
        or _always_called(tables["_global_forward_hooks"],
                          lambda: _global_table(tx, "_global_forward_hooks_always_called"))
    bound = {"module": var, "forward": forward, "args": TupleVariable(list(args)),
             "kwargs": DictVariable(dict(kwargs)),
             "global_pre_hooks": tables["_global_forward_pre_hooks"],
             "pre_hooks": tables["_forward_pre_hooks"], "pre_hooks_with_kwargs": pre_kw,
             "global_hooks": tables["_global_forward_hooks"], "hooks": tables["_forward_hooks"],
             "hooks_with_kwargs": hooks_kw, "global_hooks_with_kwargs": g_hooks_kw}
    code = _run_forward_hooks.__code__
    assert tuple(bound) == code.co_varnames[:code.co_argcount]
    tx.transparent_call = transparent and not always
    what = "an always_call forward hook, which eager runs when forward raises" if always else "hooks"
    return tx.inline_call(code, _run_forward_hooks.__globals__, None, bound, {},
                          f"{name}.__call__ (nn.Module._call_impl, with {what})")


def _always_called(hooks, read_marks):
    return bool(hooks.items) and any(k in hooks.items for k in read_marks().items)


def _run_forward_hooks(module, forward, args, kwargs, global_pre_hooks, pre_hooks,
                       pre_hooks_with_kwargs, global_hooks, hooks, hooks_with_kwargs,
                       global_hooks_with_kwargs):
    """What nn.Module._call_impl does around ``forward`` when a module has forward hooks
    (inlined by the translator; never called)."""
    for hook_id, hook in (*global_pre_hooks.items(), *pre_hooks.items()):
        if hook_id in pre_hooks_with_kwargs:
            new = hook(module, args, kwargs)
            if new is not None:
                if not (isinstance(new, tuple) and len(new) == 2):
                    refuse("a forward pre-hook with kwargs returned neither None nor an "
                           "(args, kwargs) pair: nn.Module raises RuntimeError")
                args, kwargs = new
        else:
            new = hook(module, args)
            if new is not None:
                args = new if isinstance(new, tuple) else (new,)
    result = forward(*args, **kwargs)
    for hook_id, hook in (*global_hooks.items(), *hooks.items()):
        if hook_id in hooks_with_kwargs or hook_id in global_hooks_with_kwargs:
            new = hook(module, args, kwargs, result)
        else:
            new = hook(module, args, result)
        if new is not None:
            result = new
    return result


# ---- Tensor.register_hook -------------------------------------------------------------------

TENSOR_HOOK_METHODS = ("register_hook", "register_post_accumulate_grad_hook", "retain_grad")


def tensor_hook_method(tx, var, name, args, kwargs):
    """``var.<name>(...)`` for a TensorVariable ``var`` and a name of TENSOR_HOOK_METHODS."""
    from .constant import ConstantVariable
    params = ("hook",) if name != "retain_grad" else ()
    if len(args) + len(kwargs) != len(params) or len(args) > len(params) or set(kwargs) - set(params):
        raise Unsupported(f"TypeError: Tensor.{name}() takes {len(params)} argument(s) "
                          f"({', '.join(params) or 'none'})")
    hook = (list(args) + list(kwargs.values()))[0] if params else None
    fake = var.example_value
    found = var._as_input(tx)
    if found is None:
        _refuse_computed(tx, var, name)
    if not fake.requires_grad:
        raise Unsupported(f"RuntimeError: Tensor.{name}() of a tensor that does not require grad "
                          "(Python raises it)")
    if name == "register_post_accumulate_grad_hook" and not var._guarded_read(tx, "is_leaf").value:
        raise Unsupported("RuntimeError: post accumulate grad hooks cannot be registered on "
                          "non-leaf tensors (Python raises it)")
    if fake._version != 0:
        raise Unsupported(f"Tensor.{name}() of an input changed in place by the graph (the hook "
                          "would be registered on another version of it)")
    tx.output.side_effects.record_call(_TensorHookCall(var, name, hook))
    return ConstantVariable(None) if name == "retain_grad" else HookHandleVariable(name)


def _refuse_computed(tx, var, name):
    """A graph break before ``var.<name>()``, for a tensor the graph computes. The break runs it
    on the graph's output, so the hook sees the gradient of the uses after the break only: exact
    if the graph has no use of the tensor, nor of anything aliasing it (a view, an in-place op).
    Otherwise no break is right: the frame runs eagerly."""
    fake = var.example_value
    exc = Unsupported(f"Tensor.{name}() of a tensor computed in the graph (what it registers "
                      "would belong to the graph's backward: not captured)")
    if not fake.requires_grad:  # Python raises a RuntimeError there
        raise exc
    used = fake._version != 0 or fake._is_view() or fake.is_leaf or any(
        n.meta.get("example_value") is fake and n.users for n in tx.output.graph.nodes)
    if used:
        exc = Unsupported(f"{exc.reason}; the graph already uses that tensor, whose gradient "
                          "through those uses would bypass a hook registered after a graph break: "
                          "the frame runs eagerly")
        exc.whole_frame = True
    raise exc


class _TensorHookCall:
    """The side effect of ``x.register_hook(hook)`` on a graph input: the same call, made by
    the generated code after the graph (with the hook off: it is torch's code)."""

    def __init__(self, var, name, hook):
        from .lists import TupleVariable
        self.var, self.name = var, name
        self.values = TupleVariable([var] + ([hook] if hook is not None else []))

    def codegen_replay(self, codegen, temp):
        from .. import _C
        from .. import bytecode_utils as bu
        if self.var.example_value._version != 0:
            raise Unsupported(f"Tensor.{self.name}() of an input changed in place later in the "
                              "graph (the hook would be registered on another version of it)")
        codegen.load_function(_C.NoHookCall(getattr(torch.Tensor, self.name)))
        for i in range(len(self.values.items)):
            codegen.load_local(temp)
            codegen.load_const(i)
            codegen.append(bu.create_binary_subscr())
        codegen.append_call(len(self.values.items))
        codegen.append_pop_top()


class HookHandleVariable(VariableTracker):
    """The handle ``register_hook`` returns: the hook is registered after the graph, so the
    handle does not exist while tracing; any use of it is refused."""

    def __init__(self, name):
        super().__init__(None)
        self.name = name

    def python_type(self):
        return torch.utils.hooks.RemovableHandle

    def _refuse(self, *args, **kwargs):
        raise Unsupported(f"using the handle returned by Tensor.{self.name}() in compiled code "
                          "(the hook is registered after the graph)")

    var_getattr = call_method = reconstruct = _refuse
