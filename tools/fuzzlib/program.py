"""A generated program as data, and its source text. MK_SRC (the input maker `mk`) and PRELUDE
open every program; a Var is a piece of state the program reads and where it lives (a global, the
argument dict, an attribute, `self`, a closure cell, a keyword-only default); a Snip is one feature
family's part of the target's body (setup text, body pieces, mutations, more state to watch); a
Step is a call or a mutation; a Program puts them together and renders the source (the target as a
function, closure, nn.Module or bound method, _watch(), one _sN() per step, STEPS). pick() is the
helper the feature families (families_*.py) share. Pure text: nothing here imports torch.
"""
import dataclasses
import re


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
import math
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


# ---------------------------------------------------------------- for the feature families ----
# The families (families_*.py) each take (rng, snip, place) and fill the snippet: setup text, a Var,
# body pieces, mutations. Body pieces see x (a tensor), n (a Python scalar), c (the argument dict A)
# and `out` (the result).

def pick(rng, snip, templates, k=(1, 3)):
    for tid in sorted(rng.sample(range(len(templates)), min(len(templates), rng.randint(*k)))):
        snip.add(tid, templates[tid])
