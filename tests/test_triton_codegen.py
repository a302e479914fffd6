"""The triton backend on CPU tensors through Triton's interpreter: pointwise chains, broadcasts,
views, reductions, fusion, ATen fallbacks, the disk cache.  Each test compares with eager."""
import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported: kernels run on the CPU

import logging  # noqa: E402
import operator  # noqa: E402
import re  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

pytest.importorskip("triton")

from pydynamo.backends.triton import triton_backend  # noqa: E402
from pydynamo.backends.triton import kernel, runtime, scheduler  # noqa: E402

os.environ["PYDYNAMO_TRITON_STRICT"] = "1"  # an internal error fails the test instead of hiding


@pytest.fixture
def sources(caplog):
    """The generated modules logged while the test runs."""
    caplog.set_level(logging.INFO, logger="pydynamo.output_code")

    def get():
        return [r.args[1] for r in caplog.records if r.name == "pydynamo.output_code"]
    get.records = lambda: caplog.records
    return get


def check(fn, *args, atol=1e-5, rtol=1e-5):
    gm = torch.fx.symbolic_trace(fn)
    compiled = triton_backend(gm, list(args))
    expected = fn(*args)
    actual = compiled(*args)
    torch.testing.assert_close(actual, expected, atol=atol, rtol=rtol, equal_nan=True)
    return actual


def kernels(src):
    return src.count("\ndef triton_")


def r(*shape, dtype=torch.float32):
    return torch.randn(shape, dtype=dtype)


# ---- pointwise ----

def test_pointwise_chain_is_one_kernel(sources):
    check(lambda a, b, c: F.gelu(a * b + c) * torch.sigmoid(b), r(8, 16), r(8, 16), r(8, 16))
    (src,) = sources()
    assert kernels(src) == 1
    assert "xindex" in src and "tl.erf" in src


def test_channels_last_pointwise_walks_memory_in_order(sources):
    """A pointwise kernel storing a channels-last tensor iterates in its memory order (channels
    innermost): one flat index for inputs and output in the same layout, no strided accesses."""
    cl = torch.channels_last
    a, b = r(2, 8, 4, 4).contiguous(memory_format=cl), r(2, 8, 4, 4).contiguous(memory_format=cl)
    out = check(lambda a, b: torch.relu(a * 2 + 1) + b, a, b)
    assert out.is_contiguous(memory_format=cl)
    (src,) = sources()
    assert kernels(src) == 1
    loads = re.findall(r"tl\.load\(in_ptr\d \+ \(([^)]*)\)", src)
    assert loads and all(i == "x0" for i in loads), loads
    assert re.search(r"tl\.store\(out_ptr0 \+ \(x0\)", src)


@pytest.mark.parametrize("shape,dims", [((2, 3, 64, 32), (0, 1, 3, 2)), ((4, 100, 72), (0, 2, 1)),
                                        ((96, 80), (1, 0)), ((3, 17, 33, 20), (0, 3, 1, 2))])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_transposing_copy_is_tiled(sources, shape, dims, dtype):
    """A copy that reads along one dim and stores along another (``x.permute(...).contiguous()``,
    with a scale and a cast fused) iterates 2-d tiles: a row kernel with nothing to reduce, whose
    loads walk its columns (the read's contiguous dim) and stores its rows (the store's), so
    both are contiguous runs. Sizes that are not multiples of the blocks are masked."""
    x = r(*shape, dtype=dtype)
    check(lambda x: (x.permute(*dims) * 0.5).float().contiguous(), x)
    (src,) = sources()
    assert kernels(src) == 1 and "def triton_row_" in src and "tl.reduce" not in src, src
    load = re.search(r"tl\.load\(in_ptr0 \+ \(([^)]*)\)", src).group(1)
    store = re.search(r"tl\.store\(out_ptr0 \+ \(([^)]*)\)", src).group(1)
    unit = lambda index, v: re.search(rf"(^|[ +]){v}\d*($| )", index.replace("xindex", "x_"))  # noqa: E731
    assert unit(load, "x") and unit(store, "r"), (load, store)


@pytest.mark.parametrize("shape", [(3, 150, 70), (2, 256, 128)])
def test_transposing_copy_takes_one_tile_a_program(sources, shape):
    """A tiled copy whose rows are too long to hold whole does not loop down them: each program
    takes one XBLOCK by RBLOCK tile (its place in both dims from its program id), so the grid
    grows with the rows too. Rows and columns that are not multiples of the blocks are masked."""
    x = r(*shape)
    check(lambda x: (x.transpose(1, 2) * 2).contiguous(), x)
    (src,) = sources()
    assert kernels(src) == 1 and "def triton_row_" in src, src
    assert "for roffset" not in src and re.search(r"rindex = \(pid // \d+\) \* RBLOCK", src), src


def test_copy_keeping_the_inner_dim_is_not_tiled(sources):
    check(lambda x: x.permute(0, 2, 1, 3).contiguous(), r(2, 64, 3, 32))
    (src,) = sources()
    assert "def triton_pointwise_" in src and "def triton_row_" not in src


@pytest.mark.parametrize("name", ["exp", "log", "tanh", "sigmoid", "erf", "rsqrt", "sqrt", "abs", "neg",
                                  "relu", "sin", "cos", "floor", "ceil", "reciprocal", "exp2", "log1p", "expm1"])
def test_unary(name):
    x = r(33).abs() + 0.1 if name in ("log", "rsqrt", "sqrt", "log1p") else r(33)
    check(lambda x: getattr(torch, name)(x) * 2, x, atol=2e-6, rtol=2e-5)


def test_arithmetic_comparisons_where_casts():
    def f(a, b):
        m = (a > b) & (a < 1.5) | (b == 0)
        y = torch.where(m, a - b, b / (a.abs() + 1)) + 2 ** b - a ** 2 + torch.maximum(a, b) * torch.minimum(a, b)
        return y.to(torch.float16).to(torch.float32), m, (a * 10).to(torch.int32), torch.clamp(a, -0.5, 0.5)
    check(f, r(5, 7), r(5, 7), atol=1e-3, rtol=1e-3)


def test_pow_silu_gelu_tanh_approx():
    check(lambda x: x.pow(3) + x.pow(0.5 + 0 * 1).nan_to_num(0) * 0 + F.silu(x) + F.gelu(x, approximate="tanh")
          + F.leaky_relu(x, 0.1) + F.hardtanh(x), r(4, 9), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("sa,sb", [((4, 1, 6), (5, 1)), ((1,), (3, 4)), ((2, 3, 1), (1, 1, 5)), ((), (4, 4))])
def test_broadcast(sa, sb):
    check(lambda a, b: a * b + a, r(*sa), r(*sb))


def test_integer_and_bool_math():
    check(lambda a, b: ((a + b) * 3 - b, a > b, (a == b).sum()),
          torch.randint(-5, 5, (6, 7)), torch.randint(-5, 5, (7,)))


def test_scalar_constants_and_full():
    check(lambda x: (x + torch.ones_like(x) * 3, torch.zeros_like(x), torch.full_like(x, 2.5) * x), r(3, 5))


# ---- views: index arithmetic ----

VIEWS = {
    "view": lambda x: (x + 1).view(6, 20) * 2,
    "reshape_split": lambda x: (x * 2).reshape(2, 3, 4, 5) + 1,
    "permute": lambda x: (x + 1).permute(2, 0, 1) * 3,
    "transpose": lambda x: x.transpose(0, 2).contiguous() - x.transpose(0, 2),
    "transpose_in": lambda x: torch.exp(x.transpose(1, 2)) + 1,
    "expand": lambda x: x[:, :1, :].expand(6, 4, 5) * x,
    "unsqueeze": lambda x: x.sum(1).unsqueeze(1) + x,
    "squeeze": lambda x: (x[:, :1] * 2).squeeze(1) + x[:, 1],
    "slice": lambda x: x[1:5:2, 1:, :-1] * 2,
    "select": lambda x: x[2] + x[:, 3].sum(0),
    "view_of_permute": lambda x: (x.permute(1, 0, 2) + 1).reshape(4, 30) * 2,
    "t": lambda x: x[0].t() * 2 + 1,
    "flatten_unflatten": lambda x: torch.sigmoid(x.flatten()).view(6, 4, 5).sum(-1),
    "split": lambda x: (torch.split(x + 1, [2, 4], dim=0)[0] * 2, torch.split(x, 2, dim=1)[1] - 1),
}


@pytest.mark.parametrize("name", sorted(VIEWS))
def test_views(name):
    check(VIEWS[name], r(6, 4, 5))


def test_input_views_strided_input():
    x = r(8, 6).t()  # a non-contiguous input
    check(lambda x: x * 2 + x.sum(0, keepdim=True), x)


# ---- reductions ----

@pytest.mark.parametrize("op", ["sum", "mean", "amax", "amin", "var", "std"])
@pytest.mark.parametrize("dim", [-1, 0, 1, (0, 2)])
def test_reductions(op, dim):
    def f(x):
        fn = getattr(torch, op)
        return fn(x * 2, dim=dim, keepdim=True) + 1, fn(x, dim=dim)
    check(f, r(6, 10, 7), atol=1e-5, rtol=1e-5)


def test_full_reduction_and_int_sum():
    check(lambda x: (x.sum(), x.mean(), (x > 0).sum(), x.amax()), r(5, 33))


def test_prod_is_a_kernel(monkeypatch, sources):
    """prod over a dim, over all, of ints (an int64 result) and bools, with NaN and a zero, in the
    persistent and looped forms and split over parts; no ATen prod is called."""
    def fn(x, i):
        return (torch.prod(x, 1), torch.prod(x, 0, keepdim=True) * 2, x.prod(), torch.prod(i, 1),
                torch.prod(i > 0, 0), torch.prod(x, 1, dtype=torch.float64))
    x = 1 + r(6, 40) / 8
    x[1, 3], x[2, 5] = float("nan"), 0.0
    i = torch.randint(-3, 4, (6, 40), dtype=torch.int32)
    check(fn, x, i)
    monkeypatch.setattr(scheduler, "PERSISTENT_MAX", 16)
    monkeypatch.setattr(kernel, "LOOP_RBLOCK", 8)
    check(fn, x, i)
    check(lambda x: x.prod(0), 1 + r(4096, 16) / 4096, atol=1e-5, rtol=1e-5)  # split in two stages
    srcs = sources()
    assert all("aten.prod" not in s and "torch.prod" not in s for s in srcs)
    assert "for roffset in range(0, 40, RBLOCK):" in srcs[1] and kernels(srcs[2]) == 2
    check(lambda x: x.prod(), r(0, 3))  # nothing to multiply: ATen's 1


@pytest.mark.parametrize("rows,cols", [(6, 10), (3, 257)])
def test_softmax_one_kernel(rows, cols, sources):
    check(lambda x: torch.softmax(x * 0.5, dim=-1), r(rows, cols))
    (src,) = sources()
    assert kernels(src) == 1, src
    assert "kept in registers" in src


def test_softmax_backward_seen_merged_is_one_kernel(sources):
    """Softmax's backward handed to a batched matmul as [B*H, S, S] while its row sum is
    computed over [B, H, S, S]: the elementwise part, another shape with as many elements, is
    computed in the row kernel at each lane's element, not in a second kernel re-reading both."""
    w = r(4, 64, 8)

    def fn(x, g):
        p = torch.softmax(x, dim=-1)
        dx = p * (g - (g * p).sum(-1, keepdim=True))
        return torch.bmm(dx.reshape(4, 64, 64) * 0.125, w)  # (the scale after the view, as in SDPA)
    check(fn, r(2, 2, 64, 64), r(2, 2, 64, 64), atol=1e-5, rtol=1e-5)
    (src,) = sources()
    assert kernels(src) == 1, src  # softmax, the row sum, the backward stored as [4, 64, 64]
    assert "triton_pointwise" not in src


def test_value_saved_at_the_graph_end_is_stored_by_its_softmax_kernel(sources):
    """AOTAutograd puts what the backward saves at the forward's end: here the probabilities,
    transposed as the backward's matmul reads them (dense, so laid out as the softmax computes
    them), many kernels after their softmax. That kernel stores them from its registers,
    instead of a kernel at the end re-reading the scores and recomputing."""
    w, ws = r(4, 64, 64), [r(4, 64, 64) * 0.1 for _ in range(10)]

    def fn(x):
        p = torch.softmax(x, dim=-1)
        h = torch.bmm(p.reshape(4, 64, 64), w)
        for v in ws:
            h = torch.sin(torch.bmm(h, v))
        return h, p.reshape(4, 64, 64).transpose(1, 2).clone()
    out = check(fn, r(2, 2, 64, 64), atol=1e-4, rtol=1e-4)
    assert out[1].stride() == (4096, 1, 64)
    (src,) = sources()
    # the softmax storing both p and its saved copy; one sine kernel launched 10 times
    assert kernels(src) == 2, src
    assert len(re.findall(r"\n        \(?launch_1\b.*\(stream, ", src)) == 10


def test_log_softmax_and_logsumexp():
    check(lambda x: (F.log_softmax(x, -1), torch.logsumexp(x, 0)), r(7, 12))


def test_layer_norm_one_kernel(sources):
    w, b = r(40), r(40)
    check(lambda x: F.layer_norm(x, (40,), w, b), r(2, 3, 40), atol=2e-5, rtol=2e-5)
    (src,) = sources()
    assert kernels(src) == 1, src
    assert "def triton_row_0_native_layer_norm(" in src  # named after the op, before decomposition


def test_rms_norm():
    w = r(16)
    check(lambda x: F.rms_norm(x, (16,), w, eps=1e-6), r(5, 16), atol=2e-5, rtol=2e-5)


def test_looped_reductions(monkeypatch, sources):
    """Rows longer than the persistent limit take the looped form: one pass per phase."""
    monkeypatch.setattr(scheduler, "PERSISTENT_MAX", 16)
    monkeypatch.setattr(kernel, "LOOP_RBLOCK", 8)
    w, b = r(50), r(50)
    check(lambda x: (torch.softmax(x, -1), F.layer_norm(x, (50,), w, b), x.var(-1), x.sum(0)), r(5, 50),
          atol=2e-5, rtol=2e-5)
    assert "for roffset in range(0, 50, RBLOCK):" in sources()[0]
    x = r(3, 40)
    x[1, 7] = float("nan")
    check(lambda x: (x.amax(1), x.amin(0)), x)


@pytest.mark.parametrize("rblock", [8, 2048])
def test_long_row_softmax_reads_its_rows_once_for_max_and_sum(monkeypatch, sources, rblock):
    """Rows too long for registers: the max and the sum of exp(x - max) come from one pass (a
    running max, the sum rescaled as it grows), then one pass writes. Rows of -inf, partly -inf
    (a causal mask), NaN and +inf give what eager gives."""
    monkeypatch.setattr(scheduler, "PERSISTENT_MAX", 16)
    monkeypatch.setattr(kernel, "LOOP_RBLOCK", rblock)
    x = r(6, 50) * 4
    x[1] = float("-inf")
    x[2, 9:] = float("-inf")
    x[3, 7] = float("nan")
    x[4, 3] = float("inf")
    check(lambda x: torch.softmax(x, -1), x)
    check(lambda x: torch.log_softmax(x, -1) * 2, x)
    assert all(s.count("for roffset in range(0, 50, RBLOCK):") == 2 for s in sources())
    t = torch.tensor([3, 40, 8, 0, 0, 1])
    check(lambda x: F.cross_entropy(x, t), r(6, 50) * 4, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("persistent", [True, False])
def test_cumsum_is_a_scan_fused_with_its_users(monkeypatch, sources, persistent):
    """cumsum along rows (held whole, or looped with a carry), along columns, of ints and
    bools (int64 sums), and fused: the position ids HF models derive from an attention mask."""
    if not persistent:
        monkeypatch.setattr(scheduler, "PERSISTENT_MAX", 16)
        monkeypatch.setattr(scheduler, "COLUMN_PERSISTENT_MAX", 4)
        monkeypatch.setattr(kernel, "LOOP_RBLOCK", 8)
    check(lambda x: torch.cumsum(x * 2, -1) + 1, r(5, 50), atol=1e-4, rtol=1e-5)
    check(lambda x: torch.cumsum(x, 0).exp(), r(37, 6), atol=1e-4, rtol=1e-5)
    mask = torch.ones(3, 40, dtype=torch.int64)
    mask[1, :7] = 0
    check(lambda m: (m.cumsum(-1) - 1).masked_fill(m == 0, 1), mask)
    check(lambda x: (x > 0).cumsum(1), r(4, 30))
    assert all("aten.cumsum" not in s for s in sources())
    assert kernels(sources()[0]) == 1


@pytest.mark.parametrize("persistent", [True, False])
def test_argmax_and_max_with_indices(monkeypatch, sources, persistent):
    """argmax/argmin over a dim or all, max/min with indices: the first of equal values, NaN
    counted largest, -inf rows, integers; rows held whole or looped, and columns."""
    if not persistent:
        monkeypatch.setattr(scheduler, "PERSISTENT_MAX", 16)
        monkeypatch.setattr(scheduler, "COLUMN_PERSISTENT_MAX", 4)
        monkeypatch.setattr(kernel, "LOOP_RBLOCK", 8)
    x = torch.randint(-3, 4, (6, 40)).float()   # many ties
    x[2, 11] = float("nan")
    x[3] = float("-inf")
    check(lambda x: (x.argmax(1), x.argmin(1, keepdim=True), x.argmax(0), x.argmax()), x)
    check(lambda x: (x.max(1).values, x.max(1).indices), x)
    check(lambda x: (x.min(0).values * 2, x.min(0).indices), x)
    check(lambda i: (i.argmax(-1), i.max(0).indices), torch.randint(-5, 5, (7, 33)))
    assert all("aten.argm" not in s and "aten.max.dim" not in s for s in sources())


def test_relu_layer_norm_residual(sources):
    check(lambda x: F.relu(F.layer_norm(x, (32,))) + x, r(6, 32), atol=2e-5, rtol=2e-5)
    assert kernels(sources()[0]) == 1


def test_cross_entropy():
    t = torch.randint(0, 10, (6,))
    check(lambda x: F.cross_entropy(x, t), r(6, 10))


def test_gather_is_an_indirect_load(sources):
    x, t = r(6, 10), torch.randint(0, 10, (6, 3))
    check(lambda x: torch.gather(x.exp(), 1, t) * 2, x)
    check(lambda x: torch.gather(x, 0, t[:4, :2].t().contiguous() % 6), x)   # another dim, smaller index
    check(lambda x: torch.gather(x, 1, t.int()) + 1, x)                      # int32 index
    assert all("torch.ops.aten.gather" not in s for s in sources())
    assert "tl.load(in_ptr1 + (" in sources()[0]


def test_scatter_one_index_per_row_is_a_one_hot(sources):
    t = torch.randint(0, 10, (6, 1))
    check(lambda x: torch.zeros_like(x).scatter(1, t, -1.0) + x, r(6, 10))
    check(lambda x: x.scatter(1, t, x[:, :1] * 3), r(6, 10))                 # a tensor src
    check(lambda x: x.t().scatter(0, t.t(), 5.0), r(6, 10))                  # along dim 0
    assert all("torch.ops.aten.scatter" not in s for s in sources())
    assert all(kernels(s) == 1 for s in sources())
    wide = torch.randint(0, 10, (6, 2))                                      # two per row: ATen
    check(lambda x: x.scatter(1, wide, 1.0), r(6, 10))
    assert "torch.ops.aten.scatter" in sources()[-1]


def test_arange_forms():
    """arange(end), arange(start, end), arange(start, end, step) and iota, as index values."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from pydynamo.backends.triton import compile_aten_graph

    def fn(x):
        return (x + torch.arange(8), x * torch.arange(3, 11), x - torch.arange(2, 26, 3),
                x + torch.ops.prims.iota(8, start=5, step=2, dtype=torch.int64, device="cpu",
                                         requires_grad=False))
    x = r(4, 8)
    gm = make_fx(fn)(x)
    targets = {n.target for n in gm.graph.nodes if n.op == "call_function"}
    assert {torch.ops.aten.arange.default, torch.ops.aten.arange.start, torch.ops.aten.arange.start_step} <= targets
    got, want = compile_aten_graph(gm, [x])([x]), fn(x)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)


def test_embedding_of_positions(sources):
    """A GPT's position embedding: the arange feeding it must give valid rows."""
    table = r(16, 4)
    check(lambda idx: F.embedding(torch.arange(idx.shape[1]), table) + F.embedding(idx, table),
          torch.randint(0, 16, (2, 8)))


def test_cat_fuses_with_its_inputs_and_users(sources):
    """torch.cat as loads masked to each input's slice: RoPE's rotate_half and the multiply-add
    around it are one kernel; cat along other dims, of three sizes, into a reduction, with
    dtype promotion and a legacy empty tensor match eager."""
    cos, sin = r(8), r(8)

    def rope(q):
        rot = torch.cat([-q[..., 4:], q[..., :4]], dim=-1)
        return q * cos + rot * sin
    check(rope, r(2, 3, 8))
    assert kernels(sources()[0]) == 1 and "torch.ops.aten.cat" not in sources()[0]
    a, b, c = r(2, 3, 4), r(2, 5, 4), r(2, 1, 4)
    check(lambda a: torch.cat([a, b * 2, c], 1).sum(1), a)
    check(lambda a: torch.cat([a, a.exp()], 0) + 1, a)
    check(lambda a: torch.cat([a[:, :1], torch.ones(2, 1, 4, dtype=torch.int64)], 2), a)
    check(lambda a: torch.cat([torch.empty(0), a.flatten()]) * 3, a)
    assert all("torch.ops.aten.cat" not in s for s in sources())


def test_max_pool2d_values_and_indices(sources):
    """max_pool2d as masked window loads: padding, strides, dilation, ceil_mode, ties (the
    first wins), NaN and -inf, with the indices ATen's backward reads; fused with a ReLU."""
    x = torch.randint(-2, 3, (2, 3, 9, 11)).float()   # ties
    x[0, 1, 4, 4] = float("nan")
    x[1, 2] = float("-inf")

    def pool(x, **kw):
        out = F.max_pool2d(torch.relu(x + 0.5), 3, return_indices=True, **kw)
        return out[0], out[1]
    check(lambda x: pool(x, stride=2, padding=1), x)
    check(lambda x: pool(x, stride=2, ceil_mode=True), x)
    check(lambda x: pool(x, stride=1, dilation=2, padding=1), x)
    check(lambda x: F.max_pool2d(x, 2), x[0])                   # 3-D input
    assert all("aten.max_pool2d" not in s for s in sources())
    assert kernels(sources()[0]) == 1


@pytest.mark.parametrize("kernel, stride, padding, ceil_mode", [
    (2, 2, 0, False), (3, 2, 1, False), (3, 1, 1, False), (3, 2, 0, True), ((2, 3), (1, 2), (1, 0), False),
    (4, 1, 2, True)])
def test_pooling_gradients_gather_from_their_windows(sources, kernel, stride, padding, ceil_mode):
    """max_pool2d's and avg_pool2d's backward as one kernel each: every input position sums the
    gradients of the windows that hold it (overlapping windows, padding, ceil_mode's partial
    last window, count_include_pad, divisor_override, 3-D input, half precision)."""
    aten = torch.ops.aten
    ks, st, pd = ([v, v] if isinstance(v, int) else list(v) for v in (kernel, stride, padding))
    x = torch.randint(-2, 3, (2, 3, 9, 11)).float()  # ties: the indices say which one won
    _, idx = F.max_pool2d(x, kernel, stride, padding, ceil_mode=ceil_mode, return_indices=True)
    g = r(*idx.shape)
    check(lambda g, x, i: aten.max_pool2d_with_indices_backward(g, x, ks, st, pd, [1, 1], ceil_mode, i), g, x, idx)
    check(lambda g, x, i: aten.max_pool2d_with_indices_backward(g, x, ks, st, pd, [1, 1], ceil_mode, i),
          g[0], x[0], idx[0])
    for include_pad, divisor in ((True, None), (False, None), (True, 3)):
        check(lambda g, x: aten.avg_pool2d_backward(g, x, ks, st, pd, ceil_mode, include_pad, divisor) * 2,
              g, x, atol=1e-6, rtol=1e-5)
    half = lambda g, x: aten.avg_pool2d_backward(g, x, ks, st, pd, ceil_mode, True, None)  # noqa: E731
    got = triton_backend(torch.fx.symbolic_trace(half), [g.half(), x.half()])(g.half(), x.half())
    # summed in float32 and rounded once (eager's CPU kernel rounds every partial sum to half)
    torch.testing.assert_close(got, half(g.half().float(), x).half(), atol=1e-3, rtol=1e-3)
    assert all("_backward" not in s[s.index("def call("):] for s in sources())
    assert all(kernels(s) == 1 for s in sources())


@pytest.mark.parametrize("kernel, stride, padding, dilation, ceil_mode", [
    (3, 1, 1, 2, False), (2, 1, 0, 2, False), (3, 2, 1, 2, True), (4, 3, 2, 2, True), ((2, 3), (2, 1), (1, 1), (3, 2), False)])
def test_dilated_max_pool2d_gradient(sources, kernel, stride, padding, dilation, ceil_mode):
    """A dilated max-pool's backward: each input position gathers from the window of each
    kernel element j that starts j * dilation before it, when one starts there."""
    aten = torch.ops.aten
    ks, st, pd, dl = ([v, v] if isinstance(v, int) else list(v) for v in (kernel, stride, padding, dilation))
    x = torch.randint(-2, 3, (2, 3, 10, 11)).float()
    _, idx = F.max_pool2d(x, kernel, stride, padding, dilation, ceil_mode=ceil_mode, return_indices=True)
    g = r(*idx.shape)
    check(lambda g, x, i: aten.max_pool2d_with_indices_backward(g, x, ks, st, pd, dl, ceil_mode, i), g, x, idx)
    assert all("_backward" not in s[s.index("def call("):] for s in sources())


def test_pooling_gradients_of_a_small_cnn():
    """A conv, max-pool, conv, avg-pool, dilated max-pool network's input and weight gradients
    match eager."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(3, 2, 1),
                              torch.nn.Conv2d(4, 4, 3, padding=1), torch.nn.AvgPool2d(2, ceil_mode=True),
                              torch.nn.MaxPool2d(2, 1, dilation=2))
    x = r(2, 3, 15, 15)

    def run(fn, x):
        x = x.clone().requires_grad_()
        net.zero_grad()
        out = fn(x)
        (out * torch.arange(out.numel()).view(out.shape)).sum().backward()
        return out.detach(), x.grad, [p.grad.clone() for p in net.parameters()]
    gm = torch.fx.symbolic_trace(net)
    got, want = run(triton_backend(gm, [x.clone().requires_grad_()]), x), run(net, x)
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


def test_avg_pool2d_divisors(sources):
    """avg_pool2d's divisor in every mode: padding counted or not, ceil_mode windows that run
    past the padded input, divisor_override; fused with what it reads."""
    x = r(2, 3, 9, 11)
    for kw in [dict(stride=2, padding=1), dict(stride=2, padding=1, count_include_pad=False),
               dict(stride=2, ceil_mode=True), dict(stride=2, padding=1, ceil_mode=True, count_include_pad=False),
               dict(stride=1, padding=1, divisor_override=5)]:
        check(lambda x: F.avg_pool2d(torch.relu(x) * 2, 3, **kw), x, atol=1e-5, rtol=1e-5)
    check(lambda x: F.avg_pool2d(x, 2), x[0])
    assert all("aten.avg_pool2d" not in s for s in sources())
    assert kernels(sources()[0]) == 1


# ---- fallbacks and fusion around them ----

def test_matmul_falls_back_with_fusion_around(sources):
    w = r(16, 8)
    check(lambda x: torch.relu(torch.tanh(x * 2) @ w + 1) * 3, r(4, 16), atol=1e-5, rtol=1e-5)
    src = sources()[0]
    assert "torch.mm(" in src and kernels(src) == 2


def test_independent_copies_across_a_matmul_share_a_kernel(sources):
    """q and v copied out of one projection, a matmul between them (attention): the later copy
    joins the earlier copy's kernel instead of launching its own."""
    def attn(qkv):
        q, k, v = qkv.view(2, 8, 3, 4, 6).permute(2, 0, 3, 1, 4)
        a = torch.softmax(q @ k.transpose(-2, -1), dim=-1)
        return a @ v
    check(attn, r(2, 8, 72))
    src = sources()[0]
    assert src.count("torch.bmm(") == 2
    # q copy + v copy in one kernel, k's transposed copy (another shape), softmax
    assert kernels(src) == 3


def test_residual_stream_is_stored_not_recomputed_by_every_layer(sources):
    """x = x + f(layer_norm(x)) over 8 layers: each sum is stored once (by the kernel that
    first computes it) instead of staying lazy, which made layer k's kernels re-add all k
    layers before it. Every kernel reads a bounded number of tensors."""
    import re
    ws = [r(16, 16) for _ in range(8)]

    def fn(x):
        for w in ws:
            x = x + torch.tanh(F.layer_norm(x, (16,)) @ w)
        return x
    check(fn, r(8, 16), atol=1e-5, rtol=1e-5)
    reads = [len(re.findall(r"in_ptr\d+", d)) for d in re.findall(r"def triton_\w+\((.*?)\):", sources()[0])]
    assert max(reads) <= 3, reads


def test_a_repeated_layer_reuses_its_kernel(sources):
    """Identical kernels (the same block applied twice) are defined and compiled once."""
    w = r(16, 16)

    def fn(x):
        for _ in range(3):
            x = torch.tanh((x @ w) * 2 + 1)
        return x
    check(fn, r(8, 16), atol=1e-5, rtol=1e-5)
    src = sources()[0]
    assert kernels(src) == 1 and len(re.findall(r"\n        \(?launch_0\b.*\(stream, ", src)) == 3
    assert "# and again " in src


def test_aten_calls_nothing_reads_are_left_out(sources):
    """A KV cache's empty tensor that cat skips: its allocation is not made. Calls that write,
    draw random numbers or have effects stay (wrapper._pure)."""
    import pydynamo
    from pydynamo.backends.triton import wrapper

    def fn(x):
        return torch.cat([torch.tensor([], dtype=x.dtype), x], dim=-2) * 2
    x = r(2, 3, 8)
    pydynamo.reset()
    assert torch.equal(pydynamo.optimize("triton", fullgraph=True)(fn)(x), fn(x))
    pydynamo.reset()
    (src,) = sources()
    assert "aten." not in src.split("def call(")[1], src
    assert wrapper._pure(torch.ops.aten.empty_strided.default) and wrapper._pure(torch.ops.aten.mm.default)
    assert not wrapper._pure(torch.ops.aten.add_.Tensor) and not wrapper._pure(torch.ops.aten.rand.default)
    assert not wrapper._pure(torch.ops.aten._assert_async.msg)


def test_view_of_a_whole_buffer_as_allocated_is_the_buffer(sources):
    """A view with the shape and strides the buffer was allocated with (a saved weight seen
    through t() twice) is the buffer itself in the wrapper, not an as_strided call; a view
    of another geometry stays one."""
    w = r(6, 4)

    def fn(x):
        y = torch.tanh(x)
        return torch.mm(y, w), y.t().t(), y.t()
    out = check(fn, r(5, 6))
    assert out[1].shape == (5, 6) and out[2].stride() == (1, 6)
    (src,) = sources()
    assert src.count(".as_strided(") == 1, src


def test_no_kernel_moves_across_an_in_place_aten_call():
    """A buffer may join an earlier kernel across ATen calls, but not across one that writes
    memory in place (it could read what that call writes)."""
    from pydynamo.backends.triton.lowering import FallbackOp
    g = scheduler.Group(scheduler.Space((4, 4)))
    pure = FallbackOp("f0", torch.ops.aten.mm.default, (), {}, [], False)
    inplace = FallbackOp("f1", torch.ops.aten.add_.Tensor, (), {}, [], True)
    assert list(scheduler._joinable([g, pure])) == [g]
    assert list(scheduler._joinable([g, inplace])) == []
    assert list(scheduler._joinable([g, inplace, pure])) == []


def test_graph_with_an_in_place_op_runs_with_aten(caplog, monkeypatch):
    """Lowering computes values where they are first needed, which could be after an in-place op
    writes what they read: such a graph (AOTAutograd never makes one) is not lowered."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from pydynamo.backends.triton import compile_aten_graph, generate_source

    def fn(x, y):
        a = y * 2
        y.add_(1)
        return a, y * 3
    gm = make_fx(fn)(r(4, 4), r(4, 4))
    with pytest.raises(NotImplementedError, match="in-place"):
        generate_source(gm)
    monkeypatch.delenv("PYDYNAMO_TRITON_STRICT")
    x, y = r(4, 4), r(4, 4)
    want = fn(x.clone(), y.clone())
    got = compile_aten_graph(gm, [x, y])([x, y])
    torch.testing.assert_close(got[0], want[0])
    torch.testing.assert_close(got[1], want[1])


@pytest.mark.parametrize("fn, shape", [
    (lambda x: x.sum(0), (4096, 16)),                       # column sums (a bias gradient)
    (lambda x: x.sum(0, keepdim=True) * 2, (4096, 16)),
    (lambda x: x.sum((0, 1)), (64, 64, 8)),                 # several reduced dims
    (lambda x: x.sum((0, 1), keepdim=True), (64, 64, 8)),
    (lambda x: x.mean(0) + x.amax(0), (4096, 8)),           # mean's division by the full count
    (lambda x: x.amin((0, 1)), (2048, 4, 2)),
    (lambda x: x.sum((0, 2, 3)), (64, 3, 16, 16)),            # a batch norm's sums over N, H, W
    (lambda x: x.mean((0, 2, 3), keepdim=True) * x, (64, 3, 16, 16)),
    (lambda x: torch.var(x, (0, 2), keepdim=True), (256, 2, 64)),
    (lambda x: x.sum(), (1 << 16,)),                        # one output
    (lambda x: torch.var(x, 0), (4096, 4)),
    (lambda x: (x > 0).sum(0), (4096, 8)),                  # an integer sum
])
def test_split_reductions_match_eager(monkeypatch, sources, fn, shape):
    monkeypatch.setenv("PYDYNAMO_TRITON_SPLIT_REDUCTIONS", "1")
    check(fn, r(*shape), atol=1e-4, rtol=1e-4)
    src = sources()[0]
    assert kernels(src) >= 2  # partials, then their reduction


def test_split_reduction_parts(monkeypatch):
    from pydynamo.backends.triton.reductions import split_factor
    assert split_factor((2048, 512), [0]) == 32          # 8 programs of 64 columns -> 256
    assert split_factor((8, 256, 512), [0, 1]) == 32     # adjacent reduced dims count as one
    assert split_factor((8, 64, 4096), [0, 2]) == 4      # not adjacent: the outer dim is cut
    assert split_factor((64, 64, 112, 112), [0, 2, 3]) == 4  # batch norm: 64 channels -> 256
    assert split_factor((8192, 4096), [1]) == 1          # a program per row already
    assert split_factor((1 << 16,), [0]) == 32           # one long row: slices of 2048
    assert split_factor((100, 16), [0]) == 1             # short columns: not worth it
    assert split_factor((4097, 16), [0]) == 1            # no even cut
    # columns along memory, fewer than a program holds: more programs (32 channels: 512)
    assert split_factor((32, 802816), [1], (1, 32)) == 512
    assert split_factor((64, 802816), [1], (1, 64)) == 128
    monkeypatch.setenv("PYDYNAMO_TRITON_SPLIT_REDUCTIONS", "0")
    assert split_factor((2048, 512), [0]) == 1           # turned off


def _kernel_code(src):
    """The generated kernels, without the shared helpers of the header."""
    return src[src.index("\ndef triton_"):src.index("# ---- The wrapper")]


def _nan_at(x, *index):
    x[index] = float("nan")
    return x


@pytest.mark.parametrize("fn, x, split", [
    (lambda x: torch.var(x, 1), r(8, 9000) * 3 + 5, False),                       # looped rows
    (lambda x: torch.std(x, 1), r(8, 9000, dtype=torch.float64) + 1e4, False),   # float64 stays float64
    (lambda x: torch.var(x, 1, correction=2, keepdim=True), r(3, 5000, dtype=torch.bfloat16), False),
    (lambda x: torch.var(x, 1), _nan_at(r(8, 9000), 3, 17), False),               # NaN as eager's
    (lambda x: torch.var(x, 1, correction=0), r(3, 20000) * 3 + 5, True),         # split rows
    (lambda x: torch.var(x, (0, 2), keepdim=True), r(256, 2, 64) + 100, True),    # split columns
    (lambda x: torch.var(x, 1), r(0, 9000), None),                                # nothing: with ATen
])
def test_variance_of_long_rows_reads_its_input_once(sources, fn, x, split):
    """Rows too long for registers: Welford's running mean and M2 per lane, combined at the end,
    beside the sum for the mean, in one loop over the input (the two-pass form looped twice).
    Split: each part's sum and M2 in one kernel, Chan et al.'s combination in the next."""
    check(fn, x, atol=2e-2 if x.dtype == torch.bfloat16 else 1e-4, rtol=1e-4)
    if split is None:
        return
    code = _kernel_code(sources()[0])
    assert kernels(code) == (2 if split else 1)
    first = code.split("@triton.jit")[0]
    assert first.count("for roffset") <= 1 and first.count("tl.load(in_ptr0") == 1
    if not split:
        assert "welford_combine" in first
    if x.dtype == torch.float64:
        assert "tl.float64" in first


def test_batch_norm_statistics_of_channels_last_split_the_whole_run():
    """A channels-last batch norm's N, H, W are one run of memory: the split cuts it as one
    block (so 4 images of 64 channels give 128 programs, not 4), and var_mean's partial sums
    and M2s come from one kernel."""
    from pydynamo.backends.triton.reductions import _Plan
    plan = _Plan((4, 64, 32, 32), [0, 2, 3], (65536, 1, 2048, 64))
    assert plan.perm == [1, 0, 2, 3] and plan.parts == 128
    assert _Plan((4, 64, 32, 32), [0, 2, 3], (65536, 1024, 32, 1)).perm is None  # NCHW: as before
    x = (r(4, 64, 32, 32) * 2 + 50).contiguous(memory_format=torch.channels_last)
    check(lambda x: (lambda vm: (vm[0], vm[1], x.sum((0, 2, 3)), x.mean((0, 2, 3), keepdim=True)))(
        torch.var_mean(x, (0, 2, 3))), x, atol=1e-4, rtol=1e-4)


def test_column_reductions_read_neighbouring_columns(sources):
    """A column sum (a bias gradient) reads XBLOCK adjacent columns per program; the split
    stage reduces slices of 64 rows in registers, the second stage the 32 partials; programs hold
    fewer columns (down to 32) rather than leave the GPU's SMs idle."""
    check(lambda x: x.sum(0), r(2048, 96), atol=1e-4, rtol=1e-4)
    src = sources()[0]
    assert kernels(src) == 2
    assert "XBLOCK=32, RBLOCK=64)" in src and "XBLOCK=32, RBLOCK=32)" in src


def test_kernels_compile_for_a_gpu_without_one(sources):
    """The interpreter accepts programs Triton's GPU compiler may not: compile the kernels of a
    graph with rows, columns, a gather and a one-hot for sm_90 with Triton's compiler and ptxas
    (tools/triton_ptx.py), as their first launch on an H100 would."""
    import glob
    import sys
    import triton
    if not glob.glob(os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "ptxas")):
        pytest.skip("no ptxas in this Triton")
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tools"))
    from triton_ptx import compile_module
    t = torch.randint(0, 64, (128, 1))

    def fn(x, w):
        y = torch.softmax(x, -1) * w
        return y.sum(0), torch.gather(y, 1, t), torch.zeros_like(x).scatter(1, t, 1.0) - y
    check(fn, r(128, 64), r(64), atol=1e-5, rtol=1e-5)
    path = [rec for rec in sources.records() if rec.name == "pydynamo.output_code"][0].args[0]
    compiled = compile_module(path, 90)
    assert len(compiled) == kernels(sources()[0]) >= 2
    assert all(regs and spill == 0 for _, _, _, regs, spill, _ in compiled), compiled


def test_fallback_writes_in_place_only_into_dead_buffers(sources):
    """index_put on a buffer read again later must copy it first (out of place); on a buffer
    with no later use it runs in place. (Two index tensors: an index_put ATen runs.)"""
    idx, cols = torch.tensor([0, 2, 2]), torch.tensor([1, 1, 3])

    def later_use(x):
        z = torch.ones(6, 4) * x.sum()
        return torch.index_put(z, (idx, cols), x[:3, 0], accumulate=True) + z

    def dead(x):
        z = torch.ones(6, 4) * x.sum()
        return torch.index_put(z, (idx, cols), x[:3, 0], accumulate=True) * 2
    check(later_use, r(6, 4), atol=1e-5, rtol=1e-5)
    check(dead, r(6, 4), atol=1e-5, rtol=1e-5)
    first, second = sources()
    assert "index_put_accumulate(" in first and ", False)" in first
    assert "index_put_accumulate(" in second and ", True)" in second


@pytest.mark.parametrize("deterministic", [False, True])
def test_accumulating_index_put_is_an_index_add(deterministic):
    """index_put(accumulate=True) by one integer index on dim 0 (an embedding gradient) runs as
    index_add_ (atomic adds, no sort): duplicates add up, negative indices count from the end, an
    index out of range still fails, and other forms (two indices, a bool mask, broadcast values,
    deterministic mode) keep ATen's index_put."""
    from pydynamo.backends.triton.runtime import index_put_accumulate
    prev = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(deterministic)
    try:
        base = r(6, 4)
        cases = [((torch.tensor([[0, 2], [2, -1]]),), r(2, 2, 4)),
                 ((torch.tensor([1, 1, -6], dtype=torch.int32),), r(3, 4)),
                 ((torch.tensor([0, 3]), torch.tensor([1, 1])), r(2)),
                 ((torch.tensor([True, False, True, False, False, True]),), r(3, 4)),
                 ((torch.tensor([0, 5]),), r(4))]
        for indices, values in cases:
            want = torch.index_put(base, indices, values, accumulate=True)
            torch.testing.assert_close(index_put_accumulate(base, indices, values, False), want)
            b = base.clone()
            assert index_put_accumulate(b, indices, values, True) is b
            torch.testing.assert_close(b, want)
        with pytest.raises((IndexError, RuntimeError)):
            index_put_accumulate(base.clone(), (torch.tensor([6]),), r(1, 4), True)
    finally:
        torch.use_deterministic_algorithms(prev)


def test_launchers_built_ahead_are_the_ones_triton_loads(sources, monkeypatch):
    """precompile builds Triton's C launcher for each argument-list shape from the shape alone;
    that source must be the one Triton's CudaLauncher makes for the compiled kernel, or the
    first launch would not find it in the cache."""
    import sys
    import triton
    from triton.backends.nvidia import driver as nv
    if not os.path.exists(os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "ptxas")):
        pytest.skip("no ptxas in this Triton")
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tools"))
    from triton_ptx import compiled_kernels
    check(lambda x, t: (torch.softmax(x, -1) * 2, torch.gather(x, 1, t) + x.sum(0)[:1]),
          r(16, 8), torch.randint(0, 8, (16, 1)))
    path = [rec for rec in sources.records() if rec.name == "pydynamo.output_code"][0].args[0]
    made = []

    def capture(src, **kwargs):
        made.append(src)
        raise RuntimeError("captured")
    monkeypatch.setattr(nv, "compile_module_from_src", capture)
    monkeypatch.setattr(nv, "library_dirs", lambda: [])
    shapes = set()
    for name, _, _, k, _ in compiled_kernels(path):
        try:
            nv.CudaLauncher(k.src, k.metadata)
        except RuntimeError as e:
            if "active drivers" in str(e):  # Triton 3.7 asks for a GPU driver before building it
                pytest.skip("this Triton builds no launcher without a GPU driver")
            assert str(e) == "captured"
        else:
            pytest.fail("the launcher was not built from source")
        kinds = list(k.src.signature.values())
        shape = (sum(t != "constexpr" for t in kinds), kinds.count("constexpr"))
        assert made[-1] == runtime.launcher_source(*shape), name
        shapes.add(shape)
    assert len(shapes) >= 2


def test_graph_inputs_named_like_the_wrappers_own_names():
    """AOTAutograd names backward inputs after forward nodes: one called empty_strided, buf0
    or stream must not shadow what the generated module defines."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from pydynamo.backends.triton import compile_aten_graph

    def fn(a, b, c, d):
        return torch.softmax(a * b, -1) + c.sum() - d
    xs = [r(4, 8), r(4, 8), r(3), r(4, 8)]
    gm = make_fx(fn)(*xs)
    for node, name in zip([n for n in gm.graph.nodes if n.op == "placeholder"],
                          ["empty_strided", "buf0", "stream", "launch_0"]):
        node.name = name
    gm.recompile()
    got = compile_aten_graph(gm, xs)(list(xs))
    torch.testing.assert_close(got[0], fn(*xs))


def test_unknown_ops_fall_back():
    idx = torch.tensor([2, 0, 1])
    check(lambda x: (torch.cumsum(x, 1) * 2, torch.sort(x, 1)[0] + 1, x[idx] - 1,
                     torch.cat([x, x * 2], 1), torch.gather(x, 1, idx.view(3, 1).expand(3, 2))), r(3, 4))


def test_embedding_and_dropout_eval():
    emb = r(10, 4)
    check(lambda i: F.embedding(i, emb) * 2 + 1, torch.tensor([[1, 2], [3, 9]]))


def test_multiple_outputs_and_input_passthrough():
    check(lambda x, y: (x, x + y, (x + y).view(-1), y.t()), r(3, 4), r(3, 4))


# ---- dtypes ----

@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision(dtype):
    tol = dict(atol=1e-2, rtol=1e-2) if dtype == torch.float16 else dict(atol=4e-2, rtol=4e-2)
    w = r(24, dtype=dtype)
    check(lambda x, y: (torch.softmax(x, -1), F.layer_norm(x, (24,), w), F.gelu(x * y + 1), x.sum(0)),
          r(5, 24, dtype=dtype), r(5, 24, dtype=dtype), **tol)


def test_conversion_to_half_rounds_inside_a_fused_chain(sources):
    """x.half().float() is x rounded to float16, not x, though the kernel computes in float32
    (bfloat16 the same on a GPU; the interpreter truncates to bfloat16 instead of rounding)."""
    x = r(64) * 3
    out = check(lambda x: x.half().float() * 2 + 1, x, atol=0, rtol=0)
    assert not torch.equal(out, x * 2 + 1)
    assert "tl.float16).to(tl.float32)" in sources()[0] and kernels(sources()[0]) == 1
    check(lambda x: x.bfloat16().float() * 2, x, atol=0, rtol=2 ** -7)  # within one bfloat16 ulp


# ---- code, cache, runtime ----

def test_generated_code_is_readable_and_cached(sources, monkeypatch):
    f = lambda x: torch.softmax(x, -1) + 1  # noqa: E731
    x = r(4, 8)
    check(f, x)
    src = sources()[0]
    assert src.startswith("# Generated by pydynamo") and "def make(constants, fallback):" in src
    files = os.listdir(runtime.cache_dir())
    assert any(n.startswith("graph_") for n in files) and any(n.startswith("g_") for n in files)
    # A second "process": no in-memory modules, and the generator must not run.
    monkeypatch.setattr(runtime, "_modules", {})
    import pydynamo.backends.triton as tb
    monkeypatch.setattr(tb, "generate_source", lambda gm: (_ for _ in ()).throw(AssertionError("compiled")))
    check(f, x)


def test_buffer_reuse(sources):
    """A kernel's output takes the memory of a dead buffer of its layout. (Here each kernel reads
    the matmul's result transposed, so it cannot write into that result instead.)"""
    w = r(8, 8)

    def f(x):
        for _ in range(3):
            x = torch.tanh(x @ w).t() + 1
        return x
    check(f, r(8, 8), atol=1e-5, rtol=1e-5)
    src = sources()[0]
    assert "# reuse" in src and "in_out_ptr" not in src


def test_a_kernel_writes_into_an_input_whose_last_use_it_is(sources):
    """gelu(x @ w1 + b1) @ w2 + b2 + x: each kernel stores its result over the matmul result it
    reads, element for element, instead of allocating; the graph input x and a result still
    needed later are never written."""
    w1, b1, w2, b2 = r(16, 64), r(64), r(64, 16), r(16)
    check(lambda x: (F.gelu(x @ w1 + b1) @ w2 + b2 + x), r(8, 16), atol=1e-5, rtol=1e-5)
    src = sources()[0]
    assert src.count("# written in place") == 2 and src.count("(in_out_ptr0, ") == 2
    assert "empty_strided(" not in src
    def returned(x):
        m = x @ w1
        return torch.tanh(m), m

    def read_later(x):
        m = x @ w1
        return (torch.tanh(m) * 2) @ m.t()
    check(returned, r(8, 16), atol=1e-5, rtol=1e-5)
    check(read_later, r(8, 16), atol=1e-4, rtol=1e-4)
    check(lambda x: (torch.tanh(x * 2), x), r(8, 16))
    assert all("in_out_ptr" not in s for s in sources()[1:])


def test_a_row_kernel_writes_in_place_only_after_its_last_read(monkeypatch, sources):
    """Looped softmax over a matmul's result that also returns 2 * m: the loop that reads m for
    the max and sum comes before the one that writes the softmax, but 2 * m is written in the
    first loop. Only the softmax may take m's memory: 2 * m there would change the m that the
    second loop reads."""
    monkeypatch.setattr(scheduler, "PERSISTENT_MAX", 16)
    monkeypatch.setattr(kernel, "LOOP_RBLOCK", 8)
    w = r(16, 50)

    def fn(x):
        m = x @ w
        return m * 2, torch.softmax(m, -1)
    check(fn, r(6, 16), atol=1e-5, rtol=1e-5)
    src = sources()[0]
    assert src.count("for roffset in range(0, 50, RBLOCK):") == 2
    assert src.count("# written in place") == 1
    (line,) = [l for l in src.splitlines() if "# written in place" in l]
    softmax = re.search(r"return \((\w+), (\w+),?\)", src).group(2)
    assert line.strip().startswith(f"{softmax} = ")


def test_stride_mismatch_falls_back_to_aten():
    gm = torch.fx.symbolic_trace(lambda x: x * 2 + 1)
    compiled = triton_backend(gm, [r(4, 6)])
    x = r(6, 4).t()
    torch.testing.assert_close(compiled(x), x * 2 + 1)


def test_cpu_without_interpreter_runs_eagerly(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    gm = torch.fx.symbolic_trace(lambda x: x * 2)
    assert triton_backend(gm, [r(3)]) == gm.forward


def test_operator_graph():
    """torch-level graphs may use operator.* on tensors."""
    g = torch.fx.Graph()
    a, b = g.placeholder("a"), g.placeholder("b")
    g.output((g.call_function(operator.truediv, (g.call_function(operator.add, (a, b)), 2)),))
    gm = torch.fx.GraphModule(torch.nn.Module(), g)
    x, y = r(3, 3), r(3, 3)
    torch.testing.assert_close(triton_backend(gm, [x, y])(x, y)[0], (x + y) / 2)


def test_input_mutation_and_nan_semantics():
    def f(x, y):
        x.mul_(2)
        return torch.relu(x + y), torch.amax(x, 1)
    x, y = r(3, 4), r(3, 4)
    x[0, 1] = float("nan")
    x2 = x.clone()
    compiled = triton_backend(torch.fx.symbolic_trace(f), [x, y])
    out = compiled(x, y)
    ref = f(x2, y)
    torch.testing.assert_close(x, x2, equal_nan=True)
    torch.testing.assert_close(out[0], ref[0], equal_nan=True)
    torch.testing.assert_close(out[1], ref[1], equal_nan=True)


def test_registered_backend_through_the_hook():
    """The whole path: pydynamo captures the function, the "triton" backend compiles its graph."""
    import pydynamo
    from pydynamo.testing import CompileCounter

    def f(x, w):
        return torch.softmax(F.gelu(x * 2 + 1) @ w, dim=-1)

    counter = CompileCounter()

    def counting_triton(gm, example_inputs):
        counter(gm, example_inputs)
        return pydynamo.lookup_backend("triton")(gm, example_inputs)

    assert "triton" in pydynamo.list_backends()
    opt = pydynamo.optimize(counting_triton)(f)
    x, w = torch.randn(8, 16), torch.randn(16, 32)
    for _ in range(2):
        torch.testing.assert_close(opt(x, w), f(x, w), atol=1e-5, rtol=1e-5)
    assert counter.frame_count == 1


def test_views_of_known_layouts_are_one_as_strided_call(sources):
    """Views the wrapper needs as real tensors (ATen arguments, outputs) are made with one
    as_strided call when the base's layout is known: a buffer of ours, or a graph input (strides
    checked on entry) whose own storage offset is kept. A view that moves the offset of an input,
    or a reshape that copies, replays the op itself. Values and strides match eager's."""
    def f(x):
        y = x * 2
        m = x.t().mm(x)
        return (m, x.t(), x.unsqueeze(0).expand(3, 5, 8), x[1:], y.t(), y.view(8, 5)[1:],
                y.t().reshape(40), m.t().t().unsqueeze(0), (m + 1).t())
    x = torch.randn(50)[2:42].view(5, 8)
    assert x.storage_offset() == 2
    gm = torch.fx.symbolic_trace(f)
    compiled = triton_backend(gm, [x])
    for a, e in zip(compiled(x), f(x)):
        torch.testing.assert_close(a, e)
        assert a.stride() == e.stride() and a.shape == e.shape
    src = sources()[0]
    assert src.count(".as_strided(") >= 4, src
    # a view that only leads to other views is never made: m.t().t().unsqueeze(0) is one call on
    # the (restrided) matmul result
    assert src.count("permute") == 0 and src.count("buf1.as_strided(") == 1, src


def test_indirect_indices_are_checked_on_the_device(sources, monkeypatch):
    """Kernels that read at computed indices (embedding, gather, x[idx]) assert on the device
    that each index is in range, as eager checks; they are compiled with debug=True so that the
    asserts stay. Triton's interpreter drops device asserts unless its own options ask for them:
    turn them on here, as the GPU compile does."""
    import dataclasses

    import triton.runtime.interpreter as interp
    monkeypatch.setattr(interp.interpreter_builder, "options", dataclasses.replace(
        interp.interpreter_builder.options, debug=True, sanitize_overflow=False))
    w, x = r(10, 4), r(6, 3)
    cases = [(lambda i: F.embedding(i, w) * 2, torch.tensor([[1, 2], [3, 9]]), torch.tensor([[1, 2], [3, 10]])),
             (lambda i: x[i] + 1, torch.tensor([0, -1, 5]), torch.tensor([0, -7, 5])),
             (lambda i: torch.gather(x, 1, i) * 3, torch.tensor([[0], [2], [1], [0], [2], [2]]),
              torch.tensor([[0], [2], [1], [0], [3], [2]]))]
    for fn, good, bad in cases:
        compiled = triton_backend(torch.fx.symbolic_trace(fn), [good])
        torch.testing.assert_close(compiled(good), fn(good))
        with pytest.raises(Exception, match="index out of bounds"):  # the interpreter wraps it
            compiled(bad)
        with pytest.raises((IndexError, RuntimeError)):
            fn(bad)  # as eager
    # an index computed in the kernel (from an arange) is out of range past the tensor's end, in
    # the lanes of the last block that hold no element: those are not checked
    y = r(5, 5)
    diag = lambda y: torch.gather(y, 1, torch.arange(y.size(0)).unsqueeze(1)) * 2  # noqa: E731
    torch.testing.assert_close(triton_backend(torch.fx.symbolic_trace(diag), [y])(y), diag(y))
    assert all("@triton.jit(debug=True)" in s and "tl.device_assert(" in s for s in sources())


def test_a_refused_static_launch_falls_back_to_triton():
    """If torch's static launcher refuses a launch (a limit of some torch version), that launch
    and the later ones of the site go through Triton's JIT instead of failing the call."""
    from pydynamo.backends.triton.runtime import Launch

    class Kernel:
        debug = None
        runs = []

        def run(self, *args, **kwargs):
            self.runs.append(args)

    def refuse(*args):
        raise ValueError("too many arguments")
    launch = Launch(Kernel(), 4, 4, (torch.float32,), XBLOCK=64)
    launch.static, launch.device = (refuse, 0, 4, 0, "O", ()), 0
    t = torch.zeros(256)
    launch.owned((0, 0), t)
    assert launch.static is None and len(Kernel.runs) == 1
    launch((0, 0), t)
    assert len(Kernel.runs) == 2


def test_a_site_launched_again_in_the_call_that_loaded_its_kernel_launches_statically(monkeypatch):
    """A wrapper takes launch_stream() once per call; in its first call that is None (nothing
    loaded yet). A site launched again later in that call (a repeated layer), its kernel loaded
    meanwhile, still launches statically, not through Triton's JIT."""
    from pydynamo.backends.triton.runtime import Launch

    class Kernel:
        debug = None
        runs = []

        def run(self, *args, **kwargs):
            self.runs.append(args)
    static = []
    launch = Launch(Kernel(), 4, 4, (torch.float32,), XBLOCK=64)
    launch.static, launch.device = (lambda *args: static.append(args), 0, 4, 0, "O", ()), 0
    monkeypatch.setattr(runtime, "launch_stream", lambda: (0, 7))
    t = torch.zeros(256)
    launch(None, t)
    launch.owned(None, t)
    assert len(static) == 2 and static[0][-1] == 7 and not Kernel.runs


def test_compile_times_and_the_timing_log(caplog, monkeypatch):
    """compile_times() gives the last compile's phases (lowering, codegen, ...); a graph found in
    the disk cache is not generated again; PYDYNAMO_TRITON_TIMING=1 logs them after each graph's
    first call."""
    f = lambda x: torch.softmax(x * 3, -1) + 1  # noqa: E731
    x = r(4, 8)
    check(f, x)
    t = runtime.compile_times()
    assert t["graphs"] == t["generated"] == 1  # (under the interpreter no kernel compiles)
    assert t["lowering"] > 0 and t["codegen"] > 0 and t["aot_autograd"] > 0 and t["first_call"] == 0
    monkeypatch.setattr(runtime, "_modules", {})  # a second "process"
    monkeypatch.setattr(runtime, "TIMING", True)
    monkeypatch.setenv("PYDYNAMO_TRITON_TIMING", "1")
    caplog.set_level(logging.INFO, logger="pydynamo.triton.timing")
    check(f, x)
    t = runtime.compile_times()
    assert t["graphs"] == 1 and t["generated"] == 0 and t["lowering"] == 0 and t["first_call"] > 0
    logged = [rec.getMessage() for rec in caplog.records if rec.name == "pydynamo.triton.timing"]
    assert len(logged) == 1 and "1 graphs (0 generated)" in logged[0] and "first_call" in logged[0]
    assert runtime.compile_times(all=True)["graphs"] >= 2


def test_a_launch_site_waits_for_its_precompile_once():
    """precompile() returns before the kernels are compiled; a site's first call waits for its
    own compile (and the launcher build), loads the kernel into the static launcher, then
    launches; a compile that failed is left to Triton's JIT. Later calls do not wait again."""
    import threading
    import time
    from concurrent.futures import Future

    from pydynamo.backends.triton.runtime import Launch

    class Kernel:
        debug = None
        runs = []

        def run(self, *args, **kwargs):
            self.runs.append(args)

    events = []

    def finish_later(future, value, delay):
        def done():
            time.sleep(delay)
            events.append("compiled")
            future.set_result(value) if not isinstance(value, Exception) else future.set_exception(value)
        threading.Thread(target=done).start()

    class Static:  # stands for torch's static launcher class
        pass

    loaded = []

    class Probe(Launch):
        loads = False

        def load_static(self, cls):
            loaded.append(cls)
            return self.loads

    launch = Probe(Kernel(), 4, 4, (torch.float32,), XBLOCK=64)
    warm, build = Future(), Future()
    build.set_result(True)
    finish_later(warm, None, 0.2)
    launch.pending = (warm, build, Static)
    t = torch.zeros(256)
    launch.owned(None, t)
    assert events == ["compiled"] and loaded == [Static] and launch.pending is None
    assert len(Kernel.runs) == 1  # not loaded statically (load_static said False): Triton's JIT
    launch(None, t)
    assert loaded == [Static] and len(Kernel.runs) == 2

    failed = Probe(Kernel(), 4, 4, (torch.float32,), XBLOCK=64)
    warm = Future()
    warm.set_exception(RuntimeError("ptxas failed"))
    failed.pending = (warm, None, Static)
    failed(None, t)
    assert loaded == [Static] and len(Kernel.runs) == 3  # compiled by its first launch instead


def test_wrapper_overhead_tool_runs_the_wrappers_on_meta_tensors(tmp_path, monkeypatch):
    """tools/wrapper_overhead.py times the generated wrappers of a training step on meta tensors
    with launches and matmuls stubbed: both graphs run and return outputs of the traced shapes."""
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tools"))
    import wrapper_overhead as wo
    from pydynamo.backends.triton import runtime
    monkeypatch.setattr(runtime.Launch, "__call__", wo._host_launch)
    monkeypatch.setattr(runtime.Launch, "owned", wo._host_owned)
    monkeypatch.setattr(runtime, "launch_stream", lambda: (0, 0))
    class Loss(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.body = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.LayerNorm(32))

        def forward(self, x):
            return self.body(x).square().mean()
    graphs = wo.graphs_of(Loss(), [r(8, 16)], True)
    assert len(graphs) == 2
    for i, (src, consts, layouts) in enumerate(graphs):
        call = wo.wrapper_call(src, consts, str(tmp_path), i)
        outs = call([torch.empty_strided(s, st, dtype=d, device="meta") for s, st, d in layouts])
        assert outs and all(o.device.type == "meta" for o in outs if isinstance(o, torch.Tensor))


def test_input_check_ignores_strides_of_size_one_dims(sources):
    """An input whose strides differ from the trace's only in size-1 dims (which address
    nothing) runs the generated kernels; one that differs elsewhere still takes the ATen path, and
    both are right."""
    def f(m, x):
        return x * m + 1
    m, x = r(2, 1, 1, 8), r(2, 4, 3, 8)
    gm = torch.fx.symbolic_trace(f)
    compiled = triton_backend(gm, [m, x])
    (src,) = sources()
    assert re.search(r"strides_0\(arg0_1\.stride\(\)\) != \(8, 1\)", src)
    odd_ones = torch.randn(2, 8).as_strided((2, 1, 1, 8), (8, 3, 5, 1))
    torch.testing.assert_close(compiled(odd_ones, x), f(odd_ones, x))
    column = triton_backend(torch.fx.symbolic_trace(lambda c: c * 2), [r(6, 1)])  # one dim left
    assert "strides_0(arg0_1.stride()) != 1:" in sources()[-1]
    c = r(6, 1)
    torch.testing.assert_close(column(c), c * 2)
    other = torch.randn(8, 2).t().reshape(2, 1, 1, 8)  # a copy: contiguous again
    torch.testing.assert_close(compiled(other, x), f(other, x))
    strided_x = r(2, 4, 3, 16)[..., ::2]
    torch.testing.assert_close(compiled(m, strided_x), f(m, strided_x))


def test_every_buffer_is_freed_or_handed_on(sources):
    """A buffer the wrapper allocates is deleted after its last use, returned, or handed to a
    later buffer (reused, or written in place); one kept for a reuse that never comes was held
    to the end of the call (EfficientNet's peak memory: 2.4x Inductor's)."""
    import re

    def f(x, w):
        a = torch.relu(x).sum(1, keepdim=True)       # stored: read after the matmul
        m = torch.mm(x * 2, w)                       # an ATen call between
        b = (m + a).softmax(-1)
        return torch.mm(b, w.t()).sigmoid() + 1
    check(f, r(16, 8), r(8, 8))
    src = sources()[0]
    body = src[src.index("    def call(args):"):]
    made = set(re.findall(r"(buf\d+) = empty_strided", body))
    handed = set(re.findall(r"buf\d+ = (buf\d+)  # (?:reuse|written in place)", body))
    aliases = set(re.findall(r"(buf\d+) = buf\d+  # (?:reuse|written in place)", body))
    deleted = set(re.findall(r"del (buf\d+)", body))
    returned = set(re.findall(r"buf\d+", body[body.rindex("return ("):]))
    assert made
    for name in made | aliases:
        assert name in deleted | handed | returned, f"{name} is never freed"


def test_batch_norm_training_forward_kernels(sources):
    """A training batch norm's forward: the statistics' partials (sums and M2s) in one kernel;
    mean, variance, rsqrt and the running statistics' updates (one value per channel, however
    they are shaped) in the next; the normalization in a third; the batch counter's add."""
    import pydynamo
    torch.manual_seed(0)
    m, ref = torch.nn.BatchNorm2d(64), torch.nn.BatchNorm2d(64)
    x = (r(4, 64, 32, 32) * 3 + 2).contiguous(memory_format=torch.channels_last)
    got = pydynamo.optimize("triton")(m)(x)
    torch.testing.assert_close(got, ref(x), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(m.running_mean, ref.running_mean)
    torch.testing.assert_close(m.running_var, ref.running_var)
    assert kernels(sources()[0]) == 4
    # every kernel reads the channels-last input with plain strides: the split's n, h, w fold
    # back into one index (ir.Affine._fold), with no division or remainder per element
    loads = [l for l in sources()[0].splitlines() if "tl.load(in_ptr" in l]
    assert loads and not [l for l in loads if "//" in l or "%" in l]
    pydynamo.reset()


def test_split_dims_fold_back_into_one_index():
    """``c*m*(e // (a*m)) + c*((e // a) % m)`` is ``c*(e // a)``, also where the first term has
    simplified to a loop variable; the n, h, w of a channels-last reduction fold to one stride."""
    from pydynamo.backends.triton.ir import Affine
    e = Affine.var("r2", 784) + Affine.var("x1", 16) * 784
    n, h, w = e.floordiv(196), e.floordiv(14).mod(14), e.mod(14)
    assert (n * 200704 + h * 14336 + w * 1024 + Affine.var("x0", 1024)).render() == "1024*r2 + x0 + 802816*x1"
    e = Affine.var("r2", 196) + Affine.var("x1", 64) * 196  # a part per image: e // 196 is x1
    assert (Affine.var("x1", 64) * 50176 + e.floordiv(14).mod(14) * 3584 + e.mod(14) * 256).render() \
        == "256*r2 + 50176*x1"
    e = Affine.var("r2", 32) + Affine.var("x1", 128) * 32  # parts of 32: e // 32 is x1
    assert e.floordiv(1024).render() == Affine.var("x1", 128).floordiv(32).render()
    assert (e.floordiv(1024) * 65536 + e.floordiv(32).mod(32) * 2048 + e.mod(32) * 64).render() \
        == "64*r2 + 2048*x1"
    x = Affine.var("x", 10) * 7 + 3
    assert (x.floordiv(4) * 8 + x.mod(4) * 2).render() == "14*x + 6"
    assert "%" in (n * 196 + w).render()  # h missing: nothing folds
    assert "%" in (h * 14336 + w * 1000).render()  # strides that are not a chain: nothing folds


def test_recomputed_values_count_only_big_reads(sources):
    """A value read by two kernels is recomputed in each unless that reads more memory than
    storing it: per-channel vectors (a batch norm's mean, rstd, weight, bias) do not count, so a
    bfloat16 batch norm's backward recomputes its float32 normalized input in both kernels
    rather than store it (twice the input's bytes)."""
    import pydynamo
    m = torch.nn.Sequential(torch.nn.BatchNorm2d(32), torch.nn.SiLU())
    x = r(8, 32, 16, 16).to(torch.bfloat16).contiguous(memory_format=torch.channels_last).requires_grad_()
    x2 = x.detach().clone().requires_grad_()
    ref = torch.nn.Sequential(torch.nn.BatchNorm2d(32), torch.nn.SiLU())
    with torch.autocast("cpu", torch.bfloat16):
        y = pydynamo.optimize("triton")(m)(x)
        y2 = ref(x2)
    y.float().square().sum().backward()
    y2.float().square().sum().backward()
    torch.testing.assert_close(y, y2, atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(x.grad, x2.grad, atol=5e-2, rtol=5e-2)
    bw = sources()[-1]
    assert kernels(bw) == 3 and "(8, 32, 16, 16), (8192, 1, 512, 32), device=DEVICE, dtype=torch.float32" not in bw
    pydynamo.reset()


def test_inputs_dropped_at_their_last_use():
    """The call owns its inputs (AOTAutograd's boxed convention): it clears the list and drops
    each input after the item that reads it last, so a backward frees the forward's saved tensors
    as it goes. A fallback op after the input's last read sees it freed; the input that is
    returned stays."""
    import weakref

    from torch.fx.experimental.proxy_tensor import make_fx

    from pydynamo.backends.triton import compile_aten_graph
    seen, refs = [], []

    @torch.library.custom_op("pydynamo_test::probe_freed", mutates_args=())
    def probe(t: torch.Tensor) -> torch.Tensor:
        if refs:
            seen.append([ref() is None for ref in refs])
        return t * 2

    @probe.register_fake
    def _(t):
        return torch.empty_like(t)

    def fn(a, b, c):
        return probe(a.sin() + b) + 1, c

    a, b, c = r(16), r(16), r(16)
    gm = make_fx(fn)(a, b, c)
    call = compile_aten_graph(gm, [a, b, c])
    want = fn(a, b, c)
    refs += [weakref.ref(t) for t in (a, b, c)]
    args = [a, b, c]
    del a, b
    got = call(args)
    assert args == []
    assert seen == [[True, True, False]]  # a and b freed before the probe ran; c is returned
    assert got[1] is refs[2]()
    for x, y in zip(got, want):
        torch.testing.assert_close(x, y)
