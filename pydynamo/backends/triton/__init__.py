"""pydynamo's own compiler from FX graphs to Triton kernels (the backend "triton").

    gm (torch-level FX) --AOTAutograd + decomps.py--> ATen forward/backward graphs
      --lowering.py--> items: ComputedBuffers (lazy pointwise/reduction IR, ir.py), ATen fallbacks
      --scheduler.py--> kernels (fused groups) --kernel.py, wrapper.py--> one Python module
      --runtime.py--> cached on disk by source hash, imported, called

Kernels run on CUDA tensors, or on CPU tensors under TRITON_INTERPRET=1 (Triton's interpreter).
Anything else, and any internal error, runs the graph with ATen: slower, never wrong.
"""
import contextlib
import copy
import functools
import hashlib
import logging
import os
import time

import torch

from ... import logs

log = logging.getLogger(__name__)
fallbacks = []  # why each graph that runs wholly with ATen could not be compiled (triton_fallbacks.py)


def usable(example_inputs):
    """Whether generated kernels can run on these inputs' device."""
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    devices = {t.device.type for t in example_inputs if isinstance(t, torch.Tensor)}
    if "cuda" in devices and devices <= {"cuda", "cpu"}:  # (CPU tensors beside: ATen ops, lowering.py)
        return True
    return devices == {"cpu"} and os.environ.get("TRITON_INTERPRET", "0") == "1"


MODES = (None, "default", "reduce-overhead")


def triton_backend(gm, example_inputs, mode=None):
    """The backend: ``gm`` -> a callable on the same flat inputs returning what gm returns.
    ``mode="reduce-overhead"``: each compiled graph is replayed as a CUDA graph (cudagraphs.py)."""
    if mode not in MODES:
        raise ValueError(f"the triton backend's modes are {', '.join(map(repr, MODES))}, not {mode!r}")
    if not usable(example_inputs):
        log.info("triton backend: inputs not on CUDA (nor CPU with TRITON_INTERPRET=1); running eagerly")
        return gm.forward
    from . import runtime
    timing = runtime.begin_timing()
    start = time.perf_counter()
    _start_compile_workers()  # first: they take a second or two to be ready
    from torch._functorch.aot_autograd import aot_module_simplified
    from torch._functorch.partitioners import min_cut_rematerialization_partition

    from .. import cudagraphs
    from . import layout
    from .decomps import decomposition_table
    gm, single = _tuple_output(gm)
    # The min-cut partitioner saves for backward the cheapest set of tensors and recomputes fused
    # pointwise work from them (e.g. layer_norm's mean/rstd rather than its normalized output).
    # PYDYNAMO_TRITON_EAGER_BACKWARD=1 generates the backward with the forward rather than at the
    # first backward (AOTAutograd's default), so its kernels compile while the forward first runs;
    # no kernel compile starts until both are generated. H100, with compile workers: the cold GPT
    # step (row e) 3.3-3.7 -> 2.8-3.6 s, but a module called with grad enabled and never
    # backpropagated pays for a backward it does not use (row d: 0.22-0.35 -> 0.31-0.42 s)
    eager_bw = os.environ.get("PYDYNAMO_TRITON_EAGER_BACKWARD", "0") == "1"
    from torch.fx._lazy_graph_module import _use_lazy_graph_module

    from ...compile_context import compiler_without_hook
    timing.add("setup", time.perf_counter() - start)
    # Lazy graph modules: AOTAutograd and its partitioner make a GraphModule at every step and
    # each would generate and compile its Python code at once; lazily, only the ones called are
    # (row d on the H100 host: the partition 15-38 -> 9-21 ms)
    with torch._functorch.config.patch(force_non_lazy_backward_lowering=eager_bw), \
            _use_lazy_graph_module(True), \
            (runtime.deferred_precompile() if eager_bw else contextlib.nullcontext()):
        # hook off for the backward's compile (at the first backward) and both graphs' runtime
        graphs = cudagraphs.graphed(gm) if mode == "reduce-overhead" else lambda role, compile: compile
        compiler = functools.partial(compile_aten_graph, timing=timing)
        inference = functools.partial(compile_aten_graph, timing=timing, inference=True)
        compiled = aot_module_simplified(gm, example_inputs,
                                         fw_compiler=compiler_without_hook(graphs("forward", compiler)),
                                         bw_compiler=compiler_without_hook(graphs("backward", compiler)),
                                         inference_compiler=compiler_without_hook(graphs("inference", inference)),
                                         decompositions=decomposition_table(),
                                         # an input's mutation (a batch norm's running statistics)
                                         # stays in the graph as a copy_ at its end, which the
                                         # kernel computing the new value stores straight into
                                         # the input (wrapper._into_inputs): not one ATen copy
                                         # per mutated input after the call (147 a step in
                                         # EfficientNet-B0's training). Not under CUDA graphs,
                                         # which replay on copies of some inputs
                                         keep_inference_input_mutations=mode is None,
                                         partition_fn=layout.partition_with_layouts(min_cut_rematerialization_partition))
    # what AOTAutograd took, our graph compiles (timed as their phases) left out
    timing.add("aot_autograd", time.perf_counter() - start - sum(timing.phases.values()))
    if single:
        return lambda *args: compiled(*args)[0]
    return compiled


def _start_compile_workers():
    """Start the compile worker processes (compile_worker.py) now, if they are to run, so that
    they are ready by the time AOTAutograd hands over the first graph."""
    if os.environ.get("TRITON_INTERPRET", "0") == "1":
        return
    try:
        from triton.runtime.driver import driver

        from . import compile_worker
        compile_worker.workers(driver.active.get_current_target())
    except Exception as e:  # kernels then compile in this process's threads
        log.debug("compile workers not started: %s", e)


def _tuple_output(gm):
    """AOTAutograd wants a tuple of outputs (as Dynamo's graphs have); wrap a bare one."""
    out = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
    if isinstance(out.args[0], (tuple, list)):
        return gm, False
    graph = copy.deepcopy(gm.graph)
    out = next(n for n in reversed(graph.nodes) if n.op == "output")
    out.args = ((out.args[0],),)
    return torch.fx.GraphModule(gm, graph), True


def _boxed(fn):
    fn._boxed_call = True
    return fn


def compile_aten_graph(gm, example_inputs, timing=None, inference=False):
    """ATen graph -> boxed callable (takes the list of inputs), via the disk cache. ``timing``: a
    runtime.Timing that gets the phases' times. ``inference``: a graph with no backward, whose
    convolutions may be made channels-last (layout.py)."""
    from . import layout, runtime

    def eager(args):
        return gm(*args)
    timing = timing or runtime.Timing()
    timing.graphs += 1
    try:
        if inference and layout.wanted(gm):
            with timing.phase("layout"):
                layout.channels_last_convolutions(gm)
        with timing.phase("graph_key"):
            key = graph_key(gm)
            src = runtime.lookup_graph(key)
        if src is None:
            src = generate_source(gm, timing)
            timing.generated += 1
        with timing.phase("import"):
            mod = runtime.load_source(src, key)
        constants = [getattr(gm, n.target) for n in gm.graph.nodes if n.op == "get_attr"]
        with timing.phase("make"), runtime.timing_scope(timing):
            call = _boxed(mod.make(constants, eager))
        if runtime.TIMING:
            call = runtime.timed_first_call(call, timing, f"graph {timing.graphs}")
        return call
    except Exception as e:  # an internal error: this graph runs with ATen
        if os.environ.get("PYDYNAMO_TRITON_STRICT") == "1":
            raise
        # on the errors logger, which the trace report collects: a slow model says why
        logs.get("errors").warning("triton backend could not compile a graph (%s: %s); the whole graph "
                                   "runs with ATen", type(e).__name__, e)
        fallbacks.append(f"{type(e).__name__}: {e}")
        return _boxed(eager)


def generate_source(gm, timing=None):
    from . import runtime
    from .lowering import GraphLowering, unfuse_bias
    from .scheduler import schedule
    from .wrapper import WrapperCodegen
    timing = timing or runtime.Timing()
    with timing.phase("lowering"):
        g = GraphLowering(unfuse_bias(gm)).run()
    inputs = [b.name for b in g.inputs] + [b.name for b, _ in g.constants]
    with timing.phase("scheduling"):
        seq = schedule(g.items, inputs)
    with timing.phase("codegen"):
        return WrapperCodegen(g, seq).generate()


@functools.lru_cache(None)
def _generator_hash():
    """A hash of this package's own source, so a changed generator never reuses old output."""
    here = os.path.dirname(__file__)
    h = hashlib.sha256()
    for name in sorted(os.listdir(here)):
        if name.endswith(".py"):
            with open(os.path.join(here, name), "rb") as f:
                h.update(f.read())
    return h.hexdigest()


def graph_key(gm):
    """Identifies everything the generated source depends on: the graph, its inputs' metadata,
    the knobs of the generator, versions, and whether Triton interprets."""
    from . import kernel, lowering, runtime, scheduler
    import triton
    parts = [gm.code, _generator_hash(), torch.__version__, triton.__version__,
             os.environ.get("TRITON_INTERPRET", "0"),
             os.environ.get("PYDYNAMO_TRITON_SPLIT_REDUCTIONS", "1"),
             str(runtime.tuning()),  # whether kernels come with other configurations to measure
             # deterministic mode lowers index_put / scatter_add to ATen instead of atomics
             str(torch.are_deterministic_algorithms_enabled()),
             str(gm.meta.get("pydynamo_saved_from")),  # which outputs may share memory
             repr((scheduler.PERSISTENT_MAX, scheduler.COLUMN_PERSISTENT_MAX, kernel.LOOP_RBLOCK,
                   kernel.POINTWISE_XBLOCK, kernel.COLUMN_XBLOCK, kernel.COLUMN_RBLOCK,
                   lowering.REALIZE_READS, lowering.REALIZE_COST))]
    for n in gm.graph.nodes:
        if n.op in ("placeholder", "get_attr"):
            v = n.meta.get("val") if n.op == "placeholder" else getattr(gm, n.target)
            if isinstance(v, torch.Tensor):
                parts.append(repr((tuple(v.shape), v.stride(), v.dtype, str(v.device), v.requires_grad)))
            else:
                parts.append(repr(v))
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:32]


def compile_times(all=False):
    """Where the last compile's time went: runtime.Timing.summary() of the last triton_backend
    call (its backward too, once compiled); ``all=True``: summed over every call so far."""
    from . import runtime
    return runtime.compile_times(all)


__all__ = ["triton_backend", "compile_aten_graph", "generate_source", "compile_times"]
