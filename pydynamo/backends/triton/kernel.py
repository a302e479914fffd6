"""Triton source for one Group (see scheduler.py).

Pointwise kernel: a 1-D block of XBLOCK elements per program.  Row kernel: a 2-D block of
XBLOCK rows by RBLOCK row elements; a persistent row kernel holds whole rows in registers, a
looped one walks each row once per phase, carrying reductions in accumulators; a tiled one
(a transposing copy: rows, nothing reduced) takes one XBLOCK by RBLOCK tile a program.

Loop variables are named after the dimension they index (x0, r2, ...).  Before emitting, dims
that every access walks contiguously are merged (``merge_plan``) so that a contiguous
[B, H, W] pointwise op indexes memory with the flat ``x0``, which Triton can vectorize.
"""
import contextlib
import math
import re

from . import ops
from .ir import Affine, offset_of
from .scheduler import triton_next_pow2

LOOP_RBLOCK = 2048        # row elements per iteration of a looped row kernel (inner rows)
POINTWISE_XBLOCK = 1024
NO_INDEX = 2**62                       # an arg reduction's "no index yet"
COLUMN_XBLOCK, COLUMN_RBLOCK = 64, 64   # looped column kernels: 64 columns, 64 rows per iteration
MIN_PROGRAMS = 128  # persistent kernels hold fewer rows per program rather than run fewer programs


def merge_plan(dims, affines, blocked):
    """Merge adjacent loop dims (outer, inner) that every affine access walks as one:
    coef(outer) == coef(inner) * size(inner).  Returns (plan for Affine.render, merged dims)."""
    chains = []
    for n, s in dims:
        if chains:
            pn, _ = chains[-1][-1]
            if n not in blocked and pn not in blocked and all(
                    a.coefs.get(pn, 0) == a.coefs.get(n, 0) * s for a in affines):
                chains[-1].append((n, s))
                continue
        chains.append([(n, s)])
    plan, merged = {}, []
    for ch in chains:
        merged.append((ch[0][0], math.prod(s for _, s in ch)))
        if len(ch) > 1:
            for n, _ in ch[:-1]:
                plan[n] = (None, 0)
            plan[ch[-1][0]] = (ch[0][0], 1)
    return plan, merged


def _vars_of(a):
    return a.loop_vars()


def _mask(name, index, numel, block, shape):
    """``name = index < numel``; a constant true when blocks tile ``numel`` exactly, so that
    Triton drops the masks from loads, stores and selects."""
    if numel % block == 0:
        return f"{name} = tl.full({shape}, 1, tl.int1)"
    return f"{name} = {index} < {numel}"


class KernelCodegen:
    def __init__(self, group, name, stored):
        self.group, self.name, self.stored = group, name, stored
        self.space = group.space
        self.row = self.space.is_row
        self.persistent = self.space.persistent()
        self.params = {}          # buffer name -> kernel parameter name
        self.dtypes = {}          # buffer name -> its dtype (for compiling ahead of the first call)
        self.in_count = self.out_count = 0
        self.sections = {}        # section key -> list of lines
        self.section = "body"
        self.cse = {}
        self.produced = {}        # buffer name -> value variable
        self.indices = {}         # buffer name -> the index text of each load or store of it
        self.count = 0
        self.masks = []           # conditions every load made now is masked with (see masked())
        self.asserts = False      # whether the kernel checks indices (compiled with debug=True)
        self._plan()

    # ---- planning ----
    def _plan(self):
        """Choose the merged loop dims from every access of every member; a dim used inside a
        div/mod or as a value (iota) keeps its own variable."""
        affines, blocked = [], set()
        for p in self.group.members:
            affines += [off for _, off in p.rec.loads] + [p.store_offset]
            for a in p.rec.raw:
                blocked |= _vars_of(a)
        space_vars = {f"x{d}" for d, _ in self.space.xsizes} | {f"r{d}" for d, _ in self.space.rsizes}
        for a in affines:
            for t in a.coefs:
                if t not in space_vars:
                    blocked |= set(a.deps.get(t, ()))
        xs = [(f"x{d}", s) for d, s in self.space.xsizes if s > 1]
        rs = [(f"r{d}", s) for d, s in self.space.rsizes if s > 1]
        self.plan, self.xdims = merge_plan(xs, affines, blocked)
        self.xvars = {n for n, _ in xs}
        rplan, self.rdims = merge_plan(rs, affines, blocked)
        self.plan.update(rplan)

    # ---- the interface lazy IR values call ----
    def emit(self, text):
        if re.fullmatch(r"[A-Za-z_]\w*", text):
            return text
        key = (self._scope(), text)
        if key not in self.cse:
            var = f"tmp{self.count}"
            self.count += 1
            self.sections.setdefault(self.section, []).append(f"{var} = {text}")
            self.cse[key] = var
        return self.cse[key]

    @contextlib.contextmanager
    def masked(self, cond):
        """Loads emitted inside read only where ``cond`` holds (other lanes get 0): a value
        defined on part of the space, such as one input of a concatenation."""
        self.masks.append(cond)
        try:
            yield
        finally:
            self.masks.pop()

    def memo(self, node, index, thunk):
        key = (self._scope(), "memo", id(node), tuple(Affine.lift(i).key() for i in index), tuple(self.masks))
        if key not in self.cse:
            self.cse[key] = thunk()
        return self.cse[key]

    def check_index(self, i, n, at):
        """Assert on the device that the index values ``i``, read at positions ``at``, lie in
        [0, n), as eager checks them (a failed assert is a CUDA error, as eager's own device
        asserts are). Lanes outside the tensor (or a masked() part) are not checked: a computed
        index may be anything there."""
        vs = set().union(*(Affine.lift(a).loop_vars() for a in at))
        masks = ([self._mask(vs)] if vs else []) + self.masks
        key = (self._scope(), "check", i, n, tuple(masks))
        if key not in self.cse:
            self.cse[key] = i
            self.asserts = True
            cond = f"(0 <= {i}) & ({i} < {n})" + (f" | ~({' & '.join(masks)})" if masks else "")
            self.sections.setdefault(self.section, []).append(
                f'tl.device_assert({cond}, "index out of bounds: not in [0, {n})")')

    def index_value(self, a):
        return self.emit(self.render(Affine.lift(a)))

    def render(self, a):
        """Text of an index: loop variables mapped through the merge plan, and any run of
        innermost dims an access walks contiguously written as ``xindex % n`` (or ``xindex``)
        so Triton sees contiguity, e.g. a bias broadcast over rows."""
        coefs = {}
        for t, c in a.coefs.items():
            name, scale = self.plan.get(t, (t, 1))
            if name is not None:
                coefs[name] = coefs.get(name, 0) + c * scale
        for dims, flat in ((self.xdims, "xindex"), (self.rdims, "rindex")):
            c, size, start = (coefs.get(dims[-1][0], 0) if dims else 0), 1, len(dims)
            for i in reversed(range(len(dims))):
                if c == 0 or coefs.get(dims[i][0], 0) != c * size:
                    break
                size, start = size * dims[i][1], i
            if c and len(dims) - start >= 2:
                for n, _ in dims[start:]:
                    coefs.pop(n)
                coefs[flat if start == 0 else f"({flat} % {size})"] = c
        bounds = {t: 1 for t in coefs}
        return Affine(coefs, a.const, bounds).render()

    def load(self, buf, offset):
        if buf.name in self.produced:
            return self.produced[buf.name]
        param = self._param(buf.name, "in_ptr", buf.dtype)
        vs = _vars_of(offset)
        if not vs:
            text = f"tl.load({param} + {self.render(offset)})"
            self.indices.setdefault(buf.name, []).append(None)  # one element for every lane
        else:
            mask = " & ".join([self._mask(vs)] + self.masks)
            # the same elements for every program (a weight along the row): keep them in L2
            hint = ", eviction_policy='evict_last'" if self.row and not vs & self.xvars else ""
            index = self.render(offset)
            self.indices.setdefault(buf.name, []).append(index)
            text = f"tl.load({param} + ({index}), {mask}, other=0{hint})"
        if ops.compute_dtype(buf.dtype) != buf.dtype:
            text += f".to({ops.TL_DTYPE[ops.compute_dtype(buf.dtype)]})"
        return self.emit(text)

    # ---- helpers ----
    def _scope(self):
        return "all" if self.persistent else self.section

    def _param(self, name, kind, dtype):
        self.dtypes[name] = dtype
        if name not in self.params:
            if kind == "in_ptr":
                self.params[name] = f"in_ptr{self.in_count}"
                self.in_count += 1
            else:
                self.params[name] = f"out_ptr{self.out_count}"
                self.out_count += 1
        return self.params[name]

    def _mask(self, vs):
        has_x = any(v.startswith("x") for v in vs)
        has_r = any(v.startswith("r") for v in vs)
        if has_x and has_r:
            return "xmask & rmask"
        return "rmask" if has_r else "xmask"

    def _store(self, p, value):
        buf = p.buf
        if buf.name not in self.stored:
            return
        param = self._param(buf.name, "out_ptr", buf.dtype)
        off = p.store_offset
        vs = _vars_of(off)
        index = self.render(off) if vs else f"0 * xindex + {off.const}"
        self.indices.setdefault(buf.name, []).append(index if vs else None)
        cast = f".to({ops.TL_DTYPE[buf.dtype]})" if ops.compute_dtype(buf.dtype) != buf.dtype else ""
        mask = self._mask(vs | ({"x"} if not vs else set()))
        if self.row and p.level == "full" and self.space.rnumel > 1 and not any(v.startswith("r") for v in vs):
            raise AssertionError("element store without row index")
        self.sections.setdefault(self.section, []).append(
            f"tl.store({param} + ({index}), {value}{cast}, {mask})")

    # ---- generation ----
    def generate(self):
        for p in self.group.members:
            self._member(p)
        return self._assemble()

    def _member(self, p):
        if not self.row:
            self.section = "body"
        elif self.persistent:
            self.section = "body"
        else:
            self.section = ("pre", p.phase) if p.level == "x" else ("loop", p.phase)
        body = p.buf.body
        if p.level == "scatter":
            return self._scatter(p)
        if p.level not in ("red", "scan"):
            value = body.load(self, p.index)
            self.produced[p.buf.name] = value
            self._store(p, value)
            return
        value = body.inner(self, p.index)
        red = body
        if red.kind == "sumexp":
            return self._sumexp(p, value)
        if p.level == "scan":
            return self._scan(p, value)
        if red.kind in ("argmax", "argmin"):
            return self._arg(p, value)
        result = self._welford(p, value) if red.kind == "welford" else self._fold(p, value)
        if red.post is not None:
            result = self.emit(red.post(result, red.rnumel()))
        self.produced[p.buf.name] = result
        self._store(p, result)

    def _fold(self, p, value):
        """The row's sum, product, max or min of ``value``."""
        red = p.buf.body
        neutral = ops.neutral(red.kind, red.acc_dtype)
        nan = red.kind in ("max", "min") and red.acc_dtype.is_floating_point  # they keep NaN, like eager
        fn = f"tl.reduce({{}}, 1, {red.kind}_{'nan' if nan else 'op'})"  # helpers in wrapper.HEADER
        if self.persistent:
            masked = self.emit(f"tl.where(xmask & rmask, {value}, {neutral})")
            result = self.emit(fn.format(masked) + "[:, None]")
        else:
            acc = f"acc{self.count}"
            self.count += 1
            tl_acc = ops.TL_DTYPE[red.acc_dtype]
            self.sections.setdefault(("pre", p.phase), []).append(
                f"{acc} = tl.full([XBLOCK, RBLOCK], {neutral}, {tl_acc})")
            keep = ", propagate_nan=tl.PropagateNan.ALL" if nan else ""
            combine = {"sum": f"{acc} + {value}", "prod": f"{acc} * {value}",
                       "max": f"tl.maximum({acc}, {value}{keep})",
                       "min": f"tl.minimum({acc}, {value}{keep})"}[red.kind]
            self.sections.setdefault(("loop", p.phase), []).append(
                f"{acc} = tl.where(xmask & rmask, {combine}, {acc})")
            self.section = ("post", p.phase)
            result = self.emit(fn.format(acc) + "[:, None]")
        return result

    def _scatter(self, p):
        """Each element of the space added (atomically) or written at the position its target
        index gives; the buffer's memory holds its init already (wrapper.py)."""
        buf, body = p.buf, p.buf.body
        if buf.name not in self.stored:
            return
        off = offset_of(body.target(self, p.index), buf.stride)
        # one value per lane, never a broadcast [1] (the interpreter's atomics read it as XBLOCK)
        value = self.emit(f"tl.where(xmask, {body.value(self, p.index)}, 0)")
        param = self._param(buf.name, "out_ptr", buf.dtype)
        index = self.render(off) + ("" if _vars_of(off) else " + 0 * xindex")
        cast = f".to({ops.TL_DTYPE[buf.dtype]})" if ops.compute_dtype(buf.dtype) != buf.dtype else ""
        store = "tl.atomic_add" if body.accumulate else "tl.store"
        sem = ", sem='relaxed'" if body.accumulate else ""
        self.sections.setdefault(self.section, []).append(
            f"{store}({param} + ({index}), {value}{cast}, xmask{sem})")

    def _scan(self, p, value):
        """Running sum along the row: Triton's associative_scan over the block; a looped kernel
        adds what earlier blocks of the row summed to (a carry per row)."""
        masked = self.emit(f"tl.where(xmask & rmask, {value}, 0)")
        if self.persistent:
            result = self.emit(f"tl.associative_scan({masked}, 1, sum_op)")
        else:
            carry = f"acc{self.count}"
            self.count += 1
            tl_acc = ops.TL_DTYPE[p.buf.body.acc_dtype]
            self.sections.setdefault(("pre", p.phase), []).append(f"{carry} = tl.full([XBLOCK, 1], 0, {tl_acc})")
            result = self.emit(f"tl.associative_scan({masked}, 1, sum_op) + {carry}")
            self.sections[self.section].append(f"{carry} = {carry} + tl.reduce({masked}, 1, sum_op)[:, None]")
        self.produced[p.buf.name] = result
        self._store(p, result)

    def _arg(self, p, value):
        """Index (row-major over the reduced dims) of the first largest (smallest) element; a
        NaN counts as the largest, as in eager. Looped: per lane the best value and its index,
        replaced only by a strictly better one (so the earliest wins), then the lanes."""
        red = p.buf.body
        big = red.kind == "argmax"
        flat, size = Affine(), 1
        for d in reversed(red.dims):
            flat, size = flat + Affine.lift(p.index[d]) * size, size * red.in_shape[d]
        pos = self.emit(f"({self.index_value(flat)}).to(tl.int64)")
        worst = ops.neutral("max" if big else "min", red.acc_dtype)
        cmp, pick = (">", "max") if big else ("<", "min")
        nan = red.acc_dtype.is_floating_point

        def at_best(v, best):  # where v holds the best value (NaN matching NaN)
            return f"({v} == {best})" + (f" | (({best} != {best}) & ({v} != {v}))" if nan else "")
        if self.persistent:
            vals = self.emit(f"tl.where(xmask & rmask, {value}, {worst})")
            best = self.emit(f"tl.reduce({vals}, 1, {pick}_{'nan' if nan else 'op'})[:, None]")
            hit = self.emit(f"xmask & rmask & ({at_best(vals, best)})")
            result = self.emit(f"tl.reduce(tl.where({hit}, {pos}, {NO_INDEX}), 1, min_op)[:, None]")
        else:
            accv, acci = f"acc{self.count}", f"acc{self.count + 1}"
            self.count += 2
            tl_acc = ops.TL_DTYPE[red.acc_dtype]
            self.sections.setdefault(("pre", p.phase), []).extend([
                f"{accv} = tl.full([XBLOCK, RBLOCK], {worst}, {tl_acc})",
                f"{acci} = tl.full([XBLOCK, RBLOCK], {NO_INDEX}, tl.int64)"])
            better = f"({value} {cmp} {accv})" + (f" | (({value} != {value}) & ({accv} == {accv}))" if nan else "")
            take = f"{accv}_take"
            self.sections.setdefault(("loop", p.phase), []).extend([
                f"{take} = xmask & rmask & (({better}) | ({acci} == {NO_INDEX}))",
                f"{accv} = tl.where({take}, {value}, {accv})",
                f"{acci} = tl.where({take}, {pos}, {acci})"])
            self.section = ("post", p.phase)
            best = self.emit(f"tl.reduce({accv}, 1, {pick}_{'nan' if nan else 'op'})[:, None]")
            result = self.emit(f"tl.reduce(tl.where({at_best(accv, best)}, {acci}, {NO_INDEX}), 1, min_op)[:, None]")
        self.produced[p.buf.name] = result
        self._store(p, result)

    def _sumexp(self, p, value):
        """sum(exp(v - max(v))) over the row. Looped: per lane a running max m and a sum s of
        exp(v - m), s rescaled by exp(m_old - m_new) when m grows; then the lanes are combined
        at the row's max. A lane that has seen only -inf adds 0; a row of only -inf gives NaN,
        as exp(-inf - -inf) does."""
        ninf = 'float("-inf")'
        if self.persistent:
            m = self.emit(f"tl.reduce(tl.where(xmask & rmask, {value}, {ninf}), 1, max_nan)[:, None]")
            e = self.emit(f"tl.where(xmask & rmask, tl.exp({value} - {m}), 0)")
            result = self.emit(f"tl.reduce({e}, 1, sum_op)[:, None]")
        else:
            am, acc = f"acc{self.count}", f"acc{self.count + 1}"
            self.count += 2
            tl_acc = ops.TL_DTYPE[p.buf.body.acc_dtype]
            self.sections.setdefault(("pre", p.phase), []).extend([
                f"{am} = tl.full([XBLOCK, RBLOCK], {ninf}, {tl_acc})",
                f"{acc} = tl.full([XBLOCK, RBLOCK], 0, {tl_acc})"])
            nm, live = f"{am}_new", f"{am}_live"
            self.sections.setdefault(("loop", p.phase), []).extend([
                f"{nm} = tl.maximum({am}, {value}, propagate_nan=tl.PropagateNan.ALL)",
                f"{live} = {nm} != {ninf}",
                f"{acc} = tl.where(xmask & rmask & {live}, "
                f"{acc} * tl.exp({am} - {nm}) + tl.exp({value} - {nm}), {acc})",
                f"{am} = tl.where(xmask & rmask, {nm}, {am})"])
            self.section = ("post", p.phase)
            m = self.emit(f"tl.reduce({am}, 1, max_nan)[:, None]")
            w = self.emit(f"tl.where({am} != {ninf}, tl.exp({am} - {m}), 0)")
            s = self.emit(f"tl.reduce({acc} * {w}, 1, sum_op)[:, None]")
            result = self.emit(f"tl.where({m} != {ninf}, {s}, float(\"nan\"))")
        self.produced[p.buf.name] = result
        self._store(p, result)

    def _welford(self, p, value):
        """The sum of squared deviations from the row's mean (a variance's M2) in one pass over
        memory. Persistent: the row's mean in registers first. Looped: per lane Welford's running
        mean, M2 and count, the lanes combined at the end (welford_combine, wrapper.HEADER)."""
        red = p.buf.body
        if self.persistent:
            s = self.emit(f"tl.reduce(tl.where(xmask & rmask, {value}, 0), 1, sum_op)[:, None]")
            d = self.emit(f"tl.where(xmask & rmask, {value} - {s} / {float(red.rnumel())}, 0)")
            result = self.emit(f"tl.reduce({d} * {d}, 1, sum_op)[:, None]")
        else:
            m, m2, w = (f"acc{self.count + i}" for i in range(3))
            self.count += 3
            tl_acc = ops.TL_DTYPE[red.acc_dtype]
            self.sections.setdefault(("pre", p.phase), []).extend(
                f"{a} = tl.full([XBLOCK, RBLOCK], 0, {tl_acc})" for a in (m, m2, w))
            live = "xmask & rmask"
            self.sections.setdefault(("loop", p.phase), []).extend([
                f"{w}_new = {w} + 1",
                f"{m}_delta = {value} - {m}",
                f"{m}_new = {m} + {m}_delta / {w}_new",
                f"{m2} = tl.where({live}, {m2} + {m}_delta * ({value} - {m}_new), {m2})",
                f"{m} = tl.where({live}, {m}_new, {m})",
                f"{w} = tl.where({live}, {w}_new, {w})"])
            self.section = ("post", p.phase)
            self.sections.setdefault(self.section, []).append(
                f"{m}_all, {m2}_all, {w}_all = tl.reduce(({m}, {m2}, {w}), 1, welford_combine)")
            result = self.emit(f"{m2}_all[:, None]")
        return result

    def _assemble(self, forced=None):
        """The kernel's source text, and its launch configuration (``forced``: (config, warps)
        of a row kernel instead of _row_config's)."""
        lines = self._assemble_body(forced)
        if self._needs_int64():  # offsets past 2**31 elements: index in 64 bits
            lines = [l.replace("tl.program_id(0)", "tl.program_id(0).to(tl.int64)", 1) for l in lines]
        if forced is None:
            self._lines = lines
        return self._finish(lines)

    def alternatives(self):
        """The kernel under other launch configurations, where _row_config's choice is a guess
        that measuring settles (runtime.Launch.with_choices): a looped row kernel (block sizes
        and warps trade registers, parallelism and load width) and a persistent one that runs
        few programs. Each is a whole kernel, as generate() returns it: masks depend on the
        blocks. [] for pointwise kernels and the rest. Call after generate()."""
        if not self.row:
            return []
        launch = self._launch
        grid, config, warps = launch
        if self.persistent and grid >= 2 * MIN_PROGRAMS:
            # programs enough: the blocks stand, and the guess is how many warps share a block's
            # rows (a [4096, 768] bf16 layer norm, 4 rows a program: 11.6 us under 4 warps, one
            # a row, reducing without shared memory, against 14.2 under 8; H100)
            configs = [(config, warps // 2)] if self.space.inner and warps >= 2 else []
        else:
            configs = [({"XBLOCK": x, "RBLOCK": r}, self._warps(x, r))
                       for x, r in self._other_blocks(config["XBLOCK"], config["RBLOCK"])]
        try:
            return [self._assemble(c) for c in configs]
        finally:
            self._launch = launch

    def _other_blocks(self, xblock, rblock):
        """Up to three (XBLOCK, RBLOCK) beside _row_config's, within the row's and the columns'
        sizes and at most 8192 elements a block (registers)."""
        x2, r2 = triton_next_pow2(self.space.xnumel), triton_next_pow2(self.space.rnumel)
        if self.persistent:  # whole rows: how many a program holds
            shapes = [(xblock * 2, rblock), (xblock // 2, rblock)]
        elif self.space.inner:  # one row a program, walked in chunks
            shapes = [(1, rblock // 2), (1, rblock * 2)]
        else:  # columns: how many side by side, how many rows at a time
            shapes = [(xblock, rblock * 2), (xblock, rblock // 2), (xblock // 2, rblock * 2)]
        out = []
        for x, r in shapes:
            if 1 <= x <= x2 and 16 <= r and (r <= r2 or self.persistent) and x * r <= 8192 \
                    and (x, r) != (xblock, rblock) and (x, r) not in out:
                out.append((x, r))
        return out

    def _needs_int64(self):
        sizes = [self.space.xnumel * self.space.rnumel]
        for p in self.group.members:
            sizes += [p.store_offset.max()] + [off.max() for _, off in p.rec.loads]
        return max(sizes) >= 2**31 - 1

    def _assemble_body(self, forced=None):
        lines = []
        used = set(re.findall(r"\b[xr]\d+\b", "\n".join(
            "\n".join(v) for v in self.sections.values())))
        if not self.row:
            xblock = min(POINTWISE_XBLOCK, triton_next_pow2(self.space.xnumel))
            lines += ["xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)",
                      _mask("xmask", "xindex", self.space.xnumel, xblock, "[XBLOCK]")]
            lines += self._define(self.xdims, "xindex", used)
            lines += self.sections.get("body", [])
            config = {"XBLOCK": xblock}
            warps = max(1, min(4, xblock // 128))
            grid = -(-self.space.xnumel // xblock)
        elif self._tiled():
            config, warps = forced or self._row_config()
            nx = -(-self.space.xnumel // config["XBLOCK"])
            grid = nx * -(-self.space.rnumel // config["RBLOCK"])
            lines += ["pid = tl.program_id(0)",
                      f"xindex = (pid % {nx}) * XBLOCK + tl.arange(0, XBLOCK)[:, None]",
                      _mask("xmask", "xindex", self.space.xnumel, config["XBLOCK"], "[XBLOCK, 1]")]
            lines += self._define(self.xdims, "xindex", used)
            lines += ["rbase = tl.arange(0, RBLOCK)[None, :]", f"rindex = (pid // {nx}) * RBLOCK + rbase"]
            lines += self._rdefs(used, config["RBLOCK"])
            for ph in sorted({k[1] for k in self.sections if isinstance(k, tuple)}):
                lines += sum((self.sections.get((part, ph), []) for part in ("pre", "loop", "post")), [])
        else:
            config, warps = forced or self._row_config()
            grid = -(-self.space.xnumel // config["XBLOCK"])
            lines += ["xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)[:, None]",
                      _mask("xmask", "xindex", self.space.xnumel, config["XBLOCK"], "[XBLOCK, 1]")]
            lines += self._define(self.xdims, "xindex", used)
            lines += ["rbase = tl.arange(0, RBLOCK)[None, :]"]
            lines += self._row_body(used, config["RBLOCK"])
        self._launch = (grid, config, warps)
        return lines

    def _finish(self, lines, by_name=None):
        """(source, the buffer of each parameter, grid, config, warps); ``by_name``: buffer
        name -> parameter, when not ``self.params`` (see update())."""
        by_name = by_name or self.params
        grid, config, warps = self._launch
        params = list(dict.fromkeys(by_name.values()))
        sig = ", ".join(params + [f"{k}: tl.constexpr" for k in config])
        head = "@triton.jit(debug=True)" if self.asserts else "@triton.jit"
        src = [head, f"def {self.name}({sig}):"] + ["    " + l for l in lines]
        # one buffer per parameter: an input the kernel updates in place stands for its output
        first = {}
        for n, p in by_name.items():
            first.setdefault(p, n)
        names = [first[p] for p in params]
        return "\n".join(src), names, grid, config, warps

    # ---- writing an output into a dying input's memory ----
    def can_update(self, inp, out, single=False):
        """Whether the kernel may store ``out`` through ``inp``'s pointer (the wrapper knows that
        ``inp`` dies here and has ``out``'s layout): every load of ``inp`` reads exactly the
        element that ``out``'s one store writes (the same index text, so the same lane of the
        same program) and comes before that store in the program. No program then reads an
        element that another has written, or one it has overwritten itself. ``single``: ``inp``
        has one element, which every load reads and the store writes: in a kernel of one
        program of one lane (a scalar's update: ``num_batches_tracked + 1``), whatever the index
        texts, the order of its loads and store is all that matters."""
        loads, stores = self.indices.get(inp), self.indices.get(out)
        if single and self._launch != (1, {"XBLOCK": 1}, 1):
            return False
        if not loads or not stores or len(stores) != 1 or (stores[0] is None and not single) or \
                not self.params.get(inp, "").startswith("in_ptr") or \
                (not single and any(i != stores[0] for i in loads)):
            return False
        lp, sp = self.params[inp], self.params[out]
        load_at = [i for i, l in enumerate(self._lines) if f"tl.load({lp} +" in l]
        store_at = [i for i, l in enumerate(self._lines) if f"tl.store({sp} +" in l]
        return len(store_at) == 1 and max(load_at) < store_at[0]

    def update(self, pairs):
        """The kernel again, each output of ``pairs`` (output name -> input name, each passing
        can_update) stored through its input's pointer, now one parameter ``in_out_ptrN``
        (``self.params`` keeps the kernel's plain parameters)."""
        lines, by_name = self._lines, dict(self.params)
        for k, (out, inp) in enumerate(pairs.items()):
            new = f"in_out_ptr{k}"
            for old in (by_name[inp], by_name[out]):
                lines = [re.sub(rf"\b{old}\b", new, l) for l in lines]
            by_name[inp] = by_name[out] = new
        return self._finish(lines, by_name)

    def _rdefs(self, used, rblock):
        """The row mask and row loop variables, from ``rindex``."""
        return [_mask("rmask", "rindex", self.space.rnumel, rblock, "[1, RBLOCK]")] + \
            self._define(self.rdims, "rindex", used)

    def _row_body(self, used, rblock):
        rdefs = self._rdefs(used, rblock)
        if self.persistent:
            return ["rindex = rbase"] + rdefs + self.sections.get("body", [])
        out = []
        phases = sorted({k[1] for k in self.sections if isinstance(k, tuple)})
        for ph in range(max(phases) + 1 if phases else 0):
            out += self.sections.get(("pre", ph), [])
            loop = self.sections.get(("loop", ph), [])
            if loop:
                out += [f"for roffset in range(0, {self.space.rnumel}, RBLOCK):",
                        "    rindex = roffset + rbase"]
                out += ["    " + l for l in rdefs + loop]
            out += self.sections.get(("post", ph), [])
        return out

    def _row_config(self):
        """Rows along memory: a program per row (looped) or per few rows (persistent).
        Columns: XBLOCK neighbouring columns per program, so each load reads XBLOCK contiguous
        elements, and RBLOCK rows at a time."""
        r2 = triton_next_pow2(self.space.rnumel)
        x2 = triton_next_pow2(self.space.xnumel)
        if self.persistent:
            rblock = r2
            xblock = max(1, min(x2, 4096 // rblock))
            least = 16 if self.space.inner else 32  # columns: a 128-byte line of float32 per load
            while xblock > least and -(-self.space.xnumel // xblock) < MIN_PROGRAMS:
                xblock //= 2
        elif self.space.inner:
            rblock, xblock = LOOP_RBLOCK, 1
        else:  # fewer columns than COLUMN_XBLOCK (a batch norm of 32 channels): as many more rows
            xblock = min(x2, COLUMN_XBLOCK)
            rblock = min(max(r2, COLUMN_RBLOCK), COLUMN_RBLOCK * COLUMN_XBLOCK // xblock)
        return {"XBLOCK": xblock, "RBLOCK": rblock}, self._warps(xblock, rblock)

    def _tiled(self):
        """Whether this is a looped row kernel that reduces nothing (a transposing copy: see
        scheduler._transposing_space). Each program then takes one XBLOCK by RBLOCK tile rather
        than a stripe of columns walked down every row, so the grid grows with the rows too
        (BERT's [16, 256, 768] -> [16, 768, 256] key copy: 192 programs looping, 10.3 us tiled
        against 12.6; H100)."""
        return self.row and not self.persistent and all(p.level in ("full", "x") for p in self.group.members)

    def _warps(self, xblock, rblock):
        if self._tiled():
            return max(1, min(8, xblock * rblock // 1024))
        warps = max(1, min(16 if self.space.inner else 8, xblock * rblock // (512 if self.space.inner else 128)))
        if self.persistent and self.space.inner and xblock == 1 and rblock >= 4096 and \
                max((self.dtypes[n].itemsize for n, p in self.params.items() if p.startswith("in_ptr")),
                    default=0) >= 4:
            # one long float32 row a program: 8 elements a thread rather than 16 takes a two-pass
            # layer_norm from 64 registers to 40 (sm_90), so 48 warps fit on an SM rather than 32
            # (H100 sweeps: c f32 94.7 against 96.3 us, Inductor 93.9; bench: c and b f32 1.00)
            warps = 16
        return warps

    def _define(self, dims, flat, used):
        """Loop variables of the merged dims from the flat block index, outermost last-defined."""
        out, inner = [], 1
        for i, (name, size) in enumerate(reversed(dims)):
            if name in used:
                outermost = i == len(dims) - 1
                e = flat if inner == 1 else f"({flat} // {inner})"
                out.append(f"{name} = {e}" if outermost else f"{name} = {e} % {size}")
            inner *= size
        return out

