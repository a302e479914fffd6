"""Resume functions: the rest of a frame after a graph break, as an ordinary code object.

A resume function for (code, instruction index, stack shape, live locals) is made from the
original code: its arguments are the saved stack values (``___stack<i>``) and the live locals
(under their own names); a prologue pushes the stack back and jumps to the instruction. Some
slots are re-created rather than passed: a NULL cannot be an argument; re-entering
``torch.no_grad()`` both restores the grad mode and leaves a real ``__exit__`` on the stack; a
loop's own iterator arrives as the tuple of the items left and the prologue calls iter() on it;
values made in the trace that the resume function's trace should see made (functions,
iterators, C iterators: variables/rebuild.py) arrive as the tuple of their leaves and the
prologue makes them again by their recipe (``("recipe", recipe)`` slots, ``("recipe", name,
recipe)`` locals); a value in several slots arrives once and the prologue copies it
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
    """Instructions that make the values given by recipe again, bind aliased locals and push
    the stack of ``shape`` back from the ``___stack<i>`` arguments."""
    out = []
    for i, slot in enumerate(shape):  # first, as locals may alias them
        if isinstance(slot, tuple) and slot[0] == "recipe":  # ("recipe", recipe)
            out.extend(_emit_recipe(slot[1], f"___stack{i}", [0], lineno))
            out.append(bu.create_instruction("STORE_FAST", f"___stack{i}", lineno=lineno))
    for entry in live:
        if isinstance(entry, tuple) and entry[0] == "recipe":  # ("recipe", name, recipe)
            out.extend(_emit_recipe(entry[2], entry[1], [0], lineno))
            out.append(bu.create_instruction("STORE_FAST", entry[1], lineno=lineno))
    for entry in live:
        if isinstance(entry, tuple) and entry[0] != "recipe":  # (name, the argument holding the same object)
            out.append(bu.create_instruction("LOAD_FAST", entry[1], lineno=lineno))
            out.append(bu.create_instruction("STORE_FAST", entry[0], lineno=lineno))
    for i, slot in enumerate(shape):
        if isinstance(slot, tuple) and slot[0] == "alias":
            out.append(bu.create_instruction("LOAD_FAST", slot[1], lineno=lineno))
        elif slot == "null":
            out.append(bu.create_instruction("PUSH_NULL", lineno=lineno))
        elif slot == "value" or slot[0] == "recipe":
            out.append(bu.create_instruction("LOAD_FAST", f"___stack{i}", lineno=lineno))
        elif slot == "iter":
            out.append(bu.create_instruction("LOAD_FAST", f"___stack{i}", lineno=lineno))
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


def _emit_recipe(node, arg, next_leaf, lineno):
    """Push the value recipe ``node`` (variables/rebuild.py) makes; its leaves are the items of
    the tuple argument ``arg``, taken in order (``next_leaf``: [index of the next one])."""
    def ins(name, *a):
        return bu.create_instruction(name, *a, lineno=lineno)

    def subs(nodes):
        return [i for n in nodes for i in _emit_recipe(n, arg, next_leaf, lineno)]
    kind = node[0]
    if kind == "leaf":
        next_leaf[0] += 1
        return [ins("LOAD_FAST", arg), ins("LOAD_CONST", next_leaf[0] - 1), bu.create_binary_subscr(lineno)]
    if kind == "const":
        return [ins("LOAD_CONST", node[1])]
    if kind == "global":
        return [bu.create_load_global(node[1], False, lineno)]
    if kind == "call":
        _, fn, args = node
        out = bu.with_null([ins("LOAD_CONST", fn)], ins("PUSH_NULL"))
        return out + subs(args) + bu.create_call(len(args), lineno=lineno)
    if kind in ("tuple", "list"):
        return subs(node[1]) + [ins("BUILD_TUPLE" if kind == "tuple" else "BUILD_LIST", len(node[1]))]
    if kind == "dict":
        _, keys, values = node
        out = []
        for key, value in zip(keys, values):
            out.append(ins("LOAD_CONST", key))
            out.extend(_emit_recipe(value, arg, next_leaf, lineno))
        return out + [ins("BUILD_MAP", len(keys))]
    # ("fn", code, defaults, kwdefaults, annotations, cells): MAKE_FUNCTION over the frame's
    # cells, free variables of the resume function
    _, code, defaults, kwdefaults, annotations, cells = node
    out, flags = [], 0
    for flag, part in ((0x01, defaults), (0x02, kwdefaults)):
        if part is not None:
            flags |= flag
            out.extend(_emit_recipe(part, arg, next_leaf, lineno))
    if annotations is not None:
        flags |= 0x04
        out.append(ins("LOAD_CONST", annotations))
    if cells:
        flags |= 0x08
        out.extend(bu.create_load_closure(name, _AllFree, lineno) for name in cells)
        out.append(ins("BUILD_TUPLE", len(cells)))
    return out + bu.create_make_function(code, flags, lineno)


class _AllFree:
    """A resume function's cells are all free variables (see ``_prologue``)."""
    co_cellvars = ()


def _is_arg_slot(slot):
    return slot in ("value", "iter") or (isinstance(slot, tuple) and slot[0] == "recipe")


def _make_resume_code(code, index, shape, live, generator=False):
    """The resume code; ``generator``: of a generator suspended at the yield before ``index``,
    as a generator function whose first ``next()`` runs the prologue up to a yield of its own
    (so that it is suspended at a yield, as the original: ``send`` reaches the code after it)."""
    insts = bu.decode(code)
    lineno = insts[index].lineno or code.co_firstlineno
    target = bu.new_label()
    body = _prologue(code, generator) + _stack_prologue(shape, live, lineno)
    index_map = {}
    if generator:  # the original yield and the RESUME after it, then on after them
        items = [i for i in bu.code_items(code) if bu.is_instr(i)]
        body += [bu.create_instruction("LOAD_CONST", None, lineno=lineno),
                 bu.copy_instr(items[index - 1], lineno), bu.copy_instr(items[index], lineno)]
        index_map[len(body) - 1] = index  # suspended at this yield: as at the original one
        index += 1
    body.append(bu.create_jump_forward(target, lineno))
    n, new_index = 0, len(body)
    skip_pop = False
    for item in bu.code_items(code):
        if bu.is_instr(item):
            if n == index:
                body.append(target)
            n += 1
            if bu.is_function_prologue(item) or item.name == "RETURN_GENERATOR" or (skip_pop and item.name == "POP_TOP"):
                skip_pop = item.name == "RETURN_GENERATOR"
                continue  # ours runs instead
            skip_pop = False
            index_map[new_index] = n - 1
            new_index += 1
        body.append(item)
    body = bu.cells_as_free(body, code)
    argnames = [f"___stack{i}" for i, s in enumerate(shape) if _is_arg_slot(s)]
    argnames += [e if isinstance(e, str) else e[1] for e in live if isinstance(e, str) or e[0] == "recipe"]
    first = super_argument(code, live)
    if first is not None:  # zero-argument super() reads the first local slot
        argnames.remove(first)
        argnames.insert(0, first)
    name = f"resume_in_{code.co_name}_at_{lineno}"
    new = bu.new_code(code, argnames, body, name, name, cells_free=True, generator=generator)
    _origins[new] = (code, index_map)
    return new


def generator_resume_code(code, index, shape, live):
    """The (memoised) code of a generator function going on from instruction ``index`` of
    generator code ``code`` (just after a yield) with the stack of ``shape`` and the locals
    ``live`` as its arguments (see ``_make_resume_code``)."""
    code, index = origin(code, index)
    per_code = _memo.setdefault(code, {})
    key = ("generator", index, shape, live)
    if key not in per_code:
        per_code[key] = (_make_resume_code(code, index, shape, live, generator=True), None)
    return per_code[key][0]


def _prologue(code, generator=False):
    """The resume function's own prologue: the frame's cells are its free variables (the
    frame passes its cells, so functions made before the break share them), then RESUME (a
    generator's makes the generator first)."""
    out = []
    n = len(code.co_freevars) + len(code.co_cellvars)
    if n:
        out.append(bu.create_instruction("COPY_FREE_VARS", n, lineno=code.co_firstlineno))
    if generator:
        out.append(bu.create_instruction("RETURN_GENERATOR", lineno=code.co_firstlineno))
        out.append(bu.create_instruction("POP_TOP", lineno=code.co_firstlineno))
    out.append(bu.create_instruction("RESUME", 0, lineno=code.co_firstlineno))
    return out


def in_prologue(code, index):
    """Instruction ``index`` of ``code`` only sets the frame up: a function's prologue (RESUME,
    cells), or a resume function's own (which rebuilds the stack and jumps to the user's code)."""
    if code in _origins:
        return index not in _origins[code][1]
    return bu.decode(code)[index].opname in ("RESUME", "MAKE_CELL", "COPY_FREE_VARS")


def is_resume_code(code):
    return code in _origins


def resume_code(code, index, shape, live):
    """The (memoised) resume code and, for code without free variables, the name of the global
    holding its function (None otherwise: the caller makes the closure)."""
    per_code = _memo.setdefault(code, {})
    key = (index, shape, live)
    if key not in per_code:
        new = _make_resume_code(code, index, shape, live)
        per_code[key] = (new, None if new.co_freevars else f"__resume_{id(new):x}")
    return per_code[key]


def codegen_load_resume(cg, f_globals, code, index, shape, live):
    """Push the resume function (and its NULL) for a call; returns the resume code. One with
    free variables is made here, a closure over the frame's cells (``cg.code``'s)."""
    from .output_graph import install_global
    new, gname = resume_code(code, index, shape, live)
    if gname is None:
        cg.append_callable(lambda: cg.append(*bu.create_make_closure(new, cg.code)))
        return new
    fn = f_globals.get(gname)
    if not (isinstance(fn, types.FunctionType) and fn.__code__ is new):
        install_global(f_globals, gname, types.FunctionType(new, f_globals, new.co_name))
    cg.load_global(gname, push_null=True)
    return new
