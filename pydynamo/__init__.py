"""pydynamo: a just-in-time graph capturer for PyTorch programs (see README.md)."""
from . import _C, logs

_C.set_error_handler(logs.report_callback_error)

__all__ = ["_C"]
