"""What ``accel run resnet18 --out DIR`` spends writing its folder, before and after streaming.

Runs ResNet-18 at 224x224 on the ``sim`` backend (default config, traces on, as ``accel run
--out`` runs it: ``cmd_run``'s model, sample inputs and calibration), then prints, before
(the old code path, kept below as reference functions: one dict per trace event and
``json.dumps``; pyplot bars with ``bbox_inches="tight"``) and after (``accel.cli``'s
``_write_run_files``: ``RunReport.write_trace`` and ``RunReport.plot_utilization``):

- the wall time of writing ``trace.json``, of drawing ``utilization.png``, and of the whole
  ``--out`` folder (report.json, layers.csv, utilization.png, trace.json), as the minimum
  (and median) of ``--repeats`` runs in this process, and their ratios;
- matplotlib's import, paid once per process by whichever path plots first (so not in the
  figures above), and the whole folder written by a fresh process (import included) once
  per path;
- the trace file sizes, and whether both traces hold the same events (``json`` read back).

With ``--sim-overhead``, also the simulation's own cost of recording the trace (the same
run without ``trace=True``), which ``--out`` adds too but which is the timing simulator's.

    python benchmarks/outputs.py [--repeats 3] [--sim-overhead]
"""

from __future__ import annotations

import argparse
import json
import pickle
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import accel
from accel.cli import _write_run_files
from sim.stats import MODULES


# ---------------------------------------------------------------------- before (reference)
def old_trace_events(st: Any) -> list[dict[str, Any]]:
    """``SimStats.trace_events``: one dict per event."""
    us = 1.0 / st.clock_mhz
    events: list[dict[str, Any]] = [
        {"ph": "M", "pid": 1, "name": "process_name", "args": {"name": "accelerator"}}]
    for tid, name in enumerate(MODULES):
        events.append({"ph": "M", "pid": 1, "tid": tid, "name": "thread_name",
                       "args": {"name": name}})
    tids = {name: tid for tid, name in enumerate(MODULES)}
    for s in st.timeline:
        events.append({"ph": "X", "pid": 1, "tid": tids[s.module], "name": s.name,
                       "ts": s.start * us, "dur": (s.end - s.start) * us,
                       "args": {"index": s.index, "start_cycle": s.start,
                                "cycles": s.end - s.start}})
    for name, cycle, value in st.counters:
        events.append({"ph": "C", "pid": 1, "name": name, "ts": cycle * us,
                       "args": {"value": value}})
    return events


def old_run_trace(report: Any) -> dict[str, Any]:
    """What ``RunReport.write_trace`` wrote before: the layers' event dicts merged."""
    events: list[dict[str, Any]] = []
    us_per_cycle = 1.0 / report.clock_mhz
    offset_us = 0.0
    cpu_tid = 10
    events.append({"ph": "M", "pid": 1, "tid": cpu_tid, "name": "thread_name",
                   "args": {"name": "cpu fallback"}})
    layers = {layer.name: layer for layer in report.layers}
    for name, _, stats in report.traces:
        layer = layers[name]
        if stats is not None:
            for e in old_trace_events(stats):
                if e["ph"] == "M" and events and any(
                        x.get("tid") == e.get("tid") and x["ph"] == "M" for x in events):
                    continue
                e = dict(e)
                if "ts" in e:
                    e["ts"] += offset_us
                events.append(e)
            events.append({"ph": "X", "pid": 1, "tid": 9, "name": name, "ts": offset_us,
                           "dur": (layer.cycles or 0) * us_per_cycle,
                           "args": {"op": layer.op, "cycles": layer.cycles}})
            offset_us += (layer.cycles or 0) * us_per_cycle
        else:
            events.append({"ph": "X", "pid": 1, "tid": cpu_tid, "name": name,
                           "ts": offset_us, "dur": layer.host_ms * 1000.0,
                           "args": {"op": layer.op, "host_ms": layer.host_ms}})
            offset_us += layer.host_ms * 1000.0
    events.append({"ph": "M", "pid": 1, "tid": 9, "name": "thread_name",
                   "args": {"name": "layers"}})
    return {"traceEvents": events, "displayTimeUnit": "ns",
            "otherData": {"cycles": report.accel_cycles, "clock_mhz": report.clock_mhz}}


def old_write_trace(report: Any, path: Path) -> None:
    """``RunReport.write_trace`` before: :func:`old_run_trace` in one ``json.dumps``."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(old_run_trace(report)))
    tmp.replace(path)


def old_plot_utilization(report: Any, path: Path) -> None:
    """``RunReport.plot_utilization`` before: pyplot, a patch per bar, tight bbox."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    layers = [layer for layer in report.layers if layer.target == "accel"]
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(max(6, 0.45 * len(layers) + 2), 7),
                                   sharex=True)
    names = [layer.name for layer in layers]
    x = np.arange(len(layers))
    ax1.bar(x, [layer.gemm_utilization or 0 for layer in layers], color="tab:blue")
    ax1.set_ylabel("GEMM utilisation (0-1)")
    ax1.set_ylim(0, 1)
    ax1.set_title(f"{report.model} on {report.config} ({report.backend}): per-layer "
                  "utilisation")
    causes = sorted({c for layer in layers for c in layer.stalls.get("compute", {})})
    bottom = np.zeros(len(layers))
    for cause in causes:
        share = np.array([layer.stalls.get("compute", {}).get(cause, 0)
                          / max(layer.cycles or 1, 1) for layer in layers])
        ax2.bar(x, share, bottom=bottom, label=cause)
        bottom += share
    ax2.set_ylabel("compute stall share of cycles")
    ax2.set_ylim(0, 1)
    ax2.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0),
               title="compute stalls")
    ax2.set_xticks(x, names, rotation=70, fontsize="small")
    ax2.set_xlabel("layer")
    tmp = Path(str(path) + ".tmp.png")
    fig.savefig(tmp, dpi=110, bbox_inches="tight")
    plt.close(fig)
    tmp.replace(path)


def old_write_out(report: Any, out: Path) -> None:
    """``accel run --out``'s folder before."""
    out.mkdir(parents=True, exist_ok=True)
    report.write_json(out / "report.json")
    report.write_csv(out / "layers.csv")
    old_plot_utilization(report, out / "utilization.png")
    old_write_trace(report, out / "trace.json")


def new_write_out(report: Any, out: Path) -> None:
    _write_run_files(report, out, "sim")


# ---------------------------------------------------------------------- measuring
def times(fn: Callable[[], None], repeats: int) -> list[float]:
    out = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return out


FRESH = """
import pickle, sys, time
from pathlib import Path
sys.path.insert(0, {root!r})
sys.path.insert(0, {here!r})
import outputs
report = pickle.loads(Path({pickled!r}).read_bytes())
start = time.perf_counter()
getattr(outputs, {fn!r})(report, Path({out!r}))
print(time.perf_counter() - start)
"""


def fresh_process(fn: str, pickled: Path, out: Path) -> float:
    """``fn(report, out)`` in a new Python that has only unpickled the report: matplotlib's
    import (and every first-call cost) included, as in one ``accel run --out``."""
    code = FRESH.format(root=str(Path(__file__).resolve().parents[1]),
                        here=str(Path(__file__).resolve().parent), pickled=str(pickled),
                        fn=fn, out=str(out))
    done = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                          text=True)
    return float(done.stdout.split()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--config", default="default")
    parser.add_argument("--sim-overhead", action="store_true",
                        help="also run the network without traces (the simulator's cost)")
    args = parser.parse_args()

    cfg = accel.load_config(args.config)
    started = time.perf_counter()
    graph = accel.load_model("resnet18")
    x, calibration = accel.sample_inputs(graph, 0)
    exe = accel.compile(graph, cfg, calibration=calibration)
    compiled = time.perf_counter()
    _, report = exe.run(x, backend="sim", fallback="cpu", trace=True)
    ran = time.perf_counter()
    stats = [s for _, _, s in report.traces if s is not None]
    print(f"resnet18 on {cfg.name} (sim, traces on): compile {compiled - started:.1f} s, "
          f"run {ran - compiled:.1f} s; {len(report.layers)} layers ({len(stats)} on the "
          f"accelerator), {sum(len(s.timeline) for s in stats):,} slices, "
          f"{sum(len(s.counters) for s in stats):,} counter events")
    if args.sim_overhead:
        start = time.perf_counter()
        exe.run(x, backend="sim", fallback="cpu", trace=False)
        plain = time.perf_counter() - start
        print(f"the same run without traces: {plain:.1f} s (recording them: "
              f"{ran - compiled - plain:+.1f} s, the timing simulator's)")

    start = time.perf_counter()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.backends.backend_agg
    import matplotlib.figure
    import matplotlib.pyplot
    print(f"matplotlib import (once per process, by whichever path plots first; not in "
          f"the in-process figures): {time.perf_counter() - start:.2f} s")

    with tempfile.TemporaryDirectory(prefix="accel-outputs-") as tmp:
        root = Path(tmp)
        for d in ("old", "new", "old_out", "new_out", "fresh_old", "fresh_new"):
            (root / d).mkdir()
        # a warm-up of each (first-call costs: fonts, numpy tables)
        old_plot_utilization(report, root / "old" / "utilization.png")
        report.plot_utilization(root / "new" / "utilization.png")
        rows = {
            "trace.json": (lambda: old_write_trace(report, root / "old" / "trace.json"),
                           lambda: report.write_trace(root / "new" / "trace.json")),
            "utilization.png": (
                lambda: old_plot_utilization(report, root / "old" / "utilization.png"),
                lambda: report.plot_utilization(root / "new" / "utilization.png")),
            "--out folder": (lambda: old_write_out(report, root / "old_out"),
                             lambda: new_write_out(report, root / "new_out")),
        }
        results = {}
        for name, (before, after) in rows.items():
            results[name] = (times(before, args.repeats), times(after, args.repeats))
        pickled = root / "report.pkl"
        pickled.write_bytes(pickle.dumps(report))
        fresh = (fresh_process("old_write_out", pickled, root / "fresh_old"),
                 fresh_process("new_write_out", pickled, root / "fresh_new"))

        print(f"\nwall time, min (median) of {args.repeats} in this process")
        print(f"{'':34}{'before':>16}{'after':>16}{'ratio':>9}")
        for name, (before, after) in results.items():
            b, a = min(before), min(after)
            print(f"{name:34}{b:7.2f} s ({statistics.median(before):5.2f})"
                  f"{a:7.2f} s ({statistics.median(after):5.2f}){b / a:8.1f}x")
        print(f"{'--out folder, fresh process':34}{fresh[0]:7.2f} s        "
              f"{fresh[1]:7.2f} s        {fresh[0] / fresh[1]:8.1f}x   (matplotlib import "
              "included)")

        old_trace, new_trace = root / "old" / "trace.json", root / "new" / "trace.json"
        same = json.loads(old_trace.read_text()) == json.loads(new_trace.read_text())
        print(f"\ntrace.json: {old_trace.stat().st_size / 1e6:.1f} MB before, "
              f"{new_trace.stat().st_size / 1e6:.1f} MB after; the same events read back: "
              f"{'yes' if same else 'NO'}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
