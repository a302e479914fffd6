"""Fusion: grouping ComputedBuffers into kernels.

A kernel iterates one *space*: a pointwise space (every element of one shape) or a row space
(the elements of ``in_shape`` split into kept dims, the rows ``x``, and reduced dims ``r``).
Each buffer is placed in the space at a *level*: ``full`` (one value per element), ``x`` (one
per row), ``red`` (a reduction: full in, x out) or ``scan`` (a running sum along the row: full
in, full out).  A buffer joins the kernel being built when
its shape fits the space and everything it reads from that kernel is read at exactly the place
where the kernel writes it (so the value is still in registers of the same program).

The check is a dry run: the buffer's element function is evaluated with a ``Recorder`` in
place of a kernel, which notes every load and index use instead of emitting code.

A row too long for registers (more than PERSISTENT_MAX) makes a *looped* kernel: one loop over
the row per *phase*; a value needing a reduction's result goes in a later phase than it.
"""
import contextlib
import math

from .ir import Affine, ComputedBuffer, Reduction, Scan, Scatter, contiguous_strides, offset_of

PERSISTENT_MAX = 4096       # longest row (next power of 2) held in registers: rows along memory
COLUMN_PERSISTENT_MAX = 64  # the same for columns (reduced dims not innermost), read XBLOCK wide


class NotFusable(Exception):
    pass


class Space:
    """An iteration space: ``xsizes``/``rsizes`` are (dim, size) pairs of the loop variables."""

    def __init__(self, shape, dims=None, stride=None):
        self.shape, self.dims = tuple(shape), (None if dims is None else tuple(dims))
        dims = self.dims or ()
        # the loops walk memory order: a pointwise kernel that of what it stores (a channels-last
        # output: channels innermost), a reduction that of what it reads (a channels-last mean
        # over H and W reduces columns, neighbouring channels side by side), so neighbouring
        # threads touch neighbouring addresses; ties (size-1 dims) keep the logical order. The
        # loop variables still index dims logically: only the order of iteration changes
        order = range(len(self.shape)) if stride is None else \
            sorted(range(len(self.shape)), key=lambda d: (-stride[d], d))
        self.xsizes = [(d, self.shape[d]) for d in order if d not in dims]
        self.rsizes = [(d, self.shape[d]) for d in order if d in dims]
        self.order = tuple(order)
        self.is_row = self.dims is not None
        self.xnumel = math.prod(s for _, s in self.xsizes)
        self.rnumel = math.prod(s for _, s in self.rsizes)

    def key(self):
        return (self.shape, self.dims, self.order)

    def full_index(self):
        return [Affine() if s == 1 else Affine.var(("r" if self.is_row and d in self.dims else "x") + str(d), s)
                for d, s in enumerate(self.shape)]

    @property
    def inner(self):
        """Whether the innermost dim in memory (of size > 1) is reduced: rows lie along memory.
        Otherwise a kernel reduces columns, and reads XBLOCK neighbouring columns at once to
        coalesce."""
        big = [d for d in self.order if self.shape[d] > 1]
        return bool(big) and big[-1] in (self.dims or ())

    def persistent(self):
        if not self.is_row:
            return True
        return triton_next_pow2(self.rnumel) <= (PERSISTENT_MAX if self.inner else COLUMN_PERSISTENT_MAX)

    def place(self, buf):
        """The ways buf fits here, in order of preference: (level, index into buf.body's own
        shape) pairs; none when buf does not fit."""
        body, full = buf.body, self.full_index()
        if isinstance(body, Scatter):
            return [("scatter", full)] if not self.is_row and body.in_shape == self.shape else []
        if isinstance(body, Reduction):
            if self.is_row and body.in_shape == self.shape and body.dims == self.dims:
                return [("scan" if isinstance(body, Scan) else "red", full)]
            return []
        if body.shape == self.shape:
            return [("full", full)]
        if math.prod(body.shape) == math.prod(self.shape):
            fits = {}
            for index in (self._reshaped(buf, False), self._reshaped(buf, True)):
                if index is not None:
                    fits.setdefault(tuple(i.key() for i in index), ("full", index))
            return list(fits.values())
        if self.is_row:
            # one value per row: the kept dims of size > 1, in order, are the body's (its 1s
            # aside), so the same linear order: (C,), (1, C, 1, 1) or (C, 1, 1) by rows of C
            kept = [i for d, i in enumerate(full) if d not in self.dims and self.shape[d] != 1]
            if [s for s in body.shape if s != 1] == [self.shape[d] for d in range(len(self.shape))
                                                    if d not in self.dims and self.shape[d] != 1]:
                it = iter(kept)
                return [("x", [next(it) if s != 1 else Affine() for s in body.shape])]
        return []

    def _reshaped(self, buf, by_memory):
        """The index into ``buf`` (as many elements as this space, another shape) of the element
        each lane computes: the element at the lane's place in row-major order (softmax's backward
        computed as [B*H, S, S] in a [B, H, S, S] row space), or ``by_memory``, the element at the
        lane's place in memory, the space walking its memory order and buf being dense (the
        attention probabilities saved transposed for the backward's matmul, [B*H, S, S] with
        strides (S*S, 1, S), laid out as the [B, H, S, S] row space that computes them). None
        where an index would take div/mod of the loop variables (a dim of the space split)."""
        if by_memory:
            if not _dense(buf.shape, buf.stride):
                return None
            order, steps = self.order, buf.stride
        else:
            order, steps = range(len(self.shape)), contiguous_strides(buf.shape)
        linear, step, full = Affine(), 1, self.full_index()
        for d in reversed(list(order)):
            linear, step = linear + full[d] * step, step * self.shape[d]
        out = [Affine() if size == 1 else linear.floordiv(st).mod(size) for size, st in zip(buf.shape, steps)]
        if any(t in a.ops for a in out for t in a.coefs):
            return None
        return out

    def store_index(self, buf, level, index):
        return buf.body.out_index(index) if level in ("red", "scan") else index


def _dense(shape, stride):
    """Whether a buffer fills its memory exactly: its strides, smallest first, are the running
    products of its sizes (size-1 dims aside)."""
    step = 1
    for size, st in sorted(((sz, st) for sz, st in zip(shape, stride) if sz != 1), key=lambda p: p[1]):
        if st != step:
            return False
        step *= size
    return True


def triton_next_pow2(n):
    return 1 << max(0, (n - 1).bit_length())


class Recorder:
    """Stands in for a kernel during a dry run: records what a body loads and which loop
    variables it uses as values."""

    def __init__(self):
        self.loads = []       # (buffer name, Affine offset)
        self.raw = []         # Affines used as values (iota)

    def load(self, buf, offset):
        self.loads.append((buf.name, offset))
        return "v"

    def emit(self, text):
        return "t"

    def memo(self, node, index, thunk):
        return thunk()

    def index_value(self, a):
        self.raw.append(Affine.lift(a))
        return "i"

    def masked(self, cond):
        return contextlib.nullcontext()

    def check_index(self, i, n, at):
        pass


class Placed:
    """A buffer inside a group: its level, phase, the index it is computed at, its loads."""

    def __init__(self, buf, level, index, rec, store_offset):
        self.buf, self.level, self.index, self.rec = buf, level, index, rec
        self.store_offset = store_offset
        self.phase = 0


class Group:
    """A kernel under construction."""

    def __init__(self, space):
        self.space, self.members = space, []

    def names(self):
        return {p.buf.name: p for p in self.members}

    def try_add(self, buf, available):
        """Add ``buf`` (maybe widening a pointwise space into a row space) or raise NotFusable.
        ``available``: buffer names computed before this kernel starts."""
        if self.members and (isinstance(self.members[0].buf.body, Scatter) or isinstance(buf.body, Scatter)):
            raise NotFusable("a scatter has a kernel of its own")
        space = self.space
        body = buf.body
        if isinstance(body, Reduction) and not space.is_row:
            space = Space(body.in_shape, body.dims, body.in_stride)
        members = self.members if space is self.space else [p.buf for p in self.members]
        placed = _place_all(space, members, available) if space is not self.space else list(members)
        placed.append(_place_one(space, buf, placed, available))
        self.space, self.members = space, placed


def _place_all(space, bufs, available):
    placed = []
    for b in bufs:
        placed.append(_place_one(space, b, placed, available))
    return placed


def _place_one(space, buf, placed, available):
    fits = space.place(buf)
    if not fits:
        raise NotFusable("shape")
    for n, (level, index) in enumerate(fits):
        try:
            return _place_at(space, buf, placed, available, level, index)
        except NotFusable:
            if n == len(fits) - 1:
                raise


def _place_at(space, buf, placed, available, level, index):
    rec = Recorder()
    store = space.store_index(buf, level, index)
    if level in ("red", "scan"):
        buf.body.inner(rec, index)
    elif level == "scatter":  # at computed positions, into init's memory: init must be there
        store = buf.body.target(rec, index)
        buf.body.value(rec, index)
        rec.loads.append((buf.body.init.name, Affine()))
    else:
        buf.body.load(rec, index)
    p = Placed(buf, level, index, rec, offset_of(store, buf.stride))
    inside = {q.buf.name: q for q in placed}
    looped = not space.persistent()
    for name, off in rec.loads:
        q = inside.get(name)
        if q is None:
            if name not in available:
                raise NotFusable(f"{name} is computed after this kernel starts")
            continue
        if off.key() != q.store_offset.key():
            raise NotFusable(f"{name} read at another element than written")
        if q.level in ("full", "scan") and level == "x":
            raise NotFusable("row value from elements")
        p.phase = max(p.phase, q.phase + (1 if q.level == "red" else 0))
    if looped:
        for name, off in rec.loads:
            q = inside.get(name)
            if q is not None and q.level in ("full", "scan") and q.phase != p.phase:
                raise NotFusable("element value from an earlier loop")
    return p


LOOKBACK = 8  # how many items back a buffer may move to join an earlier kernel


def schedule(items, inputs=()):
    """Items -> sequence of Group | FallbackOp | ViewOp, fusing greedily: into the last group,
    else into a recent one (see _joinable). ``inputs``: names of the graph's inputs and constants."""
    seq, available = [], set(inputs)
    made_by, barrier = {}, -1  # buffer name -> the group computing it; where the last in-place ATen op is
    for it in items:
        if isinstance(it, ComputedBuffer):
            for g in _joinable(seq, _producer(it, made_by, barrier)):
                try:
                    g.try_add(it, g.available)
                except NotFusable:
                    continue
                for later in seq[g.pos + 1:]:  # it is ready before later kernels start
                    if isinstance(later, Group):
                        later.available.add(it.name)
                break
            else:
                g = Group(Space(it.body.in_shape, it.body.dims, it.body.in_stride) if isinstance(it.body, Reduction)
                          else Space(it.body.in_shape) if isinstance(it.body, Scatter)
                          else _transposing_space(it) or Space(it.shape, stride=it.stride))
                g.available, g.pos = set(available), len(seq)
                g.try_add(it, g.available)
                seq.append(g)
            made_by[it.name] = g
            available.add(it.name)
        else:
            if _in_place(it):
                barrier = len(seq)
            seq.append(it)
            available.update(_produced(it))
    return seq


def _producer(buf, made_by, barrier):
    """The group computing the last-made of the buffers ``buf`` reads, where that lies after the
    last in-place ATen op, else None. AOTAutograd's partitioner puts the values saved for the
    backward at the forward's end (BERT's attention probabilities, cast and transposed for the
    backward's matmul, for all layers at once); there they would re-read what their softmax
    kernel read, many kernels back, where joining that kernel stores them from its registers."""
    if isinstance(buf.body, Scatter):
        return None
    groups = [made_by[name] for name, _ in _loads(buf) if name in made_by]
    g = max(groups, key=lambda g: g.pos, default=None)
    return g if g is not None and g.pos > barrier else None


def _loads(buf):
    """(name, offset) of each load of a (pointwise or reduction) buffer's body, computed in a
    space of its own shape."""
    rec = Recorder()
    if isinstance(buf.body, Reduction):
        buf.body.inner(rec, Space(buf.body.in_shape, buf.body.dims).full_index())
    else:
        buf.body.load(rec, Space(buf.shape).full_index())
    return rec.loads


TILE_MIN = 16  # a transposing copy is tiled where both dims it swaps have at least this many elements


def _transposing_space(buf):
    """A 2-d tiled space for a pointwise buffer whose largest read walks memory across another
    dim than its store does (``k.transpose(-1, -2).contiguous()``): one kernel walking the
    store's memory order reads every element a whole row apart, one walking the read's
    order writes so. Tiled, a program covers XBLOCK elements along the read's contiguous dim
    (the space's columns, kept dims) by RBLOCK along the store's (its "rows": the one dim in
    ``dims``, though nothing is reduced): both are contiguous runs, and Triton moves the tile
    between the two layouts through shared memory, as a column reduction's code does. None
    where no such read is found."""
    if isinstance(buf.body, (Reduction, Scatter)) or not buf.shape:
        return None
    n = math.prod(buf.shape)
    sizes = dict(enumerate(buf.shape))
    inner = [d for d in range(len(buf.shape)) if buf.stride[d] == 1 and sizes[d] > 1]
    if len(inner) != 1 or sizes[inner[0]] < TILE_MIN or n < TILE_MIN * TILE_MIN * 16:
        return None
    out = inner[0]
    for _, off in _loads(buf):
        coefs = {int(t[1:]): c for t, c in off.coefs.items() if t.startswith("x") and t[1:].isdigit()}
        if len(coefs) != len(off.coefs) or coefs.get(out, 0) in (0, 1):
            continue  # an indirect read, or one that walks memory along the store's dim
        ins = [d for d, c in coefs.items() if c == 1 and sizes[d] >= TILE_MIN]
        if len(ins) == 1 and math.prod(sizes[d] for d in coefs) * 2 >= n:
            stride = [coefs.get(d, 0) for d in range(len(buf.shape))]
            return Space(buf.shape, (out,), stride)
    return None


def _joinable(seq, producer=None):
    """Groups a new buffer may join: ``producer``, the group computing what it reads last, where
    that lies more than LOOKBACK items back (see _producer: it would take its inputs from that
    kernel's registers); then, most recent first, the last group and earlier ones up to
    LOOKBACK items back (a buffer computed earlier than written is still correct when it reads
    only what existed when that kernel started, which try_add checks, and no ATen call between
    writes memory in place). Joining a kernel that reads the same input saves a launch and a
    read (the copies of q and v out of one qkv projection)."""
    if producer is not None and producer.pos < len(seq) - LOOKBACK:
        yield producer
    for it in reversed(seq[-LOOKBACK:]):
        if isinstance(it, Group):
            yield it
        elif _in_place(it):
            return


def _in_place(it):
    return type(it).__name__ == "FallbackOp" and getattr(it.op, "_schema", None) is not None \
        and it.op._schema.is_mutable


def _produced(it):
    names = {it.name}
    for o in getattr(it, "outputs", []):
        if hasattr(o, "name"):
            names.add(o.name)
    return names
