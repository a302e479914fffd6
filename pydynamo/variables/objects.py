"""Instances of user classes: read from the frame's inputs, or created while tracing.

``UserDefinedObjectVariable`` is one object: its class (a tracker, guarded by identity or by
the object's TYPE_MATCH), the instance-dict and slot entries the trace wrote (``attrs``,
``slots``), and for an object made by the trace whose class derives from dict, OrderedDict,
list or tuple, the contents of that builtin base (``base``, a Dict/List/TupleVariable).

Attribute reads, writes and deletes follow Python's protocol (descriptors.py). Writes to an
object that existed before the frame are replayed by SideEffects (``object.__setattr__`` /
``object.__delattr__``: the trace already ran any Python ``__setattr__``). An object made by the
trace exists at run time only if it escapes (returned, stored into a pre-existing object, alive
at a graph break): the generated code then builds it from its state, never calling ``__init__``
again (``base.__new__(cls)``, the base contents, ``object.__setattr__`` per attribute).
"""
import collections
import types

from ..exc import UnmodelledCallError, Unsupported
from ..source import AttrSource, DictItemSource, GenericAttrSource, GetItemSource, type_lookup as raw_type_lookup
from .base import VariableTracker
from .constant import ConstantVariable
from .descriptors import (DELETED, MISSING, _generic, bind, call_transparent,
                          class_var, delattr_protocol, generic_delattr, generic_getattr,
                          generic_setattr, getattr_protocol, is_attribute_error, missing,
                          setattr_protocol, special_method, type_lookup)

_HEAPTYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class made by a class statement
# The builtin bases an object made while tracing may have, and what holds their contents.
_BASES = (object, dict, collections.OrderedDict, list, tuple)


def solid_base(cls):
    """The builtin class whose instance layout ``cls``'s instances have (object, dict...)."""
    return next(c for c in cls.__mro__ if not c.__flags__ & _HEAPTYPE)


def _real_dict(value):
    try:
        d = object.__getattribute__(value, "__dict__")
    except AttributeError:
        return None
    return d if type(d) is dict else None


class UserDefinedObjectVariable(VariableTracker):
    """An instance of a user class (see the module docstring). ``value`` is the real object for
    one read from the inputs (its ``source`` says where), None for one made by the trace."""

    def __init__(self, value, source=None, cls_var=None, base=None):
        super().__init__(source)
        self.value = value
        if cls_var is None:
            cls_var = class_var(type(value), self._own_attr_source("__class__") if source is not None else None)
        self.cls_var = cls_var
        self.attrs, self.slots = {}, {}  # name -> tracker or DELETED (a new object's: all of them)
        self.base = base
        self.orig_present = {}  # name -> whether a pre-existing object had it (for deletes)

    @property
    def is_new(self):
        return self.value is None

    def python_type(self):
        return self.cls_var.value

    def has_dict(self):
        return self.python_type().__dictoffset__ != 0

    # ---- the object's own state ----------------------------------------------------------------

    def _own_attr_source(self, name):
        """``obj.__dict__`` / ``obj.__class__`` as CPython reads them, never through a
        ``__getattribute__`` of the user's (which would run in guards, or recurse)."""
        if _generic(raw_type_lookup(type(self.value), "__getattribute__"), "__getattribute__"):
            return AttrSource(self.source, name)
        return GenericAttrSource(self.source, name)

    def _dict_source(self, name):
        """Where the value of instance-dict entry ``name`` is read from at run time."""
        if self.source is None:
            return None
        if isinstance(self._own_attr_source(name), AttrSource):
            return AttrSource(self.source, name)  # getattr reads exactly the dict entry here
        return self._entry_source(name)

    def _entry_source(self, name):
        return GetItemSource(self._own_attr_source("__dict__"), name) if self.source is not None else None

    def instance_lookup(self, tx, name):
        """The instance-dict entry ``name`` (a tracker) or None, absence guarded."""
        from .builder import wrap_value
        if name in self.attrs:
            value = self.attrs[name]
            return None if value is DELETED else value
        if self.is_new or not self.has_dict():
            return None
        d = _real_dict(self.value)
        if d is not None and name in d:
            src = self._dict_source(name)
            if type(d[name]) is int and src is not None:  # may become a SymInt once it changed
                tx.output.shapes.policy.object_attrs.add(src.name())
            return wrap_value(tx, d[name], src)
        if self.source is not None:
            tx.output.guards.NOT_PRESENT(self._entry_source(name))
        return None

    def instance_has(self, tx, name):
        if name in self.attrs:
            if name not in self.orig_present and not self.is_new:
                self.orig_present[name] = self._real_has(tx, name, slot=False)
            return self.attrs[name] is not DELETED
        if self.is_new:
            return False
        present = self.orig_present[name] = self._real_has(tx, name, slot=False)
        return present

    def _real_has(self, tx, name, slot):
        """Whether the real object has ``name`` in its dict (or slot), guarded both ways."""
        if slot:
            try:
                raw_type_lookup(type(self.value), name).__get__(self.value)
                present = True
            except AttributeError:
                present = False
            src = AttrSource(self.source, name) if self.source is not None else None
        else:
            present = name in (_real_dict(self.value) or {})
            src = self._entry_source(name)
        if src is not None:
            if present:
                tx.output.guards.TYPE_MATCH(src, getattr(self.value, name) if slot else _real_dict(self.value)[name])
            else:
                tx.output.guards.NOT_PRESENT(src)
        return present

    def slot_lookup(self, tx, name, must=True):
        """The value of slot ``name`` (a member descriptor of the class), or AttributeError."""
        from .builder import wrap_value
        if name in self.slots:
            value = self.slots[name]
            if value is not DELETED:
                return value
        elif not self.is_new:
            if not _generic(raw_type_lookup(type(self.value), "__getattribute__"), "__getattribute__"):
                raise Unsupported(f"slot {name!r} of a class with its own __getattribute__")
            if self._real_has(tx, name, slot=True):
                return wrap_value(tx, getattr(self.value, name),
                                  AttrSource(self.source, name) if self.source is not None else None)
        if must:
            raise missing(tx, self.python_type(), name)
        return None

    def store(self, tx, name, value, slot=False):
        """Write (or, with DELETED, delete) instance-dict entry or slot ``name``."""
        table = self.slots if slot else self.attrs
        if self.is_new:  # its whole state: a deleted key goes, a re-added one goes last
            if value is DELETED:
                table.pop(name, None)
            else:
                table[name] = value
            return
        if self.source is None:
            raise Unsupported(f"attribute {name!r} written on {self}, which has no source to replay it")
        if value is DELETED and name not in self.orig_present:
            self.orig_present[name] = self._real_has(tx, name, slot)
        table[name] = value
        tx.output.side_effects.store_object_attr(self, name, slot)

    # ---- the protocol --------------------------------------------------------------------------

    def var_getattr(self, tx, name):
        return getattr_protocol(tx, self, name)

    def has_attr(self, tx, name):
        try:
            getattr_protocol(tx, self, name)
            return True
        except Unsupported as e:
            if not is_attribute_error(e):
                raise
            return False

    def store_attr(self, tx, name, value):
        return setattr_protocol(tx, self, name, value)

    def delete_attr(self, tx, name):
        return delattr_protocol(tx, self, name)

    def special_method(self, tx, name):
        return special_method(tx, self, name)

    def call_method(self, tx, name, args, kwargs):
        if name.startswith("__") and name.endswith("__"):
            method = special_method(tx, self, name)  # implicit calls look on the type only
            if method is None:
                raise Unsupported(f"TypeError: {self.python_type().__qualname__} has no {name}")
            result = call_transparent(tx, method, args, kwargs)
            return _RESULTS[name](tx, self, result) if name in _RESULTS else result
        return getattr_protocol(tx, self, name).call_function(tx, args, kwargs)

    def call_function(self, tx, args, kwargs):
        call, _ = type_lookup(tx, self.cls_var, "__call__")
        if not isinstance(call, types.FunctionType):
            what = getattr(self.value, "__qualname__", None) or self.python_type().__qualname__
            module = getattr(self.value, "__module__", None) or self.python_type().__module__
            raise UnmodelledCallError(f"call to {module}.{what}, a C or library function "
                                      "pydynamo does not model")
        return call_transparent(tx, special_method(tx, self, "__call__"), args, kwargs)

    def truth(self, tx):
        for name in ("__bool__", "__len__"):
            method = special_method(tx, self, name)
            if method is not None:
                result = _RESULTS[name](tx, self, call_transparent(tx, method, [], {}))
                return bool(result.value)
        return True

    def make_iterator(self, tx):
        """``iter(obj)``: what ``__iter__`` returns (a generator stays lazy)."""
        method = special_method(tx, self, "__iter__")
        if method is None:
            raise Unsupported(f"iteration over {self} (no __iter__)")
        it = call_transparent(tx, method, [], {})
        if not hasattr(it, "next_item"):
            raise Unsupported(f"iterator {it} returned by {self.python_type().__qualname__}.__iter__")
        return it

    @property
    def next_item(self):
        """An instance of a class with ``__next__`` is an iterator (FOR_ITER, next())."""
        if raw_type_lookup(self.python_type(), "__next__") is None:
            raise AttributeError("next_item")
        return self._next_item

    def _next_item(self, tx):
        """``type(self).__next__(self)``; None once it raises StopIteration."""
        from ..exc import ExceptionRaised
        method = special_method(tx, self, "__next__")
        if method is None:
            raise Unsupported(f"next() of {self}, whose class no longer has __next__")
        try:
            return call_transparent(tx, method, [], {})
        except ExceptionRaised as e:
            if issubclass(e.var.python_type(), StopIteration):
                return None
            raise

    def hash(self, tx):
        """``hash(obj)``: a Python ``__hash__``; object's own only for an object pinned by
        identity (its hash is derived from its address)."""
        from .builtin import fold
        method, _ = type_lookup(tx, self.cls_var, "__hash__")
        if method is None:
            raise Unsupported(f"TypeError: unhashable type: {self.python_type().__name__!r}")
        if method is object.__hash__:
            from .builtin import call_builtin
            call_builtin(tx, id, [self], {}).as_python_constant()  # pins the object by identity, or refuses
            return ConstantVariable(hash(self.value))
        if not isinstance(method, types.FunctionType):
            raise Unsupported(f"hash() of {self} ({type(method).__name__} __hash__)")
        result = call_transparent(tx, special_method(tx, self, "__hash__"), [], {})
        if not (isinstance(result, ConstantVariable) and type(result.value) is int):
            raise Unsupported(f"TypeError: __hash__ method should return an integer, not {result}")
        from .builtin import hash_of_hash_result
        return ConstantVariable(hash_of_hash_result(result.value))

    def unpack_var_sequence(self, tx):
        it = self.make_iterator(tx)
        items = []
        while (item := it.next_item(tx)) is not None:
            items.append(item)
        return items

    def nested_values(self):
        """Trackers this object holds (its tensors must be graph outputs if it is rebuilt)."""
        out = [v for v in (*self.attrs.values(), *self.slots.values()) if v is not DELETED]
        if self.base is not None:
            out.append(self.base)
        return out

    # ---- rebuilding ----------------------------------------------------------------------------

    def reconstruct(self, codegen):
        if not self.is_new:
            return super().reconstruct(codegen)
        base = solid_base(self.python_type())
        codegen.load_function(raw_type_lookup(base, "__new__"))  # the builtin's own allocation
        codegen(self.cls_var)
        if base is tuple:
            codegen(self.base)
        codegen.append_call(2 if base is tuple else 1)
        temp = codegen.new_temp()
        codegen.store_local(temp)
        codegen._temps[id(self)] = temp  # later references (and cycles) load this one object
        codegen._keep_alive.append(self)
        from .dicts import DictVariable, load_key
        if isinstance(self.base, DictVariable):
            setitem = raw_type_lookup(base, "__setitem__")
            for k, v in self.base.items.items():
                _emit_call(codegen, setitem, temp, [lambda k=k: load_key(codegen, k), lambda v=v: codegen(v)])
        elif base is list:
            _emit_call(codegen, list.extend, temp, [lambda: codegen(_as_list(self.base))])
        for name, value in self.slots.items():  # through the member descriptors
            _emit_call(codegen, object.__setattr__, temp,
                       [lambda n=name: codegen.load_const(n), lambda v=value: codegen(v)])
        if self.attrs:  # the instance dict, written directly (as the trace wrote it)
            from ..side_effects import load_instance_dict
            load_instance_dict(codegen, lambda: codegen.load_local(temp))
            codegen.append_load_method("update")
            for name, value in self.attrs.items():
                codegen.load_const(name)
                codegen(value)
            codegen.append_build(dict, len(self.attrs))
            codegen.append_call(1)
            codegen.append_pop_top()
        codegen.load_local(temp)

    def _repr_value(self):
        return self.python_type().__qualname__ + (" (new)" if self.is_new else "")


def _length(tx, obj, result):
    """What len() makes of ``__len__``'s result: an int >= 0, else a TypeError/ValueError."""
    value = result.as_python_constant() if result.is_python_constant() else None
    if not isinstance(value, int) or value < 0:
        raise Unsupported(f"{obj.python_type().__qualname__}.__len__ returned {result} (not an int >= 0)")
    return ConstantVariable(int(value))


def _exact_bool(tx, obj, result):
    if not (result.is_python_constant() and type(result.as_python_constant()) is bool):
        raise Unsupported(f"TypeError: __bool__ should return bool, returned {result}")
    return result


# How the interpreter converts what these special methods return (``x in obj`` is a bool).
_RESULTS = {"__len__": _length, "__bool__": _exact_bool,
            "__contains__": lambda tx, obj, result: ConstantVariable(result.truth(tx))}


def _as_list(var):
    from .lists import ListVariable
    return ListVariable(var.items)


def _emit_call(codegen, fn, temp, arg_emitters):
    """``fn(temp, *args)`` as a statement."""
    codegen.load_function(fn)
    codegen.load_local(temp)
    for emit in arg_emitters:
        emit()
    codegen.append_call(1 + len(arg_emitters))
    codegen.append_pop_top()


# ---- creating objects -------------------------------------------------------------------------


def construct(tx, cls_var, args, kwargs):
    """``cls(*args, **kwargs)`` for a user class: ``type.__call__`` (``__new__``, then
    ``__init__`` if the result is an instance of ``cls``)."""
    cls = cls_var.value
    meta_var = class_var(type(cls), AttrSource(cls_var.source, "__class__") if cls_var.source else None)
    call, _ = type_lookup(tx, meta_var, "__call__")
    if call is not type.__dict__["__call__"]:
        raise Unsupported(f"creating a {cls.__qualname__}: its metaclass {type(cls).__qualname__} "
                          "defines __call__")
    import torch
    if isinstance(cls, type) and issubclass(cls, torch.nn.Module):
        from .nn_module import create_module
        return create_module(tx, cls_var, args, kwargs)
    new, new_src = type_lookup(tx, cls_var, "__new__")
    if _is_builtin_new(new):
        obj = allocate(tx, cls_var, new, args, kwargs)
    elif isinstance(new, staticmethod) and isinstance(new.__func__, types.FunctionType):
        from .builder import wrap_value
        fn = wrap_value(tx, new.__func__, AttrSource(new_src, "__func__") if new_src is not None else None)
        obj = call_transparent(tx, fn, [cls_var, *args], kwargs)
    else:
        raise Unsupported(f"{cls.__qualname__}.__new__ is {type(new).__name__}")
    if getattr(obj, "cls_var", None) is not None and not isinstance(obj, UserDefinedObjectVariable) \
            and issubclass(obj.python_type(), cls):  # a namedtuple-like tuple: tuple's own __init__
        if type_lookup(tx, obj.cls_var, "__init__")[0] is not object.__init__:
            raise Unsupported(f"{cls.__qualname__}.__init__ of a tuple subclass")
        return obj
    if not (isinstance(obj, UserDefinedObjectVariable) and issubclass(obj.python_type(), cls)):
        return obj  # __new__ returned something else: __init__ is not called
    init, init_src = type_lookup(tx, obj.cls_var, "__init__")
    if init is object.__init__:
        _object_init_args(tx, obj, args, kwargs)
    else:
        result = call_transparent(tx, bind(tx, obj, "__init__", init, init_src), args, kwargs)
        if not (isinstance(result, ConstantVariable) and result.value is None):
            raise Unsupported(f"TypeError: __init__() should return None, not {result}")
    return obj


def is_base_method(value):
    """A C method of object, dict, OrderedDict, list or tuple (``object.__setattr__``,
    ``dict.__setitem__``, ``object.__new__``): BuiltinMethodVariable models those it knows."""
    if isinstance(value, (types.MethodDescriptorType, types.WrapperDescriptorType)):
        return value.__objclass__ in _BASES
    return _is_builtin_new(value)


def _is_builtin_new(fn):
    return isinstance(fn, types.BuiltinFunctionType) and fn.__name__ == "__new__" and fn.__self__ in _BASES


def allocate(tx, cls_var, new, args, kwargs):
    """``base.__new__(cls, *args, **kwargs)`` for the builtin ``base`` (object, dict...)."""
    from .dicts import DictVariable
    from .lists import ListVariable, TupleVariable
    from .user_defined import UserDefinedClassVariable
    if not isinstance(cls_var, UserDefinedClassVariable):
        raise Unsupported(f"__new__ of {cls_var}, which is not a class")
    cls, owner = cls_var.value, new.__self__
    if not isinstance(cls, type) or not cls.__flags__ & _HEAPTYPE \
            or raw_type_lookup(solid_base(cls), "__new__") is not new:  # CPython's tp_new safety check
        raise Unsupported(f"{owner.__name__}.__new__({getattr(cls, '__qualname__', cls)}) is not modelled")
    import torch
    if issubclass(cls, torch.nn.Module):
        raise Unsupported(f"creating the nn.Module {cls.__qualname__} inside compiled code")
    if solid_base(cls) not in _BASES:
        raise Unsupported(f"creating a {cls.__qualname__} (an instance of builtin "
                          f"{solid_base(cls).__name__}) while tracing")
    abstract, _ = type_lookup(tx, cls_var, "__abstractmethods__")
    if abstract is not MISSING and abstract:
        raise Unsupported(f"TypeError: can't instantiate abstract class {cls.__qualname__}")
    if owner is object and (args or kwargs):
        new_of_cls, _ = type_lookup(tx, cls_var, "__new__")
        init_of_cls, _ = type_lookup(tx, cls_var, "__init__")
        if new_of_cls is not object.__new__ or init_of_cls is object.__init__:
            raise Unsupported(f"TypeError: {cls.__qualname__}() takes no arguments")
    base = None
    if solid_base(cls) is tuple:
        if kwargs or len(args) > 1:
            raise Unsupported("tuple.__new__ with these arguments")
        items = args[0].unpack_var_sequence(tx) if args else []
        if not cls.__dictoffset__:  # no attributes of its own: a tuple tracker (namedtuples)
            var = TupleVariable(items, tuple_cls=cls)
            var.cls_var = cls_var
            return var
        base = TupleVariable(items)
    elif issubclass(solid_base(cls), dict):
        base = DictVariable({})
    elif solid_base(cls) is list:
        base = ListVariable([])
    return UserDefinedObjectVariable(None, None, cls_var, base)


def _object_init_args(tx, obj, args, kwargs):
    """object.__init__(obj, *args): extra arguments are a TypeError unless ``__new__`` is
    overridden and ``__init__`` is not (CPython's excess_args rule)."""
    if args or kwargs:
        init, _ = type_lookup(tx, obj.cls_var, "__init__")
        new, _ = type_lookup(tx, obj.cls_var, "__new__")
        if init is not object.__init__ or new is object.__new__:
            raise Unsupported(f"TypeError: {obj.python_type().__qualname__}.__init__() takes "
                              "exactly one argument (the instance to initialize)")
    return ConstantVariable(None)


# ---- methods of builtin classes, called on these objects ----------------------------------------


class BuiltinMethodVariable(VariableTracker):
    """A method of object, dict, OrderedDict, list or tuple written in C (``object.__setattr__``,
    ``dict.__setitem__``, ``super().__init__``...), unbound or bound to ``obj``."""

    def __init__(self, descr, obj=None, source=None):
        super().__init__(source)
        self.descr, self.obj = descr, obj

    def python_type(self):
        return type(self.descr) if self.obj is None else types.BuiltinMethodType

    def truth(self, tx):
        return True

    def as_python_constant(self):
        if self.obj is None:
            return self.descr
        raise Unsupported(f"{self} as a constant")

    def call_function(self, tx, args, kwargs):
        args = list(args)
        if self.obj is None:
            if _is_builtin_new(self.descr):
                if not args:
                    raise Unsupported("TypeError: __new__(): not enough arguments")
                return allocate(tx, args[0], self.descr, args[1:], kwargs)
            if not args:
                raise Unsupported(f"TypeError: {self.descr.__qualname__} needs an argument")
            obj, args = args[0], args[1:]
        else:
            obj = self.obj
        return call_builtin_method(tx, self.descr, obj, args, kwargs)

    def reconstruct(self, codegen):
        if self.obj is not None:  # descr.__get__(obj): the bound method Python makes
            codegen.load_function(self.descr.__get__)
            codegen(self.obj)
            return codegen.append_call(1)
        if self.source is not None:
            return self.source.reconstruct(codegen)
        codegen.load_const(self.descr)

    def _repr_value(self):
        return self.descr.__qualname__


def call_builtin_method(tx, descr, obj, args, kwargs):
    owner, name = descr.__objclass__, descr.__name__
    try:
        cls = obj.python_type()
    except Unsupported:
        cls = None
    if not (isinstance(cls, type) and issubclass(cls, owner)):
        raise Unsupported(f"TypeError: {descr.__qualname__} of a {getattr(cls, '__name__', obj)}")
    if owner is object:
        return _object_method(tx, name, obj, args, kwargs)
    import torch
    from .tensor import TensorVariable, tensorbase_method
    if owner is torch._C.TensorBase and isinstance(obj, TensorVariable):  # super().unflatten(...)
        return tx.output.call_graph(tx, "call_function", tensorbase_method,
                                    (ConstantVariable(name), obj, *args), kwargs)
    if not isinstance(obj, UserDefinedObjectVariable):
        if cls is owner:  # dict.__setitem__(d, k, v) on a plain dict tracker
            return obj.call_method(tx, name, args, kwargs)
        raise Unsupported(f"{descr.__qualname__} of {obj}")
    if obj.base is None:
        if isinstance(obj.value, dict) and name in ("get", "__getitem__", "__contains__"):
            return _read_input_dict(tx, obj, name, args, kwargs)
        if obj.value is None or obj.source is None or \
                solid_base(type(obj.value)) not in (dict, collections.OrderedDict, list):
            raise Unsupported(f"{descr.__qualname__} of {obj}: the contents of a {owner.__name__} "
                              "subclass instance made before the frame are not tracked")
        obj.base = input_contents(tx, obj)
    return _container_method(tx, owner, name, obj, args, kwargs)


class RawLength:
    """A guard: ``v`` is a ``cls`` (a list subclass) of this length by list's own ``__len__``."""

    def __init__(self, cls, length):
        self.cls, self.length = cls, length

    def __call__(self, v):
        return type(v) is self.cls and list.__len__(v) == self.length

    def __repr__(self):
        return f"is a {self.cls.__name__} of length {self.length}"


def input_contents(tx, obj):
    """The contents of a dict, OrderedDict or list subclass instance read from the inputs, as a
    dict, OrderedDict or list tracker (``raw_of`` the base: mutations are replayed through the
    base's own methods). A dict's keys are guarded in the base's own order, each entry read raw
    (DictItemSource: the class's ``__getitem__`` never runs), and a class with ``__missing__``
    refused (dict's lookup would call it for an absent key); a list's length by list's own
    ``__len__``, each item by ``obj[i]``, which reads the raw item while the class keeps list's
    ``__getitem__`` (guarded)."""
    from .builder import wrap_value
    from .dicts import DictVariable, OrderedDictVariable, valid_key
    from .lists import ListVariable
    base, value, src = solid_base(type(obj.value)), obj.value, obj.source
    if base in (dict, collections.OrderedDict):
        if type_lookup(tx, obj.cls_var, "__missing__")[0] is not MISSING:
            raise Unsupported(f"the contents of {obj}, whose class changes item lookup (__missing__)")
        keys = tuple(base.__iter__(value))
        if not all(valid_key(k) for k in keys):
            raise Unsupported(f"the contents of {obj}: a key that is neither a constant nor hashed by identity")
        from .stdlib import KeysAre
        check = KeysAre(type(value), keys, raw=base)
        tx.output.guards.PREDICATE(src, check, f"{src.name()} {check!r}")
        items = {k: wrap_value(tx, dict.__getitem__(value, k), DictItemSource(src, k)) for k in keys}
        contents = (DictVariable if base is dict else OrderedDictVariable)(items, src)
    else:
        getitem, _ = type_lookup(tx, obj.cls_var, "__getitem__")
        if getitem is not list.__getitem__:
            raise Unsupported(f"the contents of {obj}, whose class changes item lookup")
        n = list.__len__(value)
        check = RawLength(type(value), n)
        tx.output.guards.PREDICATE(src, check, f"{src.name()} {check!r}")
        contents = ListVariable([wrap_value(tx, list.__getitem__(value, i), GetItemSource(src, i))
                                 for i in range(n)], src)
    contents.raw_of = base
    return contents


def _read_input_dict(tx, obj, name, args, kwargs):
    """``dict.get`` / ``__getitem__`` / ``__contains__`` of a dict-subclass instance read from
    the inputs, whose contents are not otherwise read: one raw entry (DictItemSource), guarded
    present by value or absent by NOT_PRESENT. ``dict.__getitem__`` of an absent key calls the
    class's ``__missing__``, guarded absent from the class."""
    from .builder import wrap_value
    if kwargs or not 1 <= len(args) <= (2 if name == "get" else 1) or not args[0].is_python_constant():
        raise Unsupported(f"dict.{name} of {obj} with these arguments")
    if obj.source is None:
        raise Unsupported(f"dict.{name} of {obj}, not reachable from the frame's inputs")
    key = args[0].as_python_constant()
    try:
        present = dict.__contains__(obj.value, key)
    except TypeError:
        raise Unsupported(f"TypeError: unhashable key {key!r}") from None
    src = DictItemSource(obj.source, key)
    if not present:
        tx.output.guards.NOT_PRESENT(src)
        if name == "__getitem__":
            missing_, _ = type_lookup(tx, obj.cls_var, "__missing__")
            if missing_ is not MISSING:
                return obj.call_method(tx, "__missing__", [args[0]], {})
            from .exceptions import raise_exception
            raise_exception(KeyError(key))  # its absence is guarded: Python raises it too
        return ConstantVariable(False) if name == "__contains__" else (args[1] if len(args) == 2 else ConstantVariable(None))
    value = wrap_value(tx, dict.__getitem__(obj.value, key), src)
    return ConstantVariable(True) if name == "__contains__" else value


def _object_method(tx, name, obj, args, kwargs):
    if kwargs:
        raise Unsupported(f"object.{name} with keyword arguments")
    if name == "__init__":
        return _object_init_args(tx, obj, args, kwargs)
    if not isinstance(obj, UserDefinedObjectVariable):
        raise Unsupported(f"object.{name} of {obj}")
    if name in ("__reduce_ex__", "__reduce__", "__getstate__"):  # pure-Python models (copy, pickle)
        from .stdlib import call_object_method
        return call_object_method(tx, name, obj, args)
    nargs = {"__getattribute__": 1, "__setattr__": 2, "__delattr__": 1, "__eq__": 1, "__ne__": 1}
    if name not in nargs:
        raise Unsupported(f"object.{name} is not modelled")
    if len(args) != nargs[name]:
        raise Unsupported(f"TypeError: object.{name} takes {nargs[name]} arguments")
    if name in ("__eq__", "__ne__"):
        from .builtin import is_same_object
        same = is_same_object(tx, obj, args[0])
        if name == "__eq__":
            return ConstantVariable(True if same else NotImplemented)
        return ConstantVariable(False if same else NotImplemented)
    attr = args[0].as_python_constant()
    if type(attr) is not str:
        raise Unsupported(f"TypeError: attribute name must be string, not {type(attr).__name__}")
    if name == "__getattribute__":
        return generic_getattr(tx, obj, attr)
    if name == "__setattr__":
        return generic_setattr(tx, obj, attr, args[1])
    return generic_delattr(tx, obj, attr)


# Methods of the builtin bases that only touch the contents (``__init__`` / ``update`` of
# OrderedDict call ``self[k] = v``, which may be overridden: see _container_method).
_RAW = {
    dict: {"__getitem__", "__setitem__", "__delitem__", "__contains__", "__len__", "get", "keys",
           "values", "items", "pop", "clear", "copy", "setdefault"},
    # (OrderedDict's pop/setdefault/copy go through the subclass's own item methods: refused)
    collections.OrderedDict: {"__setitem__", "__delitem__", "keys", "values", "items", "clear"},
    list: {"__getitem__", "__setitem__", "__delitem__", "__contains__", "__len__", "append",
           "extend", "insert", "pop", "clear", "reverse", "copy", "index", "count"},
    tuple: {"__getitem__", "__len__", "__contains__", "index", "count"},
}


_ORDER_FREE = {"__getitem__", "__contains__", "__len__", "get"}


def _container_method(tx, owner, name, obj, args, kwargs):
    from .dicts import items_of
    from .lists import ListIteratorVariable
    base = obj.base
    if owner is dict and getattr(base, "raw_of", None) is collections.OrderedDict and name not in _ORDER_FREE:
        # dict's own methods skip an OrderedDict's order (a store would not link the new key)
        raise Unsupported(f"dict.{name} of an OrderedDict subclass instance ({obj})")
    if name == "__iter__" and not args and not kwargs:
        sample = owner() if owner is not tuple else ()
        return ListIteratorVariable(base.unpack_var_sequence(tx), type(iter(sample)))
    if name in ("__init__", "update") and owner in (dict, collections.OrderedDict):
        if len(args) > 1:
            raise Unsupported(f"TypeError: {owner.__name__}.{name} expected at most 1 argument")
        pairs = items_of(tx, args[0]) if args else []
        pairs += list(kwargs.items())
        for key, value in pairs:
            key_var = ConstantVariable(key)
            if owner is dict:  # PyDict_Merge: stores directly
                base.call_method(tx, "__setitem__", [key_var, value], {})
            else:  # mutablemapping_update: self[key] = value, through any override
                obj.call_method(tx, "__setitem__", [key_var, value], {})
        return ConstantVariable(None)
    if name == "__init__" and owner is list:
        if kwargs or len(args) > 1:
            raise Unsupported("list.__init__ with these arguments")
        items = args[0].unpack_var_sequence(tx) if args else []
        base.call_method(tx, "clear", [], {})
        base.call_method(tx, "extend", [_as_list_items(items)], {})
        return ConstantVariable(None)
    if name not in _RAW.get(owner, ()):
        raise Unsupported(f"{owner.__name__}.{name} on a subclass instance is not modelled")
    return base.call_method(tx, name, args, kwargs)


def _as_list_items(items):
    from .lists import ListVariable
    return ListVariable(items)


class UserContextExit(VariableTracker):
    """The bound ``__exit__`` that BEFORE_WITH leaves on the stack for a user's context manager.
    A graph break inside the block is refused (the resume function could not re-enter it)."""

    def __init__(self, exit_method):
        super().__init__(None)
        self.exit_method = exit_method

    def call_function(self, tx, args, kwargs):
        return self.exit_method.call_function(tx, args, kwargs)

    def reconstruct(self, codegen):
        raise Unsupported("a graph break inside a `with` block of a user's context manager")


def default_rich_eq(tx, is_eq, a, b):
    """``a == b`` (``is_eq``) or ``a != b`` with a user object, where no Python method of the
    operator's own name answered: CPython's defaults (``object.__eq__`` is identity,
    ``object.__ne__`` inverts ``__eq__``, then the identity fallback). A ConstantVariable bool,
    or None where a builtin's own comparison would run."""
    from .builtin import is_same_object
    if not any(isinstance(v, UserDefinedObjectVariable) for v in (a, b)):
        return None
    name = "__eq__" if is_eq else "__ne__"
    pairs = [(a, b), (b, a)]
    ta, tb = _type_or_none(a), _type_or_none(b)
    if ta is not None and tb is not None and ta is not tb and issubclass(tb, ta):
        pairs.reverse()  # the subclass's reflected method first
    for x, y in pairs:
        result = _default_compare(tx, name, x, y)
        if result is None:
            return None
        if result is not NotImplemented:
            return ConstantVariable(result)
    same = is_same_object(tx, a, b)
    return ConstantVariable(same if is_eq else not same)


def _type_or_none(var):
    try:
        return var.python_type()
    except Unsupported:
        return None


def _default_compare(tx, name, x, y):
    """``type(x).<name>(x, y)``: True/False, NotImplemented, or None (not modelled)."""
    from .builtin import is_same_object
    if isinstance(x, ConstantVariable):  # a builtin scalar compared with an object it does not know
        return NotImplemented if isinstance(y, UserDefinedObjectVariable) else None
    if not isinstance(x, UserDefinedObjectVariable):
        return None
    method, _ = type_lookup(tx, x.cls_var, name)
    if method is object.__eq__:
        return True if is_same_object(tx, x, y) else NotImplemented
    if method is object.__ne__:
        eq = _default_compare(tx, "__eq__", x, y)
        return eq if eq is None or eq is NotImplemented else not eq
    if isinstance(method, types.FunctionType):
        result = special_method(tx, x, name).call_function(tx, [y], {})
        if isinstance(result, ConstantVariable) and result.value is NotImplemented:
            return NotImplemented
        return result.truth(tx)
    return None
