"""Sweep specs: a YAML file naming a base config, axes of config values, workloads and metrics.

A spec is validated once, like a hardware config, with one-line errors naming the file, the key
path, what was expected and what was found (``FILE: axes.buffers.wgt: expected a non-empty
list of values, got []``). Expanding it gives the sweep's :class:`Point` s, each a pure,
picklable description of one run: config overrides, one workload item, the backend.

Layout::

    name: small                 # default: the file's stem
    base: default               # shipped config name or YAML path (relative to the spec)
    mode: grid                  # grid (cartesian product) | zip (i-th values together)
    axes:                       # dotted config keys -> value lists
      buffers.wgt: [32768, 65536]
      core.block_in+core.block_out: [[8, 8], [16, 16]]   # a zipped group: vary together
    workloads:
      - resnet18: C2-C4         # ResNet-18 conv layers (TVM's C1-C12): names, ranges, lists
      - conv2d: {name: small, in_channels: 16, size: 8, out_channels: 16, kernel: 3}
      - model: resnet18         # a whole zoo model: one row per accelerated layer
        image_size: 32          #   (optional: batch, image_size, seq_len)
      - onnx: net.onnx          # an ONNX file (relative to the spec), as a whole model
    backend: sim                # fsim | sim | rtl
    metrics: [cycles, gemm_utilization, dram_bytes, stalls, area, energy]   # default: all
    area: {target: ecp5}        # synthesis per config (needs the area metric)
    traces: false               # DIR/traces/<point_id>.json per point (sim backend)
    check: false                # compare every output with the numpy kernels
    seed: 0                     # of the random layer inputs

An axis value that makes an invalid config is not a spec error: that point becomes an error
row of the sweep. A value of the wrong type (a string for a buffer size) is.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from accel.machine.config import ConfigError, HwConfig, field_kind, load_config
from accel.machine.yamlfile import parse_yaml, read_text
from hw.names import SYNTH_TARGETS

__all__ = [
    "BACKENDS",
    "METRICS",
    "AreaSpec",
    "Axis",
    "Point",
    "SpecError",
    "SweepSpec",
    "WorkloadItem",
    "expand",
    "load_spec",
    "parse_spec",
    "shipped_sweeps",
]

BACKENDS = ("fsim", "sim", "rtl")
"""Backends a sweep may run on."""

METRICS = ("cycles", "gemm_utilization", "dram_bytes", "stalls", "area", "energy")
"""Metric groups; each adds its columns to the results (see :mod:`accel.dse.results`)."""

_TOP_KEYS = ("name", "description", "base", "mode", "axes", "workloads", "backend", "metrics",
             "area", "traces", "check", "seed")
_CONV2D_KEYS = ("name", "batch", "in_channels", "size", "height", "width", "out_channels",
                "kernel", "stride", "padding", "bias", "shift", "relu")
_MODEL_KEYS = ("batch", "image_size", "seq_len")
_LAYER_RE = re.compile(r"^[Cc](\d+)$")


class SpecError(ConfigError):
    """A sweep spec is malformed; the message is one line naming file, key, want and got."""


@dataclass(frozen=True)
class Axis:
    """One axis of the sweep: a config key, or a zipped group of keys that vary together.

    ``values[i]`` holds one value per key of ``keys``.
    """

    keys: tuple[str, ...]
    values: tuple[tuple[Any, ...], ...]

    @property
    def label(self) -> str:
        """The spec's spelling of the axis (``a+b`` for a group)."""
        return "+".join(self.keys)


@dataclass(frozen=True)
class WorkloadItem:
    """One unit of work per config: a single conv layer, or a whole model.

    ``kind`` is ``resnet18`` (a layer of TVM's ResNet-18 table), ``conv2d`` (an explicit
    layer), ``model`` (a zoo model) or ``onnx`` (an ONNX file). ``workload`` and ``layer`` are
    the values of the results' columns of the same names (``layer`` is empty for whole models:
    their rows name each accelerated layer).
    """

    kind: str
    workload: str
    layer: str
    params: tuple[tuple[str, Any], ...] = ()

    def param(self, key: str, default: Any = None) -> Any:
        return dict(self.params).get(key, default)

    def identity(self) -> dict[str, Any]:
        """What the point id hashes: kind, workload, layer and parameters."""
        return {"kind": self.kind, "workload": self.workload, "layer": self.layer,
                "params": [list(p) for p in self.params]}


@dataclass(frozen=True)
class AreaSpec:
    """Synthesis per config: FPGA ``target`` and the estimator (``module:function``)."""

    target: str
    estimator: str = "hw.synth:synthesize"


@dataclass(frozen=True)
class Point:
    """One run of a sweep: picklable and self-contained, so a remote worker can execute it.

    Attributes
    ----------
    index
        Position in the expanded sweep (0-based).
    point_id
        Stable hex digest of the sorted overrides, the workload item and the backend.
    sweep
        The spec's name.
    base_config, base_source
        The base config as data (``HwConfig.to_dict``) and where it came from.
    overrides
        Dotted config key -> value, in axis order.
    workload
        The workload item.
    backend
        ``fsim``, ``sim`` or ``rtl``.
    metrics
        Metric groups to measure.
    area
        Synthesis settings, or None.
    traces, check, seed
        As in the spec.
    """

    index: int
    point_id: str
    sweep: str
    base_config: dict[str, Any]
    base_source: str
    overrides: tuple[tuple[str, Any], ...]
    workload: WorkloadItem
    backend: str
    metrics: tuple[str, ...]
    area: AreaSpec | None = None
    traces: bool = False
    check: bool = False
    seed: int = 0

    @property
    def label(self) -> str:
        """A short description for progress lines."""
        what = self.workload.layer or self.workload.workload
        knobs = " ".join(f"{k}={v}" for k, v in self.overrides)
        return f"{what} {knobs}".strip()


@dataclass(frozen=True)
class SweepSpec:
    """A validated sweep spec (see the module docstring for the YAML layout)."""

    name: str
    base: str
    base_config: HwConfig
    mode: str
    axes: tuple[Axis, ...]
    workloads: tuple[WorkloadItem, ...]
    backend: str
    metrics: tuple[str, ...]
    area: AreaSpec | None = None
    traces: bool = False
    check: bool = False
    seed: int = 0
    description: str = ""
    source: str = "<dict>"
    text: str = field(default="", repr=False)

    @property
    def axis_keys(self) -> list[str]:
        """Every config key the axes set, in order (a group's members one by one)."""
        return [k for axis in self.axes for k in axis.keys]

    @property
    def digest(self) -> str:
        """Hash of everything that decides the rows (not comments, not key order of the file):
        a results folder records it, and refuses to be resumed by a different spec."""
        data = {
            "name": self.name, "base": self.base_config.to_dict(), "mode": self.mode,
            "axes": [[list(a.keys), [list(v) for v in a.values]] for a in self.axes],
            "workloads": [w.identity() for w in self.workloads], "backend": self.backend,
            "metrics": list(self.metrics),
            "area": None if self.area is None else [self.area.target, self.area.estimator],
            "traces": self.traces, "check": self.check, "seed": self.seed,
        }
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


# ---------------------------------------------------------------------- helpers
def _got(value: Any) -> str:
    return f"{type(value).__name__} {value!r}"


def _config_keys() -> dict[str, Any]:
    """Dotted key -> default value of every config parameter an axis may set."""
    out: dict[str, Any] = {}
    for key, value in HwConfig().to_dict().items():
        if isinstance(value, dict):
            for leaf, v in value.items():
                out[f"{key}.{leaf}"] = v
        elif key != "description":
            out[key] = value
    return out


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


class _Checker:
    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, key: str, message: str) -> SpecError:
        return SpecError(f"{self.source}: {key}: {message}")

    def expect(self, cond: bool, key: str, expected: str, value: Any) -> None:
        if not cond:
            raise self.fail(key, f"expected {expected}, got {_got(value)}")

    def keys(self, data: dict[str, Any], allowed: tuple[str, ...], where: str) -> None:
        for key in data:
            if key not in allowed:
                path = f"{where}.{key}" if where else str(key)
                raise self.fail(path, f"unknown key; expected one of {', '.join(allowed)}")


# ---------------------------------------------------------------------- parsing
def sweeps_dir() -> Path:
    """Folder of the shipped sweep specs (``accel/configs/sweeps``)."""
    from accel.machine.config import config_dir

    return config_dir() / "sweeps"


def shipped_sweeps() -> list[str]:
    """Names of the shipped sweep specs, loadable with ``load_spec(name)``."""
    return sorted(p.stem for p in sweeps_dir().glob("*.yaml"))


def load_spec(path: str | Path) -> SweepSpec:
    """Read and validate a sweep spec file (a path, or the name of a shipped spec).

    Raises
    ------
    SpecError
        Missing or unreadable file, malformed YAML (with line and column) or invalid contents;
        the message is one line naming the file and the key.
    """
    path = Path(path)
    if not path.exists() and path.suffix == "" and path.name in shipped_sweeps():
        path = sweeps_dir() / f"{path.name}.yaml"
    text = read_text(path, "sweep spec", SpecError,
                     missing=f"no such sweep spec; expected a YAML path or one of "
                             f"{', '.join(shipped_sweeps())}")
    data = parse_yaml(text, str(path), SpecError)
    return parse_spec(data, source=str(path), base_dir=path.parent, text=text,
                      default_name=path.stem)


def parse_spec(data: Any, source: str = "<dict>", base_dir: str | Path = ".", text: str = "",
               default_name: str = "sweep") -> SweepSpec:
    """Validate parsed YAML ``data`` as a sweep spec.

    Parameters
    ----------
    data
        The parsed mapping.
    source
        Named in error messages.
    base_dir
        Folder that relative paths (``base``, ``onnx``) resolve against.
    text
        The spec's text, kept for copying into the results folder.
    default_name
        The sweep's name when the spec has no ``name``.

    Raises
    ------
    SpecError
        Anything invalid; one line.
    """
    c = _Checker(source)
    if data is None:
        raise c.fail("<top>", "expected a mapping with keys workloads, axes, ..., got empty file")
    if not isinstance(data, dict):
        raise c.fail("<top>", f"expected a mapping with keys workloads, axes, ..., got "
                              f"{type(data).__name__}")
    c.keys(data, _TOP_KEYS, "")
    base_dir = Path(base_dir)

    name = data.get("name", default_name)
    c.expect(isinstance(name, str) and bool(name.strip()), "name", "a non-empty string", name)
    description = data.get("description", "")
    c.expect(isinstance(description, str), "description", "a string", description)
    base = data.get("base", "default")
    c.expect(isinstance(base, str) and bool(base), "base",
             "a shipped config name or a YAML path", base)
    base_cfg = _load_base(c, base, base_dir)
    mode = data.get("mode", "grid")
    c.expect(mode in ("grid", "zip"), "mode", "grid or zip", mode)
    axes = _parse_axes(c, data.get("axes") or {}, mode)
    if "workloads" not in data:
        raise c.fail("workloads", "missing; expected a list such as [{resnet18: C2-C12}]")
    workloads = _parse_workloads(c, data["workloads"], base_dir)
    backend = data.get("backend", "sim")
    c.expect(backend in BACKENDS, "backend", f"one of {', '.join(BACKENDS)}", backend)
    area = _parse_area(c, data.get("area"))
    if "metrics" in data:
        metrics = data["metrics"]
        c.expect(isinstance(metrics, list) and bool(metrics), "metrics",
                 f"a non-empty list out of {', '.join(METRICS)}", metrics)
        for i, m in enumerate(metrics):
            c.expect(m in METRICS, f"metrics[{i}]", f"one of {', '.join(METRICS)}", m)
            if m in metrics[:i]:
                raise c.fail(f"metrics[{i}]", f"{m} is listed twice")
        if "area" in metrics and area is None:
            raise c.fail("metrics", "area needs an area section, e.g. area: {target: ecp5}")
        if area is not None and "area" not in metrics:
            raise c.fail("area", "given, but metrics does not list area")
        metrics_t = tuple(m for m in METRICS if m in metrics)
    else:
        metrics_t = tuple(m for m in METRICS if m != "area" or area is not None)
    traces = data.get("traces", False)
    c.expect(isinstance(traces, bool), "traces", "true or false", traces)
    if traces and backend != "sim":
        raise c.fail("traces", f"needs backend sim, got backend {backend}")
    check = data.get("check", False)
    c.expect(isinstance(check, bool), "check", "true or false", check)
    seed = data.get("seed", 0)
    c.expect(_is_int(seed) and seed >= 0, "seed", "a non-negative integer", seed)
    spec = SweepSpec(name=name.strip(), base=base, base_config=base_cfg, mode=mode, axes=axes,
                     workloads=workloads, backend=backend, metrics=metrics_t, area=area,
                     traces=traces, check=check, seed=seed, description=description,
                     source=source, text=text)
    _check_unique_points(c, spec)
    return spec


def _load_base(c: _Checker, base: str, base_dir: Path) -> HwConfig:
    looks_like_path = base.endswith((".yaml", ".yml")) or "/" in base or "\\" in base
    target: str | Path = base
    if looks_like_path:
        path = Path(base).expanduser()
        target = path if path.is_absolute() else base_dir / path
    try:
        return load_config(target)
    except ConfigError as exc:
        raise c.fail("base", str(exc)) from None


def _parse_axes(c: _Checker, raw: Any, mode: str) -> tuple[Axis, ...]:
    c.expect(isinstance(raw, dict), "axes", "a mapping of dotted config keys to value lists",
             raw)
    known = _config_keys()
    sections = sorted({k.split(".")[0] for k in known if "." in k})
    seen: dict[str, str] = {}
    axes = []
    for label, values in raw.items():
        where = f"axes.{label}"
        c.expect(isinstance(label, str) and bool(label), "axes", "string keys", label)
        keys = tuple(k.strip() for k in label.split("+"))
        for key in keys:
            if key not in known:
                section, _, leaf = key.partition(".")
                if leaf and section in sections:
                    leaves = [k.partition(".")[2] for k in known if k.startswith(section + ".")]
                    raise c.fail(where, f"unknown config key {key}; {section} has "
                                        f"{', '.join(leaves)}")
                raise c.fail(where, f"unknown config key {key!r}; expected a dotted key in "
                                    f"{', '.join(sections)} (e.g. buffers.wgt) or clock_mhz")
            if key in seen:
                raise c.fail(where, f"key {key} is already set by axis {seen[key]}")
            seen[key] = label
        if not isinstance(values, list):
            raise c.fail(where, f"expected a list of values, got {_got(values)}")
        if not values:
            raise c.fail(where, "expected a non-empty list of values, got []")
        rows: list[tuple[Any, ...]] = []
        for i, value in enumerate(values):
            if len(keys) > 1:
                if not isinstance(value, list) or len(value) != len(keys):
                    raise c.fail(f"{where}[{i}]", f"expected a list of {len(keys)} values "
                                                  f"(one per key), got {_got(value)}")
                row = tuple(value)
            else:
                row = (value,)
            for key, v in zip(keys, row, strict=True):
                kind = field_kind(key)
                ok = (_is_number(v) if kind is float else _is_int(v) if kind is int
                      else type(v) is kind)
                want = {float: "a number", int: f"an integer for {key}",
                        bool: f"true or false for {key}", str: f"a string for {key}"}[kind]
                c.expect(ok, f"{where}[{i}]", want, v)
            if mode == "grid" and row in rows:
                raise c.fail(f"{where}[{i}]", f"value {value!r} is listed twice")
            rows.append(row)
        axes.append(Axis(keys, tuple(rows)))
    if mode == "zip" and axes:
        lengths = {len(a.values) for a in axes}
        if len(lengths) > 1:
            desc = ", ".join(f"{a.label} has {len(a.values)}" for a in axes)
            raise c.fail("axes", f"zip mode needs value lists of one length; {desc}")
    return tuple(axes)


def _layer_names(c: _Checker, where: str, raw: Any) -> list[str]:
    from compiler.ops.workloads import RESNET18_LAYERS

    known = list(RESNET18_LAYERS)
    items = raw if isinstance(raw, list) else [raw]
    if isinstance(raw, list) and not raw:
        raise c.fail(where, "expected layer names such as C2-C12, got []")
    out: list[str] = []
    for item in items:
        if not isinstance(item, str):
            raise c.fail(where, f"expected layer names such as C2, C3 or C2-C12, got "
                                f"{_got(item)}")
        for part in (p.strip() for p in item.split(",")):
            lo, dash, hi = part.partition("-")
            ends = [lo.strip(), hi.strip()] if dash else [lo.strip()]
            nums = []
            for end in ends:
                m = _LAYER_RE.match(end)
                if not m or f"C{int(m.group(1))}" not in RESNET18_LAYERS:
                    raise c.fail(where, f"unknown layer {end!r}; expected {known[0]}..{known[-1]}"
                                        " or a range such as C2-C12")
                nums.append(int(m.group(1)))
            if len(nums) == 2 and nums[0] > nums[1]:
                raise c.fail(where, f"empty range {part!r}; expected low-high such as C2-C12")
            for n in range(nums[0], nums[-1] + 1):
                name = f"C{n}"
                if name in out:
                    raise c.fail(where, f"layer {name} is listed twice")
                out.append(name)
    return out


def _parse_workloads(c: _Checker, raw: Any, base_dir: Path) -> tuple[WorkloadItem, ...]:
    c.expect(isinstance(raw, list) and bool(raw), "workloads",
             "a non-empty list such as [{resnet18: C2-C12}]", raw)
    kinds = ("resnet18", "conv2d", "model", "onnx")
    items: list[WorkloadItem] = []
    for i, entry in enumerate(raw):
        where = f"workloads[{i}]"
        if not isinstance(entry, dict):
            raise c.fail(where, f"expected a mapping with one of {', '.join(kinds)}, got "
                                f"{_got(entry)}")
        present = [k for k in kinds if k in entry]
        if len(present) != 1:
            raise c.fail(where, f"expected exactly one of {', '.join(kinds)}, got keys "
                                f"{', '.join(map(str, entry)) or 'none'}")
        kind = present[0]
        value = entry[kind]
        extra = {k: v for k, v in entry.items() if k != kind}
        if kind == "resnet18":
            c.keys(extra, (), where)
            for name in _layer_names(c, f"{where}.resnet18", value):
                items.append(WorkloadItem("resnet18", "resnet18_layers", name))
        elif kind == "conv2d":
            c.keys(extra, (), where)
            items.append(_parse_conv2d(c, f"{where}.conv2d", value))
        else:
            c.keys(extra, _MODEL_KEYS, where)
            for key, v in extra.items():
                c.expect(_is_int(v) and v >= 1, f"{where}.{key}", "a positive integer", v)
            params = tuple(sorted(extra.items()))
            if kind == "model":
                from compiler.graph.zoo import ZOO

                c.expect(value in ZOO, f"{where}.model", f"one of {', '.join(ZOO)}", value)
                items.append(WorkloadItem("model", value, "", params))
            else:
                c.expect(isinstance(value, str) and value.endswith(".onnx"), f"{where}.onnx",
                         "the path of an .onnx file", value)
                path = Path(value).expanduser()
                path = path if path.is_absolute() else base_dir / path
                if not path.is_file():
                    raise c.fail(f"{where}.onnx", f"no such file {path}")
                items.append(WorkloadItem("onnx", Path(value).stem, "",
                                          (*params, ("path", str(path.resolve())))))
    seen: dict[tuple[Any, ...], int] = {}
    for i, item in enumerate(items):
        key = (item.kind, item.workload, item.layer, item.params)
        if key in seen:
            raise c.fail("workloads", f"{item.layer or item.workload} is listed twice")
        seen[key] = i
    return tuple(items)


def _parse_conv2d(c: _Checker, where: str, raw: Any) -> WorkloadItem:
    c.expect(isinstance(raw, dict), where,
             "a mapping such as {name: l1, in_channels: 16, size: 8, out_channels: 16, "
             "kernel: 3}", raw)
    c.keys(raw, _CONV2D_KEYS, where)
    name = raw.get("name")
    c.expect(isinstance(name, str) and bool(name), f"{where}.name", "a layer name", name)
    for key in ("in_channels", "out_channels", "kernel"):
        if key not in raw:
            raise c.fail(f"{where}.{key}", "missing")
    if "size" not in raw and not ("height" in raw and "width" in raw):
        raise c.fail(f"{where}.size", "missing (or give height and width)")
    for key in _CONV2D_KEYS[1:]:
        if key not in raw:
            continue
        v = raw[key]
        if key in ("bias", "relu"):
            c.expect(isinstance(v, bool), f"{where}.{key}", "true or false", v)
        elif key in ("padding", "shift"):
            c.expect(_is_int(v) and v >= 0, f"{where}.{key}", "a non-negative integer", v)
        else:
            c.expect(_is_int(v) and v >= 1, f"{where}.{key}", "a positive integer", v)
    kernel = raw["kernel"]
    params = {
        "batch": raw.get("batch", 1), "in_channels": raw["in_channels"],
        "height": raw.get("height", raw.get("size")), "width": raw.get("width", raw.get("size")),
        "out_channels": raw["out_channels"], "kernel": kernel, "stride": raw.get("stride", 1),
        "padding": raw.get("padding", kernel // 2), "bias": raw.get("bias", True),
        "shift": raw.get("shift", 8), "relu": raw.get("relu", True),
    }
    return WorkloadItem("conv2d", "conv2d", name, tuple(params.items()))


def _parse_area(c: _Checker, raw: Any) -> AreaSpec | None:
    if raw is None:
        return None
    c.expect(isinstance(raw, dict), "area", "a mapping such as {target: ecp5}", raw)
    c.keys(raw, ("target", "estimator"), "area")
    target = raw.get("target")
    c.expect(target in SYNTH_TARGETS, "area.target", f"one of {', '.join(SYNTH_TARGETS)}",
             target)
    estimator = raw.get("estimator", AreaSpec.estimator)
    c.expect(isinstance(estimator, str) and re.fullmatch(r"[\w.]+:\w+", estimator) is not None,
             "area.estimator", "module:function", estimator)
    return AreaSpec(target, estimator)


# ---------------------------------------------------------------------- expansion
def _combos(spec: SweepSpec) -> list[tuple[tuple[str, Any], ...]]:
    """Override sets in sweep order: grid = product (first axis slowest), zip = i-th values."""
    if not spec.axes:
        return [()]
    if spec.mode == "zip":
        rows = zip(*(a.values for a in spec.axes), strict=True)
    else:
        rows = itertools.product(*(a.values for a in spec.axes))
    return [tuple((k, v) for axis, vals in zip(spec.axes, row, strict=True)
                  for k, v in zip(axis.keys, vals, strict=True))
            for row in rows]


def point_id(overrides: tuple[tuple[str, Any], ...], item: WorkloadItem, backend: str) -> str:
    """Stable hex digest of the sorted overrides, the workload item and the backend."""
    data = {"overrides": sorted([k, v] for k, v in overrides), "workload": item.identity(),
            "backend": backend}
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def expand(spec: SweepSpec) -> list[Point]:
    """Every point of the sweep: each override set (grid or zip), each workload item.

    Points are ordered config by config (the axes' order), workload items innermost.
    """
    base = spec.base_config.to_dict()
    points = []
    for overrides in _combos(spec):
        for item in spec.workloads:
            points.append(Point(
                index=len(points), point_id=point_id(overrides, item, spec.backend),
                sweep=spec.name, base_config=base, base_source=spec.base_config.source,
                overrides=overrides, workload=item, backend=spec.backend,
                metrics=spec.metrics, area=spec.area, traces=spec.traces, check=spec.check,
                seed=spec.seed))
    return points


def _check_unique_points(c: _Checker, spec: SweepSpec) -> None:
    seen: dict[tuple[tuple[str, Any], ...], int] = {}
    for i, overrides in enumerate(_combos(spec)):
        key = tuple(sorted(overrides))
        if key in seen:
            desc = ", ".join(f"{k}={v}" for k, v in overrides)
            raise c.fail("axes", f"combinations {seen[key]} and {i} are the same ({desc})")
        seen[key] = i
