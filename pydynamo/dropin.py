"""``pydynamo.install()``: ``torch.compile`` and ``torch.compiler.*`` served by pydynamo.

Libraries call ``torch.compile`` themselves (transformers' Trainer through accelerate,
``model.generate`` with a static cache, ``nn.Module.compile``, timm's and Lightning's training
scripts); installed, those calls go to pydynamo with the same arguments and give what
torch.compile gives: the compiled function, or an OptimizedModule keeping the original as
``_orig_mod``. ``uninstall()`` puts torch's functions back.

    pydynamo.install()            # for the rest of the process (or PYDYNAMO_TORCH_COMPILE=1)
    with pydynamo.install():      # for a block: torch's functions are back after it
        trainer.train()

What is replaced is the attribute of the module (``torch.compile``, ``torch.compiler.reset``...);
code that kept a reference to torch's function before ``install()`` still calls torch's. The
``torch.compiler`` names replaced are those pydynamo.compiler mirrors; the others (the ``*_unsafe``
guard switches, the cache-artifact functions) stay torch's and do not affect pydynamo.
"""
import functools
import inspect
import os
import threading
import warnings

import torch

_lock = threading.Lock()
_saved = None  # [(module, name, torch's function)] while installed
_COMPILER_NAMES = ("compile", "reset", "disable", "allow_in_graph", "substitute_in_graph",
                   "assume_constant_result", "list_backends", "set_stance")


def torch_compile(model=None, *, fullgraph=False, dynamic=None, backend="inductor", mode=None, options=None,
                  disable=False):
    """``torch.compile``'s signature and results, compiled by pydynamo (``pydynamo.compile``):
    with no model, a decorator; ``disable=True`` gives the model back unchanged."""
    if model is None:
        def decorator(m):
            return torch_compile(m, fullgraph=fullgraph, dynamic=dynamic, backend=backend, mode=mode,
                                 options=options, disable=disable)
        return decorator
    if not callable(model):
        raise RuntimeError(f"torch.compile (pydynamo installed): {type(model).__name__} is not callable")
    if disable:
        return model
    from .backends import lookup_backend
    from .eval_frame import compile, optimize
    if mode == "default":
        mode = None
    if backend in ("inductor", "triton") or (mode is None and not options):
        return compile(model, backend=backend, fullgraph=fullgraph, dynamic=dynamic, mode=mode,
                                options=options)
    # as torch.compile does, another backend gets mode and options as keyword arguments; a named
    # backend of pydynamo's that takes none ignores them, with a warning (torch's eager backend's)
    extra = {**({"mode": mode} if mode is not None else {}), **({"options": options} if options else {})}
    fn = lookup_backend(backend)
    if isinstance(backend, str) and not _takes_keywords(fn):
        warnings.warn(f"the {backend} backend ignores {', '.join(f'{k}={v!r}' for k, v in extra.items())} "
                      "(as torch.compile's does)", stacklevel=2)
    else:
        fn = functools.partial(fn, **extra)
    return optimize(fn, fullgraph=fullgraph, dynamic=dynamic)(model)


def _takes_keywords(fn):
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.kind is p.VAR_KEYWORD for p in params) or {"mode", "options"} & {p.name for p in params}


class Installed:
    """What ``install()`` returns: used as a context manager, its block's end restores what was
    there before it (torch's functions, unless pydynamo was installed already)."""

    def __init__(self, installed_here):
        self.installed_here = installed_here

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.installed_here:
            uninstall()
        return False


def install():
    """Route ``torch.compile`` and the ``torch.compiler`` functions pydynamo mirrors to pydynamo,
    process-wide (all threads). Idempotent."""
    global _saved
    from . import compiler
    with _lock:
        if _saved is not None:
            return Installed(False)
        saved = [(torch, "compile", torch.compile)]
        torch.compile = torch_compile
        for name in _COMPILER_NAMES:
            saved.append((torch.compiler, name, getattr(torch.compiler, name)))
            setattr(torch.compiler, name, torch_compile if name == "compile" else getattr(compiler, name))
        _saved = saved
    return Installed(True)


def uninstall():
    """Put torch's own ``torch.compile`` and ``torch.compiler`` functions back."""
    global _saved
    with _lock:
        saved, _saved = _saved, None
        for module, name, fn in reversed(saved or ()):
            setattr(module, name, fn)


def installed():
    """Whether ``torch.compile`` goes to pydynamo now."""
    return _saved is not None


def install_from_env():
    """``PYDYNAMO_TORCH_COMPILE=1`` (any value but empty or 0) installs pydynamo at its import."""
    if os.environ.get("PYDYNAMO_TORCH_COMPILE", "").strip() not in ("", "0"):
        install()
