"""Class statements inside compiled code: ``LOAD_BUILD_CLASS`` and ``__build_class__``.

``class A(Base): body`` calls ``__build_class__(body_fn, "A", Base)``: CPython runs the body
function with a fresh namespace (its ``STORE_NAME`` / ``LOAD_NAME`` read and write that mapping,
then the globals and builtins), then calls the metaclass with ``(name, bases, namespace)``, which
runs ``__set_name__`` of the namespace's values and ``__init_subclass__`` of the bases.

The trace runs the body like any inlined function, with its namespace held by the translator
(``namespace``), then makes the class for real, while tracing, from the namespace's values made
real: constants, objects read from the inputs, and the body's functions (a real function of the
same code, globals and defaults; its only closure cell may be the body's ``__class__`` cell,
which ``type.__new__`` fills). Making the class runs no code of the user's: the metaclass must
be ``type`` or ``abc.ABCMeta``, no base class may define ``__init_subclass__`` (guarded), and no
value may have a ``__set_name__``. ``dataclasses.dataclass`` applied to such a class is made
for real too (it only adds methods to the class), as is ``dataclasses.field`` of constants.

The generated code never makes the class: eager execution makes a new class at each call, so
the class, its functions and the instances of it made in the trace are values of this trace
only. Rebuilding one at run time (returned, stored outside the frame, alive at a graph break) is
refused (``base.MADE_IN_TRACE``); the tensors computed with them are the trace's results.
"""
import abc
import dataclasses
import types

from ..exc import Unsupported
from .base import MADE_IN_TRACE, CellVariable, ObjectVariable, VariableTracker
from .user_defined import UserDefinedClassVariable

_METACLASSES = (type, abc.ABCMeta)


class BuildClassVariable(VariableTracker):
    """``builtins.__build_class__``, pushed by LOAD_BUILD_CLASS."""

    def __init__(self):
        super().__init__(None)

    def call_function(self, tx, args, kwargs):
        return build_class(tx, args, kwargs)


class ClassNamespaceVariable(VariableTracker):
    """The namespace of the class body being run (LOAD_LOCALS, 3.12+)."""

    def __init__(self, namespace):
        super().__init__(None)
        self.namespace = namespace


def build_class(tx, args, kwargs):
    from .functions import NestedUserFunctionVariable
    if len(args) < 2 or not isinstance(args[0], NestedUserFunctionVariable):
        raise Unsupported("__build_class__ called other than by a class statement")
    body, name_var, base_vars = args[0], args[1], args[2:]
    if kwargs:
        raise Unsupported(f"a class statement with keywords ({', '.join(kwargs)}): a metaclass "
                          "or __init_subclass__ arguments")
    name = name_var.as_python_constant()
    bases = []
    for b in base_vars:
        if not isinstance(b, UserDefinedClassVariable):
            raise Unsupported(f"a class statement with base {b} (only classes are modelled)")
        bases.append(b.value)
    meta = type
    for b in bases:
        if issubclass(type(b), meta):
            meta = type(b)
        elif not issubclass(meta, type(b)):
            raise Unsupported("TypeError: metaclass conflict in a class statement")
    if meta not in _METACLASSES:
        raise Unsupported(f"a class statement whose metaclass is {meta.__qualname__} (its code "
                          "would run while tracing)")
    for b in base_vars:
        _refuse_init_subclass(tx, b)
    namespace = {}
    body_result = tx.inline_call(body.code, body.f_globals, body.globals_source, {},
                                 dict(zip(body.code.co_freevars, body.closure)), body.code.co_qualname,
                                 namespace=namespace)
    cells = {}
    real_ns = {key: _real(tx, value, cells) for key, value in namespace.items()}
    for key, value in real_ns.items():
        if _runs_python_set_name(value):
            raise Unsupported(f"{name}.{key}: a {type(value).__qualname__}, whose __set_name__ "
                              "would run while tracing")
    if isinstance(body_result, CellVariable) and namespace.get("__classcell__") is not body_result:
        raise Unsupported("a class body returning a cell it did not store")
    try:
        cls = meta(name, tuple(bases), real_ns)
    except Exception as e:  # noqa: BLE001 - what the class statement raises
        raise Unsupported(f"class {name}: {type(e).__name__}: {e}") from None
    for cell_var, real_cell in cells.items():
        if cell_var is body_result:  # __class__, which type.__new__ filled
            cell_var.contents = MadeClassVariable(cls)
        elif cell_var.real_cell is None:
            _register_cell(tx, real_cell, cell_var)
    MADE_IN_TRACE.add(cls)
    return MadeClassVariable(cls)


def _register_cell(tx, real_cell, cell_var):
    """The real stand-in cell is that tracker wherever the trace meets it (kept alive: its id)."""
    tx.output.closure_cells[id(real_cell)] = cell_var
    tx.output.__dict__.setdefault("made_cells", []).append(real_cell)


def _runs_python_set_name(value):
    """``type(value).__set_name__`` is Python code (a builtin's, such as property's, only names
    the descriptor); a dataclass Field's passes the call on to its default's."""
    from ..source import type_lookup
    if type(value) is dataclasses.Field:
        return _runs_python_set_name(value.default)
    return isinstance(type_lookup(type(value), "__set_name__"), types.FunctionType)


def _refuse_init_subclass(tx, base_var):
    from .descriptors import type_lookup
    attr, _ = type_lookup(tx, base_var, "__init_subclass__")
    if attr is not object.__dict__["__init_subclass__"]:
        raise Unsupported(f"a class statement with base {base_var.value.__qualname__}, which "
                          "defines __init_subclass__ (its code would run while tracing)")


def _real(tx, var, cells):
    """The real object ``var`` stands for in the class's namespace; ``cells`` collects the body's
    ``__class__`` cell (a tracker) with the real cell that stands for it."""
    from .functions import NestedUserFunctionVariable
    if isinstance(var, CellVariable):
        return cells.setdefault(var, types.CellType())
    if isinstance(var, NestedUserFunctionVariable):
        return _real_function(tx, var, cells)
    if isinstance(var, DescriptorOfFunctionVariable):
        return var.real(tx, cells)
    if isinstance(var, (MadeClassVariable, MadeObjectVariable)):
        return var.value
    from .objects import UserDefinedObjectVariable
    if isinstance(var, UserDefinedObjectVariable) and var.source is not None and not var.is_new:
        if var.attrs or var.slots:
            raise Unsupported(f"{var}, changed by the trace, as a class attribute")
        tx.output.guards.ID_MATCH(var.source, var.value)  # that very object
        return var.value
    if not var.is_python_constant():
        raise Unsupported(f"{var} as a class attribute (only constants, functions and objects "
                          "read from the inputs are modelled)")
    return var.as_python_constant()


def _real_function(tx, var, cells):
    """A real function for a method made in the class body. Its closure cells are stand-ins:
    each is registered as the trace's cell (functions.closure_cell), so when the trace calls
    the method, its reads and stores are those of the enclosing function's cell."""
    if any(v is None or not v.is_python_constant() for v in var.attrs.values()):
        raise Unsupported(f"{var.code.co_qualname}, given attributes by functools.wraps, as a method")
    closure = []
    for cell in var.closure:
        if not isinstance(cell, CellVariable):
            raise Unsupported(f"method {var.code.co_qualname}: a closure of {cell}")
        closure.append(cells.setdefault(cell, cell.real_cell or types.CellType()))
    defaults = tuple(_constant(d, var) for d in var.defaults) or None
    fn = types.FunctionType(var.code, var.f_globals, var.code.co_name, defaults, tuple(closure) or None)
    if var.kwdefaults:
        fn.__kwdefaults__ = {k: _constant(v, var) for k, v in var.kwdefaults.items()}
    if var.annotations is not None:
        fn.__annotations__ = _constant(var.annotations, var)
    fn.__qualname__ = var.code.co_qualname
    for name, value in var.attrs.items():
        setattr(fn, name, value.as_python_constant())
    MADE_IN_TRACE.add(fn)
    return fn


class DescriptorOfFunctionVariable(VariableTracker):
    """``staticmethod(f)``, ``classmethod(f)``, ``property(fget, fset, fdel)`` of functions made
    in a class body (and ``prop.setter(f)``...): made real with the class."""

    def __init__(self, kind, fns):
        super().__init__(None)
        self.kind, self.fns = kind, fns  # fns: trackers (or None), the descriptor's arguments

    def python_type(self):
        return self.kind

    def call_method(self, tx, name, args, kwargs):
        if self.kind is property and name in ("getter", "setter", "deleter") and len(args) == 1 \
                and not kwargs:
            fns = list(self.fns)
            fns[("getter", "setter", "deleter").index(name)] = args[0]
            return DescriptorOfFunctionVariable(property, fns)
        raise Unsupported(f"{self.kind.__name__}.{name} of a method in a class body")

    def real(self, tx, cells):
        fns = [None if f is None or (f.is_python_constant() and f.as_python_constant() is None)
               else _real(tx, f, cells) for f in self.fns]
        return self.kind(*fns)

    def reconstruct(self, codegen):
        raise Unsupported(f"{self.kind.__name__} of a function made in a class body, outside it")


def wrap_descriptor(tx, cls, args, kwargs):
    """``staticmethod(f)`` / ``classmethod(f)`` / ``property(...)`` in a class body, or None."""
    from .functions import NestedUserFunctionVariable
    if getattr(tx, "namespace", None) is None or kwargs:
        return None
    most = 1 if cls is not property else 3
    if not 1 <= len(args) <= most or not isinstance(args[0], NestedUserFunctionVariable):
        return None
    return DescriptorOfFunctionVariable(cls, list(args) + [None] * (most - len(args)))


def _constant(v, fn_var):
    if not v.is_python_constant():
        raise Unsupported(f"a default or annotation of {fn_var.code.co_qualname} that is not a constant")
    return v.as_python_constant()


def made(cls):
    MADE_IN_TRACE.add(cls)
    return MadeClassVariable(cls)


class MadeClassVariable(UserDefinedClassVariable):
    """A class a class statement of the trace made (see the module's docstring). Its own
    attributes are the trace's; those found on its bases are guarded there."""

    def var_getattr(self, tx, name):
        from .descriptors import guarded_mro_lookup
        guarded_mro_lookup(tx, self.value.__mro__, name)
        guarded_mro_lookup(tx, type(self.value).__mro__, name)  # the metaclass's (type's: no guard)
        return super().var_getattr(tx, name)

    def reconstruct(self, codegen):
        raise Unsupported(f"the class {self.value.__qualname__}, made by a class statement in "
                          "compiled code, outlives the trace (eager execution makes a new one "
                          "at each call)")


class MadeObjectVariable(ObjectVariable):
    """An object made for real while tracing (a dataclass Field): not rebuilt at run time."""

    def reconstruct(self, codegen):
        raise Unsupported(f"{self}, made while tracing a class statement, outlives the trace")


# ---- dataclasses --------------------------------------------------------------------------

class DataclassVariable(ObjectVariable):
    """``dataclasses.dataclass`` (or the decorator it returns for keyword options): applied now
    to a class made in the trace; any other class is decorated as the inlined code does."""

    def __init__(self, value, source=None, options=None):
        super().__init__(value, source)
        self.options = options

    def call_function(self, tx, args, kwargs):
        from .functions import UserFunctionVariable
        if self.options is None and not args:  # @dataclass(frozen=True): the decorator
            options = {k: _option(v) for k, v in kwargs.items()}
            return DataclassVariable(self.value, None, options)
        options = dict(self.options or {})
        if self.options is None:
            options.update({k: _option(v) for k, v in kwargs.items()})
        if len(args) == 1 and isinstance(args[0], MadeClassVariable):
            try:
                cls = dataclasses.dataclass(args[0].value, **options)
            except Exception as e:  # noqa: BLE001 - raised by the decorator
                raise Unsupported(f"dataclasses.dataclass: {type(e).__name__}: {e}") from None
            for value in vars(cls).values():
                if isinstance(value, types.FunctionType):
                    MADE_IN_TRACE.add(value)
            return made(cls)
        if self.options is not None:
            raise Unsupported("a dataclass decorator with options applied to a class not made in the trace")
        return UserFunctionVariable(self.value, self.source).call_function(tx, args, kwargs)


def _option(v):
    if not v.is_python_constant():
        raise Unsupported("dataclasses.dataclass() with an option that is not a constant")
    return v.as_python_constant()


class FieldVariable(ObjectVariable):
    """``dataclasses.field(...)`` of constants: the Field object, made now."""

    def call_function(self, tx, args, kwargs):
        if args or not all(v.is_python_constant() for v in kwargs.values()):
            raise Unsupported("dataclasses.field() with arguments that are not constant keywords")
        try:
            field = dataclasses.field(**{k: v.as_python_constant() for k, v in kwargs.items()})
        except Exception as e:  # noqa: BLE001 - raised by field()
            raise Unsupported(f"dataclasses.field: {type(e).__name__}: {e}") from None
        return MadeObjectVariable(field)
