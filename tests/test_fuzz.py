"""A small-budget run of tools/fuzz.py, the differential fuzzer: random programs (functions,
closures, modules, methods over globals, objects, containers, iterators, exceptions...) called
while the state they read is mutated, each call compared with plain Python; then a soak of
compile / reset cycles and a threaded run. Fixed seeds, so the programs are the same every run.
The workers and their temp files live in subprocesses and temp dirs the fuzzer removes."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "tools"))

import fuzz  # noqa: E402


def run(*argv):
    return fuzz.run_all(fuzz.parse(list(argv)))


def test_harness_self_check():
    """With compilation replaced by the identity the harness must find nothing: it compares like
    with like, the programs and inputs are deterministic, and the soak sees no growth."""
    t = run("--budget", "6", "--seed", "7", "--self-check")
    assert (t["wrong"], t["raised"], t["crashed"], t["threads_wrong"], t["soak_findings"]) == (0, 0, 0, 0, 0)
    # a loaded CI machine is slow, and a program calling torch.cond eagerly pays for torch.compile
    assert t["programs"] >= 5 and t["calls"] >= 25 and t["threads_calls"] > 0


def test_fuzz_small_budget():
    t = run("--budget", "24", "--seed", "0")
    assert t["programs"] >= 10 and t["calls"] >= 50, t
    assert t["threads_calls"] > 0 and t["soak"]["measured_cycles"] >= 3
    assert t["soak"]["model"] == "freed"
    assert (t["wrong"], t["raised"], t["crashed"], t["threads_wrong"]) == (0, 0, 0, 0), \
        "the fuzzer found programs where pydynamo differs from eager Python (reproducers above)"
