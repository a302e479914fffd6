"""Python modules, classes, ``super()``, namedtuples and enums. Instances of user classes are
in objects.py, the attribute protocol they follow in descriptors.py."""
import enum
import inspect
import types
import weakref

from ..exc import Unsupported
from ..source import AttrSource, GetItemSource, Source
from .base import MADE_IN_TRACE, EntryReadsVariable, ObjectVariable, VariableTracker

_MISSING = object()


def lookup_class_attr(tx, obj_var, cls, name, src):
    """``obj.name`` found on the class: methods bind to ``obj_var``, properties run inlined.

    ``src`` is the source of ``obj.name``; methods are guarded by identity of their function.
    """
    from .builder import wrap_value
    from .functions import UserFunctionVariable, UserMethodVariable
    refuse_stale_class_read(tx, cls, name)
    attr = inspect.getattr_static(cls, name, _MISSING)
    if attr is _MISSING:
        return _MISSING
    if attr is object.__dict__["__class__"]:  # the object is pinned: so is its class
        return wrap_value(tx, cls, src)
    if isinstance(attr, types.FunctionType):
        fn_src = AttrSource(src, "__func__") if src is not None else None
        if fn_src is not None:
            tx.output.guards.ID_MATCH(fn_src, attr)
        return UserMethodVariable(attr, obj_var, fn_src)
    if isinstance(attr, staticmethod):
        return wrap_value(tx, attr.__func__, src)
    if isinstance(attr, classmethod) and isinstance(attr.__func__, types.FunctionType):
        # bound to the class: obj.name.__func__ is the function (guarded), obj.__class__ the
        # class (pinned with the object)
        fn_src = AttrSource(src, "__func__") if src is not None else None
        if fn_src is not None:
            tx.output.guards.ID_MATCH(fn_src, attr.__func__)
        cls_src = AttrSource(obj_var.source, "__class__") if obj_var.source is not None else None
        return UserMethodVariable(attr.__func__, wrap_value(tx, cls, cls_src), fn_src)
    if isinstance(attr, property) and isinstance(attr.fget, types.FunctionType):
        cls_src = AttrSource(obj_var.source, "__class__") if obj_var.source is not None else None
        fget_src = AttrSource(AttrSource(cls_src, name), "fget") if cls_src is not None else None
        if fget_src is not None:
            tx.output.guards.ID_MATCH(fget_src, attr.fget)
        return UserFunctionVariable(attr.fget, fget_src).call_function(tx, [obj_var], {})
    if isinstance(attr, (classmethod, property)) or hasattr(type(attr), "__get__"):
        if not isinstance(attr, types.MemberDescriptorType):
            raise Unsupported(f"descriptor {type(attr).__name__} {cls.__name__}.{name}")
    return _MISSING_VALUE


_MISSING_VALUE = object()  # found, but a plain value: read it with getattr


class PythonModuleVariable(ObjectVariable):
    def var_getattr(self, tx, name):
        from .base import python_getattr_hook
        from .builder import wrap_value
        if name not in vars(self.value) and python_getattr_hook(self.value):
            raise Unsupported(f"attribute {name!r} of module {self.value.__name__}: its __getattr__ "
                              "would run while tracing")
        if not hasattr(self.value, name):
            raise Unsupported(f"module {self.value.__name__} has no attribute {name!r}")
        return wrap_value(tx, getattr(self.value, name), self.attr_source(name))

    def _repr_value(self):
        return self.value.__name__


class UserDefinedClassVariable(ObjectVariable):
    """A class. Its attributes are read as Python reads them (``getattr(cls, name)``, guarded
    where read); calling it creates an instance (objects.construct)."""

    def var_getattr(self, tx, name):
        from .builder import wrap_value
        refuse_stale_class_read(tx, self.value, name)
        refuse_stale_class_read(tx, type(self.value), name)
        if name == "__dict__" and type(self.value) is type:
            return ClassDictVariable(self)  # a mappingproxy of the class's own attributes
        if name == "apply":
            from .autograd_function import AutogradFunctionApplyVariable, is_function_class
            if is_function_class(self.value):  # captured in the graph (autograd_function.py)
                return AutogradFunctionApplyVariable(self)
        if name == "__subclasses__" and _type_subclasses(tx, self):
            from .base import GetAttrVariable
            return GetAttrVariable(self, name)  # called: call_method
        found = inspect.getattr_static(self.value, name, _MISSING)
        if found is _MISSING:
            raise Unsupported(f"class {self.value.__name__} has no attribute {name!r}")
        if _get_runs_python(found):  # reading it would run its __get__ now, at trace time
            raise Unsupported(f"{self.value.__qualname__}.{name}: a {type(found).__name__} "
                              "read through the class")
        return wrap_value(tx, getattr(self.value, name), self.attr_source(name))

    def call_method(self, tx, name, args, kwargs):
        if name == "__subclasses__" and _type_subclasses(tx, self):
            return _subclasses(tx, self, args, kwargs)
        return super().call_method(tx, name, args, kwargs)

    def call_function(self, tx, args, kwargs):
        from .subclasses import is_wrapper_subclass_class
        if is_wrapper_subclass_class(self.value):  # a traceable wrapper subclass made in the trace
            from .dtensor import record_call
            return record_call(tx, self.value, self.value.__name__, args, kwargs)
        from .objects import construct
        from .descriptors import type_lookup
        cls = self.value
        if _is_namedtuple_class(cls) and type(cls) is type \
                and type_lookup(tx, self, "__init__")[0] is object.__init__:  # (__new__: below)
            return _make_namedtuple(tx, self, args, kwargs)
        if isinstance(cls, enum.EnumMeta):
            return _enum_call(tx, self, args, kwargs)
        from .ndarray import is_numpy_dtype_class, is_numpy_scalar_type, numpy_dtype, numpy_scalar
        if is_numpy_scalar_type(cls):  # numpy.float32(2.0), numpy.int64(a.sum())
            return numpy_scalar(tx, cls, args, kwargs)
        if is_numpy_dtype_class(cls):  # numpy.dtype("float32"): a constant
            return numpy_dtype(tx, args, kwargs)
        if cls in (staticmethod, classmethod, property):
            from .class_statement import wrap_descriptor
            made = wrap_descriptor(tx, cls, args, kwargs)  # in a class body
            if made is not None:
                return made
        if cls is weakref.ref:
            from .stdlib import new_weakref
            return new_weakref(tx, args, kwargs)
        if issubclass(cls, BaseException):
            raise Unsupported(f"creating the exception {cls.__qualname__} while tracing")
        return construct(tx, self, args, kwargs)

    def _repr_value(self):
        return self.value.__qualname__


class ClassDictVariable(EntryReadsVariable):
    """``cls.__dict__`` (a mappingproxy), read entry by entry (base.EntryReadsVariable), each
    guarded at ``cls.__dict__[k]`` (its value's guards, or NOT_PRESENT). A name the trace stored
    on a class along the MRO is refused (the dict would show the old value)."""

    shown = "mappingproxy"

    def python_type(self):
        return types.MappingProxyType

    def _entry(self, tx, key):
        from .builder import wrap_value
        cls, src = self.owner.value, self.owner.source
        refuse_stale_class_read(tx, cls, key)
        item = GetItemSource(AttrSource(src, "__dict__"), key) if src is not None else None
        if key in cls.__dict__:
            return wrap_value(tx, cls.__dict__[key], item)
        if item is not None:
            tx.output.guards.NOT_PRESENT(item)
        return None


def _type_subclasses(tx, cls_var):
    """``cls.__subclasses__`` is type's own method bound to ``cls``, guarded so: the metaclass reads
    class attributes as type does and finds type's method, and no class along ``cls``'s MRO
    defines the name (it would be found first)."""
    from .descriptors import MISSING, class_var, type_lookup
    cls = cls_var.value
    if not isinstance(cls, type) or cls_var.source is None:
        return False
    meta = class_var(type(cls), AttrSource(cls_var.source, "__class__"))
    return type_lookup(tx, meta, "__getattribute__")[0] is type.__dict__["__getattribute__"] \
        and type_lookup(tx, meta, "__subclasses__")[0] is type.__dict__["__subclasses__"] \
        and type_lookup(tx, cls_var, "__subclasses__")[0] is MISSING


class SubclassesAre:
    """A guard: ``type.__subclasses__(value)`` is, in order, these classes (held weakly: a
    subclass that dies leaves the list, and fails the check)."""

    def __init__(self, classes):
        self.refs = tuple(weakref.ref(c) for c in classes)
        self.names = [c.__qualname__ for c in classes]

    def __call__(self, value):
        if not isinstance(value, type):
            return False
        subs = type.__subclasses__(value)
        return len(subs) == len(self.refs) and all(s is r() for s, r in zip(subs, self.refs))

    def __repr__(self):
        return f"== [{', '.join(self.names)}]"


class SubclassSource(Source):
    """``type.__subclasses__(owner)[index]``, a class known by the guard on that list (which
    passes only while the class is alive): read, in guards and in generated code, through a weak
    reference to it, so that nothing here keeps alive a subclass that Python would collect (and
    drop from the list)."""

    def __init__(self, owner, index, cls):
        self.owner, self.index, self.ref = owner, index, weakref.ref(cls)

    def name(self):
        return f"{self.owner.name()}.__subclasses__()[{self.index}]"

    def steps(self):
        return (("K", self.ref), ("w", ""))

    def reconstruct(self, codegen):
        codegen.append_callable(lambda: codegen.load_const(self.ref))
        codegen.append_call(0)


def _subclasses(tx, cls_var, args, kwargs):
    """``cls.__subclasses__()``: a new list of the live direct subclasses, in their order, guarded
    to stay those (a subclass defined, or collected, later fails the guard); each class is
    known by that guard (``SubclassSource``)."""
    from .builder import wrap_value
    from .lists import ListVariable
    if args or kwargs:
        raise Unsupported("TypeError: __subclasses__() takes no arguments")
    subs = type.__subclasses__(cls_var.value)
    check = SubclassesAre(subs)
    tx.output.guards.PREDICATE(cls_var.source, check, f"{cls_var.source.name()}.__subclasses__() {check!r}")
    return ListVariable([wrap_value(tx, c, SubclassSource(cls_var.source, i, c)) for i, c in enumerate(subs)])


def store_class_attr(tx, cls_var, name, value):
    """``cls.name = value`` on a class that existed before the frame: ``type.__setattr__``
    stores into the class's dict (replayed after the graph). Refused: special names (they
    change the class's slots), a metaclass with its own ``__setattr__``, builtin classes."""
    from .descriptors import class_var, type_lookup
    cls = cls_var.value
    if cls_var.source is None:
        raise Unsupported(f"assignment to attribute {name!r} of the class {cls.__qualname__}, "
                          "which the trace cannot reach by a source")
    if name.startswith("__") and name.endswith("__"):
        raise Unsupported(f"assignment to the special attribute {cls.__qualname__}.{name}")
    if not cls.__flags__ & (1 << 9):  # Py_TPFLAGS_HEAPTYPE
        raise Unsupported(f"assignment to attribute {name!r} of the builtin class {cls.__qualname__}")
    meta = class_var(type(cls), AttrSource(cls_var.source, "__class__"))
    setattr_, _ = type_lookup(tx, meta, "__setattr__")
    if setattr_ is not type.__dict__["__setattr__"]:
        raise Unsupported(f"assignment to {cls.__qualname__}.{name}: its metaclass "
                          f"{type(cls).__qualname__} defines __setattr__")
    tx.output.side_effects.store_class_attr(cls_var, name, value)
    from .constant import ConstantVariable
    return ConstantVariable(None)


def refuse_stale_class_read(tx, cls, name):
    """A lookup of ``name`` on ``cls`` after the trace wrote it on a class of its MRO."""
    if tx.output.side_effects.class_written(cls, name):
        raise Unsupported(f"reading {getattr(cls, '__qualname__', cls)}.{name} after the trace assigned "
                          "it on a class (a lookup by another path would see the old value)")


def _get_runs_python(attr):
    """``type(attr).__get__`` is Python code (a descriptor class of the user's, or of the
    standard library's Python modules)."""
    from ..source import type_lookup
    return isinstance(type_lookup(type(attr), "__get__"), types.FunctionType)


def _enum_call(tx, cls_var, args, kwargs):
    """``Color(value)``: the member lookup of EnumType.__call__, done at trace time on constant
    arguments (the enum module's own ``_missing_``: no user code runs)."""
    from .builder import wrap_constant
    from .descriptors import class_var, type_lookup
    cls = cls_var.value
    meta = class_var(type(cls), AttrSource(cls_var.source, "__class__") if cls_var.source else None)
    call, _ = type_lookup(tx, meta, "__call__")
    missing_, _ = type_lookup(tx, cls_var, "_missing_")
    fn = getattr(missing_, "__func__", None)
    if call is not enum.EnumMeta.__call__ or getattr(fn, "__module__", None) != "enum" \
            or kwargs or len(args) != 1 or not args[0].is_python_constant():
        raise Unsupported(f"calling the enum {cls.__qualname__} with these arguments")
    try:
        return wrap_constant(cls(args[0].as_python_constant()))
    except Exception as e:
        raise Unsupported(f"{cls.__qualname__}({args[0]}) raised {type(e).__name__}: {e}") from None


def _is_namedtuple_class(cls):
    """A namedtuple class or a subclass that keeps its construction (the generated __new__,
    no __init__) and gives its instances no attributes of their own."""
    if not (isinstance(cls, type) and issubclass(cls, tuple) and hasattr(cls, "_fields")):
        return False
    maker = next((c for c in cls.__mro__ if "_fields" in vars(c)), None)
    return maker is not None and cls.__new__ is maker.__new__ and cls.__init__ is object.__init__ \
        and not cls.__dictoffset__


def namedtuple_attribute(tx, var, name):
    """``nt.name`` for a namedtuple tracker: the class's methods, properties, class attributes
    (guarded where they are found); None for tuple's own C methods."""
    from .descriptors import class_attribute
    cls_var = getattr(var, "cls_var", None)
    if cls_var is None:
        src = AttrSource(var.source, "__class__") if var.source is not None else None
        if src is None and var.tuple_cls.__module__.split(".")[0] != "torch":
            raise Unsupported(f"attribute {name!r} of a {var.tuple_cls.__name__} whose class is not known")
        cls_var = UserDefinedClassVariable(var.tuple_cls, src)
    return class_attribute(tx, var, cls_var, name)


def _make_namedtuple(tx, cls_var, args, kwargs):
    """``NT(*args, **kwargs)``: the generated ``__new__``'s arguments, its defaults read (and
    guarded) where they live."""
    from .descriptors import type_lookup
    from .functions import UserFunctionVariable, bind_args
    from .lists import TupleVariable
    new, new_src = type_lookup(tx, cls_var, "__new__")
    fn = new.__func__ if isinstance(new, staticmethod) else new
    if not isinstance(fn, types.FunctionType):
        raise Unsupported(f"{cls_var.value.__qualname__}.__new__ is {type(fn).__name__}")
    fn_var = UserFunctionVariable(fn, AttrSource(new_src, "__func__") if isinstance(new, staticmethod)
                                  and new_src is not None else new_src)
    code = fn.__code__
    bound = bind_args(code, [cls_var, *args], kwargs, lambda i: fn_var._default(tx, i),
                      lambda n: fn_var._kwdefault(tx, n))
    var = TupleVariable([bound[n] for n in code.co_varnames[1:code.co_argcount]], tuple_cls=cls_var.value)
    var.cls_var = cls_var  # its class as the trace read it (namedtuple_attribute)
    return var


class SuperVariable(VariableTracker):
    """``super(cls, obj)``: attributes are looked up along ``type(obj).__mro__`` (or ``obj``'s own
    MRO when ``obj`` is a class) after ``cls``, and bound to ``obj`` as Python binds them.

    Each class passed is guarded not to have the name (``...__mro__[i].__dict__[name]``), the one
    that has it by the identity of what it has; builtin classes need no guard.
    """

    def __init__(self, cls_var, obj_var):
        super().__init__(None)
        self.cls_var, self.obj_var = cls_var, obj_var

    def python_type(self):
        return super

    def var_getattr(self, tx, name):
        from .descriptors import _IMMUTABLETYPE, attribute_error
        cls, obj = self.cls_var.as_python_constant(), self.obj_var
        is_class = isinstance(obj, UserDefinedClassVariable)
        start = obj.value if is_class else obj.python_type()
        mro = start.__mro__
        if cls not in mro:
            raise Unsupported(f"super({cls.__name__}, obj): obj is not an instance of {cls.__name__}")
        start_src = obj.source if is_class else _class_source(obj)
        if start_src is None and start in MADE_IN_TRACE:  # a class statement's class
            from .descriptors import MISSING, guarded_mro_lookup
            attr = guarded_mro_lookup(tx, mro[mro.index(cls) + 1:], name)
            if attr is MISSING:
                raise attribute_error(f"'super' object has no attribute {name!r}")
            return self._bind(tx, name, attr, None, is_class)
        for i in range(mro.index(cls) + 1, len(mro)):
            klass = mro[i]
            src = None
            if start_src is not None and not klass.__flags__ & _IMMUTABLETYPE:
                mro_src = GetItemSource(AttrSource(start_src, "__mro__"), i)
                src = GetItemSource(AttrSource(mro_src, "__dict__"), name)
            if name not in klass.__dict__:
                if src is not None:
                    tx.output.guards.NOT_PRESENT(src)
                continue
            attr = klass.__dict__[name]
            if src is not None:
                tx.output.guards.ID_MATCH(src, attr)
            return self._bind(tx, name, attr, src, is_class)
        raise attribute_error(f"'super' object has no attribute {name!r}")

    def _bind(self, tx, name, attr, src, is_class):
        from .builder import wrap_value
        from .descriptors import bind
        from .functions import UserFunctionVariable, UserMethodVariable
        from .objects import BuiltinMethodVariable, _is_builtin_new
        obj = self.obj_var
        if _is_builtin_new(attr):
            return BuiltinMethodVariable(attr)
        if isinstance(attr, staticmethod):
            return wrap_value(tx, attr.__func__, AttrSource(src, "__func__") if src else None)
        if isinstance(attr, classmethod) and isinstance(attr.__func__, types.FunctionType):
            owner = obj if is_class else _class_var(obj)
            return UserMethodVariable(attr.__func__, owner, AttrSource(src, "__func__") if src else None)
        if is_class:
            if isinstance(attr, types.FunctionType):
                return UserFunctionVariable(attr, src)
            if not hasattr(type(attr), "__get__"):
                return wrap_value(tx, attr, src)
            raise Unsupported(f"super().{name} is a {type(attr).__name__} read through a class")
        if isinstance(attr, types.FunctionType):
            return UserMethodVariable(attr, obj, src)
        if isinstance(obj, UserDefinedObjectVariable):
            return bind(tx, obj, name, attr, src)
        if isinstance(attr, (types.MethodDescriptorType, types.WrapperDescriptorType)):
            return BuiltinMethodVariable(attr, obj)
        raise Unsupported(f"super().{name} is a {type(attr).__name__}, not a method")

    def _repr_value(self):
        return f"super({self.cls_var}, {self.obj_var})"


def _class_source(obj):
    cls_var = getattr(obj, "cls_var", None)
    if cls_var is not None:
        return cls_var.source
    return AttrSource(obj.source, "__class__") if obj.source is not None else None


def _class_var(obj):
    cls_var = getattr(obj, "cls_var", None)
    return cls_var if cls_var is not None else UserDefinedClassVariable(obj.python_type(), _class_source(obj))


from .objects import UserDefinedObjectVariable  # noqa: E402,F401  (re-exported: builder, builtin)
