"""Everything version-specific about bytecode on the Python side (CPython 3.11, 3.12, 3.13).

Reading: ``decode(code)`` turns a code object into a flat list of ``Inst`` whose jump targets are
indices into that list (the ``bytecode`` package gives labels; we resolve them once), each with
its exception table entry (``ExceptionEntry``: handler, stack depth, lasti).

Writing: the ``create_*`` helpers build ``bytecode.Instr`` lists for the few call conventions
that differ between versions (PRECALL in 3.11, the method bit of LOAD_ATTR from 3.12, the
NULL above the callable, CALL_KW and SET_FUNCTION_ATTRIBUTE in 3.13), and
``assemble(orig_code, body)`` makes a code object with exactly the original arguments, cell and
free variables, letting the ``bytecode`` package compute offsets, stack size and tables.
"""
import dataclasses
import functools
import sys
import types
import weakref
from typing import Any, Optional

import bytecode
from bytecode import Bytecode, CellVar, FreeVar, Instr, Label

PY311 = sys.version_info[:2] == (3, 11)
PY312 = sys.version_info[:2] == (3, 12)
PY313 = sys.version_info[:2] == (3, 13)
if sys.version_info[:2] not in ((3, 11), (3, 12), (3, 13)):
    raise ImportError(f"pydynamo supports CPython 3.11 to 3.13, not {sys.version.split()[0]}")

GENERATOR_FLAGS = 0x20 | 0x80 | 0x100 | 0x200  # GENERATOR, COROUTINE, ITERABLE_COROUTINE, ASYNC_GENERATOR
VARARGS_FLAG = 0x04
VARKEYWORDS_FLAG = 0x08


@dataclasses.dataclass(frozen=True)
class ExceptionEntry:
    """Where an exception raised by an instruction goes (its exception table entry, as in
    CPython's ceval.c): the stack is cut to ``depth``, the raising instruction's offset is
    pushed if ``lasti``, then the exception, and control jumps to instruction ``target``."""
    target: int
    depth: int
    lasti: bool


@dataclasses.dataclass
class Inst:
    """One decoded instruction. ``target`` is the index of the jump target in the list,
    ``exn`` the ExceptionEntry covering it (None: an exception leaves the frame)."""
    opname: str
    arg: Any
    lineno: Optional[int]
    index: int
    target: Optional[int] = None
    exn: Optional[ExceptionEntry] = None

    def __repr__(self):
        tgt = f" -> {self.target}" if self.target is not None else ""
        exn = f" exn->{self.exn.target}[{self.exn.depth}]" if self.exn is not None else ""
        return f"{self.index}: {self.opname} {self.arg!r}{tgt}{exn} (line {self.lineno})"


def decode(code: types.CodeType) -> list:
    """Instructions of ``code`` with label targets resolved to list indices and each one's
    exception table entry (3.11+ try blocks) attached as ``exn``."""
    return list(_decode(code))


_decoded = weakref.WeakKeyDictionary()  # code -> its Insts (shared: nobody changes them)


def _decode(code):
    if code not in _decoded:
        _decoded[code] = _decode_uncached(code)
    return _decoded[code]


def _decode_uncached(code):
    insts, label_at, pending, covered, block = [], {}, [], [], None
    for item in Bytecode.from_code(code, conserve_exception_block_stackdepth=True):
        if isinstance(item, Label):
            label_at[id(item)] = len(insts)
        elif isinstance(item, Instr):
            arg = item.arg if item.require_arg() else None
            inst = Inst(item.name, arg, item.lineno, len(insts))
            if isinstance(arg, Label):
                pending.append(inst)
            if block is not None:
                covered.append((inst, block))
            insts.append(inst)
        elif isinstance(item, bytecode.TryBegin):
            block = item
        elif isinstance(item, bytecode.TryEnd):
            block = None
        # SetLineno carries nothing the translator uses
    for inst in pending:
        inst.target = label_at[id(inst.arg)]
        inst.arg = None
    for inst, block in covered:
        inst.exn = ExceptionEntry(label_at[id(block.target)], block.stack_depth, block.push_lasti)
    return tuple(insts)


def argument_names(code: types.CodeType) -> tuple:
    """Names of the argument slots, in slot order (positional, keyword-only, *args, **kwargs)."""
    n = code.co_argcount + code.co_kwonlyargcount
    n += bool(code.co_flags & VARARGS_FLAG) + bool(code.co_flags & VARKEYWORDS_FLAG)
    return code.co_varnames[:n]


def is_generator(code: types.CodeType) -> bool:
    """Generators, coroutines and async generators: frames that can suspend."""
    return bool(code.co_flags & GENERATOR_FLAGS)


def is_plain_generator(code: types.CodeType) -> bool:
    """A generator function or generator expression (not a coroutine or async generator)."""
    return (code.co_flags & GENERATOR_FLAGS) == 0x20


# ---- decoding instruction arguments ---------------------------------------------------------

def global_arg(inst):
    """LOAD_GLOBAL's (push_null, name) in both versions."""
    push_null, name = inst.arg
    return push_null, name


def attr_arg(inst):
    """LOAD_ATTR's (is_method, name): 3.12+ packs a method bit, 3.11 has LOAD_METHOD instead."""
    if isinstance(inst.arg, tuple):
        return inst.arg
    return False, inst.arg


def super_attr_arg(inst):
    """LOAD_SUPER_ATTR's (is_method, name) (3.12+; 3.11 calls super() and loads the attribute)."""
    is_method, _two_arg_form, name = inst.arg
    return is_method, name


def binary_op_name(inst) -> str:
    """BINARY_OP's operator as the NB_* suffix, e.g. 'ADD', 'INPLACE_MULTIPLY'."""
    return bytecode.BinaryOp(int(inst.arg)).name


def compare_op_name(inst) -> str:
    """COMPARE_OP's operator as 'LT', 'EQ', ... (3.12 stores it shifted, bytecode hides that;
    3.13's variant that converts the result to bool is 'LT_CAST'..., see compare_to_bool)."""
    arg = inst.arg
    name = arg.name if hasattr(arg, "name") else bytecode.Compare(arg).name
    return name[:-len("_CAST")] if name.endswith("_CAST") else name


def compare_to_bool(inst) -> bool:
    """Whether COMPARE_OP converts its result to bool (3.13's oparg bit 16, set where the
    result is only tested: ``if a < b``)."""
    arg = inst.arg
    name = arg.name if hasattr(arg, "name") else bytecode.Compare(arg).name
    return name.endswith("_CAST")


def make_function_flags(inst) -> int:
    """What MAKE_FUNCTION pops besides the code: its flags before 3.13 (0x01 defaults, 0x02
    keyword defaults, 0x04 annotations, 0x08 closure); 3.13's MAKE_FUNCTION pops only the code
    (SET_FUNCTION_ATTRIBUTE adds each part, with the same flag values)."""
    return 0 if PY313 else int(inst.arg)


def convert_flag(inst) -> int:
    """The conversion of FORMAT_VALUE (3.11, 3.12: its low bits) or CONVERT_VALUE (3.13):
    0 none, 1 str, 2 repr, 3 ascii."""
    return int(inst.arg) & 0x03


def loop_exit(insts, target) -> int:
    """Where an exhausted FOR_ITER goes on, given its jump target: 3.12 skips the END_FOR there
    (which pops iterator and item when reached otherwise), 3.13 skips END_FOR and the POP_TOP
    after it (CPython's FOR_ITER jumps by oparg + 2); 3.11 jumps to the target itself."""
    if PY311 or insts[target].opname != "END_FOR":
        return target
    if PY313:
        if insts[target + 1].opname != "POP_TOP":
            raise AssertionError("3.13 FOR_ITER target: END_FOR not followed by POP_TOP")
        return target + 2
    return target + 1


END_FOR_POPS = 1 if PY313 else 2  # 3.13's END_FOR pops the item only (a POP_TOP follows)


def with_null(items, null) -> list:
    """``items`` (the instructions, or the stack slots, that make one callable) together with
    the NULL a call without ``self`` has beside it: below the callable up to 3.12 ([NULL,
    callable, args...]), above it from 3.13 ([callable, NULL, args...]). LOAD_GLOBAL's and
    LOAD_ATTR's null/method bit follow the same order."""
    return [*items, null] if PY313 else [null, *items]


def call_slots(below, above, is_null):
    """``(callable, self or None)`` from the two stack slots under a call's arguments (``below``
    the deeper one): [NULL, callable] up to 3.12, [callable, NULL] from 3.13, and in every
    version [callable, self] when the second slot holds an object (a method load's ``self``, or
    the first argument of a with-block's ``__exit__(None, None, None)``)."""
    if PY313:
        return below, (None if is_null(above) else above)
    if is_null(below):
        return above, None
    return below, above


def intrinsic_name(inst) -> str:
    """CALL_INTRINSIC_1's function, e.g. 'INTRINSIC_UNARY_POSITIVE' (3.12 only)."""
    return inst.arg.name if hasattr(inst.arg, "name") else str(inst.arg)


def var_name(arg) -> str:
    """The name in a CellVar / FreeVar / plain string argument."""
    return arg.name if isinstance(arg, (CellVar, FreeVar)) else arg


def is_cell_arg(arg, code) -> bool:
    """A local-slot argument naming a cell or free variable of ``code``: 3.13's LOAD_FAST of one
    pushes the cell object itself (what LOAD_CLOSURE did; the compiler turns that into
    LOAD_FAST). ``bytecode`` gives a CellVar / FreeVar, or the plain name for an argument that
    is also a cell (one slot for both); once MAKE_CELL has run, that slot holds the cell, and
    the function reads its value only through LOAD_DEREF."""
    return isinstance(arg, (CellVar, FreeVar)) or (isinstance(arg, str) and arg in code.co_cellvars)


# ---- creating instructions -------------------------------------------------------------------

_NO_ARG = object()


def create_instruction(name, arg=_NO_ARG, lineno=None) -> Instr:
    """An instruction; pass ``arg`` only for opcodes that take one (LOAD_CONST None is fine)."""
    if arg is _NO_ARG:
        return Instr(name, lineno=lineno)
    return Instr(name, arg, lineno=lineno)


def create_load_global(name, push_null=False, lineno=None) -> Instr:
    return Instr("LOAD_GLOBAL", (push_null, name), lineno=lineno)


def create_load_attr(name, lineno=None) -> Instr:
    return Instr("LOAD_ATTR", name if PY311 else (False, name), lineno=lineno)


def create_load_method(name, lineno=None) -> Instr:
    if PY311:
        return Instr("LOAD_METHOD", name, lineno=lineno)
    return Instr("LOAD_ATTR", (True, name), lineno=lineno)


def create_call(nargs, kw_names=(), lineno=None) -> list:
    """The call of a callable pushed with its NULL (``with_null``, LOAD_GLOBAL's null bit) or by
    a method load, then ``nargs`` arguments, the last ``len(kw_names)`` of them by keyword."""
    if PY313:
        if kw_names:
            return [Instr("LOAD_CONST", tuple(kw_names), lineno=lineno),
                    Instr("CALL_KW", nargs, lineno=lineno)]
        return [Instr("CALL", nargs, lineno=lineno)]
    out = []
    if kw_names:
        out.append(Instr("KW_NAMES", tuple(kw_names), lineno=lineno))
    if PY311:
        out.append(Instr("PRECALL", nargs, lineno=lineno))
    out.append(Instr("CALL", nargs, lineno=lineno))
    return out


def create_load_local(name, code, lineno=None) -> Instr:
    """Load a local: cell variables go through their cell once MAKE_CELL has run."""
    if name in code.co_cellvars:
        return Instr("LOAD_DEREF", CellVar(name), lineno=lineno)
    if name in code.co_freevars:
        return Instr("LOAD_DEREF", FreeVar(name), lineno=lineno)
    return Instr("LOAD_FAST", name, lineno=lineno)


def create_store_local(name, lineno=None) -> Instr:
    return Instr("STORE_FAST", name, lineno=lineno)


def create_load_freevar(index, code, lineno=None) -> Instr:
    return Instr("LOAD_DEREF", FreeVar(code.co_freevars[index]), lineno=lineno)


def create_binary_subscr(lineno=None) -> Instr:
    return Instr("BINARY_SUBSCR", lineno=lineno)


def create_store_subscr(lineno=None) -> Instr:
    return Instr("STORE_SUBSCR", lineno=lineno)


# ---- assembling ------------------------------------------------------------------------------

_CODE_FIELDS = ("argcount", "posonlyargcount", "kwonlyargcount", "argnames", "cellvars",
                "freevars", "name", "qualname", "filename", "first_lineno")


def prologue(code: types.CodeType, lineno=None) -> list:
    """What every function starts with: copy the closure in, make the cells, RESUME."""
    out = []
    if code.co_freevars:
        out.append(Instr("COPY_FREE_VARS", len(code.co_freevars), lineno=lineno))
    for name in code.co_cellvars:
        out.append(Instr("MAKE_CELL", CellVar(name), lineno=lineno))
    out.append(Instr("RESUME", 0, lineno=lineno))
    return out


def assemble(orig_code: types.CodeType, body: list, name_suffix="") -> types.CodeType:
    """A code object with orig_code's arguments, cells and free variables running ``body``.

    ``body`` must not include the prologue; it may use new plain locals (STORE_FAST names not
    in the original), which become extra local slots after the original ones.
    """
    orig = Bytecode.from_code(orig_code)
    new = Bytecode()
    for field in _CODE_FIELDS:
        setattr(new, field, getattr(orig, field))
    new.flags = orig_code.co_flags & ~GENERATOR_FLAGS
    if name_suffix:
        new.name = orig.name + name_suffix
        new.qualname = orig.qualname + name_suffix
    new.extend(prologue(orig_code, orig.first_lineno))
    new.extend(body)
    return new.to_code()


def round_trip(code: types.CodeType) -> types.CodeType:
    """Decode and re-encode ``code`` unchanged (used by tests to check the version layer)."""
    return Bytecode.from_code(code).to_code()


# ---- graph breaks: running one instruction natively, jumps, liveness -------------------------

# Instructions a graph break may run natively, with the values they push. They read only the
# top of the stack (what they pop), never deeper slots or the frame's locals.
_NATIVE_PUSHES = {
    "CALL": 1, "CALL_FUNCTION_EX": 1, "BINARY_OP": 1, "BINARY_SUBSCR": 1, "BINARY_SLICE": 1,
    "COMPARE_OP": 1, "IS_OP": 1, "CONTAINS_OP": 1, "UNARY_NEGATIVE": 1, "UNARY_POSITIVE": 1,
    "UNARY_NOT": 1, "UNARY_INVERT": 1, "GET_ITER": 1, "FORMAT_VALUE": 1, "BUILD_STRING": 1,
    "CALL_INTRINSIC_1": 1, "IMPORT_NAME": 1, "BUILD_SET": 1, "LOAD_ATTR": 1,
    "CALL_KW": 1, "TO_BOOL": 1, "CONVERT_VALUE": 1, "FORMAT_SIMPLE": 1, "FORMAT_WITH_SPEC": 1,
    "STORE_SUBSCR": 0, "DELETE_SUBSCR": 0, "STORE_SLICE": 0, "STORE_ATTR": 0,
    "DELETE_ATTR": 0, "STORE_GLOBAL": 0, "DELETE_GLOBAL": 0,
}
_TERMINAL_NATIVE = {"RAISE_VARARGS"}


@dataclasses.dataclass
class NativeForm:
    """How a graph break runs ``inst`` natively: ``instrs`` consume the top ``pops`` stack
    slots and leave ``pushes`` ("value" or "null" per slot, bottom first); ``pushes`` is None
    when the instruction never continues (raise)."""
    instrs: list
    pops: int
    pushes: Optional[tuple]


def native_form(inst, kw_names=()) -> Optional[NativeForm]:
    """The native form of ``inst`` (a decoded Inst), or None if a break cannot run it.
    ``kw_names``: a call's keyword names (KW_NAMES before it; for 3.13's CALL_KW, the constant
    on top of the stack, which the caller takes off: the native call loads it again)."""
    name, lineno = inst.opname, inst.lineno
    if name in _TERMINAL_NATIVE:
        return NativeForm([Instr(name, inst.arg, lineno=lineno)], inst.arg, None)
    if name == "LOAD_METHOD" or (name == "LOAD_ATTR" and attr_arg(inst)[0]):
        # a method load leaves the bound method and a NULL: the same call, without the
        # NULL/self trick
        pushes = tuple(with_null(["value"], "null"))
        return NativeForm([create_load_attr(attr_arg(inst)[1], lineno)], 1, pushes)
    if name not in _NATIVE_PUSHES:
        return None
    if name in ("CALL", "CALL_KW"):  # CALL_KW: the names given, no longer on the stack
        instrs = create_call(inst.arg, kw_names, lineno)
    else:
        instrs = [Instr(name, inst.arg, lineno=lineno) if inst.arg is not None
                  else Instr(name, lineno=lineno)]
    pushes = _NATIVE_PUSHES[name]
    pops = pushes - sum(i.stack_effect(jump=False) for i in instrs)
    return NativeForm(instrs, pops, ("value",) * pushes)


_POP_JUMPS = {
    "POP_JUMP_IF_TRUE": True, "POP_JUMP_FORWARD_IF_TRUE": True, "POP_JUMP_BACKWARD_IF_TRUE": True,
    "POP_JUMP_IF_FALSE": False, "POP_JUMP_FORWARD_IF_FALSE": False,
    "POP_JUMP_BACKWARD_IF_FALSE": False,
}
_OR_POP_JUMPS = {"JUMP_IF_TRUE_OR_POP": True, "JUMP_IF_FALSE_OR_POP": False}


def conditional_jump(inst) -> Optional[tuple]:
    """``(jump_if_true, keeps_value_on_jump)`` of a jump on a value's truth, else None."""
    if inst.opname in _POP_JUMPS:
        return _POP_JUMPS[inst.opname], False
    if inst.opname in _OR_POP_JUMPS:
        return _OR_POP_JUMPS[inst.opname], True
    return None


def create_pop_jump(if_true, label, lineno=None) -> list:
    """Pop the top of stack and jump forward to ``label`` if its truth is ``if_true`` (3.13's
    conditional jumps take only a bool: TO_BOOL first)."""
    kind = "TRUE" if if_true else "FALSE"
    if PY311:
        return [Instr(f"POP_JUMP_FORWARD_IF_{kind}", label, lineno=lineno)]
    jump = Instr(f"POP_JUMP_IF_{kind}", label, lineno=lineno)
    return [Instr("TO_BOOL", lineno=lineno), jump] if PY313 else [jump]


def create_try(handler) -> tuple:
    """(begin, end) markers of a range whose exceptions go to label ``handler`` with the
    exception pushed on the stack as it was at ``begin`` (no lasti)."""
    begin = bytecode.TryBegin(handler, push_lasti=False)
    return begin, bytecode.TryEnd(begin)


def create_jump_forward(label, lineno=None) -> Instr:
    return Instr("JUMP_FORWARD", label, lineno=lineno)


def create_load_closure(name, caller, lineno=None) -> Instr:
    """Push the cell object of ``caller``'s cell or free variable ``name``."""
    load = "LOAD_FAST" if PY313 else "LOAD_CLOSURE"  # 3.13: LOAD_CLOSURE is a pseudo-op
    return Instr(load, CellVar(name) if name in caller.co_cellvars else FreeVar(name), lineno=lineno)


def create_make_closure(code, caller=None, lineno=None) -> list:
    """Push a new function running ``code`` whose free variables are the cells of the same
    names in the current frame (of code ``caller``: its own cells or its free variables)."""
    out = [create_load_closure(name, caller or code, lineno) for name in code.co_freevars]
    out.append(Instr("BUILD_TUPLE", len(code.co_freevars), lineno=lineno))
    out.append(Instr("LOAD_CONST", code, lineno=lineno))
    if PY313:
        out.append(Instr("MAKE_FUNCTION", lineno=lineno))
        out.append(Instr("SET_FUNCTION_ATTRIBUTE", 0x08, lineno=lineno))
    else:
        out.append(Instr("MAKE_FUNCTION", 0x08, lineno=lineno))
    return out


def create_make_function(code, flags, lineno=None) -> list:
    """MAKE_FUNCTION of ``code`` with what ``flags`` names already pushed, in this order:
    defaults (0x01), keyword defaults (0x02), annotations (0x04), closure (0x08)."""
    out = [Instr("LOAD_CONST", code, lineno=lineno)]
    if not PY313:
        return out + [Instr("MAKE_FUNCTION", flags, lineno=lineno)]
    out.append(Instr("MAKE_FUNCTION", lineno=lineno))
    for flag in (0x08, 0x04, 0x02, 0x01):
        if flags & flag:
            out.append(Instr("SET_FUNCTION_ATTRIBUTE", flag, lineno=lineno))
    return out


_LOCAL_READS = {"LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_FAST_AND_CLEAR"}
_LOCAL_WRITES = {"STORE_FAST", "DELETE_FAST"}
# 3.13's pairs, whose argument is (first name, second name), in the order they are accessed
_LOCAL_PAIRS = {"LOAD_FAST_LOAD_FAST": ("r", "r"), "STORE_FAST_STORE_FAST": ("w", "w"),
                "STORE_FAST_LOAD_FAST": ("w", "r")}
_NO_FALLTHROUGH = {"RETURN_VALUE", "RETURN_CONST", "RAISE_VARARGS", "RERAISE", "JUMP_FORWARD",
                   "JUMP_BACKWARD", "JUMP_BACKWARD_NO_INTERRUPT", "JUMP", "JUMP_NO_INTERRUPT"}


def local_accesses(inst, code) -> tuple:
    """The plain locals ``inst`` (of ``code``) reads ("r") or writes ("w"), as ((kind, name),
    ...) in the order it accesses them."""
    if inst.opname in _LOCAL_READS:
        out = (("r", inst.arg),)
    elif inst.opname in _LOCAL_WRITES:
        out = (("w", inst.arg),)
    elif inst.opname in _LOCAL_PAIRS:
        out = tuple(zip(_LOCAL_PAIRS[inst.opname], inst.arg))
    else:
        return ()
    return tuple((kind, name) for kind, name in out if not is_cell_arg(name, code))  # a cell itself


def successors(inst, n) -> list:
    """Indices control may reach after ``inst`` (not counting exception handlers)."""
    out = [] if inst.opname in _NO_FALLTHROUGH else [inst.index + 1]
    if inst.target is not None:
        out.append(inst.target)
    return [i for i in out if i < n]


def exception_handlers(code: types.CodeType) -> list:
    """Indices (as in ``decode``) of the instructions exception handlers start at."""
    return sorted({i.exn.target for i in _decode(code) if i.exn is not None})


def handler_of(code: types.CodeType) -> list:
    """For each instruction index (as in ``decode``), the index of the instruction where an
    exception raised there is handled (the exception table's innermost entry), or None."""
    return [i.exn.target if i.exn is not None else None for i in _decode(code)]


# Handler instructions that only tidy the stack or locals before re-raising (the cleanup of an
# `except` body, 3.12's inlined comprehensions): they run no user code.
_CLEANUP_OPS = {"COPY", "SWAP", "POP_TOP", "POP_EXCEPT", "STORE_FAST", "LOAD_FAST", "LOAD_CONST",
                "NOP", "RERAISE", "STORE_FAST_STORE_FAST", "LOAD_FAST_LOAD_FAST",
                "STORE_FAST_LOAD_FAST"}


def _tidies(inst):
    """Part of a handler that re-raises unchanged: stack and locals tidying, and 3.12's
    generator-wide handler (which only turns StopIteration into RuntimeError)."""
    if inst.opname == "CALL_INTRINSIC_1":
        return intrinsic_name(inst) == "INTRINSIC_STOPITERATION_ERROR"
    return inst.opname in _CLEANUP_OPS


@functools.lru_cache(maxsize=256)
def exception_exits(code: types.CodeType) -> tuple:
    """For each instruction index: how an exception raised there reaches the frame's caller.
    ``None`` if a user handler (``except``, ``finally``) may see it; otherwise the number of
    ``with`` blocks whose ``__exit__`` runs on the way out (0: nothing of the user's runs)."""
    insts, handlers = decode(code), handler_of(code)

    def exits(index, seen):
        h = handlers[index]
        if h is None:
            return 0
        if h in seen:
            return None
        seen = seen | {h}
        withs = 0
        if insts[h].opname == "PUSH_EXC_INFO":
            if h + 1 >= len(insts) or insts[h + 1].opname != "WITH_EXCEPT_START":
                return None  # try/except or try/finally
            withs, h = 1, h + 1
            # WITH_EXCEPT_START; POP_JUMP_IF_TRUE (suppressed); RERAISE 2 (not suppressed)
            while h < len(insts) and insts[h].opname != "RERAISE":
                h += 1
        elif insts[h].opname == "CLEANUP_THROW":
            pass  # `yield from`: anything but StopIteration goes on from CLEANUP_THROW itself
        else:
            while h < len(insts) and _tidies(insts[h]) and insts[h].opname != "RERAISE":
                h += 1
            if h >= len(insts) or insts[h].opname != "RERAISE":
                return None
        rest = exits(h, seen) if h < len(insts) else None
        return None if rest is None else withs + rest

    return tuple(exits(i, frozenset()) for i in range(len(insts)))


def copy_instr(inst, lineno=None) -> Instr:
    """A new instruction with ``inst``'s name and argument."""
    return Instr(inst.name, inst.arg, lineno=lineno) if inst.require_arg() else Instr(inst.name, lineno=lineno)


def new_code(orig_code: types.CodeType, argnames, body, name, qualname, cells_free=False,
             generator=False) -> types.CodeType:
    """A code object with orig_code's cells, free variables, file and first line, taking the
    plain positional arguments ``argnames`` and running ``body`` (which includes its prologue).
    ``cells_free``: orig_code's cells are free variables of the new code (it is given them;
    ``body`` must name them as FreeVar, see ``cells_as_free``)."""
    orig = Bytecode.from_code(orig_code)
    new = Bytecode()
    for field in ("cellvars", "freevars", "filename", "first_lineno"):
        setattr(new, field, getattr(orig, field))
    if cells_free:
        new.freevars, new.cellvars = list(orig.freevars) + list(orig.cellvars), []
    new.argcount, new.posonlyargcount, new.kwonlyargcount = len(argnames), 0, 0
    new.argnames = list(argnames)
    new.name, new.qualname = name, qualname
    new.flags = orig_code.co_flags & ~((0 if generator else GENERATOR_FLAGS) | VARARGS_FLAG | VARKEYWORDS_FLAG)
    new.extend(body)
    return new.to_code()


@functools.lru_cache(maxsize=256)
def line_starts(code) -> tuple:
    """For each instruction index of ``code``, whether it starts a line (its line differs from
    the previous instruction's)."""
    insts = decode(code)
    return tuple(i == 0 or inst.lineno != insts[i - 1].lineno for i, inst in enumerate(insts))


def cells_as_free(items, code) -> list:
    """``items`` with every reference to a cell variable of ``code`` made a free-variable one."""
    cells = set(code.co_cellvars)
    out = []
    for item in items:
        if is_instr(item) and (isinstance(item.arg, CellVar) or (
                item.name in _CELL_SLOT_OPS and isinstance(item.arg, str) and item.arg in cells)):
            item = Instr(item.name, FreeVar(var_name(item.arg)), lineno=item.lineno)
        out.append(item)
    return out


# ops whose argument is a local slot: an argument that is also a cell names its slot by its name
_CELL_SLOT_OPS = {"LOAD_DEREF", "STORE_DEREF", "DELETE_DEREF", "LOAD_CLOSURE", "LOAD_FAST",
                  "LOAD_CLASSDEREF", "LOAD_FROM_DICT_OR_DEREF"}


def code_items(code: types.CodeType) -> list:
    """The ``bytecode`` items (instructions, labels, try blocks) of ``code``, for rewriting."""
    return list(Bytecode.from_code(code))


def is_instr(item) -> bool:
    return isinstance(item, Instr)


def new_label() -> Label:
    return Label()


def is_function_prologue(item) -> bool:
    """Instructions that only set a function up (copy the closure, make cells, RESUME 0)."""
    return item.name in ("COPY_FREE_VARS", "MAKE_CELL") or (item.name == "RESUME" and item.arg == 0)
