"""Differential fuzzer: random programs run under pydynamo and under plain Python, compared.

    python tools/fuzz.py --budget 120 [--seed 0] [--backend eager] [--no-soak] [--no-threads]
                         [--save DIR] [--show N] [--only N]

Each program is Python source text written to a real temp file (so inspect and linecache work):
a target (a function, a closure, an nn.Module or a bound method) whose body is a few snippets
from feature families (tensor properties and methods, sizes, scalars, user objects, lists, dicts,
(named)tuples, iterators, builtins, helpers, grad mode / default dtype, exceptions, graph breaks,
modules, module and tensor hooks...; and Python's data model: objects made in the trace,
descriptors, properties, slots, a config class's own __getattribute__, dataclasses, a
ModelOutput-like OrderedDict dataclass, enums, dunder methods, classes as dict keys, sets,
itertools / functools / collections, generators, match, logging; and the classes of soundness part
three: tensor constructors with generated size forms, hasattr/getattr/type on real C objects,
global flags toggled between calls, torch.cond & co. run eagerly, KV caches and optimizer-like
state passed back in), reading state that lives in
globals, an argument dict, an object's attributes, `self`, closure cells or keyword-only
defaults. The program is a list of steps:
calls, with inputs that change one property at a time (dtype, shape, strides, requires_grad,
inference, conj, Parameter), and mutations of that state between them (rebinding, attributes and
keys added / deleted, hooks, submodules, parameters, classes patched: methods, properties,
descriptors, dataclass defaults; default dtype, grad mode).
The source runs twice in fresh namespaces, eagerly and compiled; each call's result or exception,
the state it leaves (watched state, the input, grad mode, default dtype, gradients of the result
with respect to x and the parameters) and which of them are the same object are compared,
exactly for the "eager" backend. Some calls go through the target compiled with a second backend
or with fullgraph=True: every graph logs which compile made it, and one of another compile running
is a wrong result; no call may make a cache entry for a frame outside the programs. Findings: wrong (a result or state differs), raised (compiled
raised where eager did not, or something else), crashed (the worker died or hung). A failing
program is shrunk while it still fails and printed with its steps.
Then a soak (compile / reset cycles with cache hits: RSS and live-object growth, is a deleted
compiled model freed?) and a threaded run (4 threads calling one compiled function on inputs that
recompile it, one calling it with pydynamo off). Workers are subprocesses of this script, so a
segfault is counted; the parent never imports torch. --self-check compiles nothing (the identity):
the harness must then report nothing.

The code is in tools/fuzzlib/: program.py (a program and its source text), families_tensor.py,
families_python.py and families_datamodel.py (the feature families), generate.py (program
number N of a seed), check.py (run, compare, shrink, report), workers.py (the subprocesses),
parent.py (spawning them, counting, printing); this file is the command line and main().
"""
import argparse
import importlib.util
import os
import sys

from fuzzlib import workers
from fuzzlib.generate import gen_program, program_seed
from fuzzlib.parent import run_all


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--budget", type=float, default=60.0, help="seconds in all (programs, soak, threads)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--backend", default="eager")
    p.add_argument("--no-soak", action="store_true")
    p.add_argument("--no-threads", action="store_true")
    p.add_argument("--save", help="write each new finding's minimized program to this directory")
    p.add_argument("--show", type=int, help="print program N of --seed and exit")
    p.add_argument("--only", type=int, help="run only program N of --seed")
    p.add_argument("--minimize-s", type=float, default=20.0, help=argparse.SUPPRESS)
    p.add_argument("--self-check", action="store_true", help=argparse.SUPPRESS)  # compile = identity
    p.add_argument("--worker", choices=["programs", "soak", "threads"], help=argparse.SUPPRESS)
    p.add_argument("--start", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--deadline", type=float, help=argparse.SUPPRESS)
    p.add_argument("--tmp", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv=None):
    a = parse(argv)
    if a.show is not None:
        print(gen_program(program_seed(a.seed, a.show)).source())
        return 0
    if a.worker:
        workers.EMIT_FD = os.dup(1)
        os.dup2(2, 1)  # stray prints go to stderr, the protocol keeps its own fd
        {"programs": workers.worker_programs, "soak": workers.worker_soak,
         "threads": workers.worker_threads}[a.worker](a)
        return 0
    spec = importlib.util.find_spec("pydynamo")  # (not imported: the parent never loads torch)
    if spec is None or spec.origin is None:  # (a namespace package: a stray folder, no package)
        print("tools/fuzz.py: pydynamo is not importable by this Python "
              f"({sys.executable}); install it first (pip install -e . in the repository root)",
              file=sys.stderr)
        return 2
    t = run_all(a)
    return int(any(t[k] for k in ("wrong", "raised", "crashed", "threads_wrong", "soak_findings")))


if __name__ == "__main__":
    sys.exit(main())
