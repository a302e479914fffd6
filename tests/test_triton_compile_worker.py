"""Compile worker processes (pydynamo/backends/triton/compile_worker.py): they compile a kernel
of a generated module for a GPU target without a GPU, into Triton's disk cache, and a task they
cannot do answers False (the parent then compiles) without losing the worker."""
import glob
import time

import pytest
import torch

pytest.importorskip("triton")

from pydynamo.backends.triton.compile_worker import Workers  # noqa: E402

KERNELS = '''
import triton
import triton.language as tl


@triton.jit
def erf_kernel(x_ptr, y_ptr, XBLOCK: tl.constexpr):
    i = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    tl.store(y_ptr + i, tl.erf(tl.load(x_ptr + i)))
'''


def ready(workers, n, timeout=120):
    start = time.time()
    while workers.ready < n and time.time() - start < timeout:
        time.sleep(0.05)
    return workers.ready >= n


def test_a_worker_compiles_into_the_cache_and_survives_a_bad_task(tmp_path):
    mod = tmp_path / "kernels_mod.py"
    mod.write_text(KERNELS)
    cache = tmp_path / "triton-cache"
    task = (str(mod), "kernels_mod_for_test", "erf_kernel", (torch.float32, torch.float32), 4, 4,
            {"XBLOCK": 128}, {}, ("cuda", 90, 32), {"TRITON_CACHE_DIR": str(cache)})
    w = Workers(1)
    assert w.compile(task) is False or w.ready  # not ready yet: the caller compiles
    assert ready(w, 1)
    assert w.compile(task[:2] + ("no_such_kernel",) + task[3:]) is False
    assert w.compile(task) is True
    cubins = glob.glob(str(cache / "*" / "erf_kernel.cubin"))
    assert len(cubins) == 1 and open(cubins[0], "rb").read(4) == b"\x7fELF"
    assert w.ready == 1  # the bad task did not cost the worker


def test_a_dead_worker_is_left_out(tmp_path):
    w = Workers(1)
    assert ready(w, 1)
    proc = w.idle.get()
    proc.kill()
    proc.wait()
    w.idle.put(proc)
    task = (str(tmp_path / "x.py"), "x", "k", (), 1, 1, {}, {}, ("cuda", 90, 32), {})
    assert w.compile(task) is False
    assert w.ready == 0 and w.compile(task) is False  # nothing left to wait for
