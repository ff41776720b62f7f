"""Grouped and depthwise convolutions through the graph: shape inference, the reference, the
ONNX importer (against onnxruntime), MobileNetV2 in the zoo, and whole runs bit-exact.

The kernels themselves (numpy and CuPy against the loop reference) are tested in
tests/test_kernels.py. The accelerator does not run grouped convolutions yet: the
partitioner puts them on the CPU fallback, and their MACs count in the network's total.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import accel
from accel.cli import main
from compiler.graph.ir import Graph, GraphError, Node, TensorType
from compiler.graph.ops import infer_types
from compiler.graph.passes.common import node_macs
from compiler.graph.reference import run_reference
from compiler.graph.zoo import mobilenet_v2
from runtime import kernels


def _grouped(x: np.ndarray, w: np.ndarray, groups: int, **attrs: Any) -> Graph:
    inputs = {"x": TensorType(x.shape, str(x.dtype))}
    node = Node("conv", "conv2d", ["x"], ["y"], {"weight": "w", "bias": None, "stride": (1, 1),
                                                 "padding": (1, 1), "shift": 6, "relu": True,
                                                 "groups": groups, **attrs})
    return infer_types(Graph("t", ["x"], ["y"], inputs, [node], {"w": w}))


@pytest.mark.parametrize(("channels", "out", "groups"), [(8, 8, 8), (8, 16, 8), (12, 6, 3)])
def test_reference_grouped_conv_equals_kernels(rng: np.random.Generator, channels: int,
                                               out: int, groups: int) -> None:
    x = rng.integers(-128, 128, (2, channels, 7, 6)).astype(np.int8)
    w = rng.integers(-128, 128, (out, channels // groups, 3, 3)).astype(np.int8)
    g = _grouped(x, w, groups)
    assert g.values["y"] == TensorType((2, out, 7, 6), "int8")
    want = kernels.conv2d(x, w, None, 1, 1, 6, True, groups=groups)
    np.testing.assert_array_equal(run_reference(g, {"x": x})["y"], want)
    assert node_macs(g.nodes[0], g) == 2 * out * 7 * 6 * (channels // groups) * 9


def test_grouped_conv_shape_errors() -> None:
    x = np.zeros((1, 8, 5, 5), np.int8)
    with pytest.raises(GraphError, match=r"groups must be a positive int dividing the "
                                         r"input's 8 and the weight's 8 channels, got 3"):
        _grouped(x, np.zeros((8, 1, 3, 3), np.int8), 3)
    with pytest.raises(GraphError, match=r"weight \(8, 2, 3, 3\) has 2 input channels per "
                                         r"group \(8 groups\), input .* has 8"):
        _grouped(x, np.zeros((8, 2, 3, 3), np.int8), 8)


def test_mobilenet_v2_structure() -> None:
    g = mobilenet_v2(image_size=224)
    convs = [n for n in g.nodes if n.op == "conv2d"]
    depthwise = [n for n in convs if n.attrs.get("groups", 1) != 1]
    # stem, 16 expansions, 17 depthwise, 17 projections, the 1x1 to 1280
    assert (len(convs), len(depthwise)) == (52, 17)
    for n in depthwise:
        w = g.params[n.attrs["weight"]]
        assert n.attrs["groups"] == w.shape[0] == g.values[n.inputs[0]].shape[1]
        assert w.shape[1:] == (1, 3, 3)
    adds = [n for n in g.nodes if n.op == "add"]
    assert len(adds) == 10 and not any(n.attrs["relu"] for n in adds)  # linear bottlenecks
    assert not any(n.attrs["relu"] for n in convs if n.name.endswith(".project"))
    assert g.values["features.18"] == TensorType((1, 1280, 7, 7), "int8")
    assert g.values["fc"] == TensorType((1, 1000), "int8", "NC")
    # 300.8M multiply-adds (Sandler et al. 2018: 300M), the classifier's 1.28M included
    total = sum(node_macs(n, g) for n in g.nodes)
    assert total == 300_774_272


@pytest.mark.parametrize("config", ["default", "vta_1x16x16"])
def test_mobilenet_v2_runs_bit_exact(config: str) -> None:
    """The pointwise convolutions and the residual adds on the accelerator (sim), the
    depthwise ones on the CPU fallback; every layer and the output equal the numpy
    reference network; the depthwise MACs count in the total, not the offloaded share."""
    graph = accel.load_model("mobilenet_v2", image_size=32, batch=2)
    x, _ = accel.sample_inputs(graph, 0)
    exe = accel.compile(graph, config)
    outputs, report = exe.run(x, backend="sim", check=True)
    assert report.check is True
    np.testing.assert_array_equal(outputs["fc"], exe.reference(x)["fc"])
    targets = {layer.name: layer.target for layer in report.layers}
    assert all(t == "cpu" for name, t in targets.items() if name.endswith(".dw"))
    assert all(t == "accel" for name, t in targets.items() if name.endswith(".project"))
    part = exe.graph.attrs["partition"]
    dw = sum(node_macs(n, exe.graph) for n in exe.graph.nodes if n.name.endswith(".dw"))
    assert dw > 0 and part["total_macs"] - part["accel_macs"] >= dw


def test_run_notes_the_grouped_layers(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "mobilenet_v2", "--image-size", "32", "--backend", "fsim"]) == 0
    out = capsys.readouterr().out
    assert ("note: 17 layer(s) are not accelerator operators (grouped or depthwise "
            "convolutions) and ran on the cpu fallback: features.1.dw, features.2.dw, ") in out
    assert "do not fit the buffers" not in out


# ---------------------------------------------------------------------- ONNX
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from compiler.graph.onnx_frontend import import_onnx  # noqa: E402


def _separable(seed: int = 0) -> Any:
    """Depthwise 3x3 (group 8) + BN + ReLU, pointwise 1x1, a grouped 3x3 (group 2), global
    pool, flatten, gemm: the MobileNet pattern as torch.onnx.export writes it (opset 17)."""
    rng = np.random.default_rng(seed)
    inits = {
        "w0": rng.normal(0, 0.3, (8, 3, 3, 3)), "wd": rng.normal(0, 0.4, (8, 1, 3, 3)),
        "bd": rng.normal(0, 0.1, 8), "gamma": rng.uniform(0.5, 1.5, 8),
        "beta": rng.normal(0, 0.1, 8), "mean": rng.normal(0, 0.1, 8),
        "var": rng.uniform(0.5, 2.0, 8), "wp": rng.normal(0, 0.3, (16, 8, 1, 1)),
        "wg": rng.normal(0, 0.2, (16, 8, 3, 3)), "wf": rng.normal(0, 0.3, (10, 16)),
        "bf": rng.normal(0, 0.1, 10),
    }
    nodes = [
        helper.make_node("Conv", ["x", "w0"], ["c0"], name="stem", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c0"], ["r0"], name="relu0"),
        helper.make_node("Conv", ["r0", "wd", "bd"], ["cd"], name="dw", group=8,
                         pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("BatchNormalization", ["cd", "gamma", "beta", "mean", "var"], ["bn"],
                         name="bn"),
        helper.make_node("Relu", ["bn"], ["rd"], name="relu1"),
        helper.make_node("Conv", ["rd", "wp"], ["cp"], name="pw"),
        helper.make_node("Relu", ["cp"], ["rp"], name="relu2"),
        helper.make_node("Conv", ["rp", "wg"], ["cg"], name="grouped", group=2,
                         pads=[1, 1, 1, 1]),
        helper.make_node("GlobalAveragePool", ["cg"], ["gp"], name="pool"),
        helper.make_node("Flatten", ["gp"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "wf", "bf"], ["y"], name="fc", transB=1),
    ]
    graph = helper.make_graph(
        nodes, "separable", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                           ["N", 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 10])],
        [numpy_helper.from_array(v.astype(np.float32), k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_onnx_grouped_conv_imports_and_matches_onnxruntime() -> None:
    model = _separable()
    g = import_onnx(model, batch=4)
    conv = {n.name: n for n in g.nodes if n.op == "conv2d"}
    assert conv["dw"].attrs["groups"] == 8 and conv["grouped"].attrs["groups"] == 2
    assert "groups" not in conv["pw"].attrs
    x = np.random.default_rng(3).normal(0, 1, (4, 3, 16, 16)).astype(np.float32)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = sess.run(None, {"x": x})[0]
    np.testing.assert_allclose(run_reference(g, {"x": x})["y"], want, rtol=1e-4, atol=1e-5)


def test_onnx_grouped_conv_runs_bit_exact_and_agrees(tmp_path: Any) -> None:
    """Quantised and run (the 1x1 on the accelerator, the grouped ones on the CPU): bit-exact
    with the reference network, and close to onnxruntime's float output (cosine above
    0.98 over 16 inputs; an int8 network of five roundings)."""
    path = tmp_path / "separable.onnx"
    onnx.save(_separable(), str(path))
    graph = accel.load_model(str(path), batch=16)
    x, calibration = accel.sample_inputs(graph, 0, calibration_samples=16)
    exe = accel.compile(graph, "default", calibration=calibration)
    outputs, report = exe.run(x, backend="sim", check=True)
    assert report.check is True
    targets = {layer.name: layer.target for layer in report.layers}
    assert targets["dw"] == "cpu" and targets["grouped"] == "cpu" and targets["pw"] == "accel"
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    want = sess.run(None, {"x": x})[0]
    got = outputs["y"]
    cos = (got * want).sum(1) / np.linalg.norm(got, axis=1) / np.linalg.norm(want, axis=1)
    assert cos.min() > 0.98, cos
