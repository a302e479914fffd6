"""Everything version-specific about bytecode on the Python side (CPython 3.11 and 3.12).

Reading: ``decode(code)`` turns a code object into a flat list of ``Inst`` whose jump targets are
indices into that list (the ``bytecode`` package gives labels; we resolve them once), each with
its exception table entry (``ExceptionEntry``: handler, stack depth, lasti).

Writing: the ``create_*`` helpers build ``bytecode.Instr`` lists for the few call conventions
that differ between versions (PRECALL in 3.11, the method bit of LOAD_ATTR in 3.12), and
``assemble(orig_code, body)`` makes a code object with exactly the original arguments, cell and
free variables, letting the ``bytecode`` package compute offsets, stack size and tables.
"""
import dataclasses
import sys
import functools
import types
import weakref
from typing import Any, Optional

import bytecode
from bytecode import Bytecode, CellVar, FreeVar, Instr, Label

PY311 = sys.version_info[:2] == (3, 11)
PY312 = sys.version_info[:2] == (3, 12)
if sys.version_info[:2] not in ((3, 11), (3, 12)):
    raise ImportError(f"pydynamo supports CPython 3.11 and 3.12, not {sys.version.split()[0]}")

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
    """LOAD_ATTR's (is_method, name): 3.12 packs a method bit, 3.11 has LOAD_METHOD instead."""
    if isinstance(inst.arg, tuple):
        return inst.arg
    return False, inst.arg


def super_attr_arg(inst):
    """LOAD_SUPER_ATTR's (is_method, name) (3.12 only; 3.11 calls super() and loads the attribute)."""
    is_method, _two_arg_form, name = inst.arg
    return is_method, name


def binary_op_name(inst) -> str:
    """BINARY_OP's operator as the NB_* suffix, e.g. 'ADD', 'INPLACE_MULTIPLY'."""
    return bytecode.BinaryOp(int(inst.arg)).name


def compare_op_name(inst) -> str:
    """COMPARE_OP's operator as 'LT', 'EQ', ... (3.12 stores it shifted, bytecode hides that)."""
    arg = inst.arg
    return arg.name if hasattr(arg, "name") else bytecode.Compare(arg).name


def intrinsic_name(inst) -> str:
    """CALL_INTRINSIC_1's function, e.g. 'INTRINSIC_UNARY_POSITIVE' (3.12 only)."""
    return inst.arg.name if hasattr(inst.arg, "name") else str(inst.arg)


def var_name(arg) -> str:
    """The name in a CellVar / FreeVar / plain string argument."""
    return arg.name if isinstance(arg, (CellVar, FreeVar)) else arg


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
    return Instr("LOAD_ATTR", (False, name) if PY312 else name, lineno=lineno)


def create_load_method(name, lineno=None) -> Instr:
    if PY312:
        return Instr("LOAD_ATTR", (True, name), lineno=lineno)
    return Instr("LOAD_METHOD", name, lineno=lineno)


def create_call(nargs, kw_names=(), lineno=None) -> list:
    """CALL for a stack laid out as [NULL or self-slot, callable, args...] (both versions)."""
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
    """The native form of ``inst`` (a decoded Inst), or None if a break cannot run it."""
    name, lineno = inst.opname, inst.lineno
    if name in _TERMINAL_NATIVE:
        return NativeForm([Instr(name, inst.arg, lineno=lineno)], inst.arg, None)
    if name == "LOAD_METHOD" or (name == "LOAD_ATTR" and attr_arg(inst)[0]):
        # a method load leaves [NULL, bound method]: the same call, without the NULL/self trick
        return NativeForm([create_load_attr(attr_arg(inst)[1], lineno)], 1, ("null", "value"))
    if name not in _NATIVE_PUSHES:
        return None
    if name == "CALL":
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


def create_pop_jump(if_true, label, lineno=None) -> Instr:
    """Pop the top of stack and jump forward to ``label`` if its truth is ``if_true``."""
    kind = "TRUE" if if_true else "FALSE"
    return Instr(f"POP_JUMP_FORWARD_IF_{kind}" if PY311 else f"POP_JUMP_IF_{kind}", label,
                 lineno=lineno)


def create_try(handler) -> tuple:
    """(begin, end) markers of a range whose exceptions go to label ``handler`` with the
    exception pushed on the stack as it was at ``begin`` (no lasti)."""
    begin = bytecode.TryBegin(handler, push_lasti=False)
    return begin, bytecode.TryEnd(begin)


def create_jump_forward(label, lineno=None) -> Instr:
    return Instr("JUMP_FORWARD", label, lineno=lineno)


def create_make_closure(code, lineno=None) -> list:
    """Push a new function running ``code`` with the current frame's closure cells."""
    out = [Instr("LOAD_CLOSURE", FreeVar(name), lineno=lineno) for name in code.co_freevars]
    out.append(Instr("BUILD_TUPLE", len(code.co_freevars), lineno=lineno))
    out.append(Instr("LOAD_CONST", code, lineno=lineno))
    out.append(Instr("MAKE_FUNCTION", 0x08, lineno=lineno))
    return out


_LOCAL_READS = {"LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_FAST_AND_CLEAR"}
_LOCAL_WRITES = {"STORE_FAST", "DELETE_FAST"}
_NO_FALLTHROUGH = {"RETURN_VALUE", "RETURN_CONST", "RAISE_VARARGS", "RERAISE", "JUMP_FORWARD",
                   "JUMP_BACKWARD", "JUMP_BACKWARD_NO_INTERRUPT", "JUMP", "JUMP_NO_INTERRUPT"}


def local_read(inst) -> Optional[str]:
    return inst.arg if inst.opname in _LOCAL_READS else None


def local_write(inst) -> Optional[str]:
    return inst.arg if inst.opname in _LOCAL_WRITES else None


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
                "NOP", "RERAISE"}


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


def new_code(orig_code: types.CodeType, argnames, body, name, qualname) -> types.CodeType:
    """A code object with orig_code's cells, free variables, file and first line, taking the
    plain positional arguments ``argnames`` and running ``body`` (which includes its prologue)."""
    orig = Bytecode.from_code(orig_code)
    new = Bytecode()
    for field in ("cellvars", "freevars", "filename", "first_lineno"):
        setattr(new, field, getattr(orig, field))
    new.argcount, new.posonlyargcount, new.kwonlyargcount = len(argnames), 0, 0
    new.argnames = list(argnames)
    new.name, new.qualname = name, qualname
    new.flags = orig_code.co_flags & ~(GENERATOR_FLAGS | VARARGS_FLAG | VARKEYWORDS_FLAG)
    new.extend(body)
    return new.to_code()


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
