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
from .base import VariableTracker
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
            return _call_container_method(self, tx, _CONTAINER_METHODS[name], name, args, kwargs)
        if name in ("children", "named_children") and not args and not kwargs:
            items = [(k, m) for k, m in self._children_any(tx)]
            if name == "children":
                return ListIteratorVariable([self._child_by_attr(tx, k, m) for k, m in items],
                                            types.GeneratorType)
            return ListIteratorVariable([TupleVariable([ConstantVariable(k), self._child_by_attr(tx, k, m)])
                                         for k, m in items], types.GeneratorType)
        if name in ("parameters", "named_parameters", "buffers", "named_buffers"):
            raise Unsupported(f"nn.Module.{name}() while tracing")
        return self.var_getattr(tx, name).call_function(tx, args, kwargs)

    def _children_any(self, tx):
        modules = self.module._modules
        if self.source is not None:
            tx.output.guards.DICT_KEYS(self._src("_modules"), modules)
        return list(modules.items())

    def _child_by_attr(self, tx, key, module):
        from .builder import wrap_value
        return wrap_value(tx, module, self._src(key))

    def reconstruct(self, codegen):
        if self.source is None:
            raise Unsupported("a module created in traced code cannot be returned")
        self.source.reconstruct(codegen)

    def _repr_value(self):
        return type(self.module).__name__


def _torch_container_method(cls, name):
    """``cls.name`` is torch's own container method (a subclass may override it: then it is
    inlined like any method)."""
    fn = getattr(cls, name, None)
    return fn is not None and any(fn is getattr(base, name, None) for base in _CONTAINERS)


def _call_container_method(self, tx, fn, name, args, kwargs):
    import inspect
    try:
        inspect.signature(fn).bind(self, tx, *args, **kwargs)
    except TypeError:
        raise Unsupported(f"{type(self.module).__name__}.{name} with these arguments") from None
    return fn(self, tx, *args, **kwargs)


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
