"""fold_conv_windows: a small-channel convolution's window gathered into its channels.

The folded network must give arrays identical to the unfolded network's and to the numpy
reference network's (``compiler.graph.reference``); the pass fires only where the GEMM core's
padded MACs fall. ResNet-18's stem (Table 2's C1: 3 channels, 7x7, stride 2, padding 3) is the
case it was built for.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import accel
from accel.machine.config import HwConfig
from compiler.graph.ir import Graph, GraphError, Node, TensorType
from compiler.graph.ops import infer_types
from compiler.graph.passes import (
    default_supports,
    fold_conv_windows,
    fuse,
    optimize,
    pack_layout,
    partition,
    plan_memory,
)
from compiler.graph.passes.window import WindowFold, _estimate, choose_fold, padded_macs
from compiler.graph.reference import run_node, run_reference
from compiler.graph.zoo import resnet
from compiler.ops.conv2d import Conv2dWorkload
from compiler.ops.registry import CONV2D
from compiler.ops.workloads import RESNET18_LAYERS
from runtime import kernels
from runtime.executable import Executable, RunReport

I8 = "int8"
FOLDS = (WindowFold(False, True), WindowFold(True, False), WindowFold(True, True))


# --------------------------------------------------------------------------- helpers
@pytest.fixture(scope="module")
def configs(cfg: HwConfig, tiny: HwConfig, vta: HwConfig) -> dict[str, HwConfig]:
    return {"default": cfg, "tiny": tiny, "vta_1x16x16": vta}


def conv_net(rng: np.random.Generator, x_shape: tuple[int, int, int, int], out_channels: int,
             kernel: tuple[int, int], stride: tuple[int, int], padding: tuple[int, int],
             bias: bool = True, shift: int = 9, relu: bool = True) -> Graph:
    """One int8 conv2d ``conv1`` from input ``x`` to output ``y``, seeded weights."""
    params = {"w": rng.integers(-128, 128, (out_channels, x_shape[1], *kernel), dtype=np.int8)}
    if bias:
        params["b"] = rng.integers(-2**12, 2**12, out_channels, dtype=np.int32)
    attrs = {"weight": "w", "bias": "b" if bias else None, "stride": stride,
             "padding": padding, "shift": shift, "relu": relu}
    return infer_types(Graph("conv_net", ["x"], ["y"], {"x": TensorType(x_shape, I8)},
                             [Node("conv1", "conv2d", ["x"], ["y"], attrs)], params))


def stem_net(rng: np.random.Generator, size: int, batch: int = 1) -> Graph:
    """Table 2's C1 at ``size`` x ``size``: 3 -> 64 channels, 7x7, stride 2, padding 3."""
    _, cin, cout, k, s = RESNET18_LAYERS["C1"]
    return conv_net(rng, (batch, cin, size, size), cout, (k, k), (s, s), (k // 2, k // 2))


def unfolded(graph: Graph, cfg: HwConfig) -> Graph:
    """``optimize``'s pipeline for an integer graph without ``fold_conv_windows``."""
    return plan_memory(pack_layout(partition(fuse(graph), default_supports(cfg)), cfg))


def int8_input(rng: np.random.Generator, graph: Graph) -> np.ndarray:
    return rng.integers(-128, 128, graph.values[graph.inputs[0]].shape, dtype=np.int8)


def check_bit_exact(graph: Graph, cfg: HwConfig, x: np.ndarray,
                    backend: str) -> tuple[Graph, RunReport, RunReport]:
    """Run ``graph`` folded and unfolded on ``backend``; both, each layer's check and the
    reference network must agree exactly. Returns the folded graph and both runs' reports."""
    folded = optimize(graph, cfg)
    out, report = Executable(folded, cfg).run(x, backend=backend, check=True)
    plain, plain_report = Executable(unfolded(graph, cfg), cfg).run(x, backend=backend)
    want = run_reference(graph, {graph.inputs[0]: x})
    assert report.check is True
    for name in graph.outputs:
        np.testing.assert_array_equal(out[name], want[name])
        np.testing.assert_array_equal(plain[name], want[name])
    return folded, report, plain_report


def folds(graph: Graph) -> list[Node]:
    return [n for n in graph.nodes if n.op == "fold_window"]


# --------------------------------------------------------------------------- the gather
def test_fold_window_gathers_each_window_into_channels(rng: np.random.Generator) -> None:
    x = rng.integers(-128, 128, (2, 3, 5, 6), dtype=np.int8)
    y = kernels.fold_window(x, (2, 3), (2, 1), (1, 2))
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (2, 2)))
    assert y.shape == (2, 2 * 3 * 3, 3, 8) and y.dtype == np.int8
    for i in range(2):
        for j in range(3):
            for c in range(3):
                np.testing.assert_array_equal(y[:, (i * 3 + j) * 3 + c],
                                              padded[:, c, i:i + 5:2, j:j + 8])
    node = Node("f", "fold_window", ["x"], ["y"],
                {"kernel": (2, 3), "stride": (2, 1), "padding": (1, 2)})
    np.testing.assert_array_equal(run_node(node, [x], Graph("g", [], [], {}, [])), y)


def test_fold_window_errors_name_the_argument() -> None:
    x = np.zeros((1, 3, 4, 4), np.int8)
    with pytest.raises(ValueError, match=r"fold_window: stride must be a positive int or an "
                                         r"\(h, w\) pair of them, got \(1, 0\)"):
        kernels.fold_window(x, 3, (1, 0))
    with pytest.raises(TypeError, match="fold_window: kernel must be a positive int"):
        kernels.fold_window(x, 2.5)
    with pytest.raises(ValueError, match="a 7x7 window does not fit the padded 6x6 image"):
        kernels.fold_window(x, 7, 1, 1)
    with pytest.raises(ValueError, match=r"takes an NCHW image.*got shape \(3, 4, 4\)"):
        kernels.fold_window(x[0], 3)


@settings(max_examples=150, deadline=None)
@given(c=st.integers(1, 9), kh=st.integers(1, 5), kw=st.integers(1, 5),
       sh=st.integers(1, 3), sw=st.integers(1, 3), ph=st.integers(0, 3),
       pw=st.integers(0, 3), h=st.integers(1, 9), w=st.integers(1, 9), seed=st.integers(0, 99))
def test_each_fold_is_the_same_convolution(c: int, kh: int, kw: int, sh: int, sw: int,
                                           ph: int, pw: int, h: int, w: int,
                                           seed: int) -> None:
    """The gather and the folded weights of every candidate give the unfolded conv's output
    (the numpy kernels; no accelerator)."""
    h, w = max(h, kh - 2 * ph), max(w, kw - 2 * pw)
    rng = np.random.default_rng(seed)
    x = rng.integers(-128, 128, (2, c, h, w), dtype=np.int8)
    wt = rng.integers(-128, 128, (5, c, kh, kw), dtype=np.int8)
    want = kernels.conv2d(x, wt, stride=(sh, sw), padding=(ph, pw), shift=9)
    wl = Conv2dWorkload(2, c, h, w, 5, kh, kw, sh, sw, ph, pw, shift=9)
    for fold in FOLDS:
        attrs = fold.gather_attrs(wl)
        folded = fold.workload(wl)
        y = kernels.conv2d(kernels.fold_window(x, **attrs), fold.weight(wt),
                           stride=(folded.stride_h, folded.stride_w),
                           padding=(folded.pad_h, folded.pad_w), shift=9)
        np.testing.assert_array_equal(y, want)
        assert folded.macs == wl.macs


# --------------------------------------------------------------------------- the pass
def test_stem_folds_its_whole_window_on_default(rng: np.random.Generator,
                                                cfg: HwConfig) -> None:
    """The expected graph, built as code: the gather on the CPU, a 1x1 conv of 147 channels."""
    g = partition(stem_net(rng, 32), default_supports(cfg))
    before = g.to_text(), {k: v.tobytes() for k, v in g.params.items()}
    folded = fold_conv_windows(g, cfg)
    w = g.params["w"]
    expected = infer_types(Graph("conv_net", ["x"], ["y"], dict(g.values), [
        Node("conv1.fold", "fold_window", ["x"], ["x.window7x7"],
             {"kernel": (7, 7), "stride": (2, 2), "padding": (3, 3), "target": "cpu"}),
        Node("conv1", "conv2d", ["x.window7x7"], ["y"],
             {"weight": "w.fold7x7", "bias": "b", "stride": (1, 1), "padding": (0, 0),
              "shift": 9, "relu": True, "target": "accel"}),
    ], {"w.fold7x7": w.transpose(0, 2, 3, 1).reshape(64, 147, 1, 1), "b": g.params["b"]}))
    assert folded.to_text() == expected.to_text()
    assert folded.params.keys() == expected.params.keys()
    for k in expected.params:
        np.testing.assert_array_equal(folded.params[k], expected.params[k])
    assert folded.attrs["partition"]["segments"] == [
        {"target": "cpu", "nodes": ["conv1.fold"]}, {"target": "accel", "nodes": ["conv1"]}]
    assert folded.attrs["partition"]["accel_macs"] == g.attrs["partition"]["accel_macs"]
    assert (g.to_text(), {k: v.tobytes() for k, v in g.params.items()}) == before


def test_stem_folds_its_columns_on_tiny(rng: np.random.Generator, tiny: HwConfig) -> None:
    """The columns' fold (forced) on tiny at 32 x 32: 3 x 7 = 21 channels, a 7x1 kernel
    keeping the rows' stride and padding."""
    folded = fold_conv_windows(partition(stem_net(rng, 32), default_supports(tiny)), tiny,
                               choose=lambda wl, cfg: WindowFold(rows=False, columns=True))
    gather, conv = folded.nodes
    assert gather.attrs == {"kernel": (1, 7), "stride": (1, 2), "padding": (0, 3),
                            "target": "cpu"}
    assert folded.values[gather.outputs[0]].shape == (1, 21, 32, 16)
    assert conv.attrs["stride"] == (2, 1) and conv.attrs["padding"] == (3, 0)
    assert folded.params[conv.attrs["weight"]].shape == (64, 21, 7, 1)


@pytest.mark.parametrize("config_name", ["tiny", "default", "vta_1x16x16"])
def test_the_rule_picks_the_lowest_estimate(config_name: str) -> None:
    """choose_fold returns the fold with the lowest estimate of those with fewer padded MACs,
    when it is below the unfolded convolution's."""
    cfg = accel.load_config(config_name)
    wl = Conv2dWorkload(1, 3, 32, 32, 64, 7, 7, 2, 2, 3, 3, True, 9, True)
    estimates = {fold: _estimate(fold.workload(wl), cfg)
                 for fold in (WindowFold(False, True), WindowFold(True, False),
                              WindowFold(True, True))}
    chosen = choose_fold(wl, cfg)
    best = min(e for e in estimates.values() if e is not None)
    unfolded = _estimate(wl, cfg)
    if unfolded is not None and best >= unfolded:
        assert chosen is None
    else:
        assert chosen is not None and estimates[chosen] == best


@pytest.mark.parametrize("channels", [1, 2])
def test_pass_does_not_fire_on_full_blocks(channels: int, rng: np.random.Generator,
                                           cfg: HwConfig, vta: HwConfig) -> None:
    """Channels that fill whole blocks leave nothing to gain: the graph stays as it is."""
    for config in (cfg, vta):
        net = conv_net(rng, (1, channels * config.block_in, 16, 16), 16, (3, 3), (1, 1), (1, 1))
        g = partition(net, default_supports(config))
        wl = CONV2D.workload(g.nodes[0], g)
        assert all(padded_macs(f.workload(wl), config) >= padded_macs(wl, config)
                   for f in FOLDS)
        assert choose_fold(wl, config) is None
        assert fold_conv_windows(g, config).to_text() == g.to_text()


def test_pass_leaves_what_it_cannot_fold(rng: np.random.Generator, cfg: HwConfig) -> None:
    """A 1x1 kernel has no window; a conv on the CPU is not the accelerator's to fold."""
    one = partition(conv_net(rng, (1, 3, 16, 16), 8, (1, 1), (1, 1), (0, 0)),
                    default_supports(cfg))
    assert fold_conv_windows(one, cfg).to_text() == one.to_text()
    on_cpu = partition(stem_net(rng, 32), lambda node, graph: False)
    assert fold_conv_windows(on_cpu, cfg).to_text() == on_cpu.to_text()
    with pytest.raises(GraphError, match="fold_conv_windows needs partition first"):
        fold_conv_windows(stem_net(rng, 32), cfg)


@pytest.mark.parametrize(("config_name", "window", "padded_per_output"), [
    ("tiny", (7, 7), 148), ("default", (7, 7), 152), ("vta_1x16x16", (7, 7), 160)])
def test_stem_fold_cuts_padded_macs(config_name: str, window: tuple[int, int],
                                    padded_per_output: int,
                                    configs: dict[str, HwConfig]) -> None:
    """C1's padded MACs per output value: 4 x 49 = 196 on tiny, 8 x 49 = 392 on default,
    16 x 49 = 784 on vta_1x16x16, for 3 x 49 = 147 useful ones; the fold's MACs are C1's."""
    config = configs[config_name]
    g = partition(stem_net(np.random.default_rng(0), 224), default_supports(config))
    wl = CONV2D.workload(g.nodes[0], g)
    fold = choose_fold(wl, config)
    assert fold is not None and fold.window(wl) == window
    folded = fold.workload(wl)
    outputs = 64 * 112 * 112
    assert padded_macs(wl, config) == config.block_in * 49 * outputs
    assert padded_macs(folded, config) == padded_per_output * outputs
    assert folded.macs == wl.macs == 147 * outputs


# --------------------------------------------------------------------------- bit-exact
@pytest.mark.parametrize(("config_name", "size"), [
    ("tiny", 56), ("default", 224), ("vta_1x16x16", 224)])
def test_stem_is_bit_exact_on_sim(config_name: str, size: int,
                                  configs: dict[str, HwConfig]) -> None:
    """C1 on the timing simulator, folded and not: one output, fewer cycles (at its 224 x 224
    on default and vta_1x16x16; tiny at 56 x 56, where 224 took three minutes)."""
    config = configs[config_name]
    rng = np.random.default_rng(1)
    g = stem_net(rng, size)
    x = int8_input(rng, g)
    folded, report, plain = check_bit_exact(g, config, x, "sim")
    assert len(folds(folded)) == 1
    assert report.accel_cycles < plain.accel_cycles


@pytest.mark.parametrize("fold", FOLDS, ids=["columns", "rows", "window"])
def test_every_fold_the_pass_can_make_is_bit_exact(fold: WindowFold, cfg: HwConfig) -> None:
    """Each candidate, forced through the pass's ``choose`` (as benchmarks/stem_fold.py
    does), on the functional simulator."""
    rng = np.random.default_rng(3)
    g = stem_net(rng, 32, batch=2)
    x = int8_input(rng, g)
    net = partition(g, default_supports(cfg))
    forced = plan_memory(pack_layout(fold_conv_windows(net, cfg, lambda wl, cfg: fold), cfg))
    assert [n.attrs["kernel"] for n in folds(forced)] == [fold.window(CONV2D.workload(
        net.nodes[0], net))]
    out, report = Executable(forced, cfg).run(x, backend="fsim", check=True)
    assert report.check is True
    np.testing.assert_array_equal(out["y"], run_reference(g, {"x": x})["y"])


def test_resnet18_small_image_is_bit_exact(cfg: HwConfig) -> None:
    """The whole network at 32 x 32: only the stem folds."""
    g = resnet(18, image_size=32)
    x = np.random.default_rng(2).integers(-128, 128, (1, 3, 32, 32), dtype=np.int8)
    folded, report, plain = check_bit_exact(g, cfg, x, "sim")
    assert [n.name for n in folds(folded)] == ["conv1.fold"]
    assert report.accel_cycles < plain.accel_cycles


@st.composite
def small_channel_convs(draw: Any) -> dict[str, Any]:
    """conv2d layers with 1 to 12 input channels (most of them not a whole block)."""
    kh, kw = draw(st.integers(1, 5)), draw(st.integers(1, 5))
    ph, pw = draw(st.integers(0, 2)), draw(st.integers(0, 2))
    return {"n": draw(st.integers(1, 2)), "c": draw(st.integers(1, 12)),
            "h": draw(st.integers(max(1, kh - 2 * ph), 12)),
            "w": draw(st.integers(max(1, kw - 2 * pw), 12)),
            "oc": draw(st.integers(1, 12)), "kernel": (kh, kw),
            "stride": (draw(st.integers(1, 3)), draw(st.integers(1, 3))), "padding": (ph, pw),
            "bias": draw(st.booleans()), "shift": draw(st.integers(0, 12)),
            "relu": draw(st.booleans()), "seed": draw(st.integers(0, 2**16))}


@pytest.mark.parametrize("config_name", ["tiny", "default"])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=small_channel_convs())
def test_small_channel_convs_are_bit_exact(config_name: str, case: dict[str, Any],
                                           configs: dict[str, HwConfig]) -> None:
    config = configs[config_name]
    rng = np.random.default_rng(case["seed"])
    g = conv_net(rng, (case["n"], case["c"], case["h"], case["w"]), case["oc"], case["kernel"],
                 case["stride"], case["padding"], case["bias"], case["shift"], case["relu"])
    folded, _, _ = check_bit_exact(g, config, int8_input(rng, g), "fsim")
    gathers = folds(folded)
    event(f"{config_name}: " + ("folded a {}x{} window".format(*gathers[0].attrs["kernel"])
                                if gathers else "not folded"))
