"""The conv2d knob heuristic's fast search against its definitions.

``default_conv2d_knobs`` prices candidates in batches of the order of a vectorised bound and
stops early; ``_price`` prices a batch with numpy as ``_plan`` prices one candidate; ``_tiles``
computes in one pass what the list scheduler computes over the streams, and ``_tiles_rows``
the same over many rows at once; the candidate table is built with numpy; ``_gemm_fold`` asks
``arrange_loops`` directly, which checks hazards lazily. Each is checked here against the plain
definition it replaced: the picks and the prices must be identical, not close.
"""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accel.machine.config import load_config, shipped_configs
from compiler.ops import heuristic as h
from compiler.ops.conv2d import Conv2dKnobs, Conv2dWorkload
from compiler.ops.workloads import RESNET18_LAYERS, resnet18_layer
from compiler.passes.uops import _hazard, arrange_loops, choose_loops
from compiler.te import Var
from compiler.tir import Buffer, For, Gemm, TileRef, UopLoop


def reference_candidates(wl: Conv2dWorkload, cfg) -> list[Conv2dKnobs]:
    """Every knob setting that divides the layer and fits the buffers, by ``fits``, in the
    order the heuristic numbers them."""
    nb, cib, cob = wl.blocks(cfg)
    out = []
    for tb, th, tw, tci in itertools.product(h._divisors(nb), h._divisors(wl.out_height),
                                             h._divisors(wl.out_width), h._divisors(cib)):
        for oc_n, h_n in h._THREAD_SPLITS:
            if wl.out_height % (th * h_n):
                continue
            for tco in h._divisors(cob):
                if cob % (tco * oc_n):
                    continue
                k = Conv2dKnobs(tb, th, tw, tci, tco, oc_n, h_n)
                if h.fits(wl, k, cfg):
                    out.append(k)
    return out


def reference_pick(wl: Conv2dWorkload, cfg) -> Conv2dKnobs:
    """The heuristic's definition: price every candidate; of those within NEAR_TIE of the
    best, the least by the tie key (DRAM bytes, more threads, smaller tile_ci, shorter
    longest transaction, lower floor, earlier candidate)."""
    priced = []
    for i, k in enumerate(reference_candidates(wl, cfg)):
        plan = h._plan(wl, k, cfg)
        priced.append((plan.cycles(), i, plan, k))
    best = min(p[0] for p in priced)
    near = [p for p in priced if p[0] <= best * (1 + h.NEAR_TIE)]
    return min(near, key=lambda p: (round(p[2].dram_bytes()), -p[3].nthreads, p[3].tile_ci,
                                    p[2].burst if p[2].on_bus() else 0, p[2].floor(),
                                    p[1]))[3]


def _layers() -> list[tuple[str, Conv2dWorkload]]:
    """C1-C12 as the networks give them (bias, shift, ReLU) and bare (no bias, no shift)."""
    out = []
    for name in RESNET18_LAYERS:
        out.append((name, resnet18_layer(name)))
        out.append((f"{name}-bare", resnet18_layer(name, bias=False, shift=0, relu=False)))
    return out


def _cases(configs: list[str]) -> list[tuple[str, str, Conv2dWorkload]]:
    return [(c, n, wl) for c in configs for n, wl in _layers()]


def _check_pick(config: str, wl: Conv2dWorkload) -> None:
    cfg = load_config(config)
    try:
        fast = h.search_conv2d_knobs(wl, cfg)
    except h.LoweringError:
        assert not reference_candidates(wl, cfg)
        return
    assert fast == reference_pick(wl, cfg)


@pytest.mark.parametrize("config,wl", [pytest.param(c, wl, id=f"{c}-{n}")
                                       for c, n, wl in _cases(shipped_configs())])
def test_picks_equal_the_exhaustive_definition(config: str, wl: Conv2dWorkload) -> None:
    """C1-C12, with and without bias, on every shipped config (the issue's C1-C12 check)."""
    _check_pick(config, wl)


@pytest.mark.parametrize("config", ["default", "vta_1x16x16", "tiny"])
def test_candidate_table_and_bound(config: str) -> None:
    """The table holds exactly ``fits``' candidates in order, and the bound that orders the
    search is below every candidate's estimate (as the floor is): no candidate within
    NEAR_TIE of the best can be cut off."""
    cfg = load_config(config)
    for name, wl in _layers():
        ref = reference_candidates(wl, cfg)
        assert h.knob_candidates(wl, cfg) == ref, name
        if not ref:
            continue
        bound = h._bound(wl, cfg, h._candidate_table(wl, cfg))
        for b, k in zip(bound.tolist(), ref, strict=True):
            plan = h._plan(wl, k, cfg)
            assert b <= plan.cycles() and plan.floor() <= plan.cycles(), (name, k)


@settings(max_examples=300, deadline=None)
@given(threads=st.sampled_from([1, 2, 4]), chunks=st.integers(1, 5),
       load=st.integers(0, 400), gemm=st.integers(1, 400), reset=st.integers(0, 200),
       epilogue=st.integers(0, 200), stores=st.integers(0, 400))
def test_tiles_in_one_pass_equals_the_list_scheduler(threads: int, chunks: int, load: int,
                                                     gemm: int, reset: int, epilogue: int,
                                                     stores: int) -> None:
    args = (threads, chunks, load, gemm, reset, epilogue, stores)
    one, two = h._tiles.__wrapped__(*args)
    assert one == h._tiles_streams(threads, chunks, 1, *args[2:])
    assert two == h._tiles_streams(threads, chunks, 2, *args[2:])
    # The chain the bound counts: each thread's reset waits for its own stores, its loads
    # for its own GEMMs.
    assert two - one >= reset + chunks * gemm + (chunks - 1) * load + epilogue + stores


@settings(max_examples=300, deadline=None)
@given(rows=st.lists(st.tuples(st.sampled_from([1, 2, 4]), st.integers(1, 9),
                               st.integers(0, 400), st.integers(1, 400), st.integers(0, 200),
                               st.sampled_from([0, 0, 1, 50, 200]), st.integers(0, 400)),
                     min_size=1, max_size=12))
def test_tiles_of_many_rows_equal_tiles_of_each(rows: list[tuple[int, ...]]) -> None:
    """Rows of 1, 2 and 4 threads side by side; chunks up to 9, so the middle chunks are
    stepped, jumped, or both."""
    columns = [np.array(col, dtype=np.int64) for col in zip(*rows, strict=True)]
    one, two = h._tiles_rows(*columns)
    expect = [h._tiles.__wrapped__(*row) for row in rows]
    assert list(zip(one.tolist(), two.tolist(), strict=True)) == expect


@pytest.mark.parametrize("config,wl", [pytest.param(c, wl, id=f"{c}-{n}")
                                       for c, n, wl in _cases(shipped_configs())])
def test_batch_prices_equal_the_plan_of_each_candidate(config: str, wl: Conv2dWorkload) -> None:
    """C1-C12, with and without bias, on every shipped config: every candidate's cycles,
    floor, DRAM bytes, bus flag and longest transaction, priced by numpy over the table, equal
    its plan's, float for float."""
    cfg = load_config(config)
    table = h._candidate_table(wl, cfg)
    if not len(table["tb"]):
        return
    priced = h._price(wl, cfg, table)
    for i, k in enumerate(h.knob_candidates(wl, cfg)):
        plan = h._plan(wl, k, cfg)
        assert (priced["cycles"][i], priced["floor"][i], priced["dram_bytes"][i],
                bool(priced["on_bus"][i]), priced["burst"][i]) == (
            plan.cycles(), plan.floor(), plan.dram_bytes(), plan.on_bus(), plan.burst), k


def _arrange_by_max(chain: list, moving: dict, affine: bool, budget: int,
                    window: int) -> tuple[list, list, list]:
    """``arrange_loops``' definition: of every choice of up to two hardware loops, the first
    (by ``max``) of the highest (hazard-free, nothing peeled, iterations in hardware)."""
    def arrange(hw: tuple) -> tuple[list, list, list]:
        kernel = [item for item in chain if item not in hw]
        peeled = []
        while kernel and math.prod(n for _, n in kernel) > budget:
            peeled.append(kernel.pop(0))
        moves = [item for item in kernel if moving[item[0]] != 0]
        kernel = [item for item in kernel if item not in moves] + moves
        return sorted(hw, key=chain.index), kernel, peeled

    def score(hw: tuple) -> tuple[bool, bool, int]:
        order, kernel, peeled = arrange(hw)
        return (not _hazard(moving, order, kernel, window), not peeled,
                math.prod(n for _, n in hw))

    choices = [c for r in (2, 1, 0) for c in itertools.combinations(chain if affine else [], r)]
    return arrange(max(choices, key=score))


@settings(max_examples=300, deadline=None)
@given(extents=st.lists(st.integers(2, 8), min_size=0, max_size=6),
       factors=st.lists(st.integers(0, 64), min_size=6, max_size=6), affine=st.booleans(),
       budget=st.sampled_from([1, 4, 16, 64, 512]), window=st.integers(1, 8))
def test_arrange_loops_checks_hazards_lazily(extents: list[int], factors: list[int],
                                             affine: bool, budget: int, window: int) -> None:
    chain = [(f"v{i}", n) for i, n in enumerate(extents)]
    moving = {f"v{i}": factors[i] for i in range(len(extents))}
    assert arrange_loops(chain, moving, affine, budget, window) == _arrange_by_max(
        chain, moving, affine, budget, window)


@settings(max_examples=500, deadline=None)
@given(extents=st.tuples(*[st.integers(1, 9)] * 7), split=st.integers(0, 2),
       order=st.permutations(range(7)), window=st.integers(1, 9))
def test_dense_hazard_equals_the_sequence_check(extents: tuple[int, ...], split: int,
                                                order: list[int], window: int) -> None:
    """Any arrangement of the conv nest's loops as hardware (the first ``split``, in nest
    order) and kernel loops (reductions first, as arrange_loops orders them)."""
    names = ("ic", "kh", "kw", "n", "o", "y", "x")
    co, hh, w = extents[4:]
    moves = {"ic": 0, "kh": 0, "kw": 0, "n": co * hh * w, "o": hh * w, "y": w, "x": 1}
    loops = [(names[i], extents[i]) for i in order if extents[i] > 1]
    hw = sorted(loops[:split], key=lambda item: names.index(item[0]))
    kernel = loops[split:]
    kernel = [i for i in kernel if moves[i[0]] == 0] + [i for i in kernel if moves[i[0]]]
    assert h._dense_hazard(moves, hw, kernel, window) == _hazard(moves, hw, kernel, window)


def _gemm_fold_by_choose_loops(ci: int, kh: int, kw: int, b: int, co: int, hh: int, w: int,
                               sh: int, sw: int, budget: int, window: int) -> tuple[int, int]:
    """The fold as it was computed: a real Gemm over TE variables through choose_loops."""
    ih, iw = (hh - 1) * sh + kh, (w - 1) * sw + kw
    v = {name: Var(name) for name in ("ic", "kh", "kw", "n", "o", "y", "x")}
    dst = ((v["n"] * co + v["o"]) * hh + v["y"]) * w + v["x"]
    src = (((v["n"] * ci + v["ic"]) * ih + v["y"] * sh + v["kh"]) * iw + v["x"] * sw
           + v["kw"])
    wgt = ((v["o"] * ci + v["ic"]) * kh + v["kh"]) * kw + v["kw"]
    op = Gemm(TileRef(Buffer("acc", "acc", (1, 1), "int32"), dst),
              TileRef(Buffer("inp", "inp", (1, 1), "int8"), src),
              TileRef(Buffer("wgt", "wgt", (1, 1), "int8"), wgt))
    extents = (ci, kh, kw, b, co, hh, w)
    nest = [(var, n) for var, n in zip(v.values(), extents, strict=True) if n > 1]
    node = choose_loops(UopLoop(op, [], nest), budget, window)
    n = 1
    while isinstance(node, For):
        n, node = n * node.extent, node.body
    assert isinstance(node, UopLoop)
    return n, math.prod(e for _, e in node.kernel_loops)


@settings(max_examples=600, deadline=None)
@given(ci=st.integers(1, 8), kh=st.sampled_from([1, 3, 7]), kw=st.sampled_from([1, 3, 7]),
       b=st.integers(1, 3), co=st.integers(1, 8), hh=st.integers(1, 16), w=st.integers(1, 16),
       sh=st.integers(1, 2), sw=st.integers(1, 2), budget=st.sampled_from([1, 8, 64, 512]),
       window=st.integers(1, 8))
def test_gemm_fold_equals_choose_loops(ci: int, kh: int, kw: int, b: int, co: int, hh: int,
                                       w: int, sh: int, sw: int, budget: int,
                                       window: int) -> None:
    fold = h._gemm_fold.__wrapped__(ci, kh, kw, b, co, hh, w, budget, window)
    assert fold == _gemm_fold_by_choose_loops(ci, kh, kw, b, co, hh, w, sh, sw, budget, window)


def test_the_pick_is_cached_on_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A later process (the in-memory cache cleared) reads the pick back instead of searching;
    an unreadable entry is searched again and replaced; with caching off nothing is written."""
    monkeypatch.setenv("ACCEL_CACHE_DIR", str(tmp_path))
    cfg, wl = load_config("default"), resnet18_layer("C7")
    h.default_conv2d_knobs.cache_clear()
    picked = h.default_conv2d_knobs(wl, cfg)
    assert picked == h.search_conv2d_knobs(wl, cfg)
    (entry,) = (tmp_path / "knobs").iterdir()
    assert entry.name.startswith(f"{cfg.name}__{wl.signature()}__")

    searched: list[Conv2dWorkload] = []
    real = h.search_conv2d_knobs

    def counting(wl: Conv2dWorkload, cfg) -> Conv2dKnobs:
        searched.append(wl)
        return real(wl, cfg)

    monkeypatch.setattr(h, "search_conv2d_knobs", counting)
    h.default_conv2d_knobs.cache_clear()
    assert h.default_conv2d_knobs(wl, cfg) == picked and searched == []
    entry.write_text("{not json")
    h.default_conv2d_knobs.cache_clear()
    assert h.default_conv2d_knobs(wl, cfg) == picked and searched == [wl]
    assert Conv2dKnobs(**json.loads(entry.read_text())) == picked

    monkeypatch.setenv("ACCEL_CACHE_DIR", "off")
    h.default_conv2d_knobs.cache_clear()
    other = resnet18_layer("C9")
    h.default_conv2d_knobs(other, cfg)
    assert searched == [wl, other] and len(list((tmp_path / "knobs").iterdir())) == 1
    h.default_conv2d_knobs.cache_clear()
