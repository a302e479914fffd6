"""The symbolic bytecode interpreter.

``InstructionTranslator`` walks the top frame's instructions over VariableTrackers (the opcode
handlers live in opcodes.py, one method per opcode); calls to user functions and module
forwards run an ``InliningTranslator`` over the callee's code, sharing the OutputGraph, so the
whole call tree becomes one graph. ``convert`` is the entry point the frame hook calls.

Graph breaks happen only in the top frame. A break inside an inlined call breaks the top frame
at its call instruction: that call then runs natively, and the hook compiles the callee's frame
on its own (with its own breaks), like any frame.
"""
import collections
import types

import torch

from . import bytecode_utils as bu
from . import config, debug, resume
from .backends import lookup_backend
from .exc import ExceptionRaised, Unsupported, UnsupportedOpcodeError
from .opcodes import UNSUPPORTED, OpcodeHandlers
from .output_graph import OutputGraph
from .source import BuiltinSource, ClosureSource, GlobalSource, LocalSource
from .variables.base import CLOCK, NULL, NullVariable, VariableTracker
from .variables.constant import ConstantVariable
from .variables.ctx import (WithExitVariable, check_all_closed, close_blocks, codegen_enter,
                             codegen_exit, leave_all)
from .variables.exceptions import CALLER_EXC_INFO, ExceptionVariable
from .variables.functions import check_suspended_generators, closure_cell
from .variables.rebuild import check_rebuildable, recipe_of
from .variables.lists import ListIteratorVariable, TupleVariable
from .variables.builder import wrap_value
from .variables.compile_region import InlineRegion


class TranslatorBase(OpcodeHandlers):
    def __init__(self, output, code, f_globals, f_builtins, globals_source, symbolic_locals,
                 cells, depth):
        self.output = output
        self.code = code
        self.f_globals, self.f_builtins = f_globals, f_builtins
        self.globals_source = globals_source  # name -> Source, or None (trusted, unguarded)
        self.symbolic_locals = symbolic_locals
        self.cells = cells  # name -> CellVariable, for co_cellvars and co_freevars
        self.depth = depth
        self.instructions = bu.decode(code)
        self.stack = []
        self.ip = 0
        self.kw_names = ()
        self.done = False
        self.current = None
        self.steps = 0
        # the exception being handled (CPython's exc_info, see exc_owner): None, a tracker
        # of None (restored by POP_EXCEPT), an ExceptionVariable, or CALLER_EXC_INFO
        self.exc_value = None
        # set by CALL for the call it makes: an exception the callee raises passes through
        # unchanged (see inline_call)
        self.transparent_call = False

    # ---- the stack ----------------------------------------------------------------------------

    def push(self, var):
        self.stack.append(var)

    def pop(self):
        return self.stack.pop()

    def popn(self, n):
        if n == 0:
            return []
        items = self.stack[-n:]
        del self.stack[-n:]
        return items

    # ---- running ------------------------------------------------------------------------------

    def run(self):
        outer, self.output.current_tx = self.output.current_tx, self
        try:
            while not self.done:
                inst = self.current = self.instructions[self.ip]
                self.ip += 1
                self.steps += 1
                if self.steps > config.max_instructions:
                    raise Unsupported(f"more than {config.max_instructions} instructions "
                                      "traced in one frame (a long loop?)")
                try:
                    self.dispatch(inst)
                except ExceptionRaised as e:
                    self.handle_exception(inst, e)
        except Unsupported as e:
            lineno = self.current.lineno if self.current is not None else self.code.co_firstlineno
            e.add_frame(self.code.co_filename, lineno, self.code.co_name)
            raise
        finally:
            self.output.current_tx = outer

    def dispatch(self, inst):
        if inst.opname in UNSUPPORTED:
            raise UnsupportedOpcodeError(f"{inst.opname}: {UNSUPPORTED[inst.opname]}")
        handler = getattr(self, inst.opname, None)
        if handler is None:
            raise UnsupportedOpcodeError(f"opcode {inst.opname} is not supported yet")
        handler(inst)

    def jump_to(self, index):
        self.ip = index

    # ---- exceptions ---------------------------------------------------------------------------
    #
    # An exception the trace knows is raised (ExceptionRaised) goes where CPython's exception
    # table sends it: the stack is cut to the handler's depth, the handler runs on the
    # ExceptionVariable. With no handler in this frame it leaves run() to the caller's
    # instruction. Ops of the graph are assumed not to raise at run time (a shape error is
    # found while tracing, with fake tensors, and is not simulated: it breaks the graph).

    def handle_exception(self, inst, e):
        var = e.var
        if e.fresh:  # raised here, now: CPython links it to the exception being handled
            var.set_context(self.current_exception())
            var.raised, var.origin, e.fresh = True, None, False
        if self.depth == 0 and var.origin is None:  # where this propagation enters the top frame
            var.origin = (self.steps, inst, self.can_break(inst))
        entry = inst.exn
        if entry is None:
            return self.exception_escapes(e)
        del self.stack[entry.depth:]
        if entry.lasti:
            self.push(ConstantVariable(inst.index))  # only RERAISE reads it (for the traceback)
        self.push(var)
        self.kw_names = ()
        self.jump_to(entry.target)

    def exception_escapes(self, e):
        raise e  # to the caller's instruction

    def exc_owner(self):
        """The translator holding this frame's exc_info: the top frame's, or a generator's own
        (CPython keeps one per generator; other frames share their caller's)."""
        return self

    def current_exception(self):
        """The exception being handled (sys.exception()): None, an ExceptionVariable, or
        CALLER_EXC_INFO (whatever the compiled function's caller is handling)."""
        owner = self.exc_owner()
        value = owner.exc_value
        if value is None or isinstance(value, ConstantVariable):
            return owner.outer_exception()
        return value

    # ---- names --------------------------------------------------------------------------------

    def load_global(self, name):
        gsrc = self.globals_source
        if gsrc is GlobalSource and self.f_globals is self.root_globals():
            stored = self.output.side_effects.load_global(name)
            if stored is not None:
                return stored
        if name in self.f_globals:
            value = self.f_globals[name]
            if gsrc is None:  # torch's own code: a mutable global (a hook table) is still guarded
                return wrap_value(self, value, trusted_container_source(self.f_globals, name, value))
            return wrap_value(self, value, gsrc(name))
        if name not in self.f_builtins:
            raise Unsupported(f"NameError: name {name!r} is not defined")
        if gsrc is not None:
            self.output.guards.NOT_PRESENT(gsrc(name))
            return wrap_value(self, self.f_builtins[name], BuiltinSource(name))
        return wrap_value(self, self.f_builtins[name], None)

    def root_globals(self):
        raise NotImplementedError

    def call_function(self, fn, args, kwargs):
        return fn.call_function(self, list(args), dict(kwargs))

    def inline_call(self, code, f_globals, globals_source, bound, cells, name, namespace=None):
        if self.depth + 1 > config.inline_depth_limit:
            raise Unsupported(f"inlining deeper than {config.inline_depth_limit} calls "
                              f"(recursion in {name}?)")
        builtins = f_globals.get("__builtins__", self.f_builtins)
        if isinstance(builtins, types.ModuleType):
            builtins = builtins.__dict__
        transparent, self.transparent_call = self.transparent_call, False
        tx = InliningTranslator(self, code, f_globals, builtins, globals_source, bound, cells)
        tx.namespace = namespace  # a class body's (class_statement.py)
        if bu.is_plain_generator(code):
            from .variables.functions import GeneratorVariable
            self.output.generators.append(tx)
            tx.born = CLOCK[0]
            return GeneratorVariable(tx)  # runs up to each yield when iterated
        try:
            tx.run()
        except ExceptionRaised as e:
            if not transparent:  # a model called it: it may catch or reorder what Python would
                raise e.opaque(f"{name}, called by an operation pydynamo models") from None
            raise
        return tx.result

    def yield_value(self, value):
        raise Unsupported("yield in a frame that is not an inlined generator")


def trusted_container_source(f_globals, name, value):
    """Where torch's code reads a container global (``_global_optimizer_pre_hooks``): the
    module's attribute, the module held by identity, so what the trace reads of it is guarded
    (torch's functions are trusted not to be patched; the registries they read change)."""
    import sys
    if type(value) not in (dict, list, set, collections.OrderedDict, collections.defaultdict):
        return None
    module = sys.modules.get(f_globals.get("__name__"))
    if module is None or vars(module) is not f_globals:
        return None
    from .source import AttrSource, ConstObjectSource
    return AttrSource(ConstObjectSource(module), name)


class RestartAnalysis(Exception):
    """The trace met something it cannot capture at top-frame step ``step``: trace again from
    the start and break the graph there (nothing has to be undone: the first trace is thrown
    away, and the second stops before the instruction that failed). ``before``: the break
    could not be made there, so it is made before the instruction at ``step``, an earlier one
    (the instruction is then not run natively: the resume function starts with it)."""

    def __init__(self, step, exc, before=False):
        super().__init__(step)
        self.step, self.exc, self.before = step, exc, before


class InstructionTranslator(TranslatorBase):
    """The top frame: its arguments are the graph's inputs, its return ends the trace.

    A graph break (see ``break_graph``) ends the trace at an instruction: the new code calls
    the graph so far, replays side effects, runs that one instruction natively and returns what
    a resume function (resume.py) computes from the stack and the live locals.
    """

    def __init__(self, code, f_globals, f_builtins, f_locals, closure, backend, fullgraph=False,
                 break_at=None, dynamic=None):
        output = OutputGraph(code, f_globals, backend, dynamic)
        super().__init__(output, code, f_globals, f_builtins, GlobalSource, {}, {}, 0)
        self.fullgraph = fullgraph
        # (step, Unsupported, before) found by an earlier trace, or None
        self.break_at = break_at
        self.line_starts = bu.line_starts(code)
        self.break_points = {}  # step -> line, where a break before the instruction may be made
        self.started = False  # has the user's code run (a break before it would capture nothing)
        self.graph_breaks = []  # the Unsupported behind each break this trace emitted
        for index, name in enumerate(bu.argument_names(code)):
            if name not in f_locals:
                raise Unsupported(f"argument {name!r} missing from the frame's locals")
            self.symbolic_locals[name] = wrap_value(self, f_locals[name], LocalSource(name, index))
        closure = closure or ()
        if len(closure) != len(code.co_freevars):
            raise Unsupported("closure does not match the code's free variables")
        for index, (name, cell) in enumerate(zip(code.co_freevars, closure)):
            self.cells[name] = closure_cell(self, cell, ClosureSource(name, index))
        self.exc_value = CALLER_EXC_INFO

    def root_globals(self):
        return self.f_globals

    def MAKE_CELL(self, inst):
        """The frame's own cells exist at run time (see CellVariable)."""
        from .variables.base import CellVariable
        name = bu.var_name(inst.arg)
        self.cells[name] = CellVariable(self.symbolic_locals.pop(name, None), frame_name=name)

    def outer_exception(self):
        return CALLER_EXC_INFO

    def return_value(self, value):
        check_suspended_generators(self.output)
        check_all_closed(self)
        for cell in self.cells.values():  # the frame's cells die with it: a function it returns
            if cell.frame_name is not None:  # gets a fresh cell with the final contents
                self.output.side_effects.drop_cell(cell)
                cell.frame_name = None
        self.output.compile_and_return(self, value, self.current.lineno)
        self.done = True

    def dispatch(self, inst):
        CLOCK[0] = self.steps
        if self.break_at is not None and self.steps == self.break_at[0]:
            if self.break_at[2]:
                return self.break_before(inst, self.break_at[1])
            return self.break_graph(inst, self.break_at[1])
        if self.started and self.line_starts[inst.index] and not self.kw_names and self.can_break_before(inst):
            self.break_points[self.steps] = inst.lineno
        self.started = self.started or not resume.in_prologue(self.code, inst.index)
        try:
            super().dispatch(inst)
        except ExceptionRaised:
            raise  # handle_exception decides
        except Unsupported as e:
            if self.fullgraph or not self.can_break(inst) or getattr(e, "whole_frame", False):
                raise  # (whole_frame: a break there would be wrong; the frame runs eagerly)
            e.add_frame(self.code.co_filename, inst.lineno or self.code.co_firstlineno,
                        self.code.co_name)
            raise RestartAnalysis(self.steps, e) from None

    def exception_escapes(self, e):
        """An exception the frame's own handlers do not catch leaves it: Python raises it
        natively, with the user's traceback, from a graph break at the top-frame instruction
        where it started (a `raise`, a call whose callee raises, a failing lookup...)."""
        step, origin, breakable = e.var.origin
        exc = Unsupported(f"{e.reason}, which the compiled frame does not catch: Python raises "
                          "it natively")
        exc.user_stack = list(e.user_stack)
        self.current = origin  # the line run() reports
        raise_stmt = origin.opname == "RAISE_VARARGS"
        if raise_stmt and not origin.arg:
            raise exc  # a bare `raise` run natively would re-raise what Python is handling
        if (self.fullgraph and not raise_stmt) or not breakable:
            raise exc
        raise RestartAnalysis(step, exc)

    # ---- graph breaks -------------------------------------------------------------------------

    def can_break(self, inst):
        """Breaks run ``inst`` natively in new code that has none of the user's handlers: an
        exception there must be one that would leave the frame anyway (through `with` blocks,
        whose grad mode the new code restores), never one an ``except`` or ``finally`` of the
        user's could see. Otherwise the frame runs eagerly. Nor may a break happen while the
        frame handles an exception of the trace: the new code would not be handling it (a
        bare `raise`, sys.exception() and the __context__ of what it raises would differ)."""
        if bu.exception_exits(self.code)[inst.index] is None:
            return False
        if isinstance(self.exc_value, ExceptionVariable):
            return False
        return bu.conditional_jump(inst) is not None or bu.native_form(inst) is not None

    def can_break_before(self, inst):
        """A break before ``inst`` runs nothing natively: it needs only to be outside the
        user's handlers and not while the frame handles an exception (see ``can_break``)."""
        return bu.exception_exits(self.code)[inst.index] is not None and \
            not isinstance(self.exc_value, ExceptionVariable)

    def break_graph(self, inst, exc):
        """End the trace at ``inst``: graph so far, ``inst`` natively, then resume functions."""
        try:
            check_suspended_generators(self.output)
            if bu.conditional_jump(inst) is not None:
                self._break_on_jump(inst, *bu.conditional_jump(inst))
            else:
                kw_names = self.kw_names
                if inst.opname == "CALL_KW":  # 3.13: the names, a constant, on top
                    kw_names = tuple(self.pop().as_python_constant())
                self._break_native(inst, bu.native_form(inst, kw_names))
        except Unsupported as e:
            self._break_earlier(exc, e)
            raise Unsupported(f"{exc.reason}; the graph could not be broken there: {e.reason}",
                              exc.hint) from None
        self.graph_breaks.append(exc)
        self.done = True

    def _break_earlier(self, exc, failure):
        """A break failed because a value alive there cannot be rebuilt (``failure.culprit``):
        trace again and break before the line where it was made, if the frame has one where a
        break can be made (restarts go ever earlier; a frame whose first line has that value
        alive runs eagerly)."""
        culprit = getattr(failure, "culprit", None)
        if culprit is None or self.fullgraph:
            return
        earlier = [s for s in self.break_points if s <= culprit.born and s < self.steps]
        if earlier:
            line = self.break_points[earlier[-1]]
            why = Unsupported(f"{exc.reason} (the graph is broken before line {line}: later, "
                              f"{failure.reason})", exc.hint)
            why.user_stack = list(exc.user_stack)
            why.original = getattr(exc, "original", exc)
            raise RestartAnalysis(earlier[-1], why, before=True)

    def break_before(self, inst, exc):
        """End the trace before ``inst`` (an earlier break could not be made): graph so far,
        then the resume function from ``inst`` on, given the stack and the live locals."""
        try:
            check_suspended_generators(self.output)
            stack = list(self.stack)
            live = self._live(inst.index)
            cg, temps = self._start_break(stack + [self.symbolic_locals[n] for n in live])
            self._call_resume(cg, inst.index, stack, live, temps)
            self.output.finish(cg, inst.lineno)
        except Unsupported as e:
            self._break_earlier(exc, e)
            raise Unsupported(f"{exc.reason}; the graph could not be broken there: {e.reason}",
                              exc.hint) from None
        self.graph_breaks.append(exc)
        self.done = True

    def _slot(self, var):
        if isinstance(var, NullVariable):
            return "null"
        if isinstance(var, WithExitVariable):
            return self._blocks.slot(var.ctx)
        if id(var) not in self._recipes:
            self._recipes[id(var)] = None if id(var) in self._shared_ids else \
                recipe_of(var, self.f_globals, self._shared_ids)
        recipe = self._recipes[id(var)]
        if recipe is not None:  # made again by the prologue (variables/rebuild.py)
            return ("recipe", recipe[0])
        if isinstance(var, ListIteratorVariable) and id(var) not in self._local_ids:
            return "iter"  # a loop's iterator no name sees: any iterator of the items left
        return "value"

    def _argument(self, var, slot):
        """What the resume function is given for ``var`` in ``slot``."""
        if slot == "iter":
            return TupleVariable(var.items[var.index:])
        if isinstance(slot, tuple) and slot[0] == "recipe":
            leaves = self._recipes[id(var)][1]
            for leaf in leaves:
                check_rebuildable(leaf, self.f_globals)
            return TupleVariable(leaves)
        check_rebuildable(var, self.f_globals)
        return var

    def _live(self, index):
        live = resume.live_locals(*resume.origin(self.code, index))
        return tuple(n for n in self.code.co_varnames if n in live and n in self.symbolic_locals)

    def _save(self, cg, values):
        """Store each value (None for NULL / `with` slots) in a temporary; their names. One
        tracker in several slots is saved once: the resume function gets one object; and a
        container made in the trace is built once however many values hold it (PyCodegen
        keeps what it built), so aliases stay one object."""
        temps, seen = [], {}
        for var in values:
            slot = self._slot(var)
            if slot not in ("value", "iter") and slot[0] != "recipe":
                temps.append(None)
            elif id(var) in seen:
                temps.append(seen[id(var)])
            else:
                cg(self._argument(var, slot))
                temps.append(cg.new_temp())
                cg.store_local(temps[-1])
                seen[id(var)] = temps[-1]
        return temps

    def _start_break(self, values, objects=()):
        """The `with` blocks open here left in the graph (ctx.close_blocks); graph call, side
        effects, every value of ``values`` saved; then, outside `with` blocks, the grad mode the
        native instruction must see (the graph may have switched it; inside them,
        ``_append_in_blocks`` sets it). ``objects``: values the native instruction consumes,
        which must be real objects (not made again by a recipe)."""
        out = self.output
        self._local_ids = {id(v) for v in self.symbolic_locals.values()}
        self._shared_ids = shared_ids(values, self.output.side_effects.values())
        self._recipes = {id(v): None for v in objects}  # id(tracker) -> (recipe, leaves) or None
        self._blocks = close_blocks(self)
        cg, saved = out.begin_code(values)
        temps = self._save(cg, values)
        out.side_effects.codegen_apply(cg, saved)
        if not self._blocks.ctxs and self._blocks.grad != out.initial_grad_mode:
            cg.set_grad_enabled(self._blocks.grad)
        return cg, temps

    def _call_resume(self, cg, index, stack, local_names, temps):
        """``return resume_fn(*stack values, *live locals)`` (``temps`` holds them, in that
        order), with the grad mode the resume function starts in: that outside the outermost
        `with` block its prologue re-enters. A temp seen twice is passed once; the prologue
        makes the other slot an alias."""
        shape, live, args, arg_of = [], [], [], {}
        first = resume.super_argument(resume.origin(self.code, index)[0], local_names)
        first_pos = None
        for i, (var, temp) in enumerate(zip(stack, temps)):
            slot = self._slot(var)
            if temp is not None and temp in arg_of:
                slot = ("alias", arg_of[temp])
            elif temp is not None:
                arg_of[temp] = f"___stack{i}"
                args.append(temp)
            shape.append(slot)
        for name, temp in zip(local_names, temps[len(stack):]):
            if temp in arg_of and name != first:
                live.append((name, arg_of[temp]))
            else:
                first_pos = len(args) if name == first else first_pos
                arg_of[temp] = name
                slot = self._slot(self.symbolic_locals[name])
                rebuilt = isinstance(slot, tuple) and slot[0] == "recipe"
                live.append(("recipe", name, slot[1]) if rebuilt else name)
                args.append(temp)
        if self._blocks.ctxs:  # leave them; the resume function enters them again
            codegen_exit(cg, self._blocks)
            cg.set_grad_enabled(self._blocks.ctxs[0].outer_grad)
        code, index = resume.origin(self.code, index)
        if first_pos is not None:  # the resume function takes it first (see resume.live_locals)
            args.insert(0, args.pop(first_pos))
        resume.codegen_load_resume(cg, self.f_globals, code, index, tuple(shape), tuple(live))
        for name in args:
            cg.load_local(name)
        cg.append_call(len(args))
        cg.append_return()

    def _break_native(self, inst, form):
        stack = list(self.stack)
        if form.pushes is None:  # raise: nothing after it reads the rest of the stack
            stack = stack[len(stack) - form.pops:]
        resume_at = inst.index + 1
        if form.pushes == ("value",) and self.instructions[resume_at].opname == "POP_TOP":
            # a call as a statement (print(...)): drop its result here, not in the resume
            # function, which would otherwise be guarded on (and recompiled for) its value
            form = bu.NativeForm(form.instrs + [bu.create_instruction("POP_TOP")], form.pops, ())
            resume_at += 1
        live = self._live(resume_at) if form.pushes is not None else ()
        keep = len(stack) - form.pops
        cg, temps = self._start_break(stack + [self.symbolic_locals[n] for n in live], stack[keep:])
        stack_temps, local_temps = temps[:len(stack)], temps[len(stack):]
        if any(self._slot(v) not in ("value", "null") for v in stack[keep:]):  # (tuples: iterators)
            raise Unsupported("the instruction consumes a `with` block's exit or an iterator")
        for temp in stack_temps[keep:]:
            cg.load_local(temp) if temp is not None else cg.append_push_null()
        self._append_in_blocks(cg, form.instrs, inst.lineno)
        if form.pushes is None:  # raise: nothing runs after it
            self.output.finish(cg, inst.lineno)
            return
        pushed = [cg.new_temp() if p == "value" else None for p in form.pushes]
        for temp in reversed(pushed):
            if temp is not None:
                cg.store_local(temp)
        new_stack = stack[:keep] + [NULL if p == "null" else _NativeResult() for p in form.pushes]
        self._call_resume(cg, resume_at, new_stack, live,
                          stack_temps[:keep] + pushed + local_temps)
        self.output.finish(cg, inst.lineno)

    def _append_in_blocks(self, cg, instrs, lineno):
        """``instrs``, run inside the `with` blocks open at the break: each block's manager is
        entered again natively, with the grad mode of the trace; if ``instrs`` raise, they are
        left before the exception goes on, as the blocks' ``__exit__`` would (outside blocks, a
        mode set by ``torch.set_grad_enabled(...)`` stays, as in Python). On the way on,
        ``_call_resume`` leaves them."""
        if not self._blocks.ctxs:
            return cg.append(*instrs)
        codegen_enter(cg, self._blocks)
        handler, end = bu.new_label(), bu.new_label()
        begin, stop = bu.create_try(handler)
        cg.append(begin, *instrs, stop, bu.create_jump_forward(end, lineno), handler)
        codegen_exit(cg, self._blocks)
        cg.append(bu.create_instruction("RERAISE", 0, lineno=lineno), end)

    def _break_on_jump(self, inst, if_true, keep_on_jump):
        stack = list(self.stack)
        live_next, live_target = self._live(inst.index + 1), self._live(inst.target)
        live = tuple(n for n in self.code.co_varnames if n in live_next or n in live_target)
        cg, temps = self._start_break(stack + [self.symbolic_locals[n] for n in live], stack[-1:])
        stack_temps, local_temps = temps[:len(stack)], dict(zip(live, temps[len(stack):]))
        label = bu.new_label()
        cg.load_local(stack_temps[-1])
        self._append_in_blocks(cg, bu.create_pop_jump(if_true, label, inst.lineno), inst.lineno)
        self._call_resume(cg, inst.index + 1, stack[:-1], live_next,
                          stack_temps[:-1] + [local_temps[n] for n in live_next])
        cg.append(label)
        keep = len(stack) if keep_on_jump else len(stack) - 1
        self._call_resume(cg, inst.target, stack[:keep], live_target,
                          stack_temps[:keep] + [local_temps[n] for n in live_target])
        self.output.finish(cg, inst.lineno)


class _NativeResult(VariableTracker):
    """A value the natively run instruction left on the stack (known only at run time)."""


def shared_ids(values, more=()):
    """Ids of the trackers held more than once among ``values`` (a value in several slots
    counts once: it is passed once) or held by ``more`` (what side effects write)."""
    from .output_graph import children, walk_values
    count, seen = {}, set()
    stack = list({id(v): v for v in values}.values())
    for var in stack:
        count[id(var)] = 1
    while stack:
        var = stack.pop()
        if id(var) in seen:
            continue
        seen.add(id(var))
        for child in children(var):
            count[id(child)] = count.get(id(child), 0) + 1
            stack.append(child)
    shared = {i for i, n in count.items() if n > 1}
    shared.update(id(v) for v in walk_values(list(more)))
    return shared


class InliningTranslator(TranslatorBase):
    def __init__(self, parent, code, f_globals, f_builtins, globals_source, bound, cells):
        super().__init__(parent.output, code, f_globals, f_builtins, globals_source, dict(bound),
                         dict(cells), parent.depth + 1)
        self.parent = parent
        self.result = None
        self.finished = False
        self.is_generator = bu.is_plain_generator(code)
        self.consumer = None  # a generator: the translator that resumed it last

    def root_globals(self):
        return self.parent.root_globals()

    def exc_owner(self):
        return self if self.is_generator else self.parent.exc_owner()

    def outer_exception(self):
        """A generator's exc_info is stacked on that of the frame resuming it."""
        return self.consumer.current_exception()

    def return_value(self, value):
        self.result = value
        self.done = True
        self.finished = True

    def yield_value(self, value):
        self.result = value
        self.done = True  # paused: GeneratorVariable resumes it with run()


def convert(code, f_globals, f_builtins, f_locals, closure, backend, *, fullgraph=False, dynamic=None):
    """Trace one frame; return ``(new_code, checks)`` or raise ``Unsupported``.

    ``f_locals`` holds the frame's arguments by name, ``closure`` the function's __closure__.
    ``new_code`` has the same arguments, cell and free variables as ``code`` and is run as
    ``types.FunctionType(new_code, f_globals, closure=closure)(*same args)`` while every check
    in ``checks`` (``(steps, kind, value, text)`` tuples, see _C.pyi) holds. The compiled graph
    is stored in ``f_globals`` under the ``__compiled_fn_N`` name that new_code loads.

    What cannot be captured becomes a graph break (the new code calls a resume function for the
    rest; each break is reported to convert_frame.note_graph_break); where no break is possible
    ``Unsupported`` is raised and the caller runs the frame eagerly. With ``fullgraph`` the
    first thing that cannot be captured is raised. ``dynamic`` (a shapes.DynamicPolicy, or
    None: all sizes static) says which sizes are symbolic.
    """
    if bu.is_generator(code):
        raise Unsupported(f"{code.co_name} is a generator or coroutine")
    backend = lookup_backend(backend)
    grad_mode, dtype = torch.is_grad_enabled(), torch.get_default_dtype()
    break_at = None
    inline_regions = set()
    # ops on fake tensors must not call the saved-tensor hooks active now (checkpoint's,
    # save_on_cpu's, a user's): they run on what the compiled graph saves, when it runs
    hooks_tracing = torch._C._autograd._saved_tensors_hooks_set_tracing(True)
    try:
        while True:
            torch._C._set_grad_enabled(grad_mode)
            tx = InstructionTranslator(code, f_globals, f_builtins, f_locals, closure, backend,
                                       fullgraph, break_at, dynamic)
            if debug.tracer is not None:  # pydynamo.debug.trace: graph nodes note their user lines
                debug.tracer.watch(tx.output)
            tx.output.guards.GRAD_MODE()
            tx.output.guards.DEFAULT_DTYPE()
            tx.output.guards.AUTOCAST()
            tx.output.guards.TORCH_FUNCTION_MODE()
            tx.output.inline_regions = inline_regions
            try:
                tx.run()
                break
            except InlineRegion as region:  # a nested compile region that must be inlined
                if region.code in inline_regions:
                    raise AssertionError("a region to inline was traced as a region again") from None
                inline_regions.add(region.code)
            except RestartAnalysis as restart:
                if break_at is not None and not (restart.before and restart.step < break_at[0]):
                    raise AssertionError("a trace failed before the break found by the last one")
                break_at = (restart.step, restart.exc, restart.before)
            finally:
                leave_all(tx.output)  # context managers a trace stopped inside
    finally:
        torch._C._set_grad_enabled(grad_mode)
        torch.set_default_dtype(dtype)
        torch._C._autograd._saved_tensors_hooks_set_tracing(hooks_tracing)
    tx.output.guard_object_aliasing()
    from .convert_frame import note_graph_break
    for exc in tx.graph_breaks:
        note_graph_break(exc)
    if tx.output.shapes.used:  # after the backends ran: their assumptions are guarded too
        tx.output.shapes.check_marked()
        tx.output.shapes.add_guards(tx.output.guards)
    return tx.output.new_code, tx.output.guards.checks
