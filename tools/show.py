"""Show what pydynamo makes of a function: the captured graphs, the guards, the original and the
transformed bytecode, and the resume functions of graph breaks.

    python tools/show.py path/to/file.py:function_name [--arg "torch.randn(4, 4)"]... [--backend eager]

The function is called once with the given arguments (Python expressions, evaluated with torch
imported) under pydynamo; everything it compiled is then printed.
"""
import argparse
import dis
import importlib.util
import io
import os
import sys

import torch

import pydynamo
from pydynamo import _C


def _load(target):
    path, _, name = target.rpartition(":")
    if not path or not name:
        raise SystemExit(f"expected path/to/file.py:function_name, got {target!r}")
    spec = importlib.util.spec_from_file_location(os.path.splitext(os.path.basename(path))[0], path)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    spec.loader.exec_module(module)
    fn = module
    for part in name.split("."):
        fn = getattr(fn, part)
    return fn


def _disassemble(code):
    out = io.StringIO()
    dis.dis(code, file=out)
    return out.getvalue()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("target", help="path/to/file.py:function_name")
    p.add_argument("--arg", action="append", default=[], help="an argument, as a Python expression")
    p.add_argument("--backend", default="eager")
    a = p.parse_args()
    fn = _load(a.target)
    args = [eval(expr, {"torch": torch}) for expr in a.arg]  # noqa: S307 (a developer tool)
    graphs = []

    def recording(gm, example_inputs):
        graphs.append(gm)
        return pydynamo.lookup_backend(a.backend)(gm, example_inputs)

    seen_codes = []

    class Observer:
        def on_entry(self, code, guards, seconds):
            seen_codes.append((code, seconds))

        def on_break(self, exc):
            print(f"graph break: {exc}\n")

    from pydynamo import convert_frame
    observer = Observer()
    convert_frame.observers.append(observer)
    try:
        result = pydynamo.optimize(recording)(fn)(*args)
    finally:
        convert_frame.observers.remove(observer)
    print(f"result: {type(result).__name__}\n")
    for i, gm in enumerate(graphs, 1):
        print(f"=== graph {i} ===\n{gm.code.strip()}\n")
    for code, seconds in seen_codes:
        for entry in _C.get_cache_entries(code):
            print(f"=== {code.co_qualname} ({code.co_filename}:{code.co_firstlineno}), compiled in "
                  f"{seconds * 1e3:.1f} ms ===")
            print(f"--- guards ---\n{entry.guards}\n")
            print(f"--- original bytecode ---\n{_disassemble(code)}")
            print(f"--- transformed bytecode ---\n{_disassemble(entry.code)}")


if __name__ == "__main__":
    main()
