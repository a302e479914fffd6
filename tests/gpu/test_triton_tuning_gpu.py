"""Kernel configurations measured on the GPU at a launch site's first call (runtime._tune): the
chosen kernel gives eager's results, the choice is stored on disk and read back by a new
compile, and later calls launch the chosen kernel directly."""
import os
import shutil

import pytest
import torch

import pydynamo

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def _stats(x):
    return x.sum((0, 2, 3)), torch.var(x, (0, 2, 3), correction=0)


def test_measured_configurations_are_kept_and_read_back(monkeypatch, tmp_path):
    from pydynamo.backends.triton import runtime
    monkeypatch.setenv("PYDYNAMO_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("PYDYNAMO_TRITON_TUNE", raising=False)
    assert runtime.tuning()
    measured = []
    real = runtime._measure
    monkeypatch.setattr(runtime, "_measure", lambda launch, args: measured.append(launch) or real(launch, args))
    x = torch.randn(16, 64, 28, 28, device="cuda").contiguous(memory_format=torch.channels_last)
    try:
        pydynamo.reset()
        got = pydynamo.optimize("triton")(_stats)(x)
        for a, b in zip(got, _stats(x)):
            torch.testing.assert_close(a, b, atol=1e-3, rtol=1e-4)
        assert measured and os.listdir(os.path.join(runtime.cache_dir(), "tune"))
        for _ in range(3):  # later calls: the chosen kernel, no more measuring
            x = torch.randn_like(x)
            for a, b in zip(pydynamo.optimize("triton")(_stats)(x), _stats(x)):
                torch.testing.assert_close(a, b, atol=1e-3, rtol=1e-4)
        n = len(measured)
        pydynamo.reset()  # a new compile of the same graph: its kernels' choices come from disk

        def stats_again(x):
            return _stats(x)
        for a, b in zip(pydynamo.optimize("triton")(stats_again)(x), _stats(x)):
            torch.testing.assert_close(a, b, atol=1e-3, rtol=1e-4)
        assert len(measured) == n
    finally:
        pydynamo.reset()
        shutil.rmtree(tmp_path / "cache", ignore_errors=True)
