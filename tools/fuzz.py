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
itertools / functools / collections, generators, match, logging), reading state that lives in
globals, an argument dict, an object's attributes, `self`, closure cells or keyword-only
defaults. The program is a list of steps:
calls, with inputs that change one property at a time (dtype, shape, strides, requires_grad,
inference, conj, Parameter), and mutations of that state between them (rebinding, attributes and
keys added / deleted, hooks, submodules, parameters, classes patched: methods, properties,
descriptors, dataclass defaults; default dtype, grad mode).
The source runs twice in fresh namespaces, eagerly and compiled; each call's result or exception,
the state it leaves (watched state, the input, grad mode, default dtype, gradients of the result
with respect to x and the parameters) and which of them are the same object are compared,
exactly for the "eager" backend. Findings: wrong (a result or state differs), raised (compiled
raised where eager did not, or something else), crashed (the worker died or hung). A failing
program is shrunk while it still fails and printed with its steps.
Then a soak (compile / reset cycles with cache hits: RSS and live-object growth, is a deleted
compiled model freed?) and a threaded run (4 threads calling one compiled function on inputs that
recompile it, one calling it with pydynamo off). Workers are subprocesses of this script, so a
segfault is counted; the parent never imports torch. --self-check compiles nothing (the identity):
the harness must then report nothing.
"""
import argparse
import collections
import contextlib
import dataclasses
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import threading
import time

# ---------------------------------------------------------------- program text ----------------

MK_SRC = '''

def mk(shape, dtype, seed, layout="contig", rg=False, inf=False, conj=False, param=False):
    g = torch.Generator().manual_seed(seed)
    dt = getattr(torch, dtype)
    size = list(shape)
    if layout == "t":
        size = size[::-1]
    elif layout == "slice":
        size[-1] *= 2
    with torch.inference_mode(inf):
        t = torch.randn(size, generator=g, dtype=torch.float64) * 3
        if dt.is_complex:
            t = torch.complex(t, torch.randn(size, generator=g, dtype=torch.float64))
        t = (t > 0) if dt == torch.bool else t.to(dt)
        t.requires_grad_(rg)
        if layout == "t":
            t = t.transpose(0, -1)
        elif layout == "slice":
            t = t[..., ::2]
        elif layout == "cl" and t.dim() == 4:
            t = t.contiguous(memory_format=torch.channels_last)
        t = torch.nn.Parameter(t, requires_grad=rg) if param else t
        return t.conj() if conj else t
'''
PRELUDE = '''import collections
import contextlib
import copy
import dataclasses
import enum
import functools
import itertools
import logging
import operator
import typing
import warnings

import numpy as np
import torch

MISSING = "<missing>"
HOOKS = []
''' + MK_SRC + '''

class Holder:
    pass


class Base:
    def extra(self, t):
        return t + 1


H = Holder()
A = {}
'''


@dataclasses.dataclass
class Var:
    """A piece of state a program reads, and where it lives."""
    name: str
    where: str  # global | arg | attr | self | cell | kwdefault (of the target's function)
    init: str
    inst: str = "m"  # the instance `self` is, for where == "self"
    fn: str = "fn"  # the target's function, for where == "kwdefault"

    @property
    def ref(self):  # in the target's body
        n = self.name
        return {"global": n, "arg": f"c[{n!r}]", "attr": f"H.{n}", "self": f"self.{n}", "cell": n,
                "kwdefault": n}[self.where]

    @property
    def path(self):  # in a step (module level)
        n = self.name
        return {"global": n, "arg": f"A[{n!r}]", "attr": f"H.{n}", "self": f"{self.inst}.{n}",
                "cell": f"GET[{n!r}]()", "kwdefault": f"{self.fn}.__kwdefaults__[{n!r}]"}[self.where]

    @property
    def watch(self):
        n = self.name
        return {"global": f"globals().get({n!r}, MISSING)", "arg": f"A.get({n!r}, MISSING)",
                "attr": f"getattr(H, {n!r}, MISSING)", "self": f"getattr({self.inst}, {n!r}, MISSING)",
                "cell": f"GET[{n!r}]()", "kwdefault": self.path}[self.where]

    def delete(self):
        return {"global": f"globals().pop({self.name!r}, None)", "attr": f"H.__dict__.pop({self.name!r}, None)",
                "arg": f"A.pop({self.name!r}, None)"}.get(self.where)

    def rebind(self, value):
        return f"SET[{self.name!r}]({value})" if self.where == "cell" else f"{self.path} = {value}"


@dataclasses.dataclass
class Snip:
    uid: int
    family: str
    setup: str = ""
    var: Var = None
    pieces: list = dataclasses.field(default_factory=list)  # (template id, text, decls)
    muts: list = dataclasses.field(default_factory=list)
    watch: list = dataclasses.field(default_factory=list)  # more state to compare after each call

    def sub(self, t):
        t = t.replace("$i", str(self.uid))
        return t.replace("$v", self.var.ref).replace("$p", self.var.path) if self.var else t

    def add(self, tid, template):
        decls = set()
        if self.var and re.search(r"^\s*\$v\s*(=|\+=)", template, re.M):
            if self.var.where in ("global", "cell"):
                decls.add(("global " if self.var.where == "global" else "nonlocal ") + self.var.name)
        self.pieces.append((f"{self.family}.{tid}", self.sub(template), frozenset(decls)))

    def mut(self, *templates):
        self.muts += [self.sub(t) for t in templates]


@dataclasses.dataclass
class Step:
    kind: str  # call | mut
    code: str
    owner: int = None  # the snippet a mutation belongs to
    ctx: str = None  # a call's form: None, "no_grad" (under torch.no_grad()) or "kw" (n and c by keyword)


@dataclasses.dataclass
class Program:
    kind: str  # function | closure | module | method
    snips: list
    steps: list
    ret: str = "out"  # what the target returns
    hoist: bool = True  # `r = e; out.append(r)` rather than `out.append(e)` (a break inside the latter,
    #                     with `out` both a local and on the stack, makes the whole frame run eagerly)

    def source(self):
        inst = {"module": "m", "method": "r"}.get(self.kind)
        vs = [s.var for s in self.snips if s.var]
        out = [PRELUDE] + [s.setup + "\n" for s in self.snips if s.setup]
        glob = {"global": "{n} = {i}", "arg": "A[{n!r}] = {i}", "attr": "H.{n} = {i}"}
        out += [glob[v.where].format(n=v.name, i=v.init) for v in vs if v.where in glob]
        decls = sorted({d for s in self.snips for _, _, ds in s.pieces for d in ds})
        body = decls + ["out = []"] + [t for s in self.snips for _, t, _ in s.pieces] + ["return $RET"]
        body = "\n".join(body).replace("$RET", self.ret)
        if self.hoist:
            body = re.sub(r"^( *)out\.append\((.*)\)$", r"\1r = \2\n\1out.append(r)", body, flags=re.M)
        inits = "\n".join(f"self.{v.name} = {v.init}" for v in vs if v.where == "self")
        params = "x, n, c" + "".join(f", *, {v.name}={v.init}" if k == 0 else f", {v.name}={v.init}"
                                     for k, v in enumerate(v for v in vs if v.where == "kwdefault"))
        if self.kind == "function":
            out.append(f"\n\ndef fn({params}):\n{ind(body)}\n\n\nTARGET = fn")
        elif self.kind == "closure":
            cells = [v for v in vs if v.where == "cell"]
            lines = [f"{v.name} = {v.init}" for v in cells] + [f"def fn({params}):\n{ind(body)}", "GET, SET = {}, {}"]
            for v in cells:
                lines += [f"GET[{v.name!r}] = lambda: {v.name}",
                          f"def _set_{v.name}(value):\n    nonlocal {v.name}\n    {v.name} = value",
                          f"SET[{v.name!r}] = _set_{v.name}"]
            lines.append("return fn, GET, SET")
            out.append("\n\ndef make():\n" + ind("\n".join(lines)) + "\n\n\nfn, GET, SET = make()\nTARGET = fn")
        elif self.kind == "module":
            init = ("super().__init__()\nself.lin = torch.nn.Linear(4, 4)\n"
                    "self.layers = torch.nn.ModuleList([torch.nn.Linear(4, 4)])\n"
                    "self.register_buffer('buf', torch.zeros(4))\nself.bn = torch.nn.BatchNorm1d(4)\n" + inits)
            out.append(f"\n\nclass M(Base, torch.nn.Module):\n    def __init__(self):\n{ind(init, 8)}\n\n"
                       f"    def extra(self, t):\n        return super().extra(t) * 2\n\n"
                       f"    def forward(self, {params}):\n{ind(body, 8)}\n\n\nm = M()\nTARGET = m")
        else:
            out.append(f"\n\nclass Runner(Base):\n    def __init__(self):\n{ind(inits or 'pass', 8)}\n\n"
                       f"    def run(self, {params}):\n{ind(body, 8)}\n\n\nr = Runner()\nTARGET = r.run")
        watch = [v.watch for v in vs] + [w for s in self.snips for w in s.watch]
        watch += ["m.training", "m.buf", "type(m.lin).__name__", "m.bn.running_mean", "m.bn.num_batches_tracked"] \
            if inst == "m" else []
        out.append("\n\ndef _watch():\n    return [" + ", ".join(watch) + "]\n")
        gdecl = "global " + ", ".join(v.name for v in vs if v.where == "global") + "\n"
        gdecl = gdecl if any(v.where == "global" for v in vs) else ""
        for k, st in enumerate(self.steps):
            code = "return " + st.code if st.kind == "call" else gdecl + st.code
            out.append(f"\ndef _s{k}():\n" + ind(code) + "\n")
        out.append("\nSTEPS = [" + ", ".join(f"({s.kind!r}, _s{k}, {s.ctx!r})" for k, s in enumerate(self.steps))
                   + "]\n")
        return "\n".join(out)

    def replace(self, **kw):
        return dataclasses.replace(self, **kw)


def ind(text, n=4):
    return "\n".join(" " * n + line if line else line for line in text.split("\n"))


# ---------------------------------------------------------------- feature families ------------
# Each takes (rng, snip, place) and fills the snippet: setup text, a Var, body pieces, mutations.
# Body pieces see x (a tensor), n (a Python scalar), c (the argument dict A) and `out` (the result).

def pick(rng, snip, templates, k=(1, 3)):
    for tid in sorted(rng.sample(range(len(templates)), min(len(templates), rng.randint(*k)))):
        snip.add(tid, templates[tid])


def fam_tensor(rng, s, place):
    pick(rng, s, [
        "if x.dtype == torch.float64:\n    x = x * 2\nelif x.dtype.is_floating_point:\n    x = x + 1\n"
        "out.append(x.dtype)",
        "out.append(x.ndim)\nif x.ndim == 2:\n    out.append(x.t() * 2)",
        "out.append(x.size(dim=-1))\nout.append(x.size(0))",
        "out.append(tuple(x.shape))\nif x.shape[0] == 2:\n    x = x + 3",
        "out.append(x.stride())\nif x.stride(-1) != 1:\n    out.append('strided')",
        "if x.requires_grad:\n    out.append(x * 2)\nelse:\n    out.append(x + 2)",
        "if x.is_inference():\n    out.append('inference')\n    x = x.clone()\nout.append(x.is_inference())",
        "if x.is_conj():\n    out.append(x.resolve_conj() + 1)\nelse:\n    out.append(x.is_complex())",
        "if x.is_contiguous():\n    out.append(x.view(-1)[:3])\nelse:\n    out.append(x.reshape(-1)[:3])",
        "if x.device.type == 'cpu':\n    out.append(str(x.device))",
        "out.append(x.numel() + x.dim() + len(x))",
        "out.append(x.is_floating_point())\nout.append(x.is_leaf)\nout.append(x.grad_fn is None)",
        "if x.layout == torch.strided and x.element_size() > 2:\n    x = x * 1",
        "out.append(torch.zeros_like(x).dtype)\nout.append(x.new_ones(2))",
        "if x.dtype in (torch.int64, torch.bool):\n    out.append(x.sum())\nelse:\n    out.append(x.sum(0))",
        "out.append(x.size())\nout.append(x.shape[-1] * n)",
        "out.append(x.transpose(0, -1).is_contiguous())\nout.append(x.stride(dim=0))",
        "out.append(x.requires_grad)\nout.append(x.is_conj())\nout.append(x.is_neg())",
    ])


def fam_scalar(rng, s, place):
    s.var = place(rng.choice(["2", "3", "1", "0", "2.5"]))
    pick(rng, s, [
        "if $v > 1:\n    x = x * $v\nelse:\n    x = x + $v * 3",
        "for i in range($v):\n    x = x + i",
        "out.append($v * n)\nout.append(n // 2)",
        "if n % 2:\n    x = x + n\nout.append(n > $v)",
        "out.append(type($v))\nout.append(isinstance($v, int))",
        "$v = $v + 1",
        "out.append($v if $v else -1)",
    ])
    for value in rng.sample(["0", "1", "3", "2.5", "True", "-1", "None"], 3):
        s.mut(s.var.rebind(value))


def fam_object(rng, s, place):
    s.setup = ("class Obj$i:\n    k = 2\n\n    def __init__(self):\n        self.a = 1\n\n"
               "    def scale(self, t):\n        return t * self.k\n\n\nclass Sub$i(Obj$i):\n    k = 7\n"
               ).replace("$i", str(s.uid))
    s.var = place("Obj$i()".replace("$i", str(s.uid)))
    pick(rng, s, [
        "if getattr($v, 'flag', False):\n    x = x + 1\nelse:\n    x = x * 3",
        "out.append(getattr($v, 'a', -1))",
        "if hasattr($v, 'b'):\n    out.append($v.b * 2)",
        "out.append($v.scale(x))",
        "$v.calls = getattr($v, 'calls', 0) + 1",
        "$v.last = n",
        "out.append('a' in $v.__dict__)",
        "if isinstance($v, Obj$i):\n    out.append(type($v).k)",
        "out.append(getattr($v, 'k'))",
    ])
    s.mut("$p.flag = True", "$p.flag = False", "$p.a = 5", "if 'flag' in vars($p):\n    del $p.flag",
          "$p.b = 2.5", "if 'a' in vars($p):\n    del $p.a", "$p.k = 3", "Obj$i.k = 5", "Obj$i.flag = True",
          "$p.__class__ = Sub$i", "$p.__class__ = Obj$i",
          s.var.rebind("Obj$i()".replace("$i", str(s.uid))))


LIST_MUTS = ["$p.append(7)", "if $p:\n    $p.pop()", "$p.insert(0, 2)", "$p.clear()", "if $p:\n    $p[0] = 9"]


def fam_list(rng, s, place):
    s.setup = ("class Tens$i(list):\n    def append(self, v):\n        super().append(v * 10)\n\n"
               "    def __len__(self):\n        return super().__len__() + 100\n").replace("$i", str(s.uid))
    s.var = place(rng.choice(["[1, 2, 3]", "[3, 1]", "[]", "[1.5, 2]", f"Tens{s.uid}([1, 2])"]))
    pick(rng, s, [
        "out.append(len($v))\nif len($v) > 2:\n    x = x + $v[2]",
        "try:\n    out.append($v[3])\nexcept IndexError as e:\n    out.append(('IE', str(e)))",
        "try:\n    out.append($v.index(2))\nexcept ValueError as e:\n    out.append(('VE', str(e)))",
        "if 2 in $v:\n    x = x * 2",
        "$v.append(n)",
        "out.append(sum($v))",
        "for e in $v:\n    x = x + e",
        "out.append($v[:2])\nout.append(list($v))",
        "out.append($v[-1])",
        "if $v:\n    out.append($v[0])",
        "out.append($v.count(1))",
        "out.append($v[n:])\nout.append($v[::-1])",
    ])
    s.mut(*LIST_MUTS, s.var.rebind("[4, 2]"), s.var.rebind("(1, 2, 3)"))


def fam_dict(rng, s, place):
    s.setup = "class Dflt$i(dict):\n    def __missing__(self, key):\n        return -1\n".replace("$i", str(s.uid))
    s.var = place(rng.choice(["{'k': 1, 'j': 2}", "{'j': 2}", "{}", "collections.OrderedDict(k=1, j=2)",
                              "collections.defaultdict(int, k=1)", f"Dflt{s.uid}(j=2)"]))
    pick(rng, s, [
        "if 'k' in $v:\n    x = x + $v['k']",
        "out.append($v.get('k', 0))\nout.append($v.get('z'))",
        "try:\n    out.append($v['z'])\nexcept KeyError as e:\n    out.append(('KE', str(e)))",
        "out.append(sorted($v))\nout.append(len($v))",
        "out.append(list($v.items()))",
        "$v['seen'] = n",
        "out.append($v.pop('j', None))",
        "for k in $v:\n    out.append(k)",
        "out.append($v['k'])",
        "if $v.get('k') is None:\n    out.append('nok')",
        "out.append(list($v.keys()) == ['k', 'j'])",
        "if isinstance($v, collections.defaultdict):\n    out.append($v['m' + str(n)])",
        "out.append($v.setdefault('s', n))\nout.append(dict($v))",
        "$v.update(q=n)\nout.append(list($v.values()))",
        "out.append({**$v, 'k': -1})",
    ])
    s.mut("$p.update({'k': $p.pop('k', 0)})", "$p.setdefault('j', 7)", "$p[1] = 'int key'",
          "$p['z'] = 3", "$p.pop('k', None)", "$p['k'] = 2.5", "$p.clear()", "$p['j'] = 4",
          s.var.rebind("{'k': 5}"), s.var.rebind("{'z': 1, 'k': 0}"))


def fam_namedtuple(rng, s, place):
    s.setup = ("P$i = collections.namedtuple('P$i', ['a', 'b'])\n\n\nclass Q$i(P$i):\n"
               "    def __add__(self, other):\n        return Q$i(self.a + other[0], self.b + other[1])\n\n"
               "    @property\n    def total(self):\n        return self.a + self.b\n").replace("$i", str(s.uid))
    s.var = place(rng.choice(["P$i(1, 2)", "Q$i(2, 3)", "(1, 2)"]).replace("$i", str(s.uid)))
    pick(rng, s, [
        "out.append($v[0] + $v[1])\nx = x * $v[1]",
        "out.append(hasattr($v, 'a'))\nout.append(hasattr($v, 'total'))",
        "if hasattr($v, 'b'):\n    out.append($v.b)",
        "out.append($v + $v)",
        "out.append(type($v))\nout.append(isinstance($v, tuple))",
        "a, b = $v\nx = x + (a - b)",
        "out.append(getattr($v, '_fields', None))",
        "out.append(getattr($v, 'total', -1))",
        "try:\n    out.append($v[2])\nexcept IndexError as e:\n    out.append(('IE', str(e)))",
        "out.append($v.index(2) if 2 in $v else -1)",
        "if isinstance($v, P$i):\n    out.append($v._replace(a=n))",
        "out.append(tuple($v))\nout.append(len($v))",
    ])
    for value in ["P$i(3, 4)", "Q$i(1, 5)", "(1, 2)", "(2, 1)"]:
        s.mut(s.var.rebind(value.replace("$i", str(s.uid))))


def fam_iter(rng, s, place):
    s.var = place(rng.choice(["[1, 2, 3]", "(1, 2)", "[2]"]))
    pick(rng, s, [
        "it = iter($v)\nout.append(type(it).__name__)\nout.append(next(it, None))",
        "it = iter(range(n + 1))\nout.append(type(it) is type(iter(range(0))))\nx = x + sum(it)",
        "for i, e in enumerate($v):\n    x = x + i * e",
        "for a, b in zip($v, range(3)):\n    out.append(a * b)",
        "out.append(list(map(lambda e: e * 2, $v)))",
        "out.append(list(reversed($v)))\nout.append(type(reversed($v)).__name__)",
        "it = zip($v, $v)\nout.append(type(it) is zip)\nout.append(list(it))",
        "it = enumerate($v)\nout.append(isinstance(it, enumerate))\nout.append(next(it, None))",
        "it = map(str, $v)\nout.append(type(it).__name__)\nout.append(list(it))",
        "it = iter($v)\ntry:\n    while True:\n        x = x + next(it)\nexcept StopIteration:\n    out.append('done')",
        "d = {'a': 1, 'b': n}\nit = iter(d)\nout.append(type(it).__name__)\nout.append(list(it))",
        "out.append(type(iter({}.values())).__name__)\nout.append(type(iter({'q': 1}.items())).__name__)",
        "out.append([type(i).__name__ for i in (iter([]), iter(()), iter(range(2)), iter({}), iter(''))])",
        "it = iter($v)\nfor e in it:\n    if e > 1:\n        break\nout.append(list(it))",
    ])
    s.mut(*LIST_MUTS[:3], s.var.rebind("(5, 1)"), s.var.rebind("[0, 2, 4, 1]"))


def fam_modes(rng, s, place):
    pick(rng, s, [
        "if torch.is_grad_enabled():\n    out.append(x * 2)\nelse:\n    out.append(x * 3)",
        "out.append(torch.ones(2))\nout.append(torch.get_default_dtype())",
        "if torch.get_default_dtype() == torch.float64:\n    x = x + 1",
        "out.append(torch.tensor([1.5, n]))",
        "out.append(torch.arange(3) * 1.5)",
        "with torch.no_grad():\n    out.append(x * 2)",
        "with torch.enable_grad():\n    out.append(x + 1)",
        "out.append(torch.zeros(2, dtype=x.dtype) + x.reshape(-1)[:2])",
        "torch.set_grad_enabled(False)\nout.append(x * 2)\ntorch.set_grad_enabled(True)",
        "with torch.set_grad_enabled(n > 1):\n    out.append(x + 1)",
        "with torch.inference_mode():\n    y = x * 2\nout.append(y.is_inference())\nout.append(y)",
        "prev = torch.get_default_dtype()\ntorch.set_default_dtype(torch.float64)\nout.append(torch.ones(1))\n"
        "torch.set_default_dtype(prev)",
        "out.append(torch.full((2,), n))\nout.append(torch.tensor(n).dtype)",
        "out.append(x * n)",
        "out.append(torch.rand(2))\nout.append(torch.randint(0, 9, (2,)))",
    ])
    s.mut("torch.set_default_dtype(torch.float64)", "torch.set_default_dtype(torch.float32)",
          "torch.set_grad_enabled(False)", "torch.set_grad_enabled(True)")


def fam_raise(rng, s, place):
    s.var = place(rng.choice(["1", "2", "4"]))
    pick(rng, s, [
        "if $v > 3:\n    raise ValueError('too big: %r' % ($v,))",
        "assert n != 3, 'n is three'",
        "if not x.is_contiguous():\n    raise RuntimeError('non-contiguous input')",
        "if x.dtype == torch.bool:\n    raise TypeError('bool input')",
        "try:\n    raise KeyError(n)\nexcept KeyError as e:\n    out.append(repr(e))",
        "try:\n    if n > 1:\n        raise ValueError('n=%d' % n)\n    x = x + 1\nexcept ValueError as e:\n"
        "    out.append(str(e))\nfinally:\n    out.append('finally')",
        "try:\n    out.append([1, 2][n])\nexcept IndexError:\n    out.append('IE')",
        "try:\n    out.append({'a': 1}['b'])\nexcept KeyError as e:\n    out.append(str(e))",
        "try:\n    out.append([4, 5].index(n))\nexcept ValueError as e:\n    out.append(str(e))",
        "try:\n    out.append($v['k'])\nexcept TypeError as e:\n    out.append(str(e))",
    ])
    for value in ["5", "0", "3"]:
        s.mut(s.var.rebind(value))


def fam_break(rng, s, place):
    s.setup = "def helper$i(t, k):\n    if k > 1:\n        return t * k\n    return t + 1\n".replace("$i", str(s.uid))
    pick(rng, s, [
        "if (x != 0).sum() > 2:\n    x = x + 1\nelse:\n    x = x * 2",
        "out.append(int((x != 0).sum()))",
        "out.append(helper$i(x, n))",
        "out.append(x.reshape(-1)[0].item())",
        "out.append(x.tolist())",
        "out.append(x[x != 0].shape)\nout.append(torch.nonzero(x).shape[0])",
    ], (1, 2))


def fam_module(rng, s, place):  # module targets only; M always has lin, layers, buf
    pick(rng, s, [
        "h = x.reshape(-1)[:4]\nif h.is_complex():\n    h = h.real\nw = getattr(self.lin, 'weight', None)\n"
        "h = self.lin(h.clone().to(w.dtype if w is not None else torch.get_default_dtype()))\nout.append(h)",
        "if self.training:\n    x = x * 2\nelse:\n    out.append('eval')",
        "h = x.reshape(-1)[:4]\nh = (h.real if h.is_complex() else h).clone().to(self.bn.weight.dtype)\n"
        "out.append(self.bn(torch.stack([h, h * 2])))",
        "out.append(self.lin.training)\nout.append(type(self.lin).__name__)",
        "for layer in self.layers:\n    out.append(type(layer).__name__)",
        "if self.buf is not None:\n    out.append(self.buf + 1)",
        "if self.buf is not None:\n    self.buf.add_(1)",
        "out.append(sum(p.numel() for p in self.parameters()))",
        "out.append(hasattr(self, 'extra'))",
        "h = torch.ones(4)\nfor layer in self.layers[:2]:\n    h = layer(h)\nout.append(h)",
        "out.append(len(self.layers[1:]))\nout.append(type(self.layers[-1:]).__name__)\n"
        "out.append([type(mod).__name__ for mod in self.layers[:int(n)]])",
        "if x.is_floating_point():\n    out.append(torch.finfo(x.dtype).min)\n"
        "    out.append(x.masked_fill(x > 0, torch.finfo(x.dtype).min))",
    ])
    s.mut("m.train(False)", "m.train(True)", "m.lin = torch.nn.Linear(4, 4)",
          "m.lin = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())", "m.lin = torch.nn.Identity()",
          "if hasattr(m.lin, 'weight'):\n    m.lin.weight = torch.nn.Parameter(torch.ones(4, 4))",
          "if hasattr(m.lin, 'bias'):\n    m.lin.bias = None",
          "if hasattr(m.lin, 'weight'):\n    m.lin.weight.requires_grad_(False)",
          "with torch.no_grad():\n    for p in m.parameters():\n        p.mul_(2)",
          "HOOKS.append(m.register_forward_hook(lambda mod, inp, o: (o, 'hook')))",
          "HOOKS.append(m.lin.register_forward_hook(lambda mod, inp, o: o * 2))",
          "HOOKS.append(m.lin.register_forward_pre_hook(lambda mod, inp: (inp[0] + 1,)))",
          "HOOKS.append(m.register_forward_pre_hook(lambda mod, args: (args[0] * 2,) + args[1:]))",
          "if HOOKS:\n    HOOKS.pop().remove()", "m.buf = torch.ones(4)", "m.buf = None",
          "m.layers.append(torch.nn.Linear(4, 4))", "m.extra = 1", "if hasattr(m, 'extra'):\n    del m.extra",
          "m.bn.momentum = 0.5", "m.bn.track_running_stats = False", "m.bn.eval()",
          "m.layers.append(torch.nn.ReLU())", "m.layers.insert(0, torch.nn.Identity())",
          "if len(m.layers):\n    del m.layers[0]", "if len(m.layers):\n    m.layers[0] = torch.nn.ReLU()",
          "m.layers.extend([torch.nn.Linear(4, 4)])",
          "m.layers = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Tanh())")


def fam_tmethods(rng, s, place):
    pick(rng, s, [
        "out.append(x.sum(dim=0, keepdim=True))",
        "out.append(torch.flatten(x, start_dim=0)[:2])\nout.append(x.reshape(shape=(-1,))[:2])",
        "out.append(x.transpose(dim0=0, dim1=-1).shape)\nout.append(x.movedim(0, -1).stride())",
        "out.append(x.new_zeros(size=(2,)))\nout.append(x.to(dtype=torch.float64).dtype)",
        "out.append(x.is_contiguous(memory_format=torch.contiguous_format))\nout.append(x.storage_offset())",
        "out.append(x.dtype.itemsize)\nout.append(x.dtype.is_complex)\nout.append(x.dtype.is_signed)",
        "out.append(torch.is_tensor(x))\nout.append(torch.is_floating_point(x))\nout.append(torch.is_complex(x))",
        "out.append(x.nelement())\nout.append(x.shape == (2, 3))\nout.append(x.size() == torch.Size([2, 3]))",
        "out.append(x.real.shape if x.is_complex() else x.shape)\nout.append(x.grad)",
        "out.append(x.unflatten(0, (1, -1)).shape)\nout.append(x.expand(2, *x.shape).shape)",
        "out.append(x.split(1, dim=0)[0].shape)\nout.append(len(x.unbind(0)))",
        "out.append(torch.result_type(x, 2.5))\nout.append(x.flip(0))",
        "out.append(x.contiguous().stride())\nout.append(x.element_size() * x.numel())",
        "out.append(x.size(-1) if x.dim() > 1 else x.size(dim=0))\nout.append(x.shape[1:])",
    ])


def fam_tstate(rng, s, place):
    s.var = place(rng.choice(["torch.ones(3)", "torch.arange(4.0)", "torch.zeros(2, 2)"]))
    pick(rng, s, [
        "x = x + $v.sum()",
        "out.append($v * 2)",
        "if $v.dtype == torch.float64:\n    out.append('f64')\nout.append($v.shape)",
        "if not $v.requires_grad:\n    $v.add_(1)",
        "out.append($v.reshape(-1)[0] * n)",
        "if $v.requires_grad:\n    out.append($v.sum() * 2)",
        "if $v.is_contiguous():\n    out.append($v.view(-1))",
    ])
    s.mut("with torch.no_grad():\n    $p.add_(1)", s.var.rebind("torch.ones(3, dtype=torch.float64)"),
          s.var.rebind("torch.zeros(5)"), s.var.rebind("torch.ones(3).requires_grad_()"),
          s.var.rebind("torch.ones(6)[::2]"), s.var.rebind("torch.ones(2, 3).t()"))


def fam_inplace(rng, s, place):
    pick(rng, s, [
        "if x.dtype != torch.bool and not x.requires_grad and not x.is_inference():\n    x.mul_(2)",
        "if x.is_floating_point() and not x.requires_grad and not x.is_inference():\n    x[0] = 7",
        "y = x.detach()\nif y.dtype != torch.bool and not y.is_inference():\n    y.add_(1)\nout.append(y._version > 0)",
        "if x.dtype != torch.bool and not x.requires_grad and not x.is_inference():\n    x.reshape(-1)[:2].zero_()",
    ], (1, 2))


def fam_builtins(rng, s, place):
    pick(rng, s, [
        "out.append(min(n, 2))\nout.append(max([n, 1, 3]))\nout.append(abs(-n))",
        "out.append(sorted([3, n, 1], reverse=True))\nout.append(sorted({'b': 1, 'a': n}, key=str))",
        "out.append(any(e > 2 for e in [n, 1]))\nout.append(all([n, 1]))",
        "out.append(divmod(7, n) if n else None)\nout.append(round(n))",
        "out.append(f'{n}:{x.shape[0]}')\nout.append('-'.join(str(d) for d in x.shape))",
        "out.append([i * 2 for i in range(3) if i != n])\nout.append({k: k * 2 for k in 'ab'})",
        "out.append(dict(zip('ab', [n, 2])))\nout.append(isinstance(x, torch.Tensor))",
        "first, *rest = [n, 1, 2]\nout.append(rest)\nout.append(sum([1, 2], n))",
        "if (mm := n * 2) > 3:\n    out.append(mm)",
        "if 0 < n <= 2:\n    x = x + 1",
        "if n == 0:\n    return $RET",
        "out.append(list(range(5))[::-2])\nout.append(set([n, 1, n]) == {1, n})",
        "out.append(type(n).__name__)\nout.append(int(n) + float(n))",
        "out.append(bool(x.shape))\nout.append(x.shape[0] if n > 1 else x.shape[-1])",
    ])


def fam_dunder(rng, s, place):
    s.setup = ("class Bag$i:\n    def __init__(self, items):\n        self.items = list(items)\n\n"
               "    def __len__(self):\n        return len(self.items)\n\n"
               "    def __contains__(self, v):\n        return v in self.items\n\n"
               "    def __getitem__(self, k):\n        return self.items[k]\n\n"
               "    def __iter__(self):\n        return iter(self.items)\n\n"
               "    def __getattr__(self, name):\n        if name.startswith('dyn_'):\n            return len(name)\n"
               "        raise AttributeError(name)\n\n"
               "    def __eq__(self, other):\n        return isinstance(other, Bag$i) and self.items == other.items\n\n"
               "    @property\n    def first(self):\n        return self.items[0] if self.items else None\n"
               ).replace("$i", str(s.uid))
    s.var = place(f"Bag{s.uid}([1, 2])")
    pick(rng, s, [
        "out.append(len($v))\nif $v:\n    x = x + $v[0]",
        "if 2 in $v:\n    out.append('has2')",
        "for e in $v:\n    x = x * e",
        "out.append($v.first)",
        "out.append(getattr($v, 'dyn_abc', None))\nout.append(hasattr($v, 'nope'))",
        "out.append($v == Bag$i([1, 2]))\nout.append(list($v))",
        "$v.items.append(n)",
    ])
    s.mut("$p.items.append(3)", "$p.items.clear()", "$p.items = [5]", s.var.rebind(f"Bag{s.uid}([])"),
          "Bag$i.first = property(lambda self: -1)", "$p.dyn_x = 1")


def fam_helper(rng, s, place):
    s.setup = ("def h$i(t, k=2, *rest, scale=1, **kw):\n    return t * k * scale + len(rest) + len(kw)\n\n\n"
               "def gen$i(k):\n    for j in range(k):\n        yield j * 2\n\n\n"
               "def outer$i(k):\n    def inner(t):\n        return t + k\n    return inner\n\n\n"
               "@torch.no_grad()\ndef ng$i(t):\n    return t * 2\n").replace("$i", str(s.uid))
    s.var = place(rng.choice(["lambda t: t + 1", f"h{s.uid}", f"outer{s.uid}(2)"]))
    pick(rng, s, [
        "out.append(h$i(x))\nout.append(h$i(x, 3, 4, scale=n))",
        "out.append(h$i(x, *[1, 2], **{'scale': 2, 'z': 1}))",
        "out.append(list(gen$i(n)))\nx = x + sum(gen$i(3))",
        "out.append(outer$i(n)(x))",
        "f = lambda t, k=n: t * k\nout.append(f(x))",
        "fs = [lambda t, j=j: t + j for j in range(2)]\nout.append([f(x) for f in fs])",
        "out.append(functools.partial(h$i, scale=3)(x))\nout.append(operator.itemgetter(0)([n, 2]))",
        "out.append($v(x))",
        "y = ng$i(x)\nout.append(y.requires_grad)\nout.append(torch.is_grad_enabled())",
    ])
    s.mut(s.var.rebind("lambda t: t * 3"), s.var.rebind(f"outer{s.uid}(5)"), s.var.rebind(f"h{s.uid}"))


def fam_alias(rng, s, place):
    s.setup = f"shared{s.uid} = [1, 2]\n"
    s.var = place(f"shared{s.uid}")
    s.watch.append(f"shared{s.uid}")
    pick(rng, s, [
        "shared$i.append(n)\nout.append(len($v))",
        "out.append($v is shared$i)",
        "$v.append(1)\nout.append(shared$i[-1])",
        "if len(shared$i) > 3:\n    x = x + 1",
    ])
    s.mut("shared$i.append(3)", s.var.rebind("[9]"), s.var.rebind(f"shared{s.uid}"), "$p.clear()")


def fam_exc(rng, s, place):
    s.setup = ("class Err$i(Exception):\n    def __init__(self, code):\n        super().__init__(f'code {code}')\n"
               "        self.code = code\n\n\ndef thrower$i(k):\n    if k > 1:\n        raise Err$i(k)\n    return k\n"
               ).replace("$i", str(s.uid))
    pick(rng, s, [
        "try:\n    out.append(thrower$i(n))\nexcept Err$i as e:\n    out.append(e.code)",
        "try:\n    thrower$i(n)\nexcept (KeyError, Err$i) as e:\n    out.append(type(e).__name__)\nelse:\n"
        "    out.append('else')\nfinally:\n    x = x + 1",
        "with contextlib.suppress(KeyError):\n    out.append({'a': 1}[str(n)])",
        "try:\n    try:\n        thrower$i(n)\n    except Err$i:\n        raise ValueError('wrapped')\n"
        "except ValueError as e:\n"
        "    out.append((str(e), type(e.__context__).__name__))",
        "out.append(thrower$i(n))",
        "try:\n    [][n]\nexcept LookupError as e:\n    out.append(str(e))",
        "try:\n    x = x + thrower$i(n)\nexcept Exception:\n    out.append('caught')\n    x = x * 2",
        "try:\n    1 / (n - n)\nexcept ZeroDivisionError as e:\n    out.append(str(e))",
        "err = None\ntry:\n    {}['q']\nexcept KeyError as e:\n    err = e\nout.append(repr(err))",
    ])


def fam_dyn(rng, s, place):  # sizes used as Python values (symbolic once a size has changed)
    pick(rng, s, [
        "for i in range(x.shape[0]):\n    x = x + i",
        "if x.shape[0] > 2:\n    x = x * 2\nout.append(x.shape[0] // 2)",
        "out.append(x.reshape(x.shape[0], -1).shape)",
        "out.append(torch.zeros(x.shape[0]))\nout.append(x[: x.shape[0] - 1].shape)",
        "out.append(x.shape[0] == x.shape[-1])\nout.append(len(x) % 2)",
        "if x.numel() > 10:\n    out.append('big')",
        "for row in x:\n    out.append(row.shape)",
        "for i, row in enumerate(x):\n    if i > 1:\n        break\n    x = x + i",
        "out.append(x.new_zeros(x.shape[-1] + int(n)))",
        "out.append(x.shape[0] * x.shape[-1] + n)\nout.append(x.size()[-1])",
    ])


def fam_methods(rng, s, place):  # module and method targets: methods looked up through self and classes
    pick(rng, s, [
        "out.append(self.extra(x))",
        "out.append(type(self).__name__)\nout.append(isinstance(self, Base))",
        "out.append(getattr(self, 'helper', None))",
    ])
    s.mut("Base.extra = lambda self, t: t * 3", "$SELF.extra = lambda t: t * 4",
          "if 'extra' in vars($SELF):\n    del $SELF.extra", "type($SELF).extra = lambda self, t: t * 5",
          "$SELF.helper = 3")


# Issue 18's Python data model: objects made in the trace, the attribute protocol, dataclasses,
# records, dunder methods, the standard library. The classes live in the program's text (setup);
# the state a snippet reads is its Var (a class, a config object, a dict of records, a list).

NEWOBJ_SRC = '''class Twice$i:  # a data descriptor
    def __get__(self, obj, owner):
        return 'on the class' if obj is None else obj._w * 2

    def __set__(self, obj, value):
        obj._w = value


class Named$i:  # a non-data descriptor
    def __get__(self, obj, owner):
        return owner.__name__ if obj is None else obj.a + 100


class Pt$i:
    count = 0
    w2 = Twice$i()
    nd = Named$i()

    def __new__(cls, *args, **kwargs):
        self = super().__new__(cls)
        self.made = cls.__name__
        return self

    def __init__(self, a, b=1):
        self.a = a
        self._w = b

    @property
    def total(self):
        return self.a + self._w

    @total.setter
    def total(self, v):
        self.a = v - self._w

    @classmethod
    def make(cls, k):
        return cls(k, k)

    @staticmethod
    def twice(v):
        return v * 2

    @functools.cached_property
    def cached(self):
        return self.a * 10


class SubPt$i(Pt$i):
    def __init__(self, a, b=1):
        super().__init__(a, b * 3)

    @property
    def total(self):
        return super().total * 2

    @total.setter
    def total(self, v):
        self.a = v


class Slot$i:
    __slots__ = ('u', 'v')

    def __init__(self, u):
        self.u = u
'''


def fam_newobj(rng, s, place):  # objects created in the trace ($v is the class called); descriptors
    s.setup = NEWOBJ_SRC.replace("$i", str(s.uid))
    s.var = place(rng.choice(["Pt$i", "SubPt$i"]).replace("$i", str(s.uid)))
    s.watch += [f"(Pt{s.uid}.count, SubPt{s.uid}.count)", f"getattr(H, 'made{s.uid}', None)"]
    pick(rng, s, [
        "p = $v(n)\nout.append(p.total)\nout.append(p.made)\nout.append(p.a * x)",
        "p = $v(1, n)\np.total = 10\nout.append((p.a, p.total, p.w2))",
        "p = $v.make(2)\np.w2 = n\nout.append((p._w, p.w2, $v.w2))",
        "out.append($v.twice(n))\nout.append($v.nd)\nout.append($v(2).nd)",
        "p = $v(n)\nout.append(p.cached)\np.a = 5\nout.append(p.cached)\ndel p.cached\nout.append(p.cached)",
        "sl = Slot$i(n)\nsl.v = x.shape[0]\nout.append(sl.u + sl.v)\nout.append(hasattr(sl, '__dict__'))\n"
        "try:\n    sl.w = 1\nexcept AttributeError:\n    out.append('no slot w')",
        "out.append($v(n, 2))",
        "H.made$i = $v(n, x.shape[-1])",
        "type($v(1)).count += 1\nout.append($v.count)\nout.append(isinstance($v(1), Pt$i))\n"
        "out.append(type($v(1)) is $v)\nout.append(issubclass($v, SubPt$i))",
        "p = copy.copy($v(n))\nq = copy.deepcopy(p)\nq.a = 7\nout.append((p.a, q.a, type(q).__name__))",
        "p = $v(x)\nout.append(p.total)\nsetattr(p, 'b', n)\nout.append(vars(p))",
        "p = $v(n)\nobject.__setattr__(p, 'a', 9)\ndel p._w\nout.append(getattr(p, '_w', 'gone'))\nout.append(p.a)",
        "p = $v(n, 2)\nout.append(x.tolist())\np.a = p.a + 1\nout.append((p.total, p.cached))",  # alive at a break
        "prev = getattr(H, 'made$i', None)\nif prev is not None:\n    out.append((prev.total, prev.nd, prev.cached))\n"
        "    prev.a = n\n    prev.w2 = 3",
    ])
    s.mut("Pt$i.twice = staticmethod(lambda v: v * 3)", "Pt$i.total = property(lambda self: self.a * 100)",
          "Pt$i.count = 0", "Pt$i.w2 = 5", "Named$i.__get__ = lambda self, obj, owner: 'patched'",
          "Pt$i.make = classmethod(lambda cls, k: cls(k + 1))", "Pt$i.nd = 'plain'",
          "del Twice$i.__set__", "Pt$i.cached = property(lambda self: 'prop')", "Slot$i.v = 'read-only'",
          "Pt$i.__init__ = lambda self, a, b=1: setattr(self, 'a', -a) or setattr(self, '_w', b)",
          "SubPt$i.twice = staticmethod(lambda v: -v)", "if hasattr(H, 'made$i'):\n    H.made$i.a = 8",
          s.var.rebind(f"SubPt{s.uid}"), s.var.rebind(f"Pt{s.uid}"))


CONFIG_SRC = '''class Cfg$i:  # like transformers' PretrainedConfig: names mapped in __getattribute__ / __setattr__
    attribute_map = {'hidden': 'width'}
    model_type = 'fuzz'

    def __init__(self, width=4, **kw):
        self.width = width
        for k, v in kw.items():
            setattr(self, k, v)

    def __setattr__(self, key, value):
        if key in super().__getattribute__('attribute_map'):
            key = super().__getattribute__('attribute_map')[key]
        super().__setattr__(key, value)

    def __getattribute__(self, key):
        if key != 'attribute_map' and key in super().__getattribute__('attribute_map'):
            key = super().__getattribute__('attribute_map')[key]
        return super().__getattribute__(key)

    def __getattr__(self, key):
        if key.startswith('use_'):
            return False
        raise AttributeError(f'no {key}')


@dataclasses.dataclass
class Opts$i:
    a: int
    scale: float = 2
    tags: list = dataclasses.field(default_factory=list)

    def __post_init__(self):
        self.scaled = self.a * self.scale


@dataclasses.dataclass(frozen=True)
class Key$i:
    a: int
    b: int = 1
'''


def fam_config(rng, s, place):  # a config object (attribute names mapped in Python) and dataclasses
    s.setup = CONFIG_SRC.replace("$i", str(s.uid))
    s.var = place(rng.choice(["Cfg$i(4, depth=2)", "Cfg$i(2)"]).replace("$i", str(s.uid)))
    pick(rng, s, [
        "out.append($v.hidden)\nx = x * $v.width",
        "if $v.use_cache:\n    x = x + 1\nout.append($v.use_cache)",
        "out.append(getattr($v, 'hidden', -1))\n"
        "out.append(hasattr($v, 'missing'))\nout.append(getattr($v, 'depth', None))",
        "c2 = Cfg$i(n, hidden=3)\nout.append(c2.width)\nout.append(vars(c2))",
        "$v.hidden = n\nout.append($v.width)",
        "try:\n    out.append($v.nothing)\nexcept AttributeError as e:\n    out.append(str(e))",
        "o = Opts$i(n)\nout.append(o)\nout.append(o.scaled * x)",
        "o = Opts$i(1, scale=n)\no.tags.append($v.width)\n"
        "out.append(o.tags)\nout.append(o == Opts$i(1, n, [$v.width]))",
        "k = Key$i(n)\ntry:\n    k.a = 3\nexcept dataclasses.FrozenInstanceError as e:\n    out.append(str(e))\n"
        "out.append(k == Key$i(n, 1))\nout.append({k: 1}.get(Key$i(n)))",
        "out.append(dataclasses.fields(Opts$i)[1].default)\nout.append(dataclasses.asdict(Opts$i(n)))",
        "object.__setattr__($v, 'raw', n)\nout.append(vars($v).get('raw'))",
        "out.append(type($v).model_type)\nout.append($v.model_type)\nout.append(isinstance($v, Cfg$i))",
        "c2 = Cfg$i(n)\nout.append(x.tolist())\nc2.hidden = $v.hidden\nout.append(vars(c2))",
    ])
    s.mut("Cfg$i.attribute_map = {'hidden': 'depth'}", "Cfg$i.attribute_map['size'] = 'width'",
          "$p.use_cache = True", "$p.width = 9", "Cfg$i.model_type = 'other'",
          "Opts$i.__init__.__defaults__ = (5,) + Opts$i.__init__.__defaults__[1:]",
          "Opts$i.__post_init__ = lambda self: setattr(self, 'scaled', -1)",
          "Cfg$i.__getattribute__ = object.__getattribute__", "del Cfg$i.__getattr__",
          "Key$i.__eq__ = lambda self, other: False",
          s.var.rebind(f"Cfg{s.uid}(8)"))


RECORDS_SRC = '''@dataclasses.dataclass
class Output$i(collections.OrderedDict):  # like transformers' ModelOutput
    logits: torch.Tensor = None
    hidden: tuple = None
    loss: torch.Tensor = None

    def __post_init__(self):
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if v is not None:
                self[f.name] = v

    def __setitem__(self, key, value):
        super().__setitem__(key, value)
        super().__setattr__(key, value)

    def __setattr__(self, name, value):
        if name in self.keys() and value is not None:
            super().__setitem__(name, value)
        super().__setattr__(name, value)

    def __getitem__(self, k):
        if isinstance(k, str):
            return dict(self.items())[k]
        return self.to_tuple()[k]

    def to_tuple(self):
        return tuple(self[k] for k in self.keys())


class Color$i(enum.Enum):
    RED = 1
    BLUE = 2

    @property
    def double(self):
        return self.value * 2


class Pair$i(typing.NamedTuple):
    a: int
    b: float = 0.5

    def total(self):
        return self.a + self.b


class Reg$i(dict):  # a dict subclass with its own methods
    def __setitem__(self, key, value):
        super().__setitem__(key, value * 2)

    def register(self, key, value):
        self[key] = value
        return self

    def total(self):
        return sum(self.values())
'''


def fam_records(rng, s, place):  # ModelOutput-like OrderedDict dataclass, NamedTuple, Enum, dict subclass
    s.setup = RECORDS_SRC.replace("$i", str(s.uid))
    s.var = place("{'color': Color$i.RED, 'pair': Pair$i(1), 'reg': Reg$i(ab=1)}".replace("$i", str(s.uid)))
    pick(rng, s, [
        "o = Output$i(logits=x)\no['hidden'] = (x, n)\nout.append(o.to_tuple())\nout.append(o[0])\n"
        "out.append(o['logits'])",
        "o = Output$i(logits=x * 2, hidden=None)\no.loss = x.sum()\nout.append(list(o.keys()))\nout.append(o.loss)\n"
        "out.append(len(o))",
        "o = Output$i(x)\no.logits = x + 1\nout.append(o[0])\nout.append(o)",
        "o = Output$i(hidden=(n,))\nfor k, v in o.items():\n    out.append((k, v))\nout.append('logits' in o)\n"
        "out.append(o.get('loss'))",
        "col = $v['color']\nif col is Color$i.RED:\n    x = x + 1\nout.append((col.name, col.value, col.double))\n"
        "out.append(Color$i(2))",
        "match $v['color']:\n    case Color$i.RED:\n        out.append('red')\n    case Color$i.BLUE:\n"
        "        out.append('blue')\n    case _:\n        out.append('other')",
        "p = $v['pair']\nout.append(p.total())\nout.append(p._replace(b=n))\nout.append(Pair$i(n) + p)\n"
        "out.append(p._asdict())",
        "a, b = $v['pair']\nx = x * a + b\nout.append(Pair$i._fields)",
        "rg = $v['reg']\nrg.register('n', n)\nout.append(rg.total())\nout.append(dict(rg))",
        "rg = Reg$i()\nrg['k'] = x.shape[0]\nout.append(rg)\n"
        "out.append(isinstance(rg, dict))\nout.append(type(rg).__name__)",
        "out.append([c.name for c in Color$i])\nout.append(Color$i['BLUE'] in Color$i)\nout.append(len(Color$i))",
        "o = Output$i(logits=x)\nout.append(x.tolist())\no['hidden'] = (n,)\nout.append(o.to_tuple())",
        "rg = $v['reg']\nout.append((dict(rg), list(rg), sorted(rg.items()), {**rg}, len(rg), 'ab' in rg))",
        "o = Output$i(logits=x, hidden=(n,))\nout.append((dict(o), list(o), tuple(o.values())[1], {**o}))",
        "match $v:\n    case {'pair': Pair$i(a=1, b=b)}:\n        out.append(('pair1', b))\n"
        "    case {'color': Color$i.BLUE}:\n        out.append('blue')\n    case _:\n        out.append('nomatch')",
    ])
    s.mut("$p['color'] = Color$i.BLUE", "$p['color'] = Color$i.RED", "$p['pair'] = Pair$i(2, 1.5)",
          "$p['reg']['z'] = 3", "$p['reg'] = Reg$i()", "Color$i.double = property(lambda self: -1)",
          "Pair$i.total = lambda self: self.a * 10", "Reg$i.total = lambda self: len(self)",
          "Output$i.to_tuple = lambda self: tuple(self.values())[::-1]", "Reg$i.__setitem__ = dict.__setitem__",
          "Output$i.__setattr__ = collections.OrderedDict.__setattr__")


PYSTD_SRC = '''def flat$i(items):  # a generator with yield from
    for e in items:
        if isinstance(e, (list, tuple)):
            yield from flat$i(e)
        else:
            yield e


@functools.lru_cache(maxsize=None)
def tri$i(k):
    return k * (k + 1) // 2


def plus_one$i(f):
    @functools.wraps(f)
    def inner(*args):
        return f(*args) + 1
    return inner


@plus_one$i
def scaled$i(t, k):
    return t * k


def adder$i(k):
    def add(t):
        return t + k
    return add


def check$i(items):
    if len(items) > 3:
        raise ValueError(f'too long: {len(items)}')
    return len(items)


LOGGED$i = []


class ListHandler$i(logging.Handler):
    def emit(self, record):
        LOGGED$i.append(record.getMessage())


LOGGER$i = logging.getLogger('fuzzprog.$i')  # process-wide: the steps change it, each run starts afresh
LOGGER$i.handlers, LOGGER$i.propagate, LOGGER$i.disabled = [ListHandler$i()], False, False
LOGGER$i.setLevel(logging.NOTSET)
'''


def fam_pystd(rng, s, place):  # sets, itertools, functools, collections, generators, closures, match, logging
    s.setup = PYSTD_SRC.replace("$i", str(s.uid))
    s.var = place(rng.choice(["[1, 2, 3]", "[3, 1, 2, 2]", "(2, 4)"]))
    s.watch += [f"sorted(LOGGED{s.uid})", f"getattr(H, 'add{s.uid}', abs)(-10)"]
    pick(rng, s, [
        "s = set($v) | {n}\nout.append(sorted(s - {1}))\nout.append(frozenset($v) & {2, 3})\nout.append(len(s ^ {5}))",
        "out.append({e * 2 for e in $v if e > 1})\nout.append(set($v).issubset({1, 2, 3}))\n"
        "out.append(sorted(set($v).union([n])))",
        "out.append(list(itertools.chain($v, [n])))\nout.append(list(itertools.islice(itertools.count(n), 3)))\n"
        "out.append(list(itertools.accumulate($v)))",
        "out.append(list(itertools.product($v, 'ab'))[:4])\n"
        "out.append(list(itertools.zip_longest($v, [n], fillvalue=0)))\n"
        "out.append(list(itertools.pairwise($v)))",
        "out.append([(k, len(list(g))) for k, g in itertools.groupby(sorted($v))])\n"
        "out.append(list(itertools.starmap(operator.mul, zip($v, $v))))",
        "out.append(functools.reduce(operator.add, $v, n))\nout.append(functools.partial(max, 0, -1)(*$v))\n"
        "out.append(tri$i(len($v)))",
        "out.append(scaled$i(x, len($v)))\nout.append(scaled$i.__name__)",
        "d = collections.deque($v, maxlen=2)\nd.appendleft(n)\n"
        "out.append(d)\nout.append(collections.Counter($v).most_common(1))",
        "dd = collections.defaultdict(list)\nfor e in $v:\n    dd[e % 2].append(e)\nout.append(dd)",
        "out.append(list(flat$i([$v, (n, [x.shape[0]])])))",
        "g = flat$i([$v, [n]])\nout.append(next(g))\nout.append(x.tolist())\nout.append(list(g))",
        "out.append(any(e > n for e in $v))\nout.append(all(e for e in $v))\nout.append(sum(e * 2 for e in $v))\n"
        "out.append(dict((str(e), e) for e in $v))\nout.append(tuple(e for e in $v if e != 2))",
        "total$i = 0\ndef bump(k):\n    nonlocal total$i\n"
        "    total$i += k\nfor e in $v:\n    bump(e)\nout.append(total$i)",
        "f = adder$i(len($v))\nout.append(f(x))\nH.add$i = f",
        "sl = slice(1, None, 2 if n > 1 else None)\nout.append($v[sl])\nout.append(x[sl].shape)\n"
        "out.append((sl.start, sl.stop, sl.step))",
        "match $v:\n    case [a, b, *rest]:\n        out.append((a, b, rest))\n    case [a]:\n        out.append(a)\n"
        "    case _:\n        out.append('other')",
        "try:\n    out.append(check$i($v))\nexcept ValueError as e:\n    out.append(str(e))\nfinally:\n    x = x + 1",
        "logging.getLogger('fuzzprog.$i').warning('n=%s len=%d', n, len($v))\nwarnings.warn(f'fuzz {n}')\n"
        "out.append(x * 2)",
        "out.append(copy.copy($v))\nout.append(copy.deepcopy([$v, {'k': $v}]))",
    ])
    s.mut(*LIST_MUTS, s.var.rebind("(2, 4)"), s.var.rebind("[3, 1, 2, 2, 5]"), "tri$i.cache_clear()",
          "LOGGER$i.setLevel(logging.ERROR)", "LOGGER$i.disabled = True",
          "globals()['adder$i'] = lambda k: (lambda t: t - k)", "globals()['tri$i'] = lambda k: -k")


DISPATCH_SRC = '''class Vec$i:
    def __init__(self, *vals):
        self.vals = list(vals)
        self.depth = 0

    def __call__(self, t):
        return t * len(self.vals)

    def __eq__(self, other):
        return type(other) is type(self) and self.vals == other.vals

    def __hash__(self):
        return hash(tuple(self.vals))

    def __bool__(self):
        return any(self.vals)

    def __len__(self):
        return len(self.vals)

    def __add__(self, other):
        if isinstance(other, Vec$i):
            return type(self)(*(a + b for a, b in zip(self.vals, other.vals)))
        return type(self)(*(a + other for a in self.vals))

    __radd__ = __add__

    def __mul__(self, k):
        return type(self)(*(a * k for a in self.vals))

    def __neg__(self):
        return self * -1

    def __repr__(self):
        return f'Vec{self.vals}'

    def __enter__(self):
        self.depth += 1
        return self

    def __exit__(self, *exc):
        self.depth -= 1
        return False


class Vec2$i(Vec$i):
    def __bool__(self):
        return True
'''


def fam_dispatch(rng, s, place):  # dunder methods of a user class; a dict keyed by classes
    s.setup = DISPATCH_SRC.replace("$i", str(s.uid))
    s.var = place(rng.choice(["{int: 'int', Vec$i: 'vec', bool: 'bool'}", "{float: 'float', torch.Tensor: 'T'}"]
                             ).replace("$i", str(s.uid)))
    pick(rng, s, [
        "v = Vec$i(n, 2)\nout.append(v(x))",
        "v = Vec$i(1, n)\nif v:\n    x = x + len(v)\nout.append(bool(Vec$i(0)))\nout.append(bool(Vec2$i(0)))",
        "v = Vec$i(1, 2) + Vec$i(n, 1)\nout.append(v.vals)\nout.append((3 + Vec$i(1)).vals)\nout.append((-v).vals)",
        "out.append(Vec$i(1, n) == Vec$i(1, 2))\nout.append(len({Vec$i(1), Vec$i(1), Vec$i(n)}))\n"
        "out.append({Vec$i(1): 'one'}.get(Vec$i(n), 'none'))",
        "v = Vec$i(n)\nwith v as w:\n    out.append(w.depth)\n    x = x * 2\nout.append(v.depth)",
        "v = Vec$i(n)\nwith v:\n    out.append(x.tolist())\n    out.append(v.depth)\nout.append(v.depth)",
        "v = Vec$i(n)\ntry:\n    with v:\n        raise KeyError('inside')\n"
        "except KeyError as e:\n    out.append((str(e), v.depth))",
        "vs = [Vec$i(2), Vec$i(n)]\nout.append(sum(vs, Vec$i(0)).vals)\nout.append(sorted(vs, key=len)[0].vals)\n"
        "out.append((vs.index(Vec$i(n)), Vec$i(n) in vs, vs.count(Vec$i(2))))",
        "out.append(f'{Vec$i(n)!r} {str(Vec$i(1))}')\nout.append(repr([Vec$i(2)]))",
        "out.append($v.get(type(n), 'other'))\nout.append($v.get(type(x), 'tensor?'))",
        "for k, name in $v.items():\n    if isinstance(n, k):\n        out.append(name)",
        "out.append(type(Vec2$i()) in $v)\nout.append(isinstance(Vec2$i(), Vec$i))\n"
        "out.append(issubclass(Vec2$i, tuple($v)))",
        "if type(x) in $v:\n    x = x * 2\nout.append(Vec$i in $v)\nout.append(sorted(k.__name__ for k in $v))",
    ])
    s.mut("$p[float] = 'float'", "$p.pop(Vec$i, None)", "$p[Vec$i] = 'swapped'", "$p[Vec2$i] = $p.pop(Vec$i, 'v2')",
          "$p[torch.Tensor] = 'tensor'", "Vec$i.__call__ = lambda self, t: t + 100",
          "Vec$i.__bool__ = lambda self: False", "Vec$i.__eq__ = lambda self, other: True",
          "del Vec2$i.__bool__", "Vec$i.__len__ = lambda self: 0", "Vec$i.__enter__ = lambda self: 'entered'",
          "Vec$i.__radd__ = lambda self, other: 'radd'",
          s.var.rebind("{int: 'int', Vec2$i: 'vec2'}".replace("$i", str(s.uid))))


HOOKS_SRC = """
class HMod$i(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, h, scale=1.0):
        return self.lin(h) * scale


HK$i = HMod$i()
HLOG$i = []
"""


def fam_hooks(rng, s, place):  # nn.Module hooks (forward, kwargs, prepend, always_call, backward); tensor hooks
    s.setup = HOOKS_SRC.replace("$i", str(s.uid))
    s.watch.append(f"list(HLOG{s.uid})")
    prep = "h = x.reshape(-1)[:4]\nh = (h.real if h.is_complex() else h).to(HK$i.lin.weight.dtype)\n"
    pick(rng, s, [
        prep + "out.append(HK$i(h))",
        prep + "out.append(HK$i(h, scale=2.0))",
        prep + "out.append(HK$i(h=h))\nout.append(len(HLOG$i))",
        "if x.requires_grad:\n    x.register_hook(lambda g: g * 2)\nout.append(x * 3)",
        "y = x * 2\nif y.requires_grad:\n    y.register_hook(lambda g: HLOG$i.append('y') or g + 1)\nout.append(y.sin())",
        "y = x * 2\nz = y * 3\nif y.requires_grad:\n    y.register_hook(lambda g: g + 1)\nout.append(z + y)",
    ])
    s.mut("HOOKS.append(HK$i.register_forward_hook(lambda m, a, o: HLOG$i.append(('post', len(a))) or o * 2))",
          "HOOKS.append(HK$i.register_forward_pre_hook(lambda m, a: (a[0] + 1,) + a[1:] if a else None))",
          "HOOKS.append(HK$i.register_forward_pre_hook(lambda m, a: HLOG$i.append('pre'), prepend=True))",
          "HOOKS.append(HK$i.register_forward_pre_hook(lambda m, a, k: (a, dict(k, scale=3.0)), with_kwargs=True))",
          "HOOKS.append(HK$i.register_forward_hook(lambda m, a, k, o: o + len(k), with_kwargs=True, prepend=True))",
          "HOOKS.append(HK$i.lin.register_forward_hook(lambda m, a, o: HLOG$i.append('lin')))",
          "HOOKS.append(HK$i.lin.register_forward_pre_hook(lambda m, a: a[0] * 2))",
          "HOOKS.append(HK$i.register_forward_hook(lambda m, a, o: HLOG$i.append('always'), always_call=True))",
          "HOOKS.append(HK$i.lin.register_full_backward_hook(lambda m, gi, go: HLOG$i.append('bw')))",
          "HOOKS.append(HK$i.register_full_backward_pre_hook(lambda m, go: (go[0] * 2,)))",
          "if HOOKS:\n    HOOKS.pop().remove()", "HK$i._forward_hooks.clear()",
          "HK$i.lin._forward_pre_hooks.clear()")


def fam_tattrs(rng, s, place):  # Python attributes on a tensor (x.tag): read, tested, written; .grad
    s.var = place(rng.choice(["torch.ones(3)", "torch.arange(4.0)", "torch.ones(3).requires_grad_()"]))
    s.watch.append(f"dict(getattr({s.var.watch}, '__dict__', {{}}))")
    pick(rng, s, [
        "out.append(getattr($v, 'tag', None))",
        "if hasattr($v, 'scale'):\n    x = x * $v.scale\nelse:\n    x = x + 1",
        "$v.tag = n\nout.append($v.tag)",
        "try:\n    out.append($v.missing)\nexcept AttributeError:\n    out.append('no')",
        "y = $v * 2\nout.append(hasattr(y, 'tag'))\nout.append(getattr(y.contiguous(), 'tag', -1))",
        "z = $v.contiguous()\nout.append(getattr(z, 'scale', 0))",
        "if $v.grad is not None:\n    out.append($v.grad.sum())\nelse:\n    out.append('nograd')",
        "if getattr($v, 'tag', 0) == 3:\n    out.append($v * 3)",
    ])
    s.mut("$p.tag = 3", "$p.tag = 'a'", "$p.scale = 2.0", "$p.missing = 1",
          "if hasattr($p, 'tag'):\n    del $p.tag", "if hasattr($p, 'scale'):\n    del $p.scale",
          "if $p.requires_grad:\n    $p.grad = torch.ones_like($p)", "$p.grad = None",
          s.var.rebind("torch.ones(3)"), s.var.rebind("torch.zeros(2).requires_grad_()"))


def fam_numpy(rng, s, place):  # NumPy arrays as inputs and state; NumPy calls, views, in-place changes
    s.var = place(rng.choice(["np.arange(6.0).reshape(2, 3)", "np.ones(4, dtype=np.float32)", "np.arange(5)"]))
    pick(rng, s, [
        "a = $v * 2 + 1\nout.append(a)",
        "out.append(np.sin($v).sum())",
        "$v += 1\nout.append($v)",
        "b = $v.astype(np.float64)\nb[...] = 5\nout.append(b)",
        "out.append(np.where($v > 2, $v, 0))",
        "out.append(($v.shape, $v.dtype, $v.ndim, len($v)))",
        "if $v.sum() > 3:\n    out.append(1)\nelse:\n    out.append(2)",
        "out.append(torch.from_numpy($v).sum())",
        "out.append(np.asarray(x.detach()).shape)",
        "w = $v.reshape(-1)[:2]\nw[0] = 9\nout.append($v)",
        "out.append(np.float32(2.0) * $v)",
        "out.append($v.max() > 1)",
        "for row in np.atleast_2d($v):\n    out.append(row.max())",
        "y = $v.flatten()\ny[0] = -1\nout.append(y)\nout.append($v)",
    ])
    s.mut("$p[...] = 3", s.var.rebind("np.arange(6.0)[::-2]"), s.var.rebind("np.zeros((2, 2))"),
          s.var.rebind("np.arange(4, dtype=np.int32)"), s.var.rebind("np.ones(3).T.copy()"),
          "$p.flags.writeable = False", s.var.rebind("$p.copy()"))


FAMILIES = {f.__name__[4:]: f for f in [fam_tensor, fam_scalar, fam_object, fam_list, fam_dict, fam_namedtuple,
                                         fam_iter, fam_modes, fam_raise, fam_break, fam_module, fam_tmethods,
                                         fam_tstate, fam_inplace, fam_builtins, fam_dunder, fam_helper, fam_alias,
                                         fam_exc, fam_dyn, fam_methods, fam_newobj, fam_config, fam_records,
                                         fam_pystd, fam_dispatch, fam_hooks, fam_tattrs, fam_numpy]}
SHAPES = [(2, 3), (3, 4), (4,), (2, 3, 4), (1, 4), (4, 1), (2, 2, 1, 2)]
DTYPES = ["float32"] * 4 + ["float64", "int64", "bool", "complex64", "float16"]


def rand_spec(rng, seed):
    return fix_spec(dict(shape=rng.choice(SHAPES), dtype=rng.choice(DTYPES), seed=seed,
                         layout=rng.choice(["contig", "contig", "contig", "t", "slice", "cl"]), rg=rng.random() < 0.25,
                         inf=rng.random() < 0.15, conj=rng.random() < 0.5, param=rng.random() < 0.1))


def perturb(rng, spec, seed):
    """The input with one property changed (so a missing guard is not hidden by another one)."""
    field = rng.choice(["dtype", "shape", "layout", "rg", "inf", "conj", "param", "seed"])
    choices = {"dtype": DTYPES + ["complex64"] * 2, "shape": SHAPES, "layout": ["contig", "t", "slice", "cl"]}
    new = dict(spec, seed=seed)
    new[field] = rng.choice(choices[field]) if field in choices else not spec[field] if field != "seed" else seed
    if field in ("rg", "inf", "param") and new[field]:
        new["dtype"] = new["dtype"] if new["dtype"].startswith(("float", "complex")) else "float32"
        new["inf" if field != "inf" else "rg"] = new["inf"] and field == "inf"
    if field == "conj" and new[field]:
        new["dtype"] = "complex64"
    return fix_spec(new)


def fix_spec(sp):
    sp["rg"] = sp["rg"] and sp["dtype"].startswith(("float", "complex"))
    sp["inf"] = sp["inf"] and not sp["rg"]
    sp["conj"] = sp["conj"] and sp["dtype"].startswith("complex")
    sp["param"] = sp["param"] and not sp["inf"] and sp["dtype"].startswith(("float", "complex"))
    return sp


def render(sp):
    kw = "".join(f", {k}=True" for k in ("rg", "inf", "conj", "param") if sp[k])
    return f"mk({sp['shape']}, {sp['dtype']!r}, {sp['seed']}, {sp['layout']!r}{kw})"


def gen_program(seed):
    """Program number `seed`: deterministic, pure text (no torch needed)."""
    rng = random.Random(seed)
    kind = rng.choice(["function", "function", "closure", "module", "method"])
    wheres = ["global", "arg", "attr", "kwdefault"] + (["self"] if kind in ("module", "method") else []) + \
             (["cell", "cell"] if kind == "closure" else [])
    names = [n for n in FAMILIES if n not in ("module", "methods")]
    fams = rng.sample(names, rng.randint(1, 4)) + (["module"] if kind == "module" and rng.random() < 0.7 else []) + \
        (["methods"] if kind in ("module", "method") and rng.random() < 0.3 else [])
    snips = []
    for uid, fam in enumerate(fams):
        s = Snip(uid, fam)
        inst = "m" if kind == "module" else "r"
        fn = {"module": "M.forward", "method": "Runner.run"}.get(kind, "fn")
        FAMILIES[fam](rng, s, lambda init, uid=uid: Var(f"v{uid}", rng.choice(wheres), init, inst, fn))
        s.muts = [m.replace("$SELF", inst) for m in s.muts]
        snips.append(s)
    muts = [(s.uid, m) for s in snips for m in s.muts + ([s.var.delete()] if s.var and s.var.delete() and
                                                          rng.random() < 0.3 else [])]
    spec, n, k = rand_spec(rng, seed % 1000 * 100), 2, 1
    steps = [Step("call", f"({render(spec)}, {n}, A)")]
    for _ in range(rng.randint(3, 10)):
        if muts and rng.random() < 0.6:
            uid, code = rng.choice(muts)
            steps.append(Step("mut", code, uid))
        elif rng.random() < 0.5:
            k += 1
            spec = (perturb if rng.random() < 0.8 else lambda _, __, seed: rand_spec(rng, seed))(
                rng, spec, seed % 1000 * 100 + k)
        elif rng.random() < 0.5:
            n = rng.choice([0, 1, 2, 3, 3, 2.5, True, 1.0, 0.0])
        ctx = rng.choice(["no_grad", "kw"]) if rng.random() < 0.25 else None
        steps.append(Step("call", f"({render(spec)}, {n}, A)", None, ctx))
    return Program(kind, snips, steps, rng.choice(["out", "out", "tuple(out)", "{'out': out, 'x': x}", "(x, out)"]),
                   rng.random() < 0.8)


def program_seed(seed, i):
    return seed * 1_000_003 + i


# ---------------------------------------------------------------- running and comparing -------

def tname(t):
    return f"{t.__module__}.{t.__qualname__}"


def freeze(v, memo, depth=0):
    """A snapshot of a value that later mutation cannot change, tagged for compare() and pretty().
    Mutable objects are numbered in the order first met (`memo`, shared by everything frozen after
    one call), so which results and state are the same object is compared too (#0 is the input x)."""
    import torch
    t = type(v)

    def ident():
        if id(v) not in memo:
            memo[id(v)] = (len(memo), v)  # v kept alive so that its id is not reused
        return memo[id(v)][0]
    if depth > 5:
        return ("Y", "deep")
    if isinstance(v, torch.Tensor):
        d = v.detach().resolve_conj().resolve_neg().clone()
        return ("T", tname(t), str(v.dtype), tuple(v.shape), v.requires_grad, ident(), d)
    if v is None or t in (bool, int, float, complex, str):
        return ("S", tname(t), v)
    import numpy as np
    if isinstance(v, np.ndarray):
        return ("A", tname(t), str(v.dtype), v.shape, ident(), v.copy())
    if isinstance(v, np.generic):  # compared as an array: NumPy's kernels are not torch's
        return ("A", tname(t), str(v.dtype), (), None, np.asarray(v))
    if isinstance(v, (torch.dtype, torch.device, torch.layout)):
        return ("S", tname(t), str(v))
    if isinstance(v, BaseException):
        return ("X", tname(t), str(v))
    if isinstance(v, type):
        return ("Y", tname(v))
    if isinstance(v, (list, dict, set, collections.deque)) or hasattr(v, "__dict__") and not callable(v):
        if id(v) in memo:
            return ("R", memo[id(v)][0])  # met before: compared by identity only
        k = ident()
    if isinstance(v, (list, tuple, collections.deque)):
        return ("L", tname(t), None if isinstance(v, tuple) else k, [freeze(e, memo, depth + 1) for e in v])
    if isinstance(v, (set, frozenset)):  # in an order that does not depend on the hashes
        items = sorted(v, key=lambda e: (tname(type(e)), repr(e)))
        return ("L", tname(t), k if isinstance(v, set) else None, [freeze(e, memo, depth + 1) for e in items])
    if isinstance(v, dict):
        return ("D", tname(t), k, [(freeze(a, memo, depth + 1), freeze(e, memo, depth + 1)) for a, e in v.items()])
    if isinstance(v, torch.nn.Module):
        return ("M", tname(t), v.training)
    if callable(v) or not hasattr(v, "__dict__"):
        return ("Y", tname(t))
    return ("O", tname(t), k, [(a, freeze(e, memo, depth + 1)) for a, e in sorted(vars(v).items())])


def flatten(v, depth=0):
    if isinstance(v, (list, tuple)) and depth < 5:
        return [t for e in v for t in flatten(e, depth + 1)]
    return list(v.values()) if isinstance(v, dict) else [v]


def compare(a, b, exact):
    """None if equal, else a short description of the first difference."""
    import torch
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        if a.is_floating_point() or a.is_complex():
            if exact:
                same = torch.equal(a, b) or bool(((a == b) | (a.isnan() & b.isnan())).all())
            else:
                tol = 1e-2 if a.dtype in (torch.float16, torch.bfloat16) else 1e-4
                same = torch.allclose(a, b, rtol=tol, atol=tol * 0.1, equal_nan=True)
        else:
            same = torch.equal(a, b)
        return None if same else "tensor values differ"
    import numpy as np
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)) or a.dtype != b.dtype or a.shape != b.shape:
            return "arrays differ in type, dtype or shape"
        if a.dtype.kind in "fc":  # torch's NumPy layer runs torch's kernels: never bit for bit NumPy's
            tol = 1e-2 if a.dtype == np.float16 else 1e-4
            return None if np.allclose(a, b, rtol=tol, atol=tol * 0.1, equal_nan=True) else "array values differ"
        return None if np.array_equal(a, b, equal_nan=a.dtype.kind in "fc") else "array values differ"
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        if len(a) != len(b) or a and isinstance(a[0], str) and len(a[0]) == 1 and a[:2] != b[:2]:
            return f"{pretty(a)} != {pretty(b)}"
        for ea, eb in zip(a, b):
            d = compare(ea, eb, exact)
            if d:
                return d
        return None
    if type(a) is float and type(b) is float and (a != a and b != b or not exact and abs(a - b) <= 1e-4 * (1 + abs(a))):
        return None
    return None if type(a) is type(b) and a == b else f"{pretty(a)} != {pretty(b)}"


def pretty(f, limit=400):
    import torch
    def p(f):
        if isinstance(f, torch.Tensor):
            return repr(f.tolist())
        if not (isinstance(f, tuple) and f and f[0] in ("T", "S", "X", "Y", "L", "D", "M", "O", "R", "ok", "raise")):
            return repr(f) if not isinstance(f, (list, tuple)) else "[" + ", ".join(map(p, f)) + "]"
        tag, name = f[0], f[1].replace("builtins.", "").replace("fuzzprog.", "") if isinstance(f[1], str) else ""
        if tag == "ok":
            return p(f[1])
        if tag == "raise":
            return f"raise {f[1]}({f[2]!r})"
        if tag == "T":
            kind = ", requires_grad" * f[4] + (f", {name}" if name != "torch.Tensor" else "")
            return f"tensor#{f[5]}({f[2]}, {list(f[3])}{kind}, {p(f[6])})"
        if tag == "S":
            return repr(f[2])
        if tag == "R":
            return f"<#{f[1]}>"
        num = f"#{f[2]}" if tag in ("L", "D", "O") and f[2] is not None else ""
        if tag == "L":
            items = ", ".join(p(e) for e in f[3])
            return f"{num}[{items}]" if name == "list" else f"({items})" if name == "tuple" else f"{name}({items})"
        if tag == "D":
            return num + "{" + ", ".join(f"{p(k)}: {p(v)}" for k, v in f[3]) + "}"
        if tag == "O":
            return f"{name}{num}(" + ", ".join(f"{k}={p(v)}" for k, v in f[3]) + ")"
        if tag == "X":
            return f"{name}({f[2]!r})"
        return f"<{name}{' training' if tag == 'M' and f[2] else ''}>"
    s = p(f)
    return s if len(s) <= limit else s[:limit] + "..."


def run_side(src, path, wrap):
    """Run a program's steps in a fresh namespace, the call target wrapped by `wrap`. Returns per
    step (kind, outcome, state after it): a call's outcome is ("ok", result) or ("raise", type,
    message), its state what _watch() returns, the input, the grad mode, the default dtype and the
    gradients of the result's sum with respect to x and the module's parameters."""
    import torch
    ns = {"__name__": "fuzzprog", "__file__": path}
    torch.manual_seed(0)
    exec(compile(src, path, "exec"), ns)
    target, results = wrap(ns["TARGET"]), []
    params = list(ns["m"].parameters()) if isinstance(ns.get("m"), torch.nn.Module) else []
    try:
        for k, (kind, fn, ctx) in enumerate(ns["STEPS"]):
            torch.manual_seed(k + 1)
            if kind == "mut":
                results.append(("mut", attempt(fn), None))
                continue
            args = fn()
            call = (lambda: target(args[0], n=args[1], c=args[2])) if ctx == "kw" else (lambda: target(*args))
            with torch.no_grad() if ctx == "no_grad" else contextlib.nullcontext():
                res = attempt(call, keep=True)
            grads = ("ok", None)
            if res[0] == "ok":
                outs = [t for t in flatten(res[1]) if isinstance(t, torch.Tensor) and t.requires_grad]
                wrt = [t for t in [args[0]] + params if t.requires_grad]
                if outs and wrt:
                    loss = lambda: sum((t.real if t.is_complex() else t).sum() for t in outs)  # noqa: E731
                    grads = attempt(lambda: torch.autograd.grad(loss(), wrt, allow_unused=True, retain_graph=True),
                                    keep=True)
            memo = {id(args[0]): (0, args[0])}
            state = [ns["_watch"](), args[0], torch.is_grad_enabled(), torch.get_default_dtype()]
            results.append(("call", (res[0], safe_freeze(res[1], memo)) if res[0] == "ok" else res,
                            safe_freeze([state, grads[1:]], memo)))
    finally:
        torch.set_default_dtype(torch.float32)
        torch.set_grad_enabled(True)
    return results


def safe_freeze(v, memo):
    """freeze(), or what it raised (a broken object, e.g. an OrderedDict whose links disagree with its
    keys, is a difference to report, not a reason to kill the worker)."""
    try:
        return freeze(v, memo)
    except Exception as e:  # noqa: BLE001
        return ("X", "freeze raised " + tname(type(e)), str(e))


def attempt(fn, keep=False):
    """("ok", value) or ("raise", exception type, message); the value frozen unless `keep`."""
    try:
        v = fn()
        return ("ok", v if keep else freeze(v, {}))
    except Exception as e:  # noqa: BLE001 - every exception is an outcome to compare
        return ("raise", tname(type(e)), str(e))


def diff(eager, comp, exact):
    """(category, step, description) of the first difference, or None."""
    for k, ((kind, eo, es), (_, co, cs)) in enumerate(zip(eager, comp)):
        if co[0] == "raise" and (eo[0] != "raise" or eo[1:] != co[1:]):
            return "raised", k, f"eager:    {pretty(eo)}\ncompiled: {pretty(co)}"
        d = compare(eo, co, exact)
        if d:
            return "wrong", k, f"eager:    {pretty(eo)}\ncompiled: {pretty(co)}\n({d})"
        d = compare(es, cs, exact)
        if d:
            return "wrong", k, f"state after the call differs:\neager:    {pretty(es)}\ncompiled: {pretty(cs)}\n({d})"
    return None


class Checker:
    """Runs a program eagerly and compiled (in the worker) and says whether, and where, they differ."""

    def __init__(self, tmpdir, wrap, exact):
        self.tmpdir, self.wrap, self.exact, self.count, self.calls = tmpdir, wrap, exact, 0, 0

    def __call__(self, prog):
        import pydynamo
        src = prog.source()
        self.count += 1
        path = os.path.join(self.tmpdir, f"prog_{self.count}.py")
        with open(path, "w") as f:
            f.write(src)
        try:
            eager = run_side(src, path, lambda t: t)
            comp = run_side(src, path, self.wrap)
        finally:
            pydynamo.reset()
            os.unlink(path)
        self.calls += sum(1 for s in prog.steps if s.kind == "call")
        return diff(eager, comp, self.exact)


PLAIN_CALL = re.compile(r"^\(mk\(.*\), ([^,]+), A\)$")  # a call step's code: (mk(...), n, A)


def shrinks(p):
    """Smaller variants of a program: a snippet, a body piece or a step dropped, an input made plain."""
    for j in range(len(p.snips)):
        yield p.replace(snips=p.snips[:j] + p.snips[j + 1:])
    for j, s in enumerate(p.snips):
        for q in range(len(s.pieces)):
            yield p.replace(snips=p.snips[:j] + [dataclasses.replace(s, pieces=s.pieces[:q] + s.pieces[q + 1:])]
                            + p.snips[j + 1:])
    for k in reversed(range(len(p.steps) - 1)):
        yield p.replace(steps=p.steps[:k] + p.steps[k + 1:])
    def plain(st):
        return dataclasses.replace(st, code=PLAIN_CALL.sub(r"(mk((2, 3), 'float32', 0), \1, A)", st.code))
    yield p.replace(steps=[plain(st) if st.kind == "call" else st for st in p.steps])  # all at once, then each
    for k, st in enumerate(p.steps):
        if st.kind == "call":
            yield p.replace(steps=p.steps[:k] + [plain(st)] + p.steps[k + 1:])
    yield p.replace(ret="out")


def minimize(prog, found, check, budget_s=20.0):
    """Shrink the program while it still fails the same way (greedy, until no shrink keeps it failing)."""
    cat, deadline = found[0], time.time() + budget_s

    def trim(p, k):  # drop what follows the failing step, and mutations whose snippet is gone
        uids = {s.uid for s in p.snips}
        return p.replace(steps=[s for s in p.steps[:k + 1] if s.owner is None or s.owner in uids])

    cur, changed = trim(prog, found[1]), True
    while changed and time.time() < deadline:
        changed = False
        for cand in shrinks(cur):
            cand = trim(cand, len(cand.steps))
            if time.time() > deadline or cand.source() == cur.source():
                continue
            r = check(cand)
            if r and r[0] == cat:
                cur, found, changed = trim(cand, r[1]), r, True
                break
    return cur, found


def report(cat, i, seed, prog, found):
    _, step, desc = found
    st = prog.steps[step]
    what = {None: "call", "no_grad": "call under torch.no_grad()", "kw": "call fn(x, n=n, c=c)"}[st.ctx] \
        if st.kind == "call" else "mutation"
    return (f"=== {cat.upper()}: program {i} (seed {seed}), kind {prog.kind}, families "
            f"{','.join(s.family for s in prog.snips)} ===\n{prog.source()}\n"
            f"--- the steps run in order (STEPS); step {step} (_s{step}, a {what}) differs "
            f"(#k numbers mutable objects in the order met, #0 is the input x):\n{desc}")


def signature(cat, prog):
    return cat + ":" + "+".join(sorted(t for s in prog.snips for t, _, _ in s.pieces) or ["(no body)"])


def make_wrap(backend, self_check):
    if self_check:
        return lambda t: t
    import pydynamo
    return lambda t: pydynamo.optimize(backend)(t)


# ---------------------------------------------------------------- workers (subprocesses) ------

def emit(obj):
    os.write(EMIT_FD, (json.dumps(obj) + "\n").encode())


def worker_programs(a):
    import logging
    import warnings
    warnings.simplefilter("ignore")
    internal = []
    handler = logging.Handler()
    handler.emit = lambda rec: internal.append(rec)
    logging.getLogger("pydynamo.errors").addHandler(handler)
    logging.getLogger("pydynamo.errors").propagate = False
    check = Checker(a.tmp, make_wrap(a.backend, a.self_check), a.backend == "eager")
    i = a.start
    while time.time() < a.deadline and (a.only is None or i == a.only):
        emit({"start": i})
        prog = gen_program(program_seed(a.seed, i))
        internal.clear()
        calls0 = check.calls
        found = check(prog)
        msg = {"done": i, "calls": check.calls - calls0, "internal": len(internal)}
        if internal:
            exc = internal[0].exc_info[1] if internal[0].exc_info else None
            msg["internal_msg"] = f"{type(exc).__name__}: {exc}"[:200] if exc else internal[0].getMessage()
        if found:
            mprog, mfound = minimize(prog, found, check, a.minimize_s)
            msg.update(cat=found[0], sig=signature(found[0], mprog), source=mprog.source(),
                       report=report(found[0], i, a.seed, mprog, mfound))
        emit(msg)
        i += 1


THREAD_SRC = '''import torch
''' + MK_SRC + '''


def helper(t, k):
    return t * k if k > 1 else t + 1


def fn(x, n):
    out = []
    if x.dtype == torch.float64:
        x = x * 2
    elif x.is_floating_point():
        x = x + 1
    out.append(tuple(x.shape))
    if x.is_contiguous():
        out.append(x.view(-1)[:3])
    else:
        out.append(x.reshape(-1)[:3] * 2)
    if x.requires_grad:
        out.append(x.sum() * n)
    for i in range(n):
        x = x + i
    out.append(helper(x, n))
    if (x != 0).sum() > 3:
        out.append(x.ndim)
    out.append(x.stride())
    return out


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)
        self.scale = 2

    def forward(self, x):
        return self.lin(x) * self.scale
'''


def load_thread_src(tmp):
    path = os.path.join(tmp, "soak_threads.py")
    with open(path, "w") as f:
        f.write(THREAD_SRC)
    ns = {"__name__": "fuzzprog"}
    exec(compile(THREAD_SRC, path, "exec"), ns)
    return ns


def thread_inputs(ns):
    specs = [((2, 3), "float32", "contig", False), ((3, 4), "float32", "t", False),
             ((2, 3), "float64", "contig", True), ((4,), "int64", "contig", False),
             ((2, 3, 4), "float32", "slice", True), ((3, 4), "float16", "contig", False),
             ((1, 4), "bool", "contig", False), ((4, 1), "float32", "contig", False)]
    return [(ns["mk"](sh, dt, k, lay, rg=rg), k % 4) for k, (sh, dt, lay, rg) in enumerate(specs)]


def worker_threads(a):
    import pydynamo
    wrap = make_wrap(a.backend, a.self_check)
    ns = load_thread_src(a.tmp)
    fn, inputs = ns["fn"], thread_inputs(ns)
    refs = [attempt(lambda: fn(*args)) for args in inputs]
    compiled, off = wrap(fn), (fn if a.self_check else pydynamo.disable(fn))
    stats = {"wrong": 0, "calls": 0, "first": None}
    lock = threading.Lock()

    def work(tid, f):  # threads 0-3 call the compiled function, thread 4 the one with pydynamo off
        rng, calls, wrong = random.Random(a.seed * 31 + tid), 0, 0
        while time.time() < a.deadline or calls < 25:
            k = rng.randrange(len(inputs))
            d = compare(attempt(lambda: f(*inputs[k])), refs[k], a.backend == "eager")
            calls, wrong = calls + 1, wrong + bool(d)
            if d and stats["first"] is None:
                stats["first"] = f"thread {tid}, input {k}: {d}"
        with lock:
            stats["calls"] += calls
            stats["wrong"] += wrong

    threads = [threading.Thread(target=work, args=(t, compiled if t < 4 else off)) for t in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    pydynamo.reset()
    emit(stats)


def rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def worker_soak(a):
    """Compile / reset cycles with cache hits and recompiles; growth measured after a warm-up."""
    import collections
    import gc
    import warnings
    import weakref
    import pydynamo
    warnings.simplefilter("ignore")
    wrap = make_wrap(a.backend, a.self_check)
    ns = load_thread_src(a.tmp)
    inputs, x4 = thread_inputs(ns), ns["mk"]((2, 4), "float32", 7)
    progs = [gen_program(program_seed(a.seed, 10**6 + k)) for k in range(2)]
    paths = [os.path.join(a.tmp, f"soak_{k}.py") for k in range(len(progs))]
    for p, path in zip(progs, paths):
        with open(path, "w") as f:
            f.write(p.source())

    def census():
        gc.collect()
        return rss_mb(), collections.Counter(type(o).__qualname__ for o in gc.get_objects())

    start, cycles, base = time.time(), 0, None
    warm_until = start + (a.deadline - start) * 0.3
    while not (base and time.time() > a.deadline and cycles - base[2] >= 3):  # at least 3 measured cycles
        f = wrap(ns["fn"])
        for j in range(20):
            f(*inputs[j % 2])  # two entries, then cache hits
        f(*inputs[2 + cycles % 6])  # a recompile (sizes become symbolic)
        wrap(ns["Net"]())(x4)
        if cycles % 4 == 0:
            for p, path in zip(progs, paths):
                run_side(p.source(), path, wrap)
        pydynamo.reset()
        cycles += 1
        if base is None and time.time() > warm_until and cycles >= 3:
            base = census() + (cycles,)
    end = census()
    grew = end[1] - base[1]
    # a model deleted after compiling is freed (without a reset; else say whether a reset frees it)
    net = ns["Net"]()
    ref = weakref.ref(net)
    cnet = wrap(net)
    cnet(x4)
    cnet(x4)
    del net, cnet
    gc.collect()
    model = "freed" if ref() is None else "kept alive"
    if ref() is not None:
        pydynamo.reset()
        gc.collect()
        model += "; freed by pydynamo.reset()" if ref() is None else "; still alive after pydynamo.reset()"
    emit({"cycles": cycles, "measured_cycles": cycles - base[2], "rss0": base[0], "rss1": end[0],
          "objs": sum(end[1].values()) - sum(base[1].values()), "top": grew.most_common(4), "model": model})


# ---------------------------------------------------------------- parent --------------------

def spawn(part, a, start, deadline, on_msg=lambda m: None):
    """Run a worker to its end, passing each message it sends to on_msg as it comes; returns
    (exit status, its messages, its stderr's tail, why it was killed)."""
    with tempfile.TemporaryDirectory(prefix="pydynamo-fuzz-") as tmp, tempfile.TemporaryFile() as err:
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", part, "--seed", str(a.seed), "--backend",
               a.backend, "--start", str(start), "--deadline", repr(deadline), "--minimize-s", str(a.minimize_s),
               "--tmp", tmp] + ["--self-check"] * a.self_check + (["--only", str(a.only)] if a.only is not None else [])
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err)
        msgs, last = [], [time.time()]

        def read():
            for line in proc.stdout:
                msgs.append(json.loads(line))
                last[0] = time.time()
                on_msg(msgs[-1])
        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        grace, killed = 60 + a.minimize_s, None
        while proc.poll() is None:  # a program that makes no progress for `grace` s is a hang
            time.sleep(0.1)
            if time.time() > (last[0] if part == "programs" else deadline) + grace:
                killed = f"killed: no progress for {grace:.0f} s"
                proc.kill()
                proc.wait()
        reader.join()
        err.seek(0)
        return proc.returncode, msgs, err.read().decode(errors="replace")[-3000:], killed


def run_programs(a, deadline, totals):
    """Programs in workers until the deadline; a worker that dies is counted and the next one starts
    after the program it died in. Each new kind of finding is printed as it comes."""
    seen, shown = {}, [time.time()]

    def on_msg(m):
        if "done" not in m:
            return
        for key in ("programs", "calls", "internal"):
            totals[key] += 1 if key == "programs" else m[key]
        if m.get("internal_msg"):
            seen.setdefault("internal:" + m["internal_msg"].split(":")[0],
                            [0, f"{m['internal_msg']} (program {m['done']})"])[0] += 1
        if m.get("cat"):
            totals[m["cat"]] += 1
            entry = seen.setdefault(m["sig"], [0, None])
            entry[0] += 1
            if entry[0] == 1:
                print(m["report"] + "\n", flush=True)
                if a.save:
                    os.makedirs(a.save, exist_ok=True)
                    with open(os.path.join(a.save, f"{m['cat']}_{m['done']}.py"), "w") as f:
                        f.write(f"# {m['sig']}\n" + m["source"])
        if time.time() - shown[0] > 10:
            shown[0] = time.time()
            print(f"[programs] {totals['programs']} programs, {totals['calls']} calls, wrong={totals['wrong']} "
                  f"raised={totals['raised']} crashed={totals['crashed']}", flush=True)

    start = a.only or 0
    while time.time() < deadline:
        rc, msgs, tail, killed = spawn("programs", a, start, deadline, on_msg)
        started = [m["start"] for m in msgs if "start" in m]
        if rc == 0 and not (started and not msgs[-1].get("done") == started[-1]):
            break  # the worker reached the deadline
        if not started:
            raise SystemExit(f"fuzz: worker failed before running a program (exit status {rc}):\n{tail}")
        totals["crashed"] += 1
        print(f"=== CRASHED: program {started[-1]} (seed {a.seed}), worker exit status {rc} {killed or ''} ===\n"
              f"{gen_program(program_seed(a.seed, started[-1])).source()}\n--- worker stderr (tail):\n{tail}\n",
              flush=True)
        if a.only is not None:
            break
        start = started[-1] + 1
    print(f"[programs] {totals['programs']} programs, {totals['calls']} calls, "
          f"{totals['internal']} internal compile errors (those frames ran eagerly)")
    for sig, (count, msg) in sorted(seen.items(), key=lambda kv: -kv[1][0]):
        print(f"  {count:4d} x {sig}" + (f"  e.g. {msg}" if msg else ""))


def run_all(a):
    """The whole run; returns the totals (also printed)."""
    t0 = time.time()
    parts = [p for p, on in (("soak", not a.no_soak), ("threads", not a.no_threads)) if on]
    share = {"soak": 0.15, "threads": 0.15}
    prog_end = t0 + a.budget * (1 - sum(share[p] for p in parts))
    totals = dict(programs=0, calls=0, internal=0, wrong=0, raised=0, crashed=0, threads_wrong=0, soak_findings=0)
    run_programs(a, prog_end, totals)
    if "soak" in parts:
        rc, msgs, tail, killed = spawn("soak", a, 0, time.time() + a.budget * share["soak"])
        if rc or not msgs:
            totals["crashed"] += 1
            print(f"soak: worker died (exit status {rc} {killed or ''})\n{tail}")
        else:
            s = msgs[-1]
            growth, per = (s["rss1"] - s["rss0"]) / s["rss0"] * 100, s["objs"] / max(1, s["measured_cycles"])
            print(f"soak: rss growth {growth:.1f}% ({s['rss0']:.0f} MB -> {s['rss1']:.0f} MB), live objects "
                  f"{s['objs']:+d} ({per:.0f} per cycle over {s['measured_cycles']} compile/reset cycles after "
                  f"{s['cycles'] - s['measured_cycles']} warm-up ones; most grown: "
                  f"{', '.join(f'{k} {v:+d}' for k, v in s['top']) or 'none'})")
            print(f"soak: a compiled model deleted: {s['model']}")
            totals.update(soak=s, soak_growth=growth)
            totals["soak_findings"] = int(s["model"] != "freed") + int(growth > 10) + int(per > 100)
    if "threads" in parts:
        rc, msgs, tail, killed = spawn("threads", a, 0, time.time() + a.budget * share["threads"])
        if rc or not msgs:
            totals["crashed"] += 1
            print(f"threads: worker died (exit status {rc} {killed or ''})\n{tail}")
        else:
            s = msgs[-1]
            totals["threads_wrong"], totals["threads_calls"] = s["wrong"], s["calls"]
            print(f"threads: wrong={s['wrong']} ({s['calls']} calls in 5 threads)" +
                  (f"; first: {s['first']}" if s["first"] else ""))
    print(f"wrong={totals['wrong']} raised={totals['raised']} crashed={totals['crashed']}", flush=True)
    return totals


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
        global EMIT_FD
        EMIT_FD = os.dup(1)
        os.dup2(2, 1)  # stray prints go to stderr, the protocol keeps its own fd
        {"programs": worker_programs, "soak": worker_soak, "threads": worker_threads}[a.worker](a)
        return 0
    t = run_all(a)
    return int(any(t[k] for k in ("wrong", "raised", "crashed", "threads_wrong", "soak_findings")))


EMIT_FD = 1

if __name__ == "__main__":
    sys.exit(main())
