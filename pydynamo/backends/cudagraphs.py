"""CUDA graphs for compiled graphs: ``mode="reduce-overhead"`` of the triton backend, and the
backend "cudagraphs" (ATen graphs, as torch.compile's backend of that name).

A compiled graph's launches are recorded once into a CUDA graph and replayed with one call, so
a step costs one launch of host time instead of one per kernel. ``CUDAGraphed`` wraps a boxed
compiled callable (AOTAutograd's convention: one list argument):

- Call 1 runs the callable as it is (a warm-up: kernels load, workspaces are made).
- Call 2 records: inputs at stable addresses (parameters and buffers, which the caller names,
  and outputs of other recordings, e.g. a forward's saved tensors read by the backward) are
  read where they are; every other input gets a static buffer that each replay copies it into.
- Later calls replay a recording whose stable inputs are at the same addresses as now.

The outputs are the recording's own memory, so a replay overwrites the previous replay's
outputs. pydynamo never lets that be seen: before a replay, it checks (by the storages' use
counts) that nothing outside the recording still holds any of its outputs: a tensor the caller
kept, a view of it, a tensor autograd saved, a gradient in ``.grad``. If something does, another
recording is made (at most ``MAX_RECORDINGS`` per graph; ``out = model(x)`` in a loop holds the
last output while the next call runs, so two alternate), and past that the graph runs without
CUDA graphs. This is stricter than torch.compile's CUDA graph trees, which overwrite and raise
an error only when an overwritten tensor is read. As in torch.compile, mutating an input between
calls is fine; what is the caller's promise is that parameters stay where they are (a moved one
is re-recorded, then run without graphs).

A graph with symbolic sizes records per set of sizes: the values of its int inputs and the sizes
and strides of its tensor inputs other than parameters; as many as ``MAX_SIZES`` sets per graph
(calls with further ones run without graphs).
Graphs with other inputs than these and CUDA tensors on one device (CPU tensors, floats) run
without CUDA graphs, as do graphs whose recording fails (a host synchronization inside).
"""
import logging
import os
import threading
import weakref

import torch

log = logging.getLogger(__name__)

MAX_RECORDINGS = int(os.environ.get("PYDYNAMO_CUDAGRAPH_MAX_RECORDINGS", "2"))  # per sizes
MAX_SIZES = int(os.environ.get("PYDYNAMO_CUDAGRAPH_MAX_SIZES", "8"))  # sizes recorded per graph

# what recordings are made of and on: tests on a CPU set a stand-in that replays by re-running
CAPTURE, DEVICE_TYPE = None, "cuda"  # None: cuda_capture
_RUNNERS = weakref.WeakSet()  # every CUDAGraphed alive (for tests and debugging)

# data pointers of the storages recordings own: an input found here is a recording's output
# (a saved tensor on its way to the backward), read in place rather than copied
_OUTPUT_STORAGES = {}


def cuda_capture(fn, inputs, device):
    """Record ``fn(inputs)`` into a CUDA graph with its own memory pool: (replay, outputs)."""
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.device(device), torch.cuda.graph(graph, pool=torch.cuda.graph_pool_handle(),
                                                                capture_error_mode="thread_local"):
        outputs = fn(list(inputs))
    return graph.replay, outputs


def _storage_ptr(t):
    return t.untyped_storage().data_ptr()


def _use_count(t):
    """(the StorageImpl's address, its current use count) of ``t``'s storage."""
    s = t.untyped_storage()
    cdata = s._cdata
    del s
    return cdata, torch._C._storage_Use_Count(cdata)


class _Recording:
    """One recorded graph: its static inputs, its outputs, and what it watches."""

    def __init__(self, runner, args):
        self.inputs, self.copied, self.fixed = [], [], []  # fixed: (position, data pointer)
        self.device, self.sizes = runner.device, runner.sizes_of(args)
        for i, a in enumerate(args):
            if not isinstance(a, torch.Tensor):  # a size (symbolic in the graph): part of the key
                self.inputs.append(a)
            elif i in runner.static or _storage_ptr(a) in _OUTPUT_STORAGES \
                    or torch._debug_has_internal_overlap(a) == 1:  # (an expanded tensor: can't be copied into)
                self.fixed.append((i, a.data_ptr()))
                self.inputs.append(a)
            else:
                buf = torch.empty_strided(a.shape, a.stride(), dtype=a.dtype, device=a.device)
                buf.copy_(a)
                self.copied.append(i)
                self.inputs.append(buf)
        self.replay, outputs = (CAPTURE or cuda_capture)(runner.fn, self.inputs, runner.device)
        self.outputs = list(outputs)
        # The graph reads fixed inputs by address: holding them would hold another recording's
        # outputs (a forward's saved tensors, held by the backward's recording) forever.
        for i, _ in self.fixed:
            self.inputs[i] = None
        # Outputs in memory of this recording: new ones, and static input buffers handed out
        # (an input saved for the backward); not views of fixed inputs (a parameter's memory).
        fixed_here = {_storage_ptr(args[i]) for i, _ in self.fixed}
        owned = {}
        for o in self.outputs:
            if isinstance(o, torch.Tensor) and _storage_ptr(o) not in fixed_here:
                owned.setdefault(_storage_ptr(o), o)
        # the use counts with only this recording holding its outputs: more means someone else does
        self.watched = [_use_count(o) for o in owned.values()]
        self.owned = list(owned)
        for p in self.owned:
            _OUTPUT_STORAGES[p] = _OUTPUT_STORAGES.get(p, 0) + 1
        weakref.finalize(self, _forget, self.owned)

    def matches(self, args, sizes):
        return sizes == self.sizes and all(args[i].data_ptr() == p for i, p in self.fixed) \
            and all(args[i].shape == self.inputs[i].shape for i in self.copied)

    def why_not(self, args, sizes):
        if sizes != self.sizes:
            return f"recorded for sizes {self.sizes}"
        moved = [i for i, p in self.fixed if args[i].data_ptr() != p]
        if moved:
            return f"inputs {moved[:8]} moved"
        count = torch._C._storage_Use_Count
        held = [k for k, (c, n) in enumerate(self.watched) if count(c) > n]
        return f"outputs {held[:8]} held"

    def in_use(self):
        count = torch._C._storage_Use_Count
        return any(count(c) > n for c, n in self.watched)

    def run(self, args):
        dst, src = [], []
        for i in self.copied:
            a = args[i]
            if a.data_ptr() != self.inputs[i].data_ptr():
                dst.append(self.inputs[i])
                src.append(a)
        if dst:
            torch._foreach_copy_(dst, src)
        del dst, src
        if CAPTURE is not None:  # a stand-in replays by calling the graph: give it this call's
            for i, _ in self.fixed:
                self.inputs[i] = args[i]
        args.clear()  # (boxed: the inputs are ours to free)
        if self.device.type == "cuda" and self.device.index != torch.cuda.current_device():
            with torch.cuda.device(self.device):  # (a replay launches on the current device's stream)
                self.replay()
        else:
            self.replay()
        if CAPTURE is not None:
            for i, _ in self.fixed:
                self.inputs[i] = None
        return [o.detach() if isinstance(o, torch.Tensor) else o for o in self.outputs]


def _forget(ptrs):
    for p in ptrs:
        n = _OUTPUT_STORAGES.get(p, 0) - 1
        if n > 0:
            _OUTPUT_STORAGES[p] = n
        else:
            _OUTPUT_STORAGES.pop(p, None)


class CUDAGraphed:
    """A boxed compiled callable, replayed as CUDA graphs (see the module's docstring).
    ``static``: positions of inputs whose addresses are stable (parameters and buffers)."""
    _boxed_call = True

    def __init__(self, fn, static=(), name="graph", dynamic=False):
        self.fn, self.static, self.name, self.dynamic = fn, frozenset(static), name, dynamic
        self.calls, self.recordings, self.off, self.device = 0, [], None, None
        self.replays, self.size_positions, self.shaped_positions = 0, (), ()
        # one call at a time: two threads must not both find a recording free and replay it
        self.lock = threading.Lock()
        _RUNNERS.add(self)

    def __call__(self, args):
        with self.lock:
            return self._call(args)

    def _call(self, args):
        self.calls += 1
        if self.calls == 1:
            self.off = self._unsuitable(args)
            if self.off:
                log.info("CUDA graphs off for %s: %s", self.name, self.off)
            return self.fn(args)
        if self.off:
            return self.fn(args)
        sizes = self.sizes_of(args)
        for r in self.recordings:
            if r.matches(args, sizes) and not r.in_use():
                self.replays += 1
                return r.run(args)
        same = sum(r.sizes == sizes for r in self.recordings)
        if same >= MAX_RECORDINGS or not same and len({r.sizes for r in self.recordings}) >= MAX_SIZES:
            if log.isEnabledFor(logging.DEBUG):
                log.debug("%s runs without CUDA graphs this call: %s", self.name,
                          "; ".join(r.why_not(args, sizes) for r in self.recordings))
            return self.fn(args)
        try:
            r = _Recording(self, args)
        except Exception as e:  # a host synchronization inside, ...
            self.off = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            log.warning("CUDA graphs off for %s: recording failed (%s); it runs without them",
                        self.name, self.off)
            return self.fn(args)
        self.recordings.append(r)
        self.replays += 1
        return r.run(args)

    def sizes_of(self, args):
        """What one recording serves: the values of the graph's int inputs (symbolic sizes it
        takes as arguments) and, in a graph with symbolic sizes (``dynamic``), the sizes and
        strides of its tensor inputs other than parameters."""
        key = tuple(args[i] for i in self.size_positions)
        if self.shaped_positions:
            key += tuple((tuple(args[i].shape), args[i].stride()) for i in self.shaped_positions)
        return key

    def _unsuitable(self, args):
        """Why these inputs can't be replayed from a recording (None: they can)."""
        devices = set()
        for a in args:
            if type(a) is int:
                continue
            if not isinstance(a, torch.Tensor):
                return f"an input is a {type(a).__name__}, not a tensor or an int"
            devices.add(a.device)
        self.size_positions = tuple(i for i, a in enumerate(args) if type(a) is int)
        if self.dynamic:
            self.shaped_positions = tuple(i for i, a in enumerate(args)
                                          if isinstance(a, torch.Tensor) and i not in self.static)
        if any(d.type != DEVICE_TYPE for d in devices):
            return f"inputs on {', '.join(sorted(str(d) for d in devices))}"
        if len(devices) > 1:
            return "inputs on several devices"
        self.device = next(iter(devices), None)
        if self.device is None:
            return "no tensor inputs"
        return None


def has_symbolic_sizes(inputs):
    """Whether a graph's example inputs (AOTAutograd's fake tensors) have symbolic sizes."""
    return any(type(a) is torch.SymInt or isinstance(a, torch.Tensor) and any(
        type(s) is torch.SymInt for s in (*a.shape, *a.stride())) for a in inputs)


def forward_static_inputs(gm):
    """A function of a forward graph's inputs -> the positions among them of ``gm``'s parameters
    and buffers: those AOTAutograd lifts in front of the inputs, and placeholders OutputGraph
    marked ``pydynamo_static``. Nothing is known static when the count of inputs is not the one
    that layout predicts."""
    from .inductor import _static_inputs
    lifted = len(dict(gm.named_parameters(remove_duplicate=False))) + \
        len(dict(gm.named_buffers(remove_duplicate=False)))
    n_placeholders = sum(1 for n in gm.graph.nodes if n.op == "placeholder")
    static = list(range(lifted)) + [lifted + i for i in _static_inputs(gm)]
    return lambda inputs: static if len(inputs) == lifted + n_placeholders else ()


def graphed(gm):
    """(role, compile) -> a compiler like ``compile`` (AOTAutograd's signature) whose graphs
    replay as CUDA graphs; a forward's or inference graph's parameters and buffers (``gm``'s)
    are read where they are."""
    static = forward_static_inputs(gm)

    def wrap(role, compile):
        def compile_graphed(graph, inputs):
            return CUDAGraphed(compile(graph, inputs), static(inputs) if role != "backward" else (),
                               name=f"the {role} graph", dynamic=has_symbolic_sizes(inputs))
        return compile_graphed
    return wrap


def cudagraphs(gm, example_inputs):
    """The backend "cudagraphs": AOTAutograd's ATen graphs, unfused, replayed as CUDA graphs."""
    from torch._functorch.aot_autograd import aot_module_simplified, make_boxed_func

    from ..compile_context import compiler_without_hook
    wrap = graphed(gm)

    def plain(graph, inputs):
        return make_boxed_func(graph.forward)
    return aot_module_simplified(gm, example_inputs,
                                 fw_compiler=compiler_without_hook(wrap("forward", plain)),
                                 bw_compiler=compiler_without_hook(wrap("backward", plain)))


__all__ = ["CUDAGraphed", "MAX_RECORDINGS", "MAX_SIZES", "cuda_capture", "cudagraphs", "forward_static_inputs",
           "graphed", "has_symbolic_sizes"]
