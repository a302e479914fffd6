"""The few knobs of pydynamo. This is the only module that reads PYDYNAMO_* variables."""
import os


def _env_int(name, default):
    value = os.environ.get(name)
    return default if value is None or value == "" else int(value)


# Compiled entries kept per code object; past it the code runs eagerly (issue 3, item 5).
cache_size_limit = _env_int("PYDYNAMO_CACHE_SIZE_LIMIT", 8)

# How deep user functions are inlined into one graph before giving up.
inline_depth_limit = _env_int("PYDYNAMO_INLINE_DEPTH_LIMIT", 32)

# Instructions one frame may execute symbolically (guards against unrolling a huge loop).
max_instructions = _env_int("PYDYNAMO_MAX_INSTRUCTIONS", 200_000)

# Comma-separated log artifacts to turn on (see logs.py): graph_breaks,recompiles,guards,graph,...
logs = os.environ.get("PYDYNAMO_LOGS", "")

# A backend that raises: False -> BackendCompilerFailed reaches the caller; True -> the frame runs
# eagerly with a warning.
suppress_errors = os.environ.get("PYDYNAMO_SUPPRESS_ERRORS", "") not in ("", "0")
