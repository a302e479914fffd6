"""The differential fuzzer's code; tools/fuzz.py is its entry point (command line, main). program:
a generated program as data and its source text (prelude, state variables, snippets, steps, the
target's form). families_tensor, families_python, families_datamodel: the feature families that
fill a program's snippets (tensors, modes, graph breaks, modules, hooks, NumPy; scalars,
user objects, containers, iterators, builtins, exceptions, helpers; Python's data model and
standard library). generate: the family table and program number N of a seed. check: running a
program eagerly and compiled in one process, comparing, shrinking and reporting. workers: the
subprocesses (programs, soak, threads). parent: the parent process that spawns them, counts and
prints (it never imports torch).
"""
