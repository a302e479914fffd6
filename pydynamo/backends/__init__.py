"""Backend registry. A backend is ``backend(gm, example_inputs) -> callable``: exactly
torch.compile's custom-backend signature, so those plug in unchanged. Names resolve here: the
built-in ones, ``register_backend``, and third-party packages that declare an entry point in the
``pydynamo_backends`` group (``name = "package.module:function"``) or in torch.compile's
``torch_dynamo_backends`` group (torch-tensorrt...), loaded on first lookup."""
from importlib.metadata import entry_points

ENTRY_POINT_GROUP = "pydynamo_backends"
TORCH_ENTRY_POINT_GROUP = "torch_dynamo_backends"  # third-party torch.compile backends
# torch.compile's own backend names, whose code lives in torch's compiler package, not loaded here
_TORCH_INTERNAL = ("tvm", "openxla", "onnxrt", "ipex", "torchxla_trace_once")
_BACKENDS = {}
_entry_points_loaded = False


def register_backend(fn=None, name=None):
    """Register a backend. Forms: ``@register_backend``, ``@register_backend("name")``,
    ``@register_backend(name="name")``, ``register_backend(fn, "name")``."""
    if isinstance(fn, str):
        fn, name = None, fn
    if fn is None:
        return lambda f: register_backend(f, name)
    if not callable(fn):
        raise TypeError(f"register_backend: a backend must be callable, not {type(fn).__name__}")
    _BACKENDS[name or fn.__name__] = fn
    return fn


def _load_entry_points():
    global _entry_points_loaded
    if _entry_points_loaded:
        return
    _entry_points_loaded = True
    for group in (ENTRY_POINT_GROUP, TORCH_ENTRY_POINT_GROUP):  # (pydynamo's first: it wins a name)
        for ep in entry_points(group=group):
            if ep.name not in _BACKENDS:
                _BACKENDS[ep.name] = _LazyEntryPoint(ep)


class _LazyEntryPoint:
    """A third-party backend, imported the first time it compiles a graph."""

    def __init__(self, ep):
        self.ep, self.fn = ep, None
        self.__name__ = ep.name

    def __call__(self, gm, example_inputs, **kwargs):
        if self.fn is None:
            self.fn = self.ep.load()
        return self.fn(gm, example_inputs, **kwargs)


def lookup_backend(backend):
    """A callable backend for a name or a callable; a clear error for an unknown name."""
    if callable(backend):
        return backend
    if not isinstance(backend, str):
        raise TypeError(f"a pydynamo backend is a name or a callable, not {type(backend).__name__}")
    _load_entry_points()
    if backend not in _BACKENDS:
        hint = ""
        if backend in _TORCH_INTERNAL:
            hint = (f" ({backend!r} is one of torch.compile's own backends, which pydynamo does not load: "
                    "pass the backend's callable itself)")
        raise ValueError(f"unknown pydynamo backend {backend!r}; known backends: {', '.join(list_backends())}{hint}")
    return _BACKENDS[backend]


def list_backends():
    _load_entry_points()
    return sorted(_BACKENDS)


@register_backend(name="eager")
def eager(gm, example_inputs):
    """Run the captured graph as plain Python, without nn.Module.__call__ overhead."""
    return gm.forward


# Which of torch's flags (guards.flag_readers(): deterministic algorithms, TF32...) a backend
# compiles in, guarded on each entry it compiled (guards.BACKEND_FLAGS; functools.wraps carries
# the attribute to convert_frame's wrappers). A backend that does not say: all of them. The
# eager graph's ops read them when they run, as eager's do: none.
eager.reads_global_flags = ()


@register_backend(name="aot_eager")
def aot_eager(gm, example_inputs):
    """AOTAutograd with no-op forward and backward compilers: the graphs training runs, traced
    ahead of time, executed as Python (the reference for what compiling backends must match)."""
    from torch._functorch.aot_autograd import aot_module_simplified, make_boxed_compiler

    from ..compile_context import compiler_without_hook

    # the backward graph is compiled at the first backward and run at each: hook off for both
    @compiler_without_hook
    @make_boxed_compiler
    def nop(graph_module, inputs):
        return graph_module.forward

    # input mutations under no_grad stay in the graph, as torch's aot_eager keeps them: AOTAutograd
    # refuses set_() on an input otherwise (``p.data = t``, variables/tensor.py)
    return aot_module_simplified(gm, example_inputs, fw_compiler=nop, bw_compiler=nop,
                                 keep_inference_input_mutations=True)


aot_eager.reads_global_flags = ("deterministic",)  # AOTAutograd's metadata records it


@register_backend(name="inductor")
def inductor(gm, example_inputs, **kwargs):
    """PyTorch's Inductor; ``mode`` and ``options`` come from pydynamo.compile."""
    from .inductor import inductor as compile_with_inductor
    return compile_with_inductor(gm, example_inputs, **kwargs)


@register_backend(name="triton")
def triton(gm, example_inputs, *, mode=None):
    """pydynamo's own Triton code generator: fused pointwise and row-reduction kernels, ATen for
    the rest (pydynamo/backends/triton/). ``mode="reduce-overhead"``: replayed as CUDA graphs."""
    from .triton import triton_backend
    return triton_backend(gm, example_inputs, mode=mode)


triton.reads_global_flags = ("deterministic",)  # index_put / scatter_add: ATen or atomics


@register_backend(name="cudagraphs")
def cuda_graphs_backend(gm, example_inputs):
    """AOTAutograd's ATen graphs, unfused, replayed as CUDA graphs (torch.compile's backend of
    the same name; pydynamo/backends/cudagraphs.py)."""
    from .cudagraphs import cudagraphs as compile_with_cuda_graphs
    return compile_with_cuda_graphs(gm, example_inputs)


cuda_graphs_backend.reads_global_flags = ("deterministic",)  # through AOTAutograd, as aot_eager
