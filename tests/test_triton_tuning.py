"""Kernel configurations chosen by measuring (KernelCodegen.alternatives, Launch.with_choices,
runtime._tune): every configuration a kernel is offered in computes what eager does, the choice
is kept on disk, and kernels that must not run twice are offered none. The interpreter has no
clock worth reading, so a stand-in measure (runtime.MEASURE) says which configuration is fastest."""
import os
import re
import shutil

os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported: kernels run on the CPU

import logging  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

pytest.importorskip("triton")

from pydynamo.backends.triton import runtime, triton_backend  # noqa: E402

CL = torch.channels_last


@pytest.fixture(autouse=True)
def tuning(monkeypatch, tmp_path):
    monkeypatch.setenv("PYDYNAMO_TRITON_TUNE", "1")
    monkeypatch.setenv("PYDYNAMO_CACHE_DIR", str(tmp_path / "cache"))
    yield
    shutil.rmtree(tmp_path / "cache", ignore_errors=True)


def _name(launch):
    k = launch.kernel
    return getattr(k, "__name__", None) or k.fn.__name__


def _prefer(k, seen):
    """A measure under which configuration k (0: the heuristic's own) is the fastest."""
    def measure(launch, args):
        name = _name(launch)
        seen.append(name)
        mine = name.endswith(f"_c{k}") if k else "_c" not in name.rsplit("_", 1)[-1]
        return 0.0 if mine else 1.0
    return measure


def _run(fn, args, monkeypatch, measure):
    monkeypatch.setattr(runtime, "MEASURE", measure)
    compiled = triton_backend(torch.fx.symbolic_trace(fn), list(args))
    return compiled(*args), compiled(*args)


CASES = {
    # a channels-last batch norm's statistics: columns (channels) reduced over N, H, W
    "column sum": (lambda x: x.sum((0, 2, 3)), lambda: [torch.randn(4, 24, 21, 19).contiguous(memory_format=CL)]),
    "column variance": (lambda x: (torch.var(x, (0, 2, 3), correction=0), x.mean((0, 2, 3))),
                        lambda: [torch.randn(3, 40, 17, 23).contiguous(memory_format=CL)]),
    "long rows": (lambda x: (x.sum(-1), x.amax(-1)), lambda: [torch.randn(3, 9000)]),
    "normalized long rows": (lambda x: (x - x.mean(-1, keepdim=True)) / x.std(-1, keepdim=True),
                             lambda: [torch.randn(5, 7000)]),
    "argmax of long rows": (lambda x: x.argmax(-1), lambda: [torch.randn(2, 11000)]),
    "softmax, few rows": (lambda x: torch.softmax(x, -1), lambda: [torch.randn(6, 100)]),
    "cumsum": (lambda x: torch.cumsum(x, -1), lambda: [torch.randn(3, 5000)]),
    # a transposing copy, tiled (scheduler._transposing_space): columns along the read
    "transposed copy": (lambda x: (x.transpose(-1, -2) * 0.5).contiguous(), lambda: [torch.randn(3, 100, 72)]),
}


def test_every_configuration_of_a_kernel_storing_into_an_input(monkeypatch, tmp_path, caplog):
    """A kernel that stores a graph input's new value straight into it, reading nothing of the
    input, may be measured: each run writes the same values (wrapper._into_inputs)."""
    caplog.set_level(logging.INFO, logger="pydynamo.output_code")
    x = torch.randn(3000, 40)

    def fn(x, buf):
        buf.copy_(x.sum(0))
        return x * 2
    offered = set()
    for k in range(4):
        monkeypatch.setenv("PYDYNAMO_CACHE_DIR", str(tmp_path / f"cache{k}"))
        seen, buf = [], torch.zeros(40)
        got, _ = _run(fn, [x, buf], monkeypatch, _prefer(k, seen))
        torch.testing.assert_close(got, x * 2)
        torch.testing.assert_close(buf, x.sum(0), atol=1e-4, rtol=1e-4)
        offered |= {n for n in seen if n.endswith(f"_c{k}")} if k else set()
        shutil.rmtree(tmp_path / f"cache{k}", ignore_errors=True)
    assert offered
    src = [r.args[1] for r in caplog.records if r.name == "pydynamo.output_code"][-1]
    assert "stored there" in src and ".with_choices(" in src


@pytest.mark.parametrize("case", list(CASES))
def test_every_configuration_computes_what_eager_does(case, monkeypatch, tmp_path):
    fn, make = CASES[case]
    args = make()
    want = fn(*args)
    offered = set()
    for k in range(4):
        monkeypatch.setenv("PYDYNAMO_CACHE_DIR", str(tmp_path / f"cache{k}"))  # (no choice kept from k - 1)
        seen = []
        for got in _run(fn, args, monkeypatch, _prefer(k, seen)):
            torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
        offered |= {n for n in seen if n.endswith(f"_c{k}")} if k else set()
    for k in range(4):
        shutil.rmtree(tmp_path / f"cache{k}", ignore_errors=True)
    assert offered, f"{case}: no kernel was offered another configuration"


def test_many_programs_of_whole_rows_are_offered_fewer_warps(monkeypatch, caplog):
    """A persistent row kernel with programs enough keeps its blocks, and is offered them under
    half the warps (how many warps share a block's rows is the guess: one a row reduces without
    shared memory). MIN_PROGRAMS is lowered so that the interpreter runs few programs."""
    from pydynamo.backends.triton import kernel
    monkeypatch.setattr(kernel, "MIN_PROGRAMS", 2)
    caplog.set_level(logging.INFO, logger="pydynamo.output_code")
    x = torch.randn(64, 700)
    fn = lambda x: torch.nn.functional.layer_norm(x, (700,))  # noqa: E731
    seen = []
    for got in _run(fn, [x], monkeypatch, _prefer(1, seen)):
        torch.testing.assert_close(got, fn(x), atol=1e-4, rtol=1e-4)
    src = [r.args[1] for r in caplog.records if r.name == "pydynamo.output_code"][-1]
    launch = re.search(r"Launch\((\w+), (\d+), (\d+), .*XBLOCK=(\d+), RBLOCK=(\d+)\)\.with_choices", src)
    assert launch, src
    name, grid, warps, xblock, rblock = launch.groups()
    assert f"{name}_c1" in seen and (int(xblock), int(rblock)) == (4, 1024), (seen, launch.groups())
    alt = re.search(rf"Launch\({name}_c1, {grid}, (\d+), .*XBLOCK=4, RBLOCK=1024\)", src)
    assert alt and int(alt.group(1)) == int(warps) // 2, src


def test_the_choice_is_kept_on_disk(monkeypatch):
    fn, make = CASES["column sum"]
    args = make()
    seen = []
    first = _run(fn, args, monkeypatch, _prefer(1, seen))
    assert any(n.endswith("_c1") for n in seen)
    tune = os.path.join(runtime.cache_dir(), "tune")
    assert os.listdir(tune)
    again = []
    second = _run(fn, args, monkeypatch, _prefer(2, again))  # a new wrapper: the disk answers
    assert again == []
    torch.testing.assert_close(first[0], second[0])


def test_no_choices_for_kernels_that_must_not_run_twice(monkeypatch, caplog):
    """Measuring runs a kernel several times: an output stored over a dying input, or a scatter
    adding into its target, would change its result each time."""
    caplog.set_level(logging.INFO, logger="pydynamo.output_code")
    idx = torch.tensor([0, 2, 2, 5, 1])

    def fn(t, v):
        return (t * 2).index_put((idx,), v, accumulate=True).sum(-1)
    seen = []
    t, v = torch.randn(6, 300), torch.randn(5, 300)
    got, _ = _run(fn, [t, v], monkeypatch, _prefer(1, seen))
    torch.testing.assert_close(got, fn(t, v), atol=1e-4, rtol=1e-4)
    (src,) = [r.args[1] for r in caplog.records if r.name == "pydynamo.output_code"]
    names = re.findall(r"\ndef (triton_\w+)\(", src)
    bodies = dict(zip(names, src.split("\ndef triton_")[1:]))
    risky = [n for n, body in bodies.items() if "tl.atomic_add" in body or "in_out_ptr" in body]
    assert risky and ".with_choices(" in src  # such kernels are here, and others have choices
    assert not [n for n in risky if f"{n}_c1" in names]


def test_off_under_the_interpreter_unless_asked(monkeypatch, caplog):
    monkeypatch.delenv("PYDYNAMO_TRITON_TUNE")
    assert not runtime.tuning()
    caplog.set_level(logging.INFO, logger="pydynamo.output_code")
    fn, make = CASES["column sum"]
    seen = []
    _run(fn, make(), monkeypatch, _prefer(1, seen))
    (src,) = [r.args[1] for r in caplog.records if r.name == "pydynamo.output_code"]
    assert ".with_choices(" not in src and seen == []


def test_a_failed_measurement_keeps_the_heuristic_configuration(monkeypatch, caplog):
    fn, make = CASES["column sum"]
    args = make()

    def broken(launch, a):
        raise RuntimeError("no clock")
    got, again = _run(fn, args, monkeypatch, broken)
    torch.testing.assert_close(got, fn(*args), atol=1e-4, rtol=1e-4)
    assert any("not measured" in r.getMessage() for r in caplog.records)
    assert not os.path.exists(os.path.join(runtime.cache_dir(), "tune"))  # nothing remembered


def test_off_under_deterministic_algorithms(monkeypatch, caplog):
    """Configurations sum in different orders and a measurement's winner varies between runs:
    deterministic mode keeps the heuristic's configuration."""
    caplog.set_level(logging.INFO, logger="pydynamo.output_code")
    fn, make = CASES["column sum"]
    seen = []
    torch.use_deterministic_algorithms(True)
    try:
        assert not runtime.tuning()
        _run(fn, make(), monkeypatch, _prefer(1, seen))
    finally:
        torch.use_deterministic_algorithms(False)
    (src,) = [r.args[1] for r in caplog.records if r.name == "pydynamo.output_code"]
    assert ".with_choices(" not in src and seen == []
