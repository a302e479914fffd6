"""The decomposition table handed to AOTAutograd: torch's core ATen decompositions plus the
composite ops we want as pointwise ops and single-axis reductions (softmax, layer_norm, gelu,
their backwards, losses).  var/var_mean and mean stay whole: we lower them directly (two-pass
variance), since their decompositions go to prims."""
import functools

import torch
from torch._decomp import core_aten_decompositions, get_decompositions

aten = torch.ops.aten

EXTRA = [
    aten._softmax, aten._log_softmax, aten._softmax_backward_data, aten._log_softmax_backward_data,
    aten.native_layer_norm, aten.native_layer_norm_backward, aten.gelu, aten.gelu_backward,
    aten.nll_loss_forward, aten.nll_loss_backward, aten.clamp_min, aten.clamp_max, aten.hardtanh,
    aten.leaky_relu, aten.silu, aten.silu_backward, aten.addcmul, aten.addcdiv, aten.lerp,
    aten.sigmoid_backward, aten.tanh_backward, aten.threshold_backward, aten.elu, aten.mish,
    aten.hardswish, aten.hardsigmoid, aten.rms_norm, aten._fused_rms_norm, aten.std.correction,
    # batch and group norm as reductions and pointwise ops: they fuse with the ReLU and the
    # residual add around them in convolutional nets
    aten._native_batch_norm_legit_functional, aten._native_batch_norm_legit_no_training,
    aten._native_batch_norm_legit, aten.native_batch_norm, aten.native_group_norm,
    aten.linalg_vector_norm, aten.repeat, aten.slice_scatter, aten.index_select, aten.logical_xor,
]
KEEP = {aten.var_mean.correction, aten.var.correction, aten.mean.dim, aten.mean.default,
        aten.embedding_dense_backward,
        # torch's decomposition of the CPU flash-attention forward (torch 2.13) gives wrong
        # gradients to q, k and v under AOTAutograd: it stays one ATen call, forward and backward
        aten._scaled_dot_product_flash_attention_for_cpu.default}


def convolution_backward(grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed,
                         output_padding, groups, output_mask):
    """A convolution's bias gradient (the sum of grad_output over all dims but channels) as a
    reduction of ours, which fuses with the pointwise backward before it; the input and weight
    gradients stay one ATen call. ATen's own bias gradient is two kernels more per convolution
    (a bf16 reduce and a cast: 60 a step in EfficientNet-B0's squeeze-excite convolutions)."""
    if not output_mask[2]:
        return NotImplemented  # (make_fx then records the call itself)
    grad_bias = aten.sum.dim_IntList(grad_output, [0] + list(range(2, grad_output.dim())))
    if not (output_mask[0] or output_mask[1]):
        return None, None, grad_bias
    grad_input, grad_weight, _ = aten.convolution_backward.default(
        grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed, output_padding, groups,
        [output_mask[0], output_mask[1], False])
    return grad_input, grad_weight, grad_bias


def native_dropout(input, p, train):
    """Dropout in training as its mask, drawn from ``rand_like`` (lowerings.rand_like: in the
    kernel, as our native_dropout lowering draws it), and the product. Kept whole, the op is a
    random one whose outputs AOTAutograd's partitioner may not recompute, so the backward saved
    the dropped-out value itself besides the mask: BERT's attention probabilities, cast to bf16
    for the backward's matmul, 25 MB a layer. Split, it saves the mask and recomputes the rest.
    Other forms stay whole (train=False, p of 0 or 1, integers: the lowering's)."""
    if train is False or not 0 < p < 1 or not input.dtype.is_floating_point:
        return NotImplemented
    keep = aten.ge.Scalar(aten.rand_like.default(input, dtype=torch.float32), p)
    return aten.mul.Tensor(aten.mul.Tensor(input, keep), 1.0 / (1.0 - p)), keep


@functools.lru_cache(None)
def decomposition_table():
    table = dict(core_aten_decompositions())
    for op, fn in get_decompositions(EXTRA).items():
        table.setdefault(op, fn)
    table[aten.convolution_backward.default] = convolution_backward
    table[aten.native_dropout.default] = native_dropout
    return {op: fn for op, fn in table.items() if op not in KEEP}
