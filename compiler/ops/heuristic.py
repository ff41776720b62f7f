"""Default schedule knobs: the fastest candidate under a cycle model that fits.

The model (:func:`estimate_conv2d_cycles`) prices the instructions the conv2d schedule emits
with the machine's own cycle formulas (:mod:`accel.machine.costs`, the contract the timing
simulator and the RTL are tested against; the compiler never imports ``sim``) and combines them
with the overlap that the virtual threads and dependency tokens allow. Per virtual thread and
output tile, for a tile of ``t = tile_b * tile_co * tile_h * tile_w`` acc tiles and
``chunks = ci_blocks / tile_ci`` reduction chunks::

    L  = tile_b * tile_ci * mem(LOAD INP) + mem(LOAD WGT)        load module, per chunk
    G  = gemm(tile_ci * kh * kw * t micro-ops)                    compute module, per chunk
    R  = gemm(t, a reset)                                         compute, before the chunks
    E  = the bias's ADD where no reset copies it, and the ALU instructions requantisation
         leaves on the compute module (none of SHR/MIN/MAX with store.postproc)
    S  = mem(STORE) per STORE: one of tile_co blocks x (tile_h * tile_w) for a full-width
         tile, else tile_co of tile_h x tile_w (times tile_b)     store module

With one thread the load of a chunk waits for the GEMM before it (one buffer) and the reset of
the next tile for the stores::

    tile = R + chunks * G + (chunks - 1) * L + E + S + max(0, L - (E + S + R))

With ``T`` threads the threads' loads and GEMMs alternate chunk by chunk, each thread's buffer
refilled while the others compute; the threads finish a tile together, and each thread's reset
of the next tile waits for its own stores, which the store module makes one thread after
another. The stream passes (``compiler.passes.stream``) let a thread's stores start at its own
last GEMM where nothing follows it on the compute module (``E = 0``) and run each thread's
reset just before its first GEMM, so a reset waits only for its own thread's stores. Rather
than a closed form, two tiles of these streams are list-scheduled with the tokens
(:func:`_tiles`), the steady-state tile being the difference.

The bias as the passes place it: resident in acc over an output-channel chunk's tiles (its LOAD
once per chunk, on the compute module, added to the total) and copied by the reset with
``gemm.reset_from_acc`` or ADDed in ``E``; or, where ``compiler.passes.alu.load_bias`` finds
it pays (``compiler.ops.conv2d.bias_loaded_per_tile``), loaded into the accumulators in place
of the reset. Every tile takes at least its DRAM bytes at ``dram.bytes_per_cycle``, the
store module's ``T * S``, and the fetch of its instructions (``costs.fetch_cycles`` per
batch). Input tiles at the image's edges load fewer rows or columns and write padding: the
tiles are priced by their position (first, inner, last), each kind once. Candidates must fit
the inp, wgt and acc buffers of the config they are given.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
from collections import Counter
from dataclasses import dataclass

import numpy as np

from accel.machine import costs
from accel.machine.cache import cache_dir, code_version, write_atomic
from accel.machine.config import HwConfig
from accel.machine.isa import AluInsn, AluOp, GemmInsn, MemInsn, MemType
from compiler.errors import LoweringError
from compiler.ops.conv2d import Conv2dKnobs, Conv2dWorkload, bias_init, bias_loaded_per_tile
from compiler.passes.uops import arrange_loops

__all__ = ["conv2d_cycles_floor", "conv2d_instructions", "default_conv2d_knobs",
           "estimate_conv2d_cycles", "fits", "knob_candidates", "search_conv2d_knobs"]


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def fits(wl: Conv2dWorkload, k: Conv2dKnobs, cfg: HwConfig) -> bool:
    """Do the knobs' buffers (times the virtual threads) fit the config's SRAM?"""
    ih = (k.tile_h - 1) * wl.stride_h + wl.kernel_h
    iw = (k.tile_w - 1) * wl.stride_w + wl.kernel_w
    t = k.nthreads
    inp = t * k.tile_b * k.tile_ci * ih * iw
    wgt = t * k.tile_co * k.tile_ci * wl.kernel_h * wl.kernel_w
    acc = t * (k.tile_b * k.tile_co * k.tile_h * k.tile_w + (k.tile_co if wl.bias else 0))
    pad_limit = (1 << cfg.isa.pad_bits) - 1
    return (inp <= cfg.inp_depth and wgt <= cfg.wgt_depth and acc <= cfg.acc_depth
            and wl.pad_h <= pad_limit and wl.pad_w <= pad_limit)


@functools.lru_cache(maxsize=4096)
def _windows(out: int, tile: int, stride: int, kernel: int, pad: int,
             extent: int) -> Counter[tuple[int, int, int]]:
    """How many output tiles of ``tile`` rows (or columns) read an input window of each shape
    (pad before, rows inside the image, pad after)."""
    size = (tile - 1) * stride + kernel
    shapes: Counter[tuple[int, int, int]] = Counter()
    for i in range(out // tile):
        start = i * tile * stride - pad
        before = min(size, max(0, -start))
        inside = max(0, min(start + size, extent) - max(start, 0))
        shapes[before, inside, size - before - inside] += 1
    return shapes


NEAR_TIE = 0.005
"""Estimates this close (relative) to the best count as a tie for the default knobs."""

ON_BUS = 0.95
"""A tiling whose tiles' DRAM beats fill this share of their estimated cycles is bound by the
bus; among tied candidates so bound, the shorter longest transaction wins. On vta_1x16x16
(post-processing store) that picks 14 x 7 output tiles for ResNet-18's C5 (beats 97% of the
tile), 3.5% faster simulated than 7 x 14; at 0.9 it would also pick 28 x 7 for C3 (93%),
0.3% slower than 7 x 28. No other pick of C1-C12 on a shipped config changes."""

_mem_cycles = functools.lru_cache(maxsize=65536)(costs.mem_cycles)
"""``costs.mem_cycles``, remembered: the candidates of a layer repeat the same copies."""


def _uops(n: int, insn: type[GemmInsn] | type[AluInsn], **fields: object) -> GemmInsn | AluInsn:
    """A GEMM or ALU instruction of ``n`` micro-ops (all its cost depends on)."""
    return insn(iter_out=1, iter_in=n, uop_bgn=0, uop_end=1, **fields)  # type: ignore[arg-type]


def _schedule(streams: dict[str, list[tuple[int, tuple[str, ...], tuple[str, ...]]]],
              credits: dict[str, int]) -> int:
    """When the last of ``streams`` ends: each module runs its instructions ``(cycles, pops,
    pushes)`` in order, an instruction starting once its module is free and, for each token
    it pops, the push that token pop matches (the k-th pop of a queue takes its k-th push, the
    first ``credits`` pushes made at cycle 0) has happened; its pushes happen at its end."""
    pushed: dict[str, list[int]] = {q: [0] * n for q, n in credits.items()}
    popped: dict[str, int] = dict.fromkeys(credits, 0)
    free = dict.fromkeys(streams, 0)
    at = dict.fromkeys(streams, 0)
    progress = True
    while progress:
        progress = False
        for module, insns in streams.items():
            while at[module] < len(insns):
                cycles, pops, pushes = insns[at[module]]
                if any(len(pushed[q]) <= popped[q] for q in pops):
                    break
                start = max([free[module]] + [pushed[q][popped[q]] for q in pops])
                for q in pops:
                    popped[q] += 1
                free[module] = start + cycles
                for q in pushes:
                    pushed[q].append(free[module])
                at[module] += 1
                progress = True
    if any(at[m] < len(insns) for m, insns in streams.items()):
        raise AssertionError("the modelled instruction streams deadlock")
    return max(free.values())


def _tiles_streams(threads: int, chunks: int, n: int, load: int, gemm: int, reset: int,
                   epilogue: int, stores: int) -> int:
    """:func:`_tiles` by the general list scheduler (:func:`_schedule`) over the streams as
    the schedule orders them: the definition that :func:`_tiles` computes in one pass, kept
    for the test that checks the two agree."""
    Insn = tuple[int, tuple[str, ...], tuple[str, ...]]
    loads: list[Insn] = []
    compute: list[Insn] = []
    store: list[Insn] = []
    for _ in range(n):
        for c in range(chunks):
            loads += [(load, ("c2l",), ("l2c",))] * threads
            last = c == chunks - 1 and not epilogue
            for _ in range(threads):
                if c == 0:
                    compute.append((reset, ("s2c",), ()))
                compute.append((gemm, ("l2c",), ("c2l", "c2s") if last else ("c2l",)))
        if epilogue:
            compute += [(epilogue, (), ("c2s",))] * threads
        store += [(stores, ("c2s",), ("s2c",))] * threads
    return _schedule({"load": loads, "compute": compute, "store": store},
                     {"c2l": threads, "s2c": threads, "l2c": 0, "c2s": 0})


@functools.lru_cache(maxsize=16384)
def _tiles(threads: int, chunks: int, load: int, gemm: int, reset: int, epilogue: int,
           stores: int) -> tuple[int, int]:
    """Cycles of one and of two consecutive output tiles of ``threads`` virtual threads, as
    the schedule orders them and the stream passes (``compiler.passes.stream``) reorder them:
    chunk by chunk each thread's loads (once its GEMM before freed the buffer) and GEMM, each
    thread's reset (once its last stores are done) just before its first GEMM, then each
    thread's epilogue, whose end lets the store module store that thread's tile; without an
    epilogue a thread's last GEMM lets it.

    What :func:`_schedule` computes for these streams (:func:`_tiles_streams`), in one pass:
    every dependency points backwards along the compute stream. The ``j``-th GEMM pops the
    ``j``-th load's token; the ``j``-th load waits for the buffer the ``(j - threads)``-th
    GEMM frees (the first ``threads`` are free); the ``r``-th reset waits for the
    ``(r - threads)``-th store, which waits for the ``(r - threads)``-th push to the store
    module, made by an earlier tile's last GEMM or epilogue. The modules run in order, so the
    first tile's instructions start and end as they would alone: one pass over two tiles
    gives both counts.
    """
    compute_free = load_free = store_free = 0
    gemm_end: list[int] = []     # the c2l token of each GEMM
    store_end: list[int] = []    # the s2c token of each store (after the threads' credits)
    n_stored = 0
    one = 0
    for tile in range(2):
        for c in range(chunks):
            last = c == chunks - 1 and not epilogue
            for t in range(threads):
                if c == 0:
                    r = tile * threads + t
                    ready = store_end[r - threads] if r >= threads else 0
                    compute_free = max(compute_free, ready) + reset
                j = len(gemm_end)
                load_free = max(load_free, gemm_end[j - threads] if j >= threads else 0) + load
                compute_free = max(compute_free, load_free) + gemm
                gemm_end.append(compute_free)
                if last:
                    store_free = max(store_free, compute_free) + stores
                    store_end.append(store_free)
        if epilogue:
            for _ in range(threads):
                compute_free += epilogue
                store_free = max(store_free, compute_free) + stores
                store_end.append(store_free)
        if tile == 0:
            one = max(load_free, compute_free, store_free)
        n_stored = len(store_end)
    assert n_stored == 2 * threads
    return one, max(load_free, compute_free, store_free)


@functools.lru_cache(maxsize=16384)
def _gemm_fold(ci: int, kh: int, kw: int, b: int, co: int, h: int, w: int, sh: int, sw: int,
               budget: int, window: int) -> tuple[int, int]:
    """(GEMM instructions, micro-ops of each one's kernel) of one thread's reduction chunk:
    ``compiler.passes.uops``'s own choice of hardware loops on the schedule's loop nest (input
    channel block ``ci``, kernel row and column, batch, output channel block, output row,
    column: the choice depends on their extents only), whose kernel loops beyond ``budget``
    stay instruction loops."""
    # The destination index ((n * co + o) * h + y) * w + x moves along n, o, y and x; the
    # sources and weights are affine too. Loops of extent 1 change neither the kernel's size
    # nor the instructions: left out.
    moves = {"ic": 0, "kh": 0, "kw": 0, "n": co * h * w, "o": h * w, "y": w, "x": 1}
    extents = (ci, kh, kw, b, co, h, w)
    chain = [(var, n) for var, n in zip(moves, extents, strict=True) if n > 1]
    _, kernel, peeled = arrange_loops(chain, moves, True, budget, window)
    return math.prod(n for _, n in peeled), math.prod(n for _, n in kernel)


@dataclass(frozen=True)
class _Plan:
    """The model's parts for one knob setting: per virtual thread and output tile the cycles
    of the module docstring, and the tile kinds (by input window) with their counts."""

    threads: int
    chunks: int
    gemm: int
    reset: int
    epilogue: int
    stores: int
    fetch: float
    insns: int  # per tile, every thread
    store_beats: float
    bpc: int
    per_kind: float  # groups of threads per tile kind: every kind repeats this often
    once: int  # compute-module cycles outside the tiles (the resident bias's LOADs)
    kinds: tuple[tuple[int, int, float], ...]  # (tiles of the kind, load cycles, load beats)
    burst: int  # bytes of the longest DRAM transaction of the input LOADs and the STOREs

    def floor(self) -> float:
        """A lower bound on :meth:`cycles`: every tile takes at least its compute module's
        work, its beats and its fetch."""
        work = self.threads * (self.chunks * self.gemm + self.reset + self.epilogue)
        return self.once + self.per_kind * sum(
            n * max(work, beats + self.store_beats, self.fetch) for n, _, beats in self.kinds)

    def instructions(self) -> float:
        """Instructions of the layer's program, micro-op loads and FINISH not counted."""
        return self.per_kind * self.insns * sum(n for n, _, _ in self.kinds)

    def dram_bytes(self) -> float:
        """Bytes the layer moves over DRAM: its inputs and weights as often as they are
        loaded, its outputs once (instructions not counted)."""
        bpc = self.bpc
        return self.per_kind * bpc * sum(n * (beats + self.store_beats)
                                         for n, _, beats in self.kinds)

    def cycles(self) -> float:
        tiles, first = self._tiles
        return sum(n * tile for n, tile, _ in tiles) * self.per_kind + first + self.once

    def on_bus(self) -> bool:
        """Whether the tiles wait for the DRAM bus: their beats fill at least ``ON_BUS`` of
        their cycles."""
        return all(tile * ON_BUS <= beats for _, tile, beats in self._tiles[0])

    @functools.cached_property
    def _tiles(self) -> tuple[list[tuple[int, float, float]], float]:
        """Per tile kind (tiles, cycles a tile, beats a tile), and the first tile's extra
        (computed once: the search asks a near-tie for both its cycles and :meth:`on_bus`)."""
        tiles = []
        first = 0.0
        for n, load, load_beats in self.kinds:
            one, two = _tiles(self.threads, self.chunks, load, self.gemm, self.reset,
                              self.epilogue, self.stores)
            # The loads and the stores share the in-order data bus: a transaction's beats wait
            # behind those granted before it, so each side's copies stretch by the share of
            # the tile's cycles the other side's beats take.
            busy = max(two - one, 1)
            slow_store = 1 + min(1.0, load_beats / busy)
            slow_load = 1 + min(1.0, self.store_beats / busy)
            one, two = _tiles(self.threads, self.chunks, round(load * slow_load), self.gemm,
                              self.reset, self.epilogue, round(self.stores * slow_store))
            tile = max(two - one, load_beats + self.store_beats, self.fetch)
            tiles.append((n, tile, load_beats + self.store_beats))
            first = max(first, one - tile)
        return tiles, first


def _plan(wl: Conv2dWorkload, k: Conv2dKnobs, cfg: HwConfig) -> _Plan:
    nb, cib, cob = wl.blocks(cfg)
    kk = wl.kernel_h * wl.kernel_w
    threads = k.nthreads
    t_acc = k.tile_b * k.tile_co * k.tile_h * k.tile_w
    chunks = cib // k.tile_ci
    wgt = MemInsn(mem_type=MemType.WGT, y_size=k.tile_co, x_size=k.tile_ci * kk,
                  x_stride=cib * kk)
    wgt_cycles = _mem_cycles(wgt, cfg)
    n_gemm, kernel = _gemm_fold(k.tile_ci, wl.kernel_h, wl.kernel_w, k.tile_b, k.tile_co,
                                k.tile_h, k.tile_w, wl.stride_h, wl.stride_w,
                                max(1, cfg.uop_depth // 8), cfg.gemm.depth)
    gemm = n_gemm * costs.gemm_cycles(_uops(k.tile_ci * kk * t_acc // n_gemm, GemmInsn), cfg)
    if threads * (n_gemm * kernel + 5) > cfg.uop_depth:
        # The kernels (each thread's GEMM kernels; its reset and four ALU kernels, one micro-op
        # each once folded) do not fit the uop buffer together: codegen then keeps it as a ring
        # and reloads each GEMM's kernel before it.
        gemm += n_gemm * _mem_cycles(MemInsn(mem_type=MemType.UOP, x_size=kernel,
                                             x_stride=kernel), cfg)
    reset = costs.gemm_cycles(_uops(t_acc, GemmInsn, reset=True), cfg)
    post = cfg.store.postproc
    n_imm = 0 if post else 2 + int(wl.shift > 0)  # SHR, MIN, MAX by immediates
    epilogue = n_imm * costs.alu_cycles(_uops(t_acc, AluInsn, alu_op=AluOp.MIN, use_imm=True),
                                        cfg)
    # The STOREs of a full-width tile take every output-channel block at once (rows x blocks).
    if k.tile_w == wl.out_width:
        n_stores, rows, cols_out, stride = k.tile_b, k.tile_co, k.tile_h * k.tile_w, \
            wl.out_height * wl.out_width
    else:
        n_stores, rows, cols_out, stride = k.tile_b * k.tile_co, k.tile_h, k.tile_w, wl.out_width
    store = MemInsn(store=True, mem_type=MemType.ACC if post else MemType.OUT, y_size=rows,
                    x_size=cols_out, x_stride=stride)
    insns = chunks * (k.tile_b * k.tile_ci + n_gemm) + 1 + n_imm + n_stores
    once = 0  # compute-module cycles per output-channel chunk: the resident bias's LOAD
    if wl.bias:
        if bias_loaded_per_tile(wl, k, cfg):  # load_bias: LOADs into the accumulators
            reset = bias_init(wl, k, cfg).loaded
            insns += k.tile_b * k.tile_co - 1
        else:  # resident: the reset copies it (reset_from_acc), or an ADD after the chunks
            once = _mem_cycles(MemInsn(mem_type=MemType.ACC, x_size=k.tile_co * k.oc_nthread,
                                       x_stride=k.tile_co * k.oc_nthread), cfg)
            if not cfg.gemm.reset_from_acc:
                epilogue += costs.alu_cycles(_uops(t_acc, AluInsn, alu_op=AluOp.ADD), cfg)
                insns += 1
    batch = costs.fetch_batch_size(cfg)
    wgt_bytes = k.tile_co * k.tile_ci * kk * cfg.wgt_tile_bytes
    bpc = cfg.dram.bytes_per_cycle
    rows = _windows(wl.out_height, k.tile_h, wl.stride_h, wl.kernel_h, wl.pad_h, wl.height)
    cols = _windows(wl.out_width, k.tile_w, wl.stride_w, wl.kernel_w, wl.pad_w, wl.width)
    kinds = []
    longest_row = cols_out * cfg.out_tile_bytes  # a STORE row
    for (y0, ys, y1), n_rows in rows.items():
        for (x0, xs, x1), n_cols in cols.items():
            inp = MemInsn(mem_type=MemType.INP, y_size=ys, x_size=xs, x_stride=wl.width,
                          y_pad_0=y0, y_pad_1=y1, x_pad_0=x0, x_pad_1=x1)
            load = k.tile_b * k.tile_ci * _mem_cycles(inp, cfg) + wgt_cycles
            in_bytes = k.tile_b * k.tile_ci * ys * xs * cfg.inp_tile_bytes + wgt_bytes
            kinds.append((n_rows * n_cols, load, threads * chunks * in_bytes / bpc))
            longest_row = max(longest_row, xs * cfg.inp_tile_bytes)
    return _Plan(
        threads=threads, chunks=chunks, gemm=gemm, reset=reset, epilogue=epilogue,
        stores=n_stores * _mem_cycles(store, cfg),
        once=once * (nb // k.tile_b) * (cob // (k.tile_co * k.oc_nthread)),
        fetch=threads * insns * costs.fetch_cycles(batch, cfg) / batch, insns=threads * insns,
        store_beats=threads * t_acc * cfg.out_tile_bytes / bpc, bpc=bpc,
        per_kind=(nb // k.tile_b) * (cob // (k.tile_co * k.oc_nthread)) / k.h_nthread,
        kinds=tuple(kinds), burst=min(longest_row, cfg.dram.max_burst))


def estimate_conv2d_cycles(wl: Conv2dWorkload, k: Conv2dKnobs, cfg: HwConfig) -> float:
    """Cycles of the layer under knobs ``k``, by the model of the module docstring."""
    return _plan(wl, k, cfg).cycles()


def conv2d_instructions(wl: Conv2dWorkload, k: Conv2dKnobs, cfg: HwConfig) -> int:
    """About how many instructions the layer's program has under ``k`` (the model's count)."""
    return round(_plan(wl, k, cfg).instructions())


def conv2d_cycles_floor(wl: Conv2dWorkload, k: Conv2dKnobs, cfg: HwConfig) -> float:
    """A lower bound on :func:`estimate_conv2d_cycles` that needs no scheduling: per tile the
    compute module's work, the DRAM beats or the instruction fetch, whichever is most."""
    return _plan(wl, k, cfg).floor()


def _candidate_table(wl: Conv2dWorkload, cfg: HwConfig) -> dict[str, np.ndarray]:
    """Every knob setting that divides the layer and fits the buffers, as columns (``tb``,
    ``th``, ``tw``, ``tci``, ``tco``, ``ocn``, ``hn``) in :func:`knob_candidates`' order:
    batch, row, column and input-channel tiles, then the thread split, then the output-channel
    tile, each from small to large."""
    nb, cib, cob = wl.blocks(cfg)
    pairs = np.array(_THREAD_SPLITS)
    grids = np.meshgrid(np.array(_divisors(nb)), np.array(_divisors(wl.out_height)),
                        np.array(_divisors(wl.out_width)), np.array(_divisors(cib)),
                        np.arange(len(pairs)), np.array(_divisors(cob)), indexing="ij")
    tb, th, tw, tci, pair, tco = (g.ravel() for g in grids)
    ocn, hn = pairs[pair, 0], pairs[pair, 1]
    ih = (th - 1) * wl.stride_h + wl.kernel_h
    iw = (tw - 1) * wl.stride_w + wl.kernel_w
    t = ocn * hn
    acc = t * (tb * tco * th * tw + (tco if wl.bias else 0))
    keep = ((wl.out_height % (th * hn) == 0) & (cob % (tco * ocn) == 0)
            & (t * tb * tci * ih * iw <= cfg.inp_depth)
            & (t * tco * tci * wl.kernel_h * wl.kernel_w <= cfg.wgt_depth)
            & (acc <= cfg.acc_depth))
    pad_limit = (1 << cfg.isa.pad_bits) - 1
    if wl.pad_h > pad_limit or wl.pad_w > pad_limit:
        keep[:] = False
    return {name: col[keep] for name, col in
            (("tb", tb), ("th", th), ("tw", tw), ("tci", tci), ("tco", tco), ("ocn", ocn),
             ("hn", hn))}


_THREAD_SPLITS = ((1, 1), (2, 1), (1, 2), (2, 2), (4, 1), (1, 4))
"""The virtual-thread splits a candidate takes, (oc_nthread, h_nthread)."""


def knob_candidates(wl: Conv2dWorkload, cfg: HwConfig) -> list[Conv2dKnobs]:
    """Every knob setting that divides the layer and fits the buffers (:func:`fits`)."""
    c = _candidate_table(wl, cfg)
    return [Conv2dKnobs(*k) for k in zip(*(c[n].tolist() for n in _KNOB_COLUMNS), strict=True)]


_KNOB_COLUMNS = ("tb", "th", "tw", "tci", "tco", "ocn", "hn")
"""The table's columns in the order of :class:`Conv2dKnobs`' fields."""


def _bound(wl: Conv2dWorkload, cfg: HwConfig, c: dict[str, np.ndarray]) -> np.ndarray:
    """A lower bound on every candidate's :meth:`_Plan.floor` (so on its estimate), from the
    knobs alone: the floor's terms with the parts that need the micro-op loops left at their
    least (one GEMM instruction per chunk, no micro-op reloads, no bias LOADs or ADD)."""
    nb, cib, cob = wl.blocks(cfg)
    kk = wl.kernel_h * wl.kernel_w
    threads = c["ocn"] * c["hn"]
    t_acc = c["tb"] * c["tco"] * c["th"] * c["tw"]
    chunks = cib // c["tci"]
    bpc = cfg.dram.bytes_per_cycle
    d = costs.DECODE_CYCLES
    gemm = d + cfg.gemm.depth + c["tci"] * kk * t_acc * cfg.gemm.ii
    reset = d + cfg.gemm.depth + t_acc * cfg.gemm.ii
    if wl.bias and not cfg.gemm.reset_from_acc:
        reset = 0 * reset  # the bias may be LOADed in place of the reset
    n_imm = 0 if cfg.store.postproc else 2 + int(wl.shift > 0)
    epilogue = n_imm * (d + t_acc * costs.alu_ii(True, cfg) + cfg.alu.depth)
    work = (threads * (chunks * gemm + reset + epilogue)).astype(np.float64)
    n_stores = np.where(c["tw"] == wl.out_width, c["tb"], c["tb"] * c["tco"])
    insns = chunks * (c["tb"] * c["tci"] + 1) + 1 + n_imm + n_stores
    batch = costs.fetch_batch_size(cfg)
    work = np.maximum(work, threads * insns * costs.fetch_cycles(batch, cfg) / batch)
    store_beats = threads * t_acc * cfg.out_tile_bytes / bpc
    wgt_bytes = c["tco"] * c["tci"] * kk * cfg.wgt_tile_bytes
    per_kind = (nb // c["tb"]) * (cob // (c["tco"] * c["ocn"])) / c["hn"]
    total = np.zeros(len(threads))
    for th in np.unique(c["th"]).tolist():
        rows = _windows(wl.out_height, th, wl.stride_h, wl.kernel_h, wl.pad_h, wl.height)
        for tw in np.unique(c["tw"][c["th"] == th]).tolist():
            at = np.flatnonzero((c["th"] == th) & (c["tw"] == tw))
            cols = _windows(wl.out_width, tw, wl.stride_w, wl.kernel_w, wl.pad_w, wl.width)
            scale = threads[at] * chunks[at] / bpc
            per_pixel = c["tb"][at] * c["tci"][at] * cfg.inp_tile_bytes
            for (_, ys, _), n_rows in rows.items():
                for (_, xs, _), n_cols in cols.items():
                    beats = scale * (per_pixel * ys * xs + wgt_bytes[at]) + store_beats[at]
                    total[at] += n_rows * n_cols * np.maximum(work[at], beats)
    # Summed in another order than the floor: keep the bound below it by more than rounding.
    return total * per_kind * (1 - 1e-9)


@functools.lru_cache(maxsize=256)
def default_conv2d_knobs(wl: Conv2dWorkload, cfg: HwConfig) -> Conv2dKnobs:
    """The candidate with the lowest estimated cycles (of those within ``NEAR_TIE`` of it,
    the one that moves the fewest DRAM bytes).

    Remembered in memory and on disk (``$ACCEL_CACHE_DIR/knobs``), keyed as the compile cache
    keys programs: config name, workload signature and the hash of the contract's and the
    compiler's code, so a later run (or a sweep's worker) asks the search once per layer and
    machine; an unreadable entry is searched again and replaced.

    Raises
    ------
    LoweringError
        No knob setting fits the config's buffers (for example a kernel window wider than the
        inp buffer).
    """
    folder = cache_dir("knobs")
    path = None
    if folder is not None:
        path = folder / (f"{cfg.name}__{wl.signature()}__"
                         f"{code_version('accel.machine', 'compiler')}.json")
        with contextlib.suppress(OSError, ValueError, TypeError):
            return Conv2dKnobs(**json.loads(path.read_text()))
    knobs = search_conv2d_knobs(wl, cfg)
    if path is not None:
        with contextlib.suppress(OSError):
            write_atomic(path, json.dumps(knobs.to_dict()))
    return knobs


def search_conv2d_knobs(wl: Conv2dWorkload, cfg: HwConfig) -> Conv2dKnobs:
    """:func:`default_conv2d_knobs`' search itself, uncached (the module docstring's model,
    priced by branch and bound)."""
    pad_limit = (1 << cfg.isa.pad_bits) - 1
    if max(wl.pad_h, wl.pad_w) > pad_limit:
        raise LoweringError(
            f"conv2d {wl.signature()}: padding ({wl.pad_h}, {wl.pad_w}) exceeds the "
            f"{pad_limit} that the {cfg.isa.pad_bits}-bit pad fields of {cfg.name} hold"
        )
    table = _candidate_table(wl, cfg)
    if not len(table["tb"]):
        raise LoweringError(
            f"conv2d {wl.signature()}: no tiling fits the buffers of {cfg.name} (even one "
            f"output pixel needs {wl.kernel_h * wl.kernel_w} wgt tiles and "
            f"{wl.kernel_h * wl.kernel_w} inp tiles)"
        )
    # Branch and bound: the candidates are priced in the order of a bound from their knobs
    # alone (:func:`_bound`, below the plan's floor, which no estimate is below), and the
    # search stops at a bound above the best estimate so far by more than NEAR_TIE: every
    # candidate within NEAR_TIE of the best is priced, whatever the order. Of those, the one
    # that moves the fewest DRAM bytes wins (then more threads, then the smaller tile_ci, then
    # the shorter longest transaction, then the lower floor, then the earlier candidate): the
    # model cannot tell such candidates apart, and the copies it undercounts are DRAM
    # contention. The arbiter grants whole transactions, so shorter ones interleave the loads'
    # and the stores' beats more finely (ResNet-18's C5 on vta_1x16x16: tiles of 14 x 7
    # outputs 3.5% faster than of 7 x 14, the same estimate).
    bound = _bound(wl, cfg, table)
    columns = [table[n] for n in _KNOB_COLUMNS]
    priced: list[tuple[float, int, _Plan, Conv2dKnobs]] = []
    best = float("inf")
    for i in np.argsort(bound, kind="stable").tolist():
        if bound[i] > best * (1 + NEAR_TIE):
            break
        k = Conv2dKnobs(*(int(col[i]) for col in columns))
        plan = _plan(wl, k, cfg)
        cycles = plan.cycles()
        best = min(best, cycles)
        priced.append((cycles, i, plan, k))

    def tie_key(p: tuple[float, int, _Plan, Conv2dKnobs]) -> tuple[float, ...]:
        _, i, plan, k = p
        return (round(plan.dram_bytes()), -k.nthreads, k.tile_ci,
                plan.burst if plan.on_bus() else 0, plan.floor(), i)

    return min((p for p in priced if p[0] <= best * (1 + NEAR_TIE)), key=tie_key)[3]
