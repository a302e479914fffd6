"""The symbolic bytecode interpreter.

``InstructionTranslator`` walks the top frame's instructions over VariableTrackers (the opcode
handlers live in opcodes.py, one method per opcode); calls to user functions and module
forwards run an ``InliningTranslator`` over the callee's code, sharing the OutputGraph, so the
whole call tree becomes one graph. ``convert`` is the entry point the frame hook calls.
"""
import types

import torch

from . import bytecode_utils as bu
from . import config
from .backends import lookup_backend
from .exc import Unsupported
from .opcodes import UNSUPPORTED, OpcodeHandlers
from .output_graph import OutputGraph
from .source import BuiltinSource, ClosureSource, GlobalSource, LocalSource
from .variables.base import CellVariable
from .variables.builder import wrap_value


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
        try:
            while not self.done:
                inst = self.current = self.instructions[self.ip]
                self.ip += 1
                self.steps += 1
                if self.steps > config.max_instructions:
                    raise Unsupported(f"more than {config.max_instructions} instructions "
                                      "traced in one frame (a long loop?)")
                self.dispatch(inst)
        except Unsupported as e:
            lineno = self.current.lineno if self.current is not None else self.code.co_firstlineno
            e.add_frame(self.code.co_filename, lineno, self.code.co_name)
            raise

    def dispatch(self, inst):
        if inst.opname in UNSUPPORTED:
            raise Unsupported(f"{inst.opname}: {UNSUPPORTED[inst.opname]}")
        handler = getattr(self, inst.opname, None)
        if handler is None:
            raise Unsupported(f"opcode {inst.opname} is not supported yet")
        handler(inst)

    def jump_to(self, index):
        self.ip = index

    # ---- names --------------------------------------------------------------------------------

    def load_global(self, name):
        gsrc = self.globals_source
        if name in self.f_globals:
            return wrap_value(self, self.f_globals[name], gsrc(name) if gsrc else None)
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

    def inline_call(self, code, f_globals, globals_source, bound, cells, name):
        if self.depth + 1 > config.inline_depth_limit:
            raise Unsupported(f"inlining deeper than {config.inline_depth_limit} calls "
                              f"(recursion in {name}?)")
        builtins = f_globals.get("__builtins__", self.f_builtins)
        if isinstance(builtins, types.ModuleType):
            builtins = builtins.__dict__
        tx = InliningTranslator(self, code, f_globals, builtins, globals_source, bound, cells)
        if bu.is_plain_generator(code):
            from .variables.functions import GeneratorVariable
            return GeneratorVariable(tx)  # runs up to each yield when iterated
        tx.run()
        return tx.result

    def yield_value(self, value):
        raise Unsupported("yield in a frame that is not an inlined generator")


class InstructionTranslator(TranslatorBase):
    """The top frame: its arguments are the graph's inputs, its return ends the trace."""

    def __init__(self, code, f_globals, f_builtins, f_locals, closure, backend):
        output = OutputGraph(code, f_globals, backend)
        super().__init__(output, code, f_globals, f_builtins, GlobalSource, {}, {}, 0)
        for index, name in enumerate(bu.argument_names(code)):
            if name not in f_locals:
                raise Unsupported(f"argument {name!r} missing from the frame's locals")
            self.symbolic_locals[name] = wrap_value(self, f_locals[name], LocalSource(name, index))
        closure = closure or ()
        if len(closure) != len(code.co_freevars):
            raise Unsupported("closure does not match the code's free variables")
        for index, (name, cell) in enumerate(zip(code.co_freevars, closure)):
            self.cells[name] = CellVariable(real_cell=cell, source=ClosureSource(name, index),
                                            pre_existing=True)

    def root_globals(self):
        return self.f_globals

    def return_value(self, value):
        self.output.compile_and_return(self, value)
        self.done = True


class InliningTranslator(TranslatorBase):
    def __init__(self, parent, code, f_globals, f_builtins, globals_source, bound, cells):
        super().__init__(parent.output, code, f_globals, f_builtins, globals_source, dict(bound),
                         dict(cells), parent.depth + 1)
        self.parent = parent
        self.result = None
        self.finished = False

    def root_globals(self):
        return self.parent.root_globals()

    def return_value(self, value):
        self.result = value
        self.done = True
        self.finished = True

    def yield_value(self, value):
        self.result = value
        self.done = True  # paused: GeneratorVariable resumes it with run()


def convert(code, f_globals, f_builtins, f_locals, closure, backend, *, fullgraph=False):
    """Trace one frame; return ``(new_code, checks)`` or raise ``Unsupported``.

    ``f_locals`` holds the frame's arguments by name, ``closure`` the function's __closure__.
    ``new_code`` has the same arguments, cell and free variables as ``code`` and is run as
    ``types.FunctionType(new_code, f_globals, closure=closure)(*same args)`` while every check
    in ``checks`` (``(steps, kind, value, text)`` tuples, see _C.pyi) holds. The compiled graph
    is stored in ``f_globals`` under the ``__compiled_fn_N`` name that new_code loads.
    ``fullgraph`` does not change anything yet: every Unsupported is raised to the caller, who
    runs the frame eagerly (or reports the error when the user asked for a full graph).
    """
    if bu.is_generator(code):
        raise Unsupported(f"{code.co_name} is a generator or coroutine")
    backend = lookup_backend(backend)
    grad_mode, dtype = torch.is_grad_enabled(), torch.get_default_dtype()
    try:
        tx = InstructionTranslator(code, f_globals, f_builtins, f_locals, closure, backend)
        tx.output.guards.GRAD_MODE()
        tx.output.guards.DEFAULT_DTYPE()
        tx.run()
    finally:
        torch._C._set_grad_enabled(grad_mode)
        torch.set_default_dtype(dtype)
    return tx.output.new_code, tx.output.guards.checks
