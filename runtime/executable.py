"""Executables: a partitioned graph whose accelerator nodes are compiled, run node by node.

Accelerator nodes (``target == "accel"``: conv2d, dense) run as compiled programs on a device
backend (:mod:`runtime.backends`); their outputs stay in the accelerator's blocked layout while
the next node is also on the accelerator, and are converted only at partition boundaries
(``layout_pack`` / ``layout_unpack`` nodes, or on demand). Every other node runs on the fallback
kernels (numpy on the CPU, or CuPy on a GPU). Each node's cycles, utilisation, DRAM traffic and
stalls (accelerator) or wall time (fallback) go into a :class:`RunReport`.
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
from compiler.graph.ir import Graph, GraphError, Node, TensorType
from compiler.graph.ops import blocked_layout, parse_layout
from compiler.graph.reference import run_node, to_logical, to_physical
from compiler.ops.compiled import CompiledOp, compile_conv2d, compile_matmul
from compiler.ops.conv2d import Conv2dWorkload
from compiler.ops.eltwise import AddWorkload, compile_add, identity_tile
from compiler.ops.matmul import MatmulWorkload
from runtime.backends import (
    cancel_prefetch,
    fallback_kernels,
    find_backend,
    prefetch_timing,
    run_program,
)

__all__ = ["LAYER_CSV_COLUMNS", "Executable", "LayerReport", "RunReport"]

Progress = Callable[[int, int, str], None]


@dataclass
class LayerReport:
    """One node's execution (every field is defined, with its unit, in docs/reference.md).

    Two times, never mixed: ``sim_ms`` is the simulated time of an accelerator layer at the
    config's clock (``cycles`` / clock; None on ``fsim`` and for fallback layers), ``host_ms``
    the wall time this process spent on the node (simulation or fallback kernel included).
    ``gemm_utilization`` is None where there are no MACs (an ALU-only layer such as a
    residual add) or no cycles. ``dram_kib`` is the DRAM traffic in KiB (1024 bytes).
    ``stalls`` and ``busy`` are cycles per module (timing simulator only).
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
    dram_kib: float | None = None
    largest_stall: str | None = None
    stalls: dict[str, dict[str, int]] = field(default_factory=dict)
    busy: dict[str, int] = field(default_factory=dict)
    check: bool | None = None


LAYER_CSV_COLUMNS = ("name", "op", "target", "input_shapes", "output_shape", "macs", "cycles",
                     "sim_ms", "host_ms", "gemm_utilization", "dram_kib", "largest_stall",
                     "check")
"""The columns of ``layers.csv``: every :class:`LayerReport` field but the per-module dicts."""


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

    @property
    def accel_cycles(self) -> int:
        return sum(layer.cycles or 0 for layer in self.layers if layer.target == "accel")

    @property
    def accel_sim_ms(self) -> float:
        """Simulated time of the accelerator layers at the config's clock."""
        return self.accel_cycles / (self.clock_mhz * 1000.0)

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

    def totals(self) -> dict[str, Any]:
        return {
            "accel_cycles": self.accel_cycles if self.backend != "fsim" else None,
            "accel_sim_ms": self.accel_sim_ms if self.backend != "fsim" else None,
            "fallback_host_ms": self.fallback_host_ms,
            "host_ms": self.host_ms,
            "offloaded_mac_share": self.offloaded_mac_share,
            "layers": len(self.layers),
            "accel_layers": sum(layer.target == "accel" for layer in self.layers),
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

        cols = LAYER_CSV_COLUMNS
        buf = io.StringIO()
        writer = csv.writer(buf)
        writer.writerow(cols)
        for layer in self.layers:
            row = asdict(layer)
            writer.writerow(["x".join(map(str, s)) if k == "output_shape" else
                             ";".join("x".join(map(str, t)) for t in row[k])
                             if k == "input_shapes" else row[k] for k in cols
                             for s in [row[k]]])
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
                               "ts": offset_us, "dur": layer.host_ms * 1000.0,
                               "args": {"op": layer.op, "host_ms": layer.host_ms}})
                offset_us += layer.host_ms * 1000.0
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
        # Outside the axes: inside, it covered the last layers' bars.
        ax2.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0),
                   title="compute stalls")
        ax2.set_xticks(x, names, rotation=70, fontsize="small")
        ax2.set_xlabel("layer")
        tmp = Path(str(path) + ".tmp.png")
        fig.savefig(tmp, dpi=110, bbox_inches="tight")
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
    progress
        Called as ``progress(k, n, name)`` before compiling each of the ``n`` accelerator
        nodes, and with ``k == n`` at the end (a progress display).
    """

    def __init__(self, graph: Graph, cfg: HwConfig, knobs: dict[str, Any] | None = None,
                 tuning_log: Any = None, progress: Progress | None = None) -> None:
        graph.verify()
        self.graph = graph
        self.cfg = cfg
        self.compiled: dict[str, CompiledOp] = {}
        self.packed: dict[str, dict[str, np.ndarray]] = {}
        knobs = knobs or {}
        if tuning_log is not None:
            from compiler.tune.log import as_log

            tuning_log = as_log(tuning_log)  # read once for every node
        accel_nodes = [node for node in graph.nodes if node.attrs.get("target") == "accel"]
        for k, node in enumerate(accel_nodes):
            if progress is not None:
                progress(k, len(accel_nodes), node.name)
            self.compiled[node.name] = self._compile(node, knobs.get(node.name), tuning_log)
        if progress is not None:
            progress(len(accel_nodes), len(accel_nodes), "done")

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
        try:
            if device.caps.name == "sim":
                prefetch_timing([op.program for op in self.compiled.values()], self.cfg, trace)
            return self._run_nodes(env, (backend, fallback), device, kernels, reference, check,
                                   trace, progress, layer_options)
        except BaseException:
            cancel_prefetch()  # an error or Ctrl-C: the timings of later layers are not needed
            raise

    def _run_nodes(self, env: dict[str, np.ndarray], names: tuple[str, str], device: Any,
                   kernels: Any, reference: Any, check: bool, trace: bool,
                   progress: Progress | None, layer_options: Mapping[str, Mapping[str, Any]]
                   ) -> tuple[dict[str, np.ndarray], RunReport]:
        """Run every node in order (:meth:`run`'s body); ``names``: backend and fallback."""
        backend, fallback = names
        g = self.graph
        report = RunReport(g.name, self.cfg.name, backend, fallback, self.cfg.clock_mhz, [],
                           memory_plan=dict(g.attrs.get("memory_plan", {})))
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
        start = time.perf_counter()
        if layer.target == "accel":
            stats = self._run_accel(node, env, device, trace, options, layer)
        else:
            stats = None
            env[node.outputs[0]] = self._fallback(node, env, kernels)
        layer.host_ms = (time.perf_counter() - start) * 1000.0
        return layer, stats

    def _run_accel(self, node: Node, env: dict[str, np.ndarray], device: Any, trace: bool,
                   options: Mapping[str, Any], layer: LayerReport) -> Any:
        """Run an accelerator node; fill ``layer``'s device figures; return the timing
        simulator's stats (None on other backends)."""
        g = self.graph
        out_t = g.values[node.outputs[0]]
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
        if device.caps.timed:
            layer.cycles = result.cycles
            layer.sim_ms = result.cycles / (self.cfg.clock_mhz * 1000.0)
            if layer.macs:  # an ALU-only layer has no GEMM to utilise
                layer.gemm_utilization = layer.macs / (result.cycles *
                                                       self.cfg.peak_macs_per_cycle)
        if not device.caps.module_stats:
            d = stats.to_dict()
            moved = d.get("dram_bytes_read", 0) + d.get("dram_bytes_written", 0) \
                if "dram_bytes_read" in d else sum(stats.bytes_loaded.values()) \
                + stats.bytes_stored
            layer.dram_kib = moved / 1024.0
            return None
        if device.caps.timed:
            moved = sum(stats.dram_loaded.values()) + stats.dram_stored
            layer.dram_kib = moved / 1024.0
            layer.stalls = {m: dict(s.stalls) for m, s in stats.modules.items()}
            layer.busy = {m: int(s.busy) for m, s in stats.modules.items()}
            compute = stats.modules["compute"]
            layer.largest_stall = compute.largest_stall()
            return stats
        return None

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
