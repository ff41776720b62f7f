"""EfficientNet-B0 in the zoo (SiLU and squeeze-and-excitation as float gates on the fallback,
every convolution on the accelerator), the ``sigmoid`` operator, and SiLU as ONNX writes it."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest

import accel
from compiler.graph.passes.common import node_macs
from compiler.graph.zoo import SILU_SCALE_SHIFT, efficientnet_b0
from runtime import kernels


def test_efficientnet_b0_structure() -> None:
    g = efficientnet_b0(image_size=224)
    convs = [n for n in g.nodes if n.op == "conv2d"]
    dw = [n for n in convs if n.name.endswith(".dw")]
    se = [n for n in convs if ".se." in n.name]
    # stem, 15 expansions, 16 depthwise, 16 x 2 SE convs, 16 projections, the 1x1 to 1280
    assert (len(convs), len(dw), len(se)) == (81, 16, 32)
    kernels_of = [g.params[n.attrs["weight"]].shape[2] for n in dw]
    assert kernels_of == [3, 3, 3, 5, 5, 3, 3, 3, 5, 5, 5, 5, 5, 5, 5, 3]
    for n in dw:
        assert n.attrs["groups"] == g.values[n.inputs[0]].shape[1]
    # squeeze to a quarter of the block's input channels: 32 -> 8 in the first block
    assert g.params["features.1.0.se.fc1.weight"].shape == (8, 32, 1, 1)
    assert len([n for n in g.nodes if n.op == "add"]) == 9
    sigmoids = [n for n in g.nodes if n.op == "sigmoid"]
    assert len(sigmoids) == 1 + 15 + 16 + 16 * 2 + 1  # every SiLU and every SE gate
    assert {n.attrs["scale_shift"] for n in g.nodes if n.op in ("quantize", "dequantize")} == {
        SILU_SCALE_SHIFT}
    assert g.values["fc"].shape == (1, 1000)
    # 385.8M multiply-adds (Tan and Le 2019: 0.39B FLOPs, counted as multiply-adds)
    assert sum(node_macs(n, g) for n in g.nodes) == 385_814_752


@pytest.mark.parametrize("config", ["default", "vta_1x16x16"])
def test_efficientnet_b0_runs_bit_exact(config: str) -> None:
    """Every convolution on the accelerator (sim), SiLU and the gates on the fallback; every
    layer and the output equal the numpy reference network."""
    graph = accel.load_model("efficientnet_b0", image_size=32, batch=2)
    x, _ = accel.sample_inputs(graph, 0)
    exe = accel.compile(graph, config)
    outputs, report = exe.run(x, backend="sim", check=True)
    assert report.check is True
    np.testing.assert_array_equal(outputs["fc"], exe.reference(x)["fc"])
    targets = {layer.name: layer.target for layer in report.layers}
    assert all(targets[n.name] == "accel" for n in exe.graph.nodes if n.op == "conv2d")
    assert all(targets[n.name] == "cpu" for n in exe.graph.nodes if n.op == "sigmoid")
    part = exe.graph.attrs["partition"]
    assert part["accel_macs"] == part["total_macs"] > 0


def test_sigmoid_is_stable_at_the_extremes() -> None:
    x = np.array([-1e4, -90.0, -20.0, 0.0, 20.0, 90.0, 1e4], np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no overflow in exp
        y = kernels.elementwise("sigmoid", x)
    assert y.dtype == np.float32
    want = np.array([1 / (1 + np.exp(-float(v))) if v > -700 else 0.0 for v in x])
    # within a float32 rounding; below float32's smallest normal a zero (compiler.graph.nn)
    np.testing.assert_allclose(y, want, rtol=1.2e-7, atol=np.finfo(np.float32).tiny)
    assert y[0] == 0.0 and y[3] == 0.5 and y[-1] == 1.0


onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from compiler.graph.onnx_frontend import import_onnx  # noqa: E402
from compiler.graph.reference import run_reference  # noqa: E402


def _silu_se() -> Any:
    """Conv, SiLU (Sigmoid then Mul), and a squeeze-and-excitation gate, as torch.onnx.export
    writes EfficientNet's (opset 17)."""
    rng = np.random.default_rng(5)
    inits = {"w0": rng.normal(0, 0.3, (8, 3, 3, 3)), "w1": rng.normal(0, 0.3, (2, 8, 1, 1)),
             "b1": rng.normal(0, 0.1, 2), "w2": rng.normal(0, 0.3, (8, 2, 1, 1)),
             "b2": rng.normal(0, 0.1, 8)}
    nodes = [
        helper.make_node("Conv", ["x", "w0"], ["c0"], name="stem", pads=[1, 1, 1, 1]),
        helper.make_node("Sigmoid", ["c0"], ["s0"], name="act.sigmoid"),
        helper.make_node("Mul", ["c0", "s0"], ["a0"], name="act"),
        helper.make_node("GlobalAveragePool", ["a0"], ["p"], name="se.pool"),
        helper.make_node("Conv", ["p", "w1", "b1"], ["f1"], name="se.fc1"),
        helper.make_node("Sigmoid", ["f1"], ["s1"], name="se.act.sigmoid"),
        helper.make_node("Mul", ["f1", "s1"], ["a1"], name="se.act"),
        helper.make_node("Conv", ["a1", "w2", "b2"], ["f2"], name="se.fc2"),
        helper.make_node("Sigmoid", ["f2"], ["gate"], name="se.gate"),
        helper.make_node("Mul", ["a0", "gate"], ["y"], name="se.scale"),
    ]
    graph = helper.make_graph(
        nodes, "silu_se", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                         ["N", 3, 12, 12])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8, 12, 12])],
        [numpy_helper.from_array(v.astype(np.float32), k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_onnx_silu_and_gate_match_onnxruntime() -> None:
    model = _silu_se()
    g = import_onnx(model, batch=2)
    assert [n.op for n in g.nodes].count("sigmoid") == 3
    x = np.random.default_rng(9).normal(0, 1, (2, 3, 12, 12)).astype(np.float32)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = sess.run(None, {"x": x})[0]
    np.testing.assert_allclose(run_reference(g, {"x": x})["y"], want, rtol=1e-4, atol=1e-5)
