"""Backend registry: a backend is ``backend(gm, example_inputs) -> callable``, exactly
torch.compile's custom-backend signature, so those plug in unchanged. Names resolve here."""
_BACKENDS = {}


def register_backend(fn=None, name=None):
    """Register ``fn`` under ``name`` (default: its __name__); usable as a decorator."""
    if fn is None:
        return lambda f: register_backend(f, name)
    _BACKENDS[name or fn.__name__] = fn
    return fn


def lookup_backend(backend):
    if callable(backend):
        return backend
    if backend not in _BACKENDS:
        raise ValueError(f"unknown pydynamo backend {backend!r}; available: {list_backends()} "
                         "(aot_eager and inductor arrive with the backends issue)")
    return _BACKENDS[backend]


def list_backends():
    return sorted(_BACKENDS)


@register_backend(name="eager")
def eager(gm, example_inputs):
    """Run the captured graph as plain Python, without nn.Module.__call__ overhead."""
    return gm.forward


@register_backend(name="inductor")
def inductor(gm, example_inputs, **kwargs):
    """PyTorch's Inductor; ``mode`` and ``options`` come from pydynamo.compile."""
    from .inductor import inductor as compile_with_inductor
    return compile_with_inductor(gm, example_inputs, **kwargs)
