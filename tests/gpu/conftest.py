import pytest


@pytest.fixture(autouse=True)
def _triton_compiles_for_the_gpu(monkeypatch):
    """The CPU Triton tests switch Triton's interpreter on (TRITON_INTERPRET=1) when they are
    imported; Triton reads the variable when a kernel is defined, so CUDA tests turn it off."""
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
