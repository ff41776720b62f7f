"""Executables: a partitioned graph whose accelerator nodes are compiled, run node by node.

Accelerator nodes (``target == "accel"``: conv2d, dense) run as compiled programs on a device
backend (:mod:`runtime.backends`); their outputs stay in the accelerator's blocked layout while
the next node is also on the accelerator, and are converted only at partition boundaries
(``layout_pack`` / ``layout_unpack`` nodes, or on demand). Every other node runs on the fallback
kernels (numpy on the CPU, or CuPy on a GPU). Each node's cycles, utilisation, DRAM traffic,
stalls and energy (accelerator) or wall time (fallback) go into a :class:`RunReport`.

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
from accel.machine.dram import pack_weight, unpack_activation
from accel.machine.energy import COMPONENTS
from compiler.graph.ir import Graph, GraphError, Node, TensorType
from compiler.graph.ops import blocked_layout, parse_layout
from compiler.graph.reference import run_node, to_logical, to_physical
from compiler.ops.compiled import CompiledOp, compile_conv2d, compile_matmul
from compiler.ops.conv2d import Conv2dWorkload
from compiler.ops.eltwise import AddWorkload, compile_add, identity_tile
from compiler.ops.matmul import MatmulWorkload
from runtime.backends import fallback_kernels, find_backend, prefetch_timing, run_program

__all__ = ["Executable", "LayerReport", "RunReport"]

Progress = Callable[[int, int, str], None]


@dataclass
class LayerReport:
    """One node's execution."""

    name: str
    op: str
    target: str
    input_shapes: list[list[int]]
    output_shape: list[int]
    macs: int
    cycles: int | None = None
    milliseconds: float | None = None
    gemm_utilization: float | None = None
    dram_kb: float | None = None
    dram_bytes_per_cycle: float | None = None
    dram_bandwidth_share: float | None = None
    largest_stall: str | None = None
    stalls: dict[str, dict[str, int]] = field(default_factory=dict)
    wall_ms: float = 0.0
    check: bool | None = None
    energy_uj: float | None = None
    """The accelerator's energy for this layer (None on fsim and for fallback layers)."""
    pj_per_mac: float | None = None
    """``energy_uj`` per MAC of the layer (None without MACs)."""
    energy: dict[str, float] = field(default_factory=dict)
    """Microjoules by component (:data:`accel.machine.energy.COMPONENTS`)."""


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
    batch: int = 1
    """Inferences in the run (the input's batch): energy per inference divides by it."""

    @property
    def accel_cycles(self) -> int:
        return sum(layer.cycles or 0 for layer in self.layers if layer.target == "accel")

    @property
    def accel_ms(self) -> float:
        return self.accel_cycles / (self.clock_mhz * 1000.0)

    @property
    def fallback_wall_ms(self) -> float:
        return sum(layer.wall_ms for layer in self.layers if layer.target != "accel")

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
            "accel_ms": self.accel_ms if self.backend != "fsim" else None,
            "fallback_wall_ms": self.fallback_wall_ms,
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

        cols = ["name", "op", "target", "input_shapes", "output_shape", "macs", "cycles",
                "milliseconds", "gemm_utilization", "dram_kb", "dram_bytes_per_cycle",
                "dram_bandwidth_share", "largest_stall", "wall_ms", "check", "energy_uj",
                "pj_per_mac"]
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
        """One Perfetto trace: accelerator layers back to back on the module tracks (offset by
        the cycles before them), fallback layers on a ``cpu`` track by wall time."""
        events: list[dict[str, Any]] = []
        us_per_cycle = 1.0 / self.clock_mhz
        offset_us = 0.0
        cpu_tid = 10
        events.append({"ph": "M", "pid": 1, "tid": cpu_tid, "name": "thread_name",
                       "args": {"name": "cpu fallback"}})
        layers = {layer.name: layer for layer in self.layers}
        for name, _, stats in self.traces:
            layer = layers[name]
            if stats is not None:
                for e in stats.trace_events():
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
                               "ts": offset_us, "dur": layer.wall_ms * 1000.0,
                               "args": {"op": layer.op, "wall_ms": layer.wall_ms}})
                offset_us += layer.wall_ms * 1000.0
        events.append({"ph": "M", "pid": 1, "tid": 9, "name": "thread_name",
                       "args": {"name": "layers"}})
        _atomic_write(Path(path), json.dumps({"traceEvents": events,
                                              "displayTimeUnit": "ns"}))

    def plot_utilization(self, path: str | Path) -> None:
        """Per-layer GEMM utilisation bars with the compute module's stall breakdown."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        accel = [layer for layer in self.layers if layer.target == "accel"]
        fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(max(6, 0.45 * len(accel) + 2), 7),
                                       sharex=True)
        names = [layer.name for layer in accel]
        x = np.arange(len(accel))
        ax1.bar(x, [layer.gemm_utilization or 0 for layer in accel], color="tab:blue")
        ax1.set_ylabel("GEMM utilisation (0-1)")
        ax1.set_ylim(0, 1)
        ax1.set_title(f"{self.model} on {self.config} ({self.backend}): per-layer utilisation")
        causes = sorted({c for layer in accel for c in layer.stalls.get("compute", {})})
        bottom = np.zeros(len(accel))
        for cause in causes:
            share = np.array([layer.stalls.get("compute", {}).get(cause, 0)
                              / max(layer.cycles or 1, 1) for layer in accel])
            ax2.bar(x, share, bottom=bottom, label=cause)
            bottom += share
        ax2.set_ylabel("compute stall share of cycles")
        ax2.set_ylim(0, 1)
        ax2.legend(fontsize="small", loc="upper right")
        ax2.set_xticks(x, names, rotation=70, fontsize="small")
        ax2.set_xlabel("layer")
        fig.tight_layout()
        tmp = Path(str(path) + ".tmp.png")
        fig.savefig(tmp, dpi=110)
        plt.close(fig)
        tmp.replace(path)


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def _pair(v: Any) -> tuple[int, int]:
    return (int(v[0]), int(v[1])) if isinstance(v, (tuple, list)) else (int(v), int(v))


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
        Optional tuning log (:class:`compiler.tune.log.TuningLog` or path): conv2d and dense
        nodes without explicit knobs use the fastest knobs it holds for their workload on
        ``cfg``, else the heuristic's.
    """

    def __init__(self, graph: Graph, cfg: HwConfig, knobs: dict[str, Any] | None = None,
                 tuning_log: Any = None) -> None:
        graph.verify()
        self.graph = graph
        self.cfg = cfg
        self.compiled: dict[str, CompiledOp] = {}
        self.packed: dict[str, dict[str, np.ndarray]] = {}
        knobs = knobs or {}
        if tuning_log is not None:
            from compiler.tune.log import as_log

            tuning_log = as_log(tuning_log)  # read once for every node
        for node in graph.nodes:
            if node.attrs.get("target") == "accel":
                self.compiled[node.name] = self._compile(node, knobs.get(node.name),
                                                         tuning_log)

    # ------------------------------------------------------------------ compilation
    def _workload(self, node: Node) -> Conv2dWorkload | MatmulWorkload | AddWorkload:
        a = node.attrs
        shape = self.graph.values[node.inputs[0]].shape  # types keep logical shapes
        if node.op == "add":
            return AddWorkload(*shape, int(a.get("shift", 0)), bool(a.get("relu", False)))
        w = self.graph.params[a["weight"]]
        if node.op == "conv2d":
            (sh, sw), (ph, pw) = _pair(a.get("stride", 1)), _pair(a.get("padding", 0))
            return Conv2dWorkload(shape[0], shape[1], shape[2], shape[3], w.shape[0],
                                  w.shape[2], w.shape[3], sh, sw, ph, pw,
                                  a.get("bias") is not None, int(a.get("shift", 0)),
                                  bool(a.get("relu", False)))
        if node.op == "dense":
            return MatmulWorkload(shape[0], w.shape[1], w.shape[0], a.get("bias") is not None,
                                  int(a.get("shift", 0)), bool(a.get("relu", False)))
        raise GraphError(f"node {node.name}: {node.op} cannot run on the accelerator")

    def _compile(self, node: Node, knobs: Any, tuning_log: Any = None) -> CompiledOp:
        wl = self._workload(node)
        cfg = self.cfg
        if isinstance(wl, AddWorkload):
            add_op = compile_add(wl, cfg, knobs)
            self.packed[node.name] = {"ident": identity_tile(cfg)}
            return add_op
        w = self.graph.params[node.attrs["weight"]]
        bias = node.attrs.get("bias")
        if isinstance(wl, Conv2dWorkload):
            op = compile_conv2d(wl, cfg, knobs, tuning_log=tuning_log)
            packed = {"kernel": pack_weight(w, cfg.block_out, cfg.block_in)}
            channels = w.shape[0]
        else:
            op = compile_matmul(wl, cfg, knobs, tuning_log=tuning_log)
            packed = {"b": pack_weight(np.ascontiguousarray(w)[:, :, None, None],
                                       cfg.block_out, cfg.block_in)[:, :, 0, 0]}
            channels = w.shape[0]
        if bias is not None:
            packed["bias"] = op.bias_tiles(self.graph.params[bias], channels)
        self.packed[node.name] = packed
        return op

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
        if device.caps.name == "sim":
            prefetch_timing([op.program for op in self.compiled.values()], self.cfg, trace)
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
        return outputs, report

    def reference(self, inputs: np.ndarray | dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The numpy reference network: every node, accelerator ones included, on the numpy
        kernels in plain layouts."""
        g = self.graph
        env = dict(inputs) if isinstance(inputs, dict) else {g.inputs[0]: inputs}
        k = fallback_kernels("cpu")
        for node in g.nodes:
            args = [env[v] for v in node.inputs]
            if node.op in ("layout_pack", "layout_unpack"):
                env[node.outputs[0]] = args[0]  # the reference keeps every value plain
            elif node.op in _KERNEL_OPS:
                env[node.outputs[0]] = _apply(node.op, node.attrs, args, g.params, k)
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
                            list(out_t.shape), _macs(node, g))
        if layer.target == "accel":
            op = self.compiled[node.name]
            x = env[node.inputs[0]]
            args = dict(self.packed[node.name])
            blocked = _as_blocked(x, g.values[node.inputs[0]].layout, self.cfg)
            if isinstance(op.workload, AddWorkload):
                args["a"] = blocked
                args["b"] = _as_blocked(env[node.inputs[1]], g.values[node.inputs[1]].layout,
                                        self.cfg)
            elif isinstance(op.workload, Conv2dWorkload):
                args["data"] = blocked
            else:
                args["a"] = blocked
            image = op.dram(**args)
            result = run_program(op.program, image, config=self.cfg,
                                 backend=device.caps.name, trace=trace, **options)
            region = op.program.regions["out"]
            out_blocked = image.read("out", "int8", region.shape)
            env[node.outputs[0]] = out_blocked if out_t.layout not in ("NCHW", "NC") else \
                self._unblock(out_blocked, out_t.shape)
            stats = result.stats
            energy = result.energy(self.cfg)
            if energy is not None:
                layer.energy_uj = energy.total_uj
                layer.pj_per_mac = energy.total_pj / layer.macs if layer.macs else None
                layer.energy = {c: v * 1e-6 for c, v in energy.components.items()}
            if device.caps.timed:
                layer.cycles = result.cycles
                layer.milliseconds = result.cycles / (self.cfg.clock_mhz * 1000.0)
                layer.gemm_utilization = layer.macs / (result.cycles *
                                                       self.cfg.peak_macs_per_cycle)
            if not device.caps.module_stats:
                d = stats.to_dict()
                moved = d.get("dram_bytes_read", 0) + d.get("dram_bytes_written", 0) \
                    if "dram_bytes_read" in d else sum(stats.bytes_loaded.values()) \
                    + stats.bytes_stored
                layer.dram_kb = moved / 1024.0
                return layer, None
            if device.caps.timed:
                moved = sum(stats.dram_loaded.values()) + stats.dram_stored
                layer.dram_kb = moved / 1024.0
                # All of the channel's bytes (instruction fetch included) against its peak.
                layer.dram_bytes_per_cycle = stats.dram_bytes_per_cycle
                layer.dram_bandwidth_share = stats.dram_bandwidth_share
                layer.stalls = {m: dict(s.stalls) for m, s in stats.modules.items()}
                compute = stats.modules["compute"]
                layer.largest_stall = compute.largest_stall()
                return layer, stats
            return layer, None
        start = time.perf_counter()
        env[node.outputs[0]] = self._fallback(node, env, kernels)
        layer.wall_ms = (time.perf_counter() - start) * 1000.0
        return layer, None

    def _unblock(self, blocked: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
        if blocked.ndim == 4:
            return unpack_activation(blocked[:, :, None, None], (*shape, 1, 1))[:, :, 0, 0]
        return unpack_activation(blocked, shape)  # type: ignore[arg-type]

    def _plain_inputs(self, node: Node, env: dict[str, np.ndarray]) -> list[np.ndarray]:
        return [self._logical(v, env[v]) for v in node.inputs]

    def _fallback(self, node: Node, env: dict[str, np.ndarray], k: Any) -> np.ndarray:
        """Run ``node`` with the fallback kernel module ``k`` (numpy or CuPy)."""
        g, a = self.graph, node.attrs
        if node.op == "layout_pack":
            (x,) = self._plain_inputs(node, env)
            return to_physical(x, g.values[node.outputs[0]])
        if node.op == "layout_unpack":
            return self._logical(node.inputs[0], env[node.inputs[0]])
        xs = self._plain_inputs(node, env)
        if node.op in _KERNEL_OPS:
            return _apply(node.op, a, xs, g.params, k)
        return run_node(node, xs, g)

    def _check_node(self, node: Node, env: dict[str, np.ndarray], ref: Any) -> bool:
        if node.op not in _KERNEL_OPS:
            return True  # layout changes and quantisation run on the reference code itself
        want = _apply(node.op, node.attrs, self._plain_inputs(node, env), self.graph.params, ref)
        got = self._logical(node.outputs[0], env[node.outputs[0]])
        return bool(np.array_equal(np.asarray(got), np.asarray(want)))


def _apply(op: str, a: dict[str, Any], xs: list[np.ndarray], params: dict[str, np.ndarray],
           k: Any) -> np.ndarray:
    """One integer operator on plain-layout inputs through kernel module ``k``."""
    bias = params[a["bias"]] if a.get("bias") is not None else None
    if op == "conv2d":
        return k.conv2d(xs[0], params[a["weight"]], bias, stride=_pair(a.get("stride", 1)),
                        padding=_pair(a.get("padding", 0)), shift=int(a.get("shift", 0)),
                        relu=bool(a.get("relu", False)))
    if op == "dense":
        return k.dense(xs[0], params[a["weight"]], bias, shift=int(a.get("shift", 0)),
                       relu=bool(a.get("relu", False)))
    if op == "add":
        return k.add(xs[0], xs[1], shift=int(a.get("shift", 0)), relu=bool(a.get("relu", False)))
    if op == "relu":
        return k.relu(xs[0])
    if op == "max_pool2d":
        return k.max_pool2d(xs[0], _pair(a["kernel"]), _pair(a.get("stride", a["kernel"])),
                            _pair(a.get("padding", 0)))
    if op == "avg_pool2d":
        return k.avg_pool2d(xs[0], _pair(a["kernel"]), _pair(a.get("stride", a["kernel"])),
                            _pair(a.get("padding", 0)))
    if op == "global_avg_pool":
        return k.global_avg_pool(xs[0])
    if op == "flatten":
        return np.ascontiguousarray(xs[0]).reshape(xs[0].shape[0], -1)
    raise GraphError(f"operator {op!r} has no fallback kernel")


_KERNEL_OPS = frozenset({"conv2d", "dense", "add", "relu", "max_pool2d", "avg_pool2d",
                         "global_avg_pool", "flatten"})
"""Integer operators the fallback kernel modules implement; the rest (quantize, dequantize,
constant) run on :func:`compiler.graph.reference.run_node`, their one definition."""


def _macs(node: Node, g: Graph) -> int:
    if node.op not in ("conv2d", "dense"):
        return 0
    w = g.params[node.attrs["weight"]]
    per_output = int(np.prod(w.shape[1:]))
    return int(np.prod(g.values[node.outputs[0]].shape)) * per_output


def _as_blocked(x: np.ndarray, layout: str, cfg: HwConfig) -> np.ndarray:
    """``x`` in the accelerator's blocked layout (unchanged if it already is)."""
    if parse_layout(layout) is not None:
        return x
    return to_physical(x, TensorType(x.shape, str(x.dtype),
                                     blocked_layout(x.ndim, cfg.batch, cfg.block_in)))
