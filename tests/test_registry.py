"""The accelerator-operator registry and the roofline it computes for every accelerator layer.

An operator defined and registered in this file alone (``test_rescale``: ``clip(relu?(x >>
shift))`` on int8 NCHW, lowered as a GEMM against an identity tile followed by the ALU's
requantisation chain) is partitioned onto the accelerator, laid out, compiled, run on ``fsim``
and ``sim``, checked against its fallback kernel, measured against the roofline and tuned,
without a line of any other module naming it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

import accel
from accel.machine.config import HwConfig
from compiler.errors import LoweringError
from compiler.graph.ir import Graph, Node, TensorType
from compiler.graph.ops import OpDef, OpPattern, register_op
from compiler.graph.passes import optimize
from compiler.graph.reference import register_reference_kernel
from compiler.intrin import gemm_intrinsic
from compiler.ops.accel_op import AccelOp, Block, Operand, roofline_bound
from compiler.ops.registry import CONV2D, accel_op, accel_op_for, register_accel_op
from compiler.ops.requant import requantize_stages, schedule_requant
from compiler.ops.space import KnobSpace
from compiler.ops.workloads import resnet18_layer
from compiler.schedule import Pragma, Schedule, create_schedule
from compiler.te import compute, placeholder, reduce_axis
from compiler.te import sum as te_sum
from compiler.tune import make_task
from runtime import kernels
from runtime.executable import Executable
from runtime.fallback import register_fallback


# --------------------------------------------------------------------------- the test operator
@dataclass(frozen=True)
class RescaleWorkload:
    batch: int
    channels: int
    height: int
    width: int
    shift: int = 0
    relu: bool = False

    def signature(self) -> str:
        return (f"test_rescale_n{self.batch}_c{self.channels}_h{self.height}_w{self.width}_"
                f"sh{self.shift}_r{int(self.relu)}")


@dataclass(frozen=True)
class RescaleKnobs:
    tile_h: int = 1

    def to_dict(self) -> dict[str, int]:
        return asdict(self)


def _rescale_schedule(wl: RescaleWorkload, knobs: RescaleKnobs, cfg: HwConfig) -> Schedule:
    if wl.height % knobs.tile_h:
        raise LoweringError(f"tile_h {knobs.tile_h} does not divide {wl.height}")
    nb, cb = -(-wl.batch // cfg.batch), -(-wl.channels // cfg.block_out)
    shape = (nb, cb, wl.height, wl.width, cfg.batch, cfg.block_out)
    x = placeholder(shape, "int8", "x")
    ident = placeholder((1, 1, cfg.block_out, cfg.block_in), "int8", "ident")
    r, k = reduce_axis(1, "r"), reduce_axis(cfg.block_in, "k")
    acc = compute(shape, lambda n, c, y, w, b, o: te_sum(
        x[n, c, y, w, b, k].astype("int32") * ident[0, 0, o, k].astype("int32"), axis=[r, k]),
        "acc")
    stages = requantize_stages(acc, None, wl.shift, wl.relu, channel_axis=1)
    s = create_schedule(stages["out"])
    acc = s.tensor("acc")
    cx = s.cache_read(s.tensor("x"), "inp", [acc])
    cw = s.cache_read(s.tensor("ident"), "wgt", [acc])
    so = s[s.tensor("out")]
    n, c, y, w, _, _ = so.op.axis
    n_o, n_i = so.split(n, 1)
    c_o, c_i = so.split(c, cb)
    y_o, y_i = so.split(y, knobs.tile_h)
    w_o, w_i = so.split(w, wl.width)
    so.reorder(n_o, c_o, y_o, w_o, n_i, c_i, y_i, w_i)
    so.pragma(n_i, Pragma.DMA_COPY)
    st = s[cw]
    st.compute_at(so, n_o)
    st.pragma(st.leaf_iter_vars[0], Pragma.DMA_COPY)
    sg = s[acc]
    sg.set_scope("acc")
    sg.compute_at(so, w_o)
    sg.reorder(r, *sg.op.axis, k)
    sg.tensorize(sg.op.axis[-2], gemm_intrinsic(cfg))
    sc = s[cx]
    sc.compute_at(sg, r)
    sc.pragma(sc.leaf_iter_vars[0], Pragma.DMA_COPY)
    schedule_requant(s, so, w_o, bias_name=None)
    return s


def _rescale_fits(wl: RescaleWorkload, k: RescaleKnobs, cfg: HwConfig) -> bool:
    tiles = -(-wl.channels // cfg.block_out) * k.tile_h * wl.width
    return tiles <= min(cfg.inp_depth, cfg.acc_depth)


def _rescale_space(wl: RescaleWorkload, cfg: HwConfig) -> KnobSpace:
    divisors = tuple(d for d in range(1, wl.height + 1) if wl.height % d == 0)
    return KnobSpace(("tile_h",), (divisors,), RescaleKnobs,
                     lambda k: _rescale_fits(wl, k, cfg))


def _rescale_workload(node: Node, graph: Graph) -> RescaleWorkload:
    t = graph.values[node.inputs[0]]
    if len(t.shape) != 4:
        raise LoweringError(f"{node.name}: rank {len(t.shape)}")
    return RescaleWorkload(*t.shape, int(node.attrs.get("shift", 0)),
                           bool(node.attrs.get("relu", False)))


def _rescale(x: np.ndarray, shift: int, relu: bool) -> np.ndarray:
    return np.clip(x.astype(np.int32) >> shift, 0 if relu else -128, 127).astype(np.int8)


def _rescale_fallback(k: ModuleType, node: Node, graph: Graph, xs: list[np.ndarray]) -> Any:
    return _rescale(xs[0], int(node.attrs["shift"]), bool(node.attrs["relu"]))


RESCALE = AccelOp(
    op="test_rescale", kind="test_rescale", workload_type=RescaleWorkload,
    knobs_type=RescaleKnobs, workload=_rescale_workload,
    supports=lambda wl, cfg: cfg.block_in == cfg.block_out and _rescale_fits(
        wl, RescaleKnobs(), cfg),
    schedule=_rescale_schedule,
    default_knobs=lambda wl, cfg: max((k for k in map(RescaleKnobs, range(1, wl.height + 1))
                                       if wl.height % k.tile_h == 0
                                       and _rescale_fits(wl, k, cfg)), key=lambda k: k.tile_h),
    space=_rescale_space,
    inputs=(Operand("x", Block.OUT),),
    constants=lambda wl, node, graph, cfg: {
        "ident": np.eye(cfg.block_out, cfg.block_in, dtype=np.int8)[None, None]},
    macs=lambda wl: 0,
    dram_bytes=lambda wl: 2 * wl.batch * wl.channels * wl.height * wl.width,
)

register_op(OpDef("test_rescale", OpPattern.INJECTIVE, 1,
                  lambda node, ins, graph: [TensorType(ins[0].shape, ins[0].dtype)]))
register_reference_kernel("test_rescale", lambda node, args, graph: _rescale(
    args[0], int(node.attrs["shift"]), bool(node.attrs["relu"])))
register_fallback("test_rescale", _rescale_fallback)
register_accel_op(RESCALE)


def rescale_net() -> Graph:
    """conv2d -> test_rescale -> test_rescale -> global pool (cpu) -> flatten -> dense."""
    rng = np.random.default_rng(11)
    t = lambda *s: TensorType(tuple(s), "int8")  # noqa: E731
    params = {"w1": rng.integers(-128, 128, (6, 3, 3, 3), dtype=np.int8),
              "w2": rng.integers(-128, 128, (5, 6), dtype=np.int8)}
    nodes = [
        Node("conv", "conv2d", ["x"], ["c"], {"weight": "w1", "bias": None, "stride": 1,
                                              "padding": 1, "shift": 5, "relu": False}),
        Node("r1", "test_rescale", ["c"], ["r1"], {"shift": 1, "relu": False}),
        Node("r2", "test_rescale", ["r1"], ["r2"], {"shift": 2, "relu": True}),
        Node("gap", "global_avg_pool", ["r2"], ["g"], {}),
        Node("flat", "flatten", ["g"], ["f"], {}),
        Node("fc", "dense", ["f"], ["y"], {"weight": "w2", "bias": None, "shift": 4,
                                          "relu": False}),
    ]
    values = {"x": t(2, 3, 6, 6), "c": t(2, 6, 6, 6), "r1": t(2, 6, 6, 6), "r2": t(2, 6, 6, 6),
              "g": t(2, 6, 1, 1), "f": TensorType((2, 6), "int8", "NC"),
              "y": TensorType((2, 5), "int8", "NC")}
    return Graph("rescale_net", ["x"], ["y"], values, nodes, params)


@pytest.mark.parametrize("backend", ["fsim", "sim"])
def test_an_operator_registered_here_runs_end_to_end(backend: str, tiny: HwConfig) -> None:
    g = optimize(rescale_net(), tiny)
    targets = {n.name: n.attrs["target"] for n in g.nodes}
    assert [targets[n] for n in ("conv", "r1", "r2", "gap", "fc")] == \
        ["accel", "accel", "accel", "cpu", "accel"]
    # conv -> r1 -> r2 hand over the blocked value: no layout transform between them. (The
    # 3-channel conv reads its window gathered into 27 channels: fold_conv_windows.)
    assert [n.name for n in g.nodes if n.op.startswith("layout")] == \
        ["x.window3x3.pack", "r2.unpack", "f.pack", "y.unpack"]
    x = np.random.default_rng(12).integers(-128, 128, (2, 3, 6, 6), dtype=np.int8)
    outputs, report = Executable(g, tiny).run(x, backend=backend, check=True)
    assert report.check is True
    p = rescale_net().params
    c = kernels.conv2d(x, p["w1"], None, padding=1, shift=5)
    r2 = _rescale(_rescale(c, 1, False), 2, True)
    want = kernels.dense(kernels.global_avg_pool(r2).reshape(2, -1), p["w2"], None, shift=4)
    np.testing.assert_array_equal(outputs["y"], want)
    layers = {layer.name: layer for layer in report.layers}
    assert layers["r1"].bound_cycles == 2 * 2 * 6 * 6 * 6 / tiny.dram.bytes_per_cycle
    if backend == "sim":
        assert 0 < layers["r1"].roofline_efficiency <= 1
    # The registry's tuning task of the same operator: its space and a built setting.
    task = make_task(_rescale_workload(g.node("r1"), g), tiny)
    assert task.kind == "test_rescale" and len(task.space) == 4  # tile_h in 1, 2, 3, 6
    assert task.default_knobs() == RescaleKnobs(6)


def test_the_builtin_entries_are_found_by_name_and_by_workload() -> None:
    assert accel_op("conv2d") is CONV2D and accel_op_for(resnet18_layer("C2")) is CONV2D
    assert accel_op("max_pool2d") is None and accel_op_for("nothing") is None
    assert {accel_op(n).kind for n in ("conv2d", "dense", "add")} == {"conv2d", "matmul", "add"}


# --------------------------------------------------------------------------- roofline
def test_the_bound_of_resnet18_layers_by_hand(cfg: HwConfig, vta: HwConfig) -> None:
    """ROOFLINE.md's reference values, and the bound from them by hand."""
    c2, c5 = resnet18_layer("C2"), resnet18_layer("C5")
    # C2: 56x56, 64->64, 3x3: 56*56 outputs x 64 x 64 x 9 MACs; input + weights + bias + out.
    assert CONV2D.macs(c2) == 56 * 56 * 64 * 64 * 9 == 115_605_504
    assert CONV2D.dram_bytes(c2) == 56 * 56 * 64 + 64 * 64 * 9 + 4 * 64 + 56 * 56 * 64 \
        == 438_528
    # C5: 1x1 stride 2 reads every other row and column: a quarter of the input.
    assert CONV2D.macs(c5) == 28 * 28 * 128 * 64 == 6_422_528
    assert CONV2D.dram_bytes(c5) == 28 * 28 * 64 + 128 * 64 + 4 * 128 + 28 * 28 * 128 \
        == 159_232
    assert CONV2D.bound(c2, cfg) == 115_605_504 / 64          # compute-bound: 64 MACs/cycle
    assert CONV2D.bound(c2, vta) == 115_605_504 / 256
    # A layer that moves more than it computes is DRAM-bound: 8 bytes a cycle.
    assert roofline_bound(1000, 438_528, cfg) == 438_528 / 8


@pytest.mark.parametrize(("name", "whole", "inner"), [("default", 28.68e6, 26.78e6),
                                                       ("vta_1x16x16", 7.43e6, 6.91e6)])
def test_resnet18_bound_totals(name: str, whole: float, inner: float) -> None:
    """The sums ROOFLINE.md lists for ResNet-18 at 224x224, with and without the first conv
    and the classifier (VTA's published 7.73M cycles cover the layers in between)."""
    cfg = accel.load_config(name)
    g = optimize(accel.load_model("resnet18"), cfg)
    bounds = {}
    for n in g.nodes:
        if n.attrs["target"] == "accel":
            entry = accel_op(n.op)
            bounds[n.name] = entry.bound(entry.workload(n, g), cfg)
    assert sum(bounds.values()) == pytest.approx(whole, abs=0.005e6)
    assert sum(v for k, v in bounds.items() if k not in ("conv1", "fc")) == \
        pytest.approx(inner, abs=0.005e6)


def test_report_carries_the_roofline(tmp_path: Path, tiny: HwConfig) -> None:
    g = optimize(rescale_net(), tiny)
    x = np.random.default_rng(13).integers(-128, 128, (2, 3, 6, 6), dtype=np.int8)
    _, report = Executable(g, tiny).run(x, backend="sim")
    accel_layers = [layer for layer in report.layers if layer.target == "accel"]
    for layer in accel_layers:
        entry = accel_op(layer.op)
        assert layer.bound_cycles == entry.bound(entry.workload(g.node(layer.name), g), tiny)
        assert layer.roofline_efficiency == layer.bound_cycles / layer.cycles
    totals = report.totals()
    assert totals["bound_cycles"] == sum(layer.bound_cycles for layer in accel_layers)
    assert totals["roofline_efficiency"] == totals["bound_cycles"] / report.accel_cycles
    report.write_json(tmp_path / "report.json")
    report.write_csv(tmp_path / "layers.csv")
    data = json.loads((tmp_path / "report.json").read_text())
    assert data["totals"]["roofline_efficiency"] == totals["roofline_efficiency"]
    header, *lines = (tmp_path / "layers.csv").read_text().splitlines()
    cols = header.split(",")
    rows = {row["name"]: row for row in (dict(zip(cols, line.split(","), strict=True))
                                         for line in lines)}
    conv = next(layer for layer in report.layers if layer.name == "conv")
    assert float(rows["conv"]["bound_cycles"]) == conv.bound_cycles
    assert "roofline_efficiency" in cols
    _, fsim = Executable(g, tiny).run(x, backend="fsim")
    assert fsim.totals()["roofline_efficiency"] is None
    assert fsim.totals()["bound_cycles"] == totals["bound_cycles"]
