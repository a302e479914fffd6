"""What generated modules need at run time, and the on-disk cache of generated source.

A graph's source is stored as ``<cache>/triton/g_<hash of source>.py`` and imported from there
(Triton reads kernel source from real files).  A second index, ``graph_<hash of ATen graph>``,
names the source made for a graph, so a later process skips lowering entirely; Triton's own
cache then skips the GPU compile.
"""
import hashlib
import importlib.util
import logging
import os
import sys

import torch

log = logging.getLogger("pydynamo.output_code")
_modules = {}


def cache_dir():
    root = os.environ.get("PYDYNAMO_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "pydynamo")
    path = os.path.join(root, "triton")
    os.makedirs(path, exist_ok=True)
    return path


def _write(path, text):
    """Atomic write: concurrent processes may race to fill the same entry."""
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def lookup_graph(key):
    """Source previously generated for the graph with this key, or None."""
    index = os.path.join(cache_dir(), f"graph_{key}")
    try:
        with open(index) as f:
            path = os.path.join(cache_dir(), f.read().strip())
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def load_source(src, key=None):
    """Import the module for ``src`` from the cache (writing it first if new)."""
    h = hashlib.sha256(src.encode()).hexdigest()[:20]
    name = f"g_{h}.py"
    path = os.path.join(cache_dir(), name)
    log.info("pydynamo triton output code: %s\n%s", path, src)
    if h in _modules:
        return _modules[h]
    if not os.path.exists(path):
        _write(path, src)
    if key is not None:
        _write(os.path.join(cache_dir(), f"graph_{key}"), name)
    spec = importlib.util.spec_from_file_location(f"pydynamo_triton_{h}", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    _modules[h] = mod
    return mod


def restride(t, size, stride):
    """An ATen fallback's result with the strides our kernels were generated for."""
    if t.stride() == stride:
        return t
    out = torch.empty_strided(size, stride, dtype=t.dtype, device=t.device)
    return out.copy_(t)
