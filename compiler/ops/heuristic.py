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
import itertools
import json
import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

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


def _dense_hazard(moving: dict[str, int], hw: list[tuple[str, int]],
                  kernel: list[tuple[str, int]], window: int) -> bool:
    """``compiler.passes.uops._hazard`` for :func:`_gemm_fold`'s nest, without building the
    destination sequence. The destination is dense over the loops that move it (n, o, y, x: no
    two of their index tuples share an accumulator), so it repeats only across a reduction
    loop (ic, kh, kw: factor 0 in ``moving``), first after the micro-ops nested inside the
    innermost one: a hazard when those are fewer than ``window``. As ``_hazard``, with the
    first hardware loop at two iterations and no hazard found in a sequence over 2**18
    micro-ops."""
    loops = hw + kernel
    extents = [n for _, n in loops]
    if hw:
        extents[0] = min(extents[0], 2)
    if math.prod(extents) > 1 << 18:
        return False
    inner = 1
    for (var, _), n in zip(reversed(loops), reversed(extents), strict=True):
        if not moving[var]:
            return inner < window
        inner *= n
    return False


@functools.lru_cache(maxsize=16384)
def _gemm_fold(ci: int, kh: int, kw: int, b: int, co: int, h: int, w: int, budget: int,
               window: int) -> tuple[int, int]:
    """(GEMM instructions, micro-ops of each one's kernel) of one thread's reduction chunk:
    ``compiler.passes.uops``'s own choice of hardware loops on the schedule's loop nest (input
    channel block ``ci``, kernel row and column, batch, output channel block, output row,
    column: the choice depends on their extents only, not on the strides), whose kernel loops
    beyond ``budget`` stay instruction loops."""
    # The destination index ((n * co + o) * h + y) * w + x moves along n, o, y and x; the
    # sources and weights are affine too. Loops of extent 1 change neither the kernel's size
    # nor the instructions: left out.
    moves = {"ic": 0, "kh": 0, "kw": 0, "n": co * h * w, "o": h * w, "y": w, "x": 1}
    extents = (ci, kh, kw, b, co, h, w)
    chain = [(var, n) for var, n in zip(moves, extents, strict=True) if n > 1]
    _, kernel, peeled = arrange_loops(chain, moves, True, budget, window,
                                      hazard=functools.partial(_dense_hazard, moves, window=window))
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
                                k.tile_h, k.tile_w, max(1, cfg.uop_depth // 8), cfg.gemm.depth)
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


def _each(fn: Callable[..., Any], *columns: np.ndarray) -> np.ndarray:
    """``fn(*row)`` for every row of the non-negative integer ``columns``, called once per
    distinct row."""
    key = np.zeros(len(columns[0]), np.int64)
    for col in columns:  # one integer per row (mixed radix), for a one-dimensional unique
        key = key * (int(col.max()) + 1) + col
    _, first, where = np.unique(key, return_index=True, return_inverse=True)
    rows = np.stack(columns, axis=1)[first].tolist()
    return np.array([fn(*row) for row in rows])[where]


def _tiles_rows(threads: np.ndarray, chunks: np.ndarray, load: np.ndarray, gemm: np.ndarray,
                reset: np.ndarray, epilogue: np.ndarray,
                stores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_tiles` of many rows, each argument one column: the same recurrence over the
    rows at once, thread ``t`` of the most any row has stepping only the rows with more than
    ``t`` threads.

    A chunk between a tile's first and last is a max-plus step of the state (load module,
    compute module, each thread's last GEMM) that adds no reset and no store, so once one
    such chunk moves every part of a row's state by the same ``d``, every later one does too:
    the remaining middle chunks are added as ``d`` each, not stepped."""
    m = len(chunks)
    most = int(threads.max()) if m else 0
    has = [threads > t for t in range(most)]  # the rows with a thread t
    lf = np.zeros(m, np.int64)               # load module free
    cf = np.zeros(m, np.int64)               # compute module free
    sf = np.zeros(m, np.int64)               # store module free
    lg = [np.zeros(m, np.int64) for _ in range(most)]      # each thread's last GEMM's end
    stored = [np.zeros(m, np.int64) for _ in range(most)]  # its store of the first tile
    has_ep = epilogue > 0
    one = lf

    def step(t: int, on: np.ndarray, lf: np.ndarray, cf: np.ndarray, lg: list[np.ndarray],
             load: np.ndarray, gemm: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Thread ``t``'s load and GEMM on the rows ``on`` (``lg`` updated in place)."""
        lf = np.where(on, np.maximum(lf, lg[t]) + load, lf)
        cf = np.where(on, np.maximum(cf, lf) + gemm, cf)
        lg[t] = np.where(on, cf, lg[t])
        return lf, cf

    for tile in range(2):
        # The first chunk: each thread's reset (once its stores of the tile before are done),
        # load and GEMM; its stores too where it is also the last chunk and no epilogue.
        store = (chunks == 1) & ~has_ep
        for t in range(most):
            on = has[t]
            cf = np.where(on, (np.maximum(cf, stored[t]) if tile else cf) + reset, cf)
            lf, cf = step(t, on, lf, cf, lg, load, gemm)
            sf = np.where(on & store, np.maximum(sf, cf) + stores, sf)
            if tile == 0:
                stored[t] = np.where(on & store, sf, stored[t])
        # The middle chunks, on the rows that have them, until each row's steps are even.
        rows = np.flatnonzero(chunks >= 3)
        left = chunks[rows] - 2
        r_lf, r_cf, r_lg = lf[rows], cf[rows], [g[rows] for g in lg]
        r_has = [h[rows] for h in has]
        r_load, r_gemm = load[rows], gemm[rows]
        done_lf, done_cf = r_lf.copy(), r_cf.copy()
        done_lg = [g.copy() for g in r_lg]
        at = np.arange(len(rows))
        while at.size:
            before = r_lf, r_cf, list(r_lg)
            for t in range(most):
                r_lf, r_cf = step(t, r_has[t], r_lf, r_cf, r_lg, r_load, r_gemm)
            left -= 1
            d = r_lf - before[0]
            even = r_cf - before[1] == d
            for g, b, h in zip(r_lg, before[2], r_has, strict=True):
                even &= (g - b == d) | ~h
            jump = np.where(even, left, 0) * d
            finished = even | (left == 0)
            done_lf[at[finished]] = (r_lf + jump)[finished]
            done_cf[at[finished]] = (r_cf + jump)[finished]
            for g, dg in zip(r_lg, done_lg, strict=True):
                dg[at[finished]] = (g + jump)[finished]
            keep = ~finished
            at, left = at[keep], left[keep]
            r_lf, r_cf, r_lg = r_lf[keep], r_cf[keep], [g[keep] for g in r_lg]
            r_has = [h[keep] for h in r_has]
            r_load, r_gemm = r_load[keep], r_gemm[keep]
        lf[rows], cf[rows] = done_lf, done_cf
        for g, dg in zip(lg, done_lg, strict=True):
            g[rows] = dg
        # The last chunk (of rows with two or more): loads, GEMMs, and the stores unless an
        # epilogue follows; then each thread's epilogue and its stores.
        last = chunks >= 2
        store = last & ~has_ep
        for t in range(most):
            on = has[t]
            lf, cf = step(t, on & last, lf, cf, lg, load, gemm)
            sf = np.where(on & store, np.maximum(sf, cf) + stores, sf)
            if tile == 0:
                stored[t] = np.where(on & store, sf, stored[t])
        for t in range(most):
            on = has[t] & has_ep
            cf = np.where(on, cf + epilogue, cf)
            sf = np.where(on, np.maximum(sf, cf) + stores, sf)
            if tile == 0:
                stored[t] = np.where(on, sf, stored[t])
        if tile == 0:
            one = np.maximum(np.maximum(lf, cf), sf)
    return one, np.maximum(np.maximum(lf, cf), sf)


def _price(wl: Conv2dWorkload, cfg: HwConfig, c: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """What :func:`_plan` gives of every candidate of the table ``c`` (its columns, as
    :func:`_candidate_table` has them), as columns: ``cycles``, ``floor``, ``dram_bytes``,
    ``on_bus`` and ``burst``. The same arithmetic in the same order, so the same floats (a test
    checks every candidate): numpy over the candidates where the plan is arithmetic, the
    contract's cost functions once per distinct instruction."""
    nb, cib, cob = wl.blocks(cfg)
    kk = wl.kernel_h * wl.kernel_w
    tb, th, tw, tci, tco, ocn, hn = (c[n] for n in _KNOB_COLUMNS)
    threads = ocn * hn
    t_acc = tb * tco * th * tw
    chunks = cib // tci
    wgt_cycles = _each(lambda co, ci: _mem_cycles(MemInsn(
        mem_type=MemType.WGT, y_size=co, x_size=ci * kk, x_stride=cib * kk), cfg), tco, tci)
    fold = _each(lambda ci, b, co, h, w: _gemm_fold(
        ci, wl.kernel_h, wl.kernel_w, b, co, h, w, max(1, cfg.uop_depth // 8), cfg.gemm.depth),
        tci, tb, tco, th, tw)
    n_gemm, kernel = fold[:, 0], fold[:, 1]
    gemm = n_gemm * _each(lambda n: costs.gemm_cycles(_uops(n, GemmInsn), cfg),
                          tci * kk * t_acc // n_gemm)
    reload = n_gemm * _each(lambda n: _mem_cycles(MemInsn(mem_type=MemType.UOP, x_size=n,
                                                          x_stride=n), cfg), kernel)
    gemm = gemm + np.where(threads * (n_gemm * kernel + 5) > cfg.uop_depth, reload, 0)
    reset = _each(lambda n: costs.gemm_cycles(_uops(n, GemmInsn, reset=True), cfg), t_acc)
    post = cfg.store.postproc
    n_imm = 0 if post else 2 + int(wl.shift > 0)
    epilogue = n_imm * _each(lambda n: costs.alu_cycles(
        _uops(n, AluInsn, alu_op=AluOp.MIN, use_imm=True), cfg), t_acc)
    full = tw == wl.out_width
    n_stores = np.where(full, tb, tb * tco)
    store_one = _each(lambda rows, cols, stride: _mem_cycles(MemInsn(
        store=True, mem_type=MemType.ACC if post else MemType.OUT, y_size=rows, x_size=cols,
        x_stride=stride), cfg), np.where(full, tco, th), np.where(full, th * tw, tw),
        np.where(full, wl.out_height * wl.out_width, wl.out_width))
    cols_out = np.where(full, th * tw, tw)
    insns = chunks * (tb * tci + n_gemm) + 1 + n_imm + n_stores
    once = np.zeros(len(tb), np.int64)
    if wl.bias:
        if cfg.gemm.reset_from_acc:
            loaded = np.zeros(len(tb), bool)
        else:
            def bias_row(b: int, co: int, h: int, w: int) -> tuple[bool, int]:
                init = bias_init(wl, Conv2dKnobs(tile_b=b, tile_co=co, tile_h=h, tile_w=w),
                                 cfg)
                return init.pays, init.loaded

            init = _each(bias_row, tb, tco, th, tw)
            loaded = init[:, 0].astype(bool)
            reset = np.where(loaded, init[:, 1], reset)
            insns = insns + np.where(loaded, tb * tco - 1, 0)
        resident = _each(lambda n: _mem_cycles(MemInsn(mem_type=MemType.ACC, x_size=n,
                                                       x_stride=n), cfg), tco * ocn)
        once = np.where(loaded, 0, resident)
        if not cfg.gemm.reset_from_acc:
            add = _each(lambda n: costs.alu_cycles(_uops(n, AluInsn, alu_op=AluOp.ADD), cfg),
                        t_acc)
            epilogue = epilogue + np.where(loaded, 0, add)
            insns = insns + np.where(loaded, 0, 1)
    batch = costs.fetch_batch_size(cfg)
    wgt_bytes = tco * tci * kk * cfg.wgt_tile_bytes
    bpc = cfg.dram.bytes_per_cycle
    stores = n_stores * store_one
    blocks = (nb // tb) * (cob // (tco * ocn))
    once = once * blocks
    fetch = threads * insns * costs.fetch_cycles(batch, cfg) / batch
    store_beats = threads * t_acc * cfg.out_tile_bytes / bpc
    per_kind = blocks / hn

    # The tile kinds by input window, in the plan's order, as columns of (candidates x kinds).
    m = len(tb)
    windows = {(h, w): list(itertools.product(
        _windows(wl.out_height, h, wl.stride_h, wl.kernel_h, wl.pad_h, wl.height).items(),
        _windows(wl.out_width, w, wl.stride_w, wl.kernel_w, wl.pad_w, wl.width).items()))
        for h, w in set(zip(th.tolist(), tw.tolist(), strict=True))}
    kinds = max(len(k) for k in windows.values())
    count = np.zeros((m, kinds), np.int64)
    ys = np.zeros((m, kinds), np.int64)
    xs = np.zeros((m, kinds), np.int64)
    inp_cycles = np.zeros((m, kinds), np.int64)
    for (h, w), shapes in windows.items():
        at = np.flatnonzero((th == h) & (tw == w))
        for j, (((y0, y, y1), n_rows), ((x0, x, x1), n_cols)) in enumerate(shapes):
            count[at, j], ys[at, j], xs[at, j] = n_rows * n_cols, y, x
            inp_cycles[at, j] = _mem_cycles(MemInsn(
                mem_type=MemType.INP, y_size=y, x_size=x, x_stride=wl.width, y_pad_0=y0,
                y_pad_1=y1, x_pad_0=x0, x_pad_1=x1), cfg)
    valid = count > 0
    col = np.newaxis
    load = (tb * tci)[:, col] * inp_cycles + wgt_cycles[:, col]
    in_bytes = (tb * tci)[:, col] * ys * xs * cfg.inp_tile_bytes + wgt_bytes[:, col]
    load_beats = (threads * chunks)[:, col] * in_bytes / bpc
    longest = np.maximum(cols_out * cfg.out_tile_bytes,
                         (xs * cfg.inp_tile_bytes).max(axis=1))
    row, kind = np.nonzero(valid)
    args = [a[row] for a in (threads, chunks)]
    one, two = _tiles_rows(*args, load[row, kind], gemm[row], reset[row], epilogue[row],
                            stores[row])
    # The loads and the stores share the in-order data bus: as _Plan._tiles stretches them.
    busy = np.maximum(two - one, 1)
    slow_store = 1 + np.minimum(1.0, load_beats[row, kind] / busy)
    slow_load = 1 + np.minimum(1.0, store_beats[row] / busy)
    one, two = _tiles_rows(*args, np.round(load[row, kind] * slow_load).astype(np.int64),
                            gemm[row], reset[row], epilogue[row],
                            np.round(stores[row] * slow_store).astype(np.int64))
    beats = load_beats[row, kind] + store_beats[row]
    tile = np.maximum(np.maximum(two - one, beats), fetch[row])

    def per_candidate(values: np.ndarray, empty: float) -> np.ndarray:
        out = np.full((m, kinds), empty)
        out[row, kind] = values
        return out

    tiles = per_candidate(tile, 0.0)
    total = np.zeros(m)
    floor = np.zeros(m)
    dram = np.zeros(m)
    work = threads * (chunks * gemm + reset + epilogue)
    for j in range(kinds):  # summed kind by kind, as the plan sums them
        n = count[:, j]
        total = total + n * tiles[:, j]
        b = load_beats[:, j] + store_beats
        floor = floor + n * np.maximum(np.maximum(work, b), fetch)
        dram = dram + n * b
    first = np.maximum(0.0, per_candidate(one - tile, -np.inf).max(axis=1))
    return {"cycles": total * per_kind + first + once,
            "floor": once + per_kind * floor,
            "dram_bytes": per_kind * bpc * dram,
            "on_bus": per_candidate(tile * ON_BUS <= beats, True).astype(bool).all(axis=1),
            "burst": np.minimum(longest, cfg.dram.max_burst)}


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


_FIRST_BATCH = 64
_BATCH = 4096
"""How many candidates :func:`search_conv2d_knobs` prices first, and at most in each batch
after: a small first batch finds a near-best estimate, and then the bound says how many more
need pricing (C1-C12 on the shipped configs: 47,690 candidates priced with batches that
doubled from 512, 28,347 this way)."""

_THREAD_SPLITS = ((1, 1), (2, 1), (1, 2), (2, 2), (4, 1), (1, 4))
"""The virtual-thread splits a candidate takes, (oc_nthread, h_nthread)."""


def knob_candidates(wl: Conv2dWorkload, cfg: HwConfig) -> list[Conv2dKnobs]:
    """Every knob setting that divides the layer and fits the buffers (:func:`fits`)."""
    c = _candidate_table(wl, cfg)
    return [Conv2dKnobs(*k) for k in zip(*(c[n].tolist() for n in _KNOB_COLUMNS), strict=True)]


_KNOB_COLUMNS = ("tb", "th", "tw", "tci", "tco", "ocn", "hn")
"""The table's columns in the order of :class:`Conv2dKnobs`' fields."""


def _bound(wl: Conv2dWorkload, cfg: HwConfig, c: dict[str, np.ndarray]) -> np.ndarray:
    """A lower bound on every candidate's estimate (:meth:`_Plan.cycles`), from the knobs
    alone: per tile the most of the floor's terms (:meth:`_Plan.floor`) and one thread's
    chain of copies and GEMMs, with the parts that need the micro-op loops or the contract's
    DRAM steps left at their least (one GEMM instruction per chunk, no micro-op reloads, no
    bias LOADs or ADD, each copy its latency and beats)."""
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
    # Each thread's loads and GEMMs alternate (one buffer each), and its reset waits for its
    # own stores, so a tile takes at least R + chunks * G + (chunks - 1) * L + E + S from the
    # last thread's stores to its next (:func:`_tiles`), each copy at least its decode, the
    # DRAM latency and its beats, a LOAD also its padding.
    lat = cfg.dram.latency
    serial = (reset + chunks * gemm + epilogue + n_stores * (d + lat)).astype(np.float64) \
        + t_acc * cfg.out_tile_bytes / bpc
    wgt_min = d + lat + wgt_bytes / bpc
    window = (((c["th"] - 1) * wl.stride_h + wl.kernel_h)
              * ((c["tw"] - 1) * wl.stride_w + wl.kernel_w))
    # The tile kinds by input window (tiles of the kind, pixels inside the image), as
    # columns of (candidates x kinds); a kind a candidate lacks counts 0 tiles.
    groups = {(h, w): [(n_rows * n_cols, ys * xs) for (_, ys, _), n_rows in _windows(
        wl.out_height, h, wl.stride_h, wl.kernel_h, wl.pad_h, wl.height).items()
        for (_, xs, _), n_cols in _windows(
        wl.out_width, w, wl.stride_w, wl.kernel_w, wl.pad_w, wl.width).items()]
        for h, w in set(zip(c["th"].tolist(), c["tw"].tolist(), strict=True))}
    count = np.zeros((len(threads), max(len(k) for k in groups.values())), np.int64)
    area = np.zeros_like(count)
    for (h, w), kinds in groups.items():
        at = np.flatnonzero((c["th"] == h) & (c["tw"] == w))
        for j, (n, pixels) in enumerate(kinds):
            count[at, j], area[at, j] = n, pixels
    col = np.newaxis
    loads = c["tb"] * c["tci"]
    beats = ((threads * chunks / bpc)[:, col] * (loads[:, col] * area * cfg.inp_tile_bytes
                                                 + wgt_bytes[:, col]) + store_beats[:, col])
    inp_min = d + np.where(area > 0, lat + area * (cfg.inp_tile_bytes / bpc)
                           + window[:, col] - area, 0)
    load = loads[:, col] * inp_min + wgt_min[:, col]
    chain = serial[:, col] + (chunks - 1)[:, col] * load
    total = (count * np.maximum(np.maximum(work[:, col], beats), chain)).sum(axis=1)
    # Summed in another order than the estimate: keep the bound below it by more than rounding.
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
    # alone (:func:`_bound`, below every estimate), and the
    # search stops at a bound above the best estimate so far by more than NEAR_TIE: every
    # candidate within NEAR_TIE of the best is priced, whatever the order. Of those, the one
    # that moves the fewest DRAM bytes wins (then more threads, then the smaller tile_ci, then
    # the shorter longest transaction, then the lower floor, then the earlier candidate): the
    # model cannot tell such candidates apart, and the copies it undercounts are DRAM
    # contention. The arbiter grants whole transactions, so shorter ones interleave the loads'
    # and the stores' beats more finely (ResNet-18's C5 on vta_1x16x16: tiles of 14 x 7
    # outputs 3.5% faster than of 7 x 14, the same estimate).
    #
    # The candidates are priced by :func:`_price` in batches of the bound's order: a first
    # one, then at most BATCH of those whose bound is within NEAR_TIE of the best so far, until
    # none is left. A batch may price candidates past the point where one-by-one pricing
    # would stop, but those have a bound, so an estimate, above the final best by more than
    # NEAR_TIE (the bounds ascend), and change neither the best nor the near-ties.
    bound = _bound(wl, cfg, table)
    order = np.argsort(bound, kind="stable")
    ascending = bound[order]
    parts: list[tuple[np.ndarray, dict[str, np.ndarray]]] = []
    best = float("inf")
    start, end = 0, _FIRST_BATCH
    while start < end:
        at = order[start:end]
        priced = _price(wl, cfg, {n: col[at] for n, col in table.items()})
        best = min(best, float(priced["cycles"].min()))
        parts.append((at, priced))
        start = end
        end = min(int(np.searchsorted(ascending, best * (1 + NEAR_TIE), side="right")),
                  start + _BATCH)
    index = np.concatenate([at for at, _ in parts])
    p = {n: np.concatenate([priced[n] for _, priced in parts]) for n in parts[0][1]}
    near = np.flatnonzero(p["cycles"] <= best * (1 + NEAR_TIE))
    i = index[near]
    key = (i, p["floor"][near], np.where(p["on_bus"][near], p["burst"][near], 0),
           table["tci"][i], -(table["ocn"][i] * table["hn"][i]), np.round(p["dram_bytes"][near]))
    pick = i[np.lexsort(key)[0]]
    return Conv2dKnobs(*(int(table[n][pick]) for n in _KNOB_COLUMNS))
