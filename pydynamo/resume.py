"""Resume functions: the rest of a frame after a graph break, as an ordinary code object.

A resume function for (code, instruction index, stack shape, live locals) is made from the
original code: its arguments are the saved stack values (``___stack<i>``) and the live locals
(under their own names); a prologue pushes the stack back and jumps to the instruction. Some
slots are re-created rather than passed: a NULL cannot be an argument; re-entering
``torch.no_grad()`` both restores the grad mode and leaves a real ``__exit__`` on the stack; a
loop's iterator arrives as the tuple of the items left and the prologue calls iter() on it (the
trace then knows the items); a value in several slots arrives once and the prologue copies it
(``("alias", argument)`` slots, ``(name, argument)`` locals), so aliasing survives the break. The rest of the body is the original, so line numbers,
exception handlers and loops are the user's; the code keeps the user's co_filename, so the
hook captures it on its next call like any other frame.

Resume codes are memoised per (original code, index, stack shape, live locals): the same break
always calls the same code object, whose cache entries then serve every later call.
"""
import functools
import types
import weakref

import torch

from . import bytecode_utils as bu

# original code -> {(index, shape, live names): (resume code, global name or None)}
_memo = weakref.WeakKeyDictionary()
# resume code -> (original code, {instruction index in it: index in the original})
_origins = weakref.WeakKeyDictionary()


def reset():
    _memo.clear()
    _origins.clear()


def origin(code, index):
    """(original code, index there) of instruction ``index`` of ``code``: a break inside a
    resume function resumes in a function made from the original, so a loop that breaks on
    every iteration reuses one resume function instead of nesting new ones."""
    if code not in _origins:
        return code, index
    orig, index_map = _origins[code]
    if index not in index_map:
        from .exc import Unsupported
        raise Unsupported("a graph break inside a resume function's prologue")
    return orig, index_map[index]


@functools.lru_cache(maxsize=256)
def _liveness(code):
    """For each instruction index, the locals that may be read before being written from it."""
    insts = bu.decode(code)
    n = len(insts)
    handlers = bu.exception_handlers(code)
    live_in = [frozenset()] * (n + 1)
    changed = True
    while changed:
        changed = False
        handler_live = frozenset().union(*(live_in[h] for h in handlers)) if handlers else frozenset()
        for inst in reversed(insts):
            out = set(handler_live)
            for s in bu.successors(inst, n):
                out |= live_in[s]
            for kind, name in reversed(bu.local_accesses(inst, code)):
                if kind == "w":
                    out.discard(name)
                else:
                    out.add(name)
            new = frozenset(out)
            if new != live_in[inst.index]:
                live_in[inst.index], changed = new, True
    return live_in


def live_locals(code, index):
    """Locals whose values the code from instruction ``index`` on may read. A method using
    zero-argument ``super()`` reads its first argument implicitly (CPython's super reads the
    frame's first local slot): it stays live, and becomes the resume function's first argument
    (``super_argument``)."""
    live = _liveness(code)[index]
    first = _super_first_argument(code)
    return live | {first} if first is not None else live


def _super_first_argument(code):
    if "__class__" in code.co_freevars and code.co_argcount + code.co_kwonlyargcount:
        return code.co_varnames[0]
    return None


def super_argument(code, live):
    """The live local that must be the resume function's first argument, or None."""
    first = _super_first_argument(code)
    return first if first in live else None


def _stack_prologue(shape, live, lineno):
    """Instructions that bind aliased locals and push the stack of ``shape`` back from the
    ``___stack<i>`` arguments."""
    out = []
    for entry in live:
        if isinstance(entry, tuple):  # (name, the argument holding the same object)
            out.append(bu.create_instruction("LOAD_FAST", entry[1], lineno=lineno))
            out.append(bu.create_instruction("STORE_FAST", entry[0], lineno=lineno))
    for i, slot in enumerate(shape):
        if isinstance(slot, tuple) and slot[0] == "alias":
            out.append(bu.create_instruction("LOAD_FAST", slot[1], lineno=lineno))
        elif slot == "null":
            out.append(bu.create_instruction("PUSH_NULL", lineno=lineno))
        elif slot in ("value", "iter"):
            out.append(bu.create_instruction("LOAD_FAST", f"___stack{i}", lineno=lineno))
            if slot == "iter":
                out.append(bu.create_instruction("GET_ITER", lineno=lineno))
        else:  # ("ctx", fn, args, grad): enter `with fn(*args)` again, then set grad mode grad
            _, fn, args, grad = slot
            out.extend(bu.with_null([bu.create_instruction("LOAD_CONST", fn, lineno=lineno)],
                                    bu.create_instruction("PUSH_NULL", lineno=lineno)))
            for const in args:
                out.append(bu.create_instruction("LOAD_CONST", const, lineno=lineno))
            out.extend(bu.create_call(len(args), lineno=lineno))
            out.append(bu.create_instruction("BEFORE_WITH", lineno=lineno))
            out.append(bu.create_instruction("POP_TOP", lineno=lineno))
            if grad is not None:  # the grad mode inside (see ctx.close_blocks): set at once
                out.extend(bu.with_null(
                    [bu.create_instruction("LOAD_CONST", torch.set_grad_enabled, lineno=lineno)],
                    bu.create_instruction("PUSH_NULL", lineno=lineno)))
                out.append(bu.create_instruction("LOAD_CONST", grad, lineno=lineno))
                out.extend(bu.create_call(1, lineno=lineno))
                out.append(bu.create_instruction("POP_TOP", lineno=lineno))
    return out


def _make_resume_code(code, index, shape, live):
    insts = bu.decode(code)
    lineno = insts[index].lineno or code.co_firstlineno
    target = bu.new_label()
    body = bu.prologue(code, code.co_firstlineno) + _stack_prologue(shape, live, lineno)
    body.append(bu.create_jump_forward(target, lineno))
    index_map, n, new_index = {}, 0, len(body)
    for item in bu.code_items(code):
        if bu.is_instr(item):
            if n == index:
                body.append(target)
            n += 1
            if bu.is_function_prologue(item):
                continue  # ours runs instead
            index_map[new_index] = n - 1
            new_index += 1
        body.append(item)
    argnames = [f"___stack{i}" for i, s in enumerate(shape) if s in ("value", "iter")]
    argnames += [name for name in live if isinstance(name, str)]
    first = super_argument(code, live)
    if first is not None:  # zero-argument super() reads the first local slot
        argnames.remove(first)
        argnames.insert(0, first)
    name = f"resume_in_{code.co_name}_at_{lineno}"
    new = bu.new_code(code, argnames, body, name, name)
    _origins[new] = (code, index_map)
    return new


def is_resume_code(code):
    return code in _origins


def resume_code(code, index, shape, live):
    """The (memoised) resume code and, for code without free variables, the name of the global
    holding its function (None otherwise: the caller makes the closure)."""
    per_code = _memo.setdefault(code, {})
    key = (index, shape, live)
    if key not in per_code:
        new = _make_resume_code(code, index, shape, live)
        per_code[key] = (new, None if code.co_freevars else f"__resume_{id(new):x}")
    return per_code[key]


def codegen_load_resume(cg, f_globals, code, index, shape, live):
    """Push the resume function (and its NULL) for a call; returns the resume code."""
    from .output_graph import install_global
    new, gname = resume_code(code, index, shape, live)
    if gname is None:
        cg.append_callable(lambda: cg.append(*bu.create_make_closure(new)))
        return new
    fn = f_globals.get(gname)
    if not (isinstance(fn, types.FunctionType) and fn.__code__ is new):
        install_global(f_globals, gname, types.FunctionType(new, f_globals, new.co_name))
    cg.load_global(gname, push_null=True)
    return new
