"""Sources: where a value the trace read came from.

A Source is a path from a frame root (an argument, a global, a builtin, a closure cell) through
attribute and item steps. ``name()`` is the expression shown in guards and messages
(``L['self'].lin.weight``); ``steps()`` is the same path in the form GuardSet checks read
(see _C.pyi); ``reconstruct(codegen)`` emits bytecode that loads the value again at run time.
"""
import re

from . import bytecode_utils as bu


class Source:
    def name(self) -> str:
        raise NotImplementedError

    def steps(self) -> tuple:
        raise NotImplementedError

    def reconstruct(self, codegen):
        raise NotImplementedError

    def graph_input_name(self) -> str:
        """A Python identifier for graph placeholders: L['self'].lin.weight -> L_self_lin_weight."""
        return re.sub(r"[^0-9a-zA-Z_]+", "_", self.name())

    def __eq__(self, other):
        return type(self) is type(other) and self.name() == other.name()

    def __hash__(self):
        return hash(self.name())

    def __repr__(self):
        return f"<{type(self).__name__} {self.name()}>"


class LocalSource(Source):
    """Argument slot ``index`` of the frame, named ``local_name`` (co_varnames[index])."""

    def __init__(self, local_name, index):
        self.local_name, self.index = local_name, index

    def name(self):
        return f"L[{self.local_name!r}]"

    def steps(self):
        return (("L", self.index),)

    def reconstruct(self, codegen):
        codegen.append(bu.create_load_local(self.local_name, codegen.code))


class GlobalSource(Source):
    def __init__(self, global_name):
        self.global_name = global_name

    def name(self):
        return f"G[{self.global_name!r}]"

    def steps(self):
        return (("G", self.global_name),)

    def reconstruct(self, codegen):
        codegen.append(bu.create_load_global(self.global_name))


class BuiltinSource(Source):
    """A builtin found because the frame's globals lack the name (guarded NOT_PRESENT there)."""

    def __init__(self, builtin_name):
        self.builtin_name = builtin_name

    def name(self):
        return f"B[{self.builtin_name!r}]"

    def steps(self):
        return (("B", self.builtin_name),)

    def reconstruct(self, codegen):
        codegen.append(bu.create_load_global(self.builtin_name))


class ClosureSource(Source):
    """The contents of closure cell ``index`` (co_freevars[index]) of the top frame."""

    def __init__(self, var_name, index):
        self.var_name, self.index = var_name, index

    def name(self):
        return f"C[{self.var_name!r}]"

    def steps(self):
        return (("C", self.index),)

    def reconstruct(self, codegen):
        codegen.append(bu.create_load_freevar(self.index, codegen.code))


class ConstObjectSource(Source):
    """An object the trace knows by identity and holds itself (a class found as a key of a dict
    whose keys are guarded): guards below it check that object's state at each call."""

    def __init__(self, value):
        self.value = value

    def name(self):
        from .guards import _describe
        return f"K[{_describe(self.value)}@{id(self.value):#x}]"

    def steps(self):
        return (("K", self.value),)

    def reconstruct(self, codegen):
        codegen.load_const(self.value)


class AttrSource(Source):
    def __init__(self, base, member):
        assert isinstance(base, Source)
        self.base, self.member = base, member

    def name(self):
        return f"{self.base.name()}.{self.member}"

    def steps(self):
        return self.base.steps() + (("a", self.member),)

    def reconstruct(self, codegen):
        codegen.source(self.base)
        codegen.append(bu.create_load_attr(self.member))


class TensorSizeSource(Source):
    """``base.size(dim)`` (``prop`` "stride": ``base.stride(dim)``; "storage_offset":
    ``base.storage_offset()``): a graph input's size that is an argument of its own, the
    placeholder of a symbol as torch.compile passes it (``s0``; a jagged NestedTensor's nested
    int). Never guarded: the symbol's facts are its tensor's."""

    def __init__(self, base, dim, prop="size"):
        assert isinstance(base, Source) and prop in ("size", "stride", "storage_offset")
        self.base, self.dim, self.prop = base, dim, prop

    def name(self):
        if self.prop == "storage_offset":
            return f"{self.base.name()}.storage_offset()"
        return f"{self.base.name()}.{self.prop}()[{self.dim}]"

    def steps(self):
        raise NotImplementedError("a tensor's size is guarded by its tensor's guards")

    def reconstruct(self, codegen):
        import torch
        codegen.load_function(getattr(torch.Tensor, self.prop))
        codegen.source(self.base)
        if self.prop == "storage_offset":
            codegen.append_call(1)
            return
        codegen.load_const(self.dim)
        codegen.append_call(2)


class GetItemSource(Source):
    def __init__(self, base, index):
        assert isinstance(base, Source)
        self.base, self.index = base, index

    def name(self):
        return f"{self.base.name()}[{self.index!r}]"

    def steps(self):
        return self.base.steps() + (("i", self.index),)

    def reconstruct(self, codegen):
        codegen.source(self.base)
        codegen.load_const(self.index)
        codegen.append(bu.create_binary_subscr())


class DictItemSource(Source):
    """``dict.__getitem__(base, key)`` for a key known present: the raw entry of a dict or dict
    subclass instance, read by dict's own lookup (the class's ``__getitem__`` and ``__missing__``
    never run, in guards nor here). Guards read it in one C step (``("d", key)``), which fails
    when the key is absent (so NOT_PRESENT on it guards absence)."""

    def __init__(self, base, key):
        assert isinstance(base, Source)
        self.base, self.index = base, key

    def name(self):
        return f"dict.__getitem__({self.base.name()}, {self.index!r})"

    def steps(self):
        return self.base.steps() + (("d", self.index),)

    def reconstruct(self, codegen):
        codegen.load_function(dict.__getitem__)
        codegen.source(self.base)
        codegen.load_const(self.index)
        codegen.append_call(2)


class TensorKeyItemSource(Source):
    """``dict.__getitem__(base, key)`` for a tensor key (an optimizer's ``state[param]``): guards
    read the entry in one C step that holds the key by a weak reference (``("D", ref)``: dead or
    absent, the read fails), so the guard keeps no parameter alive; generated code loads the key
    from ``key_source`` (where the trace found that tensor, pinned to it by a guard)."""

    def __init__(self, base, ref, key_source):
        assert isinstance(base, Source)
        self.base, self.ref, self.key_source = base, ref, key_source

    def name(self):
        return f"dict.__getitem__({self.base.name()}, {self.key_source.name()})"

    def steps(self):
        return self.base.steps() + (("D", self.ref),)

    def reconstruct(self, codegen):
        codegen.load_function(dict.__getitem__)
        codegen.source(self.base)
        codegen.source(self.key_source)
        codegen.append_call(2)


class GenericAttrSource(Source):
    """``object.__getattribute__(base, member)``: how a class with its own ``__getattribute__``
    reads its instances' ``__dict__`` and ``__class__`` (reading them through that
    ``__getattribute__`` would run user code in guards, and recurse in its own compiled code)."""

    def __init__(self, base, member):
        assert isinstance(base, Source)
        self.base, self.member = base, member

    def name(self):
        return f"object.__getattribute__({self.base.name()}, {self.member!r})"

    def steps(self):
        return self.base.steps() + (("g", self.member),)

    def reconstruct(self, codegen):
        codegen.load_function(object.__getattribute__)
        codegen.source(self.base)
        codegen.load_const(self.member)
        codegen.append_call(2)


class WeakrefSource(Source):
    """``base()``: the object the ``weakref.ref`` at ``base`` refers to. Guards read it in one
    C step (``("w", "")``), which fails once the referent is dead."""

    def __init__(self, base):
        assert isinstance(base, Source)
        self.base = base

    def name(self):
        return f"{self.base.name()}()"

    def steps(self):
        return self.base.steps() + (("w", ""),)

    def reconstruct(self, codegen):
        codegen.append_callable(lambda: codegen.source(self.base))
        codegen.append_call(0)


class TypeLookupSource(Source):
    """``member`` as the class read by ``base`` finds it along its MRO, the stored object itself
    (no descriptor called): CPython's ``_PyType_Lookup``, the first step of every attribute read
    and special-method call on an instance. Guards read it in one C step (``("t", member)``),
    so a class attribute added, removed or replaced anywhere in the MRO fails them."""

    def __init__(self, base, member):
        assert isinstance(base, Source)
        self.base, self.member = base, member

    def name(self):
        return f"type_lookup({self.base.name()}, {self.member!r})"

    def steps(self):
        return self.base.steps() + (("t", self.member),)

    def reconstruct(self, codegen):
        codegen.load_function(type_lookup)
        codegen.source(self.base)
        codegen.load_const(self.member)
        codegen.append_call(2)


def type_lookup(cls, name, default=None):
    """What CPython's ``_PyType_Lookup(cls, name)`` answers: the raw attribute of the first class
    along ``cls.__mro__`` whose ``__dict__`` has it (``default`` when none has)."""
    for klass in cls.__mro__:
        d = klass.__dict__
        if name in d:
            return d[name]
    return default


class ModuleMemberSource(Source):
    """A submodule, parameter or buffer of an nn.Module: reads like ``base.member`` (or
    ``base[i]`` for containers), but guards read ``base.<table>[key]`` directly, because
    nn.Module.__getattr__ and the containers' __getitem__ are Python code, far slower per call
    than the C dict lookups of the guard's steps."""

    def __init__(self, base, table, key, shown=None):
        assert isinstance(base, Source) and table in ("_modules", "_parameters", "_buffers")
        self.base, self.table, self.key, self.shown = base, table, key, shown

    def name(self):
        if self.shown is not None:  # container indexing: ModuleList[0], Sequential[1]
            return f"{self.base.name()}[{self.shown!r}]"
        return f"{self.base.name()}.{self.key}"

    def steps(self):
        return self.base.steps() + (("a", self.table), ("i", self.key))

    def reconstruct(self, codegen):
        # the same direct dict reads as the guard: generated code loads graph inputs every call
        codegen.source(self.base)
        codegen.append(bu.create_load_attr(self.table))
        codegen.load_const(self.key)
        codegen.append(bu.create_binary_subscr())


def cell_contents_source(fn_source, index):
    """Source of closure cell ``index`` of a function reached by ``fn_source``."""
    return AttrSource(GetItemSource(AttrSource(fn_source, "__closure__"), index), "cell_contents")


def function_global_source(fn_source, global_name):
    """Source of a global read by a function whose module is not the frame's."""
    return GetItemSource(AttrSource(fn_source, "__globals__"), global_name)
