"""Running and comparing, in one process: freeze() snapshots a value (mutable objects numbered in
the order met, so identity is compared too), compare() and pretty(), run_side() runs a program's
steps with its target wrapped (eagerly: the identity; compiled: pydynamo.optimize), diff() finds
the first step where the two runs differ, Checker does both runs of a program, shrinks() and
minimize() make a failing program smaller while it still fails, report() and signature() describe
a finding. torch and pydynamo are imported inside the functions, so the parent never loads them.
"""
import collections
import contextlib
import dataclasses
import os
import re
import time


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
        # a jagged NestedTensor's nested int names its offsets object: each run makes its own
        shape = tuple("ragged" if isinstance(s, torch.SymInt) else s for s in v.shape)
        return ("T", tname(t), str(v.dtype), shape, v.requires_grad, ident(), d)
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
        if type(a).__name__ != type(b).__name__:
            return f"tensor classes differ: {type(a).__name__} != {type(b).__name__}"
        if hasattr(a, "__tensor_flatten__"):  # a wrapper subclass: its inner tensors
            names = a.__tensor_flatten__()[0]
            if names != b.__tensor_flatten__()[0]:
                return "wrapper subclass flattens differently"
            for name in names:
                d = compare(getattr(a, name), getattr(b, name), exact)
                if d:
                    return d
            return None
        if type(a) is not torch.Tensor:  # each run's own subclass (the programs' namespaces differ)
            with torch._C.DisableTorchFunctionSubclass():
                a, b = a.as_subclass(torch.Tensor), b.as_subclass(torch.Tensor)
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
        if isinstance(f, torch.Tensor) and hasattr(f, "__tensor_flatten__"):  # a wrapper: its inner tensors
            return f"{type(f).__name__}(" + ", ".join(f"{n}={p(getattr(f, n))}" for n in f.__tensor_flatten__()[0]) + ")"
        if isinstance(f, torch.Tensor):
            with torch._C.DisableTorchFunctionSubclass():
                return repr(f.as_subclass(torch.Tensor).tolist())
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
    message), its state what _watch() returns, the input, the grad mode, the default dtype, the
    gradients of the result's sum with respect to x and the module's parameters, and two checks
    of the compiled side that are 0 when eager: graphs run that another backend or option set
    compiled (a call "alt" goes through a second backend, "strict" through fullgraph=True, and
    each graph says which compiled it), and cache entries made for frames outside the program."""
    import sys
    import types
    import torch
    # a module of its own in sys.modules: torch's eager higher-order ops (torch.cond...) compile
    # their bodies with torch._dynamo, which looks the function's module up there
    module = types.ModuleType("fuzzprog")
    module.__file__ = path
    sys.modules["fuzzprog"] = module
    ns = module.__dict__
    from .families_flags import flags_state, restore_flags
    flags = flags_state()
    torch.manual_seed(0)
    exec(compile(src, path, "exec"), ns)
    variants = getattr(wrap, "variants", lambda t: {})(ns["TARGET"])
    target, results = wrap(ns["TARGET"]), []
    params = list(ns["m"].parameters()) if isinstance(ns.get("m"), torch.nn.Module) else []
    entries = EntryWatch(path) if variants else None
    try:
        for k, (kind, fn, ctx) in enumerate(ns["STEPS"]):
            torch.manual_seed(k + 1)
            if kind == "mut":
                results.append(("mut", attempt(fn), None))
                continue
            args = fn()
            f = variants.get(ctx, target)
            call = (lambda: f(args[0], n=args[1], c=args[2])) if ctx == "kw" else (lambda: f(*args))
            if ctx == "strict":
                call = strict_or_eager(f, ns["TARGET"], args)
            GRAPH_LOG.clear()
            with torch.no_grad() if ctx == "no_grad" else contextlib.nullcontext(), entries or contextlib.nullcontext():
                res = attempt(call, keep=True)
            foreign = sum(t != {"alt": "alt", "strict": "strict"}.get(ctx, "main") for t in GRAPH_LOG) if variants else 0
            grads = ("ok", None)
            if res[0] == "ok":
                outs = [t for t in flatten(res[1]) if isinstance(t, torch.Tensor) and t.requires_grad]
                wrt = [t for t in [args[0]] + params if t.requires_grad]
                if outs and wrt:
                    loss = lambda: sum((t.real if t.is_complex() else t).sum() for t in outs)  # noqa: E731
                    grads = attempt(lambda: torch.autograd.grad(loss(), wrt, allow_unused=True, retain_graph=True),
                                    keep=True)
            memo = {id(args[0]): (0, args[0])}
            state = [ns["_watch"](), args[0], torch.is_grad_enabled(), torch.get_default_dtype(),
                     ("graphs of another backend or option set", foreign),
                     ("entries outside the program", entries.take() if entries else [])]
            results.append(("call", (res[0], safe_freeze(res[1], memo)) if res[0] == "ok" else res,
                            safe_freeze([state, grads[1:]], memo)))
    finally:
        torch.set_default_dtype(torch.float32)
        torch.set_grad_enabled(True)
        restore_flags(flags)
    return results


def strict_or_eager(strict, plain, args):
    """A fullgraph=True call that the compiler may refuse (a graph break: Unsupported); then the
    plain target is called, as the user would, so the result still compares with eager."""
    def call():
        from pydynamo.exc import Unsupported
        try:
            return strict(*args)
        except Unsupported:
            return plain(*args)
    return call


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
    what = {None: "call", "no_grad": "call under torch.no_grad()", "kw": "call fn(x, n=n, c=c)",
            "alt": "call compiled with a second backend", "strict": "call compiled with fullgraph=True"}[st.ctx] \
        if st.kind == "call" else "mutation"
    return (f"=== {cat.upper()}: program {i} (seed {seed}), kind {prog.kind}, families "
            f"{','.join(s.family for s in prog.snips)} ===\n{prog.source()}\n"
            f"--- the steps run in order (STEPS); step {step} (_s{step}, a {what}) differs "
            f"(#k numbers mutable objects in the order met, #0 is the input x):\n{desc}")


def signature(cat, prog):
    return cat + ":" + "+".join(sorted(t for s in prog.snips for t, _, _ in s.pieces) or ["(no body)"])


# Which compile's graphs ran during the current call ("main", "alt", "strict"): see tagged().
GRAPH_LOG = []


def tagged(backend, tag):
    """``backend`` whose compiled graphs log ``tag`` each time they run."""
    from pydynamo.backends import lookup_backend
    real = lookup_backend(backend)

    def compile_graph(gm, example_inputs, **kwargs):
        fn = real(gm, example_inputs, **kwargs)

        def run(*args):
            GRAPH_LOG.append(tag)
            return fn(*args)
        run._boxed_call = getattr(fn, "_boxed_call", False)
        return run
    return compile_graph


class EntryWatch:
    """The cache entries made while it is entered whose code is outside the programs' files
    (torch's own frames, or code generated for it, compiled as entries). A function of an
    earlier program (of the same worker: a shrinking candidate's) is a program's too."""

    def __init__(self, path):
        self.dir, self.found = os.path.dirname(path) + os.sep, []

    def on_entry(self, code, guards, seconds):
        if not code.co_filename.startswith(self.dir) and code.co_filename != "<string>":
            self.found.append(f"{code.co_filename}:{code.co_firstlineno} {code.co_qualname}")

    def on_break(self, exc):
        pass

    def __enter__(self):
        from pydynamo import convert_frame
        convert_frame.observers.append(self)

    def __exit__(self, *exc):
        from pydynamo import convert_frame
        convert_frame.observers.remove(self)

    def take(self):
        found, self.found = self.found[:3], []
        return found


def make_wrap(backend, self_check):
    if self_check:
        return lambda t: t
    import pydynamo
    main, alt, strict = tagged(backend, "main"), tagged(backend, "alt"), tagged(backend, "strict")

    def wrap(t):
        return pydynamo.optimize(main)(t)
    # the same target compiled with a second backend, and with fullgraph=True: neither may be served
    # what another compiled (made once per program: one backend object each, as a user would)
    wrap.variants = lambda t: {"alt": pydynamo.optimize(alt)(t), "strict": pydynamo.optimize(strict, fullgraph=True)(t)}
    return wrap
