"""Errors raised while tracing, and the user-facing errors.

``Unsupported`` means "this cannot be captured here". Without ``fullgraph=True`` it becomes a
graph break at the top frame's current instruction (or, where no break is possible, the whole
frame runs eagerly); with ``fullgraph=True`` it reaches the user. It always says why, where in
the user's code (the translator fills in file:line as the exception leaves each traced frame)
and, where we know one, what to do about it. Each also has an id in the graph-break catalogue
(breaks.py, docs/graph-breaks.md), found from its class and reason: ``exc.id``, with the
catalogue's ``explanation`` and, where the raise site gave none, its ``hint``.

The subclasses name the cause, so tests and users can catch one kind:

    PydynamoError
      Unsupported                 anything not captured (the catch-all)
        DataDependentError        needs a tensor's values: a branch on a tensor, .item(), .tolist()
        SideEffectError           I/O or mutation we do not replay: print(), a nonlocal store
        DisabledFunctionError     a call to a function decorated with pydynamo.disable
        UnmodelledCallError       a C / library function (or class) the tracer does not model
        UnsupportedOpcodeError    an opcode the translator does not implement (async, class bodies...)
        ExceptionRaised           the traced code raises an exception here, for sure: the tracer
                                  unwinds to a handler of the trace (try/except/finally/with) if
                                  one catches it; anything else treats it as a graph break, so
                                  Python raises it natively
      BackendCompilerFailed       the backend raised
"""
import linecache


class PydynamoError(Exception):
    pass


class Unsupported(PydynamoError):
    def __init__(self, reason, hint=None):
        super().__init__(reason)
        self.reason = reason
        self._hint = hint  # the raise site's own; else the catalogue's for this kind of break
        self.user_stack = []  # (filename, lineno, function name), innermost first

    @property
    def catalogue_entry(self):
        """Looked up when asked for, not when raised: most Unsupported are caught inside the
        tracer and never shown (breaks.py caches the lookup by reason)."""
        from . import breaks
        return breaks.lookup(self)

    @property
    def id(self):
        return self.catalogue_entry.id

    @property
    def explanation(self):
        return self.catalogue_entry.explanation

    @property
    def hint(self):
        return getattr(self, "_hint", None) or self.catalogue_entry.hint

    @hint.setter
    def hint(self, value):
        self._hint = value

    def add_frame(self, filename, lineno, name):
        self.user_stack.append((filename, lineno, name))

    @property
    def location(self):
        """file:line of the innermost user frame, or None when raised outside tracing."""
        if not self.user_stack:
            return None
        filename, lineno, _ = self.user_stack[0]
        return f"{filename}:{lineno}"

    def __str__(self):
        lines = [self.reason]
        for i, (filename, lineno, name) in enumerate(self.user_stack):
            lines.append(f"  {'at' if i == 0 else 'called from'} {filename}:{lineno} in {name}")
            source = linecache.getline(filename, lineno or 0).strip()
            if source:
                lines.append(f"      {source}")
        lines.append(f"id: {self.id} (docs/graph-breaks.md)")
        if self.hint:
            lines.append(f"hint: {self.hint}")
        return "\n".join(lines)


# The subclasses' default hints are their catalogue catch-alls' (breaks.py).
class DataDependentError(Unsupported):
    pass


class SideEffectError(Unsupported):
    pass


class DisabledFunctionError(Unsupported):
    pass


class UnmodelledCallError(Unsupported):
    pass


class UnsupportedOpcodeError(Unsupported):
    pass


class ExceptionRaised(Unsupported):
    """The traced program raises ``var`` (an ExceptionVariable) at this point, for sure: a
    ``raise`` statement, or an operation whose model knows Python raises here (a dict lookup
    of a missing constant key...). Only values known at trace time may decide that; an op of
    the graph is never assumed to raise, nor not to raise, at run time."""

    def __init__(self, var, fresh=True):
        super().__init__(f"raising {var.describe()}")
        self.var = var
        self.fresh = fresh  # a new raise (not RERAISE / a bare `raise`)

    def opaque(self, where):
        """This exception reaching code of ours that Python would run in C (a model of a
        builtin calling a generator, say): not simulated further, it breaks the graph."""
        out = Unsupported(f"{self.reason} inside {where}")
        out.user_stack = list(self.user_stack)
        return out


class BackendCompilerFailed(PydynamoError):
    def __init__(self, backend, exc):
        name = getattr(backend, "__name__", repr(backend))
        super().__init__(f"backend {name!r} raised {type(exc).__name__}: {exc}")
        self.backend = backend
        self.inner_exception = exc

    @property
    def id(self):
        from . import breaks
        return breaks.lookup(self).id


def unsupported(reason):
    raise Unsupported(reason)
