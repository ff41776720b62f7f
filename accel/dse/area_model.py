"""The area model: a config's FPGA resources in milliseconds, from its fields, fitted to Yosys.

``accel synth`` (:func:`hw.synth.synthesize`) takes a minute to several per config; a co-design
search asks about thousands. :func:`estimate` answers in milliseconds, in the units a synthesis
report counts (LUTs, flip-flops, DSP and block-RAM cells, distributed-RAM cells):

- **Block RAMs and distributed RAM, by rule.** :func:`hw.top.memories` lists every memory the
  RTL builds (the buffers' banks, the command queues, fetch's buffers), each ``depth x width``
  with one write and one read port, without elaborating the design. Each is mapped as Yosys's
  ``memory_libmap`` maps it, by the costs of the family's library files (ECP5:
  ``share/lattice/brams_16kd.txt`` and ``lutrams_trellis.txt``): as block RAM, the fewest
  blocks of one shape (:data:`BRAM_SHAPES`: ``ceil(depth / d) * ceil(width / w)``) at cost 128
  each, or as distributed RAM, ``ceil(depth / 16) * ceil(width / 4)`` cells of 16 x 4 at
  cost 4 each, whichever costs less (block RAM on a tie).
- **DSP blocks, by rule.** One 18x18 multiplier per MAC of the GEMM core
  (``batch * block_in * block_out``) less those in LUTs (``gemm.lut_macs``), and one per ALU
  lane (``batch * block_out``: the low
  half of the lane's 32-bit multiply, ``hw.compute.AluLane``).
- **LUTs and flip-flops, fitted.** A linear function of :func:`features` (the array's MACs
  and adder trees, its lanes, the DRAM beat, the requests in flight, the store and reset
  options, the buffers' lane rotation, the address widths), least squares over the Yosys
  counts of the shipped configs and a seeded sample of generated ones
  (``accel/dse/area_data/<target>.csv``, made by ``benchmarks/area_samples.py``; rows
  labelled ``heldout``, another seed, are left out of the fit to test it). The fit is made
  when the model is first used (numpy, milliseconds); :func:`cross_validate` gives its error
  on rows left out of it in turn.

- **Carry cells, fitted** the same way (ECP5's CCU2C, from the reports' cell lists), so that
  :attr:`AreaEstimate.lut_positions` counts the part's LUTs the design takes: LUT4s, two per
  carry cell, six per distributed-RAM cell (:data:`LUT_POSITIONS`). :func:`budget_use` and
  :func:`over_budget` hold an estimate to a part's budget (:mod:`accel.machine.fpga`).

``benchmarks/area_model.py`` prints the model's error on every row left out in turn, and its
time per config. ``tests/test_area_model.py`` checks the memory list against the generated
Verilog and the rules and the fit against the committed Yosys counts.
"""

from __future__ import annotations

import csv
import functools
import json
import math
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from accel.machine.config import ConfigError, HwConfig
from accel.machine.fpga import FpgaDevice, blocks_for

__all__ = ["CSV_COUNTS", "FEATURES", "HELD_OUT", "LUT_POSITIONS", "SPACE", "AreaEstimate",
           "AreaModel", "budget_use", "config_row", "cross_validate", "data_path", "estimate",
           "features", "fit_rows", "load_rows", "map_memory", "model", "over_budget",
           "sample_configs"]

CSV_COUNTS = ("luts", "ffs", "dsps", "brams", "lutrams")
"""Resource columns of the fitting data, as :class:`hw.synth.SynthReport` counts them."""

HELD_OUT = "heldout"
"""Label prefix of the committed rows left out of the fit, to test it."""

SPACE: dict[str, tuple[Any, ...]] = {
    "core.batch": (1, 1, 2),
    "core.block_in": (4, 8, 16),
    "core.block_out": (4, 8, 16),
    "buffers.uop": (4096, 8192, 16384),
    "buffers.inp": (8192, 16384, 32768, 65536),
    "buffers.wgt": (16384, 32768, 65536, 131072, 262144),
    "buffers.acc": (8192, 16384, 32768, 65536, 131072),
    "dram.bytes_per_cycle": (4, 8, 16),
    "dram.max_outstanding": (1, 2, 4, 8),
    "store.postproc": (False, True),
    "gemm.reset_from_acc": (False, True),
}
"""The fields the sample varies and their values (batch 1 drawn twice as often as 2)."""

BRAM_SHAPES = {
    "ecp5": ((16384, 1), (8192, 2), (4096, 4), (2048, 9), (1024, 18), (512, 36)),
}
"""``(depth, width)`` shapes of one block RAM per family: DP16KD's, and PDPW16KD's 512 x 36
(simple dual port, which every memory of the design is)."""

CARRY_CELLS = ("CCU2C",)
"""Carry-chain cells (ECP5's CCU2C: two LUT4 positions each)."""

LUT_POSITIONS = {"ecp5": {"luts": 1, "carries": 2, "lutrams": 6}}
"""LUT4 positions of the part each cell takes, as nextpnr-ecp5 counts them before packing
("Logic utilisation before packing" of ``--pack-only``: a TRELLIS_DPR16X4 is 4 RAM LUTs and
2 RAMW LUTs). On tiny: 9,910 logic + 2,130 carry + 476 RAM + 238 RAMW = 12,754 LUT4s for
Yosys's 9,929 LUT4, 1,072 CCU2C and 119 TRELLIS_DPR16X4; packing then used 13,404 (5% more:
flip-flops and carries that take a LUT to reach their slice)."""

PACKING_MARGIN = 0.05
"""The share of the part's LUTs :func:`budget_use` keeps free for packing (above)."""

BRAM_COST = {"ecp5": 128}
LUTRAM_SHAPE = {"ecp5": (16, 4)}     # TRELLIS_DPR16X4
LUTRAM_COST = {"ecp5": 4}


# ---------------------------------------------------------------------- the sample
def config_row(cfg: HwConfig) -> list[str]:
    """The config as one CSV cell: its data as compact JSON (reloads exactly)."""
    return [json.dumps(cfg.to_dict(), separators=(",", ":"), sort_keys=True)]


def sample_configs(count: int, seed: int = 1, max_macs: int = 256,
                   max_buffer_bytes: int = 393216) -> list[HwConfig]:
    """``count`` distinct configs drawn from :data:`SPACE` over the shipped default's DRAM and
    GEMM settings, with a seeded generator; configs the contract or the RTL reject, or with
    more than ``max_macs`` MACs or ``max_buffer_bytes`` of buffers, are drawn again."""
    from hw.params import check_rtl_config

    rng = random.Random(seed)
    base = HwConfig.from_dict({"dram": {"max_outstanding": 8, "arbiter": "round_robin"},
                               "gemm": {"ii": 1, "depth": 5}})
    out: list[HwConfig] = []
    names: set[str] = set()
    tries = 0
    while len(out) < count:
        tries += 1
        if tries > 100 * count:
            raise RuntimeError(f"sample_configs: found only {len(out)} of {count} configs")
        changes = {k: rng.choice(v) for k, v in SPACE.items()}
        try:
            cfg = base.replace(**changes)
            check_rtl_config(cfg)
        except (ConfigError, ValueError):
            continue
        b = cfg.buffers
        if (cfg.peak_macs_per_cycle > max_macs or b.uop + b.inp + b.wgt + b.acc
                > max_buffer_bytes or cfg.name in names):
            continue
        names.add(cfg.name)
        out.append(cfg)
    return out


def data_path(target: str) -> Path:
    """The committed Yosys counts the model of ``target`` is fitted to."""
    return Path(__file__).parent / "area_data" / f"{target}.csv"


def load_rows(path: Path) -> list[tuple[str, HwConfig, dict[str, int]]]:
    """``(label, config, counts)`` of each row of a file written by
    ``benchmarks/area_samples.py``."""
    rows = []
    with path.open(newline="") as f:
        for row in csv.DictReader(f):
            cfg = HwConfig.from_dict(json.loads(row["config"]), source=f"{path}:{row['label']}")
            counts = {k: int(row[k]) for k in CSV_COUNTS}
            cells = json.loads(row["cells"]) if row.get("cells") else {}
            counts["carries"] = sum(cells.get(c, 0) for c in CARRY_CELLS)
            rows.append((row["label"], cfg, counts))
    return rows


# ---------------------------------------------------------------------- rules
def map_memory(depth: int, width: int, target: str = "ecp5") -> tuple[str, int]:
    """How Yosys maps one ``depth x width`` memory: ``("bram", blocks)`` or
    ``("lutram", cells)`` (module docstring)."""
    blocks = blocks_for(BRAM_SHAPES[target], depth, width)
    ld, lw = LUTRAM_SHAPE[target]
    cells = math.ceil(depth / ld) * math.ceil(width / lw)
    if cells * LUTRAM_COST[target] < blocks * BRAM_COST[target]:
        return "lutram", cells
    return "bram", blocks


def _counted(cfg: HwConfig, target: str) -> dict[str, int]:
    from hw.top import memories

    brams = lutrams = 0
    for mem in memories(cfg):
        kind, n = map_memory(mem.depth, mem.width, target)
        if kind == "bram":
            brams += n
        else:
            lutrams += n
    lanes = cfg.batch * cfg.block_out
    macs = cfg.batch * cfg.block_in * cfg.block_out
    return {"dsps": macs - cfg.gemm.lut_macs + lanes, "brams": brams, "lutrams": lutrams}


# ---------------------------------------------------------------------- the fit
FEATURES: dict[str, tuple[str, ...]] = {
    "luts": ("one", "macs", "tree", "lanes", "postproc_lanes", "postproc_beat", "acc_index",
             "index_bits", "beat_bits", "lanes_beat", "wide_bits", "rotation_bits",
             "lut_macs", "lut_share"),
    "carries": ("one", "macs", "tree", "lanes", "postproc_lanes", "postproc_beat",
                "acc_index", "index_bits", "beat_bits", "lanes_beat", "wide_bits",
                "rotation_bits", "lut_macs", "lut_share"),
    "ffs": ("one", "macs", "wgt_bits", "lanes", "postproc_lanes", "postproc_beat",
            "reset_lanes", "lanes_index", "acc_index", "beat_bits", "log_outstanding",
            "rotation_bits", "lut_macs", "lut_share"),
}
"""The terms of each fitted function (:func:`features`), chosen by forward selection on the
error of the fitted rows left out in turn (``benchmarks/area_model.py`` prints it); the
carry cells take the LUTs' terms. ``lut_macs`` and ``lut_share`` came with the LUT
multipliers and their samples (the ``lutmac`` rows): with ``lut_macs`` alone the rows left
out in turn were at worst 8.1% off in LUTs and the held-out ones 10.4%; with both 7.2% and
6.5%."""


def features(cfg: HwConfig) -> dict[str, float]:
    """The config's terms of the fitted functions, with ``lanes = batch * block_out`` (the ALU
    lanes, accumulator words and store lanes) and ``beat`` the DRAM beat in bits:

    - ``macs``, ``tree``: the GEMM array's multipliers, and its adder trees
      (``macs * log2(block_in)``); ``wgt_bits``: a weight tile's bits (operand registers);
    - ``lanes``; ``postproc_lanes``, ``reset_lanes``: lanes of the post-processing store and
      of the GEMM's reset from acc, where on; ``postproc_beat``: the store's narrowing onto
      the beat, where on; ``lanes_beat``: ``lanes * beat / 64``;
    - ``beat_bits``: the DRAM data path of the load, store and arbiter;
      ``log_outstanding``: ``log2`` of the requests in flight (the arbiter's table);
    - ``rotation_bits``: the buffers' lane rotation, per buffer ``lanes * elem_bits *
      log2(lanes)`` (a beat's elements rotated onto their banks); ``wide_bits``: the bits of
      elements wider than a beat (assembled from several beats);
    - ``index_bits``: the buffers' address widths summed (loop counters, index adders);
      ``acc_index``: the acc buffer's alone; ``lanes_index``: ``lanes * acc_index``;
    - ``lut_macs``: the MACs that multiply in LUTs (``gemm.lut_macs``: Booth rows, their
      adders and registers); ``lut_share``: ``lut_macs`` times their share of the array's
      MACs (an array wholly in LUTs costs Yosys less per MAC than one partly in LUTs: an
      empirical term, fitted to the ``lutmac`` rows).
    """
    from hw.params import RtlParams

    p = RtlParams.of(cfg)
    lanes = cfg.batch * cfg.block_out
    macs = cfg.batch * cfg.block_in * cfg.block_out
    beat = cfg.dram.bytes_per_cycle * 8
    geoms = p.buffers.values()
    return {
        "one": 1.0,
        "macs": float(macs),
        "tree": macs * math.log2(cfg.block_in),
        "wgt_bits": float(cfg.block_in * cfg.block_out * cfg.precision.wgt_bits),
        "lanes": float(lanes),
        "postproc_lanes": float(lanes * cfg.store.postproc),
        "reset_lanes": float(lanes * cfg.gemm.reset_from_acc),
        "postproc_beat": float(beat * cfg.store.postproc),
        "lanes_beat": lanes * beat / 64,
        "beat_bits": float(beat),
        "log_outstanding": math.log2(cfg.dram.max_outstanding),
        "rotation_bits": float(sum(g.lanes * g.elem_bits * max(0, g.lanes.bit_length() - 1)
                                   for g in geoms)),
        "wide_bits": float(sum(g.elem_bits for g in geoms if g.beats_per_elem > 1)),
        "index_bits": float(cfg.uop_index_bits + cfg.inp_index_bits + cfg.wgt_index_bits
                            + cfg.acc_index_bits),
        "acc_index": float(cfg.acc_index_bits),
        "lanes_index": float(lanes * cfg.acc_index_bits),
        "lut_macs": float(cfg.gemm.lut_macs),
        "lut_share": cfg.gemm.lut_macs ** 2 / macs,
    }


@dataclass(frozen=True)
class AreaEstimate:
    """Predicted resources of one config on one target, in synthesis-report units."""

    config: str
    target: str
    luts: int
    ffs: int
    dsps: int
    brams: int
    lutrams: int
    carries: int

    @property
    def lut_positions(self) -> int:
        """The part's LUTs the design takes: LUTs, carry cells and distributed RAM
        (:data:`LUT_POSITIONS`)."""
        weights = LUT_POSITIONS[self.target]
        return sum(w * getattr(self, k) for k, w in weights.items())


def budget_use(est: AreaEstimate, device: FpgaDevice) -> dict[str, tuple[int, int]]:
    """``{resource: (used, available)}`` of ``est`` on ``device``: LUT positions against the
    part's LUTs less :data:`PACKING_MARGIN`, flip-flops, DSP and block-RAM cells.

    Raises
    ------
    ValueError
        The estimate is for another family than the part's.
    """
    if est.target != device.family:
        raise ValueError(f"an {est.target} estimate cannot be held to {device.name}, an "
                         f"{device.family} part")
    return {"luts": (est.lut_positions, int(device.luts * (1 - PACKING_MARGIN))),
            "ffs": (est.ffs, device.ffs), "dsps": (est.dsps, device.dsp.count),
            "brams": (est.brams, device.bram.count)}


def over_budget(est: AreaEstimate, device: FpgaDevice) -> list[str]:
    """The resources ``est`` needs more of than ``device`` has, each as ``"dsps 272 > 72"``
    (empty: it fits)."""
    return [f"{k} {used} > {have}" for k, (used, have) in budget_use(est, device).items()
            if used > have]


@dataclass(frozen=True)
class AreaModel:
    """Coefficients of the fitted functions of one target (in :data:`FEATURES` order)."""

    target: str
    coefficients: dict[str, tuple[float, ...]]
    rows: int

    @classmethod
    def fit(cls, rows: list[tuple[str, HwConfig, dict[str, int]]], target: str) -> AreaModel:
        """Least squares of each fitted resource over ``rows``."""
        import numpy as np

        terms = max(len(t) for t in FEATURES.values())
        if len(rows) <= terms:
            raise ValueError(f"area model for {target}: {len(rows)} rows cannot fit "
                             f"{terms} terms")
        table = [features(cfg) for _, cfg, _ in rows]
        coefficients = {}
        for key, names in FEATURES.items():
            x = np.array([[f[n] for n in names] for f in table])
            y = np.array([counts[key] for _, _, counts in rows], dtype=float)
            coef, *_ = np.linalg.lstsq(x, y, rcond=None)
            coefficients[key] = tuple(float(c) for c in coef)
        return cls(target, coefficients, len(rows))

    def predict(self, cfg: HwConfig) -> AreaEstimate:
        f = features(cfg)
        fitted = {key: max(0, round(sum(c * f[name] for c, name in
                                        zip(coef, FEATURES[key], strict=True))))
                  for key, coef in self.coefficients.items()}
        return AreaEstimate(config=cfg.name, target=self.target, **fitted,
                            **_counted(cfg, self.target))


@functools.lru_cache(maxsize=4)
def model(target: str = "ecp5") -> AreaModel:
    """The model of ``target`` fitted to its committed data.

    Raises
    ------
    ValueError
        No fitting data for ``target``.
    """
    path = data_path(target)
    if target not in BRAM_SHAPES or not path.exists():
        have = sorted(p.stem for p in path.parent.glob("*.csv"))
        raise ValueError(f"area model: no fitting data for target {target!r}; have "
                         f"{', '.join(have) or 'none'}")
    return AreaModel.fit(fit_rows(load_rows(path)), target)


def fit_rows(rows: list[tuple[str, HwConfig, dict[str, int]]]
             ) -> list[tuple[str, HwConfig, dict[str, int]]]:
    """The rows the model is fitted to: all but those labelled ``heldout...``."""
    return [r for r in rows if not r[0].startswith(HELD_OUT)]


def estimate(cfg: HwConfig, target: str = "ecp5") -> AreaEstimate:
    """Predicted resources of ``cfg`` on ``target``; a sweep's ``area.estimator``
    (``accel.dse.area_model:estimate``)."""
    return model(target).predict(cfg)


def cross_validate(rows: list[tuple[str, HwConfig, dict[str, int]]], target: str
                   ) -> list[tuple[str, dict[str, int], AreaEstimate]]:
    """Each row predicted by a model fitted to the other rows: ``(label, measured,
    predicted)``."""
    out = []
    for i, (label, cfg, counts) in enumerate(rows):
        fit = AreaModel.fit(rows[:i] + rows[i + 1:], target)
        out.append((label, counts, fit.predict(cfg)))
    return out
