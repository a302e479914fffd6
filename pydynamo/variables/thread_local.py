"""``threading.local()`` objects (exactly ``_thread._local``; a subclass may run code of its own
when a thread first touches it, and is refused) read from the frame's inputs or globals.

A ``_thread._local`` keeps one instance dict per thread: its ``__getattribute__`` (C) is the
generic attribute lookup with the calling thread's dict as the instance dict. The trace reads an
attribute for real, in the thread it traces in, through a plain ``getattr`` source: guards are
evaluated in the thread that runs the frame, so they check that thread's value (guarded by value
where present, NOT_PRESENT where absent: the trace then raises AttributeError, as Python does).

Refused: names the class itself has (its methods, ``__class__``, ``__doc__``...) and other
dunder names such as ``__dict__`` (the thread's dict itself), and stores and deletes (they would
have to be replayed into the running thread's dict; opcodes.store_attr refuses them).
"""
import _thread

from ..exc import Unsupported
from ..source import AttrSource, type_lookup as raw_type_lookup
from .base import VariableTracker

_MISSING = object()


def is_thread_local(value):
    return type(value) is _thread._local


def wrap_thread_local(tx, value, source):
    if source is None:
        raise Unsupported("a threading.local object that is not reachable from the frame's inputs")
    tx.output.guards.TYPE_MATCH(source, value)
    return ThreadLocalVariable(value, source)


class ThreadLocalVariable(VariableTracker):
    """A ``threading.local`` object read from ``source`` (``value``: the object itself)."""

    def __init__(self, value, source):
        super().__init__(source)
        self.value = value

    def python_type(self):
        return _thread._local

    def truth(self, tx):
        return True  # (the class defines neither __bool__ nor __len__)

    def _lookup(self, tx, name):
        """(the running thread's value of ``name``, its source, None) or (None, its source, the
        message of the AttributeError Python raises), guarded absent in that case."""
        if (name.startswith("__") and name.endswith("__")) or \
                raw_type_lookup(_thread._local, name, _MISSING) is not _MISSING:
            raise Unsupported(f"attribute {name!r} of a threading.local object (a special name, or "
                              "one its class defines)")
        src = AttrSource(self.source, name)
        try:
            return getattr(self.value, name), src, None  # the generic lookup over this thread's dict
        except AttributeError as e:
            tx.output.guards.NOT_PRESENT(src)
            return None, src, str(e)

    def var_getattr(self, tx, name):
        from .builder import wrap_value
        from .descriptors import attribute_error
        value, src, error = self._lookup(tx, name)
        if error is not None:
            raise attribute_error(error)
        return wrap_value(tx, value, src)

    def has_attr(self, tx, name):
        value, src, error = self._lookup(tx, name)
        if error is not None:
            return False
        tx.output.guards.TYPE_MATCH(src, value)  # still there (readable) at each call
        return True

    def _repr_value(self):
        return "threading.local"
