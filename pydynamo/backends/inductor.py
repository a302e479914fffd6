"""PyTorch's Inductor as a pydynamo backend (C++ kernels on CPU, Triton kernels on CUDA)."""


def inductor(gm, example_inputs, *, mode=None, options=None):
    from torch._inductor.compile_fx import compile_fx
    patches = {}
    if mode not in (None, "default"):
        from torch._inductor import list_mode_options
        patches.update(list_mode_options(mode))
    patches.update(options or {})
    return compile_fx(gm, example_inputs, config_patches=patches or None)
