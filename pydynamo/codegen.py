"""PyCodegen: emits the bytecode of the new code object.

Its main verb is ``codegen(var)``: "make the top of the stack equal this tracker's value at run
time". Tensors come from the compiled graph's outputs or, when the graph left them untouched,
from their Source; other values rebuild themselves through ``var.reconstruct(codegen)``.
"""
from bytecode import Instr

import torch

from . import bytecode_utils as bu
from .exc import Unsupported

GRAPH_OUT = "___graph_out"


class PyCodegen:
    def __init__(self, code):
        self.code = code  # the original code: names of locals, cells and free variables
        self.instructions = []
        self.graph_outputs = {}  # fx Node -> index in the graph's output tuple
        self._temps = {}  # id(tracker) -> local holding the object already built
        self._keep_alive = []
        self._ntemps = 0
        self._shared, self._source_temps = set(), {}  # see load_sources

    def append(self, *insts):
        self.instructions.extend(insts)

    def __call__(self, var):
        from .variables.dicts import DictVariable
        from .variables.lists import ListVariable
        from .variables.sets import SetVariable
        from .variables.stdlib import SpecInstanceVariable
        from .variables.sym import SymNodeVariable
        from .variables.tensor import TensorVariable
        if id(var) in self._temps:
            return self.load_local(self._temps[id(var)])
        if isinstance(var, (TensorVariable, SymNodeVariable)):
            return self._tensor(var)
        try:
            var.reconstruct(self)
        except Unsupported as e:
            if getattr(e, "culprit", None) is None:  # the innermost value that cannot be rebuilt
                e.culprit = var
            raise
        from .variables.base import CellVariable
        from .variables.exceptions import ExceptionVariable
        from .variables.functions import NestedUserFunctionVariable
        if isinstance(var, (ListVariable, DictVariable, SetVariable, CellVariable, ExceptionVariable,
                            NestedUserFunctionVariable, SpecInstanceVariable)) and var.source is None:
            # an object built here: keep it, so aliases in the result stay one object
            name = self.new_temp()
            self.append(bu.create_instruction("COPY", 1), bu.create_store_local(name))
            self._temps[id(var)] = name
            self._keep_alive.append(var)

    def _tensor(self, var):
        if var.node in self.graph_outputs:
            self.load_local(GRAPH_OUT)
            self.load_const(self.graph_outputs[var.node])
            self.append(bu.create_binary_subscr())
            cls = getattr(var, "python_cls", torch.Tensor)
            if var.source is None and cls is not torch.Tensor and not hasattr(cls, "__tensor_flatten__"):
                # a __torch_function__ subclass's result: the graph returns the plain tensor;
                # one object per tracker (returned twice, it is one object)
                self.append_load_method("as_subclass")
                self.load_const(cls)
                self.append_call(1)
                name = self.new_temp()
                self.append(bu.create_instruction("COPY", 1), bu.create_store_local(name))
                self._temps[id(var)] = name
                self._keep_alive.append(var)
            return
        if var.source is not None and var.node.op == "placeholder":
            return var.source.reconstruct(self)
        raise Unsupported(f"tensor {var} is neither a graph output nor an input")

    def load_sources(self, sources):
        """Push the value of each source. A base that several of them are read through (the
        submodule holding a layer's weight and bias) is read once and kept in a temporary local:
        straight-line code, so every later read finds it set."""
        counts = {}
        for src in sources:
            base = getattr(src, "base", None)
            while getattr(base, "base", None) is not None:  # roots (locals, globals) load in one op
                counts[base.name()] = counts.get(base.name(), 0) + 1
                base = base.base
        self._shared = {name for name, n in counts.items() if n > 1}
        try:
            for src in sources:
                self.source(src)
        finally:
            self._shared, self._source_temps = set(), {}

    def source(self, src):
        """Push the value of Source ``src`` (sources reconstruct their bases through here)."""
        key = src.name()
        if key in self._source_temps:
            return self.load_local(self._source_temps[key])
        src.reconstruct(self)
        if key in self._shared:
            name = self._source_temps[key] = self.new_temp()
            self.append(bu.create_instruction("COPY", 1), bu.create_store_local(name))

    def new_temp(self):
        self._ntemps += 1
        return f"___tmp_{self._ntemps}"

    def load_const(self, value):
        self.append(Instr("LOAD_CONST", value))

    def load_local(self, name):
        self.append(bu.create_load_local(name, self.code))

    def store_local(self, name):
        self.append(bu.create_store_local(name))

    def load_global(self, name, push_null=False):
        self.append(bu.create_load_global(name, push_null))

    def append_push_null(self):
        """A NULL stack slot on its own (a stack being rebuilt); to call something, push it
        with ``load_function`` or ``append_callable``, which place the NULL for the version."""
        self.append(bu.create_instruction("PUSH_NULL"))

    def append_callable(self, emit):
        """Push the one callable ``emit()`` pushes, with the NULL of a call without ``self``
        where the version wants it (below the callable up to 3.12, above it in 3.13); then
        push the arguments and ``append_call``."""
        start = len(self.instructions)
        emit()
        self.instructions[start:] = bu.with_null(self.instructions[start:],
                                                 bu.create_instruction("PUSH_NULL"))

    def load_function(self, fn):
        """Push the constant ``fn`` to be called (see ``append_callable``)."""
        self.append_callable(lambda: self.load_const(fn))

    def append_build(self, cls, n):
        op = {tuple: "BUILD_TUPLE", list: "BUILD_LIST", dict: "BUILD_MAP"}[cls]
        self.append(bu.create_instruction(op, n))

    def append_call(self, nargs, kw_names=()):
        """Call what ``append_callable`` / ``load_function`` / a method load pushed, with the
        ``nargs`` arguments pushed since (the last ``len(kw_names)`` by keyword)."""
        self.append(*bu.create_call(nargs, kw_names))

    def append_load_method(self, name):
        self.append(bu.create_load_method(name))

    def append_call_method(self, name, nargs):
        """obj.name() with obj on the stack and no arguments (nargs must be 0)."""
        assert nargs == 0
        self.append_load_method(name)
        self.append_call(0)

    def append_get_iter(self):
        self.append(bu.create_instruction("GET_ITER"))

    def append_pop_top(self):
        self.append(bu.create_instruction("POP_TOP"))

    def append_return(self):
        self.append(bu.create_instruction("RETURN_VALUE"))

    def set_grad_enabled(self, mode):
        """torch._C._set_grad_enabled(mode), as a statement."""
        import torch
        self.load_function(torch._C._set_grad_enabled)
        self.load_const(bool(mode))
        self.append_call(1)
        self.append_pop_top()
