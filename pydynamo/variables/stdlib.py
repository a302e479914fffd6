"""C functions and classes of the standard library that run as their pure-Python references
(pydynamo/polyfills.py), inlined like user code.

``PolyfillVariable`` is the C callable itself (guarded by identity where read from an input,
rebuilt from its source or as a constant); calling it inlines its polyfill. An iterator class
(``itertools.chain``) gives the polyfill's generator, which reports the C class as its type.
A class described by a ``polyfills.Spec`` (``functools.partial``, ``operator.itemgetter``)
gives a ``SpecInstanceVariable``: a state dict of trackers whose methods are the Spec's.
"""
import collections
import copyreg
import functools
import operator
import types
import typing
import weakref

from .. import polyfills
from ..exc import Unsupported
from ..source import AttrSource, GetItemSource, type_lookup as raw_type_lookup
from .base import GetAttrVariable, ObjectVariable, VariableTracker
from .builtin import _KEYWORDS, handles


def _key(value):
    """C callables by identity (never hashing a user's object), a classmethod of a C class
    (``chain.from_iterable``, a new bound object at each read) by its class and name."""
    owner = getattr(value, "__self__", None) if isinstance(value, types.BuiltinMethodType) else None
    return (id(owner), value.__name__) if isinstance(owner, type) else id(value)


_BY_KEY = {_key(fn): (fn, impl) for fn, impl in polyfills.IMPLEMENTATIONS.items()}


def polyfill_of(value):
    """The reference implementation of the C callable ``value``, or None."""
    key = _key(value)
    fn, impl = _BY_KEY.get(key, (None, None))
    return impl if fn is value or (impl is not None and isinstance(key, tuple)) else None


def has_polyfill(value):
    return polyfill_of(value) is not None and value is not enumerate and value is not zip  # builtin.py


def inline(tx, fn, args, kwargs):
    """``fn(*args, **kwargs)`` for a function of polyfills.py, inlined (its globals unguarded)."""
    from .functions import UserFunctionVariable
    return UserFunctionVariable(fn).call_function(tx, list(args), dict(kwargs))


def _in_polyfills(tx):
    return tx.f_globals is vars(polyfills)


def call_polyfill(tx, fn, args, kwargs):
    """``fn(*args, **kwargs)`` for a C callable with a polyfill."""
    from .functions import GeneratorVariable
    impl = polyfill_of(fn)
    if isinstance(impl, type) and issubclass(impl, polyfills.Spec):
        state = inline(tx, impl.new, args, kwargs)
        return SpecInstanceVariable(fn, impl, dict(state.items))
    result = inline(tx, impl, args, kwargs)
    if isinstance(result, GeneratorVariable):
        owner = getattr(fn, "__self__", None)  # chain.from_iterable makes a chain
        result.python_cls = fn if isinstance(fn, type) else owner
    return result


class PolyfillVariable(ObjectVariable):
    def call_function(self, tx, args, kwargs):
        return call_polyfill(tx, self.value, args, kwargs)

    def var_getattr(self, tx, name):
        from .builder import wrap_value
        try:
            attr = getattr(self.value, name)  # attributes of C types and functions are read-only
        except AttributeError:
            raise Unsupported(f"{self.value!r} has no attribute {name!r}") from None
        if has_polyfill(attr):
            return PolyfillVariable(attr, self.attr_source(name))
        return wrap_value(tx, attr, self.attr_source(name))

    def _repr_value(self):
        return getattr(self.value, "__qualname__", repr(self.value))


class SpecInstanceVariable(VariableTracker):
    """An instance of the C class ``cls`` described by ``spec`` (a polyfills.Spec): ``state``
    maps attribute names to trackers. Attributes whose name starts with an underscore are
    private to the Spec's methods (the C object has no such attribute). Read from an input, it
    is that object (``source``); made in the trace, it is rebuilt at run time as
    ``cls(*args, **kwargs)`` from its state, as the Spec's ``rebuild`` says.

    Other attributes are the real object's: read from it (``value``) where it was read from an
    input (a C object's attribute reads run no user code), answered from ``cls``'s own table
    where the trace made it (its instance dict is empty: stores are refused)."""

    def __init__(self, cls, spec, state, source=None, value=None):
        super().__init__(source)
        self.cls, self.spec, self.state = cls, spec, state
        self.value = value

    def python_type(self):
        return self.cls

    def truth(self, tx):
        return True

    def has_attr(self, tx, name):
        from .base import guarded_hasattr
        from .descriptors import modelled_has_attr
        if self.value is not None:
            return guarded_hasattr(tx, self.value, self.source, name)
        return modelled_has_attr(tx, self.cls, name, own=())

    def var_getattr(self, tx, name):
        from .descriptors import modelled_getattr
        if name in self.state and (not name.startswith("_") or _in_polyfills(tx)):
            return self.state[name]  # (func, args, keywords: read-only members of the C type)
        modelled = callable(vars(self.spec).get(name)) and name != "new"  # __call__
        if self.value is not None:
            return self._real_attr(tx, name, modelled)
        return GetAttrVariable(self, name) if modelled else modelled_getattr(tx, self, name, own=())

    def _real_attr(self, tx, name, modelled):
        """``obj.name`` of the object that existed before the trace, read for real (guarded
        where it has a source); a method the Spec models stays the Spec's once the instance
        dict is guarded not to hide it."""
        from .builder import wrap_value
        from .descriptors import missing
        src = AttrSource(self.source, name) if self.source is not None else None
        try:
            attr = getattr(self.value, name)
        except AttributeError:
            if src is not None:
                tx.output.guards.NOT_PRESENT(src)
            raise missing(tx, self.cls, name) from None
        if not modelled:
            return wrap_value(tx, attr, src)
        if self.cls.__dictoffset__:
            if name in vars(self.value):
                raise Unsupported(f"attribute {name!r} of a {self.cls.__qualname__} object, set on "
                                  "the object (it hides the method)")
            if src is not None:
                tx.output.guards.NOT_PRESENT(GetItemSource(AttrSource(self.source, "__dict__"), name))
        return GetAttrVariable(self, name)

    def call_function(self, tx, args, kwargs):
        return self.call_method(tx, "__call__", args, kwargs)

    def call_method(self, tx, name, args, kwargs):
        method = vars(self.spec).get(name)
        if not callable(method) or name == "new":
            raise Unsupported(f"method {name!r} of a {self.cls.__qualname__} object")
        return inline(tx, method, [self, *args], kwargs)

    def reconstruct(self, codegen):
        if self.source is not None:
            return self.source.reconstruct(codegen)
        args, names, kw_values = [], [], []
        for entry in self.spec.rebuild:
            if entry.startswith("**"):
                for key, value in self.state[entry[2:]].items.items():
                    names.append(key)
                    kw_values.append(value)
            elif entry.startswith("*"):
                args.extend(self.state[entry[1:]].items)
            else:
                args.append(self.state[entry])
        codegen.load_function(self.cls)
        for value in [*args, *kw_values]:
            codegen(value)
        codegen.append_call(len(args) + len(kw_values), tuple(names))

    def _repr_value(self):
        return f"{self.cls.__qualname__} {self.state}"


def wrap_spec_instance(tx, value, source):
    """A functools.partial, operator.itemgetter or attrgetter read from the frame's inputs:
    a partial's func, args and keywords are read (and guarded) through their attributes; an
    itemgetter's or attrgetter's items, which cannot change, from ``__reduce__`` under an
    identity guard."""
    from .builder import wrap_value
    cls = type(value)
    if cls is functools.partial:
        if source is not None:
            tx.output.guards.TYPE_MATCH(source, value)
        state = {name: wrap_value(tx, getattr(value, name), AttrSource(source, name) if source else None)
                 for name in ("func", "args", "keywords")}
    elif cls in (operator.itemgetter, operator.attrgetter):
        if source is not None:
            tx.output.guards.ID_MATCH(source, value)
        from .builder import wrap_constant
        items = value.__reduce__()[1]
        state = {"_items" if cls is operator.itemgetter else "_attrs": wrap_constant(items)}
    else:
        raise Unsupported(f"a {cls.__qualname__} object read from the frame's inputs")
    return SpecInstanceVariable(cls, polyfill_of(cls), state, source, value)


SPEC_INSTANCE_TYPES = (functools.partial, operator.itemgetter, operator.attrgetter,
                       operator.methodcaller)


@handles(polyfills.refuse)
def _refuse(tx, reason):
    raise Unsupported(reason.as_python_constant())


@handles(polyfills.made_in_trace)
def _made_in_trace(tx, obj):
    from .constant import ConstantVariable
    return ConstantVariable(isinstance(obj, SpecInstanceVariable) and obj.source is None)


@handles(callable)
def _callable(tx, obj):
    """``callable(obj)``: whether its type defines ``__call__`` (the tp_call slot)."""
    from .constant import ConstantVariable
    if isinstance(obj, GetAttrVariable):  # a method read from an object
        return ConstantVariable(True)
    cls = obj.python_type()
    return ConstantVariable(any("__call__" in vars(k) for k in cls.__mro__))


# ---- collections ----------------------------------------------------------------------------

# keyword arguments these C classes take (they have no inspectable signature); None: any
_KEYWORDS.update({collections.OrderedDict: None, collections.defaultdict: None,
                  collections.deque: ("iterable", "maxlen")})


@handles(collections.OrderedDict)
def _ordered_dict(tx, mapping=None, /, **kwargs):
    from .dicts import OrderedDictVariable, items_of
    items = dict(items_of(tx, mapping)) if mapping is not None else {}
    items.update(kwargs)
    return OrderedDictVariable(items)


@handles(collections.defaultdict)
def _default_dict(tx, default_factory=None, mapping=None, /, **kwargs):
    from .constant import ConstantVariable
    from .dicts import DefaultDictVariable, items_of
    factory = default_factory if default_factory is not None else ConstantVariable(None)
    if not (factory.is_python_constant() and factory.as_python_constant() is None) \
            and not _callable(tx, factory).value:
        raise Unsupported("TypeError: first argument must be callable or None")
    items = dict(items_of(tx, mapping)) if mapping is not None else {}
    items.update(kwargs)
    return DefaultDictVariable(items, factory)


@handles(collections.deque)
def _deque(tx, iterable=None, maxlen=None):
    from .lists import DequeVariable
    limit = None if maxlen is None else maxlen.as_python_constant()
    if limit is not None and (type(limit) is not int or limit < 0):
        raise Unsupported("deque() with a maxlen that is not a non-negative int or None")
    var = DequeVariable([], limit)
    if iterable is not None:
        for item in iterable.unpack_var_sequence(tx):
            var.items.append(item)
            if var._full():
                var.items.pop(0)
    return var


class KeysAre:
    """A guard: the value is a ``cls`` whose keys are, in iteration order, ``keys`` (same type
    and value each). ``raw``: the builtin base (dict or OrderedDict) whose own ``__len__`` and
    ``__iter__`` read them (a subclass's overrides never run in a guard)."""

    def __init__(self, cls, keys, raw=None):
        self.cls, self.keys, self.raw = cls, tuple(keys), raw

    def __call__(self, value):
        from .sets import _identical
        length, iterate = (self.raw.__len__, self.raw.__iter__) if self.raw else (len, iter)
        return type(value) is self.cls and length(value) == len(self.keys) and all(
            _identical(a, b) for a, b in zip(iterate(value), self.keys))

    def __repr__(self):
        return f"is a {self.cls.__name__} with keys {list(self.keys)!r}"


def wrap_collection(tx, value, source):
    """A deque or OrderedDict read from the frame's inputs: type, length or keys (in order),
    maxlen, and each item by its own source. (A defaultdict is refused: reading its items
    with ``d[k]`` in a guard could call its default_factory.)"""
    from .builder import wrap_value
    from .constant import is_constant_value
    from .dicts import OrderedDictVariable
    from .lists import DequeVariable
    from ..source import GetItemSource
    if source is None:
        raise Unsupported(f"a {type(value).__name__} that is not reachable from the frame's inputs")
    item = lambda k: wrap_value(tx, value[k], GetItemSource(source, k))  # noqa: E731
    if type(value) is collections.deque:
        tx.output.guards.TYPE_MATCH(source, value)
        tx.output.guards.LEN(source, value)
        tx.output.guards.EQUALS_MATCH(AttrSource(source, "maxlen"), value.maxlen)
        return DequeVariable([item(i) for i in range(len(value))], value.maxlen, source)
    if type(value) is collections.OrderedDict and all(is_constant_value(k) for k in value):
        check = KeysAre(type(value), value)
        tx.output.guards.PREDICATE(source, check, f"{source.name()} {check!r}")
        return OrderedDictVariable({k: item(k) for k in value}, source)
    raise Unsupported(f"a {type(value).__name__} read from the frame's inputs")


COLLECTION_TYPES = (collections.deque, collections.OrderedDict, collections.defaultdict)


# ---- functools: wraps, lru_cache ------------------------------------------------------------

@handles(functools.update_wrapper)
def _update_wrapper(tx, wrapper, wrapped, assigned=None, updated=None):
    """``functools.update_wrapper`` (what ``functools.wraps`` calls) on a function made in the
    trace: the attributes it copies are kept on the tracker (such a function is then never
    rebuilt at run time); ``__annotations__``, ``__type_params__`` and the ``__dict__`` entries
    are not copied, and reading them from the wrapper is refused."""
    from .builtin import has_attr
    from .functions import NestedUserFunctionVariable
    if not isinstance(wrapper, NestedUserFunctionVariable):
        raise Unsupported(f"functools.update_wrapper on {wrapper}")
    names = functools.WRAPPER_ASSIGNMENTS if assigned is None else assigned.as_python_constant()
    for name in names:
        if name in ("__annotations__", "__type_params__"):
            wrapper.attrs[name] = None
        elif has_attr(tx, wrapped, name):
            wrapper.attrs[name] = tx.getattr(wrapped, name)
    for name in functools.WRAPPER_UPDATES if updated is None else updated.as_python_constant():
        if name != "__dict__":
            raise Unsupported(f"functools.update_wrapper(updated={name!r})")
    wrapper.attrs["__wrapped__"] = wrapped
    return wrapper


class LruCacheVariable(ObjectVariable):
    """A ``functools.lru_cache`` wrapper (guarded by identity). A call runs the wrapped function
    inlined, which gives the cached value only for a pure function; so the call is refused
    unless its arguments are constants, its result an immutable constant, and the inlined call
    read nothing but functions, classes and modules (no data a later call could see changed:
    a cache holds what the first call computed) and had no effect (no graph op, no side
    effect)."""

    def var_getattr(self, tx, name):
        from .builder import wrap_value
        if name == "__wrapped__":
            return wrap_value(tx, self.value.__wrapped__, self.attr_source(name))
        raise Unsupported(f"attribute {name!r} of an lru_cache wrapper")

    def call_function(self, tx, args, kwargs):
        from .builder import wrap_value
        from ..guards import GuardBuilder
        from .functions import call_assumed_constant, marked_constant
        if marked_constant(self.value):
            return call_assumed_constant(self.value, args, kwargs)
        for arg in [*args, *kwargs.values()]:
            if not _immutable_constant(arg):
                raise Unsupported(f"an lru_cache'd function called with {arg}")
        out = tx.output
        nodes, effects = len(out.graph.nodes), _effects(out)
        guards, known, mutable = out.guards, out.tracked_sources, out.mutable_objects
        out.guards, out.tracked_sources, out.mutable_objects = GuardBuilder(), {}, {}
        try:  # fresh guards and source caches: every read of the call shows as a new guard
            fn = wrap_value(tx, self.value.__wrapped__, self.attr_source("__wrapped__"))
            result = fn.call_function(tx, args, kwargs)
            new_checks = out.guards._checks
        finally:
            out.guards, out.tracked_sources, out.mutable_objects = guards, known, mutable
        for key, check in new_checks.items():
            if check.kind not in ("ID_MATCH", "NOT_PRESENT"):
                raise Unsupported(f"an lru_cache'd function that reads data ({check.text}): "
                                  "its cached result may not be what a call computes now")
            guards._checks.setdefault(key, check)
        after = _effects(out)
        if len(out.graph.nodes) != nodes or len(after) != len(effects) or any(
                a[0] != b[0] or a[1] is not b[1] for a, b in zip(after, effects)):
            raise Unsupported("an lru_cache'd function with graph ops or side effects")
        if not _immutable_constant(result):
            raise Unsupported("an lru_cache'd function whose result is not an immutable constant")
        return result


def _effects(output):
    return list(output.side_effects._effects.items())  # each store makes a new effect tuple


def _immutable_constant(var):
    from .constant import ConstantVariable
    from .lists import TupleVariable
    if isinstance(var, TupleVariable) and var.python_type() is tuple:
        return all(_immutable_constant(v) for v in var.items)
    return isinstance(var, ConstantVariable)


# ---- object's pickling protocol (copy.copy / copy.deepcopy) ----------------------------------

def call_object_method(tx, name, obj, args):
    """``object.<name>(obj, *args)`` (__reduce_ex__, __reduce__, __getstate__) for a user object:
    its polyfill (polyfills.OBJECT_METHODS), inlined."""
    return inline(tx, polyfills.OBJECT_METHODS[name], [obj, *args], {})


def _user_object(obj, what):
    from .objects import UserDefinedObjectVariable
    if not isinstance(obj, UserDefinedObjectVariable):
        raise Unsupported(f"{what} of {obj}")
    return obj


@handles(polyfills._copyreg)
def _copyreg_attr(tx, name):
    from ..source import ConstObjectSource
    from .builder import wrap_value
    name = name.as_python_constant()
    return wrap_value(tx, getattr(copyreg, name), AttrSource(ConstObjectSource(copyreg), name))


@handles(polyfills._reduce_overridden)
def _reduce_overridden(tx, obj):
    """``type(obj).__reduce__ is not object.__reduce__``, read as ``PyObject_GetAttr(cls, ...)``
    does: through the metaclass, which must read class attributes as ``type`` does."""
    import types
    from .constant import ConstantVariable
    from .descriptors import class_var, type_lookup
    obj = _user_object(obj, "object.__reduce_ex__")
    cls_var = obj.cls_var
    meta_src = AttrSource(cls_var.source, "__class__") if cls_var.source is not None else None
    meta = class_var(type(cls_var.value), meta_src)
    getattribute, _ = type_lookup(tx, meta, "__getattribute__")
    meta_reduce, _ = type_lookup(tx, meta, "__reduce__")
    if getattribute is not type.__dict__["__getattribute__"] or meta_reduce is not object.__dict__["__reduce__"]:
        raise Unsupported(f"object.__reduce_ex__ of a {cls_var.value.__qualname__}: its metaclass "
                          "changes how the class's __reduce__ is read")
    attr, _ = type_lookup(tx, cls_var, "__reduce__")
    if attr is object.__dict__["__reduce__"]:
        return ConstantVariable(False)
    if isinstance(attr, (types.FunctionType, staticmethod, classmethod)):
        return ConstantVariable(True)  # (their __get__ never gives object.__reduce__ back)
    raise Unsupported(f"object.__reduce_ex__ of a {cls_var.value.__qualname__}, whose __reduce__ "
                      f"is a {type(attr).__name__}")


@handles(polyfills._lookup_special)
def _lookup_special(tx, obj, name):
    from .constant import ConstantVariable
    from .descriptors import special_method
    method = special_method(tx, _user_object(obj, "a special method lookup"), name.as_python_constant())
    return ConstantVariable(None) if method is None else method


@handles(polyfills._is_default_getstate)
def _is_default_getstate(tx, obj, getstate):
    from .constant import ConstantVariable
    from .ids import same_object
    from .objects import BuiltinMethodVariable
    if not (isinstance(getstate, BuiltinMethodVariable) and getstate.descr is object.__dict__["__getstate__"]
            and getstate.obj is not None):
        return ConstantVariable(False)
    same = same_object(tx, getstate.obj, obj)
    if same is None:
        raise Unsupported(f"object.__getstate__ bound to {getstate.obj}, read from {obj}")
    return ConstantVariable(same)


@handles(polyfills._instance_dict)
def _instance_dict(tx, obj):
    from .constant import ConstantVariable
    from .mappings import InstanceDictVariable
    from .objects import _real_dict
    obj = _user_object(obj, "the state of")
    if not obj.has_dict():
        return ConstantVariable(None)
    if not obj.is_new and _real_dict(obj.value) is None:
        raise Unsupported(f"the __dict__ of {obj}, which is not a dict")
    d = InstanceDictVariable(obj)
    return d if d._keys(tx) else ConstantVariable(None)


_ORIGINAL_SLOTNAMES = copyreg._slotnames
_MANAGED_DICT = 1 << 4  # Py_TPFLAGS_MANAGED_DICT


@handles(polyfills._slotnames)
def _slotnames(tx, obj, required):
    """``_PyType_GetSlotNames(type(obj))`` and the layout checks of object_getstate_default:
    the class's cached ``__slotnames__``, or ``copyreg._slotnames(cls)``, run now (it computes
    the names from the classes' ``__slots__`` and caches them on the class, as the first copy
    in eager Python does), guarded to stay the same."""
    import struct
    from ..source import GetItemSource
    from .builder import wrap_constant
    obj = _user_object(obj, "the state of")
    cls = obj.python_type()
    required = required.as_python_constant()
    if required and cls.__itemsize__:
        raise Unsupported(f"TypeError: cannot pickle {cls.__name__!r} objects")
    names = cls.__dict__.get("__slotnames__", _ABSENT)
    if names is _ABSENT:
        if copyreg._slotnames is not _ORIGINAL_SLOTNAMES \
                or raw_type_lookup(type(cls), "__setattr__") is not type.__dict__["__setattr__"]:
            raise Unsupported(f"copyreg._slotnames({cls.__qualname__}) would run code of the user's")
        names = copyreg._slotnames(cls)
    if names is not None and type(names) is not list:
        raise Unsupported(f"TypeError: {cls.__name__}.__slotnames__ should be a list or None")
    if required:
        ptr = struct.calcsize("P")
        size = object.__basicsize__
        if cls.__dictoffset__ and not cls.__flags__ & _MANAGED_DICT:
            size += ptr
        if cls.__weakrefoffset__ > 0:
            size += ptr
        size += ptr * len(names or ())
        if cls.__basicsize__ > size:
            raise Unsupported(f"TypeError: cannot pickle {cls.__name__!r} object")
    if obj.cls_var.source is not None and "__slotnames__" in cls.__dict__:
        src = GetItemSource(AttrSource(obj.cls_var.source, "__dict__"), "__slotnames__")
        tx.output.guards.EQUALS_MATCH(src, names)
    return wrap_constant(None if names is None else tuple(names))


_ABSENT = object()


# ---- weakref --------------------------------------------------------------------------------

class WeakRefVariable(VariableTracker):
    """A ``weakref.ref`` read from the frame's inputs (exactly that type: a subclass may add
    state). Calling it gives its referent, read through the ref (``WeakrefSource``: guards
    fail once it is dead), or None for a dead one (guarded dead)."""

    def __init__(self, value, source):
        super().__init__(source)
        self.value = value

    def python_type(self):
        return weakref.ReferenceType

    def truth(self, tx):
        return True

    def call_function(self, tx, args, kwargs):
        from ..source import WeakrefSource
        from .builder import wrap_value
        from .constant import ConstantVariable
        if args or kwargs:
            raise Unsupported("a weakref.ref called with arguments")
        referent = self.value()
        if referent is None:
            tx.output.guards.PREDICATE(self.source, _is_dead, f"{self.source.name()}() is None")
            return ConstantVariable(None)
        return wrap_value(tx, referent, WeakrefSource(self.source))

    def reconstruct(self, codegen):
        codegen.source(self.source)


def _is_dead(ref):
    return type(ref) is weakref.ReferenceType and ref() is None


def wrap_weakref(tx, value, source):
    if source is None:
        raise Unsupported("a weakref.ref that is not reachable from the frame's inputs")
    tx.output.guards.TYPE_MATCH(source, value)
    return WeakRefVariable(value, source)


def new_weakref(tx, args, kwargs):
    """``weakref.ref(obj)`` called in the trace, of a user object (read from the inputs, or made
    by the trace): a NewWeakRefVariable. A callback is refused; an object whose class gives its
    instances no weak reference slot raises TypeError, as Python does."""
    from .constant import ConstantVariable
    from .objects import UserDefinedObjectVariable
    if kwargs or not 1 <= len(args) <= 2:
        raise Unsupported("weakref.ref() with these arguments")
    if len(args) == 2 and not (isinstance(args[1], ConstantVariable) and args[1].value is None):
        raise Unsupported("weakref.ref() with a callback is not modelled")
    obj = args[0]
    if not isinstance(obj, UserDefinedObjectVariable):
        raise Unsupported(f"weakref.ref() of {obj} is not modelled (only of a user object)")
    cls = obj.python_type()
    if not cls.__weakrefoffset__:
        from .exceptions import raise_exception
        raise_exception(TypeError(f"cannot create weak reference to {cls.__name__!r} object"))
    return NewWeakRefVariable(obj)


class NewWeakRefVariable(VariableTracker):
    """A ``weakref.ref`` (without callback) the trace made of the user object ``referent``.

    Calling it gives the referent where that is certainly alive at that point (reachable from the
    frames being traced, or read from the inputs while nothing the frame received has changed:
    see ids._alive); elsewhere it is refused (CPython frees an object when its last reference
    goes, and the ref then gives None). Which refs are one object (``weakref.ref(o) is
    weakref.ref(o)``: CPython shares a plain ref) is not known: refused. Rebuilt at run time as
    ``weakref.ref(obj)`` for an object read from the inputs; for an object the trace made it is
    refused (whether that object is alive by then is not known where the code is generated)."""

    def __init__(self, referent):
        super().__init__(None)
        self.referent = referent

    def python_type(self):
        return weakref.ReferenceType

    def truth(self, tx):
        return True

    def call_function(self, tx, args, kwargs):
        from .ids import _alive, _reachable
        if args or kwargs:
            raise Unsupported("a weakref.ref called with arguments")
        if not _alive(tx, self.referent, _reachable(tx)):
            raise Unsupported(f"whether {self.referent}, the referent of a weakref.ref made in the "
                              "trace, is alive at this point is not known while tracing")
        return self.referent

    def reconstruct(self, codegen):
        if self.referent.is_new or self.referent.source is None:
            raise Unsupported(f"a weakref.ref of {self.referent} made in the trace cannot be rebuilt "
                              "(whether that object is alive then is not known where the code is made)")
        codegen.load_function(weakref.ref)
        codegen(self.referent)
        codegen.append_call(1)

    def _repr_value(self):
        return f"weakref.ref({self.referent})"


# ---- typing ---------------------------------------------------------------------------------

_TYPING_KINDS = tuple(t for t in (getattr(typing, "_SpecialGenericAlias", None), getattr(typing, "_GenericAlias", None),
                                  getattr(typing, "_SpecialForm", None), types.GenericAlias, types.UnionType)
                      if t is not None)


def is_typing_alias(value):
    """``typing.List``, ``typing.Optional``, ``List[int]``, ``list[int]``, ``int | None``: immutable
    objects whose subscription and attributes compute other such objects."""
    return isinstance(value, _TYPING_KINDS)


class TypingVariable(ObjectVariable):
    """A typing alias as a constant (read: ID_MATCH; made by subscription: the real result).
    Subscripting it with constants and reading its attributes (``__origin__``, ``__args__``) are
    done at trace time: typing computes them in Python with no effect but its own cache."""

    def call_method(self, tx, name, args, kwargs):
        if name == "__getitem__" and len(args) == 1 and not kwargs and args[0].is_python_constant():
            return _typing_value(self.value[args[0].as_python_constant()])
        raise Unsupported(f"method {name!r} of the typing alias {self.value!r}")

    def var_getattr(self, tx, name):
        from .base import GetAttrVariable
        if name == "__getitem__":
            return GetAttrVariable(self, name)
        if name in ("__origin__", "__args__", "__name__", "__qualname__", "__module__", "__parameters__"):
            try:
                return _typing_value(getattr(self.value, name))
            except AttributeError:
                from .descriptors import attribute_error
                raise attribute_error(f"{type(self.value).__name__!r} object has no attribute {name!r}") from None
        raise Unsupported(f"attribute {name!r} of the typing alias {self.value!r}")

    def _repr_value(self):
        return repr(self.value)


def _typing_value(value):
    from .builder import wrap_constant
    if is_typing_alias(value):
        return TypingVariable(value)
    if isinstance(value, tuple) and all(is_typing_alias(v) or isinstance(v, type) for v in value):
        from .lists import TupleVariable
        return TupleVariable([_typing_value(v) for v in value])
    return wrap_constant(value)


def typing_compare(tx, fn, a, b):
    """``a == b`` / ``a != b`` where an operand is a typing alias and the other a constant: done at
    trace time (the aliases are constants: see TypingVariable) where every object the comparison
    can reach compares and hashes without code of the user's (``_pure_comparison``); refused
    otherwise. None where no operand is an alias, or the other is not a constant (the operator's
    usual path answers, or refuses)."""
    if not any(isinstance(v, TypingVariable) for v in (a, b)) or not all(v.is_python_constant() for v in (a, b)):
        return None
    values = [v.as_python_constant() for v in (a, b)]
    if not all(_pure_comparison(v) for v in values):
        raise Unsupported(f"comparison of {values[0]!r} and {values[1]!r}: it may run code of the user's "
                          "(a metaclass's __eq__ or __hash__, an object in Literal or Annotated)")
    from .builtin import fold
    return fold(fn, [a, b], exact=True)


_TYPE_VARIABLES = tuple(getattr(typing, n) for n in ("TypeVar", "ParamSpec", "TypeVarTuple") if hasattr(typing, n))


def _slots_of(cls, owner):
    """``cls`` compares and hashes with ``owner``'s own methods (none of its own)."""
    return all(raw_type_lookup(cls, n) is raw_type_lookup(owner, n) for n in ("__eq__", "__ne__", "__hash__"))


def _pure_comparison(value, depth=0):
    """Whether ``==`` and ``hash`` of ``value`` run only typing's own Python (over ``__origin__``,
    ``__args__``, ``__metadata__``), C code of builtin constants, or identity: a typing alias
    (typing's own classes, ``list[int]``, ``int | None``) of such values, a class whose metaclass
    compares and hashes as ``type`` does, a type variable, a forward reference, a builtin scalar,
    a tuple or list of such values."""
    if depth > 32:
        return False
    if value is None or value is Ellipsis or type(value) in (bool, int, float, str, bytes):
        return True
    if type(value) in (tuple, list):
        return all(_pure_comparison(v, depth + 1) for v in value)
    if isinstance(value, type):
        return _slots_of(type(value), type)
    if type(value) in _TYPE_VARIABLES:
        return _slots_of(type(value), object)
    if type(value) is typing.ForwardRef:  # compares its string, module and (evaluated) value
        return not getattr(value, "__forward_evaluated__", False) or \
            _pure_comparison(getattr(value, "__forward_value__", None), depth + 1)
    if is_typing_alias(value) and (type(value).__module__ == "typing"
                                   or type(value) in (types.GenericAlias, types.UnionType)):
        parts = [getattr(value, "__origin__", None), *getattr(value, "__args__", ()),
                 *getattr(value, "__metadata__", ())]
        return all(_pure_comparison(p, depth + 1) for p in parts)
    return False
