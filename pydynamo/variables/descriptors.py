"""Python's attribute protocol, implemented once for instances of user classes.

``getattr_protocol`` is ``type(obj).__getattribute__`` followed by ``__getattr__``;
``generic_getattr`` is ``object.__getattribute__``: data descriptors on the type, then the
instance ``__dict__`` (or slots), then non-data descriptors and plain class attributes along the
MRO. ``generic_setattr`` / ``generic_delattr`` are ``object.__setattr__`` / ``__delattr__``.
A Python ``__getattribute__``, ``__getattr__``, ``__setattr__``, ``__delattr__``, property
function or descriptor ``__get__``/``__set__``/``__delete__`` is inlined like any user function.

Guards: every class attribute the protocol looks up is read as CPython's ``_PyType_Lookup``
reads it (``TypeLookupSource``, one C step): the object found is pinned by identity and a name
found nowhere is guarded absent, so a class attribute added, removed or replaced anywhere in the
MRO fails the guards. Instance-dict reads are guarded one by one (present: by value, absent:
NOT_PRESENT). Classes whose whole MRO is immutable (builtins) need no guard.
"""
import functools
import types

from ..exc import ExceptionRaised, Unsupported
from ..source import AttrSource, TypeLookupSource, type_lookup as raw_type_lookup
from .base import MADE_IN_TRACE
from .constant import ConstantVariable

_tuplegetter = type(__import__("collections").namedtuple("_T", "a").a)
MISSING = object()  # found nowhere
DELETED = object()  # an attribute the trace deleted (in an object's write overlay)

_IMMUTABLETYPE = 1 << 8  # Py_TPFLAGS_IMMUTABLETYPE: builtin classes, whose dicts never change


def attribute_error(message):
    """The trace raises AttributeError(message), which it is sure of (the absence that causes
    it is guarded): the user's ``except``, ``hasattr``, ``getattr(obj, name, default)`` and the
    ``__getattr__`` fallback see it as they would in Python."""
    from .exceptions import ExceptionVariable
    return ExceptionRaised(ExceptionVariable.from_real(AttributeError(message)))


def missing(tx, obj_cls, name):
    return attribute_error(f"{obj_cls.__name__!r} object has no attribute {name!r}")


def is_attribute_error(exc):
    """``exc`` (an Unsupported) is the trace raising an AttributeError (or a subclass)."""
    return isinstance(exc, ExceptionRaised) and issubclass(exc.var.python_type(), AttributeError)


def mutable_mro(cls):
    return not all(c.__flags__ & _IMMUTABLETYPE for c in cls.__mro__)


def guarded_mro_lookup(tx, mro, name):
    """``name`` looked up along ``mro``, a class statement's class's (or the part of it after a
    ``super()``'s class), which has no source: the classes made in the trace are the trace's
    own; each other mutable class passed or found is guarded by itself (ConstObjectSource)."""
    from ..source import ConstObjectSource, GetItemSource
    for klass in mro:
        own = klass.__dict__
        if klass not in MADE_IN_TRACE and not klass.__flags__ & _IMMUTABLETYPE:
            src = GetItemSource(AttrSource(ConstObjectSource(klass), "__dict__"), name)
            if name in own:
                tx.output.guards.ID_MATCH(src, own[name])
            else:
                tx.output.guards.NOT_PRESENT(src)
        if name in own:
            return own[name]
    return MISSING


def type_lookup(tx, cls_var, name):
    """``_PyType_Lookup(cls, name)``, guarded: (the raw attribute or MISSING, its source)."""
    cls = cls_var.value
    from .user_defined import refuse_stale_class_read
    refuse_stale_class_read(tx, cls, name)
    if cls_var.source is None and cls in MADE_IN_TRACE:
        return guarded_mro_lookup(tx, cls.__mro__, name), None
    attr = raw_type_lookup(cls, name, MISSING)
    src = TypeLookupSource(cls_var.source, name) if cls_var.source is not None else None
    if src is not None and mutable_mro(cls):
        if attr is MISSING:
            tx.output.guards.NOT_PRESENT(src)
        else:
            tx.output.guards.ID_MATCH(src, attr)
    return attr, src


def class_var(cls, source):
    from .user_defined import UserDefinedClassVariable
    return UserDefinedClassVariable(cls, source)


def type_of(attr, src):
    """The class tracker of a class attribute found at ``src`` (pinned by identity there)."""
    return class_var(type(attr), AttrSource(src, "__class__") if src is not None else None)


def descriptor_slots(tx, attr, src):
    """(__get__, __set__, __delete__) of ``type(attr)``, each raw or MISSING (guarded)."""
    if isinstance(attr, (types.FunctionType, staticmethod, classmethod)):
        return raw_type_lookup(type(attr), "__get__"), MISSING, MISSING  # immutable types
    tvar = type_of(attr, src)
    return tuple(type_lookup(tx, tvar, n)[0] for n in ("__get__", "__set__", "__delete__"))


def is_data_descriptor(slots):
    get, set_, delete = slots
    return get is not MISSING and (set_ is not MISSING or delete is not MISSING)


def _attr(src, name):
    return AttrSource(src, name) if src is not None else None


def call_transparent(tx, method, args, kwargs):
    """Call a Python method the interpreter calls implicitly (a special method, ``__init__``):
    an exception it raises reaches the caller unchanged, as in CPython (see inline_call)."""
    from .functions import UserFunctionVariable, UserMethodVariable
    if not isinstance(method, (UserFunctionVariable, UserMethodVariable)):
        return method.call_function(tx, args, kwargs)
    tx.transparent_call = True
    try:
        return method.call_function(tx, args, kwargs)
    finally:
        tx.transparent_call = False


def call_user_function(tx, fn, src, args):
    """A Python function the attribute protocol calls (a property's, ``__getattr__``...): what
    it raises passes through unchanged, as in CPython."""
    from .builder import wrap_value
    return call_transparent(tx, wrap_value(tx, fn, src), list(args), {})


# ---- reading --------------------------------------------------------------------------------


def _generic(slot, name):
    """``slot`` (what ``type(obj).__getattribute__``/``__setattr__``/``__delattr__`` finds) is
    object's own, or the same C slot re-exported by a builtin base (dict has its own
    ``__getattribute__`` wrapper around the generic lookup)."""
    from .objects import _BASES
    return slot is getattr(object, name) or (isinstance(slot, types.WrapperDescriptorType)
                                             and slot.__objclass__ in _BASES)


def getattr_protocol(tx, obj, name):
    """``obj.name``: ``type(obj).__getattribute__``, then ``__getattr__`` on AttributeError."""
    cls_var = obj.cls_var
    ga, ga_src = type_lookup(tx, cls_var, "__getattribute__")
    try:
        if _generic(ga, "__getattribute__"):
            return generic_getattr(tx, obj, name)
        if cls_var.value in _IMMUTABLE_C_TYPES and not obj.is_new:
            return _immutable_read(tx, obj, name)
        if not isinstance(ga, types.FunctionType):
            raise Unsupported(f"{cls_var.value.__qualname__}.__getattribute__ is "
                              f"{type(ga).__name__}, not modelled")
        return call_user_function(tx, ga, ga_src, [obj, ConstantVariable(name)])
    except ExceptionRaised as e:
        if not is_attribute_error(e):
            raise
        fallback, fb_src = type_lookup(tx, cls_var, "__getattr__")
        if fallback is MISSING:
            raise
    return call_transparent(tx, bind(tx, obj, "__getattr__", fallback, fb_src), [ConstantVariable(name)], {})


# C types whose instances are immutable and whose attribute reads run no user code
# (``int | None``, ``list[int]``): read for real, what was read guarded like any input.
_IMMUTABLE_C_TYPES = (types.UnionType, types.GenericAlias)


def _immutable_read(tx, obj, name):
    from .builder import wrap_value
    try:
        value = getattr(obj.value, name)
    except AttributeError as e:
        raise attribute_error(str(e)) from None
    return wrap_value(tx, value, AttrSource(obj.source, name) if obj.source is not None else None)


def generic_getattr(tx, obj, name):
    """``object.__getattribute__(obj, name)``."""
    attr, src = type_lookup(tx, obj.cls_var, name)
    slots = descriptor_slots(tx, attr, src) if attr is not MISSING else None
    if slots is not None and is_data_descriptor(slots):
        return bind(tx, obj, name, attr, src, slots)
    found = obj.instance_lookup(tx, name)
    if found is not None:
        return found
    if attr is not MISSING:
        return bind(tx, obj, name, attr, src, slots)
    raise missing(tx, obj.python_type(), name)


def bind(tx, obj, name, attr, src, slots=None, cls_var=None):
    """``attr.__get__(obj, type(obj))`` for ``attr`` found on the class (or the attribute
    itself where its type is no descriptor). ``obj`` is a user object, or any tracker whose
    class ``cls_var`` is (a namedtuple's methods)."""
    from .builder import wrap_value
    from .functions import UserMethodVariable
    from .mappings import InstanceDictVariable
    from .objects import BuiltinMethodVariable, UserDefinedObjectVariable
    cls_var = cls_var or obj.cls_var
    user_obj = isinstance(obj, UserDefinedObjectVariable)
    if isinstance(attr, types.FunctionType):
        return UserMethodVariable(attr, obj, src)
    if attr is object.__dict__["__class__"]:
        return cls_var  # type(obj): pinned by the object's guard (or made by the trace)
    if isinstance(attr, staticmethod):
        return wrap_value(tx, attr.__func__, _attr(src, "__func__"))
    if isinstance(attr, classmethod):
        if not isinstance(attr.__func__, types.FunctionType):
            raise Unsupported(f"classmethod of {type(attr.__func__).__name__}")
        return UserMethodVariable(attr.__func__, cls_var, _attr(src, "__func__"))
    if type(attr) is property:
        if attr.fget is None:
            raise attribute_error(f"property {name!r} of {cls_var.value.__name__!r} object has no getter")
        return call_user_function(tx, attr.fget, _attr(src, "fget"), [obj])
    if type(attr) is functools.cached_property and user_obj:
        return _cached_property(tx, obj, attr, src)
    if type(attr) is _tuplegetter and user_obj and obj.base is not None:  # a namedtuple field
        return obj.base.call_method(tx, "__getitem__", [ConstantVariable(attr.__reduce__()[1][0])], {})
    if isinstance(attr, types.MemberDescriptorType) and user_obj and attr.__objclass__ in cls_var.value.__mro__:
        return obj.slot_lookup(tx, name)
    if isinstance(attr, types.GetSetDescriptorType) and name == "__dict__" and user_obj and obj.has_dict():
        return InstanceDictVariable(obj)
    if isinstance(attr, (types.MethodDescriptorType, types.WrapperDescriptorType)):
        from .objects import _BASES
        if user_obj and attr.__objclass__ in _BASES:
            return BuiltinMethodVariable(attr, obj)  # modelled (objects.call_builtin_method)
        raise Unsupported(f"{attr.__qualname__}, a C method, of {obj}")
    slots = slots or descriptor_slots(tx, attr, src)
    get = slots[0]
    if get is MISSING:
        return wrap_value(tx, attr, src)  # a plain class attribute
    if isinstance(get, types.FunctionType):  # a descriptor class of the user's
        descr = wrap_value(tx, attr, src)
        return call_user_function(tx, get, TypeLookupSource(descr.cls_var.source, "__get__")
                                  if descr.cls_var.source is not None else None,
                                  [descr, obj, cls_var])
    raise Unsupported(f"descriptor {type(attr).__name__} {cls_var.value.__qualname__}.{name}")


def class_attribute(tx, obj, cls_var, name):
    """``obj.name`` for an object without an instance dict whose class a user wrote (a
    namedtuple's methods and properties): found on the class and bound; None where what is
    found is a C method (the object's own tracker models those)."""
    attr, src = type_lookup(tx, cls_var, name)
    if attr is MISSING:
        raise missing(tx, cls_var.value, name)
    if isinstance(attr, (types.MethodDescriptorType, types.WrapperDescriptorType)):
        return None
    return bind(tx, obj, name, attr, src, cls_var=cls_var)


def _cached_property(tx, obj, attr, src):
    """functools.cached_property.__get__ (a non-data descriptor: a cached value in the instance
    dict was found before it): compute, then store in the instance dict directly."""
    if attr.attrname is None or not obj.has_dict():
        raise Unsupported("cached_property without __set_name__ or instance __dict__")
    value = call_user_function(tx, attr.func, _attr(src, "func"), [obj])
    obj.store(tx, attr.attrname, value)
    return value


# ---- writing and deleting ---------------------------------------------------------------------


def setattr_protocol(tx, obj, name, value):
    """``obj.name = value``: ``type(obj).__setattr__``."""
    sa, sa_src = type_lookup(tx, obj.cls_var, "__setattr__")
    if _generic(sa, "__setattr__"):
        return generic_setattr(tx, obj, name, value)
    if isinstance(sa, types.FunctionType):
        return call_user_function(tx, sa, sa_src, [obj, ConstantVariable(name), value])
    raise Unsupported(f"{obj.python_type().__qualname__}.__setattr__ is {type(sa).__name__}")


def delattr_protocol(tx, obj, name):
    """``del obj.name``: ``type(obj).__delattr__``."""
    da, da_src = type_lookup(tx, obj.cls_var, "__delattr__")
    if _generic(da, "__delattr__"):
        return generic_delattr(tx, obj, name)
    if isinstance(da, types.FunctionType):
        return call_user_function(tx, da, da_src, [obj, ConstantVariable(name)])
    raise Unsupported(f"{obj.python_type().__qualname__}.__delattr__ is {type(da).__name__}")


def generic_setattr(tx, obj, name, value):
    """``object.__setattr__(obj, name, value)``: a data descriptor's ``__set__``, else the
    instance dict."""
    attr, src = type_lookup(tx, obj.cls_var, name)
    if attr is not MISSING:
        done = _descriptor_store(tx, obj, name, attr, src, "__set__", [value])
        if done is not None:
            return done
    if not obj.has_dict():  # the class's layout: fixed with it
        raise missing(tx, obj.python_type(), name)
    obj.store(tx, name, value)
    return ConstantVariable(None)


def generic_delattr(tx, obj, name):
    attr, src = type_lookup(tx, obj.cls_var, name)
    if attr is not MISSING:
        done = _descriptor_store(tx, obj, name, attr, src, "__delete__", [])
        if done is not None:
            return done
    if not obj.has_dict() or not obj.instance_has(tx, name):
        raise missing(tx, obj.python_type(), name)
    obj.store(tx, name, DELETED)
    return ConstantVariable(None)


def _descriptor_store(tx, obj, name, attr, src, which, args):
    """``attr.__set__(obj, value)`` / ``attr.__delete__(obj)`` where ``type(attr)`` has it;
    None where it has not (the instance dict is written instead)."""
    slot = descriptor_slots(tx, attr, src)[1 if which == "__set__" else 2]
    if slot is MISSING:
        return None
    if type(attr) is property:
        fn = attr.fset if which == "__set__" else attr.fdel
        if fn is None:
            raise attribute_error(f"property {name!r} of {obj.python_type().__name__!r} object has "
                                  f"no {'setter' if which == '__set__' else 'deleter'}")
        call_user_function(tx, fn, _attr(src, "fset" if which == "__set__" else "fdel"), [obj, *args])
    elif isinstance(attr, types.MemberDescriptorType) and attr.__objclass__ in obj.python_type().__mro__:
        if which == "__delete__" and obj.slot_lookup(tx, name, must=False) is None:
            raise attribute_error(name)  # an empty slot (guarded so)
        obj.store(tx, name, DELETED if which == "__delete__" else args[0], slot=True)
    elif isinstance(slot, types.FunctionType):
        from .builder import wrap_value
        descr = wrap_value(tx, attr, src)
        fn_src = TypeLookupSource(descr.cls_var.source, which) if descr.cls_var.source else None
        call_user_function(tx, slot, fn_src, [descr, obj, *args])
    else:
        raise Unsupported(f"{which} of {type(attr).__name__} {obj.python_type().__qualname__}.{name}")
    return ConstantVariable(None)


# ---- special methods --------------------------------------------------------------------------


def special_method(tx, obj, name):
    """``type(obj).name`` bound to ``obj``, as the interpreter finds special methods (on the
    type only, never the instance dict); None where no class defines it."""
    attr, src = type_lookup(tx, obj.cls_var, name)
    if attr is MISSING:
        return None
    return bind(tx, obj, name, attr, src)


# ---- instances of builtin classes that the trace models --------------------------------------
#
# A list, a partial, a zip or a generator made in the trace has no real object to ask, and one
# read from the inputs is often modelled without it. ``hasattr``/``getattr`` on such a tracker
# must still answer as the real object would: as object.__getattribute__ does, from the dicts
# along ``type(obj).__mro__`` (data descriptors first, then the instance dict, then the rest),
# never from ``hasattr(cls, name)``, which also sees the metaclass's attributes (``__name__``,
# ``__qualname__``, ``__mro__``, ``__call__`` of ``type``) that the class has and its instances
# do not.

def _generic_getattr_types():
    """Builtin classes whose tp_getattro is CPython's generic lookup (PyObject_GenericGetAttr),
    most re-exported as a ``__getattribute__`` wrapper of their own. Not listed, so never
    answered from the type: bound methods (they forward to ``__func__``), modules (module
    ``__getattr__``), classes (the metaclass), super."""
    import collections
    import functools
    import itertools
    import operator

    def gen():
        yield
    samples = ([], (), {}, set(), frozenset(), range(0), "", b"", {}.keys(), {}.values(), {}.items())
    iterators = {type(iter(s)) for s in samples} | {type(reversed(s)) for s in ([], range(0), {})}
    iterators |= {type(iter(range(2 ** 70))), type(iter("é")), type(iter(lambda: 0, 0))}
    return frozenset({
        object, list, tuple, dict, set, frozenset, collections.deque, range, slice,
        type({}.keys()), type({}.values()), type({}.items()),
        functools.partial, operator.itemgetter, operator.attrgetter, operator.methodcaller,
        zip, map, filter, enumerate, reversed, types.GeneratorType, type(gen()),
        types.BuiltinFunctionType, types.MethodWrapperType, types.MethodDescriptorType,
        types.WrapperDescriptorType, types.ClassMethodDescriptorType, types.MemberDescriptorType,
        types.GetSetDescriptorType, property, *iterators,
        *(t for t in vars(itertools).values() if isinstance(t, type) and t.__module__ == "itertools"),
    })


_GENERIC_GETATTR = _generic_getattr_types()


def _class_lookup(tx, cls, name):
    """``_PyType_Lookup(cls, name)`` (raw attribute or MISSING, its source), guarded through the
    class object itself where the MRO can change (a namedtuple class's dict)."""
    if not mutable_mro(cls):
        return raw_type_lookup(cls, name, MISSING), None
    from ..source import ConstObjectSource
    return type_lookup(tx, class_var(cls, ConstObjectSource(cls)), name)


def modelled_instance_attr(tx, cls, name, own=None):
    """Where ``object.__getattribute__`` finds ``name`` on an object of exact type ``cls``,
    whose instance dict has the names ``own`` (None: it has none, or it is not known):

    - ``("type", attr)``: a data descriptor of the type (no instance dict entry can hide it),
      or a class attribute (method, constant) that no instance dict entry hides;
    - ``("dict", None)``: a key of the instance dict;
    - ``(None, MISSING)``: nowhere (AttributeError).

    Refused: a class whose lookup is not the generic one (a ``__getattr__``, a
    ``__getattribute__`` of its own), and a name found nowhere on the type of an object whose
    instance dict is not known."""
    ga, _ = _class_lookup(tx, cls, "__getattribute__")
    if not (ga is object.__getattribute__ or isinstance(ga, types.WrapperDescriptorType)
            and ga.__objclass__ in _GENERIC_GETATTR) or _class_lookup(tx, cls, "__getattr__")[0] is not MISSING:
        raise Unsupported(f"attribute {name!r} of a {cls.__qualname__} object: its class "
                          "changes the attribute lookup")
    attr, src = _class_lookup(tx, cls, name)
    if attr is not MISSING and is_data_descriptor(descriptor_slots(tx, attr, src)):
        return "type", attr
    if own is not None and name in own:
        return "dict", None
    if attr is not MISSING:
        return "type", attr
    if own is None and cls.__dictoffset__:
        raise Unsupported(f"attribute {name!r} of a {cls.__qualname__} object (its instance "
                          "__dict__ is not known here)")
    return None, MISSING


def modelled_has_attr(tx, cls, name, own=None):
    """``hasattr(obj, name)`` for a tracker of a builtin class's instance (see
    ``modelled_instance_attr``). A class attribute whose read runs code that may raise (a
    property, a slot of a user class, a user descriptor) is refused; the getset and member
    descriptors of builtin classes never raise AttributeError on the instances the trace
    models (tests/test_c_object_attrs.py checks each), nor does a namedtuple's field."""
    from .base import _runs_code
    where, attr = modelled_instance_attr(tx, cls, name, own)
    if where == "type" and type(attr) is not _tuplegetter and (
            _runs_code(attr) or isinstance(attr, types.MemberDescriptorType)
            and not attr.__objclass__.__flags__ & _IMMUTABLETYPE):
        raise Unsupported(f"hasattr() of {cls.__qualname__}.{name}, a {type(attr).__name__}")
    return where is not None


def modelled_getattr(tx, obj, name, own=None):
    """``obj.name`` for a tracker ``obj`` of a builtin class's instance that models its C
    methods in ``call_method``: a method found on the type is bound to it (called, it is
    ``obj.call_method``), ``__class__`` is its type, a constant class attribute (``__doc__``,
    ``__hash__ = None``) is that constant; a name found nowhere raises AttributeError in the
    trace. Anything else (a data descriptor the tracker does not model, an instance dict entry)
    is refused. Where the instance dict is not known (an input OrderedDict), a method or
    constant is read only under a guard that no instance dict entry hides it."""
    from .base import GetAttrVariable, VariableTracker
    from .constant import is_constant_value
    cls = obj.python_type()
    where, attr = modelled_instance_attr(tx, cls, name, own)
    if where is None:
        raise missing(tx, cls, name)
    if attr is object.__dict__["__class__"]:
        from .builtin import _type
        return _type(tx, obj)
    method = isinstance(attr, (types.MethodDescriptorType, types.WrapperDescriptorType,
                               types.ClassMethodDescriptorType)) \
        and type(obj).call_method is not VariableTracker.call_method  # (which reads the attribute)
    if where != "type" or not (method or is_constant_value(attr)):
        raise Unsupported(f"attribute {name!r} of a {cls.__qualname__} object")
    if own is None and cls.__dictoffset__:
        real = tx.output.mutable_sources.get(obj.source.name()) if obj.source is not None else None
        if real is None or name in vars(real[1]):
            raise Unsupported(f"attribute {name!r} of a {cls.__qualname__} object (its instance "
                              "__dict__ is not known here, or hides the class's)")
        from ..source import GetItemSource
        tx.output.guards.NOT_PRESENT(GetItemSource(AttrSource(obj.source, "__dict__"), name))
    return GetAttrVariable(obj, name) if method else ConstantVariable(attr)
