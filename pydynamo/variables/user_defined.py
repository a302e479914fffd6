"""Python modules, classes, and instances of user classes (read-only: attribute reads are
guarded one by one; methods are inlined)."""
import inspect
import types

from ..exc import UnmodelledCallError, Unsupported
from ..source import AttrSource, GetItemSource
from .base import ObjectVariable, VariableTracker

_MISSING = object()


def lookup_class_attr(tx, obj_var, cls, name, src):
    """``obj.name`` found on the class: methods bind to ``obj_var``, properties run inlined.

    ``src`` is the source of ``obj.name``; methods are guarded by identity of their function.
    """
    from .builder import wrap_value
    from .functions import UserFunctionVariable, UserMethodVariable
    attr = inspect.getattr_static(cls, name, _MISSING)
    if attr is _MISSING:
        return _MISSING
    if isinstance(attr, types.FunctionType):
        fn_src = AttrSource(src, "__func__") if src is not None else None
        if fn_src is not None:
            tx.output.guards.ID_MATCH(fn_src, attr)
        return UserMethodVariable(attr, obj_var, fn_src)
    if isinstance(attr, staticmethod):
        return wrap_value(tx, attr.__func__, src)
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
        from .builder import wrap_value
        if not hasattr(self.value, name):
            raise Unsupported(f"module {self.value.__name__} has no attribute {name!r}")
        return wrap_value(tx, getattr(self.value, name), self.attr_source(name))

    def _repr_value(self):
        return self.value.__name__


class UserDefinedClassVariable(ObjectVariable):
    def var_getattr(self, tx, name):
        from .builder import wrap_value
        attr = inspect.getattr_static(self.value, name, _MISSING)
        if attr is _MISSING:
            raise Unsupported(f"class {self.value.__name__} has no attribute {name!r}")
        if isinstance(attr, (classmethod, property)):
            raise Unsupported(f"{type(attr).__name__} {self.value.__name__}.{name}")
        return wrap_value(tx, getattr(self.value, name), self.attr_source(name))

    def call_function(self, tx, args, kwargs):
        cls = self.value
        if _is_namedtuple_class(cls):
            return _make_namedtuple(tx, cls, args, kwargs)
        raise Unsupported(f"creating an instance of {cls.__qualname__} while tracing")

    def _repr_value(self):
        return self.value.__qualname__


def _is_namedtuple_class(cls):
    """A namedtuple class or a subclass that keeps its construction (the generated __new__,
    no __init__) and gives its instances no attributes of their own."""
    if not (isinstance(cls, type) and issubclass(cls, tuple) and hasattr(cls, "_fields")):
        return False
    maker = next((c for c in cls.__mro__ if "_fields" in vars(c)), None)
    return maker is not None and cls.__new__ is maker.__new__ and cls.__init__ is object.__init__ \
        and not cls.__dictoffset__


def _make_namedtuple(tx, cls, args, kwargs):
    import inspect
    from .builder import wrap_constant
    from .lists import TupleVariable
    try:
        bound = inspect.signature(cls.__new__).bind(None, *args, **kwargs)
    except TypeError as e:
        raise Unsupported(f"TypeError: {cls.__name__}(): {e}") from None
    bound.apply_defaults()
    values = list(bound.arguments.values())[1:]
    items = [v if isinstance(v, VariableTracker) else wrap_constant(v) for v in values]
    return TupleVariable(items, tuple_cls=cls)


class UserDefinedObjectVariable(VariableTracker):
    """An instance of a user class; guarded by TYPE_MATCH plus each attribute read."""

    def __init__(self, value, source=None):
        super().__init__(source)
        self.value = value

    def python_type(self):
        return type(self.value)

    def _check_plain(self):
        cls = type(self.value)
        if cls.__getattribute__ is not object.__getattribute__ or hasattr(cls, "__getattr__"):
            raise Unsupported(f"{cls.__qualname__} customizes attribute access")

    def truth(self, tx):
        cls = type(self.value)
        if hasattr(cls, "__bool__") or hasattr(cls, "__len__"):
            raise Unsupported(f"truth value of a {cls.__qualname__} (it defines __bool__/__len__)")
        return True

    def has_attr(self, tx, name):
        from .base import guarded_hasattr
        self._check_plain()
        return guarded_hasattr(tx, self.value, self.source, name)

    def var_getattr(self, tx, name):
        from .builder import wrap_value
        self._check_plain()
        src = AttrSource(self.source, name) if self.source is not None else None
        inst_dict = getattr(self.value, "__dict__", {})
        if name not in inst_dict:
            found = lookup_class_attr(tx, self, type(self.value), name, src)
            if found is _MISSING:
                raise Unsupported(f"{type(self.value).__qualname__} has no attribute {name!r}")
            if found is not _MISSING_VALUE:
                return found
        return wrap_value(tx, getattr(self.value, name), src)

    def call_method(self, tx, name, args, kwargs):
        cls = type(self.value)
        if name.startswith("__") and not isinstance(getattr(cls, name, None), types.FunctionType):
            raise Unsupported(f"{cls.__qualname__}.{name} is not a Python method")
        return self.var_getattr(tx, name).call_function(tx, args, kwargs)

    def call_function(self, tx, args, kwargs):
        if not isinstance(getattr(type(self.value), "__call__", None), types.FunctionType):
            what = getattr(self.value, "__qualname__", None) or type(self.value).__qualname__
            module = getattr(self.value, "__module__", None) or type(self.value).__module__
            raise UnmodelledCallError(f"call to {module}.{what}, a C or library function "
                                      "pydynamo does not model")
        return self.call_method(tx, "__call__", args, kwargs)

    def _repr_value(self):
        return type(self.value).__qualname__


class SuperVariable(VariableTracker):
    """``super(cls, obj)``: attributes are looked up in ``type(obj).__mro__`` after ``cls``.

    A method found there binds to ``obj`` and is inlined like any method; it is guarded by the
    identity of the function in that class's ``__dict__``, read through ``type(obj).__mro__``.
    """

    def __init__(self, cls_var, obj_var):
        super().__init__(None)
        self.cls_var, self.obj_var = cls_var, obj_var

    def python_type(self):
        return super

    def var_getattr(self, tx, name):
        from .functions import UserMethodVariable
        cls = self.cls_var.as_python_constant()
        mro = self.obj_var.python_type().__mro__
        if cls not in mro:
            raise Unsupported(f"super({cls.__name__}, obj): obj is not an instance of {cls.__name__}")
        for i, klass in enumerate(mro[mro.index(cls) + 1:], mro.index(cls) + 1):
            if name not in klass.__dict__:
                continue
            attr = klass.__dict__[name]
            if not isinstance(attr, types.FunctionType):
                raise Unsupported(f"super().{name} is a {type(attr).__name__}, not a method")
            src = None
            if self.obj_var.source is not None:
                mro_src = AttrSource(AttrSource(self.obj_var.source, "__class__"), "__mro__")
                src = GetItemSource(AttrSource(GetItemSource(mro_src, i), "__dict__"), name)
                tx.output.guards.ID_MATCH(src, attr)
            return UserMethodVariable(attr, self.obj_var, src)
        raise Unsupported(f"super() of {cls.__name__} has no attribute {name!r}")

    def _repr_value(self):
        return f"super({self.cls_var}, {self.obj_var})"
