"""accel.plots: every plot kind renders from small results measured on the timing simulator."""

from __future__ import annotations

import importlib.util
import json
import math
import re
import sys
from pathlib import Path
from typing import Any

import matplotlib.image
import pytest

import accel
from accel.plots import (
    PlotError,
    energy_totals,
    pareto_front,
    plot_energy,
    plot_energy_area,
    plot_energy_delay,
    plot_pareto,
    plot_roofline,
    plot_stalls,
    plot_timeline,
    plot_utilization,
)
from compiler.ops.compiled import compile_conv2d
from compiler.ops.conv2d import Conv2dWorkload
from sim.stats import MODULES

_spec = importlib.util.spec_from_file_location(
    "outputs_bench", Path(__file__).resolve().parent.parent / "benchmarks" / "outputs.py")
assert _spec is not None and _spec.loader is not None
_OUTPUTS_BENCH = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = _OUTPUTS_BENCH
_spec.loader.exec_module(_OUTPUTS_BENCH)

LAYERS = {
    "L1": Conv2dWorkload(1, 16, 8, 8, 16, 3, 3, 1, 1, 1, 1, True, 6, True),
    "L2": Conv2dWorkload(1, 16, 8, 8, 32, 1, 1, 2, 2, 0, 0, False, 4, False),
}


def _row(cfg: accel.HwConfig, layer: str, index: int, trace_dir: Path | None) -> dict[str, Any]:
    """One results row in the sweep schema, measured on the timing simulator."""
    wl = LAYERS[layer]
    op = compile_conv2d(wl, cfg)
    result = accel.run_program(op.program, op.dram(), config=cfg, backend="sim",
                               trace=trace_dir is not None)
    st = result.stats
    point_id = f"{index:04x}{layer}"
    row: dict[str, Any] = {
        "point_id": point_id, "point_index": index, "sweep": "plots-test",
        "config_name": cfg.name, "core": f"{cfg.batch}x{cfg.block_in}x{cfg.block_out}",
        "workload": "conv2d", "layer": layer, "backend": "sim", "status": "ok", "error": None,
        "peak_macs_per_cycle": cfg.peak_macs_per_cycle, "clock_mhz": cfg.clock_mhz,
        "dram_bytes_per_cycle": cfg.dram.bytes_per_cycle, "cycles": st.cycles,
        "milliseconds": st.milliseconds, "macs": wl.macs,
        "gemm_utilization": wl.macs / (st.cycles * cfg.peak_macs_per_cycle),
        "dram_bytes": sum(st.dram_loaded.values()) + st.dram_stored,
        "area.target": "ecp5", "area.luts": 1000 * cfg.block_out, "area.dsps": cfg.block_out,
        "area.ffs": None, "area.brams": None,
    }
    energy = result.energy(cfg)
    row.update({"energy_uj": energy.total_uj, "pj_per_mac": energy.total_pj / wl.macs,
                **{f"energy.{c}": v * 1e-6 for c, v in energy.components.items()}})
    for m in MODULES:
        ms = st.modules[m]
        row[f"busy.{m}"] = ms.busy
        for part in ("dram_contention", "dram_latency", "cmd_empty", "queue_full"):
            row[f"stall.{m}.{part}"] = ms.stalls.get(part, 0)
        row[f"stall.{m}.token"] = sum(v for k, v in ms.stalls.items() if k.startswith("token "))
        row[f"stall.{m}.full"] = sum(v for k, v in ms.stalls.items() if k.startswith("full "))
    if trace_dir is not None:
        trace_dir.mkdir(parents=True, exist_ok=True)
        st.write_trace(trace_dir / f"{point_id}.json")
    return row


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[dict[str, Any]], Path]:
    base = accel.load_config("tiny")
    configs = [base, base.replace(**{"dram.bytes_per_cycle": 16}),
               base.replace(**{"buffers.wgt": base.buffers.wgt * 2})]
    folder = tmp_path_factory.mktemp("sweep")
    rows = [_row(cfg, layer, i * len(LAYERS) + j, folder / "traces" if i == 0 else None)
            for i, cfg in enumerate(configs) for j, layer in enumerate(LAYERS)]
    rows.append({**rows[0], "point_id": "bad", "config_name": "", "status": "error",
                 "error": "buffers.wgt: expected a power of two, got 3", "cycles": None,
                 "milliseconds": None, "gemm_utilization": None})
    return rows, folder


def _check_image(paths: list[Path], stem: str) -> None:
    assert [p.name for p in paths] == [f"{stem}.png", f"{stem}.svg"]
    for p in paths:
        assert p.stat().st_size > 2000, p
    height, width = matplotlib.image.imread(paths[0]).shape[:2]
    assert 300 <= width <= 6000 and 200 <= height <= 6000, (width, height)
    assert "<svg" in paths[1].read_text()[:2000]
    assert not list(paths[0].parent.glob(".*tmp*")), "temporary files left behind"


@pytest.mark.parametrize("draw,stem", [(plot_utilization, "utilization"),
                                       (plot_stalls, "stalls"), (plot_roofline, "roofline")])
def test_plot_kinds_render(measured: Any, tmp_path: Path, draw: Any, stem: str) -> None:
    rows, _ = measured
    _check_image(draw(rows, tmp_path), stem)


def test_utilization_heatmap_for_many_configs(measured: Any, tmp_path: Path) -> None:
    rows, _ = measured
    many = [{**r, "config_name": f"{r['config_name']}-{k}"} for k in range(4) for r in rows]
    _check_image(plot_utilization(many, tmp_path), "utilization")


def test_pareto_renders(measured: Any, tmp_path: Path) -> None:
    rows, _ = measured
    _check_image(plot_pareto(rows, tmp_path, area="dsps"), "pareto")
    with pytest.raises(PlotError, match=r"needs column\(s\) area.brams, which the sweep did "
                                        r"not record \(add 'area' to the spec's metrics\)"):
        plot_pareto(rows, tmp_path, area="brams", source="x/results.csv")


def test_energy_kinds_render(measured: Any, tmp_path: Path) -> None:
    rows, _ = measured
    _check_image(plot_energy(rows, tmp_path), "energy")
    _check_image(plot_energy_delay(rows, tmp_path), "energy_delay")
    _check_image(plot_energy_area(rows, tmp_path, area="dsps"), "energy_area")
    svg = (tmp_path / "energy.svg").read_text()
    for label in ("DRAM", "acc buffer", "leakage", "where the energy goes"):
        assert label in svg
    # The front's configs are listed beside the energy-delay plot with their figures (the rows
    # have no axis columns: by their canonical names), the others are not.
    totals = energy_totals(rows)
    names = list(totals)
    front = pareto_front([(totals[c]["ms"], totals[c]["uj"]) for c in names])
    assert 0 < len(front) < len(names)
    svg = (tmp_path / "energy_delay.svg").read_text()
    listed = re.findall(r"<!-- (\d+)  (\S+): (\S+) ms, (\S+) uJ -->", svg)
    assert [(int(k), name) for k, name, _, _ in listed] == [
        (k, names[i]) for k, i in enumerate(front, 1)]
    for (_, name, ms, uj) in listed:
        assert float(ms) == pytest.approx(totals[name]["ms"], rel=1e-3)
        assert float(uj) == pytest.approx(totals[name]["uj"], rel=1e-3)


def test_energy_totals(measured: Any) -> None:
    """Per config, the sum of its rows; a config with a failed row (or one without energy)
    is left out, as its total would be an underestimate."""
    rows, _ = measured
    ok = [r for r in rows if r["status"] == "ok"]
    totals = energy_totals(rows)
    assert list(totals) == list(dict.fromkeys(r["config_name"] for r in ok))
    for c, t in totals.items():
        mine = [r for r in ok if r["config_name"] == c]
        assert t["uj"] == pytest.approx(sum(r["energy_uj"] for r in mine))
        assert t["ms"] == pytest.approx(sum(r["milliseconds"] for r in mine))
        assert sum(t["parts"].values()) == pytest.approx(t["uj"])
        assert t["parts"]["dram"] == pytest.approx(sum(r["energy.dram"] for r in mine))
    failed = [dict(r) for r in rows]
    failed[1].update(status="error", energy_uj=None)
    assert rows[0]["config_name"] not in energy_totals(failed)
    assert len(energy_totals(failed)) == len(totals) - 1


def test_energy_plots_need_the_energy_metric(measured: Any, tmp_path: Path) -> None:
    rows, _ = measured
    without = [{k: v for k, v in r.items() if not k.startswith("energy")} for r in rows]
    for draw, kind in ((plot_energy, "energy"), (plot_energy_delay, "energy_delay")):
        with pytest.raises(PlotError, match="^" + re.escape(
                f"d/results.csv: the {kind} plot needs column(s) energy_uj, which the sweep did "
                "not record (add 'energy' to the spec's metrics)") + "$"):
            draw(without, tmp_path, source="d/results.csv")
    with pytest.raises(PlotError, match="^" + re.escape(
            "d/results.csv: the energy_area plot needs column(s) area.brams, which the sweep "
            "did not record (add 'area' to the spec's metrics)") + "$"):
        plot_energy_area(rows, tmp_path, area="brams", source="d/results.csv")
    assert not list(tmp_path.iterdir()), "a failed plot wrote files"


def test_timeline_renders(measured: Any, tmp_path: Path) -> None:
    _, folder = measured
    trace = sorted((folder / "traces").glob("*.json"))[0]
    _check_image(plot_timeline(trace, tmp_path), "timeline")
    _check_image(plot_timeline(trace, tmp_path / "w", max_cycles=500), "timeline")


def test_timeline_window_must_hold_cycles(measured: Any, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    """A window of 0 or fewer cycles, or one past the end of the run, used to draw an empty
    chart."""
    from accel.cli import main

    _, folder = measured
    trace = sorted((folder / "traces").glob("*.json"))[0]
    for n in (0, -5):
        with pytest.raises(PlotError, match=f"^max_cycles must be at least 1, not {n}$"):
            plot_timeline(trace, tmp_path, max_cycles=n)
        assert main(["plot", str(folder), "--kind", "timeline", "--trace", str(trace),
                     "--max-cycles", str(n), "--out", str(tmp_path)]) == 2
        err = capsys.readouterr().err
        assert err.splitlines()[-1] == f"accel: error: --max-cycles must be at least 1, not {n}"
    assert main(["plot", str(folder), "--kind", "timeline", "--trace", str(trace), "--window",
                 "500:500", "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err == ("accel: error: --window '500:500': the window is empty "
                                       "(LAST must be greater than FIRST)\n")
    with pytest.raises(PlotError, match=r"no activity from cycle 10000000 on: the trace ends "
                                        r"at cycle \d+$"):
        plot_timeline(trace, tmp_path, first_cycle=10_000_000)
    assert not list(tmp_path.iterdir()), "a failed plot wrote files"


def test_timeline_rejects_a_file_that_is_not_a_trace(tmp_path: Path) -> None:
    bad = tmp_path / "t.json"
    bad.write_text("{not json")
    with pytest.raises(PlotError, match=r"t.json: not a Chrome trace written by accel"):
        plot_timeline(bad, tmp_path)
    bad.write_text('{"traceEvents": []}')
    with pytest.raises(PlotError, match="no fetch/load/compute/store slices"):
        plot_timeline(bad, tmp_path)


def test_missing_metric_and_empty_results_are_one_line_errors(measured: Any,
                                                                tmp_path: Path) -> None:
    rows, _ = measured
    without = [{k: v for k, v in r.items() if not k.startswith("busy.")} for r in rows]
    with pytest.raises(PlotError) as info:
        plot_stalls(without, tmp_path, source="d/results.csv")
    assert str(info.value) == (
        "d/results.csv: the stalls plot needs column(s) busy.fetch, busy.load, busy.compute, "
        "busy.store, which the sweep did not record (add 'stalls' to the spec's metrics)")
    with pytest.raises(PlotError, match=r"d/results.csv: no successful rows to plot \(1 rows, "):
        plot_utilization([rows[-1]], tmp_path, source="d/results.csv")
    assert not list(tmp_path.iterdir()), "a failed plot wrote files"


def test_roofline_leaves_out_rows_without_macs(measured: Any, tmp_path: Path) -> None:
    """A whole model's residual adds have DRAM traffic but no MACs: 0 ops per byte has no
    place on a log axis ("Geometric sequence cannot include zero")."""
    rows, _ = measured
    adds = [{**r, "layer": f"{r['layer']}.add", "point_id": f"{r['point_id']}a", "macs": 0}
            for r in rows if r["status"] == "ok"]
    _check_image(plot_roofline(rows + adds, tmp_path), "roofline")
    with pytest.raises(PlotError, match=r"^x: the roofline plot needs rows with MACs, DRAM "
                                        r"traffic and cycles$"):
        plot_roofline(adds, tmp_path / "none", source="x")


@pytest.fixture(scope="module")
def model_sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A sweep folder of one whole-model point (ResNet-18 at 16 px, every layer a row), with
    its trace."""
    from accel.dse import load_spec, run_sweep

    folder = tmp_path_factory.mktemp("model")
    spec = folder / "m.yaml"
    spec.write_text("name: m\nbase: default\nworkloads:\n  - model: resnet18\n"
                    "    image_size: 16\nmetrics: [cycles, gemm_utilization, dram_bytes, "
                    "stalls]\ntraces: true\n")
    run_sweep(load_spec(spec), folder / "out", workers=1, quiet=True)
    return folder / "out"


def test_whole_model_sweep_plots_every_kind_and_a_failing_kind_fails_alone(
        model_sweep: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    import accel.plots
    from accel.cli import main
    from accel.dse import read_results

    out = model_sweep
    rows = read_results(out)
    # The residual adds run fused into their convs (conv2d_add) on default; rows without
    # MACs are test_roofline_leaves_out_rows_without_macs's.
    fused = [r for r in rows if r["layer"] == "layer1.0.conv2"]
    assert fused and all(r["macs"] > 0 and r["gemm_utilization"] for r in fused)
    assert main(["plot", str(out)]) == 0
    captured = capsys.readouterr()
    assert [Path(line.split()[-1]).name for line in captured.out.splitlines()] == [
        f"{kind}.{ext}" for kind in ("utilization", "stalls", "roofline", "timeline")
        for ext in ("png", "svg")]

    def broken(*args: Any, **kwargs: Any) -> list[Path]:
        raise ZeroDivisionError("float division by zero")

    monkeypatch.setattr(accel.plots, "plot_stalls", broken)
    assert main(["plot", str(out), "--kind", "stalls", "--kind", "roofline"]) == 1
    captured = capsys.readouterr()
    assert captured.out == "".join(f"wrote {out / 'plots' / f'roofline.{ext}'}\n"
                                   for ext in ("png", "svg"))
    assert captured.err == ("accel: error: the stalls plot failed: ZeroDivisionError: float "
                            "division by zero\n")


class Figures:
    """The figures ``accel.plots`` saves, kept open for inspection (drawn, so their tick
    labels are set)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        import accel.plots

        self.figs: dict[str, Any] = {}
        real = accel.plots._save

        def keep(fig: Any, out: Path, stem: str) -> list[Path]:
            fig.canvas.draw()
            self.figs[stem] = fig
            return real(fig, out, stem)

        monkeypatch.setattr(accel.plots, "_save", keep)


def test_timeline_title_names_the_config_and_workload(
        model_sweep: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """It was the trace file's name: a point hash."""
    from accel.cli import main
    from accel.dse import read_results

    figures = Figures(monkeypatch)
    assert main(["plot", str(model_sweep), "--kind", "timeline"]) == 0
    config = read_results(model_sweep)[0]["config_name"]
    title = figures.figs["timeline"].axes[0].get_title()
    assert title == f"module activity: resnet18 (whole model) on {config}"


def test_roofline_ticks_read_as_numbers_and_roofs_are_labelled(
        measured: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The y ticks read "6x10^0"; the dashed roofs said nothing."""
    rows, _ = measured
    figures = Figures(monkeypatch)
    plot_roofline(rows, tmp_path)
    ax = figures.figs["roofline"].axes[0]
    ticks = [t.get_text() for t in ax.get_yticklabels(which="both") + ax.get_xticklabels(
        which="both") if t.get_text()]
    assert ticks and all(re.fullmatch(r"[0-9.,]+", t) for t in ticks), ticks
    labels = [t.get_text() for t in ax.texts]
    roofs = {(2.0 * r["peak_macs_per_cycle"] * r["clock_mhz"] / 1000.0,
              r["dram_bytes_per_cycle"] * r["clock_mhz"] / 1000.0)
             for r in rows if r["status"] == "ok"}
    for peak, bandwidth in roofs:
        assert f"peak {peak:g} GOPS" in labels and f"{bandwidth:g} GB/s" in labels


def _overlap(a: Any, b: Any) -> bool:
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


def test_run_folder_plots_a_windowed_timeline(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """accel plot refused an accel run folder; it draws what report.json and trace.json
    allow. The legend of accel run's utilization.png sat on the last bars."""
    import matplotlib.pyplot as plt

    from accel.cli import main

    out = tmp_path / "run"
    assert main(["run", "resnet18", "--image-size", "16", "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["plot", str(out)]) == 0
    captured = capsys.readouterr()
    assert [Path(line.split()[-1]).name for line in captured.out.splitlines()] == [
        f"{kind}.{ext}" for kind in ("utilization", "stalls", "timeline")
        for ext in ("png", "svg")]
    assert all(line.startswith("skipped ") for line in captured.err.splitlines())
    assert "the roofline plot needs a sweep's results" in captured.err

    # The timeline's window is in cycles, as its title says: the run's trace carries the clock
    # (the plot drew microseconds under a title in cycles), and the fallback layers' host time
    # between the accelerator layers is taken out (data.pack's put conv1 at 29,000 "cycles").
    from accel.plots import _read_trace
    report_json = json.loads((out / "report.json").read_text())
    slices, clock = _read_trace(out / "trace.json")
    assert clock == report_json["clock_mhz"]
    starts = sorted(ts * clock for track in slices.values() for ts, _ in track)
    end = max(ts + dur for track in slices.values() for ts, dur in track) * clock
    assert starts[0] < 100     # conv1's first instruction, once fetched (cycle 65 here)
    # (a layer's store may drain a little past FINISH's cycle)
    assert end == pytest.approx(report_json["totals"]["accel_cycles"], rel=0.05)
    drawn: list[Any] = []
    saving = plt.Figure.savefig

    def keep(fig: Any, *args: Any, **kwargs: Any) -> None:
        drawn.append(fig)
        saving(fig, *args, **kwargs)

    monkeypatch.setattr(plt.Figure, "savefig", keep)
    assert main(["plot", str(out), "--kind", "timeline", "--window", "0:5000",
                 "--out", str(tmp_path / "w")]) == 0
    capsys.readouterr()
    ax = drawn[0].axes[0]
    assert ax.get_title().endswith("(cycles 0 to 5,000)") and ax.get_xlabel() == "cycle"
    assert ax.get_xlim() == (0, 5000)


def test_pareto_front_keeps_exactly_the_non_dominated_points() -> None:
    points = [(3.0, 1.0), (1.0, 5.0), (2.0, 2.0), (2.5, 2.5), (1.0, 6.0), (4.0, 1.0)]
    front = pareto_front(points)
    assert front == [1, 2, 0]
    for i, p in enumerate(points):
        dominated = any(q[0] <= p[0] and q[1] <= p[1] and q != p for q in points)
        assert (i in front) == (not dominated)


def test_roofline_points_lie_under_their_roofs(measured: Any) -> None:
    rows, _ = measured
    for r in rows:
        if r["status"] != "ok":
            continue
        gops = 2.0 * r["macs"] * r["clock_mhz"] / r["cycles"] / 1000.0
        peak = 2.0 * r["peak_macs_per_cycle"] * r["clock_mhz"] / 1000.0
        bandwidth_roof = 2.0 * r["macs"] / r["dram_bytes"] * r["dram_bytes_per_cycle"] \
            * r["clock_mhz"] / 1000.0
        assert gops <= peak + 1e-9
        assert gops <= bandwidth_roof + 1e-9 or math.isclose(gops, bandwidth_roof)


@pytest.fixture(scope="module")
def rtl_vcd(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    """A VCD of a small pipelined program on tiny from Amaranth's simulator, and its cycles."""
    from accel.testing.synthetic import pipelined_gemm
    from hw.backend import run_rtl

    cfg = accel.load_config("tiny")
    program, dram = pipelined_gemm(cfg, 2, pixels=4, in_blocks=2)
    path = tmp_path_factory.mktemp("vcd") / "run.vcd"
    cycles, _ = run_rtl(program, dram, cfg, vcd=path, engine="amaranth")
    return path, cycles


def test_vcd_reader_counts_the_cycles_the_rtl_reported(rtl_vcd: tuple[Path, int]) -> None:
    import bisect

    from hw.waveform import clock_edges, read_vcd

    path, cycles = rtl_vcd
    signals = read_vcd(path, ["*.top.clk", "*.top.running", "*.top.done"])
    assert set(signals) == {"bench.top.clk", "bench.top.running", "bench.top.done"}
    edges = clock_edges(signals["bench.top.clk"])
    rose = {name: next(t for t, v in signals[f"bench.top.{name}"].changes if v == 1)
            for name in ("running", "done")}
    started, finished = (bisect.bisect_right(edges, rose[n]) for n in ("running", "done"))
    assert finished - started == cycles
    assert signals["bench.top.done"].width == 1


def test_vcd_reader_errors(rtl_vcd: tuple[Path, int], tmp_path: Path) -> None:
    from hw.waveform import VcdError, read_vcd

    path, _ = rtl_vcd
    with pytest.raises(VcdError, match=r"run.vcd: no signal matches \*.nonexistent"):
        read_vcd(path, ["*.top.done", "*.nonexistent"])
    junk = tmp_path / "junk.vcd"
    junk.write_text("hello\n")
    with pytest.raises(VcdError, match=r"junk.vcd: not a VCD file \(no \$enddefinitions\)"):
        read_vcd(junk, ["*"])
    with pytest.raises(VcdError, match=r"missing.vcd: cannot read"):
        read_vcd(tmp_path / "missing.vcd", ["*"])


def test_waveform_renders(rtl_vcd: tuple[Path, int], tmp_path: Path) -> None:
    from accel.plots import plot_waveform

    path, cycles = rtl_vcd
    paths = plot_waveform(path, ["*.top.load.issue", "*.top.compute.retire",
                                 "*.top.l2c_token_queue.level", "*.top.done"], tmp_path, 0,
                          cycles)
    _check_image(paths, "waveform")
    with pytest.raises(PlotError, match=r"run.vcd: the dump has \d+ clock cycles; cycle "
                                        r"100000 is past its end"):
        plot_waveform(path, ["*.top.done"], tmp_path, 100_000)


def test_waveform_command(rtl_vcd: tuple[Path, int], tmp_path: Path,
                          capsys: pytest.CaptureFixture[str]) -> None:
    from accel.cli import main

    path, _ = rtl_vcd
    assert main(["waveform", str(path), "--out", str(tmp_path), "--window", "10:60"]) == 0
    paths = [tmp_path / "run_waveform.png", tmp_path / "run_waveform.svg"]
    assert capsys.readouterr().out.splitlines() == [f"wrote {p}" for p in paths]
    _check_image(paths, "run_waveform")
    svg = paths[1].read_text()
    assert "waveform: run.vcd, cycles 10 to 60" in svg
    for extra, message in [
        (["-s", "*.top.nothing"], f"{path}: no signal matches *.top.nothing"),
        (["--window", "x"], "--window 'x': expected FIRST:LAST in cycles"),
        (["--window", "60:10"], "--window '60:10': the window is empty"),
        (["--out", str(paths[0])], f"{paths[0]}: cannot write --out: it is a file, not a "
                                   "folder"),
        (["-s", "*.top.*"], f"{path}: "),
    ]:
        assert main(["waveform", str(path), *extra]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"accel: error: {message}") and err.count("\n") == 1, err
    assert re.fullmatch(r"accel: error: .*run\.vcd: \d+ signals match \*\.top\.\*; at most 64 "
                        r"fit one plot: narrow the patterns\n", err)
    new = tmp_path / "new" / "folder"  # created, as run, sweep and plot create theirs
    assert main(["waveform", str(path), "--out", str(new), "--cycles", "10:60"]) == 0
    assert (new / "run_waveform.png").exists()
    assert capsys.readouterr().err == "accel: note: --cycles is deprecated; use --window\n"


# ------------------------------------------------------------ traces and accel run's outputs
def _reference_events(st: Any) -> list[dict[str, Any]]:
    """``SimStats.trace_events`` as it was before the trace was streamed: one dict per event
    (``benchmarks/outputs.py`` keeps that writer, to time the old path against the new)."""
    return _OUTPUTS_BENCH.old_trace_events(st)


def _reference_trace(st: Any) -> dict[str, Any]:
    """What ``SimStats.write_trace`` wrote before, as ``json.loads`` reads it."""
    return {"traceEvents": _reference_events(st), "displayTimeUnit": "ns",
            "otherData": {"cycles": st.cycles, "clock_mhz": st.clock_mhz}}


def _reference_run_trace(report: Any) -> dict[str, Any]:
    """What ``RunReport.write_trace`` wrote before (layers merged by dict), as read back."""
    return _OUTPUTS_BENCH.old_run_trace(report)


def _same(path: Path, want: dict[str, Any]) -> None:
    """The trace at ``path``, read by ``json``, holds exactly ``want``: every event in order,
    every value equal and of the same type (an int stays an int, 3.0 a float)."""
    got = json.loads(path.read_text())
    assert got.keys() == want.keys()
    assert got["otherData"] == want["otherData"]
    assert len(got["traceEvents"]) == len(want["traceEvents"])
    for k, (g, w) in enumerate(zip(got["traceEvents"], want["traceEvents"], strict=True)):
        assert g == w, (k, g, w)
    assert json.dumps(got) == json.dumps(want)  # the types too
    assert not list(path.parent.glob("*.tmp")), "temporary files left behind"


@pytest.fixture(scope="module")
def model_run() -> Any:
    """ResNet-18 at 16 px on the sim with traces: accelerator layers and cpu fallback ones
    (so offsets of host time), the report."""
    exe = accel.compile("resnet18", image_size=16)
    x, _ = accel.sample_inputs(exe.graph)
    _, report = exe.run(x, backend="sim", trace=True)
    assert any(s is None for _, _, s in report.traces), "no fallback layer to offset by"
    assert sum(len(s.counters) for _, _, s in report.traces if s is not None) > 1000
    return report


def test_program_trace_holds_the_events_trace_events_held(model_run: Any,
                                                          tmp_path: Path) -> None:
    stats = [s for _, _, s in model_run.traces if s is not None]
    for st in stats[:6]:
        assert st.trace_events() == _reference_events(st)
        path = tmp_path / "trace.json"
        st.write_trace(path)
        _same(path, _reference_trace(st))


def test_run_trace_holds_the_events_the_merged_dicts_held(model_run: Any,
                                                          tmp_path: Path) -> None:
    path = tmp_path / "trace.json"
    model_run.write_trace(path)
    want = _reference_run_trace(model_run)
    _same(path, want)
    # accel plot's timeline reads it as it read the merged dicts
    from accel.plots import _read_trace

    old = tmp_path / "old" / "trace.json"
    old.parent.mkdir()
    old.write_text(json.dumps(want))
    assert _read_trace(path) == _read_trace(old)


def test_trace_numbers_read_back_as_the_same_floats(tmp_path: Path) -> None:
    """Awkward values: a clock whose cycle is no short decimal, long runs, offsets of host
    time, counter values from 0 to huge, ints among the counters, and events of other kinds
    around the programs' own."""
    import numpy as np

    from sim.stats import ModuleStats, SimStats, Slice, TraceWriter

    rng = np.random.default_rng(7)
    programs = []
    for clock in (100.0, 150.0, 333.3, 1000.0):
        starts = np.sort(rng.integers(0, 10**9, 3000))
        ends = starts + rng.integers(0, 10**5, 3000)
        timeline = [Slice(MODULES[int(m)], int(i), f"GEMM {i % 7}x\"q\"\\ é", int(s), int(e))
                    for i, (m, s, e) in enumerate(zip(rng.integers(0, 4, 3000), starts, ends,
                                                      strict=True))]
        values = np.concatenate([rng.integers(0, 9, 2000).astype(float),
                                 rng.random(1000) * 10.0 ** rng.integers(-8, 18, 1000),
                                 [0.0, 1e-300, 1e300, 5e-324, 2.0**53, 0.1, 1 / 3]])
        counters = [(f"queue {k % 3}", int(c), float(v))
                    for k, (c, v) in enumerate(zip(rng.integers(0, 10**10, len(values)),
                                                   values, strict=True))]
        st = SimStats(cycles=int(ends.max()), peak_macs_per_cycle=64, clock_mhz=clock,
                      modules={m: ModuleStats() for m in MODULES}, timeline=timeline,
                      counters=counters)
        programs.append(st)
    ints = SimStats(cycles=10, peak_macs_per_cycle=64, clock_mhz=100.0,
                    modules={m: ModuleStats() for m in MODULES},
                    counters=[("n", 1, 3), ("n", 2, -(2**40)), ("n", 3, 0)])
    mixed = SimStats(cycles=10, peak_macs_per_cycle=64, clock_mhz=100.0,
                     modules={m: ModuleStats() for m in MODULES},
                     counters=[("b", 1, True), ("b", 2, 2.5), ("b", 3, 7), ("b", 4, -0.0)])
    path = tmp_path / "t.json"
    offsets = [0.0, 1234.5678901234, 98765432.10987654, 7.0]
    with TraceWriter(path, {"what": "test"}) as out:
        out.event({"ph": "M", "pid": 1, "tid": 10, "name": "thread_name",
                   "args": {"name": "cpu fallback"}})
        for st, offset in zip(programs, offsets, strict=True):
            out.stats(st, offset)
            out.event({"ph": "X", "pid": 1, "tid": 9, "name": "layer", "ts": offset,
                       "dur": 1.5, "args": {}})
        out.stats(ints)
        out.stats(mixed, 0.25)
    want: list[dict[str, Any]] = [{"ph": "M", "pid": 1, "tid": 10, "name": "thread_name",
                                   "args": {"name": "cpu fallback"}}]
    for st, offset in [*zip(programs, offsets, strict=True), (ints, 0.0), (mixed, 0.25)]:
        for e in _reference_events(st)[1 + len(MODULES):]:
            want.append({**e, "ts": e["ts"] + offset})
        if st in programs:
            want.append({"ph": "X", "pid": 1, "tid": 9, "name": "layer", "ts": offset,
                         "dur": 1.5, "args": {}})
    _same(path, {"traceEvents": want, "displayTimeUnit": "ns", "otherData": {"what": "test"}})
    got = json.loads(path.read_text())["traceEvents"]
    assert [type(e["args"]["value"]) for e in got if e.get("name") in ("n", "b")] == \
        [int, int, int, bool, float, int, float]
    # nothing written when the block fails
    with pytest.raises(ZeroDivisionError), TraceWriter(tmp_path / "no.json", {}) as out:
        out.stats(ints)
        _ = 1 / 0
    assert not list(tmp_path.glob("no.json*"))


def test_run_utilization_plot_names_every_layer_and_its_legend_covers_no_bar(
        model_run: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """accel run --out's utilization.png (RunReport.plot_utilization): the bars are
    collections now, not patches; what the legend must not cover is the same."""
    from matplotlib.figure import Figure

    drawn: list[Any] = []
    saving = Figure.savefig

    def keep(fig: Any, *args: Any, **kwargs: Any) -> None:
        drawn.append(fig)
        saving(fig, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", keep)
    path = model_run.plot_utilization(tmp_path / "utilization.png")
    assert path == tmp_path / "utilization.png" and path.read_bytes()[:4] == b"\x89PNG"
    assert not list(tmp_path.glob(".*tmp*")), "temporary files left behind"
    height, width = matplotlib.image.imread(path).shape[:2]
    assert 600 <= width <= 6000 and 400 <= height <= 2000, (width, height)
    fig = drawn[0]
    renderer = fig.canvas.get_renderer()
    top, bottom = fig.axes
    accel_layers = [layer for layer in model_run.layers if layer.target == "accel"]
    assert [t.get_text() for t in bottom.texts] == [layer.name for layer in accel_layers]
    picture = fig.bbox
    for text in bottom.texts:  # inside the picture, under the lower panel
        box = text.get_window_extent(renderer)
        assert picture.x0 <= box.x0 and box.x1 <= picture.x1 and picture.y0 <= box.y0
        assert box.y1 <= bottom.get_window_extent(renderer).y0
    assert bottom.xaxis.label.get_window_extent(renderer).y0 >= picture.y0
    legend = bottom.get_legend()
    box = legend.get_window_extent(renderer)
    assert box.x1 <= picture.x1
    bars = [b for ax in (top, bottom) for c in ax.collections for b in
            (p.get_extents(c.get_transform()) for p in c.get_paths()) if b.height > 0]
    assert len(bars) >= len(accel_layers)
    assert not any(_overlap(box, bar) for bar in bars)
    heights = [p.vertices[1, 1] for p in top.collections[0].get_paths()]
    assert heights == pytest.approx([layer.gemm_utilization or 0 for layer in accel_layers])
