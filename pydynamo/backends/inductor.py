"""PyTorch's Inductor as a pydynamo backend (C++ kernels on CPU, Triton kernels on CUDA)."""
from .. import _C


def _static_inputs(gm):
    """Positions of graph inputs that are module parameters or buffers (marked by OutputGraph)."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    return [i for i, n in enumerate(placeholders) if n.meta.get("pydynamo_static")]


def inductor(gm, example_inputs, *, mode=None, options=None):
    from torch._inductor.compile_fx import compile_fx, compile_fx_inner
    patches = {}
    if mode not in (None, "default"):
        from torch._inductor import list_mode_options
        patches.update(list_mode_options(mode))
    patches.update(options or {})
    static, n_inputs = _static_inputs(gm), len(example_inputs)

    def inner_compile(graph, inputs, **kwargs):
        # Tell Inductor which forward inputs are parameters and buffers, as torch.compile does:
        # their addresses are stable, so it skips per-call alignment checks (and, with CUDA
        # graphs, copies) for them. Only for the forward graph, whose inputs are ours in order.
        if static and not kwargs.get("is_backward") and not kwargs.get("static_input_idxs") \
                and len(inputs) == n_inputs:
            kwargs["static_input_idxs"] = static
        # The backward's inner compile runs at the first backward, from the autograd engine,
        # with the hook on: turn it off (convert_frame.in_backward keeps what Inductor does
        # around it from being compiled). Its result is not wrapped: AOTAutograd caches and
        # inspects it as Inductor's OutputCode; its runtime is covered by in_backward too.
        return _C.NoHookCall(compile_fx_inner)(graph, inputs, **kwargs)

    return compile_fx(gm, example_inputs, inner_compile=inner_compile, config_patches=patches or None)
