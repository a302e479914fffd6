"""Global flags: one the trace reads (folded to a constant) is guarded by the value read; one that
changes what a backend compiles is guarded on every entry that backend compiled. Each test toggles
the flag between calls and compares with eager; every flag is restored in a fixture."""
import contextlib

import pytest
import torch
import torch.backends.cudnn
import torch.backends.mkldnn

import pydynamo
from pydynamo.testing import CompileCounter


def _snapshot():
    C = torch._C
    return dict(
        det=(torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()),
        fill=torch.utils.deterministic.fill_uninitialized_memory,
        anomaly=(torch.is_anomaly_enabled(), torch.is_anomaly_check_nan_enabled()),
        precision=C._get_fp32_precision_getter("generic", "all"),
        cudnn=(torch.backends.cudnn.enabled, torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic,
               C._get_cudnn_allow_tf32()),
        mkldnn=torch.backends.mkldnn.enabled,
        sdp=(C._get_flash_sdp_enabled(), C._get_math_sdp_enabled()),
        threads=torch.get_num_threads(),
        warn_always=torch.is_warn_always_enabled(),
    )


@pytest.fixture(autouse=True)
def restore_flags():
    """Every flag a test switches is put back, whatever the test did (the matmul precision through
    the generic knob, which the legacy API and the per-backend one both derive from)."""
    saved = _snapshot()
    pydynamo.reset()
    try:
        yield
    finally:
        pydynamo.reset()
        torch.use_deterministic_algorithms(saved["det"][0], warn_only=saved["det"][1])
        torch.utils.deterministic.fill_uninitialized_memory = saved["fill"]
        torch.autograd.set_detect_anomaly(*saved["anomaly"])
        torch.backends.fp32_precision = saved["precision"]
        torch.set_float32_matmul_precision("highest")
        torch.backends.cuda.matmul.fp32_precision = "none"
        torch.backends.mkldnn.matmul.fp32_precision = "none"
        cudnn = torch.backends.cudnn
        cudnn.enabled, cudnn.benchmark, cudnn.deterministic = saved["cudnn"][:3]
        torch._C._set_cudnn_allow_tf32(saved["cudnn"][3])
        torch.backends.mkldnn.enabled = saved["mkldnn"]
        torch._C._set_sdp_use_flash(saved["sdp"][0])
        torch._C._set_sdp_use_math(saved["sdp"][1])
        torch.set_num_threads(saved["threads"])
        torch.set_warn_always(saved["warn_always"])
        torch.set_default_device(None)


def _branch_on(read):
    def f(x):
        if read():
            return x + 1
        return x - 1
    return f


@contextlib.contextmanager
def _switched(on, off):
    on()
    try:
        yield
    finally:
        off()


def _det(on, warn_only=False):
    return lambda: torch.use_deterministic_algorithms(on, warn_only=warn_only)


def _setter(obj, name, value):
    return lambda: setattr(obj, name, value)


# (reader the trace calls, manager that switches the flag for a block)
READS = {
    "profiler": (lambda: torch.autograd._profiler_enabled(), torch.autograd.profiler.profile),
    "profiler_C": (lambda: torch._C._autograd._profiler_enabled(), torch.autograd.profiler.profile),
    "deterministic": (torch.are_deterministic_algorithms_enabled,
                      lambda: _switched(_det(True), _det(False))),
    "deterministic_C": (lambda: torch._C._get_deterministic_algorithms(),
                        lambda: _switched(_det(True), _det(False))),
    "warn_only": (torch.is_deterministic_algorithms_warn_only_enabled,
                  lambda: _switched(_det(True, True), _det(False))),
    "anomaly": (torch.is_anomaly_enabled, torch.autograd.detect_anomaly),
    "anomaly_check_nan": (torch.is_anomaly_check_nan_enabled,
                          lambda: torch.autograd.set_detect_anomaly(True, check_nan=False)),
    "matmul_precision": (lambda: torch.get_float32_matmul_precision() == "highest",
                         lambda: _switched(lambda: torch.set_float32_matmul_precision("high"),
                                           lambda: torch.set_float32_matmul_precision("highest"))),
    "cuda_matmul_tf32": (lambda: torch.backends.cuda.matmul.allow_tf32,
                         lambda: _switched(_setter(torch.backends.cuda.matmul, "allow_tf32", True),
                                           _setter(torch.backends.cuda.matmul, "allow_tf32", False))),
    "fp16_reduction": (lambda: torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction,
                       lambda: _switched(
                           _setter(torch.backends.cuda.matmul, "allow_fp16_reduced_precision_reduction", False),
                           _setter(torch.backends.cuda.matmul, "allow_fp16_reduced_precision_reduction", True))),
    "cudnn_tf32_C": (lambda: torch._C._get_cudnn_allow_tf32(),
                     lambda: _switched(lambda: torch._C._set_cudnn_allow_tf32(False),
                                       lambda: torch._C._set_cudnn_allow_tf32(True))),
    "cudnn_benchmark": (lambda: torch.backends.cudnn.benchmark,
                        lambda: torch.backends.cudnn.flags(enabled=True, benchmark=True)),
    "mkldnn": (lambda: torch.backends.mkldnn.enabled, lambda: torch.backends.mkldnn.flags(enabled=False)),
    "mkldnn_C": (lambda: torch._C._get_mkldnn_enabled(), lambda: torch.backends.mkldnn.flags(enabled=False)),
    "flash_sdp": (lambda: torch.backends.cuda.flash_sdp_enabled(),
                  lambda: _switched(lambda: torch.backends.cuda.enable_flash_sdp(False),
                                    lambda: torch.backends.cuda.enable_flash_sdp(True))),
    "num_threads": (lambda: torch.get_num_threads() == 1,
                    lambda: _switched(lambda: torch.set_num_threads(1), lambda: torch.set_num_threads(2))),
    "warn_always": (torch.is_warn_always_enabled,
                    lambda: _switched(lambda: torch.set_warn_always(True), lambda: torch.set_warn_always(False))),
    "fwd_grad": (lambda: torch._C._is_fwd_grad_enabled(),
                 lambda: _switched(lambda: torch._C._set_fwd_grad_enabled(False),
                                   lambda: torch._C._set_fwd_grad_enabled(True))),
    "default_device": (lambda: torch.get_default_device().type == "cpu", lambda: torch.device("meta")),
}


@pytest.mark.parametrize("name", sorted(READS))
def test_flag_read_in_trace_is_guarded(name):
    read, switched = READS[name]
    if name == "num_threads" and torch.get_num_threads() == 1:
        torch.set_num_threads(2)
    state = _backend_flags()
    f = _branch_on(read)
    cnt = CompileCounter()
    of = pydynamo.optimize(cnt)(f)
    x = torch.zeros(2)
    assert torch.equal(of(x), f(x))
    assert cnt.frame_count == 1
    with switched():
        expected = f(x)
        assert torch.equal(of(x), expected)
    assert not torch.equal(expected, f(x)), "the switch changes nothing: the test tests nothing"
    assert cnt.frame_count == 2  # recompiled for the switched flag
    assert torch.equal(of(x), f(x))
    # the first entry serves the restored flag, unless restoring it left another flag the backend
    # compiles by changed (CUDA: allow_tf32 = False sets the matmul fp32 precision to "ieee", which
    # was "none" before): then a third compile is right
    assert cnt.frame_count == (2 if _backend_flags() == state else 3)


def _backend_flags():
    from pydynamo.guards import flag_readers
    return {k: read() for k, read in flag_readers().items()}


def test_reproducer_profiler():
    def f(x):
        if torch.autograd._profiler_enabled():
            return x + 1
        return x - 1
    of = pydynamo.optimize("eager")(f)
    x = torch.zeros(2)
    assert torch.equal(of(x), x - 1)
    with torch.autograd.profiler.profile():
        assert torch.equal(of(x), f(x))
        assert torch.equal(of(x), x + 1)


def test_factory_under_default_device():
    """The default device is a torch function mode: every factory call without a device reads it."""
    def f(x):
        if torch.zeros(2).device.type == "cpu":
            return x + 1
        return x - 1
    of = pydynamo.optimize("eager")(f)
    x = torch.zeros(2)
    assert torch.equal(of(x), f(x))
    torch.set_default_device("meta")
    try:
        expected = f(x)
        assert torch.equal(of(x), expected)
    finally:
        torch.set_default_device(None)
    with torch.device("meta"):
        assert torch.equal(of(x), expected)
    assert torch.equal(of(x), f(x))


def test_has_torch_function_under_a_mode():
    class Mode(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    def f(x):
        if torch.overrides.has_torch_function((x,)):
            return x + 1
        return x - 1
    of = pydynamo.optimize("eager")(f)
    x = torch.zeros(2)
    assert torch.equal(of(x), x - 1)
    with Mode():
        assert torch.equal(of(x), f(x))
    assert torch.equal(of(x), x - 1)


def test_a_frame_first_called_under_a_mode_is_compiled_outside_it():
    """Under a torch function mode the trace does not model, the frame runs eagerly this time
    only: called outside the mode, it compiles (it was skipped for good)."""
    class Mode(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    def f(x):
        return x * 2

    of = pydynamo.optimize("eager")(f)
    x = torch.ones(2)
    with Mode():  # (the mode's own __torch_function__ runs with the mode off: it may compile)
        assert torch.equal(of(x), x * 2)
    assert pydynamo._C.cache_size(f) == 0 and not pydynamo._C.is_skipped(f)
    assert torch.equal(of(x), x * 2)
    assert pydynamo._C.cache_size(f) == 1
    with Mode(), pytest.raises(pydynamo.exc.Unsupported):
        pydynamo.optimize("eager", fullgraph=True)(lambda x: x + 3)(x)


def test_flag_read_guard_texts():
    from _compile import compile_fn
    c = compile_fn(_branch_on(lambda: torch._C._get_cudnn_allow_tf32()), backend="eager")
    c(torch.zeros(2))
    value = torch._C._get_cudnn_allow_tf32()
    assert f"torch._C._get_cudnn_allow_tf32() == {value}" in c.guard_texts()
    assert "no torch function mode active" in c.guard_texts()
    assert not any("flags the backend compiled by" in t for t in c.guard_texts())


def test_sdp_flag_inside_sdpa_kernel_block():
    """Inside an sdpa_kernel block the flags follow from their entry values (guarded on
    entering): a read there is not guarded by its in-block value, which would never hit."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def f(x):
        with sdpa_kernel([SDPBackend.MATH]):
            if torch.backends.cuda.flash_sdp_enabled():
                return x + 1
        return x - 1
    cnt = CompileCounter()
    of = pydynamo.optimize(cnt)(f)
    x = torch.zeros(2)
    for _ in range(3):
        assert torch.equal(of(x), f(x))
    assert cnt.frame_count == 1


# ---- flags a backend compiles in ----------------------------------------------------------------

BACKEND_FLAGS = {
    "deterministic": lambda: _switched(_det(True), _det(False)),
    "warn_only": lambda: _switched(_det(True, True), _det(False)),
    "matmul_precision": lambda: _switched(lambda: torch.set_float32_matmul_precision("medium"),
                                          lambda: torch.set_float32_matmul_precision("highest")),
    "mkldnn": lambda: torch.backends.mkldnn.flags(enabled=False),
    "num_threads": lambda: _switched(lambda: torch.set_num_threads(1), lambda: torch.set_num_threads(2)),
    "fill_uninitialized_memory": lambda: _switched(
        _setter(torch.utils.deterministic, "fill_uninitialized_memory", False),
        _setter(torch.utils.deterministic, "fill_uninitialized_memory", True)),
}


@pytest.mark.parametrize("name", sorted(BACKEND_FLAGS))
def test_counting_backend_reinvoked_when_a_backend_flag_changes(name):
    """A backend that does not say which flags it compiles in is assumed to compile all of them."""
    if name == "num_threads" and torch.get_num_threads() == 1:
        torch.set_num_threads(2)
    cnt = CompileCounter()
    of = pydynamo.optimize(cnt)(lambda x: torch.mm(x, x) + 1)
    x = torch.randn(3, 3)
    state = _backend_flags()
    of(x)
    of(x)
    assert cnt.frame_count == 1
    with BACKEND_FLAGS[name]():
        of(x)
        assert cnt.frame_count == 2
        of(x)
        assert cnt.frame_count == 2
    of(x)
    # the first entry again, unless the switch back left the flags otherwise (see above)
    assert cnt.frame_count == (2 if _backend_flags() == state else 3)


def test_eager_backend_has_no_backend_flag_guards():
    """The eager graph's ops read the flags when they run, as eager's do: toggling one that the
    trace does not read keeps the entry."""
    from pydynamo import backends
    seen = []

    @backends.register_backend(name="_counting_eager_test")
    def counting(gm, example_inputs):
        seen.append(gm)
        return gm.forward
    counting.reads_global_flags = ()
    of = pydynamo.optimize("_counting_eager_test")(lambda x: x * 2)
    x = torch.randn(3)
    of(x)
    with _switched(_det(True), _det(False)):
        of(x)
    assert len(seen) == 1


def test_aot_eager_recompiles_for_deterministic_mode():
    calls = []
    from pydynamo.backends import lookup_backend
    aot = lookup_backend("aot_eager")

    def counting(gm, example_inputs):
        calls.append(1)
        return aot(gm, example_inputs)
    counting.reads_global_flags = aot.reads_global_flags
    x = torch.randn(4)
    of = pydynamo.optimize(counting)(lambda x: x.sin() + 1)
    assert torch.equal(of(x), x.sin() + 1)
    with _switched(_det(True), _det(False)):
        assert torch.equal(of(x), x.sin() + 1)
    assert len(calls) == 2
    # the TF32 / matmul precision flags: not what AOTAutograd compiles by
    with _switched(lambda: torch.set_float32_matmul_precision("medium"),
                   lambda: torch.set_float32_matmul_precision("highest")):
        of(x)
    assert len(calls) == 2
