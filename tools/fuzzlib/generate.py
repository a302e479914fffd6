"""Program generation: the table of feature families (FAMILIES, in a fixed order that the random
choices depend on), the input specs (shapes, dtypes, layouts, requires_grad / inference / conj /
Parameter) and how a call's input is perturbed one property at a time, and gen_program(seed):
program number `seed`, deterministic, pure text (no torch needed).
"""
import random

from .families_cobjects import fam_cattrs
from .families_datamodel import fam_config, fam_dispatch, fam_newobj, fam_pystd, fam_records
from .families_python import (fam_alias, fam_builtins, fam_dict, fam_dunder, fam_exc, fam_helper, fam_iter, fam_list,
                              fam_methods, fam_namedtuple, fam_object, fam_raise, fam_scalar)
from .families_flags import fam_flags
from .families_breaks import fam_rebuild
from .families_sweep import fam_breadth3, fam_rawdicts
from .families_numbers import fam_counters, fam_optim
from .families_autograd import fam_autograd
from .families_subclasses import fam_subclass
from .families_hops import fam_hops
from .families_inputs import fam_inputs
from .families_sizes import fam_sizes
from .families_state import fam_caches, fam_torchapis
from .families_tensor import (fam_break, fam_dyn, fam_hooks, fam_inplace, fam_modes, fam_module, fam_numpy,
                              fam_tattrs, fam_tensor, fam_tmethods, fam_tstate)
from .program import Program, Snip, Step, Var


FAMILIES = {f.__name__[4:]: f for f in [fam_tensor, fam_scalar, fam_object, fam_list, fam_dict, fam_namedtuple,
                                         fam_iter, fam_modes, fam_raise, fam_break, fam_module, fam_tmethods,
                                         fam_tstate, fam_inplace, fam_builtins, fam_dunder, fam_helper, fam_alias,
                                         fam_exc, fam_dyn, fam_methods, fam_newobj, fam_config, fam_records,
                                         fam_pystd, fam_dispatch, fam_hooks, fam_tattrs, fam_numpy, fam_sizes, fam_torchapis, fam_caches, fam_flags, fam_cattrs, fam_hops,
                                         fam_rebuild, fam_rawdicts, fam_breadth3,
                                         fam_counters, fam_optim, fam_subclass, fam_autograd, fam_inputs]}
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
        ctx = rng.choice(["no_grad", "kw", "alt", "strict"]) if rng.random() < 0.3 else None
        steps.append(Step("call", f"({render(spec)}, {n}, A)", None, ctx))
    return Program(kind, snips, steps, rng.choice(["out", "out", "tuple(out)", "{'out': out, 'x': x}", "(x, out)"]),
                   rng.random() < 0.8)


def program_seed(seed, i):
    return seed * 1_000_003 + i
