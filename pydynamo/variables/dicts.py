"""Dicts with trace-time-constant keys, their keys()/values()/items() views, and the dicts of
the collections module (OrderedDict, defaultdict)."""
import collections

from ..exc import Unsupported
from .base import TypeAttributes, VariableTracker, call_model
from .constant import ConstantVariable, is_constant_value
from .lists import TupleVariable


def hashed_by_identity(value):
    """``value``'s hash and equality are its identity (classes, functions, modules, plain
    objects): as a dict key it is found only by itself, so a key guard pins which object it is."""
    cls = type(value)
    return cls.__hash__ in (object.__hash__, type.__hash__) and cls.__eq__ in (object.__eq__, type.__eq__)


def valid_key(value):
    """A key a DictVariable holds: a constant, a tuple of them, or an object hashed by identity."""
    if type(value) is tuple:
        return all(valid_key(v) for v in value)
    if type(value) is frozenset:  # of constants: hashed and compared as sets.py models them
        from .sets import _is_element
        return all(_is_element(v) for v in value)
    return is_constant_value(value) or hashed_by_identity(value)


def _key(tracker):
    from .ids import IdVariable, ResolvedKeyVariable, dict_key
    if isinstance(tracker, IdVariable):  # resolved by DictVariable.call_method
        return dict_key(tracker)
    if isinstance(tracker, ResolvedKeyVariable):  # a tensor: resolved by DictVariable.call_method
        return tracker.key
    if not tracker.is_python_constant():
        raise Unsupported(f"dict key {tracker} is not a constant")
    key = tracker.as_python_constant()
    try:
        hash(key)
    except TypeError:
        raise Unsupported(f"unhashable dict key {key!r}") from None
    if not valid_key(key):
        raise Unsupported(f"dict key of type {type(key).__name__} (it defines its own hash or equality)")
    return key


def key_var(tx, key):
    """The tracker of a key found in a dict: a constant, or the object itself, guarded below
    a root that holds it (its identity is pinned by the dict's key guard)."""
    if type(key) is tuple:
        return TupleVariable([key_var(tx, k) for k in key])
    from . import ids
    if type(key) is ids.IdKey:
        return ids.key_var(key)
    if type(key) is ids.TensorKey:
        return key.var
    if type(key) is frozenset:
        from .sets import SetVariable
        return SetVariable.new(key, ("const", key))
    if is_constant_value(key):
        return ConstantVariable(key)
    from ..source import ConstObjectSource
    from .builder import wrap_value
    return wrap_value(tx, key, ConstObjectSource(key))


def load_key(codegen, key):
    """Push the key a DictVariable holds: a tensor key is the tensor (its tracker), any other
    a constant; an ``id()`` key (IdKey) has no run-time number: refused."""
    from .ids import IdKey, TensorKey
    if type(key) is TensorKey:
        return codegen(key.var)
    if type(key) is IdKey:
        raise Unsupported("a dict keyed by id() of an object made in the trace cannot be rebuilt at run time")
    codegen.load_const(key)


class DictVariable(TypeAttributes, VariableTracker):
    """``items`` maps the real (constant) keys to trackers of the values, in insertion order."""

    def __init__(self, items, source=None):
        super().__init__(source)
        self.items = dict(items)

    def python_type(self):
        return dict

    def as_python_constant(self):
        from .ids import has_id_keys, has_tensor_keys
        if has_id_keys(self) or has_tensor_keys(self):
            raise Unsupported(f"{self} is keyed by id() of objects or by tensors (not constants)")
        return {k: v.as_python_constant() for k, v in self.items.items()}

    def truth(self, tx):
        return bool(self.items)

    def unpack_var_sequence(self, tx):
        return [key_var(tx, k) for k in self.items]

    def own_attrs(self):
        """The names in the instance dict (an OrderedDict has one): none where the trace made
        the object (it refuses attribute stores), not known where it was read from an input."""
        return () if self.source is None else None

    def _mutate(self, tx):
        tx.output.note_mutation(self)

    def call_method(self, tx, name, args, kwargs):
        cls = self.python_type()
        handler = getattr(self, f"_method_{name.strip('_')}", None) if hasattr(cls, name) else None
        if handler is None or (kwargs and name not in self._KEYWORD_METHODS):
            raise Unsupported(f"{cls.__name__}.{name}")
        from .ids import prepare_dict_call
        args = prepare_dict_call(tx, self, name, args)  # keys that are id() of objects
        return call_model(handler, tx, args, kwargs, f"{cls.__name__}.{name}")

    _KEYWORD_METHODS = ("update",)

    def _method_getitem(self, tx, key):
        k = _key(key)
        if k not in self.items:
            self._missing(k)
        return self.items[k]

    def _missing(self, k):
        """A lookup of a key the dict does not have: Python's KeyError, raised in the trace."""
        from .ids import IdKey, key_error
        if type(k) is IdKey and self.python_type() is dict:
            raise key_error(k)
        if self.python_type() is dict:
            from .exceptions import raise_exception
            raise_exception(KeyError(k))
        raise Unsupported(f"KeyError: {k!r}")

    def _method_get(self, tx, key, default=None):
        return self.items.get(_key(key), default or ConstantVariable(None))

    def _method_contains(self, tx, key):
        return ConstantVariable(_key(key) in self.items)

    def _method_len(self, tx):
        return ConstantVariable(len(self.items))

    def _method_keys(self, tx):
        return DictViewVariable(self, "keys")

    def _method_values(self, tx):
        return DictViewVariable(self, "values")

    def _method_items(self, tx):
        return DictViewVariable(self, "items")

    def _method_copy(self, tx):
        return DictVariable(self.items)

    def _method_setitem(self, tx, key, value):
        k = _key(key)
        self._mutate(tx)
        self.items[k] = value
        return ConstantVariable(None)

    def _method_delitem(self, tx, key):
        k = _key(key)
        if k not in self.items:
            self._missing(k)
        self._mutate(tx)
        del self.items[k]
        return ConstantVariable(None)

    def _method_pop(self, tx, key, default=None):
        k = _key(key)
        if k not in self.items:
            if default is None:
                self._missing(k)
            return default
        self._mutate(tx)
        return self.items.pop(k)

    def _method_setdefault(self, tx, key, default=None):
        k = _key(key)
        if k not in self.items:
            self._mutate(tx)
            self.items[k] = default or ConstantVariable(None)
        return self.items[k]

    def _method_clear(self, tx):
        self._mutate(tx)
        self.items.clear()
        return ConstantVariable(None)

    def _method_update(self, tx, other=None, **kwargs):
        new = dict(items_of(tx, other)) if other is not None else {}
        new.update(kwargs)
        self._mutate(tx)
        self.items.update(new)
        return ConstantVariable(None)

    def reconstruct(self, codegen):
        if self.source is not None:  # the same object (mutations were replayed into it)
            return self.source.reconstruct(codegen)
        from .ids import has_id_keys
        if has_id_keys(self):
            raise Unsupported(f"{self}, keyed by id() of objects, cannot be rebuilt at run time")
        for k, v in self.items.items():
            load_key(codegen, k)
            codegen(v)
        codegen.append_build(dict, len(self.items))

    def _repr_value(self):
        return repr(self.items)


def items_of(tx, mapping):
    """(key, value tracker) pairs of a dict tracker or of a sequence of pairs."""
    if isinstance(mapping, DictVariable):
        return list(mapping.items.items())
    from .exceptions import raise_exception
    try:
        cls = mapping.python_type()
    except Unsupported:
        cls = None
    if isinstance(cls, type) and hasattr(cls, "keys") and not isinstance(mapping, DictViewVariable):
        return _mapping_items(tx, mapping, cls)
    pairs = []
    for i, pair in enumerate(mapping.unpack_var_sequence(tx)):
        try:
            kv = pair.unpack_var_sequence(tx)
        except Unsupported:
            if pair.is_python_constant() and not isinstance(pair.as_python_constant(), (str, bytes)):
                raise_exception(TypeError(f"cannot convert dictionary update sequence element #{i} to a sequence"))
            raise
        if len(kv) != 2:  # what dict() and dict.update raise
            raise_exception(ValueError(f"dictionary update sequence element #{i} has length {len(kv)}; "
                                       "2 is required"))
        pairs.append((_key(kv[0]), kv[1]))
    return pairs


def _mapping_items(tx, mapping, cls):
    """What ``dict(m)`` / ``d.update(m)`` / ``{**m}`` read from a mapping that is not a plain dict:
    a dict subclass that keeps dict's iteration, its raw entries (CPython's fast path); anything
    else, ``m.keys()`` then ``m[k]`` for each key, through the class's own methods."""
    from .objects import UserDefinedObjectVariable, input_contents, solid_base
    if isinstance(mapping, UserDefinedObjectVariable) and issubclass(cls, dict) \
            and solid_base(cls) is dict:
        from .descriptors import type_lookup
        if type_lookup(tx, mapping.cls_var, "__iter__")[0] is dict.__iter__:
            if mapping.base is None:
                if mapping.value is None or mapping.source is None:
                    raise Unsupported(f"the entries of {mapping}")
                mapping.base = input_contents(tx, mapping)
            return list(mapping.base.items.items())
    keys = mapping.call_method(tx, "keys", [], {})
    return [(_key(k), mapping.call_method(tx, "__getitem__", [k], {})) for k in keys.unpack_var_sequence(tx)]


class DictViewVariable(TypeAttributes, VariableTracker):
    """dict.keys() / values() / items() of a DictVariable (a live view, as in CPython)."""

    def __init__(self, dict_var, kind):
        super().__init__(None)
        self.dict_var, self.kind = dict_var, kind

    def python_type(self):
        return type(getattr(self.dict_var.python_type()(), self.kind)())

    def unpack_var_sequence(self, tx):
        items = self.dict_var.items
        if self.kind == "keys":
            return [key_var(tx, k) for k in items]
        if self.kind == "values":
            return list(items.values())
        return [TupleVariable([key_var(tx, k), v]) for k, v in items.items()]

    def truth(self, tx):
        return bool(self.dict_var.items)

    def call_method(self, tx, name, args, kwargs):
        if name == "__len__":
            return ConstantVariable(len(self.dict_var.items))
        if name == "__contains__" and self.kind == "keys":
            return ConstantVariable(_key(args[0]) in self.dict_var.items)
        if name == "isdisjoint" and self.kind != "values" and len(args) == 1 and not kwargs:
            from .sets import operand
            return ConstantVariable(operand(tx, self)[0].isdisjoint(operand(tx, args[0])[0]))
        raise Unsupported(f"dict_{self.kind}.{name}")

    def reconstruct(self, codegen):
        codegen(self.dict_var)
        codegen.append_call_method(self.kind, 0)


class OrderedDictVariable(DictVariable):
    """A ``collections.OrderedDict``: a dict whose equality with another OrderedDict is
    order-sensitive, with ``move_to_end`` and ``popitem(last)``."""

    _KEYWORD_METHODS = ("update", "move_to_end", "popitem")

    def python_type(self):
        return collections.OrderedDict

    def as_python_constant(self):
        return collections.OrderedDict(super().as_python_constant())

    def _method_copy(self, tx):
        return OrderedDictVariable(self.items)

    def _method_move_to_end(self, tx, key, last=None):
        k = _key(key)
        if k not in self.items:
            self._missing(k)
        self._mutate(tx)
        value = self.items.pop(k)
        if last is None or last.truth(tx):
            self.items[k] = value
        else:
            self.items = {k: value, **self.items}
        return ConstantVariable(None)

    def _method_popitem(self, tx, last=None):
        if not self.items:
            raise Unsupported("KeyError: dictionary is empty")
        self._mutate(tx)
        k = next(reversed(self.items)) if last is None or last.truth(tx) else next(iter(self.items))
        return TupleVariable([key_var(tx, k), self.items.pop(k)])

    def reconstruct(self, codegen):
        if self.source is not None:
            return self.source.reconstruct(codegen)
        codegen.load_function(collections.OrderedDict)
        super().reconstruct(codegen)
        codegen.append_call(1)


class DefaultDictVariable(DictVariable):
    """A ``collections.defaultdict``: a missing key read with ``d[k]`` gets
    ``default_factory()`` (called in the trace) stored under it."""

    def __init__(self, items, default_factory, source=None):
        super().__init__(items, source)
        self.default_factory = default_factory

    def python_type(self):
        return collections.defaultdict

    def as_python_constant(self):
        return collections.defaultdict(self.default_factory.as_python_constant(),
                                       super().as_python_constant())

    def var_getattr(self, tx, name):
        if name == "default_factory":
            return self.default_factory
        return super().var_getattr(tx, name)

    def _method_getitem(self, tx, key):
        k = _key(key)
        if k not in self.items:
            if self.default_factory.is_python_constant() and self.default_factory.as_python_constant() is None:
                self._missing(k)
            from .ids import IdKey
            if type(k) is IdKey and self.source is not None:
                raise Unsupported("id() stored as a key of a dict that existed before the frame")
            value = self.default_factory.call_function(tx, [], {})
            self._method_setitem(tx, key, value)
        return self.items[k]

    def _method_copy(self, tx):
        return DefaultDictVariable(self.items, self.default_factory)

    def reconstruct(self, codegen):
        if self.source is not None:
            return self.source.reconstruct(codegen)
        codegen.load_function(collections.defaultdict)
        codegen(self.default_factory)
        super().reconstruct(codegen)
        codegen.append_call(2)


# ---- inputs keyed by tensors, and defaultdict inputs -------------------------------------------

class TensorKeysAre:
    """A guard: the value is a ``cls`` whose keys are, in order, the tensors ``refs`` refer to
    (the very objects: held by weak references, so the guard keeps no parameter alive)."""

    def __init__(self, cls, refs):
        self.cls, self.refs = cls, tuple(refs)

    def __call__(self, value):
        return type(value) is self.cls and dict.__len__(value) == len(self.refs) and all(
            k is r() for k, r in zip(dict.__iter__(value), self.refs))

    def __repr__(self):
        return f"is a {self.cls.__name__} keyed by the {len(self.refs)} tensors traced"


def is_keyed_input(value):
    """A dict or defaultdict (exactly) keyed only by tensors (an optimizer's ``state``), or a
    defaultdict keyed by constants."""
    import torch
    if type(value) not in (dict, collections.defaultdict):
        return False
    if type(value) is collections.defaultdict and all(valid_key(k) for k in value):
        return True
    return len(value) > 0 and all(type(k) in (torch.Tensor, torch.nn.Parameter) for k in value)


def wrap_keyed_input(tx, value, source):
    """The tracker of ``value`` (see is_keyed_input) read from ``source``: its type and keys in
    order are guarded (tensors by identity), each entry is read raw (dict's own lookup: no
    ``__missing__`` in a guard); a tensor key is a graph input of its own, found again at run
    time through its weak reference, and the same object as the tensor the trace reaches by
    another path where it is (ids._resolve_tensor: one aliasing guard per lookup)."""
    import weakref
    from ..source import AttrSource, ConstObjectSource, DictItemSource, TensorKeyItemSource, WeakrefSource
    from .builder import wrap_value
    from .ids import TensorKey
    from .stdlib import KeysAre
    if source is None:
        raise Unsupported(f"a {type(value).__name__} keyed by tensors that is not reachable from the frame's inputs")
    items = {}
    if all(valid_key(k) for k in value):
        check = KeysAre(type(value), value, raw=dict)
        tx.output.guards.PREDICATE(source, check, f"{source.name()} {check!r}")
        for k in value:
            items[k] = wrap_value(tx, dict.__getitem__(value, k), DictItemSource(source, k))
    else:
        refs = [weakref.ref(k) for k in value]
        check = TensorKeysAre(type(value), refs)
        tx.output.guards.PREDICATE(source, check, f"{source.name()} {check!r}")
        for k, ref in zip(value, refs):
            key_src = WeakrefSource(ConstObjectSource(ref))
            key = TensorKey(wrap_value(tx, k, key_src))
            key.from_input = True
            items[key] = wrap_value(tx, dict.__getitem__(value, k), TensorKeyItemSource(source, ref, key_src))
    if type(value) is dict:
        return DictVariable(items, source)
    factory = wrap_value(tx, value.default_factory, AttrSource(source, "default_factory"))
    return DefaultDictVariable(items, factory, source)
