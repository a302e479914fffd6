"""User functions, methods and closures: calling one inlines its bytecode into the same graph."""
import types

from .. import bytecode_utils as bu
from ..exc import DisabledFunctionError, Unsupported
from ..source import AttrSource, GetItemSource, GlobalSource, cell_contents_source, function_global_source
from .base import CellVariable, ObjectVariable, VariableTracker
from .dicts import DictVariable
from .lists import TupleVariable


def bind_args(code, args, kwargs, default_at, kwdefault_for):
    """Map call arguments to ``code``'s argument names as CPython would.

    ``default_at(i)`` gives the tracker of positional default ``i`` (counted from the end of the
    positional parameters), ``kwdefault_for(name)`` that of a keyword-only default, or None.
    """
    nargs, nkw = code.co_argcount, code.co_kwonlyargcount
    names = code.co_varnames
    pos_names, kwonly = names[:nargs], names[nargs:nargs + nkw]
    i = nargs + nkw
    varargs = varkw = None
    if code.co_flags & bu.VARARGS_FLAG:
        varargs, i = names[i], i + 1
    if code.co_flags & bu.VARKEYWORDS_FLAG:
        varkw = names[i]
    fname = code.co_name
    bound = dict(zip(pos_names, args))
    if len(args) > nargs and varargs is None:
        raise Unsupported(f"TypeError: {fname}() takes {nargs} positional arguments "
                          f"but {len(args)} were given")
    if varargs is not None:
        bound[varargs] = TupleVariable(args[nargs:])
    extra = {}
    for key, value in kwargs.items():
        if key in pos_names[code.co_posonlyargcount:] or key in kwonly:
            if key in bound:
                raise Unsupported(f"TypeError: {fname}() got multiple values for {key!r}")
            bound[key] = value
        elif varkw is not None:
            extra[key] = value
        else:
            raise Unsupported(f"TypeError: {fname}() got an unexpected keyword argument {key!r}")
    if varkw is not None:
        bound[varkw] = DictVariable(extra)
    for j, name in enumerate(pos_names):
        if name not in bound:
            default = default_at(j - nargs)
            if default is None:
                raise Unsupported(f"TypeError: {fname}() missing argument {name!r}")
            bound[name] = default
    for name in kwonly:
        if name not in bound:
            default = kwdefault_for(name)
            if default is None:
                raise Unsupported(f"TypeError: {fname}() missing keyword argument {name!r}")
            bound[name] = default
    return bound


def is_trusted_globals(fn_globals):
    """Globals of torch's own modules: read without guards (we assume torch is not patched)."""
    name = fn_globals.get("__name__", "")
    return name == "torch" or name.startswith("torch.")


def globals_source_fn(tx, fn_globals, fn_source):
    """How an inlined function's globals are named in guards; None means unguarded (torch)."""
    if fn_globals is tx.root_globals():
        return GlobalSource
    if is_trusted_globals(fn_globals):
        return None
    if fn_source is not None:
        return lambda name: function_global_source(fn_source, name)
    raise Unsupported("call of a function from another module whose origin is unknown")


class UserFunctionVariable(ObjectVariable):
    def python_type(self):
        return types.FunctionType

    def var_getattr(self, tx, name):
        from .builder import wrap_value
        src = self.attr_source(name)
        if name in ("__name__", "__qualname__", "__module__", "__doc__", "__class__"):
            return wrap_value(tx, getattr(self.value, name), src)
        if name == "__code__":  # libraries read co_varnames / co_argcount to inspect signatures
            if src is not None:
                tx.output.guards.add(src, "ID_MATCH", self.value.__code__)
            from .constant import ConstantVariable
            return ConstantVariable(self.value.__code__, src)
        raise Unsupported(f"function attribute {name!r}")

    def _default(self, tx, i):
        defaults = self.value.__defaults__ or ()
        if -i > len(defaults):
            return None
        from .builder import wrap_value
        src = self.source and GetItemSource(AttrSource(self.source, "__defaults__"), len(defaults) + i)
        return wrap_value(tx, defaults[i], src)

    def _kwdefault(self, tx, name):
        kwdefaults = self.value.__kwdefaults__ or {}
        if name not in kwdefaults:
            return None
        from .builder import wrap_value
        src = self.source and GetItemSource(AttrSource(self.source, "__kwdefaults__"), name)
        return wrap_value(tx, kwdefaults[name], src)

    def call_function(self, tx, args, kwargs):
        fn = self.value
        if getattr(fn, "_pydynamo_disabled", False):
            raise DisabledFunctionError(f"call to {fn.__qualname__}, which is decorated with "
                                        "pydynamo.disable")
        code = fn.__code__
        if bu.is_generator(code) and not bu.is_plain_generator(code):
            raise Unsupported(f"call of coroutine or async generator {fn.__qualname__}")
        bound = bind_args(code, args, kwargs, lambda i: self._default(tx, i),
                          lambda n: self._kwdefault(tx, n))
        cells = {}
        for i, name in enumerate(code.co_freevars):
            src = cell_contents_source(self.source, i) if self.source is not None else None
            cells[name] = CellVariable(real_cell=fn.__closure__[i], source=src, pre_existing=True)
        gsrc = globals_source_fn(tx, fn.__globals__, self.source)
        return tx.inline_call(code, fn.__globals__, gsrc, bound, cells, fn.__qualname__)

    def _repr_value(self):
        return self.value.__qualname__


class UserMethodVariable(VariableTracker):
    """A function bound to ``obj`` (a tracker); ``source`` is that of the function itself."""

    def __init__(self, fn, obj, source=None):
        super().__init__(source)
        self.fn, self.obj = fn, obj

    def python_type(self):
        return types.MethodType

    def truth(self, tx):
        return True

    def call_function(self, tx, args, kwargs):
        return UserFunctionVariable(self.fn, self.source).call_function(tx, [self.obj, *args], kwargs)

    def reconstruct(self, codegen):
        raise Unsupported("a bound method cannot be returned from compiled code")

    def _repr_value(self):
        return self.fn.__qualname__


class NestedUserFunctionVariable(VariableTracker):
    """A function made by MAKE_FUNCTION inside the trace (lambdas, inner defs, 3.11
    comprehensions). Its closure cells are the creating frame's CellVariables."""

    def __init__(self, code, f_globals, globals_source, defaults=None, kwdefaults=None,
                 closure=None):
        super().__init__(None)
        self.code, self.f_globals, self.globals_source = code, f_globals, globals_source
        self.defaults = defaults.items if defaults is not None else []
        self.kwdefaults = kwdefaults.items if kwdefaults is not None else {}
        self.closure = closure.items if closure is not None else []

    def python_type(self):
        return types.FunctionType

    def truth(self, tx):
        return True

    def call_function(self, tx, args, kwargs):
        if bu.is_generator(self.code) and not bu.is_plain_generator(self.code):
            raise Unsupported(f"coroutine or async generator {self.code.co_name}")
        ndef = len(self.defaults)
        bound = bind_args(self.code, args, kwargs,
                          lambda i: self.defaults[i] if -i <= ndef else None,
                          lambda n: self.kwdefaults.get(n))
        cells = dict(zip(self.code.co_freevars, self.closure))
        return tx.inline_call(self.code, self.f_globals, self.globals_source, bound, cells,
                              self.code.co_qualname)

    def reconstruct(self, codegen):
        raise Unsupported("a function created in traced code cannot be returned yet")

    def _repr_value(self):
        return self.code.co_qualname


class GeneratorVariable(VariableTracker):
    """A generator being inlined lazily: each next() runs its translator up to the next yield,
    so values are produced in the same order, and only as far, as CPython would."""

    def __init__(self, gen_tx):
        super().__init__(None)
        self.gen_tx = gen_tx

    def python_type(self):
        return types.GeneratorType

    def truth(self, tx):
        return True

    def next_item(self, tx):
        """The next yielded tracker, or None when the generator has returned."""
        g = self.gen_tx
        if g.finished:
            return None
        g.done = False
        g.run()
        return None if g.finished else g.result

    def unpack_var_sequence(self, tx):
        items = []
        while (item := self.next_item(tx)) is not None:
            items.append(item)
        return items

    def reconstruct(self, codegen):
        raise Unsupported("a generator cannot be returned from compiled code")

    def _repr_value(self):
        return self.gen_tx.code.co_qualname
