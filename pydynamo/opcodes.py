"""One handler per opcode, named exactly like it, in roughly dis order (3.11 to 3.13 names).

Handlers only move trackers around and delegate the meaning of values to the trackers
(``call_function``, ``call_method``, ``var_getattr``, ``truth``...). Opcodes we know we do not
support are listed in ``UNSUPPORTED`` with the reason given to the user.
"""
import inspect
import operator

from . import bytecode_utils as bu
from .exc import ExceptionRaised, SideEffectError, Unsupported, UnsupportedOpcodeError
from .source import GlobalSource
from .variables.base import NULL, CellVariable, NullVariable
from .variables.builder import wrap_constant
from .variables.builtin import call_builtin
from .variables.constant import ConstantVariable
from .variables.ctx import ContextManagerVariable, WithExitVariable
from .variables.dicts import DictVariable
from .variables.exceptions import (ExceptionClassVariable, ExceptionVariable, as_exception,
                                  exception_matches)
from .variables.functions import (GeneratorVariable, NestedUserFunctionVariable, UserFunctionVariable,
                                  UserMethodVariable, next_item)
from .variables.lists import ListVariable, SliceVariable, TupleVariable
from .variables.sets import SetVariable
from .variables.class_statement import BuildClassVariable, ClassNamespaceVariable
from .variables.objects import UserContextExit, UserDefinedObjectVariable
from .variables.user_defined import SuperVariable

UNSUPPORTED = {
    "CHECK_EG_MATCH": "exception groups",
    "CLEANUP_THROW": "throwing into a generator",
    "GET_AWAITABLE": "coroutines",
    "GET_AITER": "async iteration",
    "GET_ANEXT": "async iteration",
    "END_ASYNC_FOR": "async iteration",
    "BEFORE_ASYNC_WITH": "async with",
    "IMPORT_STAR": "import statements inside compiled code",
    "DELETE_GLOBAL": "deleting a global (a side effect)",
    "DELETE_DEREF": "deleting a closure variable",
    "PRINT_EXPR": "interactive mode",
    "LOAD_FROM_DICT_OR_GLOBALS": "class bodies",
    "CALL_INTRINSIC_2": "generic functions and exception groups",
}

_BINARY = {"ADD": operator.add, "AND": operator.and_, "FLOOR_DIVIDE": operator.floordiv,
           "LSHIFT": operator.lshift, "MATRIX_MULTIPLY": operator.matmul,
           "MULTIPLY": operator.mul, "REMAINDER": operator.mod, "OR": operator.or_,
           "POWER": operator.pow, "RSHIFT": operator.rshift, "SUBTRACT": operator.sub,
           "TRUE_DIVIDE": operator.truediv, "XOR": operator.xor,
           "INPLACE_ADD": operator.iadd, "INPLACE_AND": operator.iand,
           "INPLACE_FLOOR_DIVIDE": operator.ifloordiv, "INPLACE_LSHIFT": operator.ilshift,
           "INPLACE_MATRIX_MULTIPLY": operator.imatmul, "INPLACE_MULTIPLY": operator.imul,
           "INPLACE_REMAINDER": operator.imod, "INPLACE_OR": operator.ior,
           "INPLACE_POWER": operator.ipow, "INPLACE_RSHIFT": operator.irshift,
           "INPLACE_SUBTRACT": operator.isub, "INPLACE_TRUE_DIVIDE": operator.itruediv,
           "INPLACE_XOR": operator.ixor}
_COMPARE = {"LT": operator.lt, "LE": operator.le, "EQ": operator.eq, "NE": operator.ne,
            "GT": operator.gt, "GE": operator.ge}


def store_attr(tx, obj, name, value):
    """``obj.name = value``: a user object follows Python's protocol (objects.py); a module's
    plain attribute store is replayed (STORE_ATTR); anything else is refused."""
    from .variables.nn_module import CreatedModuleVariable
    from .variables.autograd_function import AutogradCtxVariable
    from .variables.tensor import TensorVariable
    if isinstance(obj, (UserDefinedObjectVariable, CreatedModuleVariable, AutogradCtxVariable, TensorVariable)):
        return obj.store_attr(tx, name, value)
    from .variables.user_defined import UserDefinedClassVariable, store_class_attr
    if type(obj) is UserDefinedClassVariable:
        return store_class_attr(tx, obj, name, value)
    if isinstance(obj, NestedUserFunctionVariable) and value.is_python_constant() and (
            not (name.startswith("__") and name.endswith("__")) or name in ("__isabstractmethod__", "__doc__")):
        obj.attrs[name] = value  # a function made in the trace: it is then not rebuilt at run time
        return ConstantVariable(None)
    check_attr_store(obj, name, value)
    if obj.source is not None:  # what the store finds in the module (check_attr_store): this one's
        tx.output.guards.ID_MATCH(obj.source, obj.module)
    if name in obj.module.__dict__.get("_buffers", {}):
        tx.output.guards.PREDICATE(None, _no_buffer_hooks, "no global buffer registration hooks")
        tx.output.side_effects.buffer_stores.add(id(obj.module))
    tx.output.side_effects.store_attr(obj, name, value)
    return ConstantVariable(None)


def _no_buffer_hooks():
    from torch.nn.modules import module as module_mod
    return not module_mod._global_buffer_registration_hooks


def check_attr_store(obj, name, value):
    """Attribute stores we replay on modules: plain attributes of pre-existing ones, and a
    buffer given a new tensor (``self.pos_enc = ...``: Module.__setattr__ puts it in _buffers)."""
    from .variables.nn_module import NNModuleVariable
    if isinstance(obj, NNModuleVariable):
        mod = obj.module
        plain = not any(name in mod.__dict__.get(t, {}) for t in ("_parameters", "_buffers", "_modules")) \
            and not isinstance(value, NNModuleVariable) and not hasattr(
                inspect.getattr_static(type(mod), name, None), "__set__")
        plain = plain or _buffer_store(mod, name, value)
    else:
        plain = False
    if not plain or obj.source is None:
        raise SideEffectError(f"assignment to attribute {name!r} of {obj}")


def _buffer_store(mod, name, value):
    """``mod.name = tensor`` where ``name`` is a buffer: nn.Module.__setattr__ (not overridden)
    stores a plain tensor (not a Parameter, which would become a parameter) in ``_buffers``
    when no global buffer registration hook could change it (their absence is guarded by the
    caller). Reads of the module's tables after it are refused (NNModuleVariable)."""
    import torch
    from torch.nn.modules import module as module_mod
    from .variables.tensor import TensorVariable
    return name in mod.__dict__.get("_buffers", {}) and name not in mod.__dict__ \
        and type(mod).__setattr__ is torch.nn.Module.__setattr__ \
        and isinstance(value, TensorVariable) and not issubclass(value.python_type(), torch.nn.Parameter) \
        and not module_mod._global_buffer_registration_hooks \
        and not hasattr(inspect.getattr_static(type(mod), name, None), "__set__")


class OpcodeHandlers:
    """Mixed into the translators; ``self`` has the stack, locals, cells and output."""

    # ---- bookkeeping --------------------------------------------------------------------------

    def NOP(self, inst):
        pass

    RESUME = CACHE = EXTENDED_ARG = PRECALL = NOP

    def POP_TOP(self, inst):
        self.pop()

    def PUSH_NULL(self, inst):
        self.push(NULL)

    def COPY(self, inst):
        self.push(self.stack[-inst.arg])

    def SWAP(self, inst):
        i = inst.arg
        self.stack[-1], self.stack[-i] = self.stack[-i], self.stack[-1]

    def KW_NAMES(self, inst):
        self.kw_names = tuple(inst.arg)

    def MAKE_CELL(self, inst):
        name = bu.var_name(inst.arg)
        self.cells[name] = CellVariable(self.symbolic_locals.pop(name, None))

    def COPY_FREE_VARS(self, inst):
        pass  # the translators set up free-variable cells before running

    # ---- loads and stores ---------------------------------------------------------------------

    def LOAD_CONST(self, inst):
        self.push(wrap_constant(inst.arg))

    def RETURN_CONST(self, inst):
        self.return_value(wrap_constant(inst.arg))

    def LOAD_FAST(self, inst):
        self._load_fast(inst.arg)

    LOAD_FAST_CHECK = LOAD_FAST

    def LOAD_FAST_AND_CLEAR(self, inst):
        if bu.is_cell_arg(inst.arg, self.code):  # a comprehension saves the slot: the cell itself
            return self.push(self.cells.pop(bu.var_name(inst.arg), NULL))
        self.push(self.symbolic_locals.pop(inst.arg, NULL))

    def STORE_FAST(self, inst):
        self._store_fast(inst.arg, self.pop())

    def _store_fast(self, name, value):
        if bu.is_cell_arg(name, self.code):  # a comprehension restores the slot of a cell
            if isinstance(value, NullVariable):
                self.cells.pop(bu.var_name(name), None)
            elif isinstance(value, CellVariable):
                self.cells[bu.var_name(name)] = value
            else:
                raise UnsupportedOpcodeError(f"opcode {self.current.opname} is not supported "
                                             f"on the cell {bu.var_name(name)!r}")
            return
        if isinstance(value, NullVariable):  # 3.12+ comprehensions restore an unbound name
            self.symbolic_locals.pop(name, None)
        else:
            self.symbolic_locals[name] = value

    def _load_fast(self, name):
        if bu.is_cell_arg(name, self.code):  # 3.13: the cell itself, for a closure (LOAD_CLOSURE)
            if bu.var_name(name) not in self.cells:
                raise UnsupportedOpcodeError(f"opcode {self.current.opname} is not supported on "
                                             f"the cleared slot of cell {bu.var_name(name)!r}")
            return self.push(self.cells[bu.var_name(name)])
        if name not in self.symbolic_locals:
            raise Unsupported(f"UnboundLocalError: local variable {name!r} is not bound")
        self.push(self.symbolic_locals[name])

    def LOAD_FAST_LOAD_FAST(self, inst):
        """3.13: push the first local, then the second."""
        first, second = inst.arg
        self._load_fast(first)
        self._load_fast(second)

    def STORE_FAST_STORE_FAST(self, inst):
        """3.13: the top of the stack into the first local, the next into the second."""
        first, second = inst.arg
        self._store_fast(first, self.pop())
        self._store_fast(second, self.pop())

    def STORE_FAST_LOAD_FAST(self, inst):
        """3.13: the top of the stack into the first local, then push the second."""
        first, second = inst.arg
        self._store_fast(first, self.pop())
        self._load_fast(second)

    def DELETE_FAST(self, inst):
        if bu.is_cell_arg(inst.arg, self.code):
            raise UnsupportedOpcodeError(f"opcode DELETE_FAST is not supported on the cell "
                                         f"{bu.var_name(inst.arg)!r}")
        self.symbolic_locals.pop(inst.arg, None)

    def push_callable(self, var, with_null):
        """Push ``var``, with the NULL of a call beside it where the version puts it."""
        self.stack.extend(bu.with_null([var], NULL) if with_null else [var])

    def LOAD_GLOBAL(self, inst):
        push_null, name = bu.global_arg(inst)
        self.push_callable(self.load_global(name), push_null)

    def LOAD_DEREF(self, inst):
        self.push(self.cells[bu.var_name(inst.arg)].read(self))

    def STORE_DEREF(self, inst):
        self.cells[bu.var_name(inst.arg)].write(self, self.pop())

    def LOAD_CLOSURE(self, inst):
        self.push(self.cells[bu.var_name(inst.arg)])

    def LOAD_ATTR(self, inst):
        is_method, name = bu.attr_arg(inst)
        obj = self.pop()
        # a method load: the bound attribute and a NULL, the call's [callable, NULL] form
        self.push_callable(self.getattr(obj, name), is_method)

    def LOAD_SUPER_ATTR(self, inst):
        """3.12+: ``super().name`` in one instruction, from [super, __class__, self]."""
        is_method, name = bu.super_attr_arg(inst)
        obj, cls = self.pop(), self.pop()
        self.pop()  # the global `super`
        self.push_callable(self.getattr(SuperVariable(cls, obj), name), is_method)

    def LOAD_METHOD(self, inst):
        obj = self.pop()
        self.push(NULL)  # the bound attribute is the callable; CALL sees [NULL, callable]
        self.push(self.getattr(obj, inst.arg))

    def getattr(self, obj, name):
        """``obj.name``, seeing attribute stores made earlier in the trace."""
        stored = self.output.side_effects.load_attr(self, obj, name)
        return stored if stored is not None else obj.var_getattr(self, name)

    def STORE_ATTR(self, inst):
        obj, value = self.pop(), self.pop()
        store_attr(self, obj, inst.arg, value)

    def DELETE_ATTR(self, inst):
        obj = self.pop()
        if not isinstance(obj, UserDefinedObjectVariable):
            raise SideEffectError(f"deletion of attribute {inst.arg!r} of {obj}")
        obj.delete_attr(self, inst.arg)

    def STORE_GLOBAL(self, inst):
        value = self.pop()
        if self.globals_source is not GlobalSource or self.f_globals is not self.root_globals():
            raise SideEffectError(f"assignment to global {inst.arg!r} of another module")
        self.output.side_effects.store_global(inst.arg, value)

    # ---- operators ----------------------------------------------------------------------------

    def _call_op(self, fn, *args):
        return call_builtin(self, fn, list(args), {}, from_opcode=True)

    def BINARY_OP(self, inst):
        b, a = self.pop(), self.pop()
        self.push(self._call_op(_BINARY[bu.binary_op_name(inst)], a, b))

    def COMPARE_OP(self, inst):
        b, a = self.pop(), self.pop()
        result = self._call_op(_COMPARE[bu.compare_op_name(inst)], a, b)
        self.push(self._to_bool(inst, result) if bu.compare_to_bool(inst) else result)

    def _to_bool(self, inst, value):
        """``bool(value)`` (3.13's TO_BOOL, COMPARE_OP's bool bit). Before a jump on its truth
        the value itself stands for it: the jump tests the same truth (once), and a graph break
        there runs TO_BOOL natively first (bytecode_utils.create_pop_jump), so a tensor
        condition breaks the graph at the jump, as in earlier versions."""
        following = inst.index + 1
        jump = bu.conditional_jump(self.instructions[following]) \
            if following < len(self.instructions) else None
        if jump is not None and not jump[1]:
            return value
        return self._call_op(bool, value)

    def TO_BOOL(self, inst):
        self.push(self._to_bool(inst, self.pop()))

    def IS_OP(self, inst):
        b, a = self.pop(), self.pop()
        self.push(self._call_op(operator.is_not if inst.arg else operator.is_, a, b))

    def CONTAINS_OP(self, inst):
        container, item = self.pop(), self.pop()
        result = self._call_op(operator.contains, container, item)
        if inst.arg:
            result = ConstantVariable(not result.truth(self))
        self.push(result)

    def UNARY_NEGATIVE(self, inst):
        self.push(self._call_op(operator.neg, self.pop()))

    def UNARY_POSITIVE(self, inst):
        self.push(self._call_op(operator.pos, self.pop()))

    def UNARY_NOT(self, inst):
        self.push(self._call_op(operator.not_, self.pop()))

    def UNARY_INVERT(self, inst):
        self.push(self._call_op(operator.invert, self.pop()))

    def CALL_INTRINSIC_1(self, inst):
        name = bu.intrinsic_name(inst)
        if name == "INTRINSIC_UNARY_POSITIVE":
            return self.UNARY_POSITIVE(inst)
        if name == "INTRINSIC_LIST_TO_TUPLE":
            return self.LIST_TO_TUPLE(inst)
        if name == "INTRINSIC_STOPITERATION_ERROR":  # 3.12 generators: others pass unchanged
            if issubclass(self.stack[-1].python_type(), (StopIteration, StopAsyncIteration)):
                raise Unsupported("StopIteration raised inside a generator (Python turns it "
                                  "into a RuntimeError)")
            return
        raise Unsupported(f"CALL_INTRINSIC_1 {name}")

    # ---- subscripts ---------------------------------------------------------------------------

    def BINARY_SUBSCR(self, inst):
        index, obj = self.pop(), self.pop()
        self.push(self._call_op(operator.getitem, obj, index))

    def STORE_SUBSCR(self, inst):
        index, obj, value = self.pop(), self.pop(), self.pop()
        self._call_op(operator.setitem, obj, index, value)

    def DELETE_SUBSCR(self, inst):
        index, obj = self.pop(), self.pop()
        self._call_op(operator.delitem, obj, index)

    def BINARY_SLICE(self, inst):
        stop, start, obj = self.pop(), self.pop(), self.pop()
        self.push(self._call_op(operator.getitem, obj, SliceVariable(start, stop, ConstantVariable(None))))

    def STORE_SLICE(self, inst):
        stop, start, obj, value = self.pop(), self.pop(), self.pop(), self.pop()
        self._call_op(operator.setitem, obj, SliceVariable(start, stop, ConstantVariable(None)), value)

    # ---- building -----------------------------------------------------------------------------

    def BUILD_TUPLE(self, inst):
        self.push(TupleVariable(self.popn(inst.arg)))

    def BUILD_LIST(self, inst):
        self.push(ListVariable(self.popn(inst.arg)))

    def BUILD_MAP(self, inst):
        flat = self.popn(2 * inst.arg)
        d = DictVariable({})
        for k, v in zip(flat[::2], flat[1::2]):
            d.call_method(self, "__setitem__", [k, v], {})
        self.push(d)

    def BUILD_CONST_KEY_MAP(self, inst):
        keys = self.pop().as_python_constant()
        values = self.popn(inst.arg)
        self.push(DictVariable(dict(zip(keys, values))))

    def BUILD_SET(self, inst):
        self.push(SetVariable.build(self, self.popn(inst.arg)))

    def BUILD_SLICE(self, inst):
        parts = self.popn(inst.arg)
        if len(parts) == 2:
            parts.append(ConstantVariable(None))
        self.push(SliceVariable(*parts))

    def BUILD_STRING(self, inst):
        parts = self.popn(inst.arg)
        self.push(ConstantVariable("".join(p.as_python_constant() for p in parts)))

    def FORMAT_VALUE(self, inst):
        """3.11, 3.12: an f-string field, its conversion and spec in one instruction."""
        spec = self.pop().as_python_constant() if inst.arg & 0x04 else ""
        value = self._convert(self.pop(), bu.convert_flag(inst))
        self.push(self._format(value, spec))

    def CONVERT_VALUE(self, inst):
        """3.13: an f-string field's !s, !r or !a."""
        self.push(self._convert(self.pop(), bu.convert_flag(inst)))

    def FORMAT_SIMPLE(self, inst):
        """3.13: an f-string field without a spec: format(value, '') (a str stays as it is)."""
        self.push(self._format(self.pop(), ""))

    def FORMAT_WITH_SPEC(self, inst):
        spec = self.pop().as_python_constant()
        self.push(self._format(self.pop(), spec))

    def _convert(self, value, conversion):
        if conversion == 0:
            return value
        fn = {1: str, 2: repr, 3: ascii}[conversion]
        if hasattr(value, "as_string") and fn is not ascii:
            return value.as_string(fn)  # f"{exc!r}"
        if not value.is_python_constant():
            raise Unsupported(f"formatting {value} into a string (with {fn.__name__}())")
        return ConstantVariable(fn(value.as_python_constant()))

    def _format(self, value, spec):
        if hasattr(value, "as_string") and not spec:
            return value.as_string(str)  # f"{exc}": BaseException formats as str()
        if not value.is_python_constant():
            raise Unsupported(f"formatting {value} into a string")
        return ConstantVariable(format(value.as_python_constant(), spec))

    def LIST_APPEND(self, inst):
        value = self.pop()
        self.stack[-inst.arg].call_method(self, "append", [value], {})

    def LIST_EXTEND(self, inst):
        value = self.pop()
        self.stack[-inst.arg].call_method(self, "extend", [value], {})

    def LIST_TO_TUPLE(self, inst):
        self.push(TupleVariable(self.pop().unpack_var_sequence(self)))

    def SET_ADD(self, inst):
        value = self.pop()
        self.stack[-inst.arg].call_method(self, "add", [value], {})

    def SET_UPDATE(self, inst):
        value = self.pop()
        self.stack[-inst.arg].call_method(self, "update", [value], {})

    def MAP_ADD(self, inst):
        value, key = self.pop(), self.pop()
        self.stack[-inst.arg].call_method(self, "__setitem__", [key, value], {})

    def DICT_UPDATE(self, inst):
        other = self.pop()
        self.stack[-inst.arg].call_method(self, "update", [other], {})

    def DICT_MERGE(self, inst):
        other = self.pop()
        target = self.stack[-inst.arg]
        if isinstance(other, DictVariable) and set(other.items) & set(target.items):
            raise Unsupported("TypeError: got multiple values for a keyword argument")
        target.call_method(self, "update", [other], {})

    def UNPACK_SEQUENCE(self, inst):
        items = self.pop().unpack_var_sequence(self)
        if len(items) != inst.arg:
            raise Unsupported(f"ValueError: unpacking {len(items)} values into {inst.arg}")
        self.stack.extend(reversed(items))

    def UNPACK_EX(self, inst):
        before, after = inst.arg & 0xFF, inst.arg >> 8
        items = self.pop().unpack_var_sequence(self)
        if len(items) < before + after:
            raise Unsupported(f"ValueError: not enough values to unpack ({len(items)})")
        rest = ListVariable(items[before:len(items) - after])
        self.stack.extend(reversed([*items[:before], rest, *items[len(items) - after:]]))

    # ---- class bodies (class_statement.py) ----------------------------------------------------

    def LOAD_BUILD_CLASS(self, inst):
        self.push(BuildClassVariable())

    def _namespace(self, what):
        if getattr(self, "namespace", None) is None:
            raise UnsupportedOpcodeError(f"{what}: module bodies")
        return self.namespace

    def LOAD_NAME(self, inst):
        ns = self._namespace("LOAD_NAME")
        name = inst.arg
        self.push(ns[name] if name in ns else self.load_global(name))

    def STORE_NAME(self, inst):
        self._namespace("STORE_NAME")[inst.arg] = self.pop()

    def DELETE_NAME(self, inst):
        ns = self._namespace("DELETE_NAME")
        if inst.arg not in ns:
            raise Unsupported(f"NameError: name {inst.arg!r} is not defined")
        del ns[inst.arg]

    def SETUP_ANNOTATIONS(self, inst):
        ns = self._namespace("SETUP_ANNOTATIONS")
        if "__annotations__" not in ns:
            ns["__annotations__"] = DictVariable({})

    def LOAD_CLASSDEREF(self, inst):
        """3.11: a free variable of a class body: the namespace first, then the cell."""
        ns, name = self._namespace("LOAD_CLASSDEREF"), bu.var_name(inst.arg)
        self.push(ns[name] if name in ns else self.cells[name].read(self))

    def LOAD_LOCALS(self, inst):
        self.push(ClassNamespaceVariable(self._namespace("LOAD_LOCALS")))

    def LOAD_FROM_DICT_OR_DEREF(self, inst):
        """3.12+: a free variable of a class body, the namespace (LOAD_LOCALS) given."""
        mapping, name = self.pop(), bu.var_name(inst.arg)
        if not isinstance(mapping, ClassNamespaceVariable):
            raise Unsupported("LOAD_FROM_DICT_OR_DEREF outside a class body")
        ns = mapping.namespace
        self.push(ns[name] if name in ns else self.cells[name].read(self))

    # ---- functions and calls ------------------------------------------------------------------

    def MAKE_FUNCTION(self, inst):
        code = self.pop().as_python_constant()
        flags = bu.make_function_flags(inst)
        closure = self.pop() if flags & 0x08 else None
        annotations = self.pop() if flags & 0x04 else None
        kwdefaults = self.pop() if flags & 0x02 else None
        defaults = self.pop() if flags & 0x01 else None
        self.push(NestedUserFunctionVariable(code, self.f_globals, self.globals_source,
                                             defaults, kwdefaults, closure, annotations))

    def SET_FUNCTION_ATTRIBUTE(self, inst):
        """3.13: give the function MAKE_FUNCTION just made its defaults (0x01), keyword
        defaults (0x02), annotations (0x04) or closure (0x08)."""
        fn, value = self.pop(), self.pop()
        flag = inst.arg
        if not isinstance(fn, NestedUserFunctionVariable) or fn.attrs:
            raise Unsupported(f"SET_FUNCTION_ATTRIBUTE on {fn}")
        if flag == 0x01:
            fn.defaults = value.items
        elif flag == 0x02:
            fn.kwdefaults = value.items
        elif flag == 0x04:
            fn.annotations = value
        elif flag == 0x08:
            fn.closure = value.items
        else:
            raise Unsupported(f"SET_FUNCTION_ATTRIBUTE {flag:#x}")
        self.push(fn)

    def CALL(self, inst):
        kw_names, self.kw_names = self.kw_names, ()  # KW_NAMES before it (3.12)
        self._call(inst.arg, kw_names)

    def CALL_KW(self, inst):
        """3.13: a call whose last arguments are by keyword, their names in a tuple on top."""
        kw_names = self.pop().as_python_constant()
        if type(kw_names) is not tuple:
            raise Unsupported(f"CALL_KW with keyword names {kw_names!r}")
        self._call(inst.arg, kw_names)

    def _call(self, nargs, kw_names):
        args = self.popn(nargs)
        above, below = self.pop(), self.pop()
        fn, self_arg = bu.call_slots(below, above, lambda v: isinstance(v, NullVariable))
        if self_arg is not None:  # [callable, self, *args]
            args = [self_arg, *args]
        kwargs = {}
        if kw_names:
            n = len(kw_names)
            kwargs = dict(zip(kw_names, args[len(args) - n:]))
            args = args[:len(args) - n]
        self.push(self.call_from_opcode(fn, args, kwargs))

    def CALL_FUNCTION_EX(self, inst):
        kwargs_var = self.pop() if inst.arg & 0x01 else None
        args_var = self.pop()
        above, below = self.pop(), self.pop()
        fn, self_arg = bu.call_slots(below, above, lambda v: isinstance(v, NullVariable))
        if self_arg is not None:
            raise Unsupported("CALL_FUNCTION_EX without NULL beside the callable")
        args = args_var.unpack_var_sequence(self)
        kwargs = {}
        if kwargs_var is not None:
            if not isinstance(kwargs_var, DictVariable):
                raise Unsupported(f"**{kwargs_var} in a call")
            kwargs = dict(kwargs_var.items)
        self.push(self.call_from_opcode(fn, args, kwargs))

    def call_from_opcode(self, fn, args, kwargs):
        """A call made by CALL: where the callee is a Python function (or a module's forward),
        what it raises reaches this frame unchanged (see inline_call)."""
        from .variables.ctx import ContextDecoratedVariable
        from .variables.nn_module import NNModuleVariable
        self.transparent_call = isinstance(fn, (UserFunctionVariable, UserMethodVariable,
                                                NestedUserFunctionVariable, NNModuleVariable,
                                                ContextDecoratedVariable))
        try:
            return self.call_function(fn, args, kwargs)
        finally:
            self.transparent_call = False

    def RETURN_VALUE(self, inst):
        self.return_value(self.pop())

    # ---- generators (inlined lazily; see GeneratorVariable) -----------------------------------

    def RETURN_GENERATOR(self, inst):
        self.push(ConstantVariable(None))  # what the first resumption finds (then POP_TOP)

    def YIELD_VALUE(self, inst):
        value = self.pop()
        self.push(ConstantVariable(None))  # the value sent in when resumed: next() sends None
        self.yield_value(value)

    def GET_YIELD_FROM_ITER(self, inst):
        if not isinstance(self.stack[-1], GeneratorVariable):
            self.push(call_builtin(self, iter, [self.pop()], {}, from_opcode=True))

    def SEND(self, inst):
        """``yield from``: the next item of the receiver, or, once it is exhausted, what it
        returned, jumping past the loop (3.11 replaces the receiver with it; 3.12 pushes it for
        END_SEND)."""
        value, receiver = self.pop(), self.stack[-1]
        if not self._is_none(value) or not hasattr(receiver, "next_item"):
            raise Unsupported(f"sending {value} into {receiver}")
        item = next_item(self, receiver)
        if item is not None:
            return self.push(item)
        result = receiver.return_value() if isinstance(receiver, GeneratorVariable) else ConstantVariable(None)
        if bu.PY311:
            self.stack[-1] = result
        else:
            self.push(result)
        self.jump_to(inst.target)

    def END_SEND(self, inst):
        value = self.pop()
        self.pop()
        self.push(value)

    # ---- exceptions (unwinding: TranslatorBase.handle_exception) ------------------------------

    def RAISE_VARARGS(self, inst):
        if inst.arg == 0:  # a bare `raise`: the exception being handled, as it is
            exc = self.current_exception()
            if not isinstance(exc, ExceptionVariable):
                raise Unsupported("a bare `raise` while no exception of the trace is handled")
            raise ExceptionRaised(exc, fresh=False)
        cause = self.pop() if inst.arg == 2 else None
        exc = as_exception(self, self.pop())
        if inst.arg == 2:  # raise exc from cause: a class is instantiated, None clears it
            exc.cause = None if self._is_none(cause) else as_exception(self, cause, "raise ... from")
            exc.suppress_context = True
        raise ExceptionRaised(exc)

    def RERAISE(self, inst):
        exc = self.pop()
        if not isinstance(exc, ExceptionVariable):
            raise Unsupported(f"re-raising {exc}")
        raise ExceptionRaised(exc, fresh=False)

    def PUSH_EXC_INFO(self, inst):
        exc, owner = self.pop(), self.exc_owner()
        self.push(owner.exc_value if owner.exc_value is not None else ConstantVariable(None))
        self.push(exc)
        owner.exc_value = exc

    def POP_EXCEPT(self, inst):
        self.exc_owner().exc_value = self.pop()

    def CHECK_EXC_MATCH(self, inst):
        spec = self.pop().as_python_constant()
        self.push(ConstantVariable(exception_matches(self.stack[-1], spec)))

    def LOAD_ASSERTION_ERROR(self, inst):
        self.push(ExceptionClassVariable(AssertionError))

    def WITH_EXCEPT_START(self, inst):
        """A `with` block left by an exception: ``__exit__(type, exc, tb)`` under
        [exit, lasti, previous exc_info, exc]. Torch's context managers (ctx.py) restore their
        state and return None (the exception goes on); others would see a traceback: refused."""
        exit_fn = self.stack[-4]
        if not (isinstance(exit_fn, WithExitVariable) and isinstance(exit_fn.ctx, ContextManagerVariable)):
            raise Unsupported(f"a `with` block on {exit_fn} left by an exception")
        self.push(exit_fn.ctx.exit(self))

    # ---- with ---------------------------------------------------------------------------------

    def BEFORE_WITH(self, inst):
        ctx = self.pop()
        if isinstance(ctx, UserDefinedObjectVariable):  # special methods, looked up on the type
            enter, exit_ = ctx.special_method(self, "__enter__"), ctx.special_method(self, "__exit__")
            if enter is None or exit_ is None:
                raise Unsupported(f"TypeError: {ctx} does not support the context manager protocol")
            self.push(UserContextExit(exit_))
            return self.push(enter.call_function(self, [], {}))
        if not isinstance(ctx, ContextManagerVariable):
            raise Unsupported(f"`with` on {ctx} (only torch's context managers and user classes)")
        self.push(WithExitVariable(ctx))
        self.push(ctx.enter(self))

    # ---- match statements ---------------------------------------------------------------------

    def GET_LEN(self, inst):
        self.push(call_builtin(self, len, [self.stack[-1]], {}, from_opcode=True))

    def MATCH_MAPPING(self, inst):
        self.push(ConstantVariable(bool(_type_flags(self.stack[-1]) & _TPFLAGS_MAPPING)))

    def MATCH_SEQUENCE(self, inst):
        self.push(ConstantVariable(bool(_type_flags(self.stack[-1]) & _TPFLAGS_SEQUENCE)))

    def MATCH_KEYS(self, inst):
        """The values of the pattern's keys in the subject (a dict), or None if one is missing."""
        keys, subject = self.stack[-1].as_python_constant(), self.stack[-2]
        if not isinstance(subject, DictVariable) or subject.python_type() is not dict:
            raise Unsupported(f"a mapping pattern on {subject}")
        if len(set(keys)) != len(keys):
            raise Unsupported(f"ValueError: mapping pattern checks duplicate key ({keys!r})")
        if not all(k in subject.items for k in keys):
            return self.push(ConstantVariable(None))
        self.push(TupleVariable([subject.items[k] for k in keys]))

    def MATCH_CLASS(self, inst):
        names = self.pop().as_python_constant()
        cls, subject = self.pop(), self.pop()
        self.push(_match_class(self, subject, cls, inst.arg, names))

    # ---- imports ------------------------------------------------------------------------------

    def IMPORT_NAME(self, inst):
        fromlist, level = self.pop().as_python_constant(), self.pop().as_python_constant()
        self.push(_import_module(self, inst.arg, fromlist, level))

    def IMPORT_FROM(self, inst):
        from .variables.user_defined import PythonModuleVariable
        module = self.stack[-1]
        if not isinstance(module, PythonModuleVariable) or inst.arg not in vars(module.value):
            raise Unsupported(f"from-import of {inst.arg!r}, not an attribute of {module} yet "
                              "(it would import a submodule)")
        self.push(self.getattr(module, inst.arg))

    # ---- iteration ----------------------------------------------------------------------------

    def GET_ITER(self, inst):
        self.push(call_builtin(self, iter, [self.pop()], {}, from_opcode=True))

    def FOR_ITER(self, inst):
        if not hasattr(self.stack[-1], "next_item"):
            raise Unsupported(f"iteration over {self.stack[-1]}")
        item = next_item(self, self.stack[-1])
        if item is not None:
            return self.push(item)
        self.pop()
        self.jump_to(bu.loop_exit(self.instructions, inst.target))

    def END_FOR(self, inst):
        self.popn(bu.END_FOR_POPS)

    # ---- jumps --------------------------------------------------------------------------------

    def JUMP_FORWARD(self, inst):
        self.jump_to(inst.target)

    JUMP_BACKWARD = JUMP_BACKWARD_NO_INTERRUPT = JUMP = JUMP_NO_INTERRUPT = JUMP_FORWARD

    def _pop_jump_if(self, inst, when):
        if self.pop().truth(self) is when:
            self.jump_to(inst.target)

    def POP_JUMP_IF_TRUE(self, inst):
        self._pop_jump_if(inst, True)

    def POP_JUMP_IF_FALSE(self, inst):
        self._pop_jump_if(inst, False)

    POP_JUMP_FORWARD_IF_TRUE = POP_JUMP_BACKWARD_IF_TRUE = POP_JUMP_IF_TRUE
    POP_JUMP_FORWARD_IF_FALSE = POP_JUMP_BACKWARD_IF_FALSE = POP_JUMP_IF_FALSE

    def _is_none(self, var):
        return isinstance(var, ConstantVariable) and var.value is None

    def POP_JUMP_IF_NONE(self, inst):
        if self._is_none(self.pop()):
            self.jump_to(inst.target)

    def POP_JUMP_IF_NOT_NONE(self, inst):
        if not self._is_none(self.pop()):
            self.jump_to(inst.target)

    POP_JUMP_FORWARD_IF_NONE = POP_JUMP_BACKWARD_IF_NONE = POP_JUMP_IF_NONE
    POP_JUMP_FORWARD_IF_NOT_NONE = POP_JUMP_BACKWARD_IF_NOT_NONE = POP_JUMP_IF_NOT_NONE

    def JUMP_IF_TRUE_OR_POP(self, inst):
        if self.stack[-1].truth(self):
            self.jump_to(inst.target)
        else:
            self.pop()

    def JUMP_IF_FALSE_OR_POP(self, inst):
        if not self.stack[-1].truth(self):
            self.jump_to(inst.target)
        else:
            self.pop()


# ---- match statements: CPython's type flags and match_class (ceval.c) ----------------------------

_TPFLAGS_SEQUENCE, _TPFLAGS_MAPPING, _TPFLAGS_MATCH_SELF = 1 << 5, 1 << 6, 1 << 22


def _type_flags(var):
    cls = var.python_type()
    return cls.__flags__ if isinstance(cls, type) else 0


def _match_class(tx, subject, cls_var, nargs, names):
    """``case cls(*positional, **keywords)``: the subject's attributes in pattern order, or
    None where the subject is not an instance or lacks one (an AttributeError in CPython)."""
    from .variables.builtin import has_attr
    cls = cls_var.as_python_constant()
    if not isinstance(cls, type):
        raise Unsupported(f"TypeError: called match pattern must be a class, not {cls!r}")
    if not call_builtin(tx, isinstance, [subject, cls_var], {}).as_python_constant():
        return ConstantVariable(None)
    attrs, wanted = [], list(names)
    if nargs:
        if has_attr(tx, cls_var, "__match_args__"):
            match_args = tx.getattr(cls_var, "__match_args__").as_python_constant()
            if type(match_args) is not tuple or not all(type(n) is str for n in match_args):
                raise Unsupported(f"TypeError: {cls.__name__}.__match_args__ must be a tuple of str")
            match_self = False
        else:
            match_args, match_self = (), bool(cls.__flags__ & _TPFLAGS_MATCH_SELF)
        if (1 if match_self else len(match_args)) < nargs:
            raise Unsupported(f"TypeError: {cls.__name__}() accepts fewer positional sub-patterns "
                              f"than {nargs}")
        if match_self:
            attrs.append(subject)
        else:
            wanted = list(match_args[:nargs]) + wanted
    if len(set(wanted)) != len(wanted):
        raise Unsupported(f"TypeError: {cls.__name__}() got multiple sub-patterns for an attribute")
    for name in wanted:
        if not has_attr(tx, subject, name):
            return ConstantVariable(None)
        attrs.append(tx.getattr(subject, name))
    return TupleVariable(attrs)


# ---- imports --------------------------------------------------------------------------------------

class _ImportedModule:
    """Guard: ``sys.modules[name]`` is still the module the trace imported (so `import` there
    would run no import code and give the same module)."""

    def __init__(self, name, module):
        import weakref
        self.name, self.ref = name, weakref.ref(module)

    def __call__(self):
        import sys
        module = self.ref()
        return module is not None and sys.modules.get(self.name) is module


def _import_module(tx, name, fromlist, level):
    """What IMPORT_NAME gives for a module already imported (PyImport_ImportModuleLevelObject):
    the module itself with a from-list, else the top package of a dotted name. The module is
    read from sys.modules, guarded by identity there, and reached by guards and generated code
    through a global ``__import_<name>`` installed in the frame's globals. Anything that would
    run the import system (a module not imported, or being imported; a from-list naming a
    submodule not yet an attribute; a replaced ``__import__``) is refused."""
    import builtins
    import sys
    from .output_graph import install_global
    from .source import BuiltinSource
    from .variables.builder import wrap_value
    root = tx
    while getattr(root, "parent", None) is not None:
        root = root.parent
    if tx.f_builtins is not root.f_builtins or tx.f_builtins.get("__import__") is not builtins.__import__:
        raise Unsupported("import with a replaced __import__")
    tx.output.guards.ID_MATCH(BuiltinSource("__import__"), builtins.__import__)
    abs_name = name
    if level:
        package = tx.f_globals.get("__package__")
        if not isinstance(package, str) or not package or package.count(".") < level - 1:
            raise Unsupported(f"relative import of {name!r} outside a package")
        if tx.globals_source is not None:
            tx.output.guards.EQUALS_MATCH(tx.globals_source("__package__"), package)
        base = package.rsplit(".", level - 1)[0]
        abs_name = f"{base}.{name}" if name else base
    module = sys.modules.get(abs_name)
    if module is None or getattr(getattr(module, "__spec__", None), "_initializing", False):
        raise Unsupported(f"import of {abs_name!r}, which is not imported yet")
    result_name = abs_name
    if not fromlist and "." in name:  # `import a.b` binds `a`
        front = name.partition(".")[0]
        result_name = front if not level else abs_name[:len(abs_name) - len(name) + len(front)]
    result = sys.modules.get(result_name)
    if result is None:
        raise Unsupported(f"import of {result_name!r}, which is not imported yet")
    for n in {abs_name, result_name}:
        m = sys.modules[n]
        tx.output.guards.PREDICATE(None, _ImportedModule(n, m), f"sys.modules[{n!r}] is {m!r}")
    gname = "__import_" + result_name.replace(".", "_dot_")
    globals_ = tx.root_globals()
    if globals_.get(gname) is not result:
        install_global(globals_, gname, result)
    return wrap_value(tx, result, GlobalSource(gname))
