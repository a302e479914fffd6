"""Dicts with trace-time-constant keys, their keys()/values()/items() views, and the dicts of
the collections module (OrderedDict, defaultdict)."""
import collections

from ..exc import Unsupported
from .base import GetAttrVariable, VariableTracker, call_model
from .constant import ConstantVariable
from .lists import TupleVariable


def _key(tracker):
    if not tracker.is_python_constant():
        raise Unsupported(f"dict key {tracker} is not a constant")
    key = tracker.as_python_constant()
    try:
        hash(key)
    except TypeError:
        raise Unsupported(f"unhashable dict key {key!r}") from None
    return key


class DictVariable(VariableTracker):
    """``items`` maps the real (constant) keys to trackers of the values, in insertion order."""

    def __init__(self, items, source=None):
        super().__init__(source)
        self.items = dict(items)

    def python_type(self):
        return dict

    def as_python_constant(self):
        return {k: v.as_python_constant() for k, v in self.items.items()}

    def truth(self, tx):
        return bool(self.items)

    def unpack_var_sequence(self, tx):
        return [ConstantVariable(k) for k in self.items]

    def has_attr(self, tx, name):
        return hasattr(self.python_type(), name)

    def var_getattr(self, tx, name):
        if hasattr(self.python_type(), name):
            return GetAttrVariable(self, name)
        raise Unsupported(f"{self.python_type().__name__} attribute {name!r}")

    def _mutate(self, tx):
        tx.output.note_mutation(self)

    def call_method(self, tx, name, args, kwargs):
        cls = self.python_type()
        handler = getattr(self, f"_method_{name.strip('_')}", None) if hasattr(cls, name) else None
        if handler is None or (kwargs and name not in self._KEYWORD_METHODS):
            raise Unsupported(f"{cls.__name__}.{name}")
        return call_model(handler, tx, args, kwargs, f"{cls.__name__}.{name}")

    _KEYWORD_METHODS = ("update",)

    def _method_getitem(self, tx, key):
        k = _key(key)
        if k not in self.items:
            self._missing(k)
        return self.items[k]

    def _missing(self, k):
        """A lookup of a key the dict does not have: Python's KeyError, raised in the trace."""
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
        for k, v in self.items.items():
            codegen.load_const(k)
            codegen(v)
        codegen.append_build(dict, len(self.items))

    def _repr_value(self):
        return repr(self.items)


def items_of(tx, mapping):
    """(key, value tracker) pairs of a dict tracker or of a sequence of pairs."""
    if isinstance(mapping, DictVariable):
        return list(mapping.items.items())
    pairs = []
    for pair in mapping.unpack_var_sequence(tx):
        k, v = pair.unpack_var_sequence(tx)
        pairs.append((_key(k), v))
    return pairs


class DictViewVariable(VariableTracker):
    """dict.keys() / values() / items() of a DictVariable (a live view, as in CPython)."""

    def __init__(self, dict_var, kind):
        super().__init__(None)
        self.dict_var, self.kind = dict_var, kind

    def python_type(self):
        return type(getattr(self.dict_var.python_type()(), self.kind)())

    def unpack_var_sequence(self, tx):
        items = self.dict_var.items
        if self.kind == "keys":
            return [ConstantVariable(k) for k in items]
        if self.kind == "values":
            return list(items.values())
        return [TupleVariable([ConstantVariable(k), v]) for k, v in items.items()]

    def truth(self, tx):
        return bool(self.dict_var.items)

    def var_getattr(self, tx, name):
        if hasattr(self.python_type(), name):
            return GetAttrVariable(self, name)
        raise Unsupported(f"dict_{self.kind} attribute {name!r}")

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
        return TupleVariable([ConstantVariable(k), self.items.pop(k)])

    def reconstruct(self, codegen):
        if self.source is not None:
            return self.source.reconstruct(codegen)
        codegen.append_push_null()
        codegen.load_const(collections.OrderedDict)
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
            value = self.default_factory.call_function(tx, [], {})
            self._method_setitem(tx, key, value)
        return self.items[k]

    def _method_copy(self, tx):
        return DefaultDictVariable(self.items, self.default_factory)

    def reconstruct(self, codegen):
        if self.source is not None:
            return self.source.reconstruct(codegen)
        codegen.append_push_null()
        codegen.load_const(collections.defaultdict)
        codegen(self.default_factory)
        super().reconstruct(codegen)
        codegen.append_call(2)
