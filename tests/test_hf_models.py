"""Hugging Face transformers families (issue 18), small configs, random weights, CPU: each
model's forward is captured whole (fullgraph=True) and equals eager on two inputs, the second
served by the cached entry; the training step's gradients and the KV-cache decode step's cache
equal eager's too. The models are tools/hf_models.py's (tools/bench_real.py compares the
graph and break counts with torch.compile's)."""
import os
import sys

import pytest
import torch

import pydynamo
from pydynamo.testing import CompileCounter

pytest.importorskip("transformers")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tools"))
import hf_models  # noqa: E402

MODELS = hf_models.models()


def _call(fn, model, kind, args, kwargs):
    if kind == "train":
        model.zero_grad(set_to_none=True)
        out = fn(*args, **kwargs)
        out.loss.backward()
        return [out.loss] + [p.grad for p in model.parameters()]
    with torch.no_grad():
        return fn(*args, **kwargs)


def _bumped(args, kwargs):
    """The same call with other values (same shapes, dtypes): served by the compiled entry."""
    def bump(t):
        if isinstance(t, torch.Tensor) and t.is_floating_point():
            return t * 0.5 + 0.1
        if isinstance(t, torch.Tensor) and t.dtype == torch.long and t.dim() == 2:
            return (t + 7) % 900 + 3
        return t
    return [bump(a) for a in args], {k: bump(v) for k, v in kwargs.items()}


@pytest.mark.parametrize("name", list(MODELS))
def test_hf_model_in_one_graph(name):
    make, inputs, kind = MODELS[name]
    torch.manual_seed(0)
    model = make()
    counter = CompileCounter()
    compiled = pydynamo.compile(model, backend=counter, fullgraph=True)
    try:
        for step in range(2):
            args, kwargs = inputs(model, "cpu")
            if step:
                args, kwargs = _bumped(args, kwargs)
            expected = _call(model, model, kind, *inputs_copy(args, kwargs))
            got = _call(compiled, model, kind, args, kwargs)
            assert hf_models.max_diff(got, expected) <= 1e-5, name
        assert counter.frame_count == 1, f"{name}: {counter.frame_count} compiles for one input signature"
    finally:
        pydynamo.reset()


def inputs_copy(args, kwargs):
    """Inputs for the eager reference: a KV cache is mutated by a call, so each run gets its own."""
    import copy
    return copy.deepcopy(list(args)), copy.deepcopy(kwargs)
