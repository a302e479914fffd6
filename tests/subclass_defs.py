"""Tensor subclasses used by the subclass tests (importable by name, so AOTAutograd and pickling
find them): a float8-style scaled wrapper whose flatten context is its scale."""
import torch
from torch.utils._pytree import tree_map


class ScaledTensor(torch.Tensor):
    """``data * scale`` held as low-precision ``data`` plus a Python float ``scale`` (the flatten
    context): every op dequantizes, computes in float32 and returns a plain tensor, except
    ``clone``/``detach``/views of ``data``, which keep the wrapper."""

    @staticmethod
    def __new__(cls, data, scale):
        return torch.Tensor._make_wrapper_subclass(cls, data.shape, dtype=torch.float32,
                                                   device=data.device, requires_grad=False)

    def __init__(self, data, scale):
        self._data, self._scale = data, scale

    def __repr__(self):
        return f"ScaledTensor({self._data}, scale={self._scale})"

    def __tensor_flatten__(self):
        return ["_data"], self._scale

    @staticmethod
    def __tensor_unflatten__(inner, scale, outer_size, outer_stride):
        return ScaledTensor(inner["_data"], scale)

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in (torch.ops.aten.detach.default, torch.ops.aten.clone.default,
                    torch.ops.aten.t.default):
            x = args[0]
            return ScaledTensor(func(x._data), x._scale)

        def unwrap(t):
            return t._data.float() * t._scale if isinstance(t, ScaledTensor) else t
        return func(*tree_map(unwrap, args), **tree_map(unwrap, kwargs))


def scaled(values, scale):
    return ScaledTensor((values / scale).to(torch.bfloat16), scale)
