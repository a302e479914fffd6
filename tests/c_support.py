"""Hand-made callbacks for testing the C hook without the translator."""
import contextlib

from pydynamo import _C


@contextlib.contextmanager
def hooked(setting):
    prev = _C.set_eval_frame(setting)
    try:
        yield
    finally:
        _C.set_eval_frame(prev)


def guards(*checks):
    gs = _C.GuardSet()
    for steps, kind, value, text in checks:
        gs.add(steps, kind, value, text)
    return gs


class Redirect:
    """A callback that replaces `orig`'s code by `new`'s code under guards made by make_guards(frame),
    records every frame it is asked about, and leaves all other code alone."""

    def __init__(self, orig, new, make_guards=lambda frame: guards()):
        self.orig, self.new, self.make_guards = orig, new, make_guards
        self.calls = []

    def __call__(self, frame, cache_size):
        if frame.f_code is not self.orig.__code__:
            return None
        self.calls.append((dict(frame.f_locals), cache_size))
        return _C.CacheEntry(self.make_guards(frame), self.new.__code__, self.orig.__code__)
