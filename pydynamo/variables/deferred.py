"""Calls whose only effect is outside the program's values: logging and warnings.

``logger.warning(...)``, ``logging.info(...)``, ``warnings.warn(...)`` (and helpers such as
transformers' ``logger.warning_once``) do not break the graph: the call is recorded with its
arguments and replayed by the generated code, in order with the other side effects, after the
graph runs (at a graph break, before the instruction that runs natively). The replay calls the
real function, so handlers, filters, levels, ``once`` registries and lru caches decide at run
time exactly as in eager execution; it runs with the hook off, like the library code it is
(a handler's code is not compiled).

What the call sees must be what it would have seen when the program made it:

* its arguments: constants (snapshotted when the call is traced) or tensors (graph values), a
  tensor only if nothing changes it in place after the call (its fake tensor's version counter);
  ``exc_info`` and ``stack_info`` are refused (they read the exception and stack of the moment);
* where it is: logging records the caller's file, line and function, warnings attribute a
  warning to the frame ``stacklevel`` levels up (and keep their ``once`` registry in its
  globals). A call traced inside inlined functions is replayed through small trampoline
  functions compiled with each inlined frame's file, line, name and globals, so those frames
  look as they did; a ``stacklevel`` reaching above the compiled frame is refused.
"""
import functools
import logging
import types
import warnings

from .. import bytecode_utils as bu
from ..exc import Unsupported
from .base import GetAttrVariable, ObjectVariable
from .constant import ConstantVariable

# logging.Logger methods that only emit a record (exception() reads sys.exc_info(): refused)
_LOGGER_METHODS = ("debug", "info", "warning", "warn", "error", "critical", "fatal", "log")
# helpers libraries add to logging.Logger as lru_cache'd functions (transformers)
_ONCE_METHODS = ("warning_once", "info_once")
_FUNCTIONS = (warnings.warn, logging.debug, logging.info, logging.warning, logging.warn,
              logging.error, logging.critical, logging.fatal, logging.log)


def is_deferred_function(value):
    return any(value is f for f in _FUNCTIONS)


class DeferredFunctionVariable(ObjectVariable):
    """``warnings.warn`` or a logging module function: calls are recorded, not traced."""

    def call_function(self, tx, args, kwargs):
        return record_call(tx, self, self.value, args, kwargs)


class GetLoggerVariable(ObjectVariable):
    """``logging.getLogger(name)``: answered now with the real logger (creating it, as the call
    would: loggers live in logging's registry for the whole process), guarded to be what the
    same call returns at each later call (the registry entry is not replaced)."""

    def call_function(self, tx, args, kwargs):
        if kwargs or len(args) > 1 or not all(a.is_python_constant() for a in args):
            raise Unsupported("logging.getLogger() with a name that is not a constant")
        name = args[0].as_python_constant() if args else None
        if name is not None and type(name) is not str:
            raise Unsupported(f"TypeError: A logger name must be a string (got {type(name).__name__})")
        logger = logging.getLogger(name)
        tx.output.guards.PREDICATE(None, _GetLoggerIs(name, logger),
                                   f"logging.getLogger({name!r}) is {logger.name!r}")
        from ..source import ConstObjectSource
        return LoggerVariable(logger, ConstObjectSource(logger))


class _GetLoggerIs:
    """A guard: ``logging.getLogger(name)`` still returns ``logger``."""

    def __init__(self, name, logger):
        self.name, self.logger = name, logger

    def __call__(self):
        return logging.getLogger(self.name) is self.logger


class LoggerVariable(ObjectVariable):
    """A ``logging.Logger`` (guarded by identity): its emitting methods are recorded;
    ``isEnabledFor`` / ``getEffectiveLevel`` are answered now and guarded to stay the same."""

    def _method(self, tx, name):
        """The class attribute ``name`` (guarded), which the instance must not shadow."""
        from ..source import AttrSource, GetItemSource
        if name in vars(self.value):
            raise Unsupported(f"logger.{name} is set on the logger object itself")
        method = getattr(type(self.value), name, None)
        if self.source is not None:
            tx.output.guards.NOT_PRESENT(GetItemSource(AttrSource(self.source, "__dict__"), name))
            tx.output.guards.ID_MATCH(AttrSource(AttrSource(self.source, "__class__"), name), method)
        return method

    def var_getattr(self, tx, name):
        method = self._method(tx, name)
        standard = name in _LOGGER_METHODS and method is getattr(logging.Logger, name)
        once = name in _ONCE_METHODS and isinstance(method, functools._lru_cache_wrapper)
        if standard or once or name in ("isEnabledFor", "getEffectiveLevel"):
            return GetAttrVariable(self, name)
        raise Unsupported(f"logger.{name} is not modelled (only emitting a record is)")

    def call_method(self, tx, name, args, kwargs):
        if name in ("isEnabledFor", "getEffectiveLevel"):
            if self._method(tx, name) is not getattr(logging.Logger, name):
                raise Unsupported(f"a logger class with its own {name}")
            cargs = [a.as_python_constant() for a in args]
            if kwargs or len(cargs) != (name == "isEnabledFor") or not all(type(a) is int for a in cargs):
                raise Unsupported(f"logger.{name} with these arguments")
            value = getattr(self.value, name)(*cargs)
            what = f"{self.source.name() if self.source else 'logger'}.{name}{tuple(cargs)!r}"
            tx.output.guards.PREDICATE(None, _LoggerSays(self.value, name, cargs, value),
                                       f"{what} == {value!r}")
            return ConstantVariable(value)
        self.var_getattr(tx, name)
        return record_call(tx, GetAttrVariable(self, name), getattr(self.value, name), args, kwargs)

    def _repr_value(self):
        return f"logger {self.value.name!r}"


class _LoggerSays:
    """A guard: ``logger.<name>(*args)`` still answers ``value`` (levels are global state).
    (Loggers live in logging's registry for the whole process: holding one keeps nothing alive.)"""

    def __init__(self, logger, name, args, value):
        self.logger, self.name, self.args, self.value = logger, name, args, value

    def __call__(self):
        return getattr(self.logger, self.name)(*self.args) == self.value


def record_call(tx, fn_var, fn, args, kwargs):
    """Record ``fn(*args, **kwargs)`` (``fn_var`` rebuilds ``fn`` at run time) for replay. The
    call form is checked now: a call that raises must raise here, not after the graph ran."""
    if fn is warnings.warn:
        from .catch_warnings import filters_changed_in_block
        if filters_changed_in_block(tx):
            raise Unsupported("warnings.warn() in a warnings.catch_warnings() block that changed "
                              "the filters (the call is replayed after the graph, under the frame's)")
    _check_form(tx, fn, args, kwargs)
    frames = _inlined_frames(tx)
    stacklevel = _stacklevel(fn, args, kwargs)
    if stacklevel > len(frames) + 1:
        raise Unsupported(f"{_name(fn)}(stacklevel={stacklevel}) attributes the call to a "
                          "frame outside the compiled one")
    for key in ("exc_info", "stack_info"):
        if key in kwargs and not (kwargs[key].is_python_constant() and not kwargs[key].as_python_constant()):
            raise Unsupported(f"{_name(fn)}({key}=...) reads the state of the moment it is called")
    top = tx
    while getattr(top, "parent", None) is not None:
        top = top.parent
    call = DeferredCall(fn_var, [_snapshot(a) for a in args],
                        {k: _snapshot(v) for k, v in kwargs.items()}, frames, top.current.lineno)
    tx.output.side_effects.record_call(call)
    return ConstantVariable(None)


def _warn(message, category=None, stacklevel=1, source=None, *, skip_file_prefixes=()):
    """warnings.warn's parameters (3.12's; 3.11 has no skip_file_prefixes)."""


def _check_not_an_error(tx, text, category):
    """A warning the filters turn into an exception must raise where it is made, not after the
    graph: refused if a filter with the "error" action could match it; the filters are guarded
    to stay the same."""
    filters = (warnings.defaultaction, tuple(warnings.filters))
    for action, message, cls, _module, _lineno in warnings.filters:
        if action == "error" and issubclass(category, cls) and (message is None or message.match(text)):
            raise Unsupported("warnings.warn() of a warning the filters make an error")
    if warnings.defaultaction == "error":
        raise Unsupported("warnings.warn() of a warning the filters make an error")
    tx.output.guards.PREDICATE(None, _FiltersAre(filters), "the warnings filters are as traced")


class _FiltersAre:
    def __init__(self, filters):
        self.filters = filters

    def __call__(self):
        return (warnings.defaultaction, tuple(warnings.filters)) == self.filters


def _check_form(tx, fn, args, kwargs):
    import inspect
    import sys
    sig = inspect.signature(_warn if fn is warnings.warn else fn)
    try:
        bound = sig.bind(*args, **kwargs)
    except TypeError as e:
        raise Unsupported(f"TypeError: {_name(fn)}(): {e}") from None
    given = bound.arguments
    if fn is warnings.warn:
        if "skip_file_prefixes" in given and sys.version_info < (3, 12):
            raise Unsupported("TypeError: warn() got an unexpected keyword argument 'skip_file_prefixes'")
        category = given.get("category")
        cls = category.as_python_constant() if category is not None else None
        if not (cls is None or (isinstance(cls, type) and issubclass(cls, Warning))):
            raise Unsupported("TypeError: warn(): category must be a Warning subclass")
        if not given["message"].is_python_constant() or "source" in given:
            raise Unsupported("warn() of a message that is not a constant, or with a source")
        _check_not_an_error(tx, str(given["message"].as_python_constant()), cls or UserWarning)
    elif "level" in given:  # Logger.log / logging.log
        level = given["level"]
        if not (level.is_python_constant() and isinstance(level.as_python_constant(), int)):
            raise Unsupported("logging.log() with a level that is not a constant int")


def _name(fn):
    return getattr(fn, "__qualname__", None) or getattr(fn, "__name__", repr(fn))


def _stacklevel(fn, args, kwargs):
    if fn is warnings.warn:
        level = kwargs.get("stacklevel", args[2] if len(args) > 2 else None)
    else:
        level = kwargs.get("stacklevel")
    if level is None:
        return 1
    if not level.is_python_constant() or type(level.as_python_constant()) is not int:
        raise Unsupported("a stacklevel that is not a constant int")
    return max(level.as_python_constant(), 1)


def _snapshot(var):
    """The argument as the call sees it now: a constant, copied (a list changed later must not
    change the message), or a tensor, checked at replay time to be unchanged since."""
    from .tensor import TensorVariable
    from .builder import wrap_constant
    if isinstance(var, TensorVariable):
        return var
    if isinstance(var, ObjectVariable):
        return var  # a class (a warning category), a function: rebuilt from where it was read
    if var.is_python_constant():
        value = var.as_python_constant()
        if type(value) in (set, frozenset):
            raise Unsupported("a set as an argument of a logging or warnings call")
        if isinstance(var, ConstantVariable):
            return var
        return wrap_constant(value)
    raise Unsupported(f"{var} as an argument of a logging or warnings call (only constants, "
                      "tensors and classes are replayed)")


def _inlined_frames(tx):
    """(code, line, globals) of each inlined frame from the top frame's callee to ``tx``;
    polyfills stand for C functions, which have no frame."""
    from .. import polyfills
    frames = []
    while getattr(tx, "parent", None) is not None:
        if bu.is_generator(tx.code):
            raise Unsupported("a logging or warnings call inside a generator")
        if tx.f_globals is not vars(polyfills):
            frames.append((tx.code, tx.current.lineno or tx.code.co_firstlineno, tx.f_globals))
        tx = tx.parent
    return frames[::-1]


class DeferredCall:
    def __init__(self, fn_var, args, kwargs, frames, lineno):
        from .dicts import DictVariable
        from .lists import TupleVariable
        from .tensor import TensorVariable
        self.frames, self.lineno = frames, lineno  # the top frame's line of the call
        # what the generated code builds first: (function, args, kwargs)
        self.values = TupleVariable([fn_var, TupleVariable(args), DictVariable(kwargs)])
        self.tensors = [(v, v.example_value._version) for v in [*args, *kwargs.values()]
                        if isinstance(v, TensorVariable)]

    def codegen_replay(self, codegen, temp):
        """``fn(*args, **kwargs)`` from ``temp`` = (fn, args, kwargs), through one trampoline
        per inlined frame: ``t1(t2, (t3, (fn, args, kwargs), {}), {})``..."""
        if any(v.example_value._version != version for v, version in self.tensors):
            raise Unsupported("a tensor given to a logging or warnings call is changed in place "
                              "after the call")
        from .. import _C
        trampolines = [_trampoline(*frame) for frame in self.frames]
        start = len(codegen.instructions)

        def part(i):
            codegen.load_local(temp)
            codegen.load_const(i)
            codegen.append(bu.create_binary_subscr())

        def no_hook_fn():
            codegen.load_function(_C.NoHookCall)
            part(0)
            codegen.append_call(1)
        if not trampolines:  # NoHookCall(fn)(*args, **kwargs)
            codegen.append_callable(no_hook_fn)
            part(1)
            part(2)
        else:
            codegen.load_function(_C.NoHookCall(trampolines[0]))
            for t in trampolines[1:]:
                codegen.load_const(t)
            codegen.load_local(temp)
            for _ in trampolines[1:]:
                codegen.append(bu.create_instruction("BUILD_MAP", 0))
                codegen.append(bu.create_instruction("BUILD_TUPLE", 3))
            codegen.append(bu.create_instruction("BUILD_MAP", 0))
        codegen.append(bu.create_instruction("CALL_FUNCTION_EX", 1))
        codegen.append_pop_top()
        for inst in codegen.instructions[start:]:
            inst.lineno = self.lineno


def _trampoline(code, lineno, f_globals):
    """``def <code's name>(fn, args, kwargs): return fn(*args, **kwargs)``, compiled so that
    its frame has ``code``'s file and name, the line ``lineno`` and the globals ``f_globals``."""
    source = "\n" * (lineno - 1) + "def _(fn, args, kwargs): return fn(*args, **kwargs)\n"
    module = compile(source, code.co_filename, "exec")
    body = next(c for c in module.co_consts if isinstance(c, types.CodeType))
    body = body.replace(co_name=code.co_name, co_qualname=code.co_qualname)
    from .. import _C
    _C.mark_skip(body)  # never compiled: it only stands for a frame that was traced
    return types.FunctionType(body, f_globals, code.co_name)
