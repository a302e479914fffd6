"""The compiler's stance (``torch.compiler.set_stance``'s pydynamo twin): what a pydynamo-optimized
function does on its calls, process-wide.

- ``"default"``: compile on a miss, serve hits from the cache.
- ``"force_eager"``: run eagerly, ignoring compiled code (the hook off for the call).
- ``"eager_on_recompile"``: serve hits; a miss runs eagerly (the run-only setting).
- ``"fail_on_recompile"``: serve hits; a miss that would compile raises RuntimeError.
- ``"eager_then_compile"``: a code's first call runs eagerly, later calls compile.

``set_stance(...)`` called as a function sets it at once; as a ``with`` block it is restored at
the end; as a decorator it is set for each call of the function. ``force_backend`` (with the
default stance) compiles with another backend; ``skip_guard_eval_unsafe`` is refused: skipping
guards can give wrong answers.
"""
import functools

STANCES = ("default", "force_eager", "eager_on_recompile", "fail_on_recompile", "eager_then_compile")


class _State:
    stance = "default"
    backend = None
    active = False  # anything but the default stance and no forced backend (read at every call)


current = _State()
_forced = {}  # (id of a ConvertFrame, backend) -> its twin with the forced backend


def _validate(stance, skip_guard_eval_unsafe, force_backend):
    if stance not in STANCES:
        if stance == "aot_eager_then_compile":
            raise ValueError("pydynamo.compiler.set_stance: 'aot_eager_then_compile' is not supported "
                             f"(stances: {', '.join(STANCES)})")
        raise ValueError(f"pydynamo.compiler.set_stance: unknown stance {stance!r} (stances: {', '.join(STANCES)})")
    if skip_guard_eval_unsafe:
        raise ValueError("pydynamo.compiler.set_stance(skip_guard_eval_unsafe=True) is refused: skipping "
                         "guards can serve compiled code to inputs it is wrong for")
    if force_backend is not None and stance != "default":
        raise ValueError("pydynamo.compiler.set_stance: force_backend goes with the 'default' stance")
    if force_backend is not None:
        from .backends import lookup_backend
        lookup_backend(force_backend)  # an unknown name raises here, not at the next call


def _swap(stance, backend):
    from . import api
    if api.compiling_in_this_thread():
        raise RuntimeError("pydynamo.compiler.set_stance called while pydynamo is compiling (in a "
                           "compiled region): call it outside")
    prior = (current.stance, current.backend)
    current.stance, current.backend = stance, backend
    current.active = stance != "default" or backend is not None
    return prior


class set_stance:
    """Set the stance: at once when called, restored by ``with`` at the block's end, or for each
    call of a function it decorates."""

    def __init__(self, stance="default", *, skip_guard_eval_unsafe=False, force_backend=None):
        _validate(stance, skip_guard_eval_unsafe, force_backend)
        self.stance, self.backend = stance, force_backend
        self.prior = _swap(stance, force_backend)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        _swap(*self.prior)
        return False

    def __call__(self, fn):
        _swap(*self.prior)  # as a decorator, the stance holds only during calls
        stance, backend = self.stance, self.backend

        @functools.wraps(fn)
        def _fn(*args, **kwargs):
            prior = _swap(stance, backend)
            try:
                return fn(*args, **kwargs)
            finally:
                _swap(*prior)
        return _fn


def setting_for(setting):
    """The hook setting a pydynamo-optimized call uses under the current stance."""
    stance = current.stance
    if stance == "default":
        if current.backend is not None and setting not in (None, False):
            return _forced_twin(setting, current.backend)
        return setting
    if stance == "force_eager":
        return None
    if stance == "eager_on_recompile":
        return False if setting is not None else None
    return setting  # fail_on_recompile, eager_then_compile: ConvertFrame.on_miss reads them


def _forced_twin(setting, backend):
    key = (id(setting), backend if isinstance(backend, str) else id(backend))
    twin = _forced.get(key)
    if twin is None or twin[0] is not setting:
        from .backends import lookup_backend
        from .convert_frame import ConvertFrame
        twin = (setting, ConvertFrame(lookup_backend(backend), fullgraph=setting.fullgraph, dynamic=setting.dynamic))
        _forced[key] = twin
    return twin[1]
