"""Logging for pydynamo, through the standard logging module.

PYDYNAMO_LOGS is a comma-separated list of artifact names (graph_breaks, recompiles, guards, graph,
bytecode, output_code, errors); each turns on the logger "pydynamo.<name>" at INFO level.
Internal compiler errors (a frame that could not be compiled and ran eagerly) always go to
"pydynamo.errors" at WARNING level.
"""
import logging

ARTIFACTS = ("graph_breaks", "recompiles", "guards", "graph", "bytecode", "output_code", "errors")

log = logging.getLogger("pydynamo")


def get(name):
    if name not in ARTIFACTS:
        raise ValueError(f"unknown pydynamo log artifact {name!r}; known: {', '.join(ARTIFACTS)}")
    return logging.getLogger(f"pydynamo.{name}")


def enabled(name):
    return get(name).isEnabledFor(logging.INFO)


def configure(spec):
    """Turn on the artifacts named in `spec` ("graph_breaks,recompiles")."""
    names = [n.strip() for n in (spec or "").split(",") if n.strip()]
    for n in names:
        get(n).setLevel(logging.INFO)
    if names and not log.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("[%(name)s] %(message)s"))
        log.addHandler(handler)


def report_callback_error(exc):
    """The C hook calls this when compiling a frame raised. True: the frame raises `exc` (an error
    the user asked for with fullgraph=True); False: it is logged and the frame runs eagerly."""
    if getattr(exc, "_pydynamo_propagate", False):
        from .exc import Unsupported
        if isinstance(exc, Unsupported):  # the message says where; our frames are noise
            exc.__traceback__ = None
            exc.__suppress_context__ = True
        return True
    get("errors").warning("pydynamo could not compile a frame; it ran eagerly",
                          exc_info=(type(exc), exc, exc.__traceback__))
    return False


def report_internal_error(code, exc):
    """A compiler bug in one frame: that frame runs eagerly from now on."""
    get("errors").warning("pydynamo could not compile %s (%s:%d); it runs eagerly", code.co_qualname,
                          code.co_filename, code.co_firstlineno, exc_info=(type(exc), exc, exc.__traceback__))
