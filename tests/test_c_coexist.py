"""pydynamo's hook and torch._dynamo's hook in one process, in either order and nested."""
import pytest

torch = pytest.importorskip("torch")
import torch._C._dynamo.eval_frame as torch_eval_frame
import torch._dynamo
from torch._dynamo.testing import CompileCounter

from pydynamo import _C
from c_support import Redirect, hooked


def orig(x):
    return ("orig", x)


def new(x):
    return ("new", x)


def tensor_fn(x):
    return torch.sin(x) * 2 + 1


def _torch_compiled():
    torch._dynamo.reset()
    counter = CompileCounter()
    return torch.compile(tensor_fn, backend=counter), counter


def test_ours_first_then_torch_compile_inside():
    compiled, counter = _torch_compiled()
    x = torch.randn(4)
    r = Redirect(orig, new)
    with hooked(r):
        assert orig(1) == ("new", 1)
        for _ in range(3):
            assert torch.equal(compiled(x), tensor_fn(x))
        assert _C.is_installed()  # torch put back what it found: us
        assert orig(2) == ("new", 2)
        hits = _C.debug_counters()["hits"]
        assert orig(1) == ("new", 1)
        assert _C.debug_counters()["hits"] == hits + 1
    assert counter.frame_count == 1  # torch's own cache kept working
    assert not _C.is_installed()


def test_torch_first_then_ours_then_torch_switches_off_blindly():
    r = Redirect(orig, new)
    reinstalls = _C.debug_counters()["reinstalls"]
    torch_prev = torch_eval_frame.set_eval_frame(False)  # torch's shim installed (run-only)
    try:
        with hooked(r):
            assert _C.is_installed()
            assert orig(1) == ("new", 1)
            torch_eval_frame.set_eval_frame(torch_prev)  # torch restores what it saw: the default
            assert not _C.is_installed()                  # ... which silently removed us
            with hooked(r):                               # the next switch notices and recovers
                assert _C.is_installed()
                assert orig(1) == ("new", 1)
        assert _C.debug_counters()["reinstalls"] == reinstalls + 1
    finally:
        torch_eval_frame.set_eval_frame(None)
    assert not _C.is_installed()


def test_torch_on_top_of_us_keeps_us_in_its_chain():
    r = Redirect(orig, new)
    reinstalls = _C.debug_counters()["reinstalls"]
    with hooked(r):
        torch_prev = torch_eval_frame.set_eval_frame(False)  # installed over us, chaining to us
        try:
            assert not _C.is_installed()
            with hooked(r):  # the probe finds us still in the chain: nothing to repair
                assert orig(3) == ("new", 3)
            assert _C.debug_counters()["reinstalls"] == reinstalls
        finally:
            torch_eval_frame.set_eval_frame(torch_prev)
        assert _C.is_installed()
    assert not _C.is_installed()


def test_ours_nested_inside_a_torch_compiled_function():
    @torch._dynamo.disable
    def eager_part():
        return orig(5)

    def fn(x):
        y = x + 1
        tag = eager_part()  # torch breaks its graph here and runs this frame through its chain
        return y * 2, tag

    torch._dynamo.reset()
    counter = CompileCounter()
    compiled = torch.compile(fn, backend=counter)
    x = torch.randn(3)
    with hooked(Redirect(orig, new)):
        for _ in range(2):
            out, tag = compiled(x)
            assert torch.equal(out, (x + 1) * 2)
            assert tag == ("new", 5)
    assert counter.frame_count >= 1
