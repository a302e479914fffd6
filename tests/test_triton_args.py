"""Python scalars in the triton backend's kernels: a scalar the graph gives an op (a pad value, a
fill, a comparison's operand) is written into the kernel as a literal, and Triton types a literal
by its text, not by the dtype the lowering meant. A ``-100.0`` padding int64 labels (what
``F.pad(labels, (0, 1), value=-100)`` records: the schema's Scalar is a float) made the padded
labels float32; used as an index, that crashed a LLaMA training step in Triton
(``invalid operands of type pointer<fp32> and triton.language.float32``), and stored, it rounded
integers above 2**24. Each case is compared with eager, through Triton's CPU interpreter."""
import copy
import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported: kernels run on the CPU

import pytest  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

pytest.importorskip("triton")

import pydynamo  # noqa: E402
from pydynamo.backends.triton import ops  # noqa: E402

os.environ["PYDYNAMO_TRITON_STRICT"] = "1"  # an internal error fails the test instead of hiding


def run(fn, *args):
    torch.testing.assert_close(pydynamo.optimize("triton", fullgraph=True)(fn)(*args), fn(*args))


def test_literal_takes_the_dtype():
    assert ops.literal(-100.0, torch.int64) == "-100"
    assert ops.literal(2.7, torch.int32) == "2" and ops.literal(-2.7, torch.int64) == "-2"  # truncated
    assert ops.literal(3, torch.float32) == "3.0"
    assert ops.literal(2, torch.bool) == "1"
    assert ops.literal(2.5) == "2.5" and ops.literal(7) == "7"


def test_float_pad_of_int_labels_used_as_index():
    """The shifted labels of a causal LM's loss: padded with -100.0, then gathered with."""
    logits = torch.randn(2, 8, 16).log_softmax(-1)
    labels = torch.randint(0, 16, (2, 8))

    def fn(logits, labels):
        shifted = F.pad(labels, (0, 1), value=-100)[:, 1:]
        keep = shifted != -100
        picked = logits.gather(2, torch.where(keep, shifted, 0).unsqueeze(2)).squeeze(2)
        return torch.where(keep, -picked, 0.0).sum() / keep.sum()
    run(fn, logits, labels)


def test_float_scalars_into_big_integers():
    """Above 2**24 float32 rounds: every int64 value must stay exact."""
    x = torch.tensor([[2**40 + 1, -(2**33) - 3, 5]])
    run(lambda x: F.pad(x, (1, 1), value=-7.0) + 1, x)
    run(lambda x: torch.full((1, 3), 2.0**30 + 1, dtype=torch.int64) + x, x)
    run(lambda x: x.clamp(-(2**35), 2**39) * 2, x)


def test_int_scalar_against_bool():
    """``mask == 2`` compares in int64 (torch's promotion): False everywhere, not ``mask == True``."""
    m = torch.tensor([True, False, True])
    run(lambda m: (m == 2).int() + (m != 2).int() * 2 + (m == 1).int() * 4, m)


def test_scalar_shaped_tensors_beside_tensors():
    """0-d and one-element tensors reach kernels as pointers like any buffer (every kernel
    parameter is one: KernelCodegen._param), loaded at offset 0; a Python number is a literal."""
    x, s, one = torch.randn(4, 6), torch.tensor(1.5), torch.tensor([0.25])
    n = torch.tensor(3)
    run(lambda x, s, one: x * s + s.exp() + one - x.sum(), x, s, one)
    run(lambda x, s, n: ((x + n) * s).sum() + n * s, x, s, n)
    run(lambda x, s: x * 2.5 + s * 3 + (x > s).sum(), x, s)

    def step(count, x):  # a 0-d counter updated in place (BatchNorm's num_batches_tracked)
        count.add_(1)
        return x * count
    count, ref = torch.tensor(0), torch.tensor(0)
    torch.testing.assert_close(pydynamo.optimize("triton", fullgraph=True)(step)(count, x), step(ref, x))
    assert count.item() == ref.item() == 1


def test_integer_power_of_a_scalar():
    """``3 ** x`` of int64 ``x`` is int64, exact: not exp2 in float32 (81 for 3 ** 4 + 1)."""
    run(lambda x: torch.pow(3, x) + 1, torch.arange(20))


LLAMA = dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=64)


def test_tiny_llama_training_step():
    """The step that crashed: forward with labels (the loss pads them with -100), backward;
    loss and every gradient against eager."""
    tr = pytest.importorskip("transformers")
    torch.manual_seed(0)
    model = tr.LlamaForCausalLM(tr.LlamaConfig(**LLAMA))
    ref = copy.deepcopy(model)
    ids = torch.randint(0, LLAMA["vocab_size"], (2, 8))
    loss = pydynamo.optimize("triton")(model)(input_ids=ids, labels=ids).loss
    loss.backward()
    ref_loss = ref(input_ids=ids, labels=ids).loss
    ref_loss.backward()
    torch.testing.assert_close(loss, ref_loss, atol=1e-5, rtol=1e-4)
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-4, rtol=1e-3, msg=lambda m: f"{name}: {m}")
