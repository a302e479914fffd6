"""Dynamic shapes: which sizes are symbolic in a compile, the ShapeEnv that reasons about them,
and the guards it leaves behind.

Policy (``DynamicPolicy``, one per compile): with ``dynamic=None`` (the default) a code's first
compile specializes every size; a later compile of the same code makes symbolic every tensor
dimension (and Python int argument) whose value differs from what an earlier compile of that
code saw (automatic dynamic: the state lives per code in convert_frame). ``dynamic=True`` makes
every dimension symbolic from the start, ``dynamic=False`` none; ``mark_dynamic`` /
``mark_static`` override per dimension. Sizes 0 and 1 stay specialized (the ShapeEnv does it).
Parameters and buffers of modules always stay static.

Symbolic sizes are ``torch.SymInt``s of torch's ``ShapeEnv`` inside fake tensors; the facts the
trace (and the backend) relied on are the ShapeEnv's guards. ``produce_guards`` renders them as
Python expressions over ``src.size()[i]`` / ``src.stride()[i]`` / an int source; they are
compiled here into one ``SHAPE_ENV`` check (postfix programs run in C, see _C.pyi), so a hit
costs no Python.
"""
import ast
import dataclasses
import re

import torch
from torch._guards import GuardSource
from torch._guards import Source as TorchSource
from torch.fx.experimental.symbolic_shapes import (DimDynamic, ShapeEnv, StatelessSymbolicContext,
                                                   compute_unbacked_bindings, is_symbolic)
from torch.utils._python_dispatch import is_traceable_wrapper_subclass

from . import config
from .exc import PydynamoError, Unsupported
from .source import GetItemSource, LocalSource, ModuleMemberSource

_DYNAMIC_ATTR = "_pydynamo_dynamic_dims"
_MAYBE_DYNAMIC_ATTR = "_pydynamo_maybe_dynamic_dims"
_STATIC_ATTR = "_pydynamo_static_dims"
_ATTRS = (_DYNAMIC_ATTR, _MAYBE_DYNAMIC_ATTR, _STATIC_ATTR)
# torch's own attribute (torch._dynamo.mark_static_address sets it too): "guarded" / "unguarded"
_STATIC_ADDRESS_ATTR = "_dynamo_static_input_type"


def _dims(t, index):
    return {index} if isinstance(index, int) else set(index)


def _mark(t, index, attr):
    """Put dimension(s) ``index`` of ``t`` in ``attr``'s set, and out of the other two."""
    dims = _dims(t, index)
    for other in _ATTRS:
        if other != attr:
            getattr(t, other, set()).difference_update(dims)
    setattr(t, attr, getattr(t, attr, set()) | dims)


def mark_dynamic(t, index):
    """Make dimension(s) ``index`` of ``t`` symbolic in every compile that reads ``t``; if the
    program forces such a dimension to a constant, compiling raises ConstraintViolationError."""
    _mark(t, index, _DYNAMIC_ATTR)


def maybe_mark_dynamic(t, index):
    """Like ``mark_dynamic``, but a program that specializes the dimension just gets a
    specialized compile (no error)."""
    _mark(t, index, _MAYBE_DYNAMIC_ATTR)


def mark_static(t, index):
    """Keep dimension(s) ``index`` of ``t`` specialized, whatever the dynamic setting."""
    _mark(t, index, _STATIC_ATTR)


def mark_static_address(t, guard=False):
    """Tell the backend that ``t``'s storage stays where it is across calls (as for parameters:
    Inductor skips per-call alignment checks and, with CUDA graphs, copies). With ``guard=True``
    its ``data_ptr()`` is guarded (a new address recompiles); without, that is the caller's
    promise, as with torch.compile."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"mark_static_address expects a tensor but received {type(t)}")
    setattr(t, _STATIC_ADDRESS_ATTR, "guarded" if guard else "unguarded")


class _DataPtrIs:
    """Guard predicate: ``t.data_ptr() == ptr`` (holds the address, never the tensor)."""

    def __init__(self, ptr):
        self.ptr = ptr

    def __call__(self, t):
        return t.data_ptr() == self.ptr


class ConstraintViolationError(PydynamoError):
    """A dimension marked dynamic was specialized by the program."""


class ShapeGuardUnsupported(Exception):
    """A ShapeEnv guard that the C programs cannot express (the compile is retried static)."""


class DynamicPolicy:
    """Which sizes are symbolic in one compile. ``state`` (per code, kept by convert_frame) maps
    a source's name to the sizes seen (None where a size already changed) or an int's value."""

    def __init__(self, mode=None, state=None, dynamic_ints=True):
        self.mode, self.state = mode, state if state is not None else {}
        self.dynamic_ints = dynamic_ints
        self.object_attrs = set()  # sources of ints read from plain objects' instance dicts (this trace)
        self.static = False  # set for a retry after a failed dynamic compile
        self.used = False    # some size or int was made symbolic

    def tensor_dims(self, source, value):
        """(symbolic dims, dims marked dynamic by the user) for tensor ``value`` read by ``source``."""
        marked = set(getattr(value, _DYNAMIC_ATTR, ()))
        maybe = set(getattr(value, _MAYBE_DYNAMIC_ATTR, ()))
        if self.static or isinstance(source, ModuleMemberSource):
            return set(), set()
        sizes = tuple(value.size())
        key = source.name()
        seen = self.state.get(key)
        if not isinstance(seen, tuple) or len(seen) != len(sizes):
            seen = self.state[key] = sizes  # first sight, or the rank changed: specialize
        elif self.mode is not False:
            seen = self.state[key] = tuple(None if a != b else a for a, b in zip(seen, sizes))
        dims = set(range(len(sizes))) if self.mode is True else \
            {i for i, s in enumerate(seen) if s is None} if self.mode is None else set()
        dims = (dims | marked | maybe) - set(getattr(value, _STATIC_ATTR, ()))
        dims = {d for d in dims if d < len(sizes) and sizes[d] not in (0, 1)}
        self.used |= bool(dims)
        return dims, marked

    def int_is_dynamic(self, source, value):
        """Whether int ``value`` read by ``source`` is a SymInt input. Only ints passed as
        arguments (or inside argument tuples, lists, dicts), and the instance attributes of
        plain objects (``object_attrs``: an LR scheduler's step counters): the attributes of
        nn.Modules, their hyper-parameters, stay constants."""
        if self.static or self.mode is False or type(value) is not int:
            return False
        argument = self.dynamic_ints and _is_argument(source)
        if not (argument or source.name() in self.object_attrs):
            return False
        if self.mode is True and argument:  # (an object's int: only once it has changed)
            self.used = True
            return True
        key = source.name()
        seen = self.state.get(key, value)
        dynamic = seen is None or (type(seen) is int and seen != value)
        self.state[key] = None if dynamic else value
        self.used |= dynamic
        return dynamic


def _is_argument(source):
    while isinstance(source, GetItemSource):
        source = source.base
    return isinstance(source, LocalSource)


@dataclasses.dataclass(frozen=True)
class _Src(TorchSource):
    """The name a ShapeEnv knows one of our sources by: an identifier, mapped back to the real
    source when guards are compiled."""
    ident: str

    @property
    def name(self):
        return self.ident

    def guard_source(self):
        return GuardSource.LOCAL

    def reconstruct(self, codegen):
        raise NotImplementedError


class PydShapeEnv(ShapeEnv):
    """A ShapeEnv that remembers the user's line where a symbol was specialized to a constant
    (for the mark_dynamic error)."""

    def __init__(self, where_fn, **kwargs):
        super().__init__(**kwargs)
        self.pyd_where_fn, self.pyd_where = where_fn, {}

    def _set_replacement(self, a, tgt, msg):
        if getattr(tgt, "is_number", False) and a not in self.pyd_where:
            self.pyd_where[a] = self.pyd_where_fn()
        return super()._set_replacement(a, tgt, msg)


class ShapeTracker:
    """The symbolic side of one OutputGraph: symbolic fake tensors and ints for its inputs, and
    at the end the guards that pin them."""

    def __init__(self, policy, where_fn):
        self.policy = policy or DynamicPolicy()
        # data-dependent values (config.capture_*): ops whose fake kernels would otherwise refuse
        # (Tensor.item(), nonzero()) give unbacked symbols, bound to their graph nodes
        self.shape_env = PydShapeEnv(
            where_fn, allow_scalar_outputs=config.capture_scalar_outputs,
            allow_dynamic_output_shape_ops=config.capture_dynamic_output_shape_ops)
        self.unbacked = False  # some op gave an unbacked symbol
        self.tensors = []  # (source, real tensor, fake, marked dims) with a symbolic dimension
        self.ints = []     # (source, SymInt)
        self.contexts = {}  # index in tensors -> the symbolic context of a jagged NestedTensor's
        self._names = {}   # identifier -> our Source

    def _src(self, source):
        ident = f"__s{len(self._names)}"
        self._names[ident] = source
        return _Src(ident)

    def fakify(self, fake_mode, source, value):
        """The fake tensor for graph input ``value`` read by ``source``."""
        if has_nested_int(value):
            return self._fakify_jagged(fake_mode, source, value)
        if is_traceable_wrapper_subclass(value):
            return self._fakify_wrapper(fake_mode, source, value)
        dims, marked = self.policy.tensor_dims(source, value)
        if not dims:
            fake = fake_mode.from_tensor(value, static_shapes=True)
            if any(isinstance(s, torch.SymInt) for s in (*fake.size(), *fake.stride())):
                # made earlier, symbolic, with another input (a symbolic tensor's ``.grad`` is
                # fakified with it): its guards come with the symbolic inputs' (finish_guards)
                self.tensors.append((source, value, fake, {}))
            return fake
        ctx = StatelessSymbolicContext(
            dynamic_sizes=[DimDynamic.DUCK if i in dims else DimDynamic.STATIC for i in range(value.dim())],
            constraint_sizes=[None] * value.dim())
        fake = fake_mode.from_tensor(value, symbolic_context=ctx, source=self._src(source))
        # the symbol of each marked dimension, to find where the program specialized it
        marked = {d: fake.size(d).node.expr for d in marked if isinstance(fake.size(d), torch.SymInt)}
        self.tensors.append((source, value, fake, marked))
        return fake

    def wrapper_dims(self, source, value):
        """Whether a traceable wrapper subclass input (TwoTensor, a float8 wrapper) gets symbolic
        sizes: where the dynamic policy makes some dim of it, or of a plain inner tensor, symbolic
        (automatic dynamic: its sizes changed between calls; mark_dynamic). Nested wrappers stay
        static. Returns {None: outer dims, name: inner dims} or None (static)."""
        from .source import AttrSource
        attrs, _ = value.__tensor_flatten__()
        inner = [getattr(value, a) for a in attrs]
        if not all(type(t) in (torch.Tensor, torch.nn.Parameter) for t in inner):
            return None
        dims = {None: self.policy.tensor_dims(source, value)[0]}
        for a, t in zip(attrs, inner):
            dims[a] = self.policy.tensor_dims(AttrSource(source, a), t)[0]
        return dims if any(dims.values()) else None

    def _fakify_wrapper(self, fake_mode, source, value):
        """A traceable wrapper subclass input with symbolic sizes (wrapper_dims): torch's fake mode
        makes it through the flatten protocol with a SubclassSymbolicContext, outer and inner sizes
        tracked (the SHAPE_ENV check holds their facts; the TENSOR_MATCHes check the rest,
        subclasses.guard_subclass)."""
        from torch.fx.experimental.symbolic_shapes import SubclassSymbolicContext
        dims = self.wrapper_dims(source, value)
        src = self._src(source)

        def context(t, symbolic):
            return StatelessSymbolicContext(
                dynamic_sizes=[DimDynamic.DUCK if i in symbolic else DimDynamic.STATIC for i in range(t.dim())],
                constraint_sizes=[None] * t.dim())
        attrs, _ = value.__tensor_flatten__()
        outer = context(value, dims[None])
        ctx = SubclassSymbolicContext(
            dynamic_sizes=outer.dynamic_sizes, constraint_sizes=outer.constraint_sizes,
            inner_contexts={a: context(getattr(value, a), dims[a]) for a in attrs},
            tensor_source=src, shape_env_to_source_to_symbol_cache={})
        fake = fake_mode.from_tensor(value, symbolic_context=ctx, source=src)
        self.tensors.append((source, value, fake, {}))
        self.contexts[len(self.tensors) - 1] = ctx
        return fake

    def _fakify_jagged(self, fake_mode, source, value):
        """A jagged NestedTensor input: its ragged size a symbol (torch's nested int, tied to its
        offsets), as torch.compile makes it; the inner tensors' sizes as torch's fake mode makes
        them (the values' ragged length symbolic), and the cached min/max sequence lengths symbolic
        (a new batch's lengths do not recompile; a new batch size does). The outer sizes follow
        from the inner tensors, which the SHAPE_ENV check and the inner TENSOR_MATCHes guard
        (subclasses.guard_subclass)."""
        from torch.fx.experimental.symbolic_shapes import SubclassSymbolicContext
        if not _TRACKS_OUTER_OPTIONAL:
            raise Unsupported("a jagged NestedTensor input needs torch >= 2.12 (its outer sizes "
                              "would be guarded as symbols of their own)")
        src = self._src(source)

        def inner(name):
            t = getattr(value, name)
            dims = {0} if name in _SEQLEN_ATTRS and t.dim() else set()
            return StatelessSymbolicContext(
                dynamic_sizes=[DimDynamic.DYNAMIC if i in dims else DimDynamic.STATIC for i in range(t.dim())],
                constraint_sizes=[None] * t.dim())
        attrs, _ = value.__tensor_flatten__()
        with torch._C.DisableTorchFunctionSubclass():
            sizes = value.size()
        ctx = SubclassSymbolicContext(
            dynamic_sizes=[DimDynamic.DYNAMIC if _is_nested_int(s) else DimDynamic.STATIC for s in sizes],
            constraint_sizes=[None] * len(sizes), inner_contexts={a: inner(a) for a in attrs},
            tensor_source=src, shape_env_to_source_to_symbol_cache={}, track_outer_size_stride=False)
        fake = fake_mode.from_tensor(value, symbolic_context=ctx, source=src)
        self.tensors.append((source, value, fake, {}))
        self.contexts[len(self.tensors) - 1] = ctx
        return fake

    def symint(self, source, value):
        sym = self.shape_env.create_unspecified_symint_and_symbol(value, self._src(source), DimDynamic.DYNAMIC)
        self.ints.append((source, sym))
        return sym

    @property
    def used(self):
        return bool(self.tensors or self.ints or self.unbacked)

    def static_address(self, guards, source, value):
        """Whether tensor input ``value`` was marked by mark_static_address; if with
        ``guard=True``, its ``data_ptr()`` is pinned by a guard."""
        mark = getattr(value, _STATIC_ADDRESS_ATTR, None)
        if mark == "guarded":
            ptr = value.data_ptr()
            guards.PREDICATE(source, _DataPtrIs(ptr), f"{source.name()}.data_ptr() == {ptr}")
        return mark in ("guarded", "unguarded")

    # ---- data-dependent values ----------------------------------------------------------------

    def drop_unbound(self):
        """Forget unbacked symbols that no node bound (an op that failed after making them)."""
        self.shape_env.pending_fresh_unbacked_symbols.clear()

    def bind_unbacked(self, value, what):
        """``node.meta["unbacked_bindings"]`` for an op whose fake result ``value`` holds the
        unbacked symbols it made (where in the result each is), or None if it made none."""
        env = self.shape_env
        if not env.pending_fresh_unbacked_symbols:
            return None
        if not (env.allow_scalar_outputs or env.allow_dynamic_output_shape_ops):
            self.drop_unbound()
            raise Unsupported(f"{what}: output size depends on tensor data")
        try:
            bindings = compute_unbacked_bindings(env, value)
        except Exception as e:
            self.drop_unbound()
            raise Unsupported(f"{what}: its data-dependent output cannot be bound ({type(e).__name__})") from None
        self.unbacked = True
        return bindings

    def insert_runtime_asserts(self, gm, name):
        """The facts the trace learnt about unbacked values (``torch.zeros(n)`` needs ``n >= 0``)
        are checked by the graph itself at run time, as torch.compile does: they are no guards
        (no input decides them), and a backend may rely on them."""
        if self.unbacked:
            from torch.fx.passes.runtime_assert import insert_deferred_runtime_asserts
            insert_deferred_runtime_asserts(gm, self.shape_env, name)

    # ---- guards -------------------------------------------------------------------------------

    def check_marked(self):
        for source, _, fake, marked in self.tensors:
            for d in sorted(marked):
                size = fake.size(d)
                value = size.node.maybe_as_int() if isinstance(size, torch.SymInt) else size
                if value is None or value in (0, 1):
                    continue
                where = self.shape_env.pyd_where.get(marked[d])
                raise ConstraintViolationError(
                    f"{source.name()}.size()[{d}] was marked dynamic (pydynamo.mark_dynamic) but the "
                    f"program specialized it to the constant {value}"
                    + (f" at {where}" if where else "")
                    + "; remove mark_dynamic, or keep the size symbolic there")

    def add_guards(self, guards):
        """Add to GuardBuilder ``guards``: TENSOR_MATCH for the symbolic inputs (sizes and strides
        that stayed constant are checked there, the symbolic ones are None) and one SHAPE_ENV
        check with every fact the ShapeEnv holds."""
        for i, (source, value, fake, _) in enumerate(self.tensors):
            if i not in self.contexts:  # (a jagged NestedTensor's: subclasses.guard_subclass)
                guards.TENSOR_MATCH(source, value, sizes=concrete_ints(fake.size()), strides=concrete_ints(fake.stride()))
        for source, _ in self.ints:
            guards.TYPE_MATCH(source, 0)
        placeholders = [fake for _, _, fake, _ in self.tensors] + [sym for _, sym in self.ints]
        sources = [_Src(ident) for ident in self._names]
        contexts = [self.contexts.get(i) for i in range(len(placeholders))]
        exprs = self.shape_env.produce_guards(placeholders, sources, input_contexts=contexts)
        if exprs:
            compiler = _FactCompiler(self._names)
            facts = tuple((compiler.compile(e), compiler.text(e)) for e in exprs)
            guards.SHAPE_ENV(tuple(compiler.bindings), facts)


def _tracks_outer_optional():
    """Whether this torch's SubclassSymbolicContext can leave a subclass's outer sizes untracked
    (``track_outer_size_stride``, torch 2.12): a jagged NestedTensor's are its nested ints."""
    import inspect
    from torch.fx.experimental.symbolic_shapes import SubclassSymbolicContext
    return "track_outer_size_stride" in inspect.signature(SubclassSymbolicContext).parameters


_TRACKS_OUTER_OPTIONAL = _tracks_outer_optional()


# a jagged NestedTensor's cached min/max sequence lengths, held as the size of a tensor: symbolic
# from the first call (a new batch's lengths do not recompile)
_SEQLEN_ATTRS = ("_min_seqlen_tensor", "_max_seqlen_tensor")


def _is_nested_int(s):
    return isinstance(s, torch.SymInt) and s.node.is_nested_int()


def has_nested_int(value):
    """A jagged NestedTensor (a wrapper subclass whose outer sizes hold a nested int)."""
    if type(value) is torch.Tensor or not is_traceable_wrapper_subclass(value):
        return False
    with torch._C.DisableTorchFunctionSubclass():
        return any(_is_nested_int(s) for s in value.size())


def concrete_ints(ints):
    out = []
    for s in ints:
        if isinstance(s, torch.SymInt):
            s = s.node.maybe_as_int()
        out.append(s)
    return tuple(out)


_BINOPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.FloorDiv: "//", ast.Mod: "%", ast.Pow: "**"}
_CMPOPS = {ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">="}
_IDENT = re.compile(r"__s\d+")


class _FactCompiler:
    """produce_guards' Python expressions -> postfix programs over bindings (see _C.pyi)."""

    def __init__(self, names):
        self.names = names
        self.bindings, self._index = [], {}

    def text(self, expr):
        return _IDENT.sub(lambda m: self.names[m.group(0)].name(), expr)

    def compile(self, expr):
        out = []
        self._emit(ast.parse(expr, mode="eval").body, out)
        return tuple(out)

    def _bind(self, base, prop, dim):
        ident, attrs = base
        if ident not in self.names:
            raise ShapeGuardUnsupported(f"unknown source {ident}")
        key = (ident, attrs, prop, dim)
        if key not in self._index:
            self._index[key] = len(self.bindings)
            self.bindings.append((self.names[ident].steps() + tuple(("a", a) for a in attrs), prop, dim))
        return ("v", self._index[key])

    @staticmethod
    def _base(node):
        """``__sN`` or an inner tensor of one (``__sN._values``: a subclass input's, read by
        attribute as its flatten protocol names it): (ident, attribute names), or None."""
        attrs = []
        while isinstance(node, ast.Attribute):
            attrs.append(node.attr)
            node = node.value
        return (node.id, tuple(reversed(attrs))) if isinstance(node, ast.Name) else None

    def _read(self, node):
        """A binding read: __sN, __sN.size()[i], __sN.stride()[i], __sN.storage_offset() (of
        __sN or of an inner tensor, __sN._values.size()[i])."""
        if isinstance(node, ast.Name):
            return self._bind((node.id, ()), "int", 0)
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Call) \
                and isinstance(node.value.func, ast.Attribute) and isinstance(node.slice, ast.Constant) \
                and node.value.func.attr in ("size", "stride") and self._base(node.value.func.value) is not None:
            return self._bind(self._base(node.value.func.value), node.value.func.attr, node.slice.value)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr == "storage_offset" and self._base(node.func.value) is not None:
            return self._bind(self._base(node.func.value), "storage_offset", 0)
        return None

    def _emit(self, node, out):
        read = self._read(node)
        if read is not None:
            out.append(read)
        elif isinstance(node, ast.Constant) and type(node.value) in (int, bool):
            out.append(("c", int(node.value)))
        elif isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            self._emit(node.left, out)
            self._emit(node.right, out)
            out.append((_BINOPS[type(node.op)],))
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.Not, ast.UAdd)):
            self._emit(node.operand, out)
            if not isinstance(node.op, ast.UAdd):
                out.append(("neg",) if isinstance(node.op, ast.USub) else ("not",))
        elif isinstance(node, ast.Compare) and all(type(op) in _CMPOPS for op in node.ops):
            left = node.left
            for i, (op, right) in enumerate(zip(node.ops, node.comparators)):
                self._emit(left, out)
                self._emit(right, out)
                out.append((_CMPOPS[type(op)],))
                if i:
                    out.append(("and",))
                left = right
        elif isinstance(node, ast.BoolOp):
            for i, value in enumerate(node.values):
                self._emit(value, out)
                if i:
                    out.append(("and" if isinstance(node.op, ast.And) else "or",))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords \
                and node.func.id in ("min", "max", "abs") and node.args:
            for i, arg in enumerate(node.args):
                self._emit(arg, out)
                if i or node.func.id == "abs":
                    out.append((node.func.id,))
        else:
            raise ShapeGuardUnsupported(f"shape guard {ast.unparse(node)!r}")


def is_symbolic_value(value):
    return isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)) and is_symbolic(value)
