"""nn.Module instances: calling one inlines its forward; parameters and buffers reach the graph
as inputs named by their Source (L['self'].lin.weight -> L_self_lin_weight).

A module is guarded by identity; every attribute the trace reads is guarded on its own
(self.training, self.eps, each parameter's TENSOR_MATCH), and containers by their keys, so
changing any of them recompiles.
"""
import types

import torch

from ..exc import Unsupported
from ..guards import nn_module_has_no_hooks, no_global_module_hooks
from ..source import AttrSource, ModuleMemberSource
from .base import VariableTracker, call_model
from .constant import ConstantVariable
from .lists import ListIteratorVariable, TupleVariable
from .user_defined import _MISSING, _MISSING_VALUE, lookup_class_attr

_CONTAINERS = (torch.nn.ModuleList, torch.nn.Sequential, torch.nn.ModuleDict)


class NNModuleVariable(VariableTracker):
    def __init__(self, module, source):
        super().__init__(source)
        self.module = module

    def python_type(self):
        return type(self.module)

    def truth(self, tx):
        if isinstance(self.module, _CONTAINERS) and _torch_container_method(type(self.module), "__len__") \
                and not hasattr(type(self.module), "__bool__"):
            return len(self._children(tx)) > 0
        if hasattr(type(self.module), "__bool__") or hasattr(type(self.module), "__len__"):
            raise Unsupported(f"truth value of {type(self.module).__name__}")
        return True

    def _src(self, name):
        return AttrSource(self.source, name) if self.source is not None else None

    def has_attr(self, tx, name):
        present = hasattr(self.module, name)
        if present:
            self.var_getattr(tx, name)  # installs the guards of what was found
        elif self.source is not None:
            tx.output.guards.NOT_PRESENT(self._src(name))
        return present

    def var_getattr(self, tx, name):
        from .builder import wrap_value
        mod, src = self.module, self._src(name)
        d = mod.__dict__
        if name in d:
            return wrap_value(tx, d[name], src)
        if name in _TREE_METHODS and _is_torch_method(type(mod), name):
            if src is not None:
                tx.output.guards.ID_MATCH(AttrSource(src, "__func__"), getattr(torch.nn.Module, name))
            from .base import GetAttrVariable
            return GetAttrVariable(self, name)  # called: call_method models it
        for table in ("_parameters", "_buffers", "_modules"):
            if name in d.get(table, {}):
                member = ModuleMemberSource(self.source, table, name) if self.source is not None else None
                return wrap_value(tx, d[table][name], member)
        found = lookup_class_attr(tx, self, type(mod), name, src)
        if found is _MISSING:
            raise Unsupported(f"{type(mod).__name__} has no attribute {name!r}")
        if found is not _MISSING_VALUE:
            return found
        return wrap_value(tx, getattr(mod, name), src)

    def call_function(self, tx, args, kwargs):
        mod = self.module
        if not nn_module_has_no_hooks(mod) or not no_global_module_hooks():
            raise Unsupported(f"{type(mod).__name__} has forward/backward hooks")
        if self.source is not None:
            tx.output.guards.NN_MODULE_NO_HOOKS(self.source)
        return self.var_getattr(tx, "forward").call_function(tx, args, kwargs)

    def _children(self, tx):
        """(key, child module) of a container, guarding its exact keys."""
        modules = self.module._modules
        if self.source is not None:
            tx.output.guards.DICT_KEYS(self._src("_modules"), modules)
        if isinstance(self.module, torch.nn.ModuleDict):
            return [(k, m) for k, m in modules.items()]
        return list(enumerate(modules.values()))

    def _child(self, tx, key, module):
        from .builder import wrap_value
        src = None
        if self.source is not None:
            # positions map to _modules keys: _children guarded those keys (DICT_KEYS)
            table_key = list(self.module._modules)[key] if isinstance(key, int) else key
            src = ModuleMemberSource(self.source, "_modules", table_key, shown=key)
        return wrap_value(tx, module, src)

    def unpack_var_sequence(self, tx):
        if not isinstance(self.module, _CONTAINERS) or not _torch_container_method(type(self.module), "__iter__"):
            raise Unsupported(f"iterating over {type(self.module).__name__}")
        children = self._children(tx)
        if isinstance(self.module, torch.nn.ModuleDict):
            return [ConstantVariable(k) for k, _ in children]
        return [self._child(tx, k, m) for k, m in children]

    def call_method(self, tx, name, args, kwargs):
        if isinstance(self.module, _CONTAINERS) and name in _CONTAINER_METHODS and \
                _torch_container_method(type(self.module), name):
            return call_model(types.MethodType(_CONTAINER_METHODS[name], self), tx, args, kwargs,
                              f"{type(self.module).__name__}.{name}")
        if name in _TREE_METHODS and _is_torch_method(type(self.module), name):
            return _tree_method(self, tx, name, args, kwargs)
        return self.var_getattr(tx, name).call_function(tx, args, kwargs)

    def _members(self, tx, table):
        """(key, tracker) of ``_parameters`` / ``_buffers`` / ``_modules``, guarding the keys;
        members are read like ``self.<key>`` (same sources, so the same graph inputs)."""
        from .builder import wrap_value
        members = self.module.__dict__[table]
        if self.source is not None:
            tx.output.guards.DICT_KEYS(self._src(table), members)
        return [(k, wrap_value(tx, v, ModuleMemberSource(self.source, table, k) if self.source is not None else None))
                for k, v in members.items()]

    def reconstruct(self, codegen):
        if self.source is None:
            raise Unsupported("a module created in traced code cannot be returned")
        self.source.reconstruct(codegen)

    def _repr_value(self):
        return type(self.module).__name__


# Module methods that walk the module tree. torch's code is generators keeping sets of modules
# and tensors compared by identity: modelled here (where the class does not override them).
_TREE_METHODS = ("named_parameters", "parameters", "named_buffers", "buffers", "named_modules",
                 "modules", "named_children", "children")


def _is_torch_method(cls, name):
    return getattr(cls, name, None) is getattr(torch.nn.Module, name)


def _tree_method(self, tx, name, args, kwargs):
    """``module.<name>(...)`` as torch computes it, as an iterator over the result."""
    from .base import signature
    try:
        bound = signature(getattr(torch.nn.Module, name)).bind(
            None, *[a.as_python_constant() for a in args],
            **{k: v.as_python_constant() for k, v in kwargs.items()})
    except TypeError:
        raise Unsupported(f"nn.Module.{name} with these arguments") from None
    bound.apply_defaults()
    opts = bound.arguments
    if opts.get("memo") is not None:
        raise Unsupported(f"nn.Module.{name}(memo=...)")
    if name in ("children", "named_children"):
        items, seen = [], set()
        for k, child in self._members(tx, "_modules"):
            if isinstance(child, NNModuleVariable) and id(child.module) not in seen:
                seen.add(id(child.module))
                items.append((k, child))
    elif name in ("modules", "named_modules"):
        items = _named_modules(tx, self, opts.get("prefix", ""), opts.get("remove_duplicate", True), set())
    else:
        table = "_parameters" if name.endswith("parameters") else "_buffers"
        items = _named_members(tx, self, table, opts.get("prefix", ""), opts["recurse"],
                               opts.get("remove_duplicate", True))
    if name.startswith("named_"):
        return ListIteratorVariable([TupleVariable([ConstantVariable(k), v]) for k, v in items],
                                    types.GeneratorType)
    return ListIteratorVariable([v for _, v in items], types.GeneratorType)


def _named_modules(tx, var, prefix, remove_duplicate, memo):
    """torch's named_modules: depth first, each module once (modules are guarded by identity,
    so which of them are the same object is pinned)."""
    if not _is_torch_method(type(var.module), "named_modules"):
        raise Unsupported(f"{type(var.module).__name__} overrides named_modules")
    if id(var.module) in memo:
        return []
    if remove_duplicate:
        memo.add(id(var.module))
    out = [(prefix, var)]
    for k, child in var._members(tx, "_modules"):
        if isinstance(child, NNModuleVariable):
            out += _named_modules(tx, child, prefix + ("." if prefix else "") + k, remove_duplicate, memo)
    return out


def _named_members(tx, var, table, prefix, recurse, remove_duplicate):
    """torch's _named_members: the parameters (or buffers) of each module, a tensor met twice
    (tied weights) listed once. Which of them are the same tensor is guarded (ALIASING)."""
    if not _is_torch_method(type(var.module), "_named_members"):
        raise Unsupported(f"{type(var.module).__name__} overrides _named_members")
    modules = _named_modules(tx, var, prefix, remove_duplicate, set()) if recurse else [(prefix, var)]
    out, seen, sources, values = [], set(), [], []
    for module_prefix, module in modules:
        for k, member in module._members(tx, table):
            value = module.module.__dict__[table][k]
            if value is None:
                continue
            if member.source is not None:
                sources.append(member.source)
                values.append(value)
            if id(value) in seen:
                continue
            if remove_duplicate:
                seen.add(id(value))
            out.append((module_prefix + ("." if module_prefix else "") + k, member))
    if remove_duplicate and len(sources) > 1:
        tx.output.guards.ALIASING(sources, values)
    return out


def _torch_container_method(cls, name):
    """``cls.name`` is torch's own container method (a subclass may override it: then it is
    inlined like any method)."""
    fn = getattr(cls, name, None)
    return fn is not None and any(fn is getattr(base, name, None) for base in _CONTAINERS)


def _len(self, tx):
    return ConstantVariable(len(self._children(tx)))


def _getitem(self, tx, index):
    key = index.as_python_constant()
    children = self._children(tx)
    if isinstance(self.module, torch.nn.ModuleDict):
        if key not in self.module._modules:
            raise Unsupported(f"KeyError: {key!r}")
        return self._child(tx, key, self.module._modules[key])
    if not isinstance(key, int):
        raise Unsupported(f"indexing {type(self.module).__name__} with {key!r}")
    n = len(children)
    if not -n <= key < n:
        raise Unsupported(f"IndexError: {type(self.module).__name__} index {key}")
    key = key % n
    return self._child(tx, key, children[key][1])


def _contains(self, tx, key):
    return ConstantVariable(key.as_python_constant() in dict(self._children(tx)))


def _keys(self, tx):
    return ListIteratorVariable([ConstantVariable(k) for k, _ in self._children(tx)])


def _values(self, tx):
    return ListIteratorVariable([self._child(tx, k, m) for k, m in self._children(tx)])


def _items(self, tx):
    return ListIteratorVariable([TupleVariable([ConstantVariable(k), self._child(tx, k, m)])
                                 for k, m in self._children(tx)])


_CONTAINER_METHODS = {"__len__": _len, "__getitem__": _getitem, "__contains__": _contains,
                      "keys": _keys, "values": _values, "items": _items}
