"""Guards: the conditions under which a compiled entry may be reused.

A check is ``(steps, kind, value, text)`` exactly as ``_C.GuardSet.add`` takes it (see _C.pyi):
``steps`` reads a value from the frame (Source.steps()), ``kind`` says how to test it, ``text``
is how it prints in logs and recompile reasons. GuardBuilder has one UPPER_CASE method per kind;
it deduplicates by (source, kind) so a value read many times is checked once.
"""
import math
import struct
from typing import Any, NamedTuple

import torch

from . import _C
from .source import Source

# nn.Module.__getattr__ only looks the name up in these instance-dict tables, in order: guards
# reading a submodule, parameter or buffer by attribute do the same lookup in C instead of
# calling it (the check still runs the real one if the tables are not plain dicts).
_C.set_table_getattr(torch.nn.Module.__getattr__, ("_parameters", "_buffers", "_modules"))

_EQUALS_TYPES = (type(None), bool, int, float, str)


class Check(NamedTuple):
    steps: tuple
    kind: str
    value: Any
    text: str


def _describe(obj):
    try:
        return _describe_object(obj)
    except Exception:  # noqa: BLE001 - a module's __getattr__ may raise anything
        return f"<{type(obj).__name__} object at {id(obj):#x}>"


def _describe_object(obj):
    if isinstance(obj, type):
        return f"<class {obj.__module__}.{obj.__qualname__}>"
    if isinstance(obj, type(torch)):  # (first: a module's own __getattr__ would run for __qualname__)
        return f"<module {vars(obj).get('__name__', '?')}>"
    if hasattr(obj, "__qualname__"):
        return f"<{type(obj).__name__} {getattr(obj, '__module__', '?')}.{obj.__qualname__}>"
    return f"<{type(obj).__name__} object at {id(obj):#x}>"


def equals_supported(value):
    """Can EQUALS_MATCH (in C) check this value: None, bool, int, float, str, tuples of these."""
    if type(value) is tuple:
        return all(equals_supported(v) for v in value)
    return type(value) in _EQUALS_TYPES


def _same_bits(a, b):
    if isinstance(a, float) and isinstance(b, float):
        return struct.pack("<d", a) == struct.pack("<d", b)
    return a == b


class EqualsPredicate:
    """Equality for constants the C EQUALS_MATCH does not cover (devices, Sizes, enums...)."""

    def __init__(self, value):
        self.value = value

    def __call__(self, v):
        if isinstance(self.value, float) and math.isnan(self.value):
            return type(v) is float and math.isnan(v)
        return type(v) is type(self.value) and v == self.value

    def __repr__(self):
        return f"== {self.value!r}"


_MODULE_HOOK_DICTS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")


def no_global_module_hooks():
    m = torch.nn.modules.module
    return not (m._global_forward_hooks or m._global_forward_pre_hooks
                or m._global_backward_hooks or m._global_backward_pre_hooks
                or getattr(m, "_global_forward_hooks_always_called", None))


class _GradModeIs:
    def __init__(self, enabled):
        self.enabled = enabled

    def __call__(self):
        return torch.is_grad_enabled() is self.enabled


class _NumpyErrstateIs:
    def __init__(self, state):
        self.state = state

    def __call__(self):
        import numpy
        return numpy.geterr() == self.state


class _DefaultDtypeIs:
    def __init__(self, dtype):
        self.dtype = dtype

    def __call__(self):
        return torch.get_default_dtype() is self.dtype


def _autocast_devices():
    devices = ["cpu", "cuda", "xpu", "mps", "hpu", "mtia", "maia", "xla", "ipu",
               torch._C._get_privateuse1_backend_name()]
    found = []
    for d in dict.fromkeys(devices):
        try:
            if torch.amp.is_autocast_available(d):
                torch.get_autocast_dtype(d)
                found.append(d)
        except Exception:  # noqa: BLE001 - a device this build does not know
            pass
    return tuple(found)


AUTOCAST_DEVICES = _autocast_devices()


def _present(device):
    if device == "cpu":
        return True
    module = getattr(torch, device, None)
    try:
        return bool(module.is_available()) if module is not None else False
    except Exception:  # noqa: BLE001
        return False


_ambient_devices = []


def ambient_autocast_devices():
    """Devices whose tensors this process can hold: their autocast state changes what ops
    compute, guarded at every frame's entry (AUTOCAST); another device's is guarded where read
    (ctx.py). Found at the first compile (asking CUDA at import would initialize it)."""
    if not _ambient_devices:
        _ambient_devices.append(tuple(d for d in AUTOCAST_DEVICES if _present(d)))
    return _ambient_devices[0]


def autocast_state():
    """(device, dtype) of every device of ambient_autocast_devices() with autocast enabled."""
    return tuple((d, torch.get_autocast_dtype(d)) for d in ambient_autocast_devices()
                 if torch.is_autocast_enabled(d))


def _no_autocast(any_enabled=torch._C._is_any_autocast_enabled):
    return not any_enabled()


class _AutocastIs:
    def __init__(self, state):
        self.state = state

    def __call__(self):
        return autocast_state() == self.state


def _inference_mode_off(enabled=torch.is_inference_mode_enabled):
    return not enabled()


def _no_torch_function_mode(enabled=torch._C._is_torch_function_mode_enabled):
    return not enabled()


def device_modes():
    """The devices of the torch function modes active now, innermost last, or None if one of
    them is not a DeviceContext (``torch.set_default_device``, ``with torch.device(...)``)."""
    from torch.overrides import _get_current_function_mode_stack
    from torch.utils._device import DeviceContext
    modes = _get_current_function_mode_stack()
    if not all(type(m) is DeviceContext for m in modes):
        return None
    return tuple(m.device for m in modes)


class _DeviceModesAre:
    def __init__(self, devices):
        self.devices = devices

    def __call__(self):
        return device_modes() == self.devices


def _flag_readers():
    """name -> reader of the flags that change what a compiling backend makes of a graph although
    the graph's ops do not read them when it runs: AOTAutograd records deterministic mode,
    Inductor's lowerings pick deterministic or TF32 / reduced-precision kernels and oneDNN
    fusions, its CPU code is generated for a thread count. CUDA's flags only where CUDA is present
    (they change nothing else). Each reader is one C call where it can be: they run at every hit."""
    C = torch._C
    readers = {"deterministic": C._get_deterministic_algorithms,
               "warn_only": C._get_deterministic_algorithms_warn_only,
               "fill_uninitialized_memory": C._get_deterministic_fill_uninitialized_memory,
               "float32_matmul_precision": _float32_matmul_precision,
               "mkldnn": C._get_mkldnn_enabled,
               "num_threads": torch.get_num_threads}
    if _present("cuda"):
        readers.update({"cuda_matmul": _fp32_precision("cuda", "matmul"),
                        "cuda_conv": _fp32_precision("cuda", "conv"),
                        "fp16_reduction": C._get_cublas_allow_fp16_reduced_precision_reduction,
                        "bf16_reduction": C._get_cublas_allow_bf16_reduced_precision_reduction,
                        "cudnn": C._get_cudnn_enabled, "cudnn_benchmark": C._get_cudnn_benchmark,
                        "cudnn_deterministic": C._get_cudnn_deterministic})
    return readers


def _float32_matmul_precision(get=torch._C._get_float32_matmul_precision):
    try:
        return get()
    except RuntimeError:  # the legacy and the per-backend APIs mixed: ask the backends
        return tuple(torch._C._get_fp32_precision_getter(b, "matmul") for b in ("cuda", "mkldnn"))


def _direct(read):
    """The C getter itself where it answers now (no Python frame at each hit): if it raises at a
    later hit, the guard fails, and the recompile's guard is this wrapper."""
    if read is _float32_matmul_precision:
        try:
            torch._C._get_float32_matmul_precision()
            return torch._C._get_float32_matmul_precision
        except RuntimeError:
            pass
    return read


def _fp32_precision(backend, op):
    return lambda get=torch._C._get_fp32_precision_getter: get(backend, op)


_readers = []


def flag_readers():
    """_flag_readers(), found at the first compile (asking CUDA at import would initialize it)."""
    if not _readers:
        _readers.append(_flag_readers())
    return _readers[0]


def _flags_are(readers, values):
    """A predicate: each reader still returns its value. It runs at every hit: written out as one
    expression, ``r0() == v0 and r1() == v1 and ...`` (half the time of a loop over the readers;
    about 0.3 µs for Inductor's six on CPU)."""
    names = {}
    for k, (read, value) in enumerate(zip(readers, values)):
        names[f"r{k}"], names[f"v{k}"] = read, value
    body = " and ".join(f"r{k}() == v{k}" for k in range(len(values))) or "True"
    return eval(f"lambda {', '.join(f'{n}={n}' for n in names)}: {body}", {}, names)


class CallIs:
    """A guard on global state read by a call: ``fn(*args) == value``."""

    def __init__(self, fn, args, value):
        self.fn, self.args, self.value = fn, args, value

    def __call__(self):
        return self.fn(*self.args) == self.value


def memory_range(v):
    """[start, end) of the memory ``v`` (a tensor's storage, an ndarray's bytes) may touch, or None
    when it holds none (empty, no memory at all such as a meta tensor, or an unreadable input)."""
    if v is None:
        return None
    if isinstance(v, torch.Tensor):
        if v.device.type == "meta":
            return None
        storage = v.untyped_storage()
        start, n = storage.data_ptr(), storage.nbytes()
        return (start, start + n) if n else None
    return _ndarray_range(v)


def _ndarray_range(v):
    import numpy
    lo, hi = numpy.lib.array_utils.byte_bounds(v) if hasattr(numpy.lib, "array_utils") else numpy.byte_bounds(v)
    return (lo, hi) if hi > lo else None


def overlapping_pairs(values, changed):
    """The pairs ``(i, j)``, i < j, of ``values`` whose memory ranges intersect, where the graph
    changes at least one of the two (``changed``: a set of indices). A traceable wrapper subclass
    (its storage holds no memory of its own) is the memory of its inner tensors. In C++ where the
    fast tensor module is built (_tensor_guard), else here, with ``__torch_function__`` overrides
    off (reading a storage is an overridable call)."""
    leaves, owner = _memory_leaves(values)
    if owner is not None:
        flat = _overlaps(leaves, {k for k, i in enumerate(owner) if i in changed})
        return frozenset((min(owner[a], owner[b]), max(owner[a], owner[b])) for a, b in flat
                         if owner[a] != owner[b])
    return _overlaps(values, changed)


def _memory_leaves(values):
    """(values, None) when none is a wrapper subclass; else the tensors whose memory they are
    (each wrapper subclass replaced by its inner tensors, recursively) and, per leaf, the index of
    the value it came from."""
    if all(type(v) in _PLAIN_TENSORS or not isinstance(v, torch.Tensor) for v in values):
        return values, None
    from torch.utils._python_dispatch import is_traceable_wrapper_subclass
    leaves, owner = [], []

    def add(v, i):
        if isinstance(v, torch.Tensor) and is_traceable_wrapper_subclass(v):
            for name in v.__tensor_flatten__()[0]:
                add(getattr(v, name), i)
        else:
            leaves.append(v)
            owner.append(i)
    with torch._C.DisableTorchFunctionSubclass():
        for i, v in enumerate(values):
            add(v, i)
    return leaves, owner


_PLAIN_TENSORS = (torch.Tensor, torch.nn.Parameter)


def _overlaps(values, changed):
    if _fast_pairs is not None:
        return _fast_pairs(tuple(values), changed, _ndarray_range)
    with torch._C.DisableTorchFunctionSubclass():
        ranges = sorted((r[0], r[1], i) for i, r in ((i, memory_range(v)) for i, v in enumerate(values))
                        if r is not None)
    pairs = set()
    for k, (start, end, i) in enumerate(ranges):
        for start2, _, j in ranges[k + 1:]:
            if start2 >= end:
                break
            if i in changed or j in changed:
                pairs.add((min(i, j), max(i, j)))
    return frozenset(pairs)


try:
    from ._tensor_guard import overlapping_pairs as _fast_pairs
except ImportError:
    _fast_pairs = None


class MemoryOverlap:
    """ALIASING's memory check: the graph changes some inputs in place, and a compiled graph
    (AOTAutograd functionalizes) is only right for the overlaps between those and the other
    inputs it was traced with. Two distinct objects can share memory (``x`` and ``x[0]``, an
    ndarray and its view): this pins which pairs do, by memory range (a shared storage counts as
    overlapping even where the views do not: a miss, never a wrong hit)."""

    def __init__(self, changed, pairs):
        self.changed, self.pairs = frozenset(changed), pairs

    def __call__(self, values):
        return overlapping_pairs(values, self.changed) == self.pairs

    def __repr__(self):
        shown = ", ".join(f"{i}~{j}" for i, j in sorted(self.pairs)) or "none"
        return f"memory overlaps with inputs changed in place ({sorted(self.changed)}) as traced: {shown}"


class GuardBuilder:
    def __init__(self):
        self._checks = {}

    @property
    def checks(self):
        return list(self._checks.values())

    def _add(self, steps, kind, value, text, key=None):
        key = (steps, kind) if key is None else key
        if key not in self._checks:
            self._checks[key] = Check(steps, kind, value, text)

    def add(self, source: Source, kind: str, value=None):
        """Guard ``source`` (whose current value is ``value``) by ``kind``."""
        getattr(self, kind)(source, value)

    # ---- one method per kind ----------------------------------------------------------------

    def TYPE_MATCH(self, source, value):
        t = type(value)
        self._add(source.steps(), "TYPE_MATCH", t, f"type({source.name()}) is {t.__qualname__}")

    def ID_MATCH(self, source, value):
        self._add(source.steps(), "ID_MATCH", value, f"{source.name()} is {_describe(value)}")

    def EQUALS_MATCH(self, source, value):
        if equals_supported(value) and not (isinstance(value, float) and math.isnan(value)):
            self._add(source.steps(), "EQUALS_MATCH", value, f"{source.name()} == {value!r}")
        else:
            self.TYPE_MATCH(source, value)
            self.PREDICATE(source, EqualsPredicate(value), f"{source.name()} == {value!r}")

    def TENSOR_MATCH(self, source, value, sizes=None, strides=None):
        """Everything a trace may read of a tensor input without a guard of its own: its exact
        type, dtype, device, layout, requires_grad, sizes, strides, and the inference, conjugate
        and negative bits (the trace answers ``x.is_inference()`` etc. as constants, and the bits
        change what ops compute). The text names the bits only where set.

        ``sizes`` / ``strides``: what to check (None in a position: any, a symbolic size whose
        facts the SHAPE_ENV check holds); the tensor's own by default."""
        if value.layout is not torch.strided or value.is_nested:
            raise NotImplementedError("only strided tensors are guarded")
        sizes = tuple(value.size()) if sizes is None else sizes
        strides = tuple(value.stride()) if strides is None else strides
        flags = (value.is_inference(), value.is_conj(), value.is_neg())
        info = (type(value), value.dtype, value.device, value.layout, value.requires_grad,
                sizes, strides, *flags)
        shown = lambda ints: "[" + ", ".join("*" if i is None else str(i) for i in ints) + "]"  # noqa: E731
        bits = "".join(f", {name}=True" for name, on in zip(("inference", "conj", "neg"), flags) if on)
        text = (f"{source.name()}: {type(value).__name__}({value.dtype}, {value.device}, "
                f"size={shown(sizes)}, stride={shown(strides)}, requires_grad={value.requires_grad}{bits})")
        self._add(source.steps(), "TENSOR_MATCH", info, text)

    def DICT_KEYS(self, source, value):
        keys = tuple(value.keys())
        self._add(source.steps(), "DICT_KEYS", keys, f"{source.name()}.keys() == {list(keys)!r}")

    def LEN(self, source, value):
        n = len(value)
        self._add(source.steps(), "LEN", n, f"len({source.name()}) == {n}")

    def NOT_PRESENT(self, source, value=None):
        self._add(source.steps(), "NOT_PRESENT", None, f"{source.name()} does not exist")

    def SHAPE_ENV(self, bindings, facts):
        """The symbolic-shape facts (``(program, text)`` pairs over ``bindings``, see shapes.py)."""
        text = "symbolic shapes: " + "; ".join(t for _, t in facts)
        self._add((), "SHAPE_ENV", (bindings, facts), text)

    def PREDICATE(self, source, fn, text):
        steps = source.steps() if source is not None else ()
        self._add(steps, "PREDICATE", fn, text, key=(steps, "PREDICATE", text))

    # ---- global state -----------------------------------------------------------------------

    def GRAD_MODE(self, source=None, value=None):
        enabled = torch.is_grad_enabled()
        self.PREDICATE(None, _GradModeIs(enabled), f"torch.is_grad_enabled() == {enabled}")

    def DEFAULT_DTYPE(self, source=None, value=None):
        dtype = torch.get_default_dtype()
        self.PREDICATE(None, _DefaultDtypeIs(dtype), f"torch.get_default_dtype() == {dtype}")

    def NUMPY_ERRSTATE(self):
        """NumPy's floating-point error handling (``numpy.seterr`` / ``errstate``): a graph of
        torch's NumPy layer never warns nor raises, which is what NumPy does only where every
        error is ignored or warned about; the state is guarded as traced."""
        import numpy
        state = numpy.geterr()
        if any(v in ("raise", "call") for v in state.values()):
            from .exc import Unsupported
            raise Unsupported(f"NumPy code under numpy.seterr({state}): a floating-point error raises or "
                              "calls a handler in NumPy, never in torch's NumPy layer")
        self.PREDICATE(None, _NumpyErrstateIs(state), f"numpy.geterr() == {state}")

    def AUTOCAST(self, source=None, value=None):
        """Which devices have autocast enabled, and their dtypes: ops traced (and compiled) under
        it compute in those dtypes."""
        if not torch._C._is_any_autocast_enabled():
            return self.PREDICATE(None, _no_autocast, "no autocast enabled")
        state = autocast_state()
        shown = ", ".join(f"{d}: {dtype}" for d, dtype in state)
        self.PREDICATE(None, _AutocastIs(state), f"autocast enabled on {{{shown}}}")

    def INFERENCE_MODE(self, source=None, value=None):
        """Inference mode as the frame was entered (``value``; by default now): guarded where the
        trace depends on it (variables/ctx.py)."""
        enabled = torch.is_inference_mode_enabled() if value is None else value
        fn = _inference_mode_off if not enabled else torch.is_inference_mode_enabled
        self.PREDICATE(None, fn, f"torch.is_inference_mode_enabled() == {enabled}")

    def TORCH_FUNCTION_MODE(self, source=None, value=None):
        """The torch function modes active (every frame's entry): they change what each torch call
        does, and the default device (``torch.set_default_device``, ``with torch.device(d)``) is
        one, read by every factory call without a device. Device modes are guarded by their
        devices; another mode is refused (the trace does not model it)."""
        if not torch._C._is_torch_function_mode_enabled():
            return self.PREDICATE(None, _no_torch_function_mode, "no torch function mode active")
        devices = device_modes()
        if devices is None:
            from .exc import Unsupported
            raise Unsupported("a torch function mode other than a default device is active")
        shown = ", ".join(str(d) for d in devices)
        self.PREDICATE(None, _DeviceModesAre(devices), f"torch function modes == device modes ({shown})")

    def BACKEND_FLAGS(self, names=None):
        """The flags (``names`` of flag_readers(); all by default) a compiling backend reads while
        it compiles, as they were then: one predicate reading them all."""
        readers = flag_readers()
        names = [n for n in (readers if names is None else names) if n in readers]
        if not names:
            return
        fns = [_direct(readers[n]) for n in names]
        values = [f() for f in fns]
        shown = ", ".join(f"{n}={v!r}" for n, v in zip(names, values))
        self.PREDICATE(None, _flags_are(fns, values), f"flags the backend compiled by == ({shown})")

    def ALIASING(self, sources, values, overlap=None):
        """Which of the tensors at ``sources`` are the same object stays as traced (compiled
        graphs, through AOTAutograd, specialize on aliasing between their inputs). ``overlap``
        (a MemoryOverlap) also pins which of them share memory."""
        groups, first = [], {}
        for v in values:
            groups.append(first.setdefault(id(v), len(first)))
        shown = [s.name() for s in sources]
        same = [f"{a} is {b}" for i, a in enumerate(shown) for j, b in enumerate(shown[:i]) if groups[i] == groups[j]]
        text = f"aliasing of {', '.join(shown)} as traced" + (f" ({'; '.join(same)})" if same else " (all distinct)")
        value = (tuple(s.steps() for s in sources), tuple(groups))
        if overlap is not None:
            value += (overlap,)
            text += f"; {overlap!r}"
        self._add((), "ALIASING", value, text, key=((), "ALIASING", tuple(shown), overlap is not None))

    def NN_MODULE_NO_HOOKS(self, source, value=None):
        # one C check reading the four hook dicts of the instance, rather than a Python predicate
        self._add(source.steps(), "EMPTY_ATTRS", _MODULE_HOOK_DICTS, f"{source.name()} has no hooks")
        self.PREDICATE(None, no_global_module_hooks, "no global nn.Module hooks")


def build_guard_set(checks):
    """A ``_C.GuardSet`` holding ``checks`` (needs the C extension)."""
    from pydynamo import _C

    guard_set = _C.GuardSet()
    for steps, kind, value, text in checks:
        guard_set.add(steps, kind, value, text)
    return guard_set
