"""One handler per opcode, named exactly like it, in roughly dis order (3.11 and 3.12 names).

Handlers only move trackers around and delegate the meaning of values to the trackers
(``call_function``, ``call_method``, ``var_getattr``, ``truth``...). Opcodes we know we do not
support are listed in ``UNSUPPORTED`` with the reason given to the user.
"""
import inspect
import operator

from . import bytecode_utils as bu
from .exc import SideEffectError, Unsupported
from .source import GlobalSource
from .variables.base import NULL, CellVariable, NullVariable
from .variables.builder import wrap_constant
from .variables.builtin import call_builtin
from .variables.constant import ConstantVariable
from .variables.ctx import GradModeVariable, WithExitVariable
from .variables.dicts import DictVariable
from .variables.functions import NestedUserFunctionVariable
from .variables.lists import ListVariable, SliceVariable, TupleVariable
from .variables.user_defined import SuperVariable

UNSUPPORTED = {
    "RAISE_VARARGS": "raising an exception",
    "RERAISE": "exception handling",
    "PUSH_EXC_INFO": "exception handling",
    "POP_EXCEPT": "exception handling",
    "CHECK_EXC_MATCH": "exception handling",
    "CHECK_EG_MATCH": "exception groups",
    "CLEANUP_THROW": "generators",
    "LOAD_ASSERTION_ERROR": "a failing assert",
    "SEND": "generators and coroutines",
    "GET_AWAITABLE": "coroutines",
    "GET_AITER": "async iteration",
    "GET_ANEXT": "async iteration",
    "END_ASYNC_FOR": "async iteration",
    "BEFORE_ASYNC_WITH": "async with",
    "GET_YIELD_FROM_ITER": "yield from",
    "IMPORT_NAME": "import statements inside compiled code",
    "IMPORT_FROM": "import statements inside compiled code",
    "IMPORT_STAR": "import statements inside compiled code",
    "DELETE_GLOBAL": "deleting a global (a side effect)",
    "DELETE_ATTR": "attribute deletion (a side effect)",
    "DELETE_DEREF": "deleting a closure variable",
    "LOAD_BUILD_CLASS": "class definitions inside compiled code",
    "SETUP_ANNOTATIONS": "annotations",
    "BUILD_SET": "sets (not supported yet)",
    "SET_ADD": "sets (not supported yet)",
    "SET_UPDATE": "sets (not supported yet)",
    "MATCH_CLASS": "match statements",
    "MATCH_MAPPING": "match statements",
    "MATCH_SEQUENCE": "match statements",
    "MATCH_KEYS": "match statements",
    "GET_LEN": "match statements",
    "PRINT_EXPR": "interactive mode",
    "LOAD_LOCALS": "class bodies",
    "LOAD_CLASSDEREF": "class bodies",
    "LOAD_FROM_DICT_OR_DEREF": "class bodies",
    "LOAD_FROM_DICT_OR_GLOBALS": "class bodies",
    "LOAD_NAME": "module or class bodies",
    "STORE_NAME": "module or class bodies",
    "DELETE_NAME": "module or class bodies",
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


def check_attr_store(obj, name, value):
    """Attribute stores we replay: plain attributes of pre-existing user objects and modules."""
    from .variables.nn_module import NNModuleVariable
    from .variables.user_defined import UserDefinedObjectVariable
    if isinstance(obj, UserDefinedObjectVariable):
        cls = type(obj.value)
        plain = cls.__setattr__ is object.__setattr__ and not hasattr(
            inspect.getattr_static(cls, name, None), "__set__")
    elif isinstance(obj, NNModuleVariable):
        mod = obj.module
        plain = not any(name in mod.__dict__.get(t, {}) for t in ("_parameters", "_buffers", "_modules")) \
            and not isinstance(value, NNModuleVariable) and not hasattr(
                inspect.getattr_static(type(mod), name, None), "__set__")
    else:
        plain = False
    if not plain or obj.source is None:
        raise SideEffectError(f"assignment to attribute {name!r} of {obj}")


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
        if inst.arg not in self.symbolic_locals:
            raise Unsupported(f"UnboundLocalError: local variable {inst.arg!r} is not bound")
        self.push(self.symbolic_locals[inst.arg])

    LOAD_FAST_CHECK = LOAD_FAST

    def LOAD_FAST_AND_CLEAR(self, inst):
        self.push(self.symbolic_locals.pop(inst.arg, NULL))

    def STORE_FAST(self, inst):
        value = self.pop()
        if isinstance(value, NullVariable):  # 3.12 comprehensions restore an unbound name
            self.symbolic_locals.pop(inst.arg, None)
        else:
            self.symbolic_locals[inst.arg] = value

    def DELETE_FAST(self, inst):
        self.symbolic_locals.pop(inst.arg, None)

    def LOAD_GLOBAL(self, inst):
        push_null, name = bu.global_arg(inst)
        if push_null:
            self.push(NULL)
        self.push(self.load_global(name))

    def LOAD_DEREF(self, inst):
        self.push(self.cells[bu.var_name(inst.arg)].read(self))

    def STORE_DEREF(self, inst):
        self.cells[bu.var_name(inst.arg)].write(self, self.pop())

    def LOAD_CLOSURE(self, inst):
        self.push(self.cells[bu.var_name(inst.arg)])

    def LOAD_ATTR(self, inst):
        is_method, name = bu.attr_arg(inst)
        obj = self.pop()
        if is_method:
            self.push(NULL)
        self.push(self.getattr(obj, name))

    def LOAD_SUPER_ATTR(self, inst):
        """3.12: ``super().name`` in one instruction, from [super, __class__, self] on the stack."""
        is_method, name = bu.super_attr_arg(inst)
        obj, cls = self.pop(), self.pop()
        self.pop()  # the global `super`
        if is_method:
            self.push(NULL)
        self.push(self.getattr(SuperVariable(cls, obj), name))

    def LOAD_METHOD(self, inst):
        obj = self.pop()
        self.push(NULL)  # the bound attribute is the callable; CALL sees [NULL, callable]
        self.push(self.getattr(obj, inst.arg))

    def getattr(self, obj, name):
        """``obj.name``, seeing attribute stores made earlier in the trace."""
        stored = self.output.side_effects.load_attr(obj, name)
        return stored if stored is not None else obj.var_getattr(self, name)

    def STORE_ATTR(self, inst):
        obj, value = self.pop(), self.pop()
        check_attr_store(obj, inst.arg, value)
        self.output.side_effects.store_attr(obj, inst.arg, value)

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
        self.push(self._call_op(_COMPARE[bu.compare_op_name(inst)], a, b))

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

    def BUILD_SLICE(self, inst):
        parts = self.popn(inst.arg)
        if len(parts) == 2:
            parts.append(ConstantVariable(None))
        self.push(SliceVariable(*parts))

    def BUILD_STRING(self, inst):
        parts = self.popn(inst.arg)
        self.push(ConstantVariable("".join(p.as_python_constant() for p in parts)))

    def FORMAT_VALUE(self, inst):
        flags = inst.arg
        spec = self.pop().as_python_constant() if flags & 0x04 else ""
        value = self.pop()
        if not value.is_python_constant():
            raise Unsupported(f"formatting {value} into a string")
        v = value.as_python_constant()
        v = {0: lambda x: x, 1: str, 2: repr, 3: ascii}[flags & 0x03](v)
        self.push(ConstantVariable(format(v, spec)))

    def LIST_APPEND(self, inst):
        value = self.pop()
        self.stack[-inst.arg].call_method(self, "append", [value], {})

    def LIST_EXTEND(self, inst):
        value = self.pop()
        self.stack[-inst.arg].call_method(self, "extend", [value], {})

    def LIST_TO_TUPLE(self, inst):
        self.push(TupleVariable(self.pop().unpack_var_sequence(self)))

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

    # ---- functions and calls ------------------------------------------------------------------

    def MAKE_FUNCTION(self, inst):
        code = self.pop().as_python_constant()
        flags = inst.arg
        closure = self.pop() if flags & 0x08 else None
        if flags & 0x04:
            self.pop()  # annotations do not change what the function computes
        kwdefaults = self.pop() if flags & 0x02 else None
        defaults = self.pop() if flags & 0x01 else None
        self.push(NestedUserFunctionVariable(code, self.f_globals, self.globals_source,
                                             defaults, kwdefaults, closure))

    def CALL(self, inst):
        args = self.popn(inst.arg)
        callable_or_self, null_or_callable = self.pop(), self.pop()
        if isinstance(null_or_callable, NullVariable):
            fn = callable_or_self
        else:  # [method, self, *args] layout
            fn, args = null_or_callable, [callable_or_self, *args]
        kwargs = {}
        if self.kw_names:
            n = len(self.kw_names)
            kwargs = dict(zip(self.kw_names, args[len(args) - n:]))
            args = args[:len(args) - n]
            self.kw_names = ()
        self.push(self.call_function(fn, args, kwargs))

    def CALL_FUNCTION_EX(self, inst):
        kwargs_var = self.pop() if inst.arg & 0x01 else None
        args_var, fn = self.pop(), self.pop()
        if not isinstance(self.pop(), NullVariable):
            raise Unsupported("CALL_FUNCTION_EX without NULL below the callable")
        args = args_var.unpack_var_sequence(self)
        kwargs = {}
        if kwargs_var is not None:
            if not isinstance(kwargs_var, DictVariable):
                raise Unsupported(f"**{kwargs_var} in a call")
            kwargs = dict(kwargs_var.items)
        self.push(self.call_function(fn, args, kwargs))

    def RETURN_VALUE(self, inst):
        self.return_value(self.pop())

    # ---- generators (inlined lazily; see GeneratorVariable) -----------------------------------

    def RETURN_GENERATOR(self, inst):
        self.push(ConstantVariable(None))  # what the first resumption finds (then POP_TOP)

    def YIELD_VALUE(self, inst):
        value = self.pop()
        self.push(ConstantVariable(None))  # the value sent in when resumed: next() sends None
        self.yield_value(value)

    # ---- with ---------------------------------------------------------------------------------

    def BEFORE_WITH(self, inst):
        ctx = self.pop()
        if not isinstance(ctx, GradModeVariable):
            raise Unsupported(f"`with` on {ctx} (only torch grad-mode context managers)")
        self.push(WithExitVariable(ctx))
        self.push(ctx.enter(self))

    # ---- iteration ----------------------------------------------------------------------------

    def GET_ITER(self, inst):
        self.push(call_builtin(self, iter, [self.pop()], {}, from_opcode=True))

    def FOR_ITER(self, inst):
        if not hasattr(self.stack[-1], "next_item"):
            raise Unsupported(f"iteration over {self.stack[-1]}")
        item = self.stack[-1].next_item(self)
        if item is not None:
            return self.push(item)
        self.pop()
        target = inst.target
        if self.instructions[target].opname == "END_FOR":
            target += 1  # 3.12: the exhausted iterator skips END_FOR
        self.jump_to(target)

    def END_FOR(self, inst):
        self.popn(2)

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
