import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))  # the tests' helper modules

try:
    import torch  # noqa: F401
    HAVE_TORCH = True
except ImportError:
    HAVE_TORCH = False

# C-only mode (no torch, or PYDYNAMO_TESTS_C_ONLY=1): only the C extension's own tests run
# (tests/test_c_*.py, with hand-made callbacks from c_support.py; test_c_coexist needs torch).
# The package's __init__ imports torch and the translator, so pydynamo becomes a bare package
# here and `from pydynamo import _C` loads just the extension.
C_ONLY = not HAVE_TORCH or os.environ.get("PYDYNAMO_TESTS_C_ONLY") == "1"
if C_ONLY:
    import importlib.util
    import types

    _spec = importlib.util.find_spec("pydynamo")
    _pkg = types.ModuleType("pydynamo")
    _pkg.__spec__, _pkg.__path__ = _spec, list(_spec.submodule_search_locations)
    sys.modules["pydynamo"] = _pkg
    _c_tests = {"test_c_guards.py", "test_c_hook.py", "test_c_lifetime.py"} | ({"test_c_coexist.py"} if HAVE_TORCH else set())
    collect_ignore_glob = [n for n in os.listdir(os.path.dirname(__file__) or ".")
                           if n.startswith("test_") and n.endswith(".py") and n not in _c_tests] + ["gpu"]

# PYDYNAMO_TESTS_PORTABLE_GUARDS=1: as where pydynamo._tensor_guard was not built (pip's isolated
# build has no torch to build it against): tensor guards and memory overlaps take the portable path
if os.environ.get("PYDYNAMO_TESTS_PORTABLE_GUARDS") == "1":
    sys.modules["pydynamo._tensor_guard"] = None

# Generated kernels and the triton backend's graph index go to one temporary directory per
# test session (tests needing their own use tmp_path), removed when the process exits (also
# after a usage error, where pytest never configures the session)
if "PYDYNAMO_CACHE_DIR" not in os.environ:
    import atexit
    import shutil
    import tempfile
    _CACHE = os.environ["PYDYNAMO_CACHE_DIR"] = tempfile.mkdtemp(prefix="pydynamo-test-cache-")
    atexit.register(shutil.rmtree, _CACHE, ignore_errors=True)

from pydynamo import _C  # noqa: E402

if C_ONLY:  # C-only mode: wire errors to the log as pydynamo/__init__ does
    from pydynamo import config, logs

    _C.set_error_handler(logs.report_callback_error)
    logs.configure(config.logs)


@pytest.fixture(autouse=True)
def _clean_hook():
    """Every test starts and ends with the hook off and the caches empty in this thread."""
    _C.set_eval_frame(None)
    _C.reset()
    yield
    leaked = _C.set_eval_frame(None)
    _C.reset()
    assert leaked is None, f"test left the hook on: {leaked!r}"


def _versions():
    import platform
    torch_mod = sys.modules.get("torch")
    torch_version = getattr(torch_mod, "__version__", None) if torch_mod is not None else None
    return (f"pydynamo tests on {platform.python_implementation()} {platform.python_version()}"
            + (f", torch {torch_version}" if torch_version else ", without torch (C-only mode)"))


def pytest_report_header(config):
    return _versions()


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """The interpreter the suite ran on, also under -q (which hides the header)."""
    terminalreporter.write_line(_versions())
