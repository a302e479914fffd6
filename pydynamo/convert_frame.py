"""The hook's Python callback: which frames to compile, the cache-size limit, one compile.

``ConvertFrame(backend, fullgraph)`` is what ``optimize()`` installs with ``_C.set_eval_frame``.
On a cache miss the C hook calls it with the frame; it answers with a ``_C.CacheEntry``, ``None``
(run the original code this time) or ``_C.SKIP`` (never intercept this code again).
"""
import functools
import os
import sys
import sysconfig
import time
import types
import weakref

import torch

from . import _C, config, debug, logs, stance
from .compile_context import collector_off, run_without_hook
from .exc import BackendCompilerFailed, Unsupported

_PYDYNAMO_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
_STDLIB_DIRS = tuple({os.path.abspath(sysconfig.get_paths()[k]) + os.sep for k in ("stdlib", "platstdlib")})

# Packages that torch's own compilers and dispatch run on: when eager PyTorch code runs its
# compiler (torch.cond, flex_attention called eagerly) or its symbolic shapes, their frames are
# torch's work, never the user's. Like torch, the standard library and pydynamo, they are never
# compiled as entries (docs/soundness.md); user code that calls them inlines them as usual.
COMPILER_PACKAGES = ("sympy", "mpmath", "typing_extensions", "triton", "filelock", "jinja2", "markupsafe",
                     "networkx", "packaging", "setuptools", "_distutils_hack", "pkg_resources",
                     "importlib_metadata", "fsspec", "optree", "numpy")


def _package_paths(names):
    """Where each installed package of ``names`` lives (a directory with a trailing separator,
    or a single module's file), found without importing it."""
    import importlib.util
    out = []
    for name in names:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        if spec is None:
            continue
        if spec.submodule_search_locations:
            out += [os.path.abspath(p) + os.sep for p in spec.submodule_search_locations]
        elif spec.origin and spec.origin not in ("built-in", "frozen"):
            out.append(os.path.abspath(spec.origin))
    return tuple(out)


_LIBRARY_PREFIXES = (_PYDYNAMO_DIR, _TORCH_DIR) + _package_paths(COMPILER_PACKAGES)
# site-packages usually lies inside the standard library's directory: its packages are user code
_SITE_DIRS = tuple({os.path.abspath(sysconfig.get_paths()[k]) + os.sep for k in ("purelib", "platlib")})

# Code objects whose cache-size-limit warning was given (weakly held: codes die with their functions).
_warned_limit = weakref.WeakSet()

# Automatic dynamic (shapes.DynamicPolicy): per code, the sizes and int arguments its compiles saw.
_frame_state = weakref.WeakKeyDictionary()

# Per code whose first argument is an nn.Module: the entries compiled for each instance (held
# weakly). The blocks of a class share entries (modules are guarded by class); where instances
# differ (sizes, submodule types), each compiles its own, and cache_size_limit counts per instance.
_instance_entries = weakref.WeakKeyDictionary()

# Code the user asked to compile by name although it lives in a skipped place: the forward of a
# torch.nn module given to optimize()/compile() (nn.Sequential, nn.Linear, ...). code -> the
# objects that asked (the wrapper optimize() returned): a request lasts while one of them does,
# so a torch module compiled once does not make every later call of its class's forward a frame
# of its own.
_requested = weakref.WeakKeyDictionary()


class _Always:
    """The owner of a request that lasts as long as its code (an export's own code object)."""


_ALWAYS = _Always()


def request_compile(fn, owner=None):
    code = getattr(fn, "__code__", None)
    if code is not None:
        _requested.setdefault(code, weakref.WeakSet()).add(_ALWAYS if owner is None else owner)


def skip_reason(code, globals=None, caller=None):
    """Why this code is never compiled as a top-level frame, or None. Library code of torch,
    the packages its compilers run on, the standard library and pydynamo itself runs as it is,
    unless the user asked for it by name; FX-generated graph code too; code torch.compile
    compiled; code that ``exec`` or ``eval`` generated for a library (``_generated_for_library``);
    a frame the import system calls (``caller``: a finder's ``find_spec``, an import hook). So
    when eager PyTorch code inside a compiled frame runs its own compiler or dispatch
    (``torch.cond``, ``flex_attention``, a DTensor's ``__torch_dispatch__``), none of its frames
    become entries, while user code that torch calls (a module's forward, from
    ``Module.__call__``) is compiled as before: its file is the user's."""
    if _requested.get(code):  # (a request whose owners all died is none)
        return None
    filename = code.co_filename
    if filename.startswith("<") and filename not in ("<string>", "<stdin>"):
        return f"generated code ({filename})"
    if _library_file(filename):
        return "library code (torch, the packages its compilers run on, the standard library or pydynamo)"
    if any(name.startswith(("__compiled_fn_", "__resume_at_")) for name in code.co_names):
        # torch._dynamo's compiled code, run through its eval function, which chains to ours:
        # compiling it would make each capturer compile the other's new code, without end
        return "code compiled by another graph capturer (torch.compile)"
    if filename == "<string>" and globals is not None:
        reason = _generated_for_library(globals, caller)
        if reason:
            return reason
    if caller is not None and _is_import_system(caller):
        return "called by the import system"
    return None


def _generated_for_library(globals, caller):
    """Why code made by ``exec``/``eval`` that runs in ``globals`` is a library's, or None. It
    belongs to the module whose globals it runs in: a dataclass's ``__init__`` or ``__hash__``
    made for one of torch's classes is torch's. A namedtuple's ``__new__`` only builds a tuple.
    Globals that are no module's (torch._dynamo's guard functions): a library's if the first
    caller that is not generated code is library code."""
    owner = globals.get("__name__")
    if isinstance(owner, str) and owner.startswith("namedtuple_"):
        return "a namedtuple's generated __new__"
    module = sys.modules.get(owner) if isinstance(owner, str) else None
    module_file = getattr(module, "__file__", None)
    if isinstance(module_file, str) and _library_file(module_file):
        return f"code generated for the library module {owner}"
    if module is not None and module.__dict__ is globals:
        return None
    while caller is not None and caller.f_code.co_filename == "<string>":
        caller = caller.f_back
    if caller is not None and (_library_file(caller.f_code.co_filename) or
                               caller.f_code.co_filename.startswith("<frozen")):
        return f"code generated and called by a library ({caller.f_code.co_filename})"
    return None


def _library_file(filename):
    path = os.path.abspath(filename)
    return path.startswith(_LIBRARY_PREFIXES) or (path.startswith(_STDLIB_DIRS) and not path.startswith(_SITE_DIRS))


def _is_import_system(frame):
    return frame.f_code.co_filename.startswith("<frozen importlib")


def in_import(caller):
    """Whether ``caller`` (the frame calling the one the hook holds) runs inside an import: a
    module body that an import executes, and whatever it calls (typing's machinery, a library's
    registration helpers), is never compiled. Not SKIP: the same function called by the user
    later is a frame like any other."""
    f = caller
    while f is not None:
        if _is_import_system(f):
            return True
        f = f.f_back
    return False


def in_torch_dispatch(caller, depth=64):
    """Whether the frame starts inside a ``__torch_dispatch__`` (a subclass's op handlers, called
    by the dispatcher for each op it runs on the subclass, in eager code or while a backend traces
    it): that is torch's dispatch, not the program; it runs eagerly, never compiled."""
    f = caller
    while f is not None and depth:
        if f.f_code.co_name == "__torch_dispatch__":
            return True
        f, depth = f.f_back, depth - 1
    return False


def in_foreign_function_mode():
    """Whether a torch function mode other than a default device is active: the trace does not
    model it (guards.TORCH_FUNCTION_MODE refuses it), so the frame runs eagerly this time, and is
    compiled when called outside the mode (a refusal in the trace would SKIP it for good).
    Under fullgraph=True the trace's refusal is the error."""
    if not torch._C._is_torch_function_mode_enabled():
        return False
    from .guards import device_modes
    return device_modes() is None


def _module_instance(frame, code):
    """The frame's first argument when it is an nn.Module (``self`` of a forward), else None."""
    if code.co_argcount < 1:
        return None
    value = frame.f_locals.get(code.co_varnames[0])
    return value if isinstance(value, torch.nn.Module) else None


def _over_limit(code, instance, cache_size):
    """Whether a miss may not compile: ``cache_size_limit`` entries for the code, or, where the
    first argument is a module, compiled for that module instance, with at most
    ``accumulated_cache_size_limit`` entries for the code in all."""
    if cache_size < config.cache_size_limit:
        return False
    if instance is None or cache_size >= config.accumulated_cache_size_limit:
        return True
    try:
        counts = _instance_entries.get(code)
        return counts is not None and counts.get(instance, 0) >= config.cache_size_limit
    except TypeError:
        return True


def _where(code):
    return f"{code.co_filename}:{code.co_firstlineno} ({code.co_qualname})"


def in_backward():
    """Whether this thread is running the autograd engine's work: a node's backward, or a hook
    or autograd.Function.backward called by it. Frames that start then are never compiled.

    A compiler's own work runs there: AOTAutograd compiles the backward graph lazily, at the
    first backward, and then runs it at every backward, whatever backend (ours or a user's)
    asked for it, and Inductor's or a user's compiler code (dataclass ``__init__``s made by
    exec, generated modules, sympy) is not ours to tell apart from user code by its file.
    Where the backward runs is the autograd engine's choice: CPU work runs on the thread that
    called ``backward()``, whose hook may be on (this rule applies); CUDA and other devices' work
    runs on the engine's device threads, which never had a hook setting (the hook is off there).
    Either way no frame of the backward pass is compiled; user hooks and backward methods run
    eagerly, and cache entries made before still serve hits."""
    return torch._C._current_autograd_node() is not None


def in_native_checkpoint():
    """Whether a non-reentrant torch.utils.checkpoint runs its function natively here (a call
    the trace did not capture): its saved-tensor hooks pair what the forward saves with what the
    recomputation, in backward, saves again, which a compiled graph would not match. (Torch
    compiles no frame inside checkpoint either: it is torch._disable_dynamo'd.)"""
    hooks = torch._C._autograd._top_saved_tensors_default_hooks(True)
    return hooks is not None and getattr(hooks[0], "__qualname__", "").startswith("_checkpoint_hook.")


class CacheKey:
    """Who compiled an entry: a backend with the options that change what is compiled. The C
    hook serves an entry only to a setting whose ``cache_key`` is the same object (or to a
    run-only one), as torch.compile keys its entries by backend: ``optimize(a)(fn)`` then
    ``optimize(b)(fn)`` compiles again for b, and ``fullgraph=True`` never runs code compiled
    with graph breaks. A key holds nothing (entries live in code objects, which the garbage
    collector does not see: nothing there may lead back to user objects)."""
    __slots__ = ("text", "__weakref__")

    def __init__(self, text):
        self.text = text

    def __repr__(self):
        return f"CacheKey({self.text})"


# backend -> {(its partial's arguments, fullgraph, dynamic): CacheKey}. A backend that dies takes
# its keys with it: a new backend at its address gets new ones, and entries of the old never hit.
_keys = weakref.WeakKeyDictionary()
_strong_keys = {}  # the same for backends that cannot be weakly referenced: id -> (backend, table)


def _frozen(value):
    """A hashable stand-in for a backend's option value (dicts of options as sorted items)."""
    if isinstance(value, dict):
        return ("dict", tuple(sorted((k, _frozen(v)) for k, v in value.items())))
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(_frozen(v) for v in value))
    hash(value)
    return value


def cache_key(backend, fullgraph, dynamic):
    """The CacheKey of (backend, fullgraph, dynamic). ``functools.partial`` backends (what
    ``compile(mode=..., options=...)`` makes) are keyed by their function and frozen arguments,
    so two compiles with the same mode share entries; anything else by the backend object (its
    own ``__eq__`` and ``__hash__``)."""
    root, args = backend, ()
    if type(backend) is functools.partial:
        try:
            args = _frozen((backend.args, backend.keywords))
            root = backend.func
        except TypeError:  # an unhashable option: the partial itself
            args = ()
    options = (args, bool(fullgraph), dynamic)
    try:
        table = _keys.setdefault(root, {})
    except TypeError:  # not weakly referenceable, or unhashable
        table = _strong_keys.setdefault(id(root), (root, {}))[1]
    key = table.get(options)
    if key is None:
        name = getattr(root, "__qualname__", None) or type(root).__name__
        key = table[options] = CacheKey(f"{name}, fullgraph={bool(fullgraph)}, dynamic={dynamic}"
                                        + (f", {args}" if args else ""))
    return key


_COMPILE = object()  # _by_stance: go on and compile
_seen_eagerly = weakref.WeakKeyDictionary()  # codes whose first call ran eagerly (eager_then_compile)


# Codes a compile of which captured nothing (no graph, no resume function) for a call with no
# tensor or module among its arguments: a helper run per string or per name (a config's
# __getattribute__, a library's bookkeeping) would otherwise compile once per distinct key, each
# entry guarding that key, until cache_size_limit. Further such calls run eagerly, untraced:
# always correct, and what they would run anyway.
_tensorless = weakref.WeakSet()


def _captures_nothing(new_code):
    return not any(n.startswith(("__compiled_fn_", "__resume_")) for n in new_code.co_names) and not any(
        isinstance(c, types.CodeType) and c.co_name.startswith("resume_in_") for c in new_code.co_consts)


def _has_tensor(frame):
    import torch
    return any(isinstance(v, (torch.Tensor, torch.nn.Module)) for v in frame.f_locals.values())


class ConvertFrame:
    def __init__(self, backend, fullgraph=False, dynamic=None):
        from .backends.distributed import ddp_aware
        from .backends.regions import regions_aware
        self.cache_key = cache_key(backend, fullgraph, dynamic)  # read by the C hook (set_eval_frame)
        self.backend = debug.observe_backend(run_without_hook(ddp_aware(regions_aware(backend))))
        self.fullgraph, self.dynamic = fullgraph, dynamic

    def __call__(self, frame, cache_size):
        code = frame.f_code
        # (the hook calls this before the frame starts: the frame below this one is its caller)
        caller = sys._getframe(1)
        if skip_reason(code, frame.f_globals, caller):
            return _C.SKIP
        if code.co_name == "__torch_dispatch__":
            return _C.SKIP  # a subclass's or mode's dispatch: Python the dispatcher runs per op
        if in_backward() or in_native_checkpoint() or in_import(caller) or in_torch_dispatch(caller) or (
                not self.fullgraph and in_foreign_function_mode()):
            # None, not SKIP: the same code may be a top-level frame of the forward later (a
            # user's function called from a backward hook, or optimize()d itself); SKIP is
            # forever. The price is this callback at each such call while in backward.
            return None
        if debug.tracer is not None:  # pydynamo.debug.trace: misses only, hits never get here
            return debug.tracer.record(self, frame, cache_size)
        return self.on_miss(frame, cache_size)

    def on_miss(self, frame, cache_size):
        """Compile ``frame`` (its code has ``cache_size`` entries, none of which took it), or not:
        what the hook is answered."""
        code = frame.f_code
        if stance.current.stance != "default":
            held = self._by_stance(frame, code, cache_size)
            if held is not _COMPILE:
                return held
        if code in _tensorless and not _has_tensor(frame):
            return None  # its compiles captured nothing: a call without tensors runs eagerly
        instance = _module_instance(frame, code)
        if _over_limit(code, instance, cache_size):
            self._cache_limit_reached(frame, code)
            return None  # existing entries keep serving hits; misses run eagerly
        if cache_size and logs.enabled("recompiles"):
            logs.get("recompiles").info("recompiling %s: %s", _where(code), self._failures(frame, code))
        if not cache_size:  # a code's first compile (or first since a reset) specializes
            _frame_state.pop(code, None)
        from .variables.subclasses import probe_operators
        probe_operators()
        # the compiler's own reads of the inputs (fake tensors, guards, guard sets) never call a
        # subclass's __torch_function__
        with torch._C.DisableTorchFunctionSubclass():
            entry = self._compile(frame, code)
        if instance is not None and isinstance(entry, _C.CacheEntry):
            try:
                counts = _instance_entries.setdefault(code, weakref.WeakKeyDictionary())
                counts[instance] = counts.get(instance, 0) + 1
            except TypeError:  # not weakly referenceable, or unhashable
                pass
        return entry

    def _by_stance(self, frame, code, cache_size):
        """What a miss does under a stance other than the default (stance.py)."""
        name = stance.current.stance
        if name == "eager_then_compile":
            if code in _seen_eagerly:
                return _COMPILE
            _seen_eagerly[code] = True
            return None  # this call runs eagerly; the next miss compiles
        if name == "fail_on_recompile" and _has_tensor(frame):
            err = RuntimeError(f"Detected recompile when the pydynamo stance is 'fail_on_recompile': "
                               f"{_where(code)} ({cache_size} entries, none of which took this call"
                               + (f": {self._failures(frame, code)})" if cache_size else ")"))
            err._pydynamo_propagate = True
            raise err
        return _COMPILE

    def _convert(self, frame, code):
        """One trace; a trace with symbolic sizes that fails in a way a static one might not
        (a guard the C programs cannot express, a backend that cannot take symbols) is retried
        with every size static."""
        from .shapes import ConstraintViolationError, DynamicPolicy
        from .translator import convert
        closure = frame.closure if frame.closure is not None else None
        from .resume import is_resume_code
        # a resume function's int arguments are the caller's locals at a break (loop counters):
        # they stay constants, so a loop unrolled across breaks keeps its static shape
        policy = DynamicPolicy(self.dynamic, _frame_state.setdefault(code, {}),
                               dynamic_ints=not is_resume_code(code))
        args = (code, frame.f_globals, frame.f_builtins, frame.f_locals, closure, self.backend)
        try:
            return convert(*args, fullgraph=self.fullgraph, dynamic=policy)
        except (Unsupported, ConstraintViolationError):
            raise
        except Exception as e:
            if not policy.used:
                raise
            logs.get("recompiles").info("compiling %s with symbolic sizes failed (%s: %s); compiling it "
                                        "with static sizes", _where(code), type(e).__name__, e)
        policy.static = True
        return convert(*args, fullgraph=self.fullgraph, dynamic=policy)

    def _compile(self, frame, code):
        from .shapes import ConstraintViolationError
        from .api import compiling
        t0 = time.perf_counter()
        try:
            # torch.compiler.is_compiling() reads True meanwhile
            with compiling(), collector_off():
                new_code, checks = self._convert(frame, code)
        except ConstraintViolationError as e:
            e._pydynamo_propagate = True
            raise
        except Unsupported as e:
            if self.fullgraph:
                e._pydynamo_propagate = True
                raise
            note_graph_break(e, f"running {_where(code)} eagerly")
            return _C.SKIP
        except BackendCompilerFailed as e:
            if not config.suppress_errors:
                e._pydynamo_propagate = True
                raise
            logs.get("errors").warning("%s; %s runs eagerly (pydynamo.config.suppress_errors is set)", e, _where(code))
            return _C.SKIP
        except Exception as e:
            if self.fullgraph:
                e._pydynamo_propagate = True
                raise
            logs.report_internal_error(code, e)
            return _C.SKIP
        if _captures_nothing(new_code) and not _has_tensor(frame):
            _tensorless.add(code)
        from .guards import build_guard_set
        t1 = time.perf_counter()
        guards = build_guard_set(checks)
        if debug.tracer is not None:
            debug.tracer.on_guards(checks, time.perf_counter() - t1)
        if logs.enabled("guards"):
            logs.get("guards").info("guards for %s:\n  %s", _where(code), "\n  ".join(guards.texts()))
        compile_times.append((code.co_qualname, time.perf_counter() - t0))
        for obs in observers:
            obs.on_entry(code, guards, compile_times[-1][1])
        return _C.CacheEntry(guards, new_code, code, self.cache_key)

    def _failures(self, frame, code):
        entries = _C.get_cache_entries(code)
        mine = [e for e in entries if e.key is self.cache_key]
        if entries and not mine:
            return "the entries were compiled with another backend or other options"
        return "; ".join(filter(None, (frame.check_guards(e.guards) for e in mine))) or "no entry matched"

    def _cache_limit_reached(self, frame, code):
        if code in _warned_limit:
            return
        _warned_limit.add(code)
        logs.get("recompiles").warning(
            "%s hit pydynamo.config.cache_size_limit (%d); it runs eagerly from now on for inputs no "
            "compiled entry accepts. Last guard failure: %s", _where(code), config.cache_size_limit,
            self._failures(frame, code))


# Objects told about each compile (explain() uses this): on_entry(code, guards, seconds) and
# on_break(unsupported_exception).
observers = []

# Break locations already logged: each is logged once (PYDYNAMO_LOGS=graph_breaks).
_logged_breaks = set()


def note_graph_break(exc, what="graph break"):
    """Every graph break (and every frame that runs eagerly because of an Unsupported) is
    reported here: logged once per location, and passed to the observers (explain)."""
    key = (exc.location, exc.reason)
    if key not in _logged_breaks:
        _logged_breaks.add(key)
        logs.get("graph_breaks").info("%s: %s", what, exc)
    for obs in observers:
        obs.on_break(exc)


# (function name, seconds) of every compile since the last reset, for explain() and tools.
compile_times = []

def reset():
    _tensorless.clear()
    _frame_state.clear()
    _instance_entries.clear()
    _warned_limit.clear()
    _logged_breaks.clear()
    compile_times.clear()
