"""VariableTracker: what the translator knows about one Python value during tracing.

Scalars, tensors, functions and modules are described by immutable trackers. Containers that
Python code can mutate (lists, dicts, iterators, cells) are trackers whose contents change in
place, so every alias on the stack and in locals sees the mutation, as in CPython; mutating a
container that existed before the frame (it has a Source) is recorded on the OutputGraph and
replayed by the new bytecode.

``source`` says where the value came from; it is set only for values read from the frame's
inputs, and is what guards and reconstruction use.
"""
import weakref

from ..exc import Unsupported

# real classes and functions made while tracing (class statements, class_statement.py): values
# of that trace only, never loaded as constants by generated code
MADE_IN_TRACE = weakref.WeakSet()


# the top frame's step counter when a tracker is made (set by the InstructionTranslator): a
# break that cannot rebuild a value is moved before the step that made it (translator.py)
CLOCK = [0]


class VariableTracker:
    def __init__(self, source=None):
        self.source = source
        self.born = CLOCK[0]

    def python_type(self):
        raise Unsupported(f"the type of {self} is not known while tracing")

    def as_python_constant(self):
        raise Unsupported(f"{self} is not a constant")

    def is_python_constant(self):
        try:
            self.as_python_constant()
            return True
        except Unsupported:
            return False

    def var_getattr(self, tx, name):
        raise Unsupported(f"attribute {name!r} of {self}")

    def has_attr(self, tx, name):
        raise Unsupported(f"hasattr({self}, {name!r})")

    def call_function(self, tx, args, kwargs):
        raise Unsupported(f"calling {self}")

    def call_method(self, tx, name, args, kwargs):
        return self.var_getattr(tx, name).call_function(tx, args, kwargs)

    def unpack_var_sequence(self, tx):
        raise Unsupported(f"iterating over {self}")

    def has_unpack_var_sequence(self, tx):
        try:
            self.unpack_var_sequence(tx)
            return True
        except Unsupported:
            return False

    def truth(self, tx):
        raise Unsupported(f"the truth value of {self} is not known while tracing")

    def reconstruct(self, codegen):
        if self.source is None:
            raise Unsupported(f"{self} cannot be rebuilt in Python code")
        self.source.reconstruct(codegen)

    def __repr__(self):
        src = f" source={self.source.name()}" if self.source is not None else ""
        return f"{type(self).__name__}({self._repr_value()}{src})"

    def _repr_value(self):
        return ""


class TypeAttributes:
    """``hasattr`` and attribute loads of a tracker that models an instance of a builtin class
    (a list, a dict, a view, an iterator...): answered from its exact type as
    ``object.__getattribute__`` answers (``descriptors.modelled_instance_attr``). Put before
    VariableTracker among the bases."""

    def own_attrs(self):
        """The names in the instance's ``__dict__``: None where not known (or there is none)."""
        return None

    def has_attr(self, tx, name):
        from .descriptors import modelled_has_attr
        return modelled_has_attr(tx, self.python_type(), name, self.own_attrs())

    def var_getattr(self, tx, name):
        from .descriptors import modelled_getattr
        return modelled_getattr(tx, self, name, self.own_attrs())


class ObjectVariable(VariableTracker):
    """A Python object the trace holds as itself (a builtin, a torch function, a user function,
    a class, a Python module): its type, constant value and truth are the object's own, and it
    is reconstructed from its source or as a constant."""

    def __init__(self, value, source=None):
        super().__init__(source)
        self.value = value

    def python_type(self):
        return type(self.value)

    def as_python_constant(self):
        return self.value

    def truth(self, tx):
        return True

    def has_attr(self, tx, name):
        return guarded_hasattr(tx, self.value, self.source, name)

    def attr_source(self, name):
        from ..source import AttrSource
        return AttrSource(self.source, name) if self.source is not None else None

    def reconstruct(self, codegen):
        if self.source is not None:
            return self.source.reconstruct(codegen)
        try:
            made = self.value in MADE_IN_TRACE
        except TypeError:  # unhashable
            made = False
        if made:
            raise Unsupported(f"{self}, made by a class statement in compiled code, outlives the "
                              "trace (eager execution makes a new one at each call)")
        codegen.load_const(self.value)


def call_model(handler, tx, args, kwargs, what):
    """``handler(tx, *args, **kwargs)``, the model of a method (a function, or one bound to its
    tracker): a call the model does not take in that form is refused (the method then runs
    natively), never half-applied."""
    fn = getattr(handler, "__func__", handler)
    lead = (handler.__self__,) if fn is not handler else ()
    try:
        signature(fn).bind(*lead, tx, *args, **kwargs)
    except TypeError:
        raise Unsupported(f"{what} with {len(args)} positional arguments and keywords "
                          f"{sorted(kwargs)} is not modelled") from None
    return handler(tx, *args, **kwargs)


_signatures = {}


def signature(fn):
    """``inspect.signature(fn)``, memoised, for functions that live as long as the process
    (models, builtins, torch's own; never a user's bound method: the memo would keep its object
    alive). Raises as inspect.signature does."""
    try:
        return _signatures[fn]
    except KeyError:
        import inspect
        sig = _signatures[fn] = inspect.signature(fn)
        return sig


def guarded_hasattr(tx, obj, source, name):
    """``hasattr(obj, name)`` on a real object, guarded both ways: present (the attribute can
    still be read: a TYPE_MATCH on it) or absent (NOT_PRESENT). Without a source the object is
    one of torch's own, read unguarded like everything else of torch."""
    import inspect
    from .user_defined import refuse_stale_class_read
    refuse_stale_class_read(tx, obj if isinstance(obj, type) else type(obj), name)
    found = inspect.getattr_static(obj, name, _ABSENT)
    if found is not _ABSENT and not isinstance(obj, type) and _runs_code(found):
        raise Unsupported(f"hasattr({type(obj).__name__}, {name!r}) runs a descriptor's code")
    if found is _ABSENT and python_getattr_hook(obj):
        raise Unsupported(f"hasattr({type(obj).__name__}, {name!r}) runs a __getattr__")
    try:
        value, present = getattr(obj, name), True
    except AttributeError:
        value, present = None, False
    if source is not None:
        from ..source import AttrSource
        attr = AttrSource(source, name)
        if present:
            tx.output.guards.TYPE_MATCH(attr, value)
        else:
            tx.output.guards.NOT_PRESENT(attr)
    return present


_ABSENT = object()


def python_getattr_hook(obj):
    """Whether a name found nowhere on ``obj`` is then asked of Python code: a ``__getattr__``
    of its class (or metaclass), or a module's own ``__getattr__`` (PEP 562; torch's imports
    its lazy submodules). Enum classes' (3.11: a read of ``_member_map_``) runs no other code."""
    import enum
    import types
    from ..source import type_lookup
    if isinstance(obj, types.ModuleType) and "__getattr__" in vars(obj):
        return True
    hook = type_lookup(type(obj), "__getattr__")
    return hook is not None and hook is not vars(enum.EnumMeta).get("__getattr__")


def _runs_code(attr):
    """A class attribute whose read through an instance runs Python code (a property, a
    custom descriptor): reading it at trace time would run that code at the wrong time."""
    import types
    if isinstance(attr, (types.FunctionType, staticmethod, classmethod, types.MemberDescriptorType,
                         types.GetSetDescriptorType, types.BuiltinFunctionType,
                         types.MethodDescriptorType, types.WrapperDescriptorType)):
        return False
    return hasattr(type(attr), "__get__")


class EntryReadsVariable(VariableTracker):
    """An object's ``__dict__`` read entry by entry (``d[k]``, ``d.get(k[, default])``, ``k in d``,
    constant str keys): subclasses give ``_entry(tx, key)``, the entry's tracker with its guards
    (or None, guarded absent), and ``owner`` (the tracker whose ``__dict__`` this is). Nothing
    else is read, and nothing written through it."""

    shown = "__dict__"

    def __init__(self, owner):
        super().__init__(None)
        self.owner = owner

    def _entry(self, tx, key):
        raise NotImplementedError

    def var_getattr(self, tx, name):
        if name in ("get", "__getitem__", "__contains__"):
            return GetAttrVariable(self, name)
        raise Unsupported(f"{self.shown}.{name}")

    def call_method(self, tx, name, args, kwargs):
        from .constant import ConstantVariable
        if kwargs or not args or not args[0].is_python_constant() or type(args[0].as_python_constant()) is not str:
            raise Unsupported(f"{self.shown}.{name} with these arguments")
        key = args[0].as_python_constant()
        if name == "__contains__" and len(args) == 1:
            return ConstantVariable(self._entry(tx, key) is not None)
        if name == "get" and len(args) in (1, 2):
            found = self._entry(tx, key)
            return found if found is not None else (args[1] if len(args) == 2 else ConstantVariable(None))
        if name == "__getitem__" and len(args) == 1:
            found = self._entry(tx, key)
            if found is None:
                from .exceptions import raise_exception
                raise_exception(KeyError(key))
            return found
        raise Unsupported(f"{self.shown}.{name}")

    def reconstruct(self, codegen):
        from .. import bytecode_utils as bu
        codegen(self.owner)
        codegen.append(bu.create_load_attr("__dict__"))


class NullVariable(VariableTracker):
    """CPython's NULL stack slot (PUSH_NULL, LOAD_GLOBAL's low bit)."""

    def reconstruct(self, codegen):
        codegen.append_push_null()


NULL = NullVariable()


class GetAttrVariable(VariableTracker):
    """``obj.name`` where name is a method: calling it is ``obj.call_method(name, ...)``."""

    def __init__(self, obj, name, source=None):
        super().__init__(source)
        self.obj, self.name = obj, name

    def call_function(self, tx, args, kwargs):
        return self.obj.call_method(tx, self.name, args, kwargs)

    def truth(self, tx):
        return True

    def reconstruct(self, codegen):
        from .. import bytecode_utils as bu
        codegen(self.obj)
        codegen.append(bu.create_load_attr(self.name))

    def _repr_value(self):
        return f"{self.obj}.{self.name}"


class CellVariable(VariableTracker):
    """A closure cell. ``contents`` is a tracker, or None while the cell is empty.

    Cells of functions that exist before the trace are read through ``read`` lazily, so only
    cells the code uses are guarded; one tracker stands for each such cell object (see
    functions.closure_cell), and storing into it (``nonlocal``) is a side effect replayed by
    the generated code. The compiled frame's own cells (``frame_name``: co_cellvars, made by
    its MAKE_CELL) exist at run time: a store into one is replayed (STORE_DEREF) before a break
    or the return, and a function made in the trace closes over the real cell, which a resume
    function shares (resume.py). Another cell made in the trace (an inlined call's) exists at
    run time only if a function that closes over it outlives the trace: then it is made anew,
    holding the final contents.
    """

    def __init__(self, contents=None, real_cell=None, source=None, pre_existing=False, frame_name=None):
        super().__init__(source)
        self.contents = contents
        self.real_cell = real_cell
        self.pre_existing = pre_existing
        self.frame_name = frame_name
        # reached both as the compiled frame's own cell and through a function's __closure__:
        # which cell the function has is not guarded, so stores are refused
        self.shared = False
        self.written = False

    def read(self, tx):
        if self.contents is None and self.real_cell is not None:
            try:
                value = self.real_cell.cell_contents
            except ValueError:
                raise Unsupported("read of an empty closure cell") from None
            from .builder import wrap_value
            self.contents = wrap_value(tx, value, self.source)
        if self.contents is None:
            raise Unsupported("read of an empty closure cell")
        return self.contents

    def write(self, tx, value):
        if self.frame_name is not None:
            tx.output.side_effects.store_cell(self, value)
        elif self.pre_existing:
            if self.source is None or self.shared:
                raise Unsupported("assignment to a closure variable whose cell the trace cannot "
                                  "name (a nonlocal side effect)")
            tx.output.side_effects.store_cell(self, value)
            self.written = True
        self.contents = value

    def reconstruct(self, codegen):
        """The cell object itself (a closure tuple holds cells, not their contents)."""
        from .. import bytecode_utils as bu
        from ..source import AttrSource, ClosureSource
        if self.frame_name is not None:
            return codegen.append(bu.create_load_closure(self.frame_name, codegen.code))
        if not self.pre_existing:
            import types
            codegen.load_function(types.CellType)
            if self.contents is not None:
                codegen(self.contents)
            return codegen.append_call(int(self.contents is not None))
        if isinstance(self.source, ClosureSource):
            return codegen.append(bu.create_instruction("LOAD_CLOSURE", bu.FreeVar(self.source.var_name)))
        if isinstance(self.source, AttrSource) and self.source.member == "cell_contents":
            return codegen.source(self.source.base)
        raise Unsupported("a closure cell the trace cannot name")

    def codegen_store(self, codegen):
        """Store the top of the stack into this (pre-existing) cell."""
        from .. import bytecode_utils as bu
        from ..source import ClosureSource
        if self.frame_name is not None:
            return codegen.append(bu.create_instruction("STORE_DEREF", bu.CellVar(self.frame_name)))
        if isinstance(self.source, ClosureSource):
            return codegen.append(bu.create_instruction("STORE_DEREF", bu.FreeVar(self.source.var_name)))
        codegen.source(self.source.base)
        codegen.append(bu.create_instruction("STORE_ATTR", "cell_contents"))
