"""Energy in the reports: operators' ``Report``, networks' ``RunReport`` (``accel run`` is in
tests/test_run_cli.py), sweep rows; and a table that changes the energy and nothing else."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

import accel
from accel.dse import load_spec, read_results, run_sweep
from accel.machine.config import HwConfig
from accel.machine.energy import COMPONENTS, estimate
from compiler.ops.compiled import compile_conv2d, pack_conv2d_args
from compiler.ops.conv2d import Conv2dWorkload

LAYER = Conv2dWorkload(1, 8, 6, 6, 8, 3, 3, 1, 1, 1, 1, False, 0, False)
SWEPT = Conv2dWorkload(1, 8, 6, 6, 8, 3, 3, 1, 1, 1, 1, True, 8, True)
"""The sweep's conv2d item below (with the spec's defaults: bias, shift 8, ReLU)."""


def layer_args(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    return (rng.integers(-128, 128, (1, 8, 6, 6), dtype=np.int8),
            rng.integers(-128, 128, (8, 8, 3, 3), dtype=np.int8))


def test_operator_report_energy(tiny: HwConfig, rng: np.random.Generator) -> None:
    x, w = layer_args(rng)
    _, report = accel.conv2d(x, w, padding=1, config=tiny, backend="sim")
    op = compile_conv2d(LAYER, tiny)
    stats = accel.run_program(op.program, op.dram(**pack_conv2d_args(op, x, w, None)),
                              backend="sim").stats
    want = estimate(stats.actions, tiny, stats.cycles,
                    {m: s.active for m, s in stats.modules.items()})
    assert report.energy == want
    d = report.to_dict()["energy"]
    assert d["total_uj"] == pytest.approx(want.total_uj)
    assert list(d["components_uj"]) == list(COMPONENTS)
    _, functional = accel.conv2d(x, w, padding=1, config=tiny, backend="fsim")
    assert functional.energy is None and functional.to_dict()["energy"] is None


def test_another_table_changes_the_energy_and_nothing_else(tiny: HwConfig,
                                                           rng: np.random.Generator) -> None:
    """A 28 nm table: the same program (the compile cache is keyed by the config's name, which
    the table does not change), the same cycles and counts, every on-chip energy scaled."""
    x, w = layer_args(rng)
    scaled = tiny.replace(energy={"technology": {"node_nm": 28}})
    y0, r0 = accel.conv2d(x, w, padding=1, config=tiny, backend="sim")
    y1, r1 = accel.conv2d(x, w, padding=1, config=scaled, backend="sim")
    assert compile_conv2d(LAYER, scaled) is compile_conv2d(LAYER, tiny)
    np.testing.assert_array_equal(y0, y1)
    assert r1.cycles == r0.cycles and r1.insn_counts == r0.insn_counts
    for c in COMPONENTS:
        factor = 1.0 if c == "dram" else 28 / 45
        assert r1.energy.components[c] == pytest.approx(r0.energy.components[c] * factor), c


def test_network_report_energy(cfg: HwConfig) -> None:
    exe = accel.compile("resnet18", config=cfg, image_size=32)
    x, _ = accel.sample_inputs(exe.graph, 0)
    _, report = exe.run(x, backend="sim")
    t = report.totals()
    layers = [layer for layer in report.layers if layer.target == "accel"]
    assert t["energy_uj"] == pytest.approx(sum(layer.energy_uj for layer in layers))
    for c in COMPONENTS:
        assert t["energy_components_uj"][c] == pytest.approx(
            sum(layer.energy[c] for layer in layers))
    conv = next(layer for layer in layers if layer.op == "conv2d")
    assert conv.pj_per_mac == pytest.approx(conv.energy_uj * 1e6 / conv.macs)
    _, functional = exe.run(x, backend="fsim")
    assert functional.totals()["energy_uj"] is None
    assert all(layer.energy_uj is None for layer in functional.layers)


def sweep(folder: Path, base: str, backend: str = "sim") -> list[dict[str, Any]]:
    """One small conv2d point on ``base`` with the energy metric; its rows."""
    folder.mkdir(exist_ok=True)
    spec = load_spec(write(folder / f"{backend}.yaml", f"""\
base: {base}
backend: {backend}
workloads:
  - conv2d: {{name: a, in_channels: 8, size: 6, out_channels: 8, kernel: 3, padding: 1}}
metrics: [cycles, energy]
"""))
    run_sweep(spec, folder / f"out-{backend}", workers=1, quiet=True)
    return read_results(folder / f"out-{backend}")


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_sweep_energy_columns(tmp_path: Path, tiny: HwConfig) -> None:
    (row,) = sweep(tmp_path, "tiny")
    assert row["status"] == "ok"
    op = compile_conv2d(SWEPT, tiny)
    stats = accel.run_program(op.program, op.dram(), backend="sim").stats
    want = estimate(stats.actions, tiny, stats.cycles,
                    {m: s.active for m, s in stats.modules.items()})
    assert row["energy_uj"] == pytest.approx(want.total_uj, rel=1e-12)
    for c in COMPONENTS:
        assert row[f"energy.{c}"] == pytest.approx(want.components[c] * 1e-6, rel=1e-12)
    assert row["pj_per_mac"] == pytest.approx(row["energy_uj"] * 1e6 / row["macs"])
    assert row["tops_per_w"] == pytest.approx(2 * row["macs"] / (row["energy_uj"] * 1e-6)
                                              / 1e12)
    assert row["power_mw"] == pytest.approx(row["energy_uj"] / row["milliseconds"])
    (functional,) = sweep(tmp_path, "tiny", "fsim")
    assert functional["status"] == "ok" and functional["energy_uj"] is None


def test_sweep_of_a_base_with_its_own_table(tmp_path: Path, tiny: HwConfig) -> None:
    """A base config naming a table: its energies in the rows, and a spec digest of its own
    (the rows differ), while the config's name stays."""
    base = write(tmp_path / "free_dram.yaml", yaml.safe_dump(
        {**tiny.to_dict(), "energy": {"dram": {"pj_per_byte": 0}}}))
    (row,) = sweep(tmp_path / "free", str(base))
    (plain,) = sweep(tmp_path / "plain", "tiny")
    assert row["config_name"] == plain["config_name"] == tiny.name
    assert row["energy.dram"] == 0.0 and plain["energy.dram"] > 0
    assert row["energy.mac"] == plain["energy.mac"]
    assert row["energy_uj"] == pytest.approx(plain["energy_uj"] - plain["energy.dram"])
    assert (load_spec(tmp_path / "free" / "sim.yaml").digest
            != load_spec(tmp_path / "plain" / "sim.yaml").digest)


def test_plot_command_prints_the_energy_delay_front(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    from accel.cli import main
    from accel.plots import energy_front

    spec = load_spec(write(tmp_path / "two.yaml", """\
base: tiny
axes:
  core.block_in+core.block_out: [[4, 4], [8, 8]]
  dram.bytes_per_cycle: [8, 16]
workloads:
  - conv2d: {name: a, in_channels: 16, size: 8, out_channels: 16, kernel: 3}
metrics: [cycles, energy]
"""))
    run_sweep(spec, tmp_path / "out", workers=1, quiet=True)
    rows = read_results(tmp_path / "out")
    assert main(["plot", str(tmp_path / "out"), "--kind", "energy_delay"]) == 0
    lines = capsys.readouterr().out.splitlines()
    front = energy_front(rows)
    assert lines[2] == "energy-delay Pareto front (energy and cycles of the whole workload):"
    assert lines[3:] == [f"  {k}. {f['label']}: {f['uj']:.1f} uJ, {f['cycles']:,} cycles "
                         f"({f['ms']:.2f} ms)  [{f['config']}]"
                         for k, f in enumerate(front, 1)]
    by = {r["config_name"]: r for r in rows}
    for f in front:                          # nothing beats a front config on both counts
        assert not any(r["energy_uj"] < f["uj"] and r["milliseconds"] < f["ms"]
                       for r in by.values())
        assert f["cycles"] == by[f["config"]]["cycles"]
    assert main(["plot", str(tmp_path / "out"), "--kind", "energy_area"]) == 2
    assert capsys.readouterr().err == (
        f"accel: error: {tmp_path / 'out' / 'results.csv'}: the energy_area plot needs "
        "column(s) area.luts, which the sweep did not record (add 'area' to the spec's "
        "metrics)\n")
