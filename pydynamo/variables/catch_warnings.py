"""``with warnings.catch_warnings():`` blocks and the filter calls made inside them.

``catch_warnings()`` saves the warnings filters when entered and puts them back when left, so
``warnings.simplefilter(...)``, ``filterwarnings(...)`` and ``resetwarnings()`` inside the block
change nothing that outlives it: they are made for real while tracing (the real block is entered
while tracing and left with the trace's block) and recorded on the block, which a graph break
inside it enters again natively with the same calls (``reenter``).

What stays observable is replayed, in order with the other side effects: entering and leaving
bump the filters' version (``warnings._filters_mutated``), which makes every module's
``__warningregistry__`` forget the warnings it has shown. ``warnings.warn`` inside a block is
recorded like one outside it (deferred.py) only while no filter was changed in the block: the
replay runs after the graph, under the frame's filters. ``record=True`` (the list of warnings
caught would include those the graph's operators raise at run time) and a ``module`` other than
``warnings`` are refused. Warnings that torch operators raise while the graph runs are not
under the block's filters: the graph runs outside it (as under torch.compile).
"""
import warnings

from ..exc import Unsupported
from .base import ObjectVariable
from .constant import ConstantVariable
from .ctx import ContextManagerVariable, _bind, _state

FILTER_FUNCTIONS = (warnings.simplefilter, warnings.filterwarnings, warnings.resetwarnings)


def _filters_changed():
    """What entering or leaving a catch_warnings block does to the world outside it."""
    warnings._filters_mutated()


def reenter(options, calls):
    """A new ``catch_warnings(**options)`` that, entered, makes the filter ``calls`` again."""
    return _Reentered(calls, **dict(options))


class _Reentered(warnings.catch_warnings):
    def __init__(self, calls, **options):
        super().__init__(**options)
        self._calls = calls

    def __enter__(self):
        result = super().__enter__()
        for name, args, kwargs in self._calls:
            getattr(warnings, name)(*args, **dict(kwargs))
        return result


def active_block(tx):
    """The innermost catch_warnings block the trace is inside, or None."""
    for c in reversed(_state(tx).active):
        if isinstance(c, CatchWarningsVariable):
            return c
    return None


def filters_changed_in_block(tx):
    return any(isinstance(c, CatchWarningsVariable) and (c.calls or c.options.get("action"))
               for c in _state(tx).active)


class CatchWarningsFactoryVariable(ObjectVariable):
    """``warnings.catch_warnings`` (the class): calling it makes a block not yet entered."""

    def call_function(self, tx, args, kwargs):
        if self.value is reenter:  # a resume function's prologue: the block entered again
            options, calls = (a.as_python_constant() for a in args)
            return CatchWarningsVariable(options, preset=calls)
        if args:
            raise Unsupported("TypeError: catch_warnings() takes keyword arguments only")
        options = _bind(warnings.catch_warnings.__init__, [], kwargs, method=True)
        if options.pop("record"):
            raise Unsupported("warnings.catch_warnings(record=True): the warnings it records "
                              "include those the graph's operators raise when it runs")
        if options.pop("module") is not None:
            raise Unsupported("warnings.catch_warnings(module=...) of another warnings module")
        return CatchWarningsVariable(tuple(options.items()))


class CatchWarningsVariable(ContextManagerVariable):
    cls = warnings.catch_warnings

    def __init__(self, options, source=None, obj=None, preset=()):
        super().__init__(source, obj)
        self.options = dict(options)
        self.option_items = options
        self.preset = preset  # filter calls its enter makes (a block entered again)
        self.calls = []  # the filter calls made inside: (name, args, kwargs items)
        self.real = None

    def _enter(self, tx):
        from .deferred import record_call
        record_call(tx, ObjectVariable(_filters_changed), _filters_changed, [], {})
        self.real = warnings.catch_warnings(**self.options)
        self.real.__enter__()
        self.calls = list(self.preset)
        for name, args, kwargs in self.preset:
            getattr(warnings, name)(*args, **dict(kwargs))
        return ConstantVariable(None)

    def _exit(self, tx):
        from .deferred import record_call
        self.leave_real_once()
        record_call(tx, ObjectVariable(_filters_changed), _filters_changed, [], {})

    def leave_real(self):
        real, self.real = self.real, None
        real.__exit__(None, None, None)

    def reentry(self):
        return reenter, (self.option_items, tuple(self.calls))

    def _repr_value(self):
        return f"warnings.catch_warnings({', '.join(f'{k}={v!r}' for k, v in self.option_items)})"


class WarningsFilterVariable(ObjectVariable):
    """``warnings.simplefilter`` / ``filterwarnings`` / ``resetwarnings``: made now and
    recorded on the catch_warnings block around the call; outside one, refused (the change
    would outlive the frame)."""

    def call_function(self, tx, args, kwargs):
        block = active_block(tx)
        name = self.value.__name__
        if block is None:
            raise Unsupported(f"warnings.{name}() outside a warnings.catch_warnings() block "
                              "(it changes the process's warnings filters)")
        if not all(a.is_python_constant() for a in [*args, *kwargs.values()]):
            raise Unsupported(f"warnings.{name}() with arguments that are not constants")
        cargs = tuple(a.as_python_constant() for a in args)
        ckwargs = tuple((k, v.as_python_constant()) for k, v in kwargs.items())
        try:
            self.value(*cargs, **dict(ckwargs))
        except Exception as e:  # noqa: BLE001 - raised where the call is made
            raise Unsupported(f"warnings.{name}() raised {type(e).__name__}: {e}") from None
        block.calls.append((name, cargs, ckwargs))
        return ConstantVariable(None)
