"""pydynamo._C: the PEP 523 frame-evaluation hook, the per-code cache and GuardSet (csrc/).

The hook protocol
-----------------
Each thread has its own setting, changed with ``set_eval_frame(setting)``, which returns the
previous one:

* ``None``  -- off: frames run as if pydynamo were not there (the previous eval function runs them).
* ``False`` -- run-only: a frame whose code has a cache entry whose guards hold runs that entry's
  code; a miss runs the original code; nothing is compiled.
* a callable ``callback(frame: Frame, cache_size: int)`` -- asked to compile on a miss. While it
  runs, this thread's hook is off (frames it starts run normally), so compiling never recurses.
  It answers with one of:

  - a ``CacheEntry``: added to the code's cache (newest first) and run now for this frame;
  - ``None``: run the original code this time (ask again next call);
  - ``SKIP``: never intercept this code again (until ``reset``) for this setting's key (see
    below; for every setting where it has none); run the original now.

  A callable's ``cache_key`` attribute (read when the setting is set; None or missing: no key)
  says who compiles: entries made under a key serve only settings with the same key object (and
  run-only settings, which are served by any), and ``cache_size`` counts the entries of the key.
  pydynamo's ConvertFrame keys by backend, fullgraph and dynamic (``convert_frame.CacheKey``).

  An exception raised by the callback is passed to the error handler (``set_error_handler``,
  pydynamo logs it) and the frame runs eagerly; if the handler returns True, the exception is
  raised from the frame instead, which does not run (``fullgraph=True`` errors).

The eval function is installed in the interpreter only while at least one thread has a setting
other than ``None``, and removed when none has (any installed eval function disables CPython's
inlined Python-to-Python calls). It chains to whatever eval function was installed before it.

Frames never intercepted: generators, coroutines and async generators; a frame resumed mid-way;
module and class bodies; code marked ``SKIP``; the code of cache entries themselves; frames started
while a callback or a guard runs; frames run by a tracing or profiling function.

The hit path
------------
For each entry of the code's cache, newest first, the entry's guards are checked against the
frame's argument slots in place (no dict of locals is built). On the first success the entry's
code runs as a new function (the frame's globals, the function's closure) called with the frame's
arguments, and its result is the frame's result. Entry code must have the same arguments, cell
variables and free variables as the original code (checked when the entry is made).

Guards
------
A ``GuardSet`` is a list of checks. Each check reads a value by a chain of steps and tests it.
The first step is the root:

* ``("L", i)``  argument slot ``i`` of the frame (``co_varnames[i]``, an argument)
* ``("G", name)`` a global of the frame (missing: the check fails)
* ``("B", name)`` a builtin of the frame
* ``("C", i)``  the contents of closure cell ``i`` (``co_freevars[i]``)
* ``("K", obj)`` the object ``obj`` itself, held by the check (a dict key known by identity)

then any number of ``("a", name)`` (``getattr``), ``("i", key)`` (``obj[key]``), ``("t", name)``,
``("g", name)``, ``("w", "")`` and ``("d", key)`` steps; ``("t", name)`` reads a class's attribute as its MRO stores it, without
calling a descriptor (CPython's ``_PyType_Lookup``; nothing found, or not a class: the read
fails); ``("g", name)`` is ``object.__getattribute__(v, name)`` (a Python ``__getattribute__`` of
v's class is not run); ``("w", "")`` is the referent of a ``weakref.ref`` (exactly that type; a dead
one fails the read); ``("d", key)`` is dict's own entry for ``key`` in a dict or dict subclass instance
(``dict.__getitem__`` without ``__missing__``: the class's ``__getitem__`` never runs; absent, the read
fails). A pair
``("a", name), ("a", "__func__")`` is read as one step that returns the class's function without
making the bound method, where that gives the same object (plain attribute lookup, a Python
function on the class, no instance attribute of that name). An
exception while reading means the check fails. Check kinds, with their ``value``:

* ``TYPE_MATCH``   a type: ``type(v) is value``
* ``ID_MATCH``     an object: ``v is value`` (held by a weak reference where possible; a dead
                   weak reference fails the check)
* ``EQUALS_MATCH`` None, bool, int, float, str or a tuple of these: same type, equal
                   (floats bit for bit)
* ``TENSOR_MATCH`` ``(type, dtype, device, layout, requires_grad, sizes, strides, is_inference,
                   is_conj, is_neg)``: ``type(v) is type``, equal dtype, device, layout and
                   requires_grad, and the three bools equal ``v.is_inference()``, ``v.is_conj()``,
                   ``v.is_neg()`` (the three may be left out: all False, a plain tensor); sizes and
                   strides are tuples of ints, ``None`` in a position means "any". A failure names
                   what differs: type, dtype, device, layout, requires_grad, inference, conj,
                   neg, size or stride
* ``DICT_KEYS``    a tuple: ``type(v) is dict`` and its keys are exactly these, in this order
* ``LEN``          an int: ``len(v) == value``
* ``EMPTY_ATTRS``  a tuple of str: ``len(getattr(v, name)) == 0`` for each (an nn.Module's hook
                   dicts, read from the instance dict at once)
* ``PREDICATE``    a callable: ``bool(value(v))``; with no steps at all, ``value()`` is called
* ``NOT_PRESENT``  no value: the read must fail (e.g. a global that must not exist)
* ``ALIASING``     no steps; value: ``(paths, groups)``, a tuple of step tuples and a tuple of as
                   many ints. Two of the values are the same object exactly when their groups are
                   equal (graphs specialize on which tensor inputs alias each other). An optional
                   third item, a callable, is then called with the tuple of values (None where one
                   cannot be read) and must return true (guards.MemoryOverlap)
* ``SHAPE_ENV``    no steps; value: ``(bindings, facts)``: the symbolic-shape facts of a trace
                   (pydynamo/shapes.py), checked after every other check passed. ``bindings`` is a
                   tuple of ``(steps, prop, dim)``, each read once per evaluation as an int64:
                   prop ``"size"`` / ``"stride"`` -> ``v.size(dim)`` / ``v.stride(dim)``,
                   ``"storage_offset"`` -> ``v.storage_offset()``, ``"int"`` -> ``v`` itself (an
                   exact int, not a bool). ``facts`` is a tuple of ``(program, text)``; a program
                   is a postfix tuple of instructions: ``("v", i)`` push binding i, ``("c", k)``
                   push k, binary ``+ - * // % ** == != < <= > >= and or min max``, unary ``not
                   neg abs`` (each a 1-tuple), with Python's semantics (floor division / modulo).
                   Every fact must leave a non-zero value; an unreadable binding, an overflow or a
                   division by zero fails the check. A failure names the fact's text.

Every check has a ``text``: how it reads in logs and in recompile reasons.
"""
from types import CodeType
from typing import Any, Callable, Optional

SKIP: object

class Frame:
    """A view of the frame being evaluated; valid only during the callback."""
    f_code: CodeType
    f_globals: dict
    f_builtins: dict
    f_func: Any
    closure: Optional[tuple]
    f_locals: dict  # arguments and closure contents, built on demand
    f_lineno: int
    def check_guards(self, guards: GuardSet) -> Optional[str]: ...  # first failing check's text, or None

class GuardSet:
    def __init__(self) -> None: ...
    def add(self, steps: tuple, kind: str, value: Any, text: str) -> None: ...
    def check(self, args: list, globals: dict, builtins: dict = ..., closure: tuple = ...) -> bool: ...
    def first_failure(self, args: list, globals: dict, builtins: dict = ..., closure: tuple = ...) -> Optional[str]: ...
    def texts(self) -> list: ...
    def __len__(self) -> int: ...

class CacheEntry:
    guards: Any  # GuardSet, or a callable taking the dict of the frame's arguments
    code: CodeType
    hits: int  # calls this entry served (pydynamo.debug's per-code counters)
    key: Any  # the cache_key of the setting that compiled it (it serves only that key), or None
    def __init__(self, guards: Any, code: CodeType, orig_code: CodeType, key: Any = None) -> None: ...

class NoHookCall:
    """NoHookCall(fn): calling it calls fn with this thread's hook off (compiled graphs are
    wrapped in it: a backend's runtime is never intercepted)."""
    fn: Callable
    def __init__(self, fn: Callable) -> None: ...
    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...

def set_eval_frame(setting: Any) -> Any: ...
def get_eval_frame() -> Any: ...
def is_installed() -> bool: ...
def get_cache_entries(code: CodeType) -> list: ...
def cache_size(code: CodeType) -> int: ...
def mark_skip(code: CodeType) -> None: ...
def is_skipped(code: CodeType) -> bool: ...
def reset_code(code: CodeType) -> None: ...
def reset() -> None: ...
def set_error_handler(fn: Optional[Callable[[BaseException], None]]) -> None: ...
def debug_counters() -> dict: ...
def set_table_getattr(func: Callable, tables: tuple) -> None: ...  # guards run a class __getattr__ that is
# `func` as a lookup of the name in the instance-dict dicts named by `tables`, in order (nn.Module's)
