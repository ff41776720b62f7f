"""Design-space plots from sweep results (``accel plot``).

Every function takes the rows of a sweep's ``results.csv`` as read by
:func:`accel.dse.read_results` (one dict per (config, workload item), typed values, ``None``
for empty cells) and writes one figure as PNG and SVG next to each other:

- :func:`plot_utilization`: per-layer GEMM utilisation, grouped by config (a heat map when there
  are too many configs for grouped bars to stay readable);
- :func:`plot_stalls`: where each module's cycles go (busy and stall causes), stacked, per config;
- :func:`plot_roofline`: operational intensity (ops per DRAM byte) against achieved GOPS, with
  each config's compute peak and DRAM bandwidth lines;
- :func:`plot_pareto`: total latency of the workload against area (LUTs, DSPs, BRAMs or FFs
  from ``accel synth``), with the Pareto front marked;
- :func:`plot_energy`: each config's energy for the workload, stacked by component (MAC, ALU,
  each buffer, DRAM, control, leakage);
- :func:`plot_energy_delay`: total energy against total latency, one marker per config, with
  the Pareto front marked; :func:`plot_energy_area`: total energy against area;
- :func:`plot_timeline`: a Gantt chart of fetch / load / compute / store activity from a Chrome
  trace written by the timing simulator;
- :func:`plot_waveform`: a logic-analyser excerpt of RTL signals from a VCD file.

Errors (no results, a column the plot needs that the sweep did not record, a trace that is not a
trace) are :class:`PlotError` with one line naming the file and what is missing.
"""

from __future__ import annotations

import itertools
import json
import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

__all__ = ["KINDS", "WAVEFORM_SIGNALS", "PlotError", "energy_front", "energy_totals",
           "pareto_front", "plot_all",
           "plot_energy", "plot_energy_area", "plot_energy_delay", "plot_pareto",
           "plot_roofline", "plot_stalls", "plot_timeline", "plot_utilization", "plot_waveform"]

KINDS = ("utilization", "stalls", "roofline", "pareto", "timeline", "energy", "energy_delay",
         "energy_area")
ENERGY_PARTS = (("mac", "MAC"), ("alu", "ALU"), ("uop", "uop buffer"), ("inp", "inp buffer"),
                ("wgt", "wgt buffer"), ("acc", "acc buffer"), ("out", "out buffer"),
                ("dram", "DRAM"), ("control", "control"), ("leakage", "leakage"))
"""The energy components (``accel.machine.energy.COMPONENTS``) and their legend labels."""
MODULES = ("fetch", "load", "compute", "store")
STALL_PARTS = (("busy", "busy"), ("dram_contention", "DRAM contention"),
               ("dram_latency", "DRAM latency"), ("token", "waiting for a token"),
               ("full", "token queue full"), ("queue_full", "command queue full"),
               ("cmd_empty", "no instruction"))
AREA_METRICS = {"luts": "LUTs", "ffs": "flip-flops", "dsps": "DSP / multiplier blocks",
                "brams": "block RAMs"}
_HEATMAP_ABOVE = 8  # configs; more than this and grouped bars become unreadable


class PlotError(ValueError):
    """A plot cannot be drawn from the given results (one-line message)."""


# ---------------------------------------------------------------------- helpers
def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, out: Path, stem: str) -> list[Path]:
    """Write ``stem``.png and ``stem``.svg into ``out`` atomically; return both paths."""
    plt = _pyplot()
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for ext, dpi in (("png", 120), ("svg", None)):
        final = out / f"{stem}.{ext}"
        tmp = out / f".{stem}.tmp.{ext}"
        fig.savefig(tmp, dpi=dpi, format=ext, bbox_inches="tight")
        tmp.replace(final)
        paths.append(final)
    plt.close(fig)
    return paths


def _ok(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The successful rows in the sweep's point order (results are appended as points
    finish, which with several workers is not that order)."""
    ok = [r for r in rows if r.get("status") == "ok"]
    return sorted(ok, key=lambda r: r.get("point_index") or 0)


def _need(rows: Sequence[dict[str, Any]], columns: Sequence[str], kind: str, group: str,
          source: str) -> list[dict[str, Any]]:
    """The ok rows that have every column in ``columns``; PlotError when there are none."""
    ok = _ok(rows)
    if not ok:
        raise PlotError(f"{source}: no successful rows to plot ({len(rows)} rows, all errors)"
                        if rows else f"{source}: no rows to plot")
    missing = [c for c in columns if all(r.get(c) is None for r in ok)]
    if missing:
        raise PlotError(f"{source}: the {kind} plot needs column(s) {', '.join(missing)}, "
                        f"which the sweep did not record (add '{group}' to the spec's metrics)")
    return [r for r in ok if all(r.get(c) is not None for c in columns)]


def _configs(rows: Iterable[dict[str, Any]]) -> list[str]:
    """Config names in order of first appearance."""
    return list(dict.fromkeys(str(r["config_name"]) for r in rows))


def _labels(rows: Iterable[dict[str, Any]]) -> dict[str, str]:
    """Config name -> what to print for it: the core shape and the sweep's other axis values
    (``1x8x8 wgt=64K bytes_per_cycle=16``) when the rows have ``axis.*`` columns, else the
    canonical name."""
    out: dict[str, str] = {}
    for r in rows:
        name = str(r["config_name"])
        if name in out:
            continue
        axes = [(k[len("axis."):], r[k]) for k in r if k.startswith("axis.")]
        if not axes:
            out[name] = name
            continue
        parts = [str(r["core"])] if r.get("core") and any(
            k.startswith("core.") for k, _ in axes) else []
        parts += [f"{k.rsplit('.', 1)[-1]}={_amount(v)}" for k, v in axes
                  if not k.startswith("core.")]
        out[name] = " ".join(parts)
    return out


def _amount(value: Any) -> str:
    """Byte counts as ``32K`` / ``1M``; other values as they are."""
    if isinstance(value, int) and value >= 1024 and value % 1024 == 0:
        return f"{value // 1048576}M" if value % 1048576 == 0 else f"{value // 1024}K"
    return str(value)


def _layers(rows: Iterable[dict[str, Any]]) -> list[str]:
    return list(dict.fromkeys(_layer_key(r) for r in rows))


def _layer_key(row: dict[str, Any]) -> str:
    workloads = row.get("workload") or ""
    layer = row.get("layer") or ""
    return f"{workloads}:{layer}" if workloads and workloads not in ("resnet18_layers",) \
        else str(layer)


def _short(name: str, width: int = 34) -> str:
    return name if len(name) <= width else name[: width - 1] + "…"


def _title(rows: Sequence[dict[str, Any]], what: str) -> str:
    configs = _configs(rows)
    sweep = rows[0].get("sweep") or "sweep"
    on = configs[0] if len(configs) == 1 else f"{len(configs)} configs"
    return f"{sweep}: {what} ({on}, {rows[0].get('backend', '?')} backend)"


def _gops(row: dict[str, Any]) -> float:
    """Achieved GOPS (2 ops per MAC) at the config's clock."""
    return 2.0 * row["macs"] * row["clock_mhz"] / row["cycles"] / 1000.0


def _plain_ticks(minor: bool) -> Any:
    """Tick labels of a log axis as plain numbers (``0.5``, ``20``, ``1,000``); minor ticks
    labelled at 2 and 5 times a power of ten only, which keeps them apart."""
    from matplotlib.ticker import FuncFormatter

    def label(value: float, _: Any) -> str:
        if value <= 0:
            return ""
        mantissa = value / 10 ** math.floor(math.log10(value) + 1e-9)
        if minor and not any(math.isclose(mantissa, m, rel_tol=1e-6) for m in (2, 5)):
            return ""
        return f"{value:,.0f}" if value >= 1 else f"{value:.3g}"

    return FuncFormatter(label)


# ---------------------------------------------------------------------- plots
def plot_utilization(rows: Sequence[dict[str, Any]], out: Path,
                     source: str = "results") -> list[Path]:
    """Per-layer GEMM utilisation (0-1), one bar per config in each layer's group."""
    plt = _pyplot()
    import numpy as np

    ok = _need(rows, ["gemm_utilization"], "utilization", "gemm_utilization", source)
    configs, layers, labels = _configs(ok), _layers(ok), _labels(ok)
    value = {(str(r["config_name"]), _layer_key(r)): float(r["gemm_utilization"]) for r in ok}
    if len(configs) > _HEATMAP_ABOVE:
        grid = np.full((len(configs), len(layers)), np.nan)
        for (c, layer), v in value.items():
            grid[configs.index(c), layers.index(layer)] = v
        fig, ax = plt.subplots(figsize=(max(6.0, 0.55 * len(layers) + 4),
                                        max(4.0, 0.32 * len(configs) + 1.5)))
        image = ax.imshow(grid, vmin=0, vmax=1, cmap="viridis", aspect="auto")
        ax.set_yticks(range(len(configs)), [_short(labels[c], 48) for c in configs],
                      fontsize="small")
        ax.set_xticks(range(len(layers)), layers, rotation=60, ha="right",
                      rotation_mode="anchor", fontsize="small")
        fig.colorbar(image, ax=ax, label="GEMM utilisation (0-1)")
        ax.set_ylabel("config")
    else:
        fig, ax = plt.subplots(figsize=(max(6.0, 0.35 * len(layers) * len(configs) + 3), 4.5))
        x = np.arange(len(layers))
        width = 0.8 / len(configs)
        for i, c in enumerate(configs):
            heights = [value.get((c, layer), np.nan) for layer in layers]
            ax.bar(x + (i - (len(configs) - 1) / 2) * width, heights, width,
                   label=_short(labels[c], 48))
        ax.set_xticks(x, layers, rotation=60 if len(layers) > 6 else 0,
                      ha="right" if len(layers) > 6 else "center", rotation_mode="anchor",
                      fontsize="small")
        ax.set_ylim(0, 1)
        ax.set_ylabel("GEMM utilisation (0-1)")
        ax.legend(fontsize="x-small", loc="upper left", bbox_to_anchor=(1.0, 1.0),
                  title="config")
    ax.set_xlabel("layer")
    ax.set_title(_title(ok, "per-layer GEMM utilisation"))
    return _save(fig, out, "utilization")


def plot_stalls(rows: Sequence[dict[str, Any]], out: Path,
                source: str = "results") -> list[Path]:
    """Per module, each config's cycles (summed over its layers) split into busy and stall
    causes, as shares of the total cycles."""
    plt = _pyplot()
    import numpy as np

    columns = ["cycles"] + [f"busy.{m}" for m in MODULES]
    ok = _need(rows, columns, "stalls", "stalls", source)
    configs, labels = _configs(ok), _labels(ok)
    totals: dict[str, dict[str, float]] = {c: defaultdict(float) for c in configs}
    for r in ok:
        t = totals[str(r["config_name"])]
        t["cycles"] += r["cycles"]
        for m in MODULES:
            t[f"busy.{m}"] += r.get(f"busy.{m}") or 0
            for part, _ in STALL_PARTS[1:]:
                t[f"stall.{m}.{part}"] += r.get(f"stall.{m}.{part}") or 0
    fig, axes = plt.subplots(len(MODULES), 1, sharex=True,
                             figsize=(max(6.0, 0.45 * len(configs) + 3), 2.2 * len(MODULES) + 1))
    x = np.arange(len(configs))
    colours = plt.get_cmap("tab10")
    for ax, m in zip(axes, MODULES, strict=True):
        bottom = np.zeros(len(configs))
        for k, (part, label) in enumerate(STALL_PARTS):
            key = f"busy.{m}" if part == "busy" else f"stall.{m}.{part}"
            share = np.array([totals[c][key] / totals[c]["cycles"] if totals[c]["cycles"]
                              else 0.0 for c in configs])
            ax.bar(x, share, 0.7, bottom=bottom, color=colours(k), label=label)
            bottom += share
        ax.set_ylim(0, 1.02)
        ax.set_ylabel(f"{m}\nshare of cycles")
    axes[0].legend(fontsize="x-small", loc="upper left", bbox_to_anchor=(1.01, 1.0),
                   title="cycles spent")
    axes[-1].set_xticks(x, [_short(labels[c], 48) for c in configs], rotation=60,
                        ha="right", rotation_mode="anchor", fontsize="x-small")
    axes[-1].set_xlabel("config")
    axes[0].set_title(_title(ok, "where the cycles go, per module"))
    return _save(fig, out, "stalls")


def plot_roofline(rows: Sequence[dict[str, Any]], out: Path,
                  source: str = "results") -> list[Path]:
    """Operational intensity (ops per DRAM byte) vs achieved GOPS, one marker per layer and
    config, with each config's compute roof and DRAM bandwidth slope."""
    plt = _pyplot()
    import numpy as np

    columns = ["cycles", "macs", "dram_bytes", "clock_mhz", "peak_macs_per_cycle",
               "dram_bytes_per_cycle"]
    # Layers without MACs (a model's residual adds) do no operations the roofs bound, and 0
    # ops per byte has no place on a log axis.
    ok = [r for r in _need(rows, columns, "roofline", "dram_bytes", source)
          if r["dram_bytes"] > 0 and r["cycles"] > 0 and r["macs"] > 0]
    if not ok:
        raise PlotError(f"{source}: the roofline plot needs rows with MACs, DRAM traffic and "
                        "cycles")
    fig, ax = plt.subplots(figsize=(8, 5.5))
    intensity = [2.0 * r["macs"] / r["dram_bytes"] for r in ok]
    xs = np.geomspace(min(intensity) / 4, max(intensity) * 4, 200)
    # Points are coloured by their roof (core shape, clock, DRAM width): in a roofline what
    # matters is which ceiling a point sits under; configs sharing a roof share a colour.
    roofs: dict[tuple[float, float], list[dict[str, Any]]] = {}
    for r in ok:
        peak = 2.0 * r["peak_macs_per_cycle"] * r["clock_mhz"] / 1000.0
        bandwidth = r["dram_bytes_per_cycle"] * r["clock_mhz"] / 1000.0
        roofs.setdefault((peak, bandwidth), []).append(r)
    colours = plt.get_cmap("tab10" if len(roofs) <= 10 else "tab20")
    for i, ((peak, bandwidth), sel) in enumerate(sorted(roofs.items())):
        colour = colours(i % colours.N)
        ax.plot(xs, np.minimum(peak, xs * bandwidth), "--", color=colour, linewidth=1)
        # Each roof says what it is: the compute peak at the right end of its flat part, the
        # bandwidth on its slope (halfway, on a log axis, to the ridge point).
        ax.text(xs[-1], peak, f"peak {peak:g} GOPS", color=colour, fontsize="x-small",
                ha="right", va="bottom")
        ridge = peak / bandwidth
        at = math.sqrt(xs[0] * min(ridge, xs[-1]))
        ax.text(at, at * bandwidth, f"{bandwidth:g} GB/s", color=colour, fontsize="x-small",
                ha="right", va="bottom")
        n = len({r["config_name"] for r in sel})
        ax.scatter([2.0 * r["macs"] / r["dram_bytes"] for r in sel], [_gops(r) for r in sel],
                   s=18, color=colour, alpha=0.85,
                   label=f"{sel[0].get('core') or '?'}, {sel[0]['dram_bytes_per_cycle']:g} "
                         f"B/cycle: {peak:g} GOPS, {bandwidth:g} GB/s ({n} config"
                         f"{'s' if n > 1 else ''})")
    ax.set_xscale("log")
    ax.set_yscale("log")
    for axis in (ax.xaxis, ax.yaxis):  # plain numbers, not "6x10^0"
        axis.set_major_formatter(_plain_ticks(minor=False))
        axis.set_minor_formatter(_plain_ticks(minor=True))
    ax.set_xlabel("operational intensity (ops per DRAM byte, 2 ops per MAC)")
    ax.set_ylabel("achieved throughput (GOPS)")
    ax.set_title(_title(ok, "roofline (dashed: peak compute and DRAM bandwidth)"))
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(fontsize="x-small", loc="upper left", bbox_to_anchor=(1.0, 1.0),
              title="roof (core, DRAM width)")
    return _save(fig, out, "roofline")


def pareto_front(points: Sequence[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point beats on both coordinates (lower is better),
    sorted by the first coordinate."""
    order = sorted(range(len(points)), key=lambda i: (points[i][0], points[i][1]))
    front: list[int] = []
    best = math.inf
    for i in order:
        if points[i][1] < best:
            front.append(i)
            best = points[i][1]
    return front


def _totals(rows: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per config: summed latency over its ok rows, and whether every row of it succeeded."""
    out: dict[str, dict[str, Any]] = {}
    for r in rows:
        c = str(r.get("config_name") or "")
        entry = out.setdefault(c, {"ms": 0.0, "complete": True, "row": r})
        if r.get("status") != "ok" or r.get("milliseconds") is None:
            entry["complete"] = False
        else:
            entry["ms"] += float(r["milliseconds"])
    return out


def _draw_front(ax: Any, points: Sequence[tuple[float, float]], label: str,
                size: int) -> list[int]:
    """``points`` in grey and their Pareto front in red, as a step line; returns the front."""
    front = pareto_front(points)
    ax.scatter([p[0] for p in points], [p[1] for p in points], s=size, color="tab:gray",
               label=label)
    fx = [points[i][0] for i in front]
    fy = [points[i][1] for i in front]
    ax.step(fx, fy, where="post", color="tab:red", linewidth=1.2)
    ax.scatter(fx, fy, s=40, color="tab:red", label="Pareto front", zorder=3)
    return front


def plot_pareto(rows: Sequence[dict[str, Any]], out: Path, area: str = "luts",
                source: str = "results") -> list[Path]:
    """Total workload latency against area, one marker per config, Pareto front highlighted.

    Configs with a failed row (invalid, or a layer that did not compile) are left out: their
    total would be an underestimate.
    """
    plt = _pyplot()

    if area not in AREA_METRICS:
        raise PlotError(f"unknown area metric {area!r}; expected one of "
                        f"{', '.join(AREA_METRICS)}")
    column = f"area.{area}"
    _need(rows, ["milliseconds", column], "pareto", "area", source)
    totals = {c: t for c, t in _totals(rows).items() if c and t["complete"]
              and t["row"].get(column) is not None}
    if not totals:
        raise PlotError(f"{source}: no config has every row ok and an {column} figure")
    names = list(totals)
    points = [(float(totals[c]["row"][column]), totals[c]["ms"]) for c in names]
    fig, ax = plt.subplots(figsize=(8, 5.5))
    front = _draw_front(ax, points, "config", 24)
    labels = _labels(t["row"] for t in totals.values())
    for i in front:
        ax.annotate(_short(labels[names[i]], 40), points[i], fontsize="x-small",
                    xytext=(4, 4), textcoords="offset points")
    target = totals[names[0]]["row"].get("area.target") or "FPGA"
    ax.set_xlabel(f"area: {AREA_METRICS[area]} ({target}, accel synth)")
    ax.set_ylabel("total latency of the workload (ms at each config's clock)")
    ax.set_title(_title(rows, f"latency vs {AREA_METRICS[area]}"))
    ax.grid(True, alpha=0.25)
    ax.legend(fontsize="small")
    return _save(fig, out, "pareto")


def plot_codesign(result: Any, device: Any, model: str, out: Path) -> list[Path]:
    """A co-design search's ranking (:class:`accel.dse.codesign.SearchResult`): predicted
    latency against LUT positions, one marker per machine that qualified, the Pareto front,
    the base config, the best and the part's LUT budget."""
    plt = _pyplot()
    ok = result.ranked
    points = [(float(m.area.lut_positions), m.latency_ms) for m in ok]
    fig, ax = plt.subplots(figsize=(8, 5.5))
    _draw_front(ax, points, f"machine that fits ({len(ok)})", 18)
    base = result.base
    if base.ok:
        ax.scatter([base.area.lut_positions], [base.latency_ms], marker="s", s=60,
                   color="tab:blue", label="base config", zorder=4)
    best = result.best
    ax.scatter([best.area.lut_positions], [best.latency_ms], marker="*", s=160, color="gold",
               edgecolor="black", label="best", zorder=5)
    ax.axvline(best.use["luts"][1], color="black", linestyle=":", linewidth=1,
               label=f"{device.name} LUTs (less the packing margin)")
    ax.set_xlabel("LUT positions (area model)")
    ax.set_ylabel(f"predicted latency (ms at {device.clock_mhz:g} MHz)")
    ax.set_title(f"co-design search: {model} on {device.name}")
    ax.grid(True, alpha=0.25)
    ax.legend(fontsize="small")
    return _save(fig, out, "pareto")


def _read_trace(path: Path) -> tuple[dict[str, list[tuple[float, float]]], float]:
    """Module -> [(start, duration)] in simulated microseconds from a Chrome trace (a run's
    fallback layers' host time taken out), and the clock (0 when the trace has none)."""
    try:
        data = json.loads(path.read_text())
        events = data["traceEvents"] if isinstance(data, dict) else data
        names = {e["tid"]: e["args"]["name"] for e in events
                 if e.get("ph") == "M" and e.get("name") == "thread_name"}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise PlotError(f"{path}: not a Chrome trace written by accel ({exc})") from None
    # A run's trace (RunReport.write_trace) puts its fallback layers' host time between the
    # accelerator layers on one axis; taken out, the module tracks are simulated time alone.
    gaps = sorted((float(e["ts"]), float(e["dur"])) for e in events
                  if e.get("ph") == "X" and names.get(e.get("tid")) == "cpu fallback")

    def simulated(ts: float) -> float:
        return ts - sum(dur for start, dur in gaps if start + dur <= ts)

    slices: dict[str, list[tuple[float, float]]] = {m: [] for m in MODULES}
    for e in events:
        if e.get("ph") == "X" and names.get(e.get("tid")) in slices:
            slices[names[e["tid"]]].append((simulated(float(e["ts"])), float(e["dur"])))
    if not any(slices.values()):
        raise PlotError(f"{path}: the trace has no fetch/load/compute/store slices")
    clock = float(data.get("otherData", {}).get("clock_mhz", 0) or 0) \
        if isinstance(data, dict) else 0.0
    return slices, clock


def plot_timeline(trace: Path, out: Path, max_cycles: int | None = None,
                  first_cycle: int = 0, title: str | None = None) -> list[Path]:
    """Gantt chart of module activity from ``trace`` (``SimStats.write_trace`` or
    ``RunReport.write_trace`` output).

    The window is ``max_cycles`` cycles from ``first_cycle`` (default: the whole run).
    ``title`` says what ran (default: the trace file's name).

    Raises
    ------
    PlotError
        Not a trace, a window of no cycles, or one with no activity in it.
    """
    if max_cycles is not None and max_cycles < 1:
        raise PlotError(f"max_cycles must be at least 1, not {max_cycles}")
    if first_cycle < 0:
        raise PlotError(f"first_cycle must be 0 or more, not {first_cycle}")
    slices, clock = _read_trace(trace)
    to_cycles = clock if clock else 1.0  # trace timestamps are microseconds at the clock
    tracks = [m for m in MODULES if slices[m]]  # the simulator records no fetch slices
    last = None if max_cycles is None else first_cycle + max_cycles
    spans: dict[str, list[tuple[float, float]]] = {}
    run_end = 0.0
    for m in tracks:
        spans[m] = []
        for ts, dur in slices[m]:
            start, stop = ts * to_cycles, (ts + dur) * to_cycles
            run_end = max(run_end, stop)
            # outside the window (an instruction of no cycles counts where it starts)
            if stop < first_cycle or (stop == first_cycle and stop > start) \
                    or (last is not None and start >= last):
                continue
            s0 = max(start, first_cycle)
            spans[m].append((s0, (stop if last is None else min(stop, last)) - s0))
    if not any(spans.values()):
        unit = "cycle" if clock else "µs"
        raise PlotError(f"{trace}: no activity from {unit} {first_cycle} on: the trace ends "
                        f"at {unit} {run_end:.0f}")
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(11, 3.2))
    colours = {"fetch": "tab:gray", "load": "tab:blue", "compute": "tab:orange",
               "store": "tab:green"}
    end = max([float(first_cycle)] + [s + d for m in tracks for s, d in spans[m]])
    for row, m in enumerate(tracks):
        busy = sum(d for _, d in spans[m])
        # A whole network's tens of thousands of rectangles: those that touch drawn as one,
        # and rasterized in the SVG (one element each took it seconds, the file megabytes).
        ax.broken_barh(_merged(spans[m], 0.0), (row - 0.38, 0.76), color=colours[m],
                       label=f"{m}: {len(spans[m]):,} instructions",
                       rasterized=len(spans[m]) > 2000)
        ax.text(1.005, row, f"{busy:,.0f} {'cycles' if clock else 'µs'} busy",
                transform=ax.get_yaxis_transform(), fontsize="x-small", va="center")
    ax.set_yticks(range(len(tracks)), tracks)
    ax.set_ylim(-0.6, len(tracks) - 0.4)
    ax.invert_yaxis()
    ax.set_xlim(first_cycle, last if last is not None else (end or 1))
    ax.set_xlabel("cycle" if clock else "time (µs)")
    window = ""
    if max_cycles is not None or first_cycle:
        window = (f" (cycles {first_cycle:,} to {last:,})" if last is not None
                  else f" (from cycle {first_cycle:,})")
    ax.set_title(f"module activity: {title or trace.stem}{window}")
    ax.legend(fontsize="x-small", loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=3)
    return _save(fig, out, "timeline")


def _merged(spans: Sequence[tuple[float, float]], gap: float) -> list[tuple[float, float]]:
    """``spans`` (start, duration) with those that overlap or lie less than ``gap`` apart
    drawn as one, in start order."""
    import numpy as np

    if not spans:
        return []
    start, duration = np.array(sorted(spans), dtype=float).T
    stop = np.maximum.accumulate(start + duration)
    first = np.flatnonzero(np.concatenate([[True], start[1:] > stop[:-1] + gap]))
    ends = stop[np.concatenate([first[1:] - 1, [len(start) - 1]])]
    return list(zip(start[first].tolist(), (ends - start[first]).tolist(), strict=True))


WAVEFORM_SIGNALS = ("*.top.load.issue", "*.top.load.retire", "*.top.compute.issue",
                    "*.top.compute.retire", "*.top.store.issue", "*.top.store.retire",
                    "*.top.l2c_token_queue.level", "*.top.arbiter.dram__req__valid", "*.top.done")
"""What ``accel waveform`` draws by default. The patterns match both engines' dumps: the
design is ``bench.top`` in Amaranth's and ``TOP.accel_sim.top`` in Verilator's. The DRAM
request is the arbiter's: Amaranth's writer gives the plain name ``top.dram__req__valid`` to the
first signal of that name it meets (fetch's) and suffixes the port's."""


WAVEFORM_MAX_SIGNALS = 64
"""``plot_waveform`` draws at most this many signals (a row of 0.45 inch each)."""


def plot_waveform(vcd: Path, patterns: Sequence[str], out: Path, first_cycle: int | None = 0,
                  cycles: int = 200, clock: str = "*.top.clk", stem: str = "waveform",
                  counter: str | None = None) -> list[Path]:
    """A logic-analyser view of the signals of ``vcd`` matching ``patterns`` over
    ``cycles`` clock cycles from ``first_cycle``.

    Cycles are counted by ``clock``'s rising edges from the dump's first. With ``counter``, a
    pattern of the design's cycle counter (``*.top.cycles``), they are program cycles instead
    (:func:`hw.waveform.first_edge_cycle`), so a window dumped from cycle 5,000 on is drawn
    at 5,000; a dump without such a signal keeps the edge count. ``first_cycle=None`` is the
    dump's first cycle.

    One-bit signals are drawn as high/low traces; wider ones as a bus with its value (hex)
    written at each change.
    """
    from hw.waveform import clock_edges, first_edge_cycle, read_vcd

    plt = _pyplot()
    found = read_vcd(vcd, [clock, *patterns], optional=[counter] if counter else ())
    clk_name = next(n for n in found if _match(n, clock))
    edges = clock_edges(found[clk_name])
    count = next((n for n in found if counter and _match(n, counter)), None)
    offset = first_edge_cycle(edges, found[count]) if count else 0
    first = offset if first_cycle is None else first_cycle
    if first < offset:
        raise PlotError(f"{vcd}: the dump starts at cycle {offset}; cycle {first} is before it")
    if offset + len(edges) <= first:
        raise PlotError(f"{vcd}: the dump has {len(edges)} clock cycles"
                        + (f" from cycle {offset}" if offset else "")
                        + f"; cycle {first} is past its end")
    last = min(first + cycles, offset + len(edges) - 1)
    names = [n for p in patterns for n in found if n not in (clk_name, count) and _match(n, p)]
    names = list(dict.fromkeys(names))  # pattern order, each signal once
    if len(names) > WAVEFORM_MAX_SIGNALS:
        raise PlotError(f"{vcd}: {len(names)} signals match {', '.join(patterns)}; at most "
                        f"{WAVEFORM_MAX_SIGNALS} fit one plot: narrow the patterns")
    fig, ax = plt.subplots(figsize=(11, 0.45 * len(names) + 1.4))
    xs = list(range(first, last + 1))
    for row, name in enumerate(names):
        # the settled value during each cycle: what the next rising edge samples
        vs = _sample(found[name].changes, [edges[c - offset + 1] - 1 for c in xs[:-1]])
        y0 = len(names) - 1 - row
        if found[name].width == 1:
            ax.step(xs, [y0 + (0.7 if v else 0.1) for v in [*vs, vs[-1]]], where="post",
                    color="tab:blue", linewidth=1)
            continue
        runs = [i for i in range(len(vs)) if i == 0 or vs[i] != vs[i - 1]] + [len(vs)]
        for i, j in itertools.pairwise(runs):
            ax.fill_between([xs[i], xs[j]], y0 + 0.1, y0 + 0.7, color="tab:green", alpha=0.18,
                            linewidth=0.8, edgecolor="tab:green")
            if j - i >= max(2, (last - first) / 60):
                ax.text(xs[i] + 0.3, y0 + 0.4, "x" if vs[i] is None else f"{vs[i]:x}",
                        fontsize="xx-small", va="center")
    # names below the design's top (bench.top.* / TOP.accel_sim.top.*), else the last parts
    short = [n.split(".top.", 1)[1] if ".top." in n else n.split(".", 2)[-1] for n in names]
    ax.set_yticks([len(names) - 1 - r + 0.4 for r in range(len(names))], short,
                  fontsize="x-small")
    ax.set_xlim(first, last)
    ax.set_ylim(-0.2, len(names))
    ax.set_xlabel("program cycle" if count else "clock cycle")
    ax.grid(True, axis="x", alpha=0.25)
    ax.set_title(f"waveform: {Path(vcd).name}, cycles {first} to {last}")
    return _save(fig, out, stem)


def _sample(changes: Sequence[tuple[int, int | None]], times: Sequence[int]) -> list[int | None]:
    """The value in effect at each of ``times`` (ascending)."""
    out: list[int | None] = []
    k, value = 0, None
    for t in times:
        while k < len(changes) and changes[k][0] <= t:
            value = changes[k][1]
            k += 1
        out.append(value)
    return out


def _match(name: str, pattern: str) -> bool:
    import fnmatch

    return fnmatch.fnmatchcase(name, pattern)


def energy_totals(rows: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per config whose every row is ok and has energy: the workload's total energy
    (``uj``), latency (``ms``) and ``cycles``, energy by component (``parts``, microjoules),
    and one of its rows (``row``, for labels and area), in the sweep's order."""
    out: dict[str, dict[str, Any]] = {}
    broken: set[str] = set()
    for r in sorted(rows, key=lambda r: r.get("point_index") or 0):
        c = str(r.get("config_name") or "")
        if r.get("status") != "ok" or r.get("energy_uj") is None \
                or r.get("milliseconds") is None:
            broken.add(c)
            continue
        entry = out.setdefault(c, {"uj": 0.0, "ms": 0.0, "cycles": 0, "row": r,
                                   "parts": dict.fromkeys((k for k, _ in ENERGY_PARTS), 0.0)})
        entry["uj"] += float(r["energy_uj"])
        entry["ms"] += float(r["milliseconds"])
        entry["cycles"] += int(r.get("cycles") or 0)
        for k, _ in ENERGY_PARTS:
            entry["parts"][k] += float(r.get(f"energy.{k}") or 0.0)
    return {c: t for c, t in out.items() if c and c not in broken}


def energy_front(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The energy-delay Pareto front of a sweep's configs (no other config has both less
    energy and less latency for the workload), by latency: each config's ``config``
    (canonical name), ``label`` (its axis values), ``uj``, ``ms`` and ``cycles``."""
    totals = energy_totals(rows)
    names = list(totals)
    labels = _labels(t["row"] for t in totals.values())
    front = pareto_front([(totals[c]["ms"], totals[c]["uj"]) for c in names])
    return [{"config": names[i], "label": labels[names[i]], "uj": totals[names[i]]["uj"],
             "ms": totals[names[i]]["ms"], "cycles": totals[names[i]]["cycles"]}
            for i in front]


def _energy_rows(rows: Sequence[dict[str, Any]], kind: str, source: str,
                 also: Sequence[str] = ()) -> dict[str, dict[str, Any]]:
    _need(rows, ["energy_uj", "milliseconds", *also], kind, "energy", source)
    totals = energy_totals(rows)
    if not totals:
        raise PlotError(f"{source}: no config has every row ok with an energy figure")
    return totals


def plot_energy(rows: Sequence[dict[str, Any]], out: Path,
                source: str = "results") -> list[Path]:
    """Each config's energy for the whole workload (its rows summed), stacked by component.

    Configs with a failed row are left out (their total would be an underestimate).
    """
    plt = _pyplot()
    import numpy as np

    totals = _energy_rows(rows, "energy", source)
    names = list(totals)
    labels = _labels(t["row"] for t in totals.values())
    fig, ax = plt.subplots(figsize=(max(6.0, 0.45 * len(names) + 3), 5.0))
    x = np.arange(len(names))
    bottom = np.zeros(len(names))
    colours = plt.get_cmap("tab10")
    for k, (part, label) in enumerate(ENERGY_PARTS):
        heights = np.array([totals[c]["parts"][part] for c in names])
        ax.bar(x, heights, 0.7, bottom=bottom, color=colours(k), label=label)
        bottom += heights
    ax.set_xticks(x, [_short(labels[c], 48) for c in names], rotation=60, ha="right",
                  rotation_mode="anchor", fontsize="x-small")
    ax.set_xlabel("config")
    ax.set_ylabel("energy of the workload (uJ)")
    ax.set_title(_title([t["row"] for t in totals.values()], "where the energy goes"))
    ax.legend(fontsize="x-small", loc="upper left", bbox_to_anchor=(1.01, 1.0),
              title="component")
    ax.grid(True, axis="y", alpha=0.25)
    return _save(fig, out, "energy")


def _front_plot(totals: dict[str, dict[str, Any]], xs: dict[str, float], xlabel: str,
                xunit: str, title: str, out: Path, stem: str) -> list[Path]:
    """Total energy (y) against ``xs`` per config, the Pareto front (both lower) marked; the
    front's configs numbered on the plot and listed beside it with their two figures."""
    plt = _pyplot()
    names = list(totals)
    points = [(xs[c], totals[c]["uj"]) for c in names]
    fig, ax = plt.subplots(figsize=(8, 5.5))
    front = _draw_front(ax, points, "config", 24)
    labels = _labels(t["row"] for t in totals.values())
    listed = []
    for k, i in enumerate(front, 1):
        ax.annotate(str(k), points[i], fontsize="small", color="tab:red", xytext=(4, 3),
                    textcoords="offset points")
        listed.append(f"{k}  {_short(labels[names[i]], 48)}: {points[i][0]:.4g} {xunit}, "
                      f"{points[i][1]:.4g} uJ")
    ax.text(1.02, 1.0, "Pareto front\n" + "\n".join(listed), transform=ax.transAxes,
            va="top", fontsize="x-small")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("energy of the workload (uJ)")
    ax.set_title(_title([t["row"] for t in totals.values()], title))
    ax.grid(True, alpha=0.25)
    ax.legend(fontsize="small")
    return _save(fig, out, stem)


def plot_energy_delay(rows: Sequence[dict[str, Any]], out: Path,
                      source: str = "results") -> list[Path]:
    """Total energy against total latency, one marker per config, the Pareto front (lower
    energy and lower latency) marked and labelled."""
    totals = _energy_rows(rows, "energy_delay", source)
    return _front_plot(totals, {c: t["ms"] for c, t in totals.items()},
                       "total latency of the workload (ms at each config's clock)", "ms",
                       "energy vs latency", out, "energy_delay")


def plot_energy_area(rows: Sequence[dict[str, Any]], out: Path, area: str = "luts",
                     source: str = "results") -> list[Path]:
    """Total energy against area (``area.<area>`` from ``accel synth``), Pareto front
    marked."""
    if area not in AREA_METRICS:
        raise PlotError(f"unknown area metric {area!r}; expected one of "
                        f"{', '.join(AREA_METRICS)}")
    column = f"area.{area}"
    _need(rows, [column], "energy_area", "area", source)
    totals = {c: t for c, t in _energy_rows(rows, "energy_area", source).items()
              if t["row"].get(column) is not None}
    if not totals:
        raise PlotError(f"{source}: no config has every row ok with energy and an {column} "
                        "figure")
    target = next(iter(totals.values()))["row"].get("area.target") or "FPGA"
    return _front_plot(totals, {c: float(t["row"][column]) for c, t in totals.items()},
                       f"area: {AREA_METRICS[area]} ({target}, accel synth)", area,
                       f"energy vs {AREA_METRICS[area]}", out, "energy_area")


def plot_all(results_dir: Path, kinds: Sequence[str] = KINDS, out: Path | None = None,
             area: str = "luts", trace: Path | None = None,
             max_cycles: int | None = None, failed: list[str] | None = None,
             first_cycle: int = 0) -> tuple[list[Path], list[str]]:
    """Draw ``kinds`` from ``results_dir`` into ``out`` (default ``results_dir/plots``).

    ``results_dir`` is a sweep's folder (``results.csv``, ``traces/``) or an ``accel run
    --out`` folder (``report.json``, ``trace.json``), from which the utilisation, stalls and
    timeline plots can be drawn (:func:`run_rows`).

    Returns the written paths and one note per kind skipped because the results lack what it
    needs; that is only allowed when several kinds were asked for: a single requested kind
    that cannot be drawn raises :class:`PlotError`. A kind that fails otherwise (a bug) does
    not stop the others: its one-line note goes to ``failed`` when given, else to the
    skipped ones.
    """
    from accel.dse import read_results
    from accel.dse.results import RESULTS_CSV

    results_dir = Path(results_dir)
    out = Path(out) if out is not None else results_dir / "plots"
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        raise PlotError(f"unknown plot kind(s) {', '.join(unknown)}; expected some of "
                        f"{', '.join(KINDS)}")
    run = not (results_dir / RESULTS_CSV).exists() and (results_dir / RUN_REPORT).exists()
    rows: list[dict[str, Any]] | None = None
    if run:
        rows = run_rows(results_dir)
        source = str(results_dir / RUN_REPORT)
    elif any(k != "timeline" for k in kinds) or trace is None:
        rows = read_results(results_dir)
        source = str(results_dir / RESULTS_CSV)
    written: list[Path] = []
    skipped: list[str] = []
    for kind in kinds:
        try:
            if run and kind in ("roofline", "pareto"):
                raise PlotError(f"the {kind} plot needs a sweep's results ({RESULTS_CSV}); "
                                f"{results_dir} holds one accel run")
            if kind == "timeline":
                path, title = _timeline_source(results_dir, rows or [], trace, run)
                written += plot_timeline(path, out, max_cycles, first_cycle, title)
            elif kind == "pareto":
                written += plot_pareto(rows or [], out, area, source)
            elif kind == "energy_area":
                written += plot_energy_area(rows or [], out, area, source)
            else:
                # looked up when called, so that each kind is the module's current function
                draw = {"utilization": plot_utilization, "stalls": plot_stalls,
                        "roofline": plot_roofline, "energy": plot_energy,
                        "energy_delay": plot_energy_delay}[kind]
                written += draw(rows or [], out, source)
        except PlotError as exc:
            if len(kinds) == 1:
                raise
            skipped.append(f"{kind}: {exc}")
        except Exception as exc:
            note = f"the {kind} plot failed: {type(exc).__name__}: {' '.join(str(exc).split())}"
            (failed if failed is not None else skipped).append(note)
    return written, skipped


RUN_REPORT = "report.json"
RUN_TRACE = "trace.json"


def run_rows(folder: Path) -> list[dict[str, Any]]:
    """The accelerator layers of an ``accel run --out`` folder's ``report.json`` as rows of
    the sweep's schema (one point per layer; the model as the sweep's name), so the sweep's
    utilisation and stalls plots draw them.

    Raises
    ------
    PlotError
        ``report.json`` is missing or is not an accel run report.
    """
    from accel.dse.results import stall_columns

    path = Path(folder) / RUN_REPORT
    try:
        data = json.loads(path.read_text())
        rows = []
        for k, layer in enumerate(data["layers"]):
            if layer["target"] != "accel" or layer.get("cycles") is None:
                continue
            kib = layer.get("dram_kib")
            row = {"point_id": layer["name"], "point_index": k, "sweep": data["model"],
                   "config_name": data["config"], "core": None, "workload": "",
                   "layer": layer["name"], "backend": data["backend"], "status": "ok",
                   "error": "", "clock_mhz": data["clock_mhz"], "cycles": layer["cycles"],
                   "milliseconds": layer["sim_ms"], "macs": layer["macs"],
                   "gemm_utilization": layer["gemm_utilization"],
                   "dram_bytes": None if kib is None else round(kib * 1024)}
            if layer.get("busy"):
                row.update(stall_columns(layer["busy"], layer["stalls"]))
            rows.append(row)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise PlotError(f"{path}: not a report written by accel run ({exc})") from None
    return rows


def _timeline_source(results_dir: Path, rows: Sequence[dict[str, Any]], trace: Path | None,
                     run: bool) -> tuple[Path, str | None]:
    """The trace the timeline draws, and what ran in it in words (None: the file's name)."""
    if run:
        path = trace or results_dir / RUN_TRACE
        if not path.exists():
            raise PlotError(f"{path}: no trace (accel run writes one with --out on the sim "
                            "and rtl backends)")
        return path, f"{rows[0]['sweep']} on {rows[0]['config_name']}" if rows else None
    if trace is not None:
        row = next((r for r in rows if r.get("point_id") == trace.stem), None)
        return trace, _point_title(rows, row) if row is not None else None
    path, row = _first_trace(results_dir, rows)
    return path, _point_title(rows, row) if row is not None else None


def _point_title(rows: Sequence[dict[str, Any]], row: dict[str, Any]) -> str:
    """What a sweep point ran, and on which config: ``resnet18 (whole model) on <config>``,
    ``C2 on 1x8x8 wgt=64K``."""
    config = str(row.get("config_name") or "")
    label = _labels(r for r in rows if r.get("config_name") == config).get(config, config)
    core = str(row.get("core") or "")
    if label != config and core and not label.startswith(core):
        label = f"{core} {label}"  # the sweep's axis values alone do not say which core
    layers = [r for r in rows if r.get("point_id") == row.get("point_id")]
    what = f"{row.get('workload')} (whole model)" if len(layers) > 1 else _layer_key(row)
    return f"{what} on {label}"


def _first_trace(results_dir: Path, rows: Sequence[dict[str, Any]]
                 ) -> tuple[Path, dict[str, Any] | None]:
    """The trace of the ok row with the most cycles (the most interesting timeline), and
    that row."""
    folder = results_dir / "traces"
    candidates = sorted(_ok(rows), key=lambda r: -(r.get("cycles") or 0))
    for r in candidates:
        path = folder / f"{r['point_id']}.json"
        if path.exists():
            return path, r
    found = sorted(folder.glob("*.json")) if folder.is_dir() else []
    if found:
        return found[0], None
    raise PlotError(f"{folder}: no traces (run the sweep with 'traces: true' in the spec, "
                    "or pass --trace FILE)")
