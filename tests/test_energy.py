"""The energy model: the table (validation, SRAM fit, scaling), action counts (by hand, fsim
against sim, against the timing model's own DRAM channel), and a hand-made program's energy
computed by hand from the table file and the counts."""

from __future__ import annotations

import copy
import math
import re
from pathlib import Path

import numpy as np
import pytest
import yaml

import accel
from accel.machine.actions import ActionCounts
from accel.machine.builder import ProgramBuilder
from accel.machine.config import ConfigError, HwConfig, load_config
from accel.machine.dram import Dram
from accel.machine.energy import COMPONENTS, EnergyReport, action_energies, estimate, sram_kb
from accel.machine.energy_table import (
    ALU_OPS,
    EnergyError,
    default_energy_table,
    energy_dir,
    load_energy_table,
    shipped_energy_tables,
)
from accel.machine.isa import AluOp, MemType
from accel.machine.program import Program
from accel.testing.randprog import numpy_pick, random_program

TABLE = yaml.safe_load((energy_dir() / "45nm.yaml").read_text())
"""The shipped table as the file says it, for computing energies by hand."""


def write(tmp_path: Path, text: str, name: str = "cfg.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# ---------------------------------------------------------------------- the table
def test_shipped_table_and_names_unchanged(cfg: HwConfig) -> None:
    assert shipped_energy_tables() == ["45nm"]
    assert cfg.energy == default_energy_table() == load_energy_table("45nm")
    assert tuple(op.name for op in AluOp) == ALU_OPS
    # Another table changes neither the config's name nor its equality (programs and caches
    # are keyed by both), and does not show in to_dict unless it is not the default.
    other = cfg.replace(energy={"technology": {"node_nm": 28}})
    assert other.name == cfg.name == "1x8x8_i8w8a32_u8k_i32k_w64k_a32k_o8_rr_pp_ra"
    assert other == cfg and hash(other) == hash(cfg)
    assert "energy" not in cfg.to_dict()
    assert other.to_dict()["energy"]["technology"]["node_nm"] == 28
    assert HwConfig.from_dict(other.to_dict()).energy == other.energy
    assert other.replace(**{"buffers.wgt": 32768}).energy == other.energy


def test_sram_fit_reproduces_the_published_points() -> None:
    """pJ per bit = a * rows ** b, least squares in log-log over Horowitz's three reads."""
    model = default_energy_table().sram
    points = [(p["kb"], p["bits"], p["pj"]) for p in TABLE["sram"]["fit"]]
    rows = [kb * 8192 / bits for kb, bits, _ in points]
    b, log_a = np.polyfit(np.log(rows), np.log([pj / bits for _, bits, pj in points]), 1)
    assert model.fit == pytest.approx((math.exp(log_a), b))
    assert model.fit == pytest.approx((0.005998, 0.4726), rel=1e-3)
    for kb, bits, pj in points:
        assert model.access_pj(int(kb * 1024), bits) == pytest.approx(pj, rel=0.025)
    # A wide buffer costs per bit what an array of its rows does: 64 KB of 512-bit tiles has
    # the 1024 rows of an 8 KB array of 64-bit words.
    assert model.access_pj(65536, 512) == pytest.approx(8 * model.access_pj(8192, 64))
    assert model.access_pj(8192, 64, write=True) == model.access_pj(8192, 64)


def test_technology_scaling(cfg: HwConfig) -> None:
    base = action_energies(cfg)
    scaled = action_energies(cfg.replace(energy={"technology": {"node_nm": 28, "vdd": 0.8}}))
    dynamic = (28 / 45) * (0.8 / 0.9) ** 2
    assert scaled.mac == pytest.approx(base.mac * dynamic)
    assert scaled.read["wgt"] == pytest.approx(base.read["wgt"] * dynamic)
    assert scaled.active["compute"] == pytest.approx(base.active["compute"] * dynamic)
    assert scaled.leakage == pytest.approx(base.leakage * (28 / 45) * (0.8 / 0.9))
    assert scaled.dram_byte == base.dram_byte == 243.75        # the DRAM device's, unscaled


def test_mac_energy_at_the_configured_precisions() -> None:
    t = default_energy_table()
    assert t.mac_pj(8, 8, 32) == pytest.approx(0.2 + 0.1)
    # A power law through the two published points of each operator.
    assert t.mult.pj(16) == pytest.approx(0.2 * (16 / 8) ** math.log(3.1 / 0.2, 4))
    assert t.add.pj(16) == pytest.approx(0.03 * 2 ** math.log(0.1 / 0.03, 4))


ENERGY_REJECTIONS = [
    ("energy: {sram: {write_factor: -1}}\n",
     "energy.sram.write_factor: expected a positive number, got int -1"),
    ("energy: {sram: {leak: 1}}\n",
     "energy.sram.leak: unknown key; expected one of fit, write_factor, leakage_uw_per_kb"),
    ("energy: {sram: {fit: [{kb: 8, bits: 64, pj: 10}]}}\n",
     "energy.sram.fit: expected a list of at least two points {kb, bits, pj}, got list "
     "[{'kb': 8, 'bits': 64, 'pj': 10}]"),
    ("energy: {sram: {fit: [{kb: 8, bits: 64, pj: 10}, {kb: 16, bits: 128, pj: 20}]}}\n",
     "energy.sram.fit: expected points of at least two different depths (KB * 8192 / bits "
     "rows) to fit, got list"),
    ("energy: {sram: {fit: [{kb: 8, bits: 64}, {kb: 32, bits: 64, pj: 20}]}}\n",
     "energy.sram.fit[0].pj: missing"),
    ("energy: {technology: {node_nm: 0}}\n",
     "energy.technology.node_nm: expected a positive number, got int 0"),
    ("energy: {alu_pj: {DIV: 1.0}}\n",
     "energy.alu_pj.DIV: unknown key; expected one of MIN, MAX, ADD, SHR, MUL"),
    ("energy: {mac: {mult_pj: {eight: 0.2}}}\n",
     "energy.mac.mult_pj.eight: expected a positive whole number of bits as the key, got str "
     "'eight'"),
    ("energy: {modules: {compute: {active_pj_per_cycle: true}}}\n",
     "energy.modules.compute.active_pj_per_cycle: expected a non-negative number, got bool "
     "True"),
    ("energy: {dram: [243]}\n",
     "energy.dram: expected a mapping with keys pj_per_byte, pj_per_transaction, got list "
     "[243]"),
    ("energy: {wires: {}}\n",
     "energy.wires: unknown key; expected one of description, technology, mac, alu_pj, sram, "
     "dram, control, modules"),
    ("energy: 7\n",
     "energy: expected a shipped energy table name, a YAML path or a mapping, got int 7"),
]


@pytest.mark.parametrize(("text", "message"), ENERGY_REJECTIONS)
def test_energy_section_rejections(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path, "core: {batch: 1, block_in: 8, block_out: 8}\n" + text)
    with pytest.raises(ConfigError, match="^" + re.escape(f"{path}: {message}")):
        load_config(path)


def test_energy_table_files(tmp_path: Path) -> None:
    table = write(tmp_path, "description: cheap DRAM\ndram: {pj_per_byte: 20}\n", "t.yaml")
    cfg = load_config(write(tmp_path, "core: {batch: 1, block_in: 8, block_out: 8}\n"
                                      "energy: t.yaml\n"))       # relative to the config
    assert cfg.energy.dram.pj_per_byte == 20.0
    assert cfg.energy.description == "cheap DRAM"
    assert cfg.energy.sram == default_energy_table().sram          # the rest: the default's
    assert cfg.energy.source == str(table)
    missing = write(tmp_path, "core: {batch: 1, block_in: 8, block_out: 8}\nenergy: no.yaml\n",
                    "m.yaml")
    with pytest.raises(ConfigError, match="^" + re.escape(
            f"{tmp_path / 'no.yaml'}: no such energy table file") + "$"):
        load_config(missing)
    with pytest.raises(EnergyError, match="^" + re.escape(
            "7nm: no such shipped energy table; expected one of 45nm or a path to a .yaml "
            "file") + "$"):
        load_energy_table("7nm")
    bad = write(tmp_path, "dram: {pj_per_byte: [\n", "bad.yaml")
    with pytest.raises(EnergyError, match="^" + re.escape(f"{bad}:2:1: malformed YAML: ")):
        load_energy_table(bad)
    wrong = write(tmp_path, "control: {decode_pj: -2}\n", "wrong.yaml")
    with pytest.raises(EnergyError, match="^" + re.escape(
            f"{wrong}: control.decode_pj: expected a non-negative number, got int -2") + "$"):
        load_energy_table(wrong)


# ---------------------------------------------------------------------- counts
def hand_program(tiny: HwConfig, options: bool = False) -> tuple[Program, Dram]:
    """Loads with padding, a reset GEMM, a GEMM with an outer loop, ALU ADD (immediate) and
    MAX (acc operand), a store: counted by hand in :data:`HAND_COUNTS`. With ``options``
    (``tiny`` must have ``store.postproc`` and ``gemm.reset_from_acc``) the reset copies acc
    and a STORE ACC of the same four tiles follows the STORE OUT."""
    rng = np.random.default_rng(3)
    b = ProgramBuilder(tiny)
    ia = b.tensor("inp", rng.integers(-128, 128, (4, 1, 4), dtype=np.int8))
    wa = b.tensor("wgt", rng.integers(-128, 128, (2, 4, 4), dtype=np.int8))
    oa = b.buffer("out", 4 * 4, 4)
    b.uops([(0, 0, 0), (1, 1, 1)])
    b.load(MemType.UOP, sram_base=0, dram_base=b.uop_base, x_size=2, x_stride=2)
    b.load(MemType.INP, sram_base=0, dram_base=ia, y_size=2, x_size=2, x_stride=2, x_pad_0=1)
    b.load(MemType.WGT, sram_base=0, dram_base=wa, x_size=2, x_stride=2, push_next=True)
    b.gemm(uop_bgn=0, uop_end=2, reset=True, pop_prev=True, **({"from_acc": True} if options
                                                              else {}))
    b.gemm(uop_bgn=0, uop_end=2, iter_out=2, dst_factor_out=2, src_factor_out=3)
    b.alu(AluOp.ADD, uop_bgn=0, uop_end=2, use_imm=True, imm=1)
    b.alu(AluOp.MAX, uop_bgn=0, uop_end=1, push_next=True)
    b.store(sram_base=0, dram_base=oa, x_size=4, x_stride=4, pop_prev=True,
            push_prev=not options)
    if options:
        b.store(MemType.ACC, sram_base=0, dram_base=oa, x_size=4, x_stride=4, shift=2,
                clip_lo=-128, clip_hi=127, push_prev=True)
    b.finish(pop_next=True)
    return b.build()


# tiny: 1x4x4, 8 bytes a beat, 64-byte bursts (4 instructions a fetch), 4-byte micro-ops.
HAND_COUNTS = ActionCounts(
    macs=4 * 16, gemm_uops=4, gemm_reset_uops=2,
    alu_uops={"MIN": 0, "MAX": 1, "ADD": 2, "SHR": 0, "MUL": 0},
    # uop: 2 + 4 + 2 + 1 micro-ops; acc: GEMM 4, ADD (immediate) 2, MAX 1 x 2 operands.
    reads={"insn": 9, "uop": 9, "inp": 4, "wgt": 4, "acc": 8, "out": 4, "acc_copy": 0},
    # inp: 2 rows x (1 pad + 2) columns; acc and out: every micro-op, resets included.
    writes={"insn": 9, "uop": 2, "inp": 6, "wgt": 2, "acc": 9, "out": 9, "acc_copy": 0},
    insns=9,
    cmd_pushes={"load": 2, "compute": 6, "store": 1},
    cmd_pops={"load": 2, "compute": 6, "store": 1},
    token_pushes={"l2c": 1, "c2l": 0, "c2s": 1, "s2c": 1},
    token_pops={"l2c": 1, "c2l": 0, "c2s": 1, "s2c": 1},
    # fetch 4 + 4 + 1 instructions (3 reads, 144 B, 18 beats); uop 8 B; inp 2 rows of 8 B;
    # wgt 32 B (4 beats); store 16 B (2 beats).
    dram_read_bytes=144 + 8 + 16 + 32, dram_write_bytes=16,
    dram_read_txns=3 + 1 + 2 + 1, dram_write_txns=1, dram_beats=18 + 1 + 2 + 4 + 2,
)


def test_hand_program_counts(tiny: HwConfig) -> None:
    program, dram = hand_program(tiny)
    fsim = accel.run_program(program, dram.copy(), backend="fsim").stats
    sim = accel.run_program(program, dram.copy(), backend="sim").stats
    assert fsim.actions == HAND_COUNTS
    assert sim.actions == HAND_COUNTS
    assert HAND_COUNTS.uops == 9
    assert HAND_COUNTS.read_bytes(tiny) == {"insn": 144, "uop": 36, "inp": 16, "wgt": 64,
                                            "acc": 128, "out": 16, "acc_copy": 0}
    assert ActionCounts.from_dict(HAND_COUNTS.to_dict()) == HAND_COUNTS


def test_hand_program_counts_postproc_and_reset_from_acc(tiny: HwConfig) -> None:
    """With ``store.postproc`` every acc write also writes the store's copy and a STORE ACC
    reads the copy, not out; a GEMM reset from acc reads its source: the hand program with
    its reset copying acc and a STORE ACC of the same four tiles after its STORE OUT."""
    cfg = tiny.replace(**{"store.postproc": True, "gemm.reset_from_acc": True})
    program, dram = hand_program(cfg, options=True)
    want = copy.deepcopy(HAND_COUNTS)
    want.reads["acc"] += 2              # the reset's two micro-ops read their source
    want.reads["acc_copy"] = 4          # STORE ACC: four tiles from the copy
    want.writes["acc_copy"] = 9         # every acc write (GEMM, reset, ALU)
    want.insns = want.reads["insn"] = 10
    want.cmd_pushes["store"] = want.cmd_pops["store"] = 2
    want.writes["insn"] = 10
    # fetch 4 + 4 + 2 instructions (160 B, 20 beats); the second store 16 B (2 beats)
    want.dram_read_bytes += 16
    want.dram_beats += 2 + 2
    want.dram_write_bytes += 16
    want.dram_write_txns += 1
    for backend in ("fsim", "sim"):
        assert accel.run_program(program, dram.copy(), backend=backend).stats.actions == want


def sram_pj(size: int, bits: int) -> float:
    """One access, by hand from the table file: pJ per bit = a * rows ** b through its
    points."""
    points = TABLE["sram"]["fit"]
    b, log_a = np.polyfit([math.log(p["kb"] * 8192 / p["bits"]) for p in points],
                          [math.log(p["pj"] / p["bits"]) for p in points], 1)
    return bits * math.exp(log_a) * (size * 8 / bits) ** b


def test_hand_program_energy(tiny: HwConfig) -> None:
    """Every component of the hand-made program's energy, from the table file and the
    counts."""
    program, dram = hand_program(tiny)
    stats = accel.run_program(program, dram, backend="sim").stats
    active = {m: s.active for m, s in stats.modules.items()}
    report = estimate(stats.actions, tiny, stats.cycles, active)
    # tiny's SRAMs: (bytes, bits a access). uop: 256 words of 22 bits; inp 256 x 4 B,
    # wgt 128 x 16 B, acc 128 x 16 B, out 128 x 4 B; the instruction buffer 4 x 16 B; each
    # command queue 16 x 16 B.
    shape = {"uop": (704, 22), "inp": (1024, 32), "wgt": (2048, 128), "acc": (2048, 128),
             "out": (512, 32), "insn": (64, 128), "cmd": (256, 128)}
    e = {k: sram_pj(*v) for k, v in shape.items()}
    c = HAND_COUNTS
    t = TABLE
    want = {
        "mac": 64 * (t["mac"]["mult_pj"][8] + t["mac"]["add_pj"][32]),
        "alu": 4 * (2 * t["alu_pj"]["ADD"] + 1 * t["alu_pj"]["MAX"]),      # 4 lanes
        **{b: (c.reads[b] + c.writes[b]) * e[b] for b in ("uop", "inp", "wgt", "acc", "out")},
        "dram": (200 + 16) * t["dram"]["pj_per_byte"],
        "control": (9 * t["control"]["decode_pj"] + (9 + 9) * e["insn"] + (9 + 9) * e["cmd"]
                    + (3 + 3) * t["control"]["token_pj"] + 9 * t["control"]["uop_pj"]
                    + sum(active[m] * t["modules"][m]["active_pj_per_cycle"] for m in active)),
        "leakage": stats.cycles * (
            t["sram"]["leakage_uw_per_kb"] * (704 + 1024 + 2048 + 2048 + 512 + 64 + 3 * 256)
            / 1024 + sum(m["leakage_uw"] for m in t["modules"].values())) / 100.0,
    }
    assert list(report.components) == list(COMPONENTS)
    assert report.components == pytest.approx(want, rel=1e-12)
    assert sram_kb(tiny) == pytest.approx((704 + 1024 + 2048 + 2048 + 512 + 64 + 768) / 1024)
    total = sum(want.values())
    assert report.total_uj == pytest.approx(total * 1e-6)
    assert report.pj_per_mac == pytest.approx(total / 64)
    assert report.tops_per_w == pytest.approx(2 * 64 / (total * 1e-12) / 1e12)
    assert report.power_mw == pytest.approx(total * 1e-12 / (stats.cycles / 100e6) * 1e3)
    both = EnergyReport.total([report, report])
    assert both is not None and both.total_pj == pytest.approx(2 * total)
    assert both.pj_per_mac == pytest.approx(report.pj_per_mac)
    assert EnergyReport.total([]) is None


def test_active_cycles_are_the_instructions_spans(tiny: HwConfig) -> None:
    program, dram = hand_program(tiny)
    stats = accel.run_program(program, dram, backend="sim").stats
    for module in ("load", "compute", "store"):
        spans = sum(s.end - s.start for s in stats.timeline if s.module == module)
        assert stats.modules[module].active == spans > 0
    assert 0 < stats.modules["fetch"].active <= stats.cycles


def check_counts(program: Program, dram: Dram) -> None:
    """fsim's and sim's counts are equal, and the timing model's DRAM channel moved what the
    counts say."""
    fsim = accel.run_program(program, dram.copy(), backend="fsim").stats
    sim = accel.run_program(program, dram.copy(), backend="sim").stats
    a = sim.actions
    assert fsim.actions == a
    assert a.dram_read_bytes + a.dram_write_bytes == sim.dram_bytes
    assert a.dram_write_bytes == sim.dram_write_bytes
    assert a.dram_read_txns + a.dram_write_txns == sim.dram_transactions
    assert a.dram_beats == sim.dram_busy
    assert a.macs == sim.macs == fsim.macs
    assert a.gemm_uops == fsim.gemm_uops
    assert sum(a.alu_uops.values()) == fsim.alu_uops
    assert a.insns == len(program.insns) == sum(a.cmd_pops.values())


@pytest.mark.parametrize("name", ["tiny", "default", "vta_1x16x16"])
def test_counts_equal_fsim_and_sim_on_random_programs(name: str) -> None:
    cfg = load_config(name)
    for seed in range(4):
        check_counts(*random_program(cfg, numpy_pick(np.random.default_rng(seed))))
    wide = cfg.replace(**{"dram.bytes_per_cycle": 32, "dram.max_burst": 128})
    check_counts(*random_program(wide, numpy_pick(np.random.default_rng(9))))


def test_counts_equal_fsim_and_sim_on_a_compiled_layer(cfg: HwConfig) -> None:
    from test_energy_rtl import conv_layer

    program, image = conv_layer(cfg)
    check_counts(program, image)
    stats = accel.run_program(program, image, backend="sim").stats
    assert stats.actions.macs == 16 * 16 * 8 * 8 * 3 * 3      # the layer's MACs, no padding


# ---------------------------------------------------------------------- command line
def test_config_show_lists_the_energies(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from accel.cli import main

    assert main(["config", "show", "tiny", "--json"]) == 0
    energy = json.loads(capsys.readouterr().out)["energy"]
    want = action_energies(load_config("tiny"))
    assert energy["table"] == str(energy_dir() / "45nm.yaml") and energy["node_nm"] == 45
    assert energy["pj"]["read"]["wgt"] == pytest.approx(want.read["wgt"], abs=1e-4)
    assert energy["pj"]["mac"] == pytest.approx(0.3)
    assert energy["sram_kb"] == pytest.approx(sram_kb(load_config("tiny")), abs=1e-3)


def test_config_validate_rejects_a_bad_table_in_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from accel.cli import main

    path = write(tmp_path, "core: {batch: 1, block_in: 8, block_out: 8}\n"
                           "energy: {dram: {pj_per_byte: -5}}\n")
    assert main(["config", "validate", str(path)]) == 2
    assert capsys.readouterr().err == (
        f"accel: error: {path}: energy.dram.pj_per_byte: expected a non-negative number, "
        "got int -5\n")


def test_a_program_file_does_not_carry_the_table(tiny: HwConfig) -> None:
    """Programs do not depend on the energy table, and neither do their files' bytes."""
    program, _ = hand_program(tiny)
    other, _ = hand_program(tiny.replace(energy={"dram": {"pj_per_byte": 1.0}}))
    assert other.config.energy != program.config.energy
    assert other.to_bytes() == program.to_bytes()
    assert Program.from_bytes(other.to_bytes()).config == tiny
