"""Errors raised while tracing.

``Unsupported`` means "this cannot be captured here". In this issue it makes the caller run the
whole frame eagerly; later it becomes a graph break. It always says why, and where in the user's
code: the translator fills in the user's file:line as the exception leaves each frame.
"""


class PydynamoError(Exception):
    pass


class Unsupported(PydynamoError):
    def __init__(self, reason):
        super().__init__(reason)
        self.reason = reason
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
        for filename, lineno, name in self.user_stack:
            lines.append(f"  at {filename}:{lineno} in {name}")
        return "\n".join(lines)


class BackendCompilerFailed(PydynamoError):
    def __init__(self, backend, exc):
        name = getattr(backend, "__name__", repr(backend))
        super().__init__(f"backend {name!r} raised {type(exc).__name__}: {exc}")
        self.backend = backend
        self.inner_exception = exc


def unsupported(reason):
    raise Unsupported(reason)
