"""Test helpers: run a function through pydynamo.translator.convert without the C hook, and a
pure-Python evaluator of guard checks (the C GuardSet does this in production)."""
import builtins
import inspect
import struct
import types
import weakref

import torch

from pydynamo.bytecode_utils import argument_names
from pydynamo.testing import CompileCounter
from pydynamo.translator import convert


def _bind(fn, args, kwargs):
    sig = inspect.signature(fn)
    bound = sig.bind(*args, **kwargs)
    bound.apply_defaults()
    return dict(bound.arguments)


class Compiled:
    """``fn`` compiled on first call like the hook would: convert, then call the new code.

    Each call checks the cached entries' guards (newest first) and recompiles on a miss.
    """

    def __init__(self, fn, backend=None, fullgraph=True):
        self.fn = fn.__func__ if isinstance(fn, types.MethodType) else fn
        self.bound_self = fn.__self__ if isinstance(fn, types.MethodType) else None
        self.backend = backend if backend is not None else CompileCounter()
        self.entries = []  # (checks, new_code)
        self.compiles = 0
        self.fullgraph = fullgraph  # without the hook, resume functions would run uncompiled

    def frame_args(self, args, kwargs):
        if self.bound_self is not None:
            args = (self.bound_self, *args)
        code = self.fn.__code__
        f_locals = _bind(self.fn, args, kwargs)
        slots = [f_locals[n] for n in argument_names(code)]
        return f_locals, slots

    def __call__(self, *args, **kwargs):
        f_locals, slots = self.frame_args(args, kwargs)
        fn = self.fn
        for checks, new_code in self.entries:
            if first_failure(checks, slots, fn.__globals__, builtins.__dict__, fn.__closure__) is None:
                return self._run(new_code, slots)
        new_code, checks = convert(fn.__code__, fn.__globals__, builtins.__dict__, f_locals,
                                   fn.__closure__, self.backend, fullgraph=self.fullgraph)
        self.compiles += 1
        self.entries.insert(0, (checks, new_code))
        assert first_failure(checks, slots, fn.__globals__, builtins.__dict__, fn.__closure__) is None, \
            "guards fail on the inputs they were made from"
        return self._run(new_code, slots)

    def _run(self, new_code, slots):
        fn = self.fn
        new_fn = types.FunctionType(new_code, fn.__globals__, fn.__name__, None, fn.__closure__)
        code = fn.__code__
        npos = code.co_argcount
        args = list(slots[:npos])
        kwargs = {n: slots[i] for i, n in enumerate(argument_names(code))
                  if npos <= i < npos + code.co_kwonlyargcount}
        i = npos + code.co_kwonlyargcount
        if code.co_flags & 0x04:
            args += list(slots[i])
            i += 1
        if code.co_flags & 0x08:
            kwargs.update(slots[i])
        return new_fn(*args, **kwargs)

    @property
    def checks(self):
        return self.entries[0][0] if self.entries else []

    def guard_texts(self):
        return [c.text for c in self.checks]


def compile_fn(fn, backend=None, fullgraph=True):
    return Compiled(fn, backend, fullgraph)


# ---- a pure-Python GuardSet, mirroring _C.pyi --------------------------------------------------

_MISSING = object()


def _read(steps, args, f_globals, f_builtins, closure):
    root, key = steps[0]
    if root == "L":
        value = args[key]
    elif root == "G":
        value = f_globals[key]
    elif root == "B":
        value = f_builtins[key]
    elif root == "C":
        value = closure[key].cell_contents
    elif root == "K":
        value = key
    else:
        raise AssertionError(root)
    for kind, arg in steps[1:]:
        if kind == "t":  # _PyType_Lookup: the raw attribute found along the class's MRO
            value = next(c.__dict__[arg] for c in value.__mro__ if arg in c.__dict__)
        elif kind == "g":
            value = object.__getattribute__(value, arg)
        elif kind == "d":  # dict's own entry (a subclass's __getitem__ / __missing__ not run)
            if not isinstance(value, dict) or not dict.__contains__(value, arg):
                raise KeyError(arg)
            value = dict.get(value, arg)
        elif kind == "D":  # dict's own entry for the referent of a weakref key
            key = arg()
            if key is None or not isinstance(value, dict) or not dict.__contains__(value, key):
                raise KeyError(arg)
            value = dict.get(value, key)
        elif kind == "w":
            value = value()
        else:
            value = getattr(value, arg) if kind == "a" else value[arg]
    return value


def _equals(a, b):
    if type(a) is not type(b):
        return False
    if isinstance(a, tuple):
        return len(a) == len(b) and all(_equals(x, y) for x, y in zip(a, b))
    if isinstance(a, float):
        return struct.pack("<d", a) == struct.pack("<d", b)
    return a == b


def check_one(check, args, f_globals, f_builtins, closure):
    steps, kind, value, _ = check
    if kind == "ALIASING":
        paths, groups, *overlap = value
        vals = [_read(p, args, f_globals, f_builtins, closure) for p in paths]
        return all((vals[i] is vals[j]) == (groups[i] == groups[j])
                   for i in range(len(vals)) for j in range(i)) and \
            all(fn(tuple(vals)) for fn in overlap)
    if not steps:
        return bool(value())
    try:
        v = _read(steps, args, f_globals, f_builtins, closure)
    except Exception:
        return kind == "NOT_PRESENT"
    if kind == "NOT_PRESENT":
        return False
    if kind == "TYPE_MATCH":
        return type(v) is value
    if kind == "ID_MATCH":
        return v is value
    if kind == "EQUALS_MATCH":
        return _equals(v, value)
    if kind == "TENSOR_MATCH":
        t, dtype, device, layout, requires_grad, sizes, strides, *flags = value
        inference, conj, neg = flags or (False, False, False)  # left out: a plain tensor
        return (type(v) is t and v.dtype == dtype and v.device == device and v.layout == layout
                and v.requires_grad == requires_grad
                and (v.is_inference(), v.is_conj(), v.is_neg()) == (inference, conj, neg)
                and all(a is None or a == b for a, b in zip(sizes, v.size())) and len(sizes) == v.dim()
                and all(a is None or a == b for a, b in zip(strides, v.stride())))
    if kind == "DICT_KEYS":
        return type(v) is dict and tuple(v.keys()) == value
    if kind == "LEN":
        return len(v) == value
    if kind == "EMPTY_ATTRS":
        return all(len(getattr(v, name)) == 0 for name in value)
    if kind == "PREDICATE":
        return bool(value(v))
    raise AssertionError(kind)


def first_failure(checks, args, f_globals, f_builtins=None, closure=None):
    f_builtins = builtins.__dict__ if f_builtins is None else f_builtins
    for check in checks:
        if not check_one(check, args, f_globals, f_builtins, closure):
            return check.text
    return None
