"""Exception objects raised and caught inside the trace (raise, assert, try/except/finally,
`with` blocks left by an exception), and the classes that make them.

An ExceptionVariable is an exception the traced code created (``ValueError("x")``) or that a
modelled operation raises (a dict's KeyError): its class, its arguments (trackers) and the
links CPython keeps between exceptions (``__cause__``, ``__context__``). Where the arguments
are trace-time constants the real exception object is made too (by the class's own C code), and
``str()``, ``repr()`` and attribute reads are answered by it, exactly.

Only classes whose instances are made and printed by builtin code are modelled: the builtin
exceptions and user subclasses that do not define ``__init__``, ``__new__``, ``__str__``,
``__repr__`` or attribute hooks. Raising anything else is refused (a graph break).
"""
from ..exc import ExceptionRaised, Unsupported
from .base import VariableTracker
from .constant import ConstantVariable, is_constant_value
from .user_defined import UserDefinedClassVariable

_BUILTIN_ONLY = ("__new__", "__init__", "__str__", "__repr__", "__getattribute__", "__getattr__",
                 "__setattr__")


def is_plain_exception_class(cls):
    """Instances made, printed and read by builtin code only (see the module docstring)."""
    if not (isinstance(cls, type) and issubclass(cls, BaseException)) or type(cls) is not type:
        return False
    if issubclass(cls, BaseExceptionGroup):
        return False
    for name in _BUILTIN_ONLY:
        owner = next((c for c in cls.__mro__ if name in c.__dict__), object)
        if owner.__module__ != "builtins":
            return False
    return True


class CallerExcInfoVariable(VariableTracker):
    """The exception the compiled function's caller is handling, if any: unknown while tracing."""

    def reconstruct(self, codegen):
        raise Unsupported("the exception being handled by the compiled function's caller")

    def _repr_value(self):
        return "caller's"


CALLER_EXC_INFO = CallerExcInfoVariable()


class ExceptionVariable(VariableTracker):
    """An exception object made in the trace: ``cls(*args)``. ``real`` is the same exception
    made at trace time when the arguments are constants (else None). ``context`` is None,
    another ExceptionVariable or CALLER_EXC_INFO; ``raised`` says whether it was raised in the
    trace (then it has a traceback that cannot be rebuilt). ``origin`` is (step, instruction,
    whether a graph break may happen there) of the top-frame instruction where its current
    propagation entered the top frame (translator.py)."""

    def __init__(self, cls, args, real=None):
        super().__init__(None)
        self.cls, self.args, self.real = cls, list(args), real
        self.exc_type = type(real) if real is not None else cls  # OSError(2, ..) is a FileNotFoundError
        self.cause, self.suppress_context, self.context = None, False, None
        self.raised, self.origin = False, None
        self._args_tuple = None  # e.args: one tuple object, as in Python
        self.by_model = False

    @staticmethod
    def create(cls, args):
        """``cls(*args)`` as Python would make it; Unsupported where that is not modelled."""
        if not is_plain_exception_class(cls):
            raise Unsupported(f"creating an instance of {cls.__qualname__}, an exception class "
                              "with Python-level construction or printing")
        if all(a.is_python_constant() for a in args):
            try:
                real = cls(*[a.as_python_constant() for a in args])
            except Exception as e:
                raise Unsupported(f"{cls.__name__}() raised {type(e).__name__}: {e}") from None
            return ExceptionVariable(cls, args, real)
        if cls.__new__ is not BaseException.__new__ or cls.__init__ is not BaseException.__init__:
            raise Unsupported(f"{cls.__name__}() of values not known while tracing")
        return ExceptionVariable(cls, args)

    @staticmethod
    def from_real(exc):
        """The tracker of ``exc``, an exception Python itself raises (a model computed it)."""
        from .builder import wrap_constant
        if not is_plain_exception_class(type(exc)):
            raise Unsupported(f"{type(exc).__name__}: {exc}")
        args = [wrap_constant(a) for a in exc.args]
        var = ExceptionVariable(type(exc), args, exc)
        var.by_model = True  # what Python's raising code sets besides args (AttributeError.obj...) is not known
        return var

    def python_type(self):
        return self.exc_type

    def truth(self, tx):
        return True

    def describe(self):
        if self.real is not None:
            return repr(self.real)
        return f"{self.exc_type.__name__}({', '.join(map(str, self.args))})"

    def as_string(self, fn):
        """``str(e)`` / ``repr(e)``: the real exception's, where its arguments are constants."""
        if self.real is None:
            raise Unsupported(f"{fn.__name__}() of {self.describe()}, whose arguments are not "
                              "known while tracing")
        return ConstantVariable(fn(self.real))

    def set_context(self, current):
        """What raising this exception while ``current`` is being handled does (CPython's
        _PyErr_SetObject): ``current`` becomes its ``__context__``."""
        if current is None or current is self:
            return
        seen = current
        while isinstance(seen, ExceptionVariable):
            if seen.context is self:
                raise Unsupported("an exception raised inside the handling of its own context")
            seen = seen.context
        self.context = current

    def var_getattr(self, tx, name):
        from .builder import wrap_value
        from .lists import TupleVariable
        if name == "args":  # what the class kept (OSError(2, "x", "f").args is (2, "x"))
            if self._args_tuple is None:
                from .builder import wrap_constant
                self._args_tuple = TupleVariable(self.args if self.real is None else
                                                 [wrap_constant(a) for a in self.real.args])
            return self._args_tuple
        if name == "__cause__":
            return self.cause or ConstantVariable(None)
        if name == "__suppress_context__":
            return ConstantVariable(self.suppress_context)
        if name == "__context__":
            if self.context is CALLER_EXC_INFO:
                raise Unsupported("__context__ of an exception raised while the caller may be "
                                  "handling another")
            return self.context or ConstantVariable(None)
        if name == "__class__":
            return wrap_value(tx, self.exc_type, None)
        if self.real is not None and not self.by_model and name not in ("__traceback__", "__notes__"):
            # attributes the builtin classes define (OSError.errno, StopIteration.value...):
            # set by their C code from the constant arguments. A user class's own attributes
            # could change after the trace: not read.
            owner = next((c for c in self.exc_type.__mro__ if name in c.__dict__), None)
            value = getattr(self.real, name, None)
            if owner is not None and owner.__module__ == "builtins" and is_constant_value(value):
                return ConstantVariable(value)
        raise Unsupported(f"attribute {name!r} of {self.describe()}")

    def reconstruct(self, codegen):
        """``cls(*args)`` with its ``__cause__`` / ``__context__`` set as traced. An exception
        that was raised has a traceback that cannot be rebuilt: refused."""
        if self.raised:
            raise Unsupported(f"{self.describe()}, raised in the trace, used after it (its "
                              "traceback cannot be rebuilt)")
        from .. import bytecode_utils as bu
        codegen.load_function(self.cls)
        for arg in self.args:
            codegen(arg)
        codegen.append_call(len(self.args))
        links = []
        if self.cause is not None:
            links.append(("__cause__", self.cause))
        if self.suppress_context:
            links.append(("__suppress_context__", ConstantVariable(True)))
        if isinstance(self.context, ExceptionVariable):
            links.append(("__context__", self.context))
        for name, value in links:  # exc.name = value, keeping exc on the stack
            codegen.append(bu.create_instruction("COPY", 1))
            codegen(value)
            codegen.append(bu.create_instruction("SWAP", 2))
            codegen.append(bu.create_instruction("STORE_ATTR", name))

    def _repr_value(self):
        return self.describe()


class ExceptionClassVariable(UserDefinedClassVariable):
    """An exception class: calling it makes an ExceptionVariable."""

    def call_function(self, tx, args, kwargs):
        if kwargs:
            raise Unsupported(f"{self.value.__name__}() with keyword arguments")
        return ExceptionVariable.create(self.value, args)


def as_exception(tx, var, what="raise"):
    """What ``raise var`` raises: an instance as is, a class called with no arguments."""
    if isinstance(var, ExceptionVariable):
        return var
    if isinstance(var, ExceptionClassVariable):
        return var.call_function(tx, [], {})
    raise Unsupported(f"{what} of {var}, which is not a modelled exception")


def raise_exception(exc):
    """Make the trace raise ``exc``, an exception object Python itself raises at this point
    (computed by running the real operation on trace-time constants)."""
    raise ExceptionRaised(ExceptionVariable.from_real(exc)) from None


def exception_matches(exc, spec):
    """``except spec`` catching ``exc`` (CHECK_EXC_MATCH: PyErr_GivenExceptionMatches, which
    compares by the MRO, not by __subclasscheck__)."""
    classes = spec if isinstance(spec, tuple) else (spec,)
    for cls in classes:
        if not (isinstance(cls, type) and issubclass(cls, BaseException)):
            raise Unsupported(f"TypeError: catching {cls!r}, which is not an exception class")
    return any(cls in exc.python_type().__mro__ for cls in classes)
