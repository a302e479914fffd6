"""Views of mappings: ``obj.__dict__`` (a live view of an object's instance dict) and
``types.MappingProxyType`` (a read-only view of a dict tracker)."""
import types

from ..exc import Unsupported
from .base import TypeAttributes, VariableTracker
from .constant import ConstantVariable
from .descriptors import DELETED
from .objects import _real_dict


class InstanceDictVariable(TypeAttributes, VariableTracker):
    """``obj.__dict__``: a live view of the object's instance dict (reads and writes go to the
    object, as they do in CPython)."""

    def __init__(self, obj):
        super().__init__(None)
        self.obj = obj

    def python_type(self):
        return dict

    def truth(self, tx):
        return bool(self._keys(tx))

    def _keys(self, tx):
        obj = self.obj
        keys = [] if obj.is_new else list(_real_dict(obj.value) or {})
        if not obj.is_new and obj.source is not None:
            tx.output.guards.DICT_KEYS(obj._own_attr_source("__dict__"), _real_dict(obj.value))
        for name, value in obj.attrs.items():
            if value is DELETED and name in keys:
                keys.remove(name)
            elif value is not DELETED and name not in keys:
                keys.append(name)
        return keys

    def _key(self, key):
        k = key.as_python_constant()
        if type(k) is not str:
            raise Unsupported(f"instance __dict__ key {k!r}")
        return k

    def call_method(self, tx, name, args, kwargs):
        from .lists import ListIteratorVariable, TupleVariable
        obj = self.obj
        if kwargs:
            raise Unsupported(f"__dict__.{name} with keyword arguments")
        if name in ("get", "__getitem__", "__contains__") and 1 <= len(args) <= (2 if name == "get" else 1):
            found = obj.instance_lookup(tx, self._key(args[0]))
            if name == "__contains__":
                return ConstantVariable(found is not None)
            if found is None:
                if name == "get":
                    return args[1] if len(args) == 2 else ConstantVariable(None)
                from .exceptions import raise_exception
                raise_exception(KeyError(self._key(args[0])))
            return found
        if name == "__setitem__" and len(args) == 2:
            obj.store(tx, self._key(args[0]), args[1])
            return ConstantVariable(None)
        if name == "update" and len(args) == 1:  # PyDict_Merge of a dict: its entries in order
            pairs = self._entries_of(tx, args[0])
            for key, value in pairs:
                obj.store(tx, self._key(key), value)
            return ConstantVariable(None)
        if name == "__delitem__" and len(args) == 1:
            key = self._key(args[0])
            if not obj.instance_has(tx, key):
                from .exceptions import raise_exception
                raise_exception(KeyError(key))
            obj.store(tx, key, DELETED)
            return ConstantVariable(None)
        if not args and name in ("keys", "values", "items", "__len__", "__iter__"):
            keys = self._keys(tx)
            if name == "__len__":
                return ConstantVariable(len(keys))
            values = [obj.instance_lookup(tx, k) for k in keys]
            items = {"keys": [ConstantVariable(k) for k in keys], "__iter__": [ConstantVariable(k) for k in keys],
                     "values": values,
                     "items": [TupleVariable([ConstantVariable(k), v]) for k, v in zip(keys, values)]}[name]
            return ListIteratorVariable(items, type(iter({}.keys())) if name == "__iter__" else None)
        raise Unsupported(f"__dict__.{name}")

    def unpack_var_sequence(self, tx):
        return [ConstantVariable(k) for k in self._keys(tx)]

    def _entries_of(self, tx, other):
        """(key tracker, value tracker) pairs of an exact dict (what dict.update reads)."""
        from .dicts import DictVariable, key_var
        if isinstance(other, InstanceDictVariable):
            return [(ConstantVariable(k), other.obj.instance_lookup(tx, k)) for k in other._keys(tx)]
        if type(other) is DictVariable:
            return [(key_var(tx, k), v) for k, v in other.items.items()]
        raise Unsupported(f"__dict__.update({other})")

    def nested_values(self):
        return [self.obj]

    def reconstruct(self, codegen):
        codegen.load_function(object.__getattribute__)
        codegen(self.obj)
        codegen.load_const("__dict__")
        codegen.append_call(2)


class MappingProxyVariable(VariableTracker):
    """``types.MappingProxyType(mapping)``: a read-only view of a dict tracker (the
    ``parameters`` of an ``inspect.Signature``, a class's ``__dict__``)."""

    _READS = ("__getitem__", "get", "__contains__", "__len__", "keys", "values", "items", "copy")

    def __init__(self, mapping):
        from .dicts import DictVariable
        if not isinstance(mapping, (DictVariable, InstanceDictVariable)):
            raise Unsupported(f"mappingproxy of {mapping}")
        super().__init__(None)
        self.mapping = mapping

    def python_type(self):
        return types.MappingProxyType

    def truth(self, tx):
        return self.mapping.truth(tx)

    def var_getattr(self, tx, name):
        from .base import GetAttrVariable
        if name in self._READS:
            return GetAttrVariable(self, name)
        raise Unsupported(f"mappingproxy.{name}")

    def call_method(self, tx, name, args, kwargs):
        if name not in self._READS:
            raise Unsupported(f"mappingproxy.{name}")
        return self.mapping.call_method(tx, name, args, kwargs)

    def unpack_var_sequence(self, tx):
        return self.mapping.unpack_var_sequence(tx)

    def nested_values(self):
        return [self.mapping]

    def reconstruct(self, codegen):
        codegen.load_function(types.MappingProxyType)
        codegen(self.mapping)
        codegen.append_call(1)
