"""The runtime: backends and fallbacks found through registries, executables on small graphs."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from accel.machine.config import HwConfig, load_config
from compiler.graph.ir import Graph, Node, TensorType
from runtime import kernels
from runtime.backends import available_backends, fallback_kernels, find_backend
from runtime.executable import Executable


def small_net(cfg: HwConfig, blocked: bool = False) -> Graph:
    """conv(acc) -> conv(acc) -> add(cpu) -> maxpool(cpu) -> global pool -> flatten -> dense."""
    rng = np.random.default_rng(3)
    t = lambda *s: TensorType(tuple(s), "int8")  # noqa: E731
    layout = f"NCHW{cfg.batch}n{cfg.block_in}c" if blocked else "NCHW"
    values = {
        "x": t(2, 5, 9, 9),
        "c1": TensorType((2, 12, 9, 9), "int8", layout),
        "c2": t(2, 12, 9, 9),
        "s": t(2, 12, 9, 9),
        "p": t(2, 12, 4, 4),
        "g": t(2, 12, 1, 1),
        "f": TensorType((2, 12), "int8", "NC"),
        "y": TensorType((2, 7), "int8", "NC"),
    }
    params = {
        "w1": rng.integers(-128, 128, (12, 5, 3, 3), dtype=np.int8),
        "b1": rng.integers(-500, 500, 12).astype(np.int32),
        "w2": rng.integers(-128, 128, (12, 12, 3, 3), dtype=np.int8),
        "w3": rng.integers(-128, 128, (7, 12), dtype=np.int8),
    }
    acc = {"target": "accel"}
    nodes = [
        Node("conv1", "conv2d", ["x"], ["c1"], {"weight": "w1", "bias": "b1", "stride": 1,
                                               "padding": 1, "shift": 8, "relu": True, **acc}),
        Node("conv2", "conv2d", ["c1"], ["c2"], {"weight": "w2", "bias": None, "stride": 1,
                                                "padding": 1, "shift": 9, "relu": False, **acc}),
        Node("add", "add", ["c2", "x2"], ["s"], {"shift": 1, "relu": True}),
        Node("pool", "max_pool2d", ["s"], ["p"], {"kernel": 2, "stride": 2, "padding": 0}),
        Node("gap", "global_avg_pool", ["p"], ["g"], {}),
        Node("flat", "flatten", ["g"], ["f"], {}),
        Node("fc", "dense", ["f"], ["y"], {"weight": "w3", "bias": None, "shift": 6,
                                          "relu": False, **acc}),
    ]
    values["x2"] = t(2, 12, 9, 9)
    return Graph("small", ["x", "x2"], ["y"], values, nodes, params)


def reference(g: Graph, x: np.ndarray, x2: np.ndarray) -> np.ndarray:
    p = g.params
    c1 = kernels.conv2d(x, p["w1"], p["b1"], padding=1, shift=8, relu=True)
    c2 = kernels.conv2d(c1, p["w2"], None, padding=1, shift=9)
    s = kernels.add(c2, x2, shift=1, relu=True)
    pooled = kernels.global_avg_pool(kernels.max_pool2d(s, 2, 2))
    return kernels.dense(pooled.reshape(2, -1), p["w3"], None, shift=6)


@pytest.mark.parametrize("backend_name", ["fsim", "sim"])
@pytest.mark.parametrize("blocked", [False, True])
def test_executable_matches_the_kernels(backend_name: str, blocked: bool) -> None:
    cfg = load_config("tiny")
    g = small_net(cfg, blocked)
    rng = np.random.default_rng(4)
    x = rng.integers(-128, 128, (2, 5, 9, 9), dtype=np.int8)
    x2 = rng.integers(-128, 128, (2, 12, 9, 9), dtype=np.int8)
    exe = Executable(g, cfg)
    outputs, report = exe.run({"x": x, "x2": x2}, backend=backend_name, check=True)
    np.testing.assert_array_equal(outputs["y"], reference(g, x, x2))
    assert report.check is True and all(layer.check for layer in report.layers)
    accel = [layer for layer in report.layers if layer.target == "accel"]
    assert [layer.name for layer in accel] == ["conv1", "conv2", "fc"]
    macs = 2 * 12 * 81 * 5 * 9 + 2 * 12 * 81 * 12 * 9 + 2 * 7 * 12
    assert sum(layer.macs for layer in report.layers) == macs
    assert report.offloaded_mac_share == 1.0
    if backend_name == "sim":
        assert all(layer.cycles and 0 < layer.gemm_utilization <= 1 for layer in accel)
        assert report.accel_cycles == sum(layer.cycles for layer in accel)
    else:
        assert report.totals()["accel_cycles"] is None


def test_report_files(tmp_path: Path) -> None:
    cfg = load_config("tiny")
    g = small_net(cfg)
    rng = np.random.default_rng(5)
    x = rng.integers(-128, 128, (2, 5, 9, 9), dtype=np.int8)
    x2 = rng.integers(-128, 128, (2, 12, 9, 9), dtype=np.int8)
    _, report = Executable(g, cfg).run({"x": x, "x2": x2}, backend="sim", trace=True)
    report.write_json(tmp_path / "report.json")
    report.write_csv(tmp_path / "layers.csv")
    report.write_trace(tmp_path / "trace.json")
    report.plot_utilization(tmp_path / "utilization.png")
    data = json.loads((tmp_path / "report.json").read_text())
    assert data["totals"]["accel_cycles"] == report.accel_cycles > 0
    rows = (tmp_path / "layers.csv").read_text().splitlines()
    assert rows[0].startswith("name,op,target,input_shapes")
    assert rows[1].startswith("conv1,conv2d,accel,2x5x9x9,2x12x9x9,")
    assert len(rows) == 1 + len(g.nodes)
    trace = json.loads((tmp_path / "trace.json").read_text())["traceEvents"]
    layer_slices = [e["name"] for e in trace if e.get("tid") == 9 and e["ph"] == "X"]
    assert layer_slices == ["conv1", "conv2", "fc"]
    cpu = [e["name"] for e in trace if e.get("tid") == 10 and e["ph"] == "X"]
    assert cpu == ["add", "pool", "gap", "flat"]
    assert (tmp_path / "utilization.png").read_bytes()[:4] == b"\x89PNG"


def test_registries() -> None:
    assert [c.name for c in available_backends()] == ["fsim", "sim", "rtl"]
    assert find_backend("sim").caps.timed and not find_backend("fsim").caps.timed
    with pytest.raises(ValueError, match=r"^unknown backend 'gpu'; expected one of fsim, sim, "
                                         r"rtl$"):
        find_backend("gpu")
    assert fallback_kernels("cpu") is kernels
    with pytest.raises(ValueError, match=r"^unknown fallback 'tpu'; expected one of cpu, gpu$"):
        fallback_kernels("tpu")


def test_bad_inputs_are_rejected() -> None:
    cfg = load_config("tiny")
    exe = Executable(small_net(cfg), cfg)
    with pytest.raises(ValueError, match=re.escape(
            "small: input 'x' must be int8 of shape (2, 5, 9, 9), got float32 of shape "
            "(2, 5, 9, 9)")):
        exe.run({"x": np.zeros((2, 5, 9, 9), np.float32), "x2": np.zeros((2, 12, 9, 9),
                                                                         np.int8)})
    with pytest.raises(ValueError, match=r"^small has 2 inputs; pass a dict$"):
        exe.run(np.zeros((2, 5, 9, 9), np.int8))


def test_timing_reuse_equals_a_fresh_simulation() -> None:
    """Two layers differing only in shift (ALU immediates) share a timing signature; the
    reused timing must equal a fresh simulation of the second program."""
    from compiler.ops.compiled import compile_conv2d
    from compiler.ops.conv2d import Conv2dWorkload
    from runtime.backends import timing_signature
    from sim.timing import TimingSimulator

    cfg = load_config("tiny")
    a = compile_conv2d(Conv2dWorkload(1, 8, 6, 6, 8, 3, 3, 1, 1, 1, 1, True, 4, True), cfg)
    b = compile_conv2d(Conv2dWorkload(1, 8, 6, 6, 8, 3, 3, 1, 1, 1, 1, True, 7, True), cfg)
    assert a.program.insns != b.program.insns
    assert timing_signature(a.program) == timing_signature(b.program)
    find_backend("sim").run(a.program, a.dram(), cfg, False)
    reused, cycles = find_backend("sim").run(b.program, b.dram(), cfg, False)
    fresh = TimingSimulator(cfg).run(b.program, b.dram())
    assert cycles == fresh.cycles
    assert reused.to_dict() == fresh.to_dict()


@pytest.mark.gpu
def test_gpu_fallback_gives_the_same_results() -> None:
    from runtime import kernels_gpu

    if not kernels_gpu.available():
        pytest.skip(f"needs a CUDA GPU with CuPy: {kernels_gpu.unavailable_reason()}")
    cfg = load_config("tiny")
    g = small_net(cfg, blocked=True)
    rng = np.random.default_rng(6)
    x = rng.integers(-128, 128, (2, 5, 9, 9), dtype=np.int8)
    x2 = rng.integers(-128, 128, (2, 12, 9, 9), dtype=np.int8)
    exe = Executable(g, cfg)
    cpu, _ = exe.run({"x": x, "x2": x2}, backend="fsim", fallback="cpu")
    gpu, report = exe.run({"x": x, "x2": x2}, backend="fsim", fallback="gpu", check=True)
    np.testing.assert_array_equal(np.asarray(gpu["y"]), cpu["y"])
    assert report.check is True and report.fallback == "gpu"


def test_submit_forked_runs_unpicklable_calls_in_a_worker() -> None:
    """The worker inherits its calls by fork: a closure over a local (which pickle refuses)
    runs there, in order, its result and its error coming back."""
    import os

    from runtime.workers import stop_pool, submit_forked

    data = np.arange(10)
    forked = submit_forked([lambda: (os.getpid(), int(data.sum())),
                            lambda: 1 // 0])
    assert forked is not None
    handle, (first, second) = forked
    try:
        pid, total = first.result(timeout=60)
        assert pid != os.getpid() and total == 45
        with pytest.raises(ZeroDivisionError):
            second.result(timeout=60)
    finally:
        stop_pool(handle)
