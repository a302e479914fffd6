import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))  # the tests' helper modules

from pydynamo import _C  # noqa: E402


@pytest.fixture(autouse=True)
def _clean_hook():
    """Every test starts and ends with the hook off and the caches empty in this thread."""
    _C.set_eval_frame(None)
    _C.reset()
    yield
    leaked = _C.set_eval_frame(None)
    _C.reset()
    assert leaked is None, f"test left the hook on: {leaked!r}"
