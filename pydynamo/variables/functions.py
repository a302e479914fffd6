"""User functions, methods and closures: calling one inlines its bytecode into the same graph."""
import functools
import types
import weakref

from .. import bytecode_utils as bu
from ..exc import DisabledFunctionError, ExceptionRaised, Unsupported
from ..source import (AttrSource, ClosureSource, GetItemSource, GlobalSource, cell_contents_source,
                      function_global_source, type_lookup as raw_type_lookup)
from .base import CellVariable, ObjectVariable, TypeAttributes, VariableTracker
from .dicts import DictVariable
from .lists import TupleVariable
from .optimizer import is_torch_init_group, make_state_before_init_group, refuse_step_closure


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
    """Globals of torch's own modules and of pydynamo.polyfills: read without guards (we
    assume torch is not patched)."""
    name = fn_globals.get("__name__", "")
    return name == "torch" or name.startswith("torch.") or name == "pydynamo.polyfills"


def globals_source_fn(tx, fn_globals, fn_source):
    """How an inlined function's globals are named in guards; None means unguarded (torch)."""
    if fn_globals is tx.root_globals():
        return GlobalSource
    if is_trusted_globals(fn_globals):
        return None
    if fn_source is not None:
        return lambda name: function_global_source(fn_source, name)
    raise Unsupported("call of a function from another module whose origin is unknown")


def marked_constant(fn):
    """``fn`` was marked with pydynamo.assume_constant_result (or torch's equivalent)."""
    try:
        return getattr(fn, "__dict__", {}).get("_dynamo_marked_constant") is True
    except Exception:  # noqa: BLE001 - a __dict__ property may raise
        return False


def call_assumed_constant(fn, args, kwargs):
    """A call to a function marked as constant: made once, for real, at trace time, with constant
    arguments; its result must be a constant the compiled code can hold."""
    from .builder import wrap_constant
    from .constant import is_constant_value
    name = getattr(fn, "__qualname__", repr(fn))
    try:
        cargs = [a.as_python_constant() for a in args]
        ckwargs = {k: v.as_python_constant() for k, v in kwargs.items()}
    except Unsupported:
        raise Unsupported(f"{name}, marked assume_constant_result, called with non-constant arguments") from None
    result = fn(*cargs, **ckwargs)
    flat = result if type(result) is tuple else (result,)
    if not all(is_constant_value(v) for v in flat):
        raise Unsupported(f"{name}, marked assume_constant_result, returned a {type(result).__name__}, "
                          "not a constant")
    return wrap_constant(result)


class UserFunctionVariable(ObjectVariable):
    def python_type(self):
        return types.FunctionType

    def var_getattr(self, tx, name):
        from .builder import wrap_value
        src = self.attr_source(name)
        if name in ("__name__", "__qualname__", "__module__", "__doc__", "__class__"):
            return wrap_value(tx, getattr(self.value, name), src)
        if name == "__get__":  # the descriptor protocol: called (call_method)
            from .base import GetAttrVariable
            return GetAttrVariable(self, name)
        if name == "__code__":  # libraries read co_varnames / co_argcount to inspect signatures
            if src is not None:
                tx.output.guards.add(src, "ID_MATCH", self.value.__code__)
            from .constant import ConstantVariable
            return ConstantVariable(self.value.__code__, src)
        if name in vars(self.value):  # set on the function (functools.wraps' __wrapped__)
            return wrap_value(tx, vars(self.value)[name], src)
        if name in ("__defaults__", "__kwdefaults__", "__annotations__"):
            return wrap_value(tx, getattr(self.value, name), src)
        if name == "__globals__" and src is not None:  # read entry by entry (objects.py)
            from .objects import UserDefinedObjectVariable
            return UserDefinedObjectVariable(self.value.__globals__, src)
        from ..source import type_lookup
        if src is not None and type_lookup(type(self.value), name) is None:  # absent: guarded so
            from .descriptors import attribute_error
            tx.output.guards.NOT_PRESENT(src)
            raise attribute_error(f"'function' object has no attribute {name!r}")
        raise Unsupported(f"function attribute {name!r}")

    def call_method(self, tx, name, args, kwargs):
        if name == "__get__" and not kwargs and 1 <= len(args) <= 2:  # func.__get__(obj, cls)
            obj = args[0]
            if obj.is_python_constant() and obj.as_python_constant() is None:
                return self
            return UserMethodVariable(self.value, obj, self.source)
        return super().call_method(tx, name, args, kwargs)

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
        if marked_constant(fn):
            return call_assumed_constant(fn, args, kwargs)
        if args and hasattr(args[0], "run_torch_init") and args[0].is_torch_init(fn):
            return args[0].run_torch_init(tx, fn, args[1:], kwargs)  # a module the trace creates
        if args and hasattr(args[0], "is_call_impl") and args[0].is_call_impl(fn):
            return args[0].call_impl(tx, fn, args[1:], kwargs)  # nn.Module.__call__ (hooks.py)
        if hasattr(fn, "__marked_compile_region_fn__"):  # torch.compiler.nested_compile_region
            from .compile_region import call_compile_region, marked_region
            return call_compile_region(tx, self, marked_region(fn), args, kwargs)
        if _patched_by_torch_compile(fn):  # torch.compile's own policy, not the program's
            fn = fn.__wrapped__
        if is_torch_init_group(fn):
            make_state_before_init_group(tx, fn, args)
        refuse_step_closure(fn, args, kwargs)
        if getattr(fn, "_pydynamo_disabled", False):
            raise DisabledFunctionError(f"call to {fn.__qualname__}, which is decorated with "
                                        "pydynamo.disable")
        if fn.__code__ is _torch_disabled_code():
            wrapped = getattr(fn, "__wrapped__", fn)
            raise DisabledFunctionError(f"call to {getattr(wrapped, '__module__', '?')}."
                                        f"{getattr(wrapped, '__qualname__', '?')}, which torch marks as never "
                                        "traced (torch._disable_dynamo: global state, optimizers, checkpoint "
                                        "internals)")
        code = fn.__code__
        if bu.is_generator(code) and not bu.is_plain_generator(code):
            raise Unsupported(f"call of coroutine or async generator {fn.__qualname__}")
        bound = bind_args(code, args, kwargs, lambda i: self._default(tx, i),
                          lambda n: self._kwdefault(tx, n))
        fn_source = self.source
        if fn_source is None and fn.__globals__ is not tx.root_globals() and not is_trusted_globals(fn.__globals__):
            # reached without a source (from torch's globals: typing.cast): that very function,
            # held by identity, so its globals and cells are guarded where read
            from ..source import ConstObjectSource
            fn_source = ConstObjectSource(fn)
        cells = {}
        for i, name in enumerate(code.co_freevars):
            src = cell_contents_source(fn_source, i) if fn_source is not None else None
            cells[name] = closure_cell(tx, fn.__closure__[i], src)
        gsrc = globals_source_fn(tx, fn.__globals__, fn_source)
        return tx.inline_call(code, fn.__globals__, gsrc, bound, cells, fn.__qualname__)

    def _repr_value(self):
        return self.value.__qualname__


def _patched_by_torch_compile(fn):
    """An optimizer's ``_init_group`` that torch.compile, once it has run in the process, wraps
    in its ``disable`` wrapper for every optimizer class (its TorchPatcher): torch.compile
    runs it while tracing in its own way; for pydynamo it is the optimizer's code, traced."""
    if not getattr(fn, "_torchdynamo_disable", False):
        return False
    inner = getattr(fn, "__wrapped__", None)
    return isinstance(inner, types.FunctionType) and inner.__name__ == "_init_group" and \
        (inner.__module__ or "").startswith("torch.optim.")


@functools.lru_cache(None)
def _torch_disabled_code():
    """The code of the wrapper torch._disable_dynamo puts around torch's own functions that
    torch.compile never traces; running it would load and run torch._dynamo."""
    import torch._compile
    return torch._compile._disable_dynamo(lambda: None).__code__


def closure_cell(tx, real_cell, source):
    """The tracker of ``real_cell``, a closure cell that existed before the trace: one per cell
    object, so a store made through one function is read through every other sharing it. The
    guards on those functions' identities pin which cells they have; not so the compiled
    frame's own cells (ClosureSource: other closures of the same code share the cache entry),
    so a cell reached both ways may be read, never stored to."""
    known = tx.output.closure_cells
    var = known.get(id(real_cell))
    if var is None:
        var = known[id(real_cell)] = CellVariable(real_cell=real_cell, source=source, pre_existing=True)
    elif isinstance(var.source, ClosureSource) != isinstance(source, ClosureSource):
        if var.written:
            raise Unsupported("a closure cell of the compiled function, stored to, is shared with "
                              "a function it calls")
        var.shared = True
    return var


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

    def var_getattr(self, tx, name):
        """As a bound method's lookup goes: the method type's own attributes first (its
        ``__class__`` is the method type, not the function's), then the function's."""
        if name == "__func__":
            return UserFunctionVariable(self.fn, self.source)
        if name == "__self__":
            return self.obj
        if name == "__class__":
            from .builder import wrap_value
            return wrap_value(tx, types.MethodType, None)
        if name != "__doc__" and raw_type_lookup(types.MethodType, name, None) is not None:
            raise Unsupported(f"attribute {name!r} of a bound method")  # __call__, __get__, ...
        return UserFunctionVariable(self.fn, self.source).var_getattr(tx, name)  # (__doc__ too)

    def has_attr(self, tx, name):
        if raw_type_lookup(types.MethodType, name, None) is not None:
            return True
        return UserFunctionVariable(self.fn, self.source).has_attr(tx, name)

    def reconstruct(self, codegen):
        """``types.MethodType(fn, obj)``: what reading the attribute made (a new bound method
        each read, so identity is not observable)."""
        codegen.load_function(types.MethodType)
        codegen.load_const(self.fn)  # the function the trace bound (its guards pin it)
        codegen(self.obj)
        codegen.append_call(2)

    def _repr_value(self):
        return self.fn.__qualname__


class NestedUserFunctionVariable(VariableTracker):
    """A function made by MAKE_FUNCTION inside the trace (lambdas, inner defs, 3.11
    comprehensions). Its closure cells are the creating frame's CellVariables."""

    def __init__(self, code, f_globals, globals_source, defaults=None, kwdefaults=None,
                 closure=None, annotations=None):
        super().__init__(None)
        self.code, self.f_globals, self.globals_source = code, f_globals, globals_source
        self.defaults = defaults.items if defaults is not None else []
        self.kwdefaults = kwdefaults.items if kwdefaults is not None else {}
        self.closure = closure.items if closure is not None else []
        self.annotations = annotations
        self.attrs = {}  # attributes functools.update_wrapper gave it (stdlib.py)

    def var_getattr(self, tx, name):
        """Attributes update_wrapper set, and the names its code gives it; others refused."""
        from .constant import ConstantVariable
        if name in self.attrs:
            if self.attrs[name] is None:
                raise Unsupported(f"attribute {name!r} copied by functools.wraps is not modelled")
            return self.attrs[name]
        if name in ("__name__", "__qualname__"):
            return ConstantVariable(self.code.co_name if name == "__name__" else self.code.co_qualname)
        if name == "__module__":
            return ConstantVariable(self.f_globals.get("__name__"))
        raise Unsupported(f"attribute {name!r} of a function made while tracing")

    def python_type(self):
        return types.FunctionType

    def has_attr(self, tx, name):
        """From the function type's table and the instance dict: empty, but for what
        update_wrapper copied (it also copies the wrapped function's ``__dict__``, which is
        not known: then a name not on the type is refused)."""
        from .descriptors import modelled_has_attr
        if name in self.attrs:
            return True
        own = None if "__wrapped__" in self.attrs else ()
        return modelled_has_attr(tx, types.FunctionType, name, own)

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
        """The function MAKE_FUNCTION would have made: same code, globals, defaults, and the
        cells (those made in the trace are made anew, holding their final contents)."""
        from .constant import ConstantVariable
        from .dicts import DictVariable
        if self.attrs:
            raise Unsupported(f"{self.code.co_qualname}, given attributes by functools.wraps, "
                              "cannot be rebuilt at run time")
        annotations = None
        if self.annotations is not None:
            if not self.annotations.is_python_constant():
                raise Unsupported(f"annotations of {self.code.co_qualname} are not constants")
            annotations = self.annotations.as_python_constant()
        codegen.load_function(make_function)
        codegen.load_const(self.code)
        codegen.load_const(self.f_globals)
        codegen(TupleVariable(self.defaults) if self.defaults else ConstantVariable(None))
        codegen(DictVariable(self.kwdefaults) if self.kwdefaults else ConstantVariable(None))
        codegen(TupleVariable(self.closure) if self.closure else ConstantVariable(None))
        codegen.load_const(annotations)
        codegen.append_call(6)

    def _repr_value(self):
        return self.code.co_qualname


    def prologue_spec(self, frame_globals):
        """(code, the cells' names, annotations) for a resume function's prologue to make this
        function again by MAKE_FUNCTION over the frame's cells of those names (rebuild.py);
        None where it cannot: a cell that is not one of the frame's, other globals, attributes."""
        from ..source import ClosureSource
        if self.attrs or self.f_globals is not frame_globals:
            return None
        names = []
        for cell in self.closure:
            name = getattr(cell, "frame_name", None)
            if name is None and getattr(cell, "pre_existing", False) and isinstance(cell.source, ClosureSource):
                name = cell.source.var_name
            if name is None:
                return None
            names.append(name)
        annotations = None
        if self.annotations is not None:
            if not self.annotations.is_python_constant():
                return None
            annotations = self.annotations.as_python_constant()
        return self.code, tuple(names), annotations


def make_function(code, f_globals, defaults, kwdefaults, closure, annotations):
    """What MAKE_FUNCTION makes (generated code calls it to rebuild a function of the trace)."""
    fn = types.FunctionType(code, f_globals, code.co_name, defaults, closure)
    if kwdefaults:
        fn.__kwdefaults__ = kwdefaults
    if annotations:
        fn.__annotations__ = dict(zip(annotations[::2], annotations[1::2]))
    return fn


class GeneratorVariable(TypeAttributes, VariableTracker):
    """A generator being inlined lazily: each next() runs its translator up to the next yield,
    so values are produced in the same order, and only as far, as CPython would."""

    def __init__(self, gen_tx):
        super().__init__(None)
        self.gen_tx = gen_tx
        # a polyfill's generator stands for a C iterator: its type is set by whoever knows it
        polyfill = gen_tx.f_globals.get("__name__") == "pydynamo.polyfills"
        self.python_cls = None if polyfill else types.GeneratorType

    def python_type(self):
        if self.python_cls is None:
            raise Unsupported("the type of an iterator of the standard library's internals")
        return self.python_cls

    def truth(self, tx):
        return True

    def next_item(self, tx, transparent=False):
        """The next yielded tracker, or None when the generator has returned. An exception it
        raises goes on to the trace's handlers only where Python passes it on unchanged
        (``transparent``: FOR_ITER, next(), yield from; see ``next_item`` below): a model of a
        builtin consuming the generator may stop early or keep partial results in C."""
        g = self.gen_tx
        if g.finished:
            return None
        g.done, g.consumer = False, tx
        try:
            g.run()
        except ExceptionRaised as e:
            g.finished = True  # a generator that raised is done
            if issubclass(e.var.python_type(), StopIteration):
                raise Unsupported("StopIteration raised inside a generator (Python turns it "
                                  "into a RuntimeError)") from None
            if not transparent:
                raise e.opaque(f"generator {g.code.co_qualname}, consumed by an operation "
                               "pydynamo models") from None
            raise
        except Unsupported:
            g.failed = True  # stopped mid-instruction: unusable if someone goes on
            raise
        return None if g.finished else g.result

    def resume_state(self):
        """(generator function, stack values, live locals' values) making a generator that goes
        on from where this user's generator is suspended (resume.generator_resume_code): one
        suspended at a plain ``yield`` outside try blocks, of a function without cells."""
        from .. import resume
        g = self.gen_tx
        if self.python_cls is not types.GeneratorType or g.finished or getattr(g, "failed", False):
            return None
        if g.steps == 0 or g.code.co_cellvars or g.code.co_freevars or g.ip >= len(g.instructions):
            return None
        after = g.instructions[g.ip]
        if g.instructions[g.ip - 1].opname != "YIELD_VALUE" or after.opname != "RESUME" or after.arg & 3 != 1:
            return None
        if bu.exception_exits(g.code)[g.ip - 1] != 0:
            return None  # inside a try or with block (check_suspended_generators)
        try:
            code, index = resume.origin(g.code, g.ip)
        except Unsupported:
            return None
        from .base import NullVariable
        stack = g.stack[:-1]  # the None pushed for the value sent in: the new yield pushes it
        shape = tuple("null" if isinstance(v, NullVariable) else "value" for v in stack)
        live = resume.live_locals(code, index)
        names = tuple(n for n in code.co_varnames if n in live and n in g.symbolic_locals)
        new = resume.generator_resume_code(code, index, shape, names)
        fn = _resume_generators.get(new)
        if fn is None:
            fn = _resume_generators[new] = types.FunctionType(new, g.f_globals, new.co_name)
            fn.__qualname__ = g.code.co_qualname
            fn.__name__ = g.code.co_name
        values = [v for v in stack if not isinstance(v, NullVariable)]
        return fn, values, [g.symbolic_locals[n] for n in names]

    def c_iterator_state(self):
        """(C callable, arguments) making the C iterator this polyfill's generator stands for,
        in its state now; None for a user's generator, or one stopped elsewhere than at its
        yield."""
        g = self.gen_tx
        polyfill = g.f_globals.get("__name__") == "pydynamo.polyfills"
        make = _C_ITERATORS.get(g.code.co_name) if polyfill else None
        at_yield = g.steps > 0 and not g.finished and g.instructions[g.ip - 1].opname == "YIELD_VALUE"
        if make is None or g.finished or getattr(g, "failed", False) or not (g.steps == 0 or at_yield):
            return None
        try:
            return make(g.symbolic_locals, at_yield)
        except Unsupported:
            return None

    def nested_values(self):
        """What the C iterator it stands for holds (its arguments in ``c_iterator_state``);
        for a user's generator, what its frame holds (what ``resume_state`` gives where it can
        be made again: dead locals are not held)."""
        state = self.c_iterator_state()
        if state is not None:
            return list(state[1])
        state = self.resume_state()
        if state is not None:  # its stack and live locals
            return [*state[1], *state[2]]
        return [*self.gen_tx.symbolic_locals.values(), *self.gen_tx.stack]

    def return_value(self):
        """What the generator returned (the value of ``yield from`` it), once finished."""
        from .constant import ConstantVariable
        return self.gen_tx.result if self.gen_tx.finished else ConstantVariable(None)

    def call_method(self, tx, name, args, kwargs):
        """``send(value)`` (the value the suspended yield evaluates to; ``next()`` sends None)
        and ``__next__()``; other methods (throw, close) are not modelled."""
        from .builtin import call_builtin
        if name == "__next__" and not args and not kwargs:
            return call_builtin(tx, next, [self], {})
        if name == "send" and len(args) == 1 and not kwargs:
            g, value = self.gen_tx, args[0]
            sends_none = value.is_python_constant() and value.as_python_constant() is None
            if g.steps == 0 and not sends_none:
                from .exceptions import raise_exception
                raise_exception(TypeError("can't send non-None value to a just-started generator"))
            if g.steps and not g.finished:
                g.stack[-1] = value  # YIELD_VALUE left None there for the value sent in
            return call_builtin(tx, next, [self], {})
        raise Unsupported(f"generator.{name}")

    def unpack_var_sequence(self, tx):
        items = []
        while (item := self.next_item(tx)) is not None:
            items.append(item)
        return items

    def reconstruct(self, codegen):
        """A polyfill's generator standing for a C iterator (map, filter, itertools.count...)
        is made again as that C iterator from its state, where it is not started or suspended
        at its yield (``_C_ITERATORS``). A user's generator suspended mid-way cannot be."""
        state, pushed = self.c_iterator_state(), 0
        if state is not None:  # the C iterator itself
            fn, args = state
            codegen.load_function(fn)
        else:  # rebuild_generator(resume generator function, its arguments)
            state = self.resume_state()
            if state is None:
                raise Unsupported("a generator cannot be returned from compiled code")
            from .rebuild import rebuild_generator
            fn, stack, local_values = state
            codegen.load_function(rebuild_generator)
            codegen.load_const(fn)
            args, pushed = [*stack, *local_values], 1
        for arg in args:
            codegen(arg)
        codegen.append_call(pushed + len(args))

    def _repr_value(self):
        return self.gen_tx.code.co_qualname


# resume generator code -> its function (one object per code: the trace guards it by identity)
_resume_generators = weakref.WeakKeyDictionary()


def _const_plus(a, b):
    from .constant import ConstantVariable
    return ConstantVariable(a.as_python_constant() + (b if isinstance(b, int) else b.as_python_constant()))


def _count_state(L, at_yield):
    import itertools
    return itertools.count, [_const_plus(L["n"], L["step"]) if at_yield else L["n"], L["step"]]


def _repeat_state(L, at_yield):
    import itertools
    return itertools.repeat, [L["obj"]]


def _enumerate_state(L, at_yield):
    return enumerate, [L["it"], _const_plus(L["n"], 1) if at_yield else L["n"]]


def _filter_state(L, at_yield):
    import itertools
    keep = L["keep"].as_python_constant()
    return (filter if keep else itertools.filterfalse), [L["function"], L["it"]]


def _zip_state(L, at_yield):
    if L["strict"].as_python_constant():
        raise Unsupported("zip(strict=True) cannot be rebuilt at run time")
    return zip, list(L["its"].items)


# the generator functions of polyfills.py that stand for C iterators, by name: (C callable,
# arguments) making that iterator in the state of one not started (at_yield False) or
# suspended at its yield (the next item is what the loop makes next)
_C_ITERATORS = {
    "_map": lambda L, at_yield: (map, [L["func"], *L["its"].items]),
    "_filter": _filter_state,
    "_zip": _zip_state,
    "_count": _count_state,
    "_repeat_forever": _repeat_state,
    "_enumerate": _enumerate_state,
}


def next_item(tx, it):
    """The next item of iterator ``it`` for FOR_ITER, next() and ``yield from``, which pass a
    generator's exception on unchanged (None when exhausted)."""
    if isinstance(it, GeneratorVariable):
        return it.next_item(tx, transparent=True)
    return it.next_item(tx)


def check_suspended_generators(output):
    """Python closes a generator once nothing refers to it: one suspended inside try/finally
    or a `with` block then runs that code, which the trace does not. Refused."""
    for g in output.generators:
        if getattr(g, "failed", False):
            raise Unsupported(f"generator {g.code.co_qualname} stopped by an unsupported operation")
        if g.steps and not g.finished and bu.exception_exits(g.code)[g.ip - 1] != 0:
            exc = Unsupported(f"generator {g.code.co_qualname} is left suspended inside a "
                              "try or with block (closing it runs code the trace does not see)")
            exc.culprit = g  # a break can be made before the line that made it (its ``born``)
            raise exc
