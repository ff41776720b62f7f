"""Executables: a partitioned graph whose accelerator nodes are compiled, run node by node.

Accelerator nodes (``target == "accel"``) run as compiled programs on a device backend
(:mod:`runtime.backends`), compiled, laid out and measured as their registry entry says
(:mod:`compiler.ops.registry`); their outputs stay in the accelerator's blocked layout while
the next node is also on the accelerator, and are converted only at partition boundaries
(``layout_pack`` / ``layout_unpack`` nodes, or on demand). Every other node runs on the fallback
kernels (numpy on the CPU, or CuPy on a GPU; :mod:`runtime.fallback`). Each node's cycles,
utilisation, roofline bound and efficiency, DRAM traffic, stalls and energy (accelerator) or
wall time (fallback) go into a :class:`RunReport`.

Energy (``sim`` and ``rtl``; :mod:`accel.machine.energy` with the config's table) is the
accelerator's only: the fallback layers' is not estimated. Picojoules per MAC and TOPS/W count
the network's MACs (a layer's logical MACs, not the padded ones the GEMM core performs).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from accel.machine.config import HwConfig
from accel.machine.energy import COMPONENTS
from compiler.graph.ir import Graph, GraphError, Node, TensorType
from compiler.graph.ops import blocked_layout, parse_layout, physical_shape
from compiler.graph.passes.common import node_macs
from compiler.graph.reference import run_node, to_logical, to_physical
from compiler.ops.accel_op import AccelOp, Block, Operand, roofline_efficiency
from compiler.ops.compiled import CompiledOp
from compiler.ops.registry import accel_op
from runtime.backends import (
    blas_threads,
    cancel_prefetch,
    fallback_kernels,
    find_backend,
    prefetch_timing,
    run_program,
)
from runtime.fallback import fallback_kernel

__all__ = ["LAYER_CSV_COLUMNS", "Executable", "LayerReport", "RunReport"]

Progress = Callable[[int, int, str], None]


@dataclass
class LayerReport:
    """One node's execution (every field is defined, with its unit, in docs/reference.md).

    Two times, never mixed: ``sim_ms`` is the simulated time of an accelerator layer at the
    config's clock (``cycles`` / clock; None on ``fsim`` and for fallback layers), ``host_ms``
    the wall time this process spent on the node (simulation or fallback kernel included).
    ``gemm_utilization`` is None where there are no MACs (an ALU-only layer such as a
    residual add) or no cycles. ``dram_kib`` is the DRAM traffic in KiB (1024 bytes);
    ``dram_bytes_per_cycle`` all the channel's bytes (instruction fetch included) per cycle and
    ``dram_bandwidth_share`` that against the peak. ``stalls`` and ``busy`` are cycles per
    module (timing simulator only).
    """

    name: str
    op: str
    target: str
    input_shapes: list[list[int]]
    output_shape: list[int]
    macs: int
    cycles: int | None = None
    sim_ms: float | None = None
    host_ms: float = 0.0
    gemm_utilization: float | None = None
    bound_cycles: float | None = None
    """Roofline bound (ROOFLINE.md) of an accelerator layer, in cycles."""
    roofline_efficiency: float | None = None
    """``bound_cycles / cycles`` (None without cycles)."""
    dram_kib: float | None = None
    dram_bytes_per_cycle: float | None = None
    dram_bandwidth_share: float | None = None
    largest_stall: str | None = None
    stalls: dict[str, dict[str, int]] = field(default_factory=dict)
    busy: dict[str, int] = field(default_factory=dict)
    check: bool | None = None
    energy_uj: float | None = None
    """The accelerator's energy for this layer (None on fsim and for fallback layers)."""
    pj_per_mac: float | None = None
    """``energy_uj`` per MAC of the layer (None without MACs)."""
    energy: dict[str, float] = field(default_factory=dict)
    """Microjoules by component (:data:`accel.machine.energy.COMPONENTS`)."""


LAYER_CSV_COLUMNS = ("name", "op", "target", "input_shapes", "output_shape", "macs", "cycles",
                     "sim_ms", "host_ms", "gemm_utilization", "bound_cycles",
                     "roofline_efficiency", "dram_kib", "dram_bytes_per_cycle",
                     "dram_bandwidth_share", "largest_stall", "check", "energy_uj", "pj_per_mac")
"""The columns of ``layers.csv``: every :class:`LayerReport` field but the per-module dicts
(``energy``'s components follow, as ``energy_<component>_uj``)."""


@dataclass
class RunReport:
    """A whole network's run: per-layer rows and totals."""

    model: str
    config: str
    backend: str
    fallback: str
    clock_mhz: float
    layers: list[LayerReport]
    check: bool | None = None
    memory_plan: dict[str, Any] = field(default_factory=dict)
    traces: list[tuple[str, int, Any]] = field(default_factory=list, repr=False)
    run_host_ms: float = 0.0
    """Host wall time of the whole run (every layer, simulation and fallback, and the
    checks)."""
    batch: int = 1
    """Inferences in the run (the input's batch): energy per inference divides by it."""

    @property
    def accel_cycles(self) -> int:
        return sum(layer.cycles or 0 for layer in self.layers if layer.target == "accel")

    @property
    def accel_sim_ms(self) -> float:
        """Simulated time of the accelerator layers at the config's clock."""
        return self.accel_cycles / (self.clock_mhz * 1000.0)

    @property
    def bound_cycles(self) -> float:
        """Sum of the roofline bounds of the accelerator layers."""
        return sum(layer.bound_cycles or 0.0 for layer in self.layers if layer.target == "accel")

    @property
    def roofline_efficiency(self) -> float | None:
        """Sum of the accelerator layers' bounds over the sum of their cycles (ROOFLINE.md);
        None without cycles (fsim)."""
        return roofline_efficiency(self.bound_cycles, self.accel_cycles)

    @property
    def fallback_host_ms(self) -> float:
        """Host wall time of the fallback layers."""
        return sum(layer.host_ms for layer in self.layers if layer.target != "accel")

    @property
    def host_ms(self) -> float:
        """Host wall time of every layer (simulation included)."""
        return sum(layer.host_ms for layer in self.layers)

    @property
    def offloaded_mac_share(self) -> float:
        total = sum(layer.macs for layer in self.layers)
        accel = sum(layer.macs for layer in self.layers if layer.target == "accel")
        return accel / total if total else 0.0

    def energy_totals(self) -> dict[str, Any]:
        """The accelerator's energy over the run: ``energy_uj``, ``energy_uj_per_inference``,
        ``energy_components_uj``, ``pj_per_mac`` and ``tops_per_w`` (over the accelerated
        layers' MACs, two ops each) and ``power_mw`` at the config's clock; all None when the
        backend gives no energy (fsim)."""
        accel = [layer for layer in self.layers if layer.target == "accel"]
        if not accel or any(layer.energy_uj is None for layer in accel):
            return dict.fromkeys(("energy_uj", "energy_uj_per_inference",
                                  "energy_components_uj", "pj_per_mac", "tops_per_w",
                                  "power_mw"))
        uj = sum(layer.energy_uj or 0.0 for layer in accel)
        macs = sum(layer.macs for layer in accel)
        seconds = self.accel_cycles / (self.clock_mhz * 1e6)
        return {
            "energy_uj": uj,
            "energy_uj_per_inference": uj / max(self.batch, 1),
            "energy_components_uj": {c: sum(layer.energy.get(c, 0.0) for layer in accel)
                                     for c in COMPONENTS},
            "pj_per_mac": uj * 1e6 / macs if macs else None,
            "tops_per_w": 2 * macs / (uj * 1e-6) / 1e12 if uj else None,
            "power_mw": uj * 1e-6 / seconds * 1e3 if seconds else None,
        }

    def totals(self) -> dict[str, Any]:
        return {
            "accel_cycles": self.accel_cycles if self.backend != "fsim" else None,
            "accel_cycles_per_inference": (self.accel_cycles / self.batch
                                           if self.backend != "fsim" else None),
            "accel_sim_ms": self.accel_sim_ms if self.backend != "fsim" else None,
            "bound_cycles": self.bound_cycles,
            "roofline_efficiency": (self.roofline_efficiency if self.backend != "fsim"
                                    else None),
            "fallback_host_ms": self.fallback_host_ms,
            "host_ms": self.host_ms,
            "run_host_ms": self.run_host_ms,
            "fallback_host_share": (self.fallback_host_ms / self.run_host_ms
                                    if self.run_host_ms else None),
            "offloaded_mac_share": self.offloaded_mac_share,
            "layers": len(self.layers),
            "accel_layers": sum(layer.target == "accel" for layer in self.layers),
            "batch": self.batch,
            **self.energy_totals(),
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model, "config": self.config, "backend": self.backend,
            "fallback": self.fallback, "clock_mhz": self.clock_mhz, "check": self.check,
            "totals": self.totals(), "memory_plan": self.memory_plan,
            "layers": [asdict(layer) for layer in self.layers],
        }

    def write_json(self, path: str | Path) -> None:
        _atomic_write(Path(path), json.dumps(self.to_dict(), indent=2))

    def write_csv(self, path: str | Path) -> None:
        import csv
        import io

        cols = list(LAYER_CSV_COLUMNS)
        parts = [f"energy_{c}_uj" for c in COMPONENTS]
        buf = io.StringIO()
        writer = csv.writer(buf)
        writer.writerow(cols + parts)
        for layer in self.layers:
            row = asdict(layer)
            writer.writerow(["x".join(map(str, s)) if k == "output_shape" else
                             ";".join("x".join(map(str, t)) for t in row[k])
                             if k == "input_shapes" else row[k] for k in cols
                             for s in [row[k]]]
                            + [layer.energy.get(c) for c in COMPONENTS])
        _atomic_write(Path(path), buf.getvalue())

    def write_trace(self, path: str | Path) -> None:
        """One Perfetto trace of the run in order: accelerator layers on the module tracks at
        the config's clock (and a ``layers`` track slice for each), fallback layers (or one
        whose backend kept no timeline) on a ``cpu fallback`` track by host time, each starting
        where the one before ended (``accel plot``'s timeline takes the fallback's time out to
        count cycles). The clock in ``otherData`` lets readers turn the module tracks'
        microseconds back into cycles, as in a single program's trace.

        The layers' slices and counters are streamed by :class:`sim.stats.TraceWriter` rather
        than built as one dict per event and passed to ``json.dumps`` (ResNet-18's trace: 4.4 s
        that way, 0.4 s this way on a 2-core machine, ``benchmarks/outputs.py``).
        """
        from sim.stats import SimStats, TraceWriter, trace_metadata

        us_per_cycle = 1.0 / self.clock_mhz
        offset_us = 0.0
        cpu_tid = 10
        layers = {layer.name: layer for layer in self.layers}
        written = {cpu_tid}  # the tids of the metadata events written (None: the process's)
        with TraceWriter(path, {"cycles": self.accel_cycles,
                                "clock_mhz": self.clock_mhz}) as out:
            out.event({"ph": "M", "pid": 1, "tid": cpu_tid, "name": "thread_name",
                       "args": {"name": "cpu fallback"}})
            for name, _, stats in self.traces:
                layer = layers[name]
                if stats is None:
                    out.event({"ph": "X", "pid": 1, "tid": cpu_tid, "name": name,
                               "ts": offset_us, "dur": layer.host_ms * 1000.0,
                               "args": {"op": layer.op, "host_ms": layer.host_ms}})
                    offset_us += layer.host_ms * 1000.0
                    continue
                events = stats.trace_events() if not isinstance(stats, SimStats) else None
                for e in events if events is not None else trace_metadata():
                    if e["ph"] == "M":
                        if e.get("tid") not in written:
                            written.add(e.get("tid"))
                            out.event(e)
                    else:  # a stats object of another kind: its own event dicts
                        out.event({**e, "ts": e["ts"] + offset_us} if "ts" in e else e)
                if events is None:
                    out.stats(stats, offset_us)
                out.event({"ph": "X", "pid": 1, "tid": 9, "name": name, "ts": offset_us,
                           "dur": (layer.cycles or 0) * us_per_cycle,
                           "args": {"op": layer.op, "cycles": layer.cycles}})
                offset_us += (layer.cycles or 0) * us_per_cycle
            out.event({"ph": "M", "pid": 1, "tid": 9, "name": "thread_name",
                       "args": {"name": "layers"}})

    def plot_utilization(self, path: str | Path) -> Path:
        """Per accelerator layer its GEMM utilisation, and below it the compute module's stall
        causes as shares of the layer's cycles (``accel run --out``'s ``utilization.png``).

        Drawn for speed (a whole network's bars in 0.4 s rather than 1 s): a figure without
        pyplot; one collection per series rather than a patch per bar; the layer names as plain
        texts rather than ticks (each tick makes lines and texts of its own); margins measured
        from those texts and the legend rather than ``bbox_inches="tight"``'s extra drawing
        pass; fast PNG compression.
        """
        import numpy as np
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.collections import PolyCollection
        from matplotlib.figure import Figure
        from matplotlib.patches import Patch

        accel = [layer for layer in self.layers if layer.target == "accel"]
        n = len(accel)
        width, height = max(6.0, 0.45 * n + 2), 7.0
        fig = Figure(figsize=(width, height), dpi=110)
        canvas = FigureCanvasAgg(fig)
        ax1, ax2 = fig.subplots(2, 1)
        x = np.arange(n, dtype=float)

        def bars(ax: Any, bottom: Any, top: Any, colour: str) -> None:
            left, right = x - 0.4, x + 0.4
            corners = [(left, bottom), (left, top), (right, top), (right, bottom)]
            ax.add_collection(PolyCollection(
                np.stack([np.stack(c, axis=1) for c in corners], axis=1),
                facecolors=colour, edgecolors="none"), autolim=False)

        bars(ax1, np.zeros(n), np.array([layer.gemm_utilization or 0.0 for layer in accel]),
             "tab:blue")
        ax1.set_ylabel("GEMM utilisation (0-1)")
        ax1.set_title(f"{self.model} on {self.config} ({self.backend}): per-layer "
                      "utilisation", y=1.0, pad=6)  # placed: no search for what it might cover
        causes = sorted({c for layer in accel for c in layer.stalls.get("compute", {})})
        bottom = np.zeros(n)
        handles = []
        for k, cause in enumerate(causes):
            share = np.array([layer.stalls.get("compute", {}).get(cause, 0)
                              / max(layer.cycles or 1, 1) for layer in accel])
            bars(ax2, bottom, bottom + share, f"C{k % 10}")
            bottom = bottom + share
            handles.append(Patch(color=f"C{k % 10}", label=cause))
        ax2.set_ylabel("compute stall share of cycles")
        for ax in (ax1, ax2):
            ax.set_xlim(-0.6, n - 0.4)
            ax.set_ylim(0, 1)
            ax.set_xticks([])
        # Outside the axes: inside, it covered the last layers' bars.
        legend = ax2.legend(handles=handles, fontsize="small", loc="upper left",
                            bbox_to_anchor=(1.01, 1.0), title="compute stalls") if causes else None
        names = [ax2.text(i, -0.015, layer.name, rotation=70, ha="center", va="top",
                          fontsize="small", transform=ax2.get_xaxis_transform())
                 for i, layer in enumerate(accel)]  # where tick labels would stand
        # Margins from what sticks out of the axes: the layer names below, the legend right.
        renderer = canvas.get_renderer()
        below = max([t.get_window_extent(renderer).height for t in names], default=0.0)
        ax2.set_xlabel("layer", labelpad=below * 72 / fig.dpi + 6)
        right = legend.get_window_extent(renderer).width / fig.dpi + 0.3 if legend else 0.3
        fig.subplots_adjust(left=0.85 / width, right=max(1 - right / width, 0.4),
                            top=1 - 0.4 / height, hspace=0.12,
                            bottom=min((below / fig.dpi + 0.55) / height, 0.5))
        path = Path(path)
        tmp = path.with_name(f".{path.stem}.tmp{path.suffix}")
        fig.savefig(tmp, format="png", pil_kwargs={"compress_level": 1})
        tmp.replace(path)
        return path

def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


class Executable:
    """A compiled network for one config.

    Parameters
    ----------
    graph
        An integer graph whose nodes carry ``attrs["target"]`` (``"accel"`` or ``"cpu"``; a
        missing target means cpu).
    cfg
        The hardware the accelerator nodes are compiled for.
    knobs
        Optional per-node knobs (node name -> knobs).
    tuning_log
        Optional tuning log (:class:`compiler.ops.tuning_log.TuningLog` or path): accelerator
        nodes without explicit knobs use the fastest knobs it holds for their workload on
        ``cfg``, else the heuristic's.

    progress
        Called as ``progress(k, n, name)`` before compiling each of the ``n`` accelerator
        nodes, and with ``k == n`` at the end (a progress display).

    Raises
    ------
    GraphError
        A node marked ``accel`` whose operator has no registry entry.
    """

    def __init__(self, graph: Graph, cfg: HwConfig, knobs: dict[str, Any] | None = None,
                 tuning_log: Any = None, progress: Progress | None = None) -> None:
        graph.verify()
        self.graph = graph
        self.cfg = cfg
        self.compiled: dict[str, CompiledOp] = {}
        self.packed: dict[str, dict[str, np.ndarray]] = {}
        self.entries: dict[str, AccelOp] = {}
        self.workloads: dict[str, Any] = {}
        """Each accelerator node's logical workload (its compiled one may be a physical view
        of the same bytes, ``AccelOp.physical``)."""
        knobs = knobs or {}
        if tuning_log is not None:
            from compiler.ops.tuning_log import as_log

            tuning_log = as_log(tuning_log)  # read once for every node
        accel_nodes = [node for node in graph.nodes if node.attrs.get("target") == "accel"]
        for k, node in enumerate(accel_nodes):
            if progress is not None:
                progress(k, len(accel_nodes), node.name)
            entry = accel_op(node.op)
            if entry is None:
                raise GraphError(f"{graph.name}: node {node.name}: {node.op} cannot run on the "
                                 "accelerator (no registered accelerator operator)")
            wl = entry.workload(node, graph)
            self.entries[node.name] = entry
            self.workloads[node.name] = wl
            self.compiled[node.name] = entry.compile(wl, cfg, knobs.get(node.name), tuning_log)
            self.packed[node.name] = entry.constants(wl, node, graph, cfg)
        if progress is not None:
            progress(len(accel_nodes), len(accel_nodes), "done")

    # ------------------------------------------------------------------ running
    def run(
        self,
        inputs: np.ndarray | dict[str, np.ndarray],
        backend: str = "sim",
        fallback: str = "cpu",
        check: bool = False,
        trace: bool = False,
        progress: Progress | None = None,
        layer_options: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> tuple[dict[str, np.ndarray], RunReport]:
        """Run the network; return its outputs by name and the report.

        With ``check`` every node's output is compared with the numpy kernels applied to the
        same inputs (and the report's ``check`` is the conjunction). ``layer_options`` gives
        backend options (``BackendCaps.options``) for named accelerator layers, such as
        ``{"layer1.0.conv1": {"vcd": VcdDump(...)}}`` with ``rtl``.

        Raises
        ------
        ValueError
            Unknown backend or fallback, inputs of the wrong shape or dtype, or layer options
            for a layer that does not run on the accelerator, or that the backend lacks.
        """
        started = time.perf_counter()
        device = find_backend(backend)
        layer_options = dict(layer_options or {})
        for name, options in layer_options.items():
            if name not in self.compiled:
                if any(node.name == name for node in self.graph.nodes):
                    raise ValueError(f"{self.graph.name}: layer {name!r} does not run on the "
                                     "accelerator")
                known = list(self.compiled)
                raise ValueError(f"{self.graph.name}: no accelerator layer {name!r}; they are "
                                 f"{', '.join(known[:6])}"
                                 + (f", ... ({len(known)} in all)" if len(known) > 6 else ""))
            device.caps.check_options(dict(options))
        kernels = fallback_kernels(fallback)
        reference = fallback_kernels("cpu") if check else None
        g = self.graph
        if isinstance(inputs, np.ndarray):
            if len(g.inputs) != 1:
                raise ValueError(f"{g.name} has {len(g.inputs)} inputs; pass a dict")
            inputs = {g.inputs[0]: inputs}
        env: dict[str, np.ndarray] = {}
        for name in g.inputs:
            want = g.values[name]
            if name not in inputs:
                raise ValueError(f"{g.name}: missing input {name!r}")
            value = np.asarray(inputs[name])
            if tuple(value.shape) != want.shape or value.dtype != np.dtype(want.dtype):
                raise ValueError(f"{g.name}: input {name!r} must be {want.dtype} of shape "
                                 f"{want.shape}, got {value.dtype} of shape {value.shape}")
            env[name] = value
        try:
            worker = device.caps.name == "sim" and prefetch_timing(
                [op.program for op in self.compiled.values()], self.cfg, trace)
            with blas_threads(1 if worker else None):
                return self._run_nodes(env, (backend, fallback), device, kernels, reference,
                                       check, trace, progress, layer_options, started)
        finally:
            # An error or Ctrl-C: the timings of later layers are not needed. Else the worker
            # has delivered them all and waits for its end: joined here, not left to the
            # interpreter's exit (which, collecting the pool late, prints an ignored error).
            cancel_prefetch()

    def _run_nodes(self, env: dict[str, np.ndarray], names: tuple[str, str], device: Any,
                   kernels: Any, reference: Any, check: bool, trace: bool,
                   progress: Progress | None, layer_options: Mapping[str, Mapping[str, Any]],
                   started: float) -> tuple[dict[str, np.ndarray], RunReport]:
        """Run every node in order (:meth:`run`'s body); ``names``: backend and fallback."""
        backend, fallback = names
        g = self.graph
        report = RunReport(g.name, self.cfg.name, backend, fallback, self.cfg.clock_mhz, [],
                           memory_plan=dict(g.attrs.get("memory_plan", {})),
                           batch=int(g.values[g.inputs[0]].shape[0]) if g.inputs else 1)
        checks: list[bool] = []
        for k, node in enumerate(g.nodes):
            if progress is not None:
                progress(k, len(g.nodes), node.name)
            layer, stats = self._run_node(node, env, device, kernels, trace,
                                          layer_options.get(node.name, {}))
            if reference is not None:
                layer.check = self._check_node(node, env, reference)
                checks.append(layer.check)
            report.layers.append(layer)
            report.traces.append((node.name, k, stats))
        if progress is not None:
            progress(len(g.nodes), len(g.nodes), "done")
        report.check = all(checks) if check else None
        outputs = {name: self._logical(name, env[name]) for name in g.outputs}
        report.run_host_ms = (time.perf_counter() - started) * 1000.0
        return outputs, report

    def reference(self, inputs: np.ndarray | dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The numpy reference network: every node, accelerator ones included, on the numpy
        kernels in plain layouts."""
        g = self.graph
        env = dict(inputs) if isinstance(inputs, dict) else {g.inputs[0]: inputs}
        k = fallback_kernels("cpu")
        for node in g.nodes:
            args = [env[v] for v in node.inputs]
            kernel = fallback_kernel(node.op)
            if node.op in ("layout_pack", "layout_unpack"):
                env[node.outputs[0]] = args[0]  # the reference keeps every value plain
            elif kernel is not None:
                env[node.outputs[0]] = kernel(k, node, g, args)
            else:
                env[node.outputs[0]] = run_node(node, args, g)
        return {name: env[name] for name in g.outputs}

    def _logical(self, name: str, value: np.ndarray) -> np.ndarray:
        """``value`` in its plain layout (NCHW / NC), unpacking a blocked one."""
        return to_logical(value, self.graph.values[name])

    def _run_node(self, node: Node, env: dict[str, np.ndarray], device: Any, kernels: Any,
                  trace: bool, options: Mapping[str, Any]) -> tuple[LayerReport, Any]:
        g = self.graph
        out_t = g.values[node.outputs[0]]
        layer = LayerReport(node.name, node.op, node.attrs.get("target", "cpu"),
                            [list(g.values[v].shape) for v in node.inputs],
                            list(out_t.shape), node_macs(node, g))
        start = time.perf_counter()
        layer, stats = self._run_layer(node, env, device, kernels, trace, options, layer)
        layer.host_ms = (time.perf_counter() - start) * 1000.0
        return layer, stats

    def _run_layer(self, node: Node, env: dict[str, np.ndarray], device: Any, kernels: Any,
                   trace: bool, options: Mapping[str, Any], layer: LayerReport
                   ) -> tuple[LayerReport, Any]:
        """Run one node on the device or the fallback; fill ``layer``'s device figures."""
        g = self.graph
        out_t = g.values[node.outputs[0]]
        if layer.target == "accel":
            op = self.compiled[node.name]
            entry = self.entries[node.name]
            args = dict(self.packed[node.name])
            for v, operand in zip(node.inputs, entry.inputs, strict=True):
                args[operand.region] = self._operand(env[v], g.values[v], operand, op.workload)
            image = op.dram(**args)
            result = run_program(op.program, image, config=self.cfg,
                                 backend=device.caps.name, trace=trace, **options)
            region = op.program.regions["out"]
            out_blocked = image.read("out", "int8", region.shape)
            if entry.unpack is not None:
                logical = entry.unpack(out_blocked, op.workload, self.workloads[node.name],
                                       self.cfg).reshape(out_t.shape)
                env[node.outputs[0]] = to_physical(logical, out_t)
            else:
                env[node.outputs[0]] = self._from_blocked(out_blocked, out_t,
                                                          entry.output_image)
            stats = result.stats
            layer.bound_cycles = entry.bound(self.workloads[node.name], self.cfg)
            energy = result.energy(self.cfg)
            if energy is not None:
                layer.energy_uj = energy.total_uj
                layer.pj_per_mac = energy.total_pj / layer.macs if layer.macs else None
                layer.energy = {c: v * 1e-6 for c, v in energy.components.items()}
            if device.caps.timed:
                layer.cycles = result.cycles
                layer.sim_ms = result.cycles / (self.cfg.clock_mhz * 1000.0)
                if layer.macs:  # an ALU-only layer has no GEMM to utilise
                    layer.gemm_utilization = layer.macs / (result.cycles *
                                                           self.cfg.peak_macs_per_cycle)
                layer.roofline_efficiency = roofline_efficiency(layer.bound_cycles,
                                                                result.cycles)
            if not device.caps.module_stats:
                d = stats.to_dict()
                moved = d.get("dram_bytes_read", 0) + d.get("dram_bytes_written", 0) \
                    if "dram_bytes_read" in d else sum(stats.bytes_loaded.values()) \
                    + stats.bytes_stored
                layer.dram_kib = moved / 1024.0
                return layer, None
            if device.caps.timed:
                moved = sum(stats.dram_loaded.values()) + stats.dram_stored
                layer.dram_kib = moved / 1024.0
                # All of the channel's bytes (instruction fetch included) against its peak.
                layer.dram_bytes_per_cycle = stats.dram_bytes_per_cycle
                layer.dram_bandwidth_share = stats.dram_bandwidth_share
                layer.stalls = {m: dict(s.stalls) for m, s in stats.modules.items()}
                layer.busy = {m: int(s.busy) for m, s in stats.modules.items()}
                compute = stats.modules["compute"]
                layer.largest_stall = compute.largest_stall()
                return layer, stats
            return layer, None
        env[node.outputs[0]] = self._fallback(node, env, kernels)
        return layer, None

    def _blocked_type(self, t: TensorType, block: int, image: bool) -> TensorType:
        return TensorType(t.shape, t.dtype,
                          blocked_layout(len(t.shape), self.cfg.batch, block, image))

    def _from_blocked(self, out: np.ndarray, t: TensorType, image: bool) -> np.ndarray:
        """The accelerator's output region as value ``t`` is stored: blocked by ``block_out``
        when its type is blocked, else unpacked to its logical shape."""
        if parse_layout(t.layout) is not None:
            return out.reshape(physical_shape(t))
        blocked = self._blocked_type(t, self.cfg.block_out, image)
        return to_logical(out.reshape(physical_shape(blocked)), blocked)

    def _operand(self, x: np.ndarray, t: TensorType, operand: Operand, wl: Any) -> np.ndarray:
        """Graph value ``x`` (stored as ``t`` says) laid out for ``operand``'s DRAM region."""
        if operand.block is Block.CUSTOM:
            assert operand.pack is not None, "a custom operand packs itself"
            return operand.pack(to_logical(x, t), wl, self.cfg)
        if parse_layout(t.layout) is not None:
            return x  # pack_layout gave it the operand's blocked layout already
        block = self.cfg.block_in if operand.block is Block.IN else self.cfg.block_out
        return to_physical(x, self._blocked_type(t, block, operand.image))

    def _plain_inputs(self, node: Node, env: dict[str, np.ndarray]) -> list[np.ndarray]:
        return [self._logical(v, env[v]) for v in node.inputs]

    def _fallback(self, node: Node, env: dict[str, np.ndarray], k: Any) -> np.ndarray:
        """Run ``node`` with the fallback kernel module ``k`` (numpy or CuPy)."""
        g = self.graph
        if node.op == "layout_pack":
            (x,) = self._plain_inputs(node, env)
            return to_physical(x, g.values[node.outputs[0]])
        if node.op == "layout_unpack":
            return self._logical(node.inputs[0], env[node.inputs[0]])
        xs = self._plain_inputs(node, env)
        kernel = fallback_kernel(node.op)
        if kernel is not None:
            return kernel(k, node, g, xs)
        return run_node(node, xs, g)

    def _check_node(self, node: Node, env: dict[str, np.ndarray], ref: Any) -> bool:
        kernel = fallback_kernel(node.op)
        if kernel is None:
            return True  # layout changes and quantisation run on the reference code itself
        want = kernel(ref, node, self.graph, self._plain_inputs(node, env))
        got = self._logical(node.outputs[0], env[node.outputs[0]])
        return bool(np.array_equal(np.asarray(got), np.asarray(want)))
