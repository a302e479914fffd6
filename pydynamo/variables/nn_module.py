"""nn.Module instances: calling one inlines its forward; parameters and buffers reach the graph
as inputs named by their Source (L['self'].lin.weight -> L_self_lin_weight).

A module is guarded by class, not identity (builder._module): every attribute the trace reads
is guarded on its own (self.training, self.eps, each parameter's TENSOR_MATCH), and containers by
their keys, so changing any of them recompiles, and another instance whose reads agree (the next
block of a model) uses the same entry.
"""
import collections
import types

import torch

from ..exc import Unsupported
from ..source import AttrSource, GetItemSource, ModuleMemberSource
from .base import EntryReadsVariable, VariableTracker, call_model
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
        if name == "__dict__" and "__dict__" not in d:
            return ModuleInstanceDictVariable(self)
        if name == "_buffers" and id(mod) in tx.output.side_effects.buffer_stores:
            raise Unsupported(f"{name} of a module after the trace reassigned a buffer (the store is "
                              "replayed when the graph has run)")
        if name in d and not _data_descriptor(type(mod), name):  # (a property wins over the dict)
            return wrap_value(tx, d[name], src)
        if name in _TREE_METHODS and _is_torch_method(type(mod), name):
            if src is not None:
                tx.output.guards.ID_MATCH(AttrSource(src, "__func__"), getattr(torch.nn.Module, name))
            from .base import GetAttrVariable
            return GetAttrVariable(self, name)  # called: call_method models it
        for table in ("_parameters", "_buffers", "_modules"):
            if name in d.get(table, {}):
                member = None
                if self.source is not None:
                    member = ModuleMemberSource(self.source, table, name)
                    # Python reaches the tables (Module.__getattr__) only when the instance dict
                    # has no entry of that name: another instance may have one
                    tx.output.guards.NOT_PRESENT(GetItemSource(AttrSource(self.source, "__dict__"), name))
                override = tx.output.member_overrides.get((id(mod), table, name))
                if override is not None:  # torch.func.functional_call's tensor for this member
                    if member is None:
                        raise Unsupported("functional_call of a module created in the trace")
                    tx.output.guards.ID_MATCH(member, d[table][name])  # (which members are tied)
                    return override
                return wrap_value(tx, d[table][name], member)
        found = lookup_class_attr(tx, self, type(mod), name, src)
        if found is _MISSING:
            raise Unsupported(f"{type(mod).__name__} has no attribute {name!r}")
        if found is not _MISSING_VALUE:
            return found
        return wrap_value(tx, getattr(mod, name), src)

    def call_function(self, tx, args, kwargs):
        from .hooks import call_module
        return call_module(tx, self, args, kwargs)  # nn.Module.__call__: hooks, then forward

    def is_call_impl(self, fn):
        """``fn`` is nn.Module's ``__call__`` or ``_call_impl`` (called explicitly:
        ``super().__call__(x)``, ``nn.Module.__call__(m, x)``)."""
        return fn is torch.nn.Module.__call__ or fn is torch.nn.Module._call_impl

    def call_impl(self, tx, fn, args, kwargs):
        from .hooks import call_module
        return call_module(tx, self, args, kwargs, entry=fn)

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
        if any(k[0] == id(self.module) for k in tx.output.member_overrides):
            raise Unsupported("a module's parameter or buffer tables walked inside functional_call")
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


def _data_descriptor(cls, name):
    """``cls`` finds a data descriptor (a property) for ``name``, which an instance-dict entry of
    that name does not shadow (object.__getattribute__; descriptors.is_data_descriptor's rule)."""
    from ..source import type_lookup
    from .descriptors import MISSING, is_data_descriptor
    attr = type_lookup(cls, name, MISSING)
    return attr is not MISSING and \
        is_data_descriptor(tuple(type_lookup(type(attr), n, MISSING) for n in ("__get__", "__set__", "__delete__")))


def _is_torch_method(cls, name):
    return getattr(cls, name, None) is getattr(torch.nn.Module, name)


def _tree_method(self, tx, name, args, kwargs):
    """``module.<name>(...)`` as torch computes it, as an iterator over the result."""
    from .base import signature
    if tx.output.side_effects.buffer_stores:  # torch would read the tables the trace wrote
        raise Unsupported(f"{name}() of a module after the trace reassigned a buffer (the store is "
                          "replayed when the graph has run)")
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
        children = [(k, c) for k, c in self._members(tx, "_modules") if isinstance(c, NNModuleVariable)]
        pin_identities(tx, [c for _, c in children])
        for k, child in children:
            if id(child.module) not in seen:
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


def pin_identities(tx, modules):
    """Which of these modules are the same object stays as traced (ALIASING), where the trace
    depends on it (a tree walk, which torch dedups by identity; an ``is``): modules are guarded
    by class only."""
    for m in modules:
        if m.source is not None:
            tx.output.mutable_sources[m.source.name()] = (m.source, m.module)
    tx.output.identity_read = True


def _named_modules(tx, var, prefix, remove_duplicate, memo):
    """torch's named_modules: depth first, each module once (which of them are the same object
    is guarded: pin_identities)."""
    if not _is_torch_method(type(var.module), "named_modules"):
        raise Unsupported(f"{type(var.module).__name__} overrides named_modules")
    pin_identities(tx, [var])
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
    if isinstance(key, slice):
        return _slice(self, tx, key, children)
    if not isinstance(key, int):
        raise Unsupported(f"indexing {type(self.module).__name__} with {key!r}")
    n = len(children)
    if not -n <= key < n:
        raise Unsupported(f"IndexError: {type(self.module).__name__} index {key}")
    key = key % n
    return self._child(tx, key, children[key][1])


def _slice(self, tx, key, children):
    """``container[a:b]``: torch builds a new container of the same class holding the same
    children (a ModuleList renumbers them, a Sequential keeps their names). Built here for real,
    like torch does, only for torch's own classes (a subclass's __init__ would run user code)."""
    cls = type(self.module)
    if cls not in (torch.nn.ModuleList, torch.nn.Sequential):
        raise Unsupported(f"slicing {cls.__name__} (a subclass: its constructor would run)")
    picked = list(range(len(children)))[key]
    child_vars = [self._child(tx, i, children[i][1]) for i in picked]
    if cls is torch.nn.Sequential:
        names = [list(self.module._modules)[i] for i in picked]
        new = torch.nn.Sequential(collections.OrderedDict((n, children[i][1]) for n, i in zip(names, picked)))
    else:
        new = torch.nn.ModuleList([children[i][1] for i in picked])
    return SlicedContainerVariable(new, dict(enumerate(child_vars)))  # positions in the new container


class SlicedContainerVariable(NNModuleVariable):
    """A ModuleList/Sequential sliced in the trace: a new container (made for real, as torch
    makes it) whose children are the parent's children, read through the parent's sources."""

    def __init__(self, module, child_vars):
        super().__init__(module, None)
        self.child_vars = child_vars  # key -> tracker, in order

    def _children(self, tx):
        return list(zip(self.child_vars, self.module._modules.values()))

    def _child(self, tx, key, module):
        return self.child_vars[key]

    def var_getattr(self, tx, name):
        if name in ("_modules", "_parameters", "_buffers"):
            raise Unsupported(f"reading {name} of a sliced {type(self.module).__name__}")
        return super().var_getattr(tx, name)

    def call_method(self, tx, name, args, kwargs):
        if name in _TREE_METHODS:
            raise Unsupported(f"{name}() of a sliced {type(self.module).__name__}")
        return super().call_method(tx, name, args, kwargs)


class ModuleInstanceDictVariable(EntryReadsVariable):
    """``module.__dict__``, read entry by entry (base.EntryReadsVariable): a present entry by its
    value's guards, an absent one by NOT_PRESENT; the trace's own stores to the module's
    attributes are seen first (side effects)."""

    shown = "module.__dict__"

    def python_type(self):
        return dict

    def _entry(self, tx, key):
        from .builder import wrap_value
        mv = self.owner
        stored = tx.output.side_effects.load_attr(tx, mv, key)
        if stored is not None:
            return stored
        if key == "_buffers" and id(mv.module) in tx.output.side_effects.buffer_stores:
            raise Unsupported("module.__dict__['_buffers'] after the trace reassigned a buffer")
        src = GetItemSource(AttrSource(mv.source, "__dict__"), key) if mv.source is not None else None
        d = mv.module.__dict__
        if key in d:
            return wrap_value(tx, d[key], src)
        if src is not None:
            tx.output.guards.NOT_PRESENT(src)
        return None


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


# ---- modules created by the traced code ----------------------------------------------------------
#
# ``loss_fct = CrossEntropyLoss(); loss = loss_fct(logits, labels)``. ``cls(*args, **kwargs)`` for
# an nn.Module class runs as Python runs it: ``object.__new__(cls)``, then ``cls.__init__``. A
# user's ``__init__`` is inlined; torch's own (a class of torch.nn.modules, whose base classes are
# torch's too) runs for real at trace time, on constant arguments, as it would at run time: the
# object is the trace's own. The result must hold no state that run time could make differently:
# no parameters or buffers (their initial values are random or computed), no submodules, no
# tensors, nothing but immutable constants besides nn.Module's bookkeeping. Torch's constructor
# runs on the meta device (a refused nn.Linear allocates nothing and draws no random numbers)
# and must neither warn nor change the RNG state. Attribute writes (the user's ``self.k = k``,
# ``m.eval()``) are kept on the tracker, never made on the object. Calling the module inlines its
# forward like any other; if it escapes the trace (returned, stored, live at a graph break) the
# generated code builds it again: ``object.__new__(cls)``, torch's ``__init__`` on the same
# arguments, then the writes, in order.

_REGISTRATION_HOOKS = ("_global_module_registration_hooks", "_global_parameter_registration_hooks",
                       "_global_buffer_registration_hooks")


def no_registration_hooks():
    """No global hook runs while a module registers its members (eager would call it per build)."""
    m = torch.nn.modules.module
    return not any(getattr(m, name, None) for name in _REGISTRATION_HOOKS)


_module_internals = None


def _internal_names():
    """The instance-dict entries every nn.Module has (its tables and hook dicts)."""
    global _module_internals
    if _module_internals is None:
        _module_internals = frozenset(vars(torch.nn.Module()))
    return _module_internals


def _immutable_constant(value):
    from .constant import is_constant_value
    if type(value) is tuple:
        return all(_immutable_constant(v) for v in value)
    return is_constant_value(value)


def _is_torch_class(c):
    return (getattr(c, "__module__", None) or "").startswith("torch.nn.modules.")


# What a user's subclass may define that torch's classes define too: its own constructor and
# forward (inlined, never run by torch's constructor), and class metadata.
_OVERRIDABLE = frozenset({"__init__", "forward", "extra_repr", "__module__", "__qualname__", "__doc__",
                          "__dict__", "__weakref__", "__annotations__", "__firstlineno__",
                          "__static_attributes__", "__orig_bases__", "__parameters__"})


def _check_user_classes(what, cls, fn):
    """Torch's constructor ``fn``, run for real on an instance of ``cls``, must reach no user
    code: ``fn``'s class and those after it in the MRO are torch's, and the user's classes
    before it define nothing that torch's code could reach through ``self``: no override of
    torch's attributes and no attribute whose reading or writing runs Python code (a property,
    a descriptor). nn.Module.__init__ reads only ``call_super_init`` and writes only its own
    tables (through ``object.__setattr__``); other constructors may touch any name."""
    from ..source import type_lookup as raw_type_lookup
    mro = cls.__mro__
    owner = next((c for c in mro if c.__dict__.get("__init__") is fn), None)
    if owner is None or not all(c is object or _is_torch_class(c) for c in mro[mro.index(owner):]):
        raise Unsupported(f"{what}: {fn.__qualname__} is not the constructor of a torch base class "
                          "followed by torch's classes only")
    if fn is torch.nn.Module.__init__:
        touched = _internal_names() | {"call_super_init"}
    else:
        touched = set().union(*(vars(c) for c in mro if _is_torch_class(c))) - _OVERRIDABLE
    for c in mro[:mro.index(owner)]:
        if _is_torch_class(c):
            continue
        for name, value in vars(c).items():
            if name in touched:
                raise Unsupported(f"{what}: {c.__qualname__} overrides torch's {name}, which "
                                  f"{fn.__qualname__} could use")
            if fn is torch.nn.Module.__init__ or isinstance(value, (types.FunctionType, staticmethod,
                                                                    classmethod)):
                continue  # (a method binds in C: reading it runs no Python code)
            if raw_type_lookup(type(value), "__get__") is not None:
                raise Unsupported(f"{what}: {c.__qualname__}.{name} is a {type(value).__name__}, which "
                                  f"{fn.__qualname__} could run")


def create_module(tx, cls_var, args, kwargs):
    """``cls(*args, **kwargs)`` for an nn.Module subclass, reached from objects.construct (the
    metaclass's ``__call__`` is ``type``'s)."""
    from .descriptors import bind, call_transparent, type_lookup
    cls = cls_var.value
    what = f"creating the nn.Module {cls.__qualname__} inside compiled code"
    if type(cls) is not type:
        raise Unsupported(f"{what}: its metaclass is {type(cls).__qualname__}")
    if hasattr(cls, "__del__"):  # the trace's own object would be finalized at trace time
        raise Unsupported(f"{what}: {cls.__qualname__} defines __del__")
    # the attribute protocol the trace models, and the allocation: pinned where read
    expected = {"__new__": object.__new__, "__getattribute__": object.__getattribute__,
                "__getattr__": torch.nn.Module.__getattr__, "__setattr__": torch.nn.Module.__setattr__,
                "__delattr__": torch.nn.Module.__delattr__, "__call__": torch.nn.Module.__call__}
    for name, fn in expected.items():
        if type_lookup(tx, cls_var, name)[0] is not fn:
            raise Unsupported(f"{what}: {cls.__qualname__}.{name} is not nn.Module's")
    var = CreatedModuleVariable(object.__new__(cls), cls_var)
    init, init_src = type_lookup(tx, cls_var, "__init__")
    if var.is_torch_init(init):
        var.run_torch_init(tx, init, args, kwargs)
    elif isinstance(init, types.FunctionType):  # the user's: inlined (it calls torch's)
        result = call_transparent(tx, bind(tx, var, "__init__", init, init_src, cls_var=cls_var), args, kwargs)
        if not (isinstance(result, ConstantVariable) and result.value is None):
            raise Unsupported(f"TypeError: __init__() should return None, not {result}")
    else:
        raise Unsupported(f"{what}: its __init__ is a {type(init).__name__}")
    if var.torch_init is None:
        raise Unsupported(f"{what}: its __init__ does not call nn.Module.__init__")
    return var


def _constant_argument(what, var):
    if not var.is_python_constant():
        raise Unsupported(f"{what}: the argument {var} is not a constant")
    value = var.as_python_constant()
    if not _immutable_constant(value):
        raise Unsupported(f"{what}: an argument of type {type(value).__name__} (only immutable "
                          "constants are passed to torch's constructor)")
    return value


def _check_stateless(what, module):
    """Refuse a module whose construction made state that run time would make anew (a random
    or computed parameter, a buffer, a tensor, a submodule) or that the trace could not follow
    (a mutable attribute, a hook)."""
    params = [k for k, v in module._parameters.items() if v is not None]
    if params:
        raise Unsupported(f"{what}: its constructor creates parameters ({', '.join(params)}), "
                          "initialised at run time (create the module outside the compiled code)")
    buffers = [k for k, v in module._buffers.items() if v is not None]
    if buffers:
        raise Unsupported(f"{what}: its constructor creates buffers ({', '.join(buffers)})")
    if module._modules:
        raise Unsupported(f"{what}: its constructor creates submodules ({', '.join(module._modules)})")
    internals = _internal_names()
    for name, value in vars(module).items():
        if name in internals:
            if name in _MODULE_HOOK_TABLES and value:
                raise Unsupported(f"{what}: its constructor registers hooks")
            continue
        if not _immutable_constant(value):
            raise Unsupported(f"{what}: its attribute {name!r} is a {type(value).__name__}, "
                              "not an immutable constant")


_MODULE_HOOK_TABLES = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks",
                       "_state_dict_hooks", "_state_dict_pre_hooks", "_load_state_dict_pre_hooks",
                       "_load_state_dict_post_hooks")


class CreatedModuleVariable(NNModuleVariable):
    """A module built by the trace (``create_module``): a fresh object each run, so nothing
    about it is guarded except its class's attributes (read through ``cls_var``, as
    ``_PyType_Lookup`` reads them). ``module`` is the object as torch's constructor left it;
    attribute writes made by the trace live in ``writes``."""

    def __init__(self, module, cls_var):
        super().__init__(module, None)
        self.cls_var = cls_var
        self.torch_init = None  # (torch's __init__, args, kwargs) once it ran
        self.writes = {}  # name -> tracker: instance-dict writes made by the trace, in order

    def is_torch_init(self, fn):
        """``fn`` is the ``__init__`` of one of torch's classes in this module's MRO (whatever
        function torch keeps there: torch._dynamo wraps nn.Module's)."""
        return isinstance(fn, types.FunctionType) and any(
            c.__dict__.get("__init__") is fn and _is_torch_class(c) for c in type(self.module).__mro__)

    def run_torch_init(self, tx, fn, args, kwargs):
        """``fn(self, *args, **kwargs)`` for torch's ``__init__`` ``fn``: run now, for real."""
        import warnings
        cls = type(self.module)
        what = f"creating the nn.Module {cls.__qualname__} inside compiled code"
        if self.torch_init is not None:
            raise Unsupported(f"{what}: nn.Module.__init__ called twice")
        _check_user_classes(what, cls, fn)
        const_args = [_constant_argument(what, a) for a in args]
        const_kwargs = {k: _constant_argument(what, v) for k, v in kwargs.items()}
        if not no_registration_hooks():
            raise Unsupported(f"{what}: global nn.Module registration hooks are set")
        tx.output.guards.PREDICATE(None, no_registration_hooks, "no global nn.Module registration hooks")
        rng = torch.get_rng_state()
        try:
            with warnings.catch_warnings(record=True) as caught, torch.device("meta"):
                warnings.simplefilter("always")
                fn(self.module, *const_args, **const_kwargs)
        except Exception as e:  # raised at run time too: the call runs there, after a graph break
            raise Unsupported(f"{what}: {fn.__qualname__} raised {type(e).__name__}: {e}") from None
        finally:
            drew = not torch.equal(rng, torch.get_rng_state())  # (meta kernels draw nothing)
            if drew:
                torch.set_rng_state(rng)
        if drew:
            raise Unsupported(f"{what}: {fn.__qualname__} draws random numbers")
        if caught:
            raise Unsupported(f"{what}: {fn.__qualname__} warns ({caught[0].message})")
        _check_stateless(what, self.module)
        self.torch_init = (fn, const_args, const_kwargs)
        return ConstantVariable(None)

    def _table(self, table):
        if self.torch_init is None:
            raise Unsupported(f"{type(self.module).__name__}.{table} read before nn.Module.__init__")
        return self.module.__dict__[table]

    def _children(self, tx):
        return list(self._table("_modules").items())  # empty: _check_stateless

    def _members(self, tx, table):
        from .builder import wrap_value
        return [(k, wrap_value(tx, v, None)) for k, v in self._table(table).items()]  # all None

    def var_getattr(self, tx, name):
        """``object.__getattribute__``, then ``nn.Module.__getattr__`` (the member tables)."""
        from .builder import wrap_value
        from .descriptors import MISSING, bind, descriptor_slots, is_data_descriptor, missing, type_lookup
        attr, src = type_lookup(tx, self.cls_var, name)
        if name in _TREE_METHODS and _is_torch_method(type(self.module), name):
            from .base import GetAttrVariable
            return GetAttrVariable(self, name)  # called: call_method models it
        slots = descriptor_slots(tx, attr, src) if attr is not MISSING else None
        if slots is not None and is_data_descriptor(slots):
            return bind(tx, self, name, attr, src, slots, cls_var=self.cls_var)
        if name in self.writes:
            return self.writes[name]
        d = self.module.__dict__
        if name in d:
            if not _immutable_constant(d[name]):
                raise Unsupported(f"reading {name!r} of a module created in compiled code")
            return wrap_value(tx, d[name], None)
        if attr is not MISSING:
            return bind(tx, self, name, attr, src, slots, cls_var=self.cls_var)
        for table in ("_parameters", "_buffers", "_modules"):
            if name in d.get(table, ()):
                return wrap_value(tx, d[table][name], None)  # None: _check_stateless
        raise missing(tx, type(self.module), name)

    def has_attr(self, tx, name):
        from ..exc import ExceptionRaised
        from .descriptors import is_attribute_error
        try:
            self.var_getattr(tx, name)
        except ExceptionRaised as e:
            if is_attribute_error(e):
                return False
            raise
        return True

    def store_attr(self, tx, name, value):
        """``nn.Module.__setattr__`` for a constant value and a name that is no member (the
        path that ends in ``object.__setattr__``): kept in ``writes``."""
        from .descriptors import MISSING, descriptor_slots, type_lookup
        cls = type(self.module)
        what = f"assignment to attribute {name!r} of a {cls.__name__} created in compiled code"
        if isinstance(value, NNModuleVariable):
            raise Unsupported(f"{what}: a submodule")
        if not (value.is_python_constant() and _immutable_constant(value.as_python_constant())):
            raise Unsupported(f"{what}: {value} is not an immutable constant")
        if self.torch_init is None:
            raise Unsupported(f"{what}: before nn.Module.__init__")
        if type_lookup(tx, self.cls_var, "__setattr__")[0] is not torch.nn.Module.__setattr__:
            raise Unsupported(f"{what}: {cls.__name__}.__setattr__ is not nn.Module's")
        d = self.module.__dict__
        if any(name in d[t] for t in ("_parameters", "_buffers", "_modules")) or \
                (name in _internal_names() and name != "training"):
            raise Unsupported(f"{what}: a member or internal table")
        attr, src = type_lookup(tx, self.cls_var, name)
        if attr is not MISSING and descriptor_slots(tx, attr, src)[1] is not MISSING:
            raise Unsupported(f"{what}: the class defines a descriptor of that name")
        self.writes[name] = value  # (a dict keeps a name where it was first written, as __dict__ does)
        return ConstantVariable(None)

    def reconstruct(self, codegen):
        """``object.__new__(cls)``, torch's ``__init__`` on the same arguments, the trace's
        attribute writes; kept in a temporary that later references load (one object, however
        many places hold it)."""
        from .. import bytecode_utils as bu
        from .builder import wrap_constant
        fn, args, kwargs = self.torch_init
        codegen.load_function(object.__new__)
        codegen.load_const(type(self.module))
        codegen.append_call(1)
        temp = codegen.new_temp()
        codegen.store_local(temp)
        codegen._temps[id(self)] = temp
        codegen._keep_alive.append(self)
        codegen.load_function(fn)
        codegen.load_local(temp)
        for value in (*args, *kwargs.values()):
            codegen(wrap_constant(value))
        codegen.append_call(1 + len(args) + len(kwargs), tuple(kwargs))
        codegen.append_pop_top()
        for name, value in self.writes.items():
            codegen(value)
            codegen.load_local(temp)
            codegen.append(bu.create_instruction("STORE_ATTR", name))
        codegen.load_local(temp)

    def _repr_value(self):
        return f"{type(self.module).__name__} created in the trace"
