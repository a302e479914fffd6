"""Errors raised while tracing, and the user-facing errors.

``Unsupported`` means "this cannot be captured here". Without ``fullgraph=True`` it becomes a
graph break at the top frame's current instruction (or, where no break is possible, the whole
frame runs eagerly); with ``fullgraph=True`` it reaches the user. It always says why, where in
the user's code (the translator fills in file:line as the exception leaves each traced frame)
and, where we know one, what to do about it.

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
    hint = None  # the default hint of this cause

    def __init__(self, reason, hint=None):
        super().__init__(reason)
        self.reason = reason
        if hint is not None:
            self.hint = hint
        self.user_stack = []  # (filename, lineno, function name), innermost first

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
        if self.hint:
            lines.append(f"hint: {self.hint}")
        return "\n".join(lines)


class DataDependentError(Unsupported):
    hint = ("keep the value a tensor (torch.where(cond, a, b) instead of `if`), or move "
            ".item()/.tolist() out of the compiled region")


class SideEffectError(Unsupported):
    hint = "move print() and other I/O out of the compiled region"


class DisabledFunctionError(Unsupported):
    hint = "the function is decorated with pydynamo.disable; remove the decorator to capture it"


class UnmodelledCallError(Unsupported):
    hint = ("use a torch operation instead, or decorate the caller's helper with "
            "pydynamo.disable to make the break explicit")


class UnsupportedOpcodeError(Unsupported):
    hint = "move this statement out of the compiled region"


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


def unsupported(reason):
    raise Unsupported(reason)
