"""Everything version-specific about bytecode on the Python side (CPython 3.11 and 3.12).

Reading: ``decode(code)`` turns a code object into a flat list of ``Inst`` whose jump targets are
indices into that list (the ``bytecode`` package gives labels; we resolve them once).

Writing: the ``create_*`` helpers build ``bytecode.Instr`` lists for the few call conventions
that differ between versions (PRECALL in 3.11, the method bit of LOAD_ATTR in 3.12), and
``assemble(orig_code, body)`` makes a code object with exactly the original arguments, cell and
free variables, letting the ``bytecode`` package compute offsets, stack size and tables.
"""
import dataclasses
import sys
import types
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


@dataclasses.dataclass
class Inst:
    """One decoded instruction. ``target`` is the index of the jump target in the list."""
    opname: str
    arg: Any
    lineno: Optional[int]
    index: int
    target: Optional[int] = None

    def __repr__(self):
        tgt = f" -> {self.target}" if self.target is not None else ""
        return f"{self.index}: {self.opname} {self.arg!r}{tgt} (line {self.lineno})"


def decode(code: types.CodeType) -> list:
    """Instructions of ``code`` with label targets resolved to list indices.

    Try blocks (3.11+ exception tables) are dropped: the translator never raises through user
    handlers, so only the straight-line instructions matter.
    """
    insts, label_at, pending = [], {}, []
    for item in Bytecode.from_code(code):
        if isinstance(item, Label):
            label_at[id(item)] = len(insts)
        elif isinstance(item, Instr):
            arg = item.arg if item.require_arg() else None
            inst = Inst(item.name, arg, item.lineno, len(insts))
            if isinstance(arg, Label):
                pending.append(inst)
            insts.append(inst)
        # TryBegin / TryEnd / SetLineno carry nothing the translator uses
    for inst in pending:
        inst.target = label_at[id(inst.arg)]
        inst.arg = None
    return insts


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
