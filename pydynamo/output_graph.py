"""OutputGraph: the FX graph being built for one frame, its inputs and the code that calls it.

Inputs are placeholders named after their Source and deduplicated by it; each op runs once on
fake tensors (FakeTensorMode) to learn its result's metadata. At the frame's return,
``compile_and_return`` hands the graph to the backend, stores the compiled callable in the
frame's globals under a fresh ``__compiled_fn_N`` (so the new code reaches it with LOAD_GLOBAL,
with no reference cycle through co_extra), and assembles the new code object.
"""
import contextlib
import itertools
import linecache
import operator
import weakref

import torch
import torch.fx
from torch._dispatch.python import enable_python_dispatcher
from torch._subclasses.fake_tensor import (DataDependentOutputException,
                                           DynamicOutputShapeException, FakeTensorMode,
                                           UnsupportedOperatorException)

from . import bytecode_utils as bu
from . import dump_src, logs
from .codegen import GRAPH_OUT, PyCodegen
from .exc import BackendCompilerFailed, Unsupported
from .guards import GuardBuilder
from .source import ModuleMemberSource
from .side_effects import SideEffects

_compiled_fn_ids = itertools.count()
# (globals dict, name) of every compiled graph installed, so that reset() can free them all.
_installed = []


def install_global(f_globals, name, value):
    """Put a compiled graph or a resume function where generated code finds it."""
    f_globals[name] = value
    _installed.append((f_globals, name))


def reset():
    """Remove every ``__compiled_fn_N`` / ``__resume_*`` installed in a module's globals."""
    while _installed:
        f_globals, name = _installed.pop()
        f_globals.pop(name, None)


class OutputGraph:
    def __init__(self, code, f_globals, backend, dynamic=None):
        from .shapes import ShapeTracker
        self.code, self.f_globals, self.backend = code, f_globals, backend
        self.graph = torch.fx.Graph()
        self.current_tx = None  # the translator running now (user locations for shape errors)
        self.torch_function_subclass_disabled = 0  # DisableTorchFunctionSubclass blocks entered
        # weakly: the fake tensors in the compiled graph's meta reach the ShapeEnv, and through
        # it the trace would keep every tracker (and the user's objects they hold) alive
        ref = weakref.ref(self)
        self.shapes = ShapeTracker(dynamic, lambda: ref().user_location() if ref() else None)
        self.fake_mode = FakeTensorMode(shape_env=self.shapes.shape_env)
        self.guards = GuardBuilder()
        self.inputs = {}  # source name -> (source, real tensor, TensorVariable)
        self.input_nodes = {}  # source name -> its placeholder
        self.input_ids = {}  # id(tensor) -> source name of the input that is that object
        # the sympy symbols a SymInt placeholder gives (a size of a tensor input, an int argument:
        # ``s0`` as torch.compile passes it); pydynamo.export keeps its own signature
        self.bound_symbols = set()
        self.bind_symbols = getattr(backend, "pydynamo_export_hook", None) is None
        self.graph_input_keys = None  # the inputs the compiled graph takes, in order (_compile)
        self.input_versions = {}  # source name -> (fake tensor, its version counter when read)
        self.input_arrays = {}  # source name -> the ndarray an input tensor views (variables/ndarray.py)
        self.side_effects = SideEffects()
        self.tracked_sources = {}  # source name -> the tracker made when it was first read
        self.mutable_objects = {}  # id -> (tracker, object) of lists, dicts, user objects read
        self.mutable_sources = {}  # source name -> (source, object) of those
        self.closure_cells = {}  # id(cell) -> CellVariable of the closure cells read (functions.py)
        self.generators = []  # translators of the generators made in the trace
        self.identity_read = False  # an `is` between two of them was answered
        self.new_code = None
        self.compiled_fn_name = None
        self.graph_module = None
        self.member_overrides = {}  # (id(module), table, name) -> tracker: functional_call's tensors
        self.region_bodies = {}  # body signature -> attribute name (compile_region.py)
        self.inline_regions = set()  # codes of marked functions to inline (compile_region.py)
        self.gather_indexing = 0  # tracing a body torch maps with vmap (flex_attention.py)
        self.subgraphs = {}  # attribute name -> GraphModule: the bodies of higher-order ops
        self.initial_grad_mode = torch.is_grad_enabled()
        self.module_stack = {}  # str(id(module)) -> (source name, class) of the module calls being traced
        self._stack_traces = {}  # ((id(code), line), ...) -> stack_trace text

    # ---- building the graph -------------------------------------------------------------------

    def user_location(self):
        tx = self.current_tx
        if tx is None or tx.current is None:
            return None
        return f"{tx.code.co_filename}:{tx.current.lineno} ({tx.code.co_name})"

    def _placeholder(self, source, name=None, type_expr=None):
        # two sources may read the same identifier (L['m'].layers[0] and L['m'].layers['0']):
        # placeholder names become the graph function's parameters, so they must differ
        taken = {n.target for n in self.graph.nodes if n.op == "placeholder"}
        name = base = name or source.graph_input_name()
        k = 0
        while name in taken:
            k += 1
            name = f"{base}_{k}"
        first_op = next((n for n in self.graph.nodes if n.op != "placeholder"), None)
        if first_op is not None:
            with self.graph.inserting_before(first_op):
                node = self.graph.placeholder(name, type_expr=type_expr)
        else:
            node = self.graph.placeholder(name, type_expr=type_expr)
        self.input_nodes[source.name()] = node
        return node

    def _bind_symbols(self, source, value, fake):
        """A SymInt placeholder before a dense tensor input for each symbol its sizes, strides or
        storage offset introduce (``s0``, read from the tensor at each call), as torch.compile
        hands its graphs: backends that split or re-trace the graph find every symbol bound, and
        the graph reads sizes from them (``_use_bound_symbols``)."""
        import sympy
        from .source import TensorSizeSource
        from .variables.sym import SymNodeVariable
        from torch.utils._python_dispatch import is_traceable_wrapper_subclass
        from .variables.subclasses import has_python_torch_function
        # (a __torch_function__ subclass could answer size() otherwise than its C sizes, which
        # the generated code would read and the guards check: its sizes stay graph nodes)
        if not self.bind_symbols or is_traceable_wrapper_subclass(value) or value.layout != torch.strided \
                or has_python_torch_function(type(value)):
            return
        items = [*(("size", d, s) for d, s in enumerate(fake.size())),
                 *(("stride", d, s) for d, s in enumerate(fake.stride())), ("storage_offset", None, fake.storage_offset())]
        for prop, dim, sym in items:
            if not isinstance(sym, torch.SymInt):
                continue
            expr = sym.node.expr
            if not isinstance(expr, sympy.Symbol) or expr in self.bound_symbols:
                continue
            src = TensorSizeSource(source, dim, prop)
            node = self._placeholder(src, name=str(expr), type_expr=torch.SymInt)
            node.meta["example_value"] = sym
            self.inputs[src.name()] = (src, sym, SymNodeVariable(node, sym, src))
            self.bound_symbols.add(expr)

    def add_symint_input(self, source, value):
        """A Python int argument with a symbolic value: a SymInt graph input."""
        from .variables.sym import SymNodeVariable
        key = source.name()
        if key in self.inputs:
            return self.inputs[key][2]
        sym = self.shapes.symint(source, value)
        node = self._placeholder(source, type_expr=torch.SymInt)
        node.meta["example_value"] = sym
        if self.bind_symbols and not isinstance(sym, int) and sym.node.expr.is_Symbol:
            self.bound_symbols.add(sym.node.expr)
        var = SymNodeVariable(node, sym, source)
        self.inputs[key] = (source, sym, var)  # backends get the SymInt, as torch.compile's do
        return var

    def add_size_input(self, source, dim, sym):
        """The symbolic size ``sym`` of tensor input ``source`` at ``dim``, a graph input of its
        own: a jagged NestedTensor's nested int, which its inner tensors' sizes do not give
        (AOTAutograd tracks it by this placeholder, as under torch.compile)."""
        from .source import TensorSizeSource
        from .variables.sym import SymNodeVariable
        src = TensorSizeSource(source, dim)
        if src.name() in self.inputs:
            return self.inputs[src.name()][2]
        for _, value, var in self.inputs.values():  # the symbol is an input already
            if isinstance(value, torch.SymInt) and value.node.expr == sym.node.expr:
                return var
        node = self._placeholder(src)
        node.meta["example_value"] = sym
        var = SymNodeVariable(node, sym, src)
        self.inputs[src.name()] = (src, sym, var)
        return var

    def add_graph_input(self, source, value, static=False):
        """A tensor graph input; its sizes are symbolic where the dynamic policy says so (then
        its guards are added when the trace ends, see finish_guards), never if ``static``."""
        from .variables.tensor import TensorVariable
        key = source.name()
        if key in self.inputs:
            return self.inputs[key][2]
        same = self.input_ids.get(id(value))
        if same is not None and same not in self.input_arrays and self.inputs[same][1] is value:
            # one placeholder per tensor object (tied weights, a tensor passed twice), as
            # torch.compile hands them, while the two paths reach one object
            self.guards.ALIASING([self.inputs[same][0], source], [value, value])
            return self.inputs[same][2]
        try:
            fake = self.fake_mode.from_tensor(value, static_shapes=True) if static else \
                self.shapes.fakify(self.fake_mode, source, value)
        except RuntimeError as e:  # torch refuses to read the tensor (a view poisoned by an in-place op)
            raise Unsupported(f"{source.name()} cannot be traced: {str(e).splitlines()[0][:200]}") from None
        if not static:
            self._bind_symbols(source, value, fake)
        node = self._placeholder(source, type_expr=type(value))
        node.meta["example_value"] = fake
        # a module's parameter or buffer: backends may treat its address as stable (Inductor does)
        node.meta["pydynamo_static"] = isinstance(source, ModuleMemberSource) and source.table != "_modules" \
            or self.shapes.static_address(self.guards, source, value)
        var = TensorVariable(node, fake, source, python_cls=type(value))
        self.inputs[key] = (source, value, var)
        self.input_ids[id(value)] = key
        self.input_versions[key] = (fake, _version(fake))
        return var

    def call_graph(self, tx, kind, target, args, kwargs):
        """Record ``target(*args, **kwargs)`` (``kind``: call_function / call_method)."""
        from .variables.tensor import wrap_fx_value
        from .variables.subclasses import maybe_dispatch
        dispatched = maybe_dispatch(tx, kind, target, args, kwargs)  # __torch_function__ subclasses
        if dispatched is not None:
            return dispatched
        fake_target = target
        kwargs = _python_type_dtype(kwargs)
        if self.gather_indexing and target is operator.getitem:
            fake_target = _as_gather(args)
        fake_args, fake_kwargs = _map(args, _fake_arg), {k: _fake_arg(v) for k, v in kwargs.items()}
        what = target if isinstance(target, str) else getattr(target, "__name__", repr(target))
        self.shapes.drop_unbound()
        if not getattr(target, "takes_ndarrays", False) and _has_ndarray([*args, *kwargs.values()]):
            raise Unsupported(f"{what} called with an ndarray (NumPy code is traced only through NumPy's "
                              "own functions, methods and operators)")
        versions = [(t, _version(t)) for t in _fake_tensors(fake_args, fake_kwargs)]
        try:
            # with symbolic sizes, composite ops (matmul, ...) run their Python decompositions,
            # which reason about SymInts; some C++ ones read sizes as ints and would specialize them
            with self.fake_mode, (enable_python_dispatcher() if self.shapes.used else contextlib.nullcontext()):
                if kind == "call_method":
                    value = getattr(fake_args[0], target)(*fake_args[1:], **fake_kwargs)
                else:
                    value = fake_target(*fake_args, **fake_kwargs)
        except (DataDependentOutputException, DynamicOutputShapeException) as e:
            raise Unsupported(f"{what}: output depends on tensor data ({type(e).__name__})") from None
        except UnsupportedOperatorException as e:
            raise Unsupported(f"{what}: operator {e} does not support fake tensors") from None
        except Exception as e:
            raise Unsupported(f"{what} raised {type(e).__name__} while tracing: {e}") from None
        if any(_version(t) != v for t, v in versions):
            self._check_changed_inputs(what)
        bindings = self.shapes.bind_unbacked(value, what)  # data-dependent outputs (config.capture_*)
        node_arg = self._node_arg  # after the fake call: a call that fails leaves no torch.Size node
        node_args, node_kwargs = _map(args, node_arg), {k: node_arg(v) for k, v in kwargs.items()}
        node = self.graph.create_node(kind, target, node_args, node_kwargs)
        node.meta["example_value"] = value
        if bindings:
            node.meta["unbacked_bindings"] = bindings
        self._annotate(tx, node, target)
        return wrap_fx_value(tx, node, value)

    def _annotate(self, tx, node, target):
        """What torch's passes and backends read off a node, as torch.compile fills it: the
        user's stack, the module calls it is in (``nn_module_stack``: id -> (path, class)), and
        what made it (``source_fn_stack``: a torch.nn module's class inside one, else the op)."""
        node.meta["stack_trace"] = self._stack_trace(tx)
        fn = target
        if self.module_stack:
            node.meta["nn_module_stack"] = dict(self.module_stack)
            cls = next(reversed(self.module_stack.values()))[1]
            if cls.__module__.startswith("torch.nn."):
                fn = cls
        node.meta["source_fn_stack"] = [(node.name, fn)]

    def _stack_trace(self, tx):
        frames = []
        while tx is not None:
            if tx.current is not None and tx.current.lineno is not None:
                frames.append((tx.code, tx.current.lineno))
            tx = getattr(tx, "parent", None)
        key = tuple((id(code), line) for code, line in frames)
        text = self._stack_traces.get(key)
        if text is None:
            parts = []
            for code, line in reversed(frames):
                src = linecache.getline(code.co_filename, line).strip()
                parts.append(f'  File "{code.co_filename}", line {line}, in {code.co_name}\n' + (f"    {src}\n" if src else ""))
            text = self._stack_traces[key] = "".join(parts)
        return text

    def _node_arg(self, var):
        return _graph_arg(var, _node_of, self._size_node)

    def _size_node(self, var, items):
        """A torch.Size argument of a graph op, as a ``torch.Size(items)`` node. FX turns a
        torch.Size among a node's arguments into a plain tuple, and torch tells them apart:
        ``x.new(torch.Size([5, 2]))`` is an empty 5x2 tensor, ``x.new((5, 2))`` the tensor
        ``[5., 2.]`` (legacy constructors, Python code that tests ``isinstance(a, torch.Size)``).
        The op's fake call got the torch.Size itself (``_fake_arg``)."""
        node = self.graph.call_function(torch.Size, (items,))
        node.meta["example_value"] = _fake_arg(var)
        return node

    def install_subgraph(self, base, gm):
        """A ``get_attr`` node for ``gm`` (a higher-order op's body), an attribute of the
        graph's root module named ``base_N`` as torch.compile names them (``cond_true_0``)."""
        k = 0
        while f"{base}_{k}" in self.subgraphs:
            k += 1
        name = f"{base}_{k}"
        self.subgraphs[name] = gm
        node = self.graph.get_attr(name)
        return node

    def root_module(self, graph):
        """A module holding the subgraphs that ``graph``'s get_attr nodes read."""
        root = torch.nn.Module()
        for node in graph.nodes:
            if node.op == "get_attr" and node.target in self.subgraphs:
                setattr(root, node.target, self.subgraphs[node.target])
        return root

    def note_mutation(self, var):
        self.side_effects.mutate_container(var)

    def guard_object_aliasing(self):
        """Which of the mutable objects read from the inputs are the same object stays as
        traced, where that matters: the trace changed one of them (a write seen, or not seen,
        through another path), or read one object by two paths (one tracker for both)."""
        sources = list(self.mutable_sources.values())
        aliased = len({id(v) for _, v in sources}) < len(sources)
        if len(sources) > 1 and (aliased or self.side_effects or self.identity_read):
            self.guards.ALIASING([s for s, _ in sources], [v for _, v in sources])

    # ---- finishing ----------------------------------------------------------------------------

    def begin_code(self, values):
        """Start the new code: call the graph (if it computes anything) with every tensor among
        ``values`` and the side effects' values as outputs, then build the side effects' new
        values. Returns (codegen, saved side effects) for ``codegen_apply``."""
        cg = PyCodegen(self.code)
        export_hook = getattr(self.backend, "pydynamo_export_hook", None)  # pydynamo.export reads the trace
        if export_hook is not None:
            export_hook(self)
        if self._has_effect():
            outputs = self._graph_outputs([*values, *self.side_effects.values()])
            self.graph.output(tuple(v.node for v in outputs))
            name = self._compile()
            cg.load_global(name, push_null=True)
            sources = [src for src, _, _ in self.graph_inputs()]
            cg.load_sources(sources)
            cg.append_call(len(sources))
            cg.store_local(GRAPH_OUT)
            cg.graph_outputs = {v.node: i for i, v in enumerate(outputs)}
        return cg, self.side_effects.codegen_save(cg)

    def compile_and_return(self, tx, value, lineno=None):
        cg, saved = self.begin_code([value])
        cg(value)
        result = cg.new_temp()
        cg.store_local(result)
        self.side_effects.codegen_apply(cg, saved)
        if torch.is_grad_enabled() != self.initial_grad_mode:
            # torch.set_grad_enabled(mode) called as a function outlives the frame; a backend
            # that runs the graph functionally (AOTAutograd) does not leave it set
            cg.set_grad_enabled(torch.is_grad_enabled())
        cg.load_local(result)
        cg.append_return()
        return self.finish(cg, lineno)

    def finish(self, cg, lineno=None):
        """Assemble the new code; instructions without a line get ``lineno`` (the user's line
        that ended the trace), so tracebacks through generated code point at user code."""
        for inst in cg.instructions:
            if bu.is_instr(inst) and inst.lineno is None and lineno is not None:
                inst.lineno = lineno
        self.new_code = bu.assemble(self.code, cg.instructions)
        if dump_src.dumper is not None:  # pydynamo.debug.dump_src: the code runs from the dumped file
            self.new_code = dump_src.dumper.on_output(self)
        _log_output(self)
        return self.new_code

    def _has_effect(self):
        """Whether the graph computes anything. Grad-mode switches that end where they began
        (a `with torch.no_grad():` around no tensor work) leave it empty."""
        calls = [n for n in self.graph.nodes if n.op not in ("placeholder", "output")]
        if any(n.target is not torch._C._set_grad_enabled for n in calls):
            return True
        return bool(calls) and torch.is_grad_enabled() != self.initial_grad_mode

    def _graph_outputs(self, values):
        from .variables.tensor import TensorVariable
        seen, outputs = set(), []
        from .variables.sym import SymNodeVariable
        from .variables.ndarray import NdarrayVariable
        for var in walk_values(values):
            if isinstance(var, (TensorVariable, SymNodeVariable, NdarrayVariable)) and var.node.op != "placeholder" \
                    and var.node not in seen:
                seen.add(var.node)
                outputs.append(var)
        return outputs

    def _guarded(self, key):
        """(source, value) of tensor input ``key`` as guards read it: an ndarray input's tensor is
        made by the code that calls the graph, so guards read the array (``input_arrays``)."""
        source, value, _ = self.inputs[key]
        if key in self.input_arrays:
            return source.base, self.input_arrays[key]
        return source, value

    def _check_changed_inputs(self, what):
        """An op just changed a tensor in place: if it is (a view of) an input that shares memory
        with another input object, refuse it. AOTAutograd compiles a graph for one layout of
        shared memory between inputs, which the guards could not pin exactly (``x[:3]`` and
        ``x[1:]`` overlap as ``x`` and ``x[:]`` do, but are other views); eager runs it right."""
        from .guards import overlapping_pairs
        changed = self._changed_inputs()
        keys = [k for k, (_, value, _) in self.inputs.items() if isinstance(value, torch.Tensor)]
        values = [self._guarded(k)[1] for k in keys]
        for i, j in overlapping_pairs(values, {keys.index(k) for k in changed}):
            # one tensor passed twice is one object to AOTAutograd; one ndarray passed twice is two
            # tensors (torch.from_numpy at each read)
            if values[i] is not values[j] or not isinstance(values[i], torch.Tensor):
                a, b = self.inputs[keys[i]][0].name(), self.inputs[keys[j]][0].name()
                raise Unsupported(f"{what} changes an input in place while inputs {a} and {b}, two "
                                  "objects, share memory", "pass tensors that do not overlap, or "
                                  "clone one of them before the call")

    def _changed_inputs(self):
        """Names of the tensor inputs whose data the graph changes in place (their fake tensor's
        version counter moved: an in-place op on them or on a view of them)."""
        return {key for key, (fake, version) in self.input_versions.items() if _version(fake) != version}

    def _guard_memory_overlap(self):
        """Where the graph changes inputs in place, which inputs share memory with them must stay
        as traced: a functionalized graph writes each input back on its own, so two inputs that
        overlap at run time but did not when traced would see each other's old values."""
        from .guards import MemoryOverlap, overlapping_pairs
        changed = self._changed_inputs()
        if not changed:
            return
        items = [(*self._guarded(key), key in changed) for key, (src, value, _) in self.inputs.items()
                 if isinstance(value, torch.Tensor) and (key in changed or not isinstance(src, ModuleMemberSource))]
        if len(items) < 2:
            return
        idx = {i for i, (_, _, c) in enumerate(items) if c}
        pairs = overlapping_pairs([v for _, v, _ in items], idx)
        self.guards.ALIASING([s for s, _, _ in items], [v for _, v, _ in items], MemoryOverlap(idx, pairs))

    def graph_inputs(self):
        """(source, value, tracker) of each input the graph takes, in its placeholders' order."""
        if self.graph_input_keys is None:
            return list(self.inputs.values())
        return [self.inputs[k] for k in self.graph_input_keys]

    def _use_bound_symbols(self):
        """A node computing a size that is a bound symbol (``x.size(0)`` is ``s0``) reads the
        symbol's placeholder instead: the same value whenever the guards hold."""
        if not self.bound_symbols:
            return
        by_expr = {}
        for node in self.input_nodes.values():
            expr = _sym_expr(node.meta.get("example_value"))
            if expr is not None and expr.is_Symbol:
                by_expr.setdefault(expr, node)
        for node in list(self.graph.nodes):
            if node.op in ("call_function", "call_method"):
                target = by_expr.get(_sym_expr(node.meta.get("example_value")))
                if target is not None:
                    node.replace_all_uses_with(target)

    def _drop_unused_inputs(self):
        """Inputs the graph does not use are not placeholders (torch.compile's convention): a
        tensor read only for its sizes, which are constants or symbols; an int argument it does
        not use. A symbol's first placeholder stays while a tensor placeholder's sizes hold the
        symbol; a jagged NestedTensor's nested int always does. Guards still read every input."""
        held = set()  # the symbols in the kept tensor placeholders' sizes, strides, offsets
        for key, (_, value, _) in self.inputs.items():
            node = self.input_nodes[key]
            if not isinstance(value, torch.Tensor):
                continue
            if not node.users:
                self.graph.erase_node(node)
                continue
            fake = node.meta["example_value"]
            try:
                for s in (*fake.size(), *fake.stride(), fake.storage_offset()):
                    expr = _sym_expr(s)
                    if expr is not None:
                        held |= expr.free_symbols
            except Exception:  # sizes a wrapper subclass does not give (a NestedTensor's strides)
                pass
        kept, seen = [], set()
        for key, (_, value, _) in self.inputs.items():
            node = self.input_nodes[key]
            if isinstance(value, torch.Tensor):
                if node.users:
                    kept.append(key)
                continue
            expr = _sym_expr(value)
            if not node.users and expr is not None and not _is_nested_int(value) and \
                    not (expr.is_Symbol and expr in held and expr not in seen):
                self.graph.erase_node(node)
                continue
            if expr is not None:
                seen.add(expr)
            kept.append(key)
        self.graph_input_keys = kept

    def _compile(self):
        # Parameters and buffers are distinct objects by construction (tied weights are one input:
        # inputs are keyed by source and module members by identity of their dict entries);
        # tensors reached from arguments or globals could be passed twice, so that is guarded.
        free = [self._guarded(key) for key, (src, value, _) in self.inputs.items()
                if isinstance(value, torch.Tensor) and not isinstance(src, ModuleMemberSource)]
        if len(free) > 1:
            self.guards.ALIASING([s for s, _ in free], [v for _, v in free])
        self._guard_memory_overlap()
        self._use_bound_symbols()
        _remove_dead_nodes(self.graph)
        if self.bind_symbols:  # (pydynamo.export's signature takes every input it read)
            self._drop_unused_inputs()
        gm = torch.fx.GraphModule(self.root_module(self.graph), self.graph)
        self.shapes.insert_runtime_asserts(gm, self.code.co_name)
        gm.recompile()
        gm.meta["dynamo_flat_name_to_original_fqn"] = {
            self.input_nodes[src.name()].name: _module_fqn(src) for src, _, _ in self.graph_inputs()
            if isinstance(src, ModuleMemberSource)}
        self.graph_module = gm
        example_inputs = [value for _, value, _ in self.graph_inputs()]
        from .variables.subclasses import has_python_torch_function, is_wrapper_with_torch_function, \
            subclass_inputs
        overridden = [i for i, v in enumerate(example_inputs)
                      if isinstance(v, torch.Tensor) and has_python_torch_function(type(v))]
        wrappers = [i for i in overridden if is_wrapper_with_torch_function(type(example_inputs[i]))]
        subclassed = [i for i in overridden if i not in wrappers]
        if subclassed:  # the trace applied their __torch_function__: the graph takes plain tensors
            example_inputs = [v.as_subclass(torch.Tensor) if i in subclassed else v
                              for i, v in enumerate(example_inputs)]
        try:
            # as torch.compile does, the backend runs in a TracingContext holding the graph's fake
            # mode (``detect_fake_mode(example_inputs)``, ``TracingContext.try_get()`` find it): its
            # fake tensors and guards (Inductor's divisibility assumptions) go to this graph's
            # ShapeEnv, whose facts are guarded; higher-order ops' bodies are retraced in it (a
            # while_loop's unbacked sizes; Inductor lowers scan and map to while loops that index
            # by ``.item()``); a jagged NestedTensor input's nested int lives in it
            from torch._guards import TracingContext, tracing
            saved = self.fake_mode.allow_scalar_outputs
            self.fake_mode.allow_scalar_outputs = saved or bool(self.subgraphs)
            try:
                with tracing(TracingContext(self.fake_mode)):
                    compiled = self.backend(gm, example_inputs)
            finally:
                self.fake_mode.allow_scalar_outputs = saved
        except Exception as e:
            raise BackendCompilerFailed(self.backend, e) from e
        if overridden:
            compiled = subclass_inputs(compiled, subclassed, bool(wrappers))
        # the flags it compiled by (backends/__init__.py): all, for a backend that does not say
        self.guards.BACKEND_FLAGS(getattr(self.backend, "reads_global_flags", None))
        name = f"__compiled_fn_{next(_compiled_fn_ids)}"
        install_global(self.f_globals, name, compiled)
        self.compiled_fn_name = name
        return name


# Ops whose unused result can be dropped: no mutation, no randomness, no out= (library code such
# as transformers' mask builders computes index tensors it then does not use).
_PURE_NAMES = frozenset({
    "getitem", "arange", "add", "sub", "mul", "truediv", "floordiv", "neg", "view", "reshape", "expand",
    "expand_as", "unsqueeze", "squeeze", "transpose", "permute", "contiguous", "size", "to", "type_as",
    "lt", "le", "gt", "ge", "eq", "ne", "and_", "or_", "invert", "flatten", "unflatten", "narrow",
    "select", "clone", "float", "long", "int", "bool", "half", "bfloat16", "zeros", "ones", "full",
    "zeros_like", "ones_like", "full_like", "cat", "stack", "where", "masked_fill", "matmul", "softmax"})


def _module_fqn(source):
    """``b.l.weight`` for the parameter ``L['self'].b.l.weight``: its path below the module the
    frame reached first."""
    keys = []
    while isinstance(source, ModuleMemberSource):
        keys.append(str(source.key))
        source = source.base
    return ".".join(reversed(keys))


def _sym_expr(value):
    """The sympy expression of a SymInt (None for anything else, a nested int included)."""
    if not isinstance(value, torch.SymInt):
        return None
    try:
        return value.node.expr
    except Exception:
        return None


def _is_nested_int(value):
    try:
        return value.node.is_nested_int()
    except Exception:
        return False


def _droppable(node):
    """An unused node whose op has no effect: size arithmetic (folded in a branch, or only
    guarded), or a pure op of _PURE_NAMES."""
    import operator
    from .shapes import is_symbolic_value
    if node.op not in ("call_function", "call_method") or node.users or "out" in node.kwargs:
        return False
    if "unbacked_bindings" in node.meta:  # a data-dependent value: runtime asserts may check it
        return False
    if is_symbolic_value(node.meta.get("example_value")):
        return True
    target = node.target
    name = target if isinstance(target, str) else getattr(target, "__name__", "")
    if not (name in _PURE_NAMES and (node.op == "call_method" or getattr(torch, name, None) is target
                                     or getattr(operator, name, None) is target)):
        return False
    if name == "getitem" and any(_is_tensor_node(a) for a in _nodes_in(node.args[1:])):
        return False  # a tensor index: whether it is in bounds is data (eager raises, the graph would not)
    return not (name in _ELEMENTWISE and _raises_for_its_dtypes(node))


# Pure ops whose real kernels check their operands' dtypes where fake tensors do not (``-`` of a
# bool tensor, ``&`` of floats): an unused one that would raise in eager is kept, so it raises.
_ELEMENTWISE = frozenset({"add", "sub", "mul", "truediv", "floordiv", "neg", "lt", "le", "gt", "ge", "eq",
                          "ne", "and_", "or_", "invert", "where", "masked_fill"})


def _nodes_in(value):
    found = []
    torch.fx.node.map_arg(value, found.append)
    return found


def _is_tensor_node(a):
    return isinstance(a, torch.fx.Node) and isinstance(a.meta.get("example_value"), torch.Tensor)


def _raises_for_its_dtypes(node):
    """Whether ``node``'s op raises on one-element tensors of its operands' dtypes and ranks (the
    real kernel's dtype checks); symbolic numbers stand as 1 or 1.0."""
    from .shapes import is_symbolic_value

    def probe(a):
        if not isinstance(a, torch.fx.Node):
            return a
        v = a.meta.get("example_value")
        if isinstance(v, torch.Tensor):
            return torch.zeros((1,) * v.dim(), dtype=v.dtype)
        if is_symbolic_value(v):
            return 1.0 if isinstance(v, torch.SymFloat) else True if isinstance(v, torch.SymBool) else 1
        return v
    args = torch.fx.node.map_aggregate(node.args, probe)
    kwargs = torch.fx.node.map_aggregate(node.kwargs, probe)
    try:
        with torch.no_grad():
            if node.op == "call_method":
                getattr(args[0], node.target)(*args[1:], **kwargs)
            else:
                node.target(*args, **kwargs)
    except Exception:  # noqa: BLE001 - the real op raises: keep it
        return True
    return False


def _as_gather(args):
    """``x[i, j]`` with integer tensors ``i, j`` inside a body torch runs under vmap (a
    flex_attention score_mod): there the indices are batched and Python's indexing is a gather
    (``aten.index``), not the scalar indexing a 0-d index means outside vmap. The node stays a
    getitem (as torch.compile's); its value is the gather's."""
    from .variables.lists import TupleVariable
    from .variables.tensor import TensorVariable
    obj, index = args
    parts = index.items if type(index) is TupleVariable else [index]
    if isinstance(obj, TensorVariable) and parts and all(
            isinstance(p, TensorVariable) and not p.example_value.dtype.is_floating_point
            and p.example_value.dtype != torch.bool for p in parts):
        return lambda x, i: torch.ops.aten.index.Tensor(x, list(i) if isinstance(i, tuple) else [i])
    return operator.getitem


def _remove_dead_nodes(graph):
    for node in reversed(list(graph.nodes)):  # users before what they use: chains go at once
        if _droppable(node):
            graph.erase_node(node)


def _has_ndarray(vars_):
    from .variables.ndarray import NdarrayVariable, _leaves
    return any(isinstance(v, NdarrayVariable) for a in vars_ for v in _leaves(a))


def _version(t):
    """A tensor's version counter, which in-place ops advance; None for an inference tensor,
    which has none (their in-place changes go unseen: docs/soundness.md)."""
    try:
        return t._version
    except RuntimeError:
        return None


def _fake_tensors(args, kwargs):
    import torch.utils._pytree as pytree
    return [t for t in pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]


def _map(args, fn):
    return tuple(fn(a) for a in args)


def _node_of(t):
    return t.node


def _fake_arg(var):
    return _graph_arg(var, lambda t: t.example_value, lambda _, items: torch.Size(items))


_PYTHON_TYPE_DTYPES = {int: torch.int64, float: torch.float64, bool: torch.bool, complex: torch.complex128}


def _python_type_dtype(kwargs):
    """``dtype=int`` (float, bool, complex): torch's argument parser takes these Python types
    for a dtype parameter, as the dtype its docs name (int64, float64, bool, complex128)."""
    from .variables.builtin import BuiltinVariable
    from .variables.constant import ConstantVariable
    var = kwargs.get("dtype")
    if isinstance(var, BuiltinVariable) and var.value in _PYTHON_TYPE_DTYPES:
        return {**kwargs, "dtype": ConstantVariable(_PYTHON_TYPE_DTYPES[var.value])}
    return kwargs


def _graph_arg(var, tensor_fn, size_fn):
    """A tracker as an argument of a graph op: tensors by ``tensor_fn``, containers recursively,
    a torch.Size by ``size_fn(var, items)`` (it must stay one: see OutputGraph._size_node)."""
    from .variables.constant import ConstantVariable
    from .variables.dicts import DictVariable
    from .variables.lists import BaseListVariable, SliceVariable, TupleVariable
    from .variables.tensor import TensorVariable
    from .variables.user_defined import UserDefinedClassVariable
    from .variables.sym import SymNodeVariable
    from .variables.ndarray import NdarrayVariable, graph_constant, is_numpy_scalar_type
    if isinstance(var, (TensorVariable, NdarrayVariable)):  # ndarrays: only NumpyCall (call_graph)
        return tensor_fn(var)
    if isinstance(var, SymNodeVariable):
        return var.node if tensor_fn is _node_of else var.value
    if isinstance(var, ConstantVariable):
        value = var.value  # numpy scalars are float/int subclasses: graphs hold plain numbers
        if type(value) in (bool, int, float, complex):
            return value
        if type(value).__module__.startswith("numpy") and type(value).__name__.endswith("DType"):
            return graph_constant(value)  # a NumPy dtype, as torch's NumPy layer takes it
        for base in (bool, int, float, complex):
            if isinstance(value, base) and type(value) is not base:
                return base(value)
        if type(value).__module__ == "numpy":  # numpy.float32(2.0): no literal in a graph's code
            raise Unsupported(f"the NumPy scalar {value!r} as an argument of a graph op")
        return value
    if isinstance(var, TupleVariable) and var.python_type() is torch.Size:
        return size_fn(var, tuple(_graph_arg(i, tensor_fn, size_fn) for i in var.items))
    if isinstance(var, BaseListVariable):
        return var.python_cls(_graph_arg(i, tensor_fn, size_fn) for i in var.items)
    if isinstance(var, SliceVariable):
        return slice(*(_graph_arg(p, tensor_fn, size_fn) for p in var.parts))
    if isinstance(var, DictVariable):
        return {k: _graph_arg(v, tensor_fn, size_fn) for k, v in var.items.items()}
    if isinstance(var, UserDefinedClassVariable) and is_numpy_scalar_type(var.value):
        return graph_constant(var.value)  # numpy.float32 as a dtype
    if isinstance(var, UserDefinedClassVariable):
        # a graph's code names its constants: a class has no literal. torch.HalfTensor and the
        # like are given by their names, which every torch API that takes them accepts.
        if var.value in _tensor_type_classes():
            return f"{var.value.__module__}.{var.value.__name__}"
        raise Unsupported(f"the class {var.value.__qualname__} as an argument of a graph op")
    raise Unsupported(f"{var} cannot be an argument of a graph op")


def _tensor_type_classes():
    import torch
    return set(torch._tensor_classes)


def walk_values(values, through_iterators=True):
    """Every tracker reachable from ``values`` through containers, objects' attributes, bound
    methods, closures and exceptions. ``through_iterators=False``: not an iterator's items (the
    real iterator holds its container, whose contents may have changed since)."""
    stack, seen = list(values), set()
    while stack:
        var = stack.pop()
        if id(var) in seen:
            continue
        seen.add(id(var))
        yield var
        stack.extend(children(var, through_iterators))


def children(var, through_iterators=True):
    """The trackers ``var`` holds directly (see walk_values)."""
    from .variables.base import CellVariable, GetAttrVariable, VariableTracker
    from .variables.dicts import DictVariable, DictViewVariable
    from .variables.exceptions import ExceptionVariable
    from .variables.functions import NestedUserFunctionVariable, UserMethodVariable
    from .variables.lists import BaseListVariable, ListIteratorVariable
    from .variables.mappings import InstanceDictVariable, MappingProxyVariable
    sequences = (BaseListVariable, ListIteratorVariable) if through_iterators else BaseListVariable
    if isinstance(var, sequences):
        return list(var.items)
    if isinstance(var, DictVariable):
        from .variables.ids import TensorKey
        return [k.var for k in var.items if type(k) is TensorKey] + list(var.items.values())
    if isinstance(var, DictViewVariable):
        return [var.dict_var]
    from .variables.sets import SetVariable
    if isinstance(var, SetVariable):
        return var.tensors()
    if isinstance(var, (GetAttrVariable, UserMethodVariable)):
        return [var.obj]
    if hasattr(var, "nested_values"):  # user objects (objects.py)
        return list(var.nested_values())
    if isinstance(var, InstanceDictVariable):  # not its owner: the dict does not hold it
        return [v for v in var.obj.attrs.values() if isinstance(v, VariableTracker)]
    if isinstance(var, MappingProxyVariable):
        return [var.mapping]
    if isinstance(var, NestedUserFunctionVariable):
        return [*var.defaults, *var.kwdefaults.values(), *var.closure]
    if isinstance(var, CellVariable) and var.contents is not None:
        return [var.contents]
    if isinstance(var, ExceptionVariable):
        return [*var.args, *(v for v in (var.cause, var.context) if isinstance(v, VariableTracker))]
    return []


def _log_output(output):
    """PYDYNAMO_LOGS=graph shows each captured graph, =bytecode the code that calls it."""
    if output.graph_module is not None and logs.enabled("graph"):
        logs.get("graph").info("%s of %s:\n%s", output.compiled_fn_name, output.code.co_qualname,
                               output.graph_module.code.strip())
    if logs.enabled("bytecode"):
        import dis
        import io
        text = io.StringIO()
        dis.dis(output.new_code, file=text)
        logs.get("bytecode").info("new code for %s:\n%s", output.code.co_qualname, text.getvalue())
