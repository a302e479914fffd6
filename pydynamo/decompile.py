"""Python source for the bytecode pydynamo generates (pydynamo.debug.dump_src).

A compile's new code is stack code without loops: it calls the graph, rebuilds values and side
effects, and at a graph break runs one instruction natively and calls a resume function. Its only
control flow goes forward: the two ways of a break on a jump (``if``), and the ``try`` that
leaves the `with` blocks open at a break if the native instruction raises, then re-raises.
``decompile(code)`` writes such code as a ``def`` whose statements do what the instructions do,
in their order, and tells which statement each instruction belongs to, so that ``relocate`` can
point the code object at the written file. Anything else (a loop, the user's own handlers)
raises ``Undecompilable``.

Evaluation order is kept by one rule: an expression is written where its value is used, so when
a statement is written while expressions wait on the stack, those that could be changed or
reordered by it are first assigned to temporaries (``___vN``), bottom of the stack first.
Constants without a literal (functions, classes, code objects) become names bound at the top
of the file: by module and qualified name where that finds the same object (``load``), else
through a registry of the process that wrote the file (``stored``). One approximation: the
re-raising handler is written ``except BaseException``, under which, unlike in the bytecode,
the exception counts as being handled while the handler's ``__exit__`` calls run.
"""
import builtins
import dis
import importlib
import keyword
import linecache
import math
import operator
import os
import reprlib
import sys
import types
import weakref

import bytecode
from bytecode import Bytecode, FreeVar, Instr, Label
from bytecode.instr import InstrLocation

from . import bytecode_utils as bu


class Undecompilable(Exception):
    """The code does something this decompiler does not write as source."""


# ---- constants --------------------------------------------------------------------------------

_registry = {}  # key -> weak (or strong) reference, for stored()


def load(module, qualname):
    """The object a dumped file names by module and qualified name."""
    obj = importlib.import_module(module)
    for part in filter(None, qualname.split(".")):
        obj = getattr(obj, part)
    return obj


def stored(key):
    """An object a dumped file could not name by import: only the process that wrote the file,
    while the compiled code holding the object lives, has it."""
    obj = _registry[key]() if key in _registry else None
    if obj is None:
        raise LookupError(f"constant {key} of a pydynamo dump belongs to another process or is gone")
    return obj


def _store(obj):
    key = f"{id(obj):x}"
    try:
        _registry[key] = weakref.ref(obj)
    except TypeError:
        _registry[key] = lambda: obj
    return key


def _import_path(obj):
    """(module, qualname) that ``load`` turns back into ``obj`` itself, or None."""
    if isinstance(obj, types.ModuleType):
        return (obj.__name__, "") if sys.modules.get(obj.__name__) is obj else None
    qualname = getattr(obj, "__qualname__", None)
    if not isinstance(qualname, str) or "<" in qualname:
        return None
    modules = [getattr(obj, "__module__", None), getattr(getattr(obj, "__objclass__", None), "__module__", None)]
    for module in modules:
        if isinstance(module, str) and module in sys.modules:
            try:
                if load(module, qualname) is obj:
                    return module, qualname
            except Exception:
                pass
    name = next((k for k, v in vars(types).items() if v is obj and not k.startswith("_")), None)
    return ("types", name) if name else None  # FunctionType, CellType: 'function' is no builtin name


_short = reprlib.Repr()
_short.maxother = _short.maxstring = 100


def _describe(value):
    """A short repr for a comment (a module's globals or a user object's repr may be long, or raise)."""
    try:
        text = _short.repr(value)
    except Exception:
        text = f"<{type(value).__qualname__} object>"
    return text.replace("\n", " ")[:160]


def _literal(value):
    """Source text evaluating to an equal constant of the same type, or None."""
    kind = type(value)
    if value is None or kind is bool:
        return repr(value)
    if value is Ellipsis:
        return "..."
    if kind in (int, str, bytes) or (kind is float and math.isfinite(value)):
        return repr(value)
    if kind is tuple:
        items = [_literal(v) for v in value]
        if None in items:
            return None
        return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
    return None


# ---- expressions ------------------------------------------------------------------------------

class _Expr:
    """A value on the simulated stack: its source text; ``primary`` if it needs no parentheses as
    an operand; ``stable`` if nothing can change its value before it is used (a literal, a
    temporary); ``local`` the fast local it reads (stable until that local is written);
    ``insts`` the instructions that computed it. A NULL slot has text None."""
    __slots__ = ("text", "primary", "stable", "local", "insts", "value")

    def __init__(self, text, insts=(), primary=True, stable=False, local=None, value=None):
        self.text, self.primary, self.stable, self.local = text, primary, stable, local
        self.insts, self.value = list(insts), value  # value: a LOAD_CONST's

    def operand(self):
        return self.text if self.primary else f"({self.text})"

    def keeps(self, writes):
        return self.text is None or self.stable or (self.local is not None and self.local not in writes)


_BINARY = {"ADD": "+", "AND": "&", "FLOOR_DIVIDE": "//", "LSHIFT": "<<", "MATRIX_MULTIPLY": "@",
           "MULTIPLY": "*", "REMAINDER": "%", "OR": "|", "POWER": "**", "RSHIFT": ">>",
           "SUBTRACT": "-", "TRUE_DIVIDE": "/", "XOR": "^"}
_INPLACE = {"ADD": "iadd", "AND": "iand", "FLOOR_DIVIDE": "ifloordiv", "LSHIFT": "ilshift",
            "MATRIX_MULTIPLY": "imatmul", "MULTIPLY": "imul", "REMAINDER": "imod", "OR": "ior",
            "POWER": "ipow", "RSHIFT": "irshift", "SUBTRACT": "isub", "TRUE_DIVIDE": "itruediv",
            "XOR": "ixor"}
_COMPARE = {"LT": "<", "LE": "<=", "EQ": "==", "NE": "!=", "GT": ">", "GE": ">="}
_UNARY = {"UNARY_NEGATIVE": "-", "UNARY_POSITIVE": "+", "UNARY_INVERT": "~", "UNARY_NOT": "not "}
# conditional jumps: (jumps when the value is true / None, tests None)
_COND_JUMPS = {
    "POP_JUMP_IF_TRUE": (True, False), "POP_JUMP_FORWARD_IF_TRUE": (True, False),
    "POP_JUMP_IF_FALSE": (False, False), "POP_JUMP_FORWARD_IF_FALSE": (False, False),
    "POP_JUMP_IF_NONE": (True, True), "POP_JUMP_FORWARD_IF_NONE": (True, True),
    "POP_JUMP_IF_NOT_NONE": (False, True), "POP_JUMP_FORWARD_IF_NOT_NONE": (False, True),
}
_SILENT = {"NOP", "PRECALL", "EXTENDED_ARG", "CACHE"}
_PROLOGUE = {"RESUME", "COPY_FREE_VARS", "MAKE_CELL"}  # at the def's line


def _is_name(name):
    return isinstance(name, str) and name.isidentifier() and not keyword.iskeyword(name)


class Decompiled:
    """A function's source: ``lines`` (no trailing newlines), ``def_line`` the index of its
    ``def``, ``inst_lines`` the index of the line of each instruction (in ``Bytecode`` order),
    ``constants`` the ``(name, source, description)`` bindings its body needs."""

    def __init__(self, name, lines, def_line, inst_lines, constants):
        self.name, self.lines, self.def_line = name, lines, def_line
        self.inst_lines, self.constants = inst_lines, constants

    def constant_lines(self):
        if not self.constants:
            return []
        out = ["from pydynamo.decompile import load as ___load, stored as ___stored"]
        for name, src, what in self.constants:
            out.append(f"{name} = {src}  # {what}")
        return out


class _Decompiler:
    def __init__(self, code, shadowed=()):
        self.code = code
        try:
            self.items = list(_read(code))
        except Exception as e:
            raise Undecompilable(f"the bytecode package cannot read it: {type(e).__name__}: {e}") from None
        self.index, self.label_pos, n = {}, {}, 0
        for pos, item in enumerate(self.items):
            if isinstance(item, Label):
                self.label_pos[id(item)] = pos
            elif isinstance(item, Instr):
                self.index[pos] = n
                n += 1
        self.inst_lines = [None] * n
        self.next_instr = [len(self.items)] * (len(self.items) + 1)  # position of the next Instr
        for pos in reversed(range(len(self.items))):
            self.next_instr[pos] = pos if isinstance(self.items[pos], Instr) else self.next_instr[pos + 1]
        self.lines = []  # (depth, text)
        self.loose = []  # instructions that compute nothing: they go to the next line written
        self.names = source_names(code)
        self.locals = set(self.names) | set(self.names.values())
        self.shadowed = set(shadowed) | self.locals
        self.constants, self._const_names = [], {}
        self.globals_written, self.nonlocals = set(), set()
        self.kw_names = ()
        self.ntemps = 0

    # ---- writing ----

    def emit(self, depth, text, insts=()):
        line = len(self.lines)
        self.lines.append((depth, text))
        for i in [*insts, *self.loose]:
            self.inst_lines[i] = line
        self.loose.clear()

    def temp(self, prefix="___v"):
        while True:
            self.ntemps += 1
            name = f"{prefix}{self.ntemps}"
            if name not in self.locals:
                return name

    def spill(self, stack, depth, upto, writes=()):
        """Assign the expressions of ``stack[:upto]`` a statement could change or reorder to
        temporaries (bottom first: that is the order they were computed in)."""
        for i in range(upto):
            e = stack[i]
            if not e.keeps(writes):
                name = self.temp()
                self.emit(depth, f"{name} = {e.text}", e.insts)
                stack[i] = _Expr(name, stable=True)

    def stmt(self, stack, depth, text, used, inst, writes=()):
        self.spill(stack, depth, len(stack), writes)
        self.emit(depth, text, [i for e in used for i in e.insts] + [inst])

    # ---- names and constants ----

    def builtin(self, name):
        return name if name not in self.shadowed else self.obj(getattr(builtins, name))

    def global_ref(self, name):
        if _is_name(name) and name not in self.locals:
            return name
        return f"{self.builtin('globals')}()[{name!r}]"

    def obj(self, value):
        """Source naming the constant ``value``."""
        text = _literal(value)
        if text is not None:
            return text
        if type(value) is slice and all(_literal(p) is not None for p in (value.start, value.stop, value.step)):
            return f"{self.builtin('slice')}({_literal(value.start)}, {_literal(value.stop)}, {_literal(value.step)})"
        path = _import_path(value)
        if path is not None and path[0] == "builtins" and path[1].split(".")[0] not in self.shadowed:
            return path[1]  # print, dict.clear, list.__setitem__
        if id(value) in self._const_names:
            return self._const_names[id(value)]
        if path is not None:
            base = "___" + (path[1] or path[0]).replace(".", "_").lstrip("_")
            src = f"___load({path[0]!r}, {path[1]!r})"
        else:
            qualname = getattr(value, "__qualname__", None)
            base = f"___code_{value.co_name}" if isinstance(value, types.CodeType) else \
                f"___{qualname if isinstance(qualname, str) else type(value).__name__}"
            base = "___" + safe_name(base[3:]).strip("_")
            src = f"___stored({_store(value)!r})"
        name, k = base if _is_name(base) else "___const", 1
        while name in self.locals or name in {c[0] for c in self.constants}:
            k += 1
            name = f"{base}_{k}"
        self.constants.append((name, src, _describe(value)))
        self._const_names[id(value)] = name
        return name

    def attr(self, obj, name):
        if not _is_name(name):
            return f"{self.builtin('getattr')}({obj.text}, {name!r})"
        base = obj.operand()
        if base[:1].isdigit():  # 1 .real
            base = f"({base})"
        return f"{base}.{name}"

    # ---- control flow ----

    def target(self, item, pos):
        target = self.label_pos[id(item.arg)]
        if target <= pos:
            raise Undecompilable("a backward jump (a loop)")
        return target

    def run(self, pos, stop, stack, depth, in_try=False):
        """Write items[pos:stop]. Returns (how, stack, extra): how is "fall" (reached stop),
        "end" (returned or raised), "jump" (a JUMP_FORWARD out; extra: its target) or, in a try
        body, "defer" (a conditional jump out; extra: (flag, runs_if_true, target))."""
        while pos < stop:
            item = self.items[pos]
            if isinstance(item, bytecode.TryBegin):
                pos, stack = self.try_block(pos, stack, depth)
                if pos > stop:
                    raise Undecompilable("a jump out of a block")
                if stack is None:  # the try body raised (a `raise` run natively in `with` blocks)
                    if self.next_instr[pos] < stop:
                        raise Undecompilable("code after a raise")
                    return "end", [], None
                continue
            if isinstance(item, bytecode.TryEnd):
                raise Undecompilable("a try block ending out of place")
            if not isinstance(item, Instr):
                pos += 1
                continue
            idx, name = self.index[pos], item.name
            last = self.next_instr[pos + 1] >= stop
            if name in _COND_JUMPS:
                jump_if, tests_none = _COND_JUMPS[name]
                cond = stack.pop()
                target = self.target(item, pos)
                if target > stop:
                    if not (in_try and last):
                        raise Undecompilable("a jump out of a block")
                    flag = self.temp("___b")
                    test = f"{cond.operand()} is None" if tests_none else f"True if {cond.text} else False"
                    self.stmt(stack, depth, f"{flag} = {test}", [cond], idx)
                    return "defer", stack, (flag, not jump_if, target)
                self.spill(stack, depth, len(stack))
                runs = _test(cond, not jump_if, tests_none)
                pos, stack = self.if_block(runs, cond.insts + [idx], pos + 1, target, stack, depth)
                if pos > stop:
                    raise Undecompilable("a jump out of a block")
                continue
            if name == "JUMP_FORWARD":
                if not last:
                    raise Undecompilable("a jump over code")
                self.spill(stack, depth, len(stack))
                self.loose.append(idx)
                return "jump", stack, self.target(item, pos)
            if name == "COPY" and item.arg == 1 and pos + 1 < stop and isinstance(self.items[pos + 1], Instr) \
                    and self.items[pos + 1].name == "STORE_FAST":  # x = <expr> kept on the stack
                local, value = self.names[self.items[pos + 1].arg], stack.pop()
                self.stmt(stack, depth, f"{local} = {value.text}", [value], idx, {local})
                self.inst_lines[self.index[pos + 1]] = len(self.lines) - 1
                stack.append(_Expr(local, local=local))
                pos += 2
                continue
            if name == "TO_BOOL" and self.next_instr[pos + 1] < stop \
                    and self.items[self.next_instr[pos + 1]].name in _COND_JUMPS:
                # 3.13's bool() before a jump: the jump tests the same truth
                stack[-1] = _Expr(stack[-1].text, stack[-1].insts + [idx], stack[-1].primary,
                                  stack[-1].stable, stack[-1].local, stack[-1].value)
                pos += 1
                continue
            pos += 1
            if self.op(item, idx, stack, depth):
                if not last:
                    raise Undecompilable("code after a return or raise")
                return "end", stack, None
        return "fall", stack, None

    def block(self, pos, stop, stack, depth, in_try=False):
        n = len(self.lines)
        out = self.run(pos, stop, stack, depth, in_try)
        if len(self.lines) == n:
            self.emit(depth, "pass")
        return out

    def if_block(self, test, insts, pos, target, stack, depth):
        """``if test:`` over items[pos:target] (which run when the jump is not taken); returns
        where the code goes on and with what stack."""
        self.emit(depth, f"if {test}:", insts)
        how, body_stack, end = self.block(pos, target, list(stack), depth + 1)
        if how == "defer":
            raise Undecompilable("a jump out of a block")
        if how == "jump":
            self.emit(depth, "else:")
            how2, else_stack, _ = self.block(target, end, list(stack), depth + 1)
            if how2 not in ("fall", "end"):
                raise Undecompilable("nested jumps out of blocks")
            return end, _merge(body_stack, else_stack if how2 == "fall" else None)
        return target, _merge(stack, body_stack if how == "fall" else None)

    def try_block(self, pos, stack, depth):
        """TryBegin ... TryEnd; JUMP_FORWARD end; handler ...; RERAISE; end: as try/except."""
        begin = self.items[pos]
        end_pos = next((p for p in range(pos + 1, len(self.items)) if isinstance(self.items[p], bytecode.TryEnd)
                        and self.items[p].entry is begin), None)
        if end_pos is None or begin.push_lasti or any(
                isinstance(i, bytecode.TryBegin) for i in self.items[pos + 1:end_pos]):
            raise Undecompilable("an exception table this decompiler does not write")
        jump_pos = next((p for p in range(end_pos + 1, len(self.items)) if isinstance(self.items[p], Instr)), None)
        if jump_pos is None or self.items[jump_pos].name != "JUMP_FORWARD":
            raise Undecompilable("a try block that is not pydynamo's")
        exit_pos, handler_pos = self.target(self.items[jump_pos], jump_pos), self.label_pos[id(begin.target)]
        if not jump_pos < handler_pos < exit_pos:
            raise Undecompilable("a try block that is not pydynamo's")
        self.spill(stack, depth, len(stack))
        self.emit(depth, "try:")
        how, body_stack, extra = self.block(pos + 1, end_pos, list(stack), depth + 1, in_try=True)
        if how == "jump":
            raise Undecompilable("a jump out of a try body")
        self.spill(body_stack, depth + 1, len(body_stack))
        self.inst_lines[self.index[jump_pos]] = len(self.lines) - 1
        exc = self.temp("___e")
        self.emit(depth, f"except BaseException as {exc}:")
        how_h, _, _ = self.block(handler_pos, exit_pos, [*stack, _Expr(exc, stable=True)], depth + 1)
        if how_h != "end":
            raise Undecompilable("an exception handler that does not re-raise")
        if how == "defer":
            flag, runs_if_true, target = extra
            return self.if_block(flag if runs_if_true else f"not {flag}", [], exit_pos, target, body_stack, depth)
        return exit_pos, (None if how == "end" else body_stack)

    # ---- one instruction ----

    def op(self, ins, idx, stack, depth):
        """Simulate one instruction, writing the statement it completes; True if it returns or
        raises."""
        name, arg = ins.name, ins.arg
        pop, push = stack.pop, stack.append
        if name in _PROLOGUE:
            pass
        elif name in _SILENT:
            self.loose.append(idx)
        elif name == "KW_NAMES":
            self.kw_names = arg
            self.loose.append(idx)
        elif name == "PUSH_NULL":
            push(_Expr(None, [idx]))
        elif name == "LOAD_FAST" and bu.is_cell_arg(arg, self.code):  # 3.13's LOAD_CLOSURE
            cell = f"(lambda: {self.names[bu.var_name(arg)]}).__closure__[0]"
            push(_Expr(cell, [idx], stable=True))
        elif name in ("LOAD_FAST", "LOAD_FAST_CHECK"):
            push(_Expr(self.names[arg], [idx], local=self.names[arg]))
        elif name == "LOAD_FAST_LOAD_FAST":
            if any(bu.is_cell_arg(n, self.code) for n in arg):
                raise Undecompilable("LOAD_FAST_LOAD_FAST of a cell")
            for n in arg:
                push(_Expr(self.names[n], [idx], local=self.names[n]))
        elif name in ("LOAD_DEREF", "LOAD_CLASSDEREF"):
            push(_Expr(self.names[bu.var_name(arg)], [idx]))  # a cell: a call may change it
        elif name == "LOAD_CLOSURE":
            push(_Expr(f"(lambda: {self.names[bu.var_name(arg)]}).__closure__[0]", [idx], stable=True))
        elif name == "LOAD_GLOBAL":
            push_null, gname = bu.global_arg(ins)
            value = _Expr(self.global_ref(gname), [idx])
            stack.extend(bu.with_null([value], _Expr(None, [idx])) if push_null else [value])
        elif name == "LOAD_CONST":
            text = self.obj(arg)
            push(_Expr(text, [idx], primary=not text.startswith("-"), stable=True, value=arg))
        elif name in ("LOAD_ATTR", "LOAD_METHOD"):
            is_method, attr = (True, arg) if name == "LOAD_METHOD" else bu.attr_arg(ins)
            obj = pop()
            value = _Expr(self.attr(obj, attr), obj.insts + [idx])
            stack.extend(bu.with_null([value], _Expr(None, [idx])) if is_method else [value])
        elif name in ("STORE_FAST", "STORE_DEREF"):
            if name == "STORE_FAST" and bu.is_cell_arg(arg, self.code):
                raise Undecompilable("a store into the slot of a cell")
            var, value = self.names[bu.var_name(arg)], pop()
            if isinstance(arg, FreeVar):
                self.nonlocals.add(var)
            self.stmt(stack, depth, f"{var} = {value.text}", [value], idx, {var})
        elif name in ("STORE_FAST_STORE_FAST", "STORE_FAST_LOAD_FAST"):  # 3.13's pairs
            if any(bu.is_cell_arg(n, self.code) for n in arg):
                raise Undecompilable("a store into the slot of a cell")
            first, second = (self.names[n] for n in arg)
            value = pop()
            self.stmt(stack, depth, f"{first} = {value.text}", [value], idx, {first})
            if name == "STORE_FAST_STORE_FAST":
                value = pop()
                self.stmt(stack, depth, f"{second} = {value.text}", [value], idx, {second})
            else:
                push(_Expr(second, [idx], local=second))
        elif name in ("DELETE_FAST", "DELETE_DEREF"):
            var = self.names[bu.var_name(arg)]
            if isinstance(arg, FreeVar):
                self.nonlocals.add(var)
            self.stmt(stack, depth, f"del {var}", [], idx, {var})
        elif name in ("STORE_GLOBAL", "DELETE_GLOBAL"):
            ref = self.global_ref(arg)
            if ref == arg:
                self.globals_written.add(arg)
            if name == "DELETE_GLOBAL":
                self.stmt(stack, depth, f"del {ref}", [], idx)
            else:
                value = pop()
                self.stmt(stack, depth, f"{ref} = {value.text}", [value], idx)
        elif name in ("STORE_ATTR", "DELETE_ATTR"):
            obj = pop()
            if name == "DELETE_ATTR":
                text = f"del {obj.operand()}.{arg}" if _is_name(arg) else \
                    f"{self.builtin('delattr')}({obj.text}, {arg!r})"
                return self.stmt(stack, depth, text, [obj], idx)
            value = pop()
            if _is_name(arg):
                return self.stmt(stack, depth, f"{self.attr(obj, arg)} = {value.text}", [obj, value], idx)
            stack += [value, obj]
            self.spill(stack, depth, len(stack))  # setattr() would read the object first
            obj, value = pop(), pop()
            self.stmt(stack, depth, f"{self.builtin('setattr')}({obj.text}, {arg!r}, {value.text})", [], idx)
        elif name == "STORE_SUBSCR":
            key, obj, value = pop(), pop(), pop()
            self.stmt(stack, depth, f"{obj.operand()}[{key.text}] = {value.text}", [value, obj, key], idx)
        elif name == "DELETE_SUBSCR":
            key, obj = pop(), pop()
            self.stmt(stack, depth, f"del {obj.operand()}[{key.text}]", [obj, key], idx)
        elif name == "STORE_SLICE":
            stop, start, obj, value = pop(), pop(), pop(), pop()
            self.stmt(stack, depth, f"{obj.operand()}[{start.operand()}:{stop.operand()}] = {value.text}",
                      [value, obj, start, stop], idx)
        elif name == "BINARY_SUBSCR":
            key, obj = pop(), pop()
            push(_Expr(f"{obj.operand()}[{key.text}]", obj.insts + key.insts + [idx]))
        elif name == "BINARY_SLICE":
            stop, start, obj = pop(), pop(), pop()
            push(_Expr(f"{obj.operand()}[{start.operand()}:{stop.operand()}]",
                       obj.insts + start.insts + stop.insts + [idx]))
        elif name == "BUILD_SLICE":
            parts = stack[-arg:]
            del stack[-arg:]
            push(self.call_expr(self.builtin("slice"), parts, idx))
        elif name == "BINARY_OP":
            right, left = pop(), pop()
            op = bu.binary_op_name(ins)
            if op.startswith("INPLACE_"):
                push(self.call_expr(self.obj(getattr(operator, _INPLACE[op[8:]])), [left, right], idx))
            else:
                push(self.binary(left, _BINARY[op], right, idx))
        elif name == "COMPARE_OP":
            right, left = pop(), pop()
            push(self.binary(left, _COMPARE[bu.compare_op_name(ins)], right, idx))
            if bu.compare_to_bool(ins):
                push(self.call_expr(self.builtin("bool"), [pop()], idx))
        elif name == "TO_BOOL":  # (not before a jump: see run)
            push(self.call_expr(self.builtin("bool"), [pop()], idx))
        elif name == "IS_OP":
            right, left = pop(), pop()
            push(self.binary(left, "is not" if arg else "is", right, idx))
        elif name == "CONTAINS_OP":
            right, left = pop(), pop()
            push(self.binary(left, "not in" if arg else "in", right, idx))
        elif name in _UNARY:
            value = pop()
            push(_Expr(f"{_UNARY[name]}{value.operand()}", value.insts + [idx], primary=False))
        elif name == "CALL_INTRINSIC_1":
            which, value = bu.intrinsic_name(ins), pop()
            if which == "INTRINSIC_UNARY_POSITIVE":
                push(_Expr(f"+{value.operand()}", value.insts + [idx], primary=False))
            elif which == "INTRINSIC_LIST_TO_TUPLE":
                push(self.call_expr(self.builtin("tuple"), [value], idx))
            else:
                raise Undecompilable(f"CALL_INTRINSIC_1 {which}")
        elif name == "GET_ITER":
            push(self.call_expr(self.builtin("iter"), [pop()], idx))
        elif name in ("BUILD_TUPLE", "BUILD_LIST", "BUILD_SET", "BUILD_MAP", "BUILD_STRING"):
            n = arg * 2 if name == "BUILD_MAP" else arg
            items = stack[len(stack) - n:]
            del stack[len(stack) - n:]
            texts = [e.text for e in items]
            primary = True
            if name == "BUILD_TUPLE":
                text = "(" + ", ".join(texts) + ("," if n == 1 else "") + ")"
            elif name == "BUILD_LIST":
                text = "[" + ", ".join(texts) + "]"
            elif name == "BUILD_SET":
                text = "{" + ", ".join(texts) + "}" if n else f"{self.builtin('set')}()"
            elif name == "BUILD_MAP":
                text = "{" + ", ".join(f"{k}: {v}" for k, v in zip(texts[::2], texts[1::2])) + "}"
            else:
                text, primary = " + ".join(e.operand() for e in items) or "''", n <= 1
            push(_Expr(text, [i for e in items for i in e.insts] + [idx], primary=primary))
        elif name == "BUILD_CONST_KEY_MAP":
            keys = pop()
            values = stack[len(stack) - arg:]
            del stack[len(stack) - arg:]
            if not isinstance(keys.value, tuple) or len(keys.value) != arg:
                raise Undecompilable("BUILD_CONST_KEY_MAP without its keys")
            text = "{" + ", ".join(f"{self.obj(k)}: {v.text}" for k, v in zip(keys.value, values)) + "}"
            push(_Expr(text, [i for e in values for i in e.insts] + keys.insts + [idx]))
        elif name == "FORMAT_VALUE":
            spec = pop() if arg & 4 else None
            value = pop()
            conv = {1: "str", 2: "repr", 3: "ascii"}.get(arg & 3)
            if conv:
                value = self.call_expr(self.builtin(conv), [value], idx)
            push(self.call_expr(self.builtin("format"), [value] + ([spec] if spec else []), idx))
        elif name == "CONVERT_VALUE":
            conv = {1: "str", 2: "repr", 3: "ascii"}[bu.convert_flag(ins)]
            push(self.call_expr(self.builtin(conv), [pop()], idx))
        elif name in ("FORMAT_SIMPLE", "FORMAT_WITH_SPEC"):
            spec = pop() if name == "FORMAT_WITH_SPEC" else None
            value = pop()
            push(self.call_expr(self.builtin("format"), [value] + ([spec] if spec else []), idx))
        elif name == "UNPACK_SEQUENCE":
            seq = pop()
            names = [self.temp() for _ in range(arg)]
            self.stmt(stack, depth, f"{', '.join(names)}{',' if arg == 1 else ''} = {seq.text}", [seq], idx)
            stack += [_Expr(n, stable=True) for n in reversed(names)]
        elif name == "COPY":
            self.spill(stack, depth, len(stack) - arg + 1)
            e = stack[-arg]
            push(_Expr(e.text, [idx], e.primary, e.stable, e.local))
        elif name == "SWAP":
            self.spill(stack, depth, len(stack))
            stack[-1], stack[-arg] = stack[-arg], stack[-1]
            self.loose.append(idx)
        elif name == "POP_TOP":
            value = pop()
            if value.keeps(()):
                self.loose += value.insts + [idx]
            else:
                self.stmt(stack, depth, value.text, [value], idx)
        elif name in ("CALL", "CALL_KW"):
            kw_insts = []
            if name == "CALL_KW":  # 3.13: the keyword names on top
                names = pop()
                if not isinstance(names.value, tuple):
                    raise Undecompilable("CALL_KW without its keyword names")
                kw, kw_insts = names.value, names.insts
            else:
                kw = self.kw_names
            self.kw_names = ()
            args = stack[len(stack) - arg:]
            del stack[len(stack) - arg:]
            above, below = pop(), pop()
            fn, first = bu.call_slots(below, above, lambda e: e.text is None)
            insts = [*below.insts, *above.insts, *(i for e in args for i in e.insts), *kw_insts,
                     idx]
            if first is not None:  # [method, self, args]
                args = [first, *args]
            if not all(_is_name(k) for k in kw):
                raise Undecompilable("keyword names that are not identifiers")
            npos = len(args) - len(kw)
            texts = [e.text for e in args[:npos]] + [f"{k}={e.text}" for k, e in zip(kw, args[npos:])]
            push(_Expr(f"{fn.operand()}({', '.join(texts)})", insts))
        elif name == "CALL_FUNCTION_EX":
            kwargs = pop() if arg & 1 else None
            args = pop()
            above, below = pop(), pop()
            fn, first = bu.call_slots(below, above, lambda e: e.text is None)
            if first is not None:
                raise Undecompilable("CALL_FUNCTION_EX without NULL")
            text = f"{fn.operand()}(*{args.operand()}" + (f", **{kwargs.operand()})" if kwargs else ")")
            kw_insts = kwargs.insts if kwargs else []
            push(_Expr(text, [*below.insts, *above.insts, *args.insts, *kw_insts, idx]))
        elif name == "MAKE_FUNCTION":
            flags = bu.make_function_flags(ins)
            if flags & ~0x09:
                raise Undecompilable("MAKE_FUNCTION with annotations or keyword defaults")
            code = pop()
            closure = pop() if flags & 0x08 else _Expr("None")
            defaults = pop() if flags & 0x01 else _Expr("None")
            push(self.make_function(code, defaults, closure, idx))
        elif name == "SET_FUNCTION_ATTRIBUTE":  # 3.13: right after MAKE_FUNCTION
            fn, value = pop(), pop()
            if not isinstance(fn.value, _MadeFunction) or arg not in (0x01, 0x08):
                raise Undecompilable(f"SET_FUNCTION_ATTRIBUTE {arg}")
            code, defaults, closure = fn.value.parts
            if arg == 0x01:
                defaults = value
            else:
                closure = value
            made = self.make_function(code, defaults, closure, idx)
            made.insts = fn.insts + value.insts + [idx]
            push(made)
        elif name == "IMPORT_NAME":
            fromlist, level = pop(), pop()
            parts = [_Expr(repr(arg)), _Expr(f"{self.builtin('globals')}()"), _Expr("None"), fromlist, level]
            push(self.call_expr(self.builtin("__import__"), parts, idx))
        elif name == "BEFORE_WITH":  # (resume prologues) what CPython does: special methods
            mgr = pop()
            stack.append(mgr)
            self.spill(stack, depth, len(stack))
            m = pop().text
            kind = f"{self.builtin('type')}({m})"
            push(_Expr(f"{kind}.__exit__.__get__({m})", [idx]))
            push(_Expr(f"{kind}.__enter__({m})", []))
        elif name in ("RETURN_VALUE", "RETURN_CONST"):
            value = pop() if name == "RETURN_VALUE" else _Expr(self.obj(arg))
            self.stmt(stack, depth, f"return {value.text}", [value], idx)
            return True
        elif name in ("RAISE_VARARGS", "RERAISE"):
            if name == "RERAISE":
                exc = pop()
                text = "raise" if exc.text.startswith("___e") else f"raise {exc.text}"
                used = [exc]
            else:
                used = stack[len(stack) - arg:] if arg else []
                del stack[len(stack) - arg:]
                text = "raise " + " from ".join(e.text for e in used) if used else "raise"
            self.stmt(stack, depth, text, used, idx)
            return True
        else:
            raise Undecompilable(f"the opcode {name}")
        return False

    def binary(self, left, op, right, idx):
        return _Expr(f"{left.operand()} {op} {right.operand()}", left.insts + right.insts + [idx], primary=False)

    def make_function(self, code, defaults, closure, idx):
        """``FunctionType(code, globals(), None, defaults, closure)``; its parts are kept (as
        ``value``) for 3.13's SET_FUNCTION_ATTRIBUTE."""
        parts = [code, _Expr(f"{self.builtin('globals')}()"), _Expr("None"), defaults, closure]
        made = self.call_expr(self.obj(types.FunctionType), parts, idx)
        made.value = _MadeFunction((code, defaults, closure))
        return made

    def call_expr(self, fn_text, args, idx):
        return _Expr(f"{fn_text}({', '.join(e.text for e in args)})", [i for e in args for i in e.insts] + [idx])


class _MadeFunction:
    """The ``value`` of a function MAKE_FUNCTION made: its (code, defaults, closure) parts."""

    def __init__(self, parts):
        self.parts = parts


def _test(cond, when_true, tests_none):
    """The condition under which the code after a conditional jump runs."""
    if tests_none:
        return f"{cond.operand()} is {'' if when_true else 'not '}None"
    return cond.text if when_true else f"not {cond.operand()}"


def _merge(a, b):
    """The stack where two ways meet (b None: only one way gets there)."""
    if b is not None and [e.text for e in a] != [e.text for e in b]:
        raise Undecompilable("two ways reach a point with different stacks")
    return a


# ---- whole functions --------------------------------------------------------------------------

def source_names(code):
    """The name each local, cell and free variable of ``code`` gets in source: its own, unless
    that is no identifier (pytest's assertion rewriting makes ``@py_assert1``)."""
    names = [*code.co_varnames, *code.co_cellvars, *code.co_freevars]
    out, taken = {}, set(names)
    for name in names:
        if name not in out:
            new = name if _is_name(name) else safe_name(name)
            while new != name and new in taken:
                new += "_"
            taken.add(new)
            out[name] = new
    return out


def signature(code):
    """The parameter list of ``code``'s function (without defaults)."""
    src = source_names(code)
    names, n = [src[v] for v in code.co_varnames], code.co_argcount
    params = list(names[:n])
    if code.co_posonlyargcount:
        params.insert(code.co_posonlyargcount, "/")
    kwonly = list(names[n:n + code.co_kwonlyargcount])
    rest = n + len(kwonly)
    if code.co_flags & bu.VARARGS_FLAG:
        params.append("*" + names[rest])
        rest += 1
    elif kwonly:
        params.append("*")
    params += kwonly
    if code.co_flags & bu.VARKEYWORDS_FLAG:
        params.append("**" + names[rest])
    return ", ".join(params)


def safe_name(name):
    out = "".join(c if c.isalnum() or c == "_" else "_" for c in name)
    return out if _is_name(out) else f"_{out}"


def function_lines(code, name, body, declarations=(), pad_body=True):
    """``def name(<code's parameters>):`` over ``body`` (lines indented for the def's body, 4
    spaces), inside a factory taking the free variables when ``code`` has some, so that compiling
    the source gives a function with the same free variables (``pad_body=False``: the body keeps
    its indentation there, as user source whose strings may span lines must). Returns (lines,
    index of the def, index of the first body line)."""
    lines, pad = [], ""
    if code.co_freevars:
        free = [source_names(code)[v] for v in code.co_freevars]
        lines.append(f"def ___closure_of_{name}({', '.join(free)}):  # the closure's variables")
        pad = "    "
    def_line = len(lines)
    lines.append(f"{pad}def {name}({signature(code)}):")
    lines += [f"{pad}    {d}" for d in declarations]
    first = len(lines)
    lines += [pad + line if line.strip() and pad_body else line for line in body]
    if code.co_freevars:
        lines.append(f"    return {name}")
    return lines, def_line, first


def decompile(code, shadowed=(), name=None):
    """The source of ``code`` as a function (see the module's docstring); ``shadowed``: global
    names of its module (builtins they hide are named as constants)."""
    d = _Decompiler(code, shadowed)
    how, _, _ = d.run(0, len(d.items), [], 0)
    if how != "end":
        raise Undecompilable("the code runs off its end")
    decls = []
    if d.nonlocals:
        decls.append(f"nonlocal {', '.join(sorted(d.nonlocals))}")
    if d.globals_written:
        decls.append(f"global {', '.join(sorted(d.globals_written))}")
    user = [set() for _ in d.lines]  # the user's lines behind each line written
    for line, ins in zip(d.inst_lines, (i for i in d.items if isinstance(i, Instr))):
        if line is not None and ins.lineno not in (None, code.co_firstlineno):
            user[line].add(ins.lineno)
    body, where, mark = [], [], None
    for (depth, text), lines in zip(d.lines, user):
        pad = "    " * (depth + 1)
        if lines and max(lines) != mark:  # a comment names the user's line, where it changes
            mark = max(lines)
            src = linecache.getline(code.co_filename, mark).strip()
            body.append(f"{pad}# {os.path.basename(code.co_filename)}:{mark}" + (f"  {src}" if src else ""))
        where.append(len(body))
        body.append(pad + text)
    lines, def_line, first = function_lines(code, name or safe_name(code.co_name), body, decls)
    inst_lines, current = [], def_line
    for line in d.inst_lines:  # instructions computing nothing before any line: the def's
        current = first + where[line] if line is not None else current
        inst_lines.append(current)
    return Decompiled(name or safe_name(code.co_name), lines, def_line, inst_lines, d.constants)


def prologue(code, stop_at):
    """A resume function's prologue, items up to the instruction index ``stop_at`` (its jump into
    the original body): (statements, the stack it leaves as texts, constants)."""
    d = _Decompiler(code)
    pos = next(p for p, i in d.index.items() if i == stop_at)
    _, stack, _ = d.run(0, pos, [], 0)
    return [text for _, text in d.lines], ["NULL" if e.text is None else e.text for e in stack], d.constants


def _read(code):
    """``Bytecode.from_code(code)``. Code whose last jump target is its end (the `raise` of a
    break in `with` blocks leaves one) is read with a NOP put there, which is then dropped."""
    try:
        return Bytecode.from_code(code)
    except KeyError:
        b = Bytecode.from_code(code.replace(co_code=code.co_code + bytes([dis.opmap["NOP"], 0])))
        if not (isinstance(b[-1], Instr) and b[-1].name == "NOP"):
            raise
        del b[-1]
        return b


def relocate(code, filename, first_line, lines):
    """``code`` with ``filename`` as co_filename, ``first_line`` as co_firstlineno and
    instruction i (in ``Bytecode`` order) at line ``lines[i]``; the instructions are the same."""
    b = _read(code)
    k = 0
    for item in b:
        if isinstance(item, Instr):
            item.location = InstrLocation(lines[k], None, None, None)
            k += 1
    b.filename, b.first_lineno = filename, first_line
    return b.to_code()
