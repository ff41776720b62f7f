"""Front ends and the reference executor: the model zoo (structure, sizes, determinism,
calibrated activations), ``run_reference`` against ``runtime.kernels`` op by op, and the ONNX
importer against onnxruntime (float exactly, int8 after quantisation within a stated bound)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from accel.machine.config import HwConfig
from compiler.graph.ir import Graph, GraphError, Node, TensorType
from compiler.graph.ops import infer_types
from compiler.graph.passes import optimize
from compiler.graph.reference import run_reference
from compiler.graph.zoo import load_zoo, resnet
from runtime import kernels

I8, F32 = "int8", "float32"


# --------------------------------------------------------------------------- model zoo
@pytest.mark.parametrize(("depth", "convs", "adds"), [(18, 20, 8), (34, 36, 16), (50, 53, 16)])
def test_zoo_structure(depth: int, convs: int, adds: int) -> None:
    g = resnet(depth, image_size=32)
    ops = [n.op for n in g.nodes]
    assert ops.count("conv2d") == convs  # stem + block convs + 3 downsample convs (4 for 50)
    assert ops.count("add") == adds
    assert (ops.count("dense"), ops.count("max_pool2d"), ops.count("global_avg_pool")) == (1, 1, 1)
    assert g.values["data"] == TensorType((1, 3, 32, 32), I8)
    assert g.values["fc"] == TensorType((1, 1000), I8, "NC")
    assert all(n.attrs["relu"] for n in g.nodes if n.op == "add")
    stem = g.node("conv1")
    assert (stem.attrs["stride"], stem.attrs["padding"]) == ((2, 2), (3, 3))
    assert g.params["conv1.weight"].shape == (64, 3, 7, 7)
    assert g.params["conv1.weight"].dtype == np.int8
    assert g.params["conv1.bias"].dtype == np.int32
    assert all(0 <= n.attrs["shift"] <= 31 for n in g.nodes if "shift" in n.attrs)


def test_zoo_resnet18_layers_match_the_tvm_paper() -> None:
    g = resnet(18)
    seen = set()
    for n in g.nodes:
        if n.op == "conv2d":
            w = g.params[n.attrs["weight"]]
            seen.add((g.values[n.inputs[0]].shape[2], w.shape[1], w.shape[0], w.shape[2],
                      n.attrs["stride"][0]))
    # TVM OSDI'18 Table 2: input size, IC -> OC, kernel, stride (C1..C12).
    assert seen == {(224, 3, 64, 7, 2), (56, 64, 64, 3, 1), (56, 64, 128, 3, 2),
                    (56, 64, 128, 1, 2), (28, 128, 128, 3, 1), (28, 128, 256, 3, 2),
                    (28, 128, 256, 1, 2), (14, 256, 256, 3, 1), (14, 256, 512, 3, 2),
                    (14, 256, 512, 1, 2), (7, 512, 512, 3, 1)}  # (C3 1x1/1 is not in v1-18)
    assert g.node("layer2.0.downsample").inputs == ["layer1.1.add"]


@pytest.mark.parametrize(("batch", "size"), [(2, 32), (1, 57), (3, 16)])
def test_zoo_any_batch_and_size(batch: int, size: int) -> None:
    g = resnet(18, batch=batch, image_size=size, num_classes=10)
    x = np.random.default_rng(3).integers(-128, 128, (batch, 3, size, size)).astype(np.int8)
    y = run_reference(g, {"data": x})["fc"]
    assert y.shape == (batch, 10) and y.dtype == np.int8


def test_zoo_is_deterministic() -> None:
    a, b = resnet(18, image_size=32), resnet(18, image_size=32)
    assert a.to_text() == b.to_text()
    assert a.params.keys() == b.params.keys()
    assert all(np.array_equal(a.params[k], b.params[k]) for k in a.params)
    batched = resnet(18, batch=4, image_size=32)  # the batch changes no param or shift
    assert all(np.array_equal(a.params[k], batched.params[k]) for k in a.params)
    assert [n.attrs for n in a.nodes] == [n.attrs for n in batched.nodes]
    other = resnet(18, image_size=32, seed=1)
    assert not np.array_equal(a.params["conv1.weight"], other.params["conv1.weight"])


def _activation_stats(g: Graph, seed: int) -> dict[str, tuple[float, float]]:
    size = g.values["data"].shape[2]
    x = np.random.default_rng([seed, 99]).integers(-128, 128, (1, 3, size, size))
    values = run_reference(g, {"data": x.astype(np.int8)}, keep=True)
    stats = {}
    for n in g.nodes:
        if n.op in ("conv2d", "add", "dense"):
            v = values[n.outputs[0]]
            stats[n.name] = (float(v.std()), float(np.mean((v == 127) | (v == -128))))
    return stats


# Thresholds. Shifts put the 99.9th percentile of |acc| of a calibration image in 64..127, so
# on another image of the same kind a layer's std should be tens of LSBs: a std below 4 would
# mean the layer uses at most 3 of its 7 magnitude bits (vanishing). Saturation: about 0.1 % of
# values clip by construction; 5 % leaves room for a different input and still fails a shift
# that is one bit too small (which clips the top ~10-20 % of a bell-shaped distribution).
_MIN_STD, _MAX_SATURATED = 4.0, 0.05


@pytest.mark.parametrize(("depth", "size"), [(18, 224), (50, 64), (34, 32)])
def test_zoo_activations_neither_vanish_nor_saturate(depth: int, size: int) -> None:
    stats = _activation_stats(resnet(depth, image_size=size), seed=7)
    for name, (std, saturated) in stats.items():
        assert std > _MIN_STD, f"{name}: std {std:.2f} (vanishing)"
        assert saturated < _MAX_SATURATED, f"{name}: {saturated:.1%} saturated"


@pytest.mark.slow
@pytest.mark.parametrize("depth", [34, 50])
def test_zoo_activations_at_224(depth: int) -> None:
    for name, (std, saturated) in _activation_stats(resnet(depth), seed=7).items():
        assert std > _MIN_STD and saturated < _MAX_SATURATED, name


def test_zoo_errors() -> None:
    with pytest.raises(GraphError, match=r"^unknown model 'resnet19'; expected one of "
                       r"resnet18, resnet34, resnet50, mobilenet_v2, efficientnet_b0, bert_tiny, "
                       r"bert_base, vit_tiny$"):
        load_zoo("resnet19")
    with pytest.raises(GraphError, match="unsupported ResNet depth 101"):
        resnet(101)
    with pytest.raises(GraphError, match="image_size must be an int >= 1"):
        resnet(18, image_size=0)
    assert load_zoo("resnet18", batch=2, image_size=32).values["data"].shape == (2, 3, 32, 32)


# --------------------------------------------------------------------------- run_reference
def _one_node(op: str, x: np.ndarray, attrs: dict[str, Any],
              params: dict[str, np.ndarray] | None = None, second: np.ndarray | None = None,
              ) -> np.ndarray:
    inputs = {"x": TensorType(x.shape, str(x.dtype))}
    arrays = {"x": x}
    if second is not None:
        inputs["z"] = TensorType(second.shape, str(second.dtype))
        arrays["z"] = second
    g = infer_types(Graph("t", list(inputs), ["y"], inputs,
                          [Node("n", op, list(inputs), ["y"], attrs)], params or {}))
    return run_reference(g, arrays)["y"]


def _int8(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.integers(-128, 128, shape).astype(np.int8)


@pytest.mark.parametrize(("shape", "oc", "k", "stride", "pad", "shift", "relu", "bias_scale"), [
    ((1, 3, 9, 9), 8, 3, 1, 1, 8, True, 1000),
    ((2, 5, 8, 7), 4, 3, 2, 0, 0, False, 10),
    ((1, 16, 6, 6), 3, 1, 1, 0, 31, False, 2**31 - 1),  # bias near the int32 edge: wraps
    ((1, 200, 5, 5), 6, 3, 1, 2, 12, True, 2**20),       # K = 1800 > one float32 chunk
    ((3, 2, 11, 11), 5, (3, 5), (1, 2), (2, 1), 5, False, None),
])
def test_reference_conv2d_equals_kernels(rng: np.random.Generator, shape: tuple, oc: int,
                                         k: Any, stride: Any, pad: Any, shift: int, relu: bool,
                                         bias_scale: int | None) -> None:
    kh, kw = (k, k) if isinstance(k, int) else k
    x, w = _int8(rng, *shape), _int8(rng, oc, shape[1], kh, kw)
    bias = None if bias_scale is None else \
        rng.integers(-bias_scale, bias_scale, oc, endpoint=True).astype(np.int32)
    params = {"w": w} | ({} if bias is None else {"b": bias})
    pair = lambda v: v if isinstance(v, tuple) else (v, v)  # noqa: E731
    got = _one_node("conv2d", x, {"weight": "w", "bias": None if bias is None else "b",
                                  "stride": pair(stride), "padding": pair(pad), "shift": shift,
                                  "relu": relu}, params)
    want = kernels.conv2d(x, w, bias, stride, pad, shift, relu)
    np.testing.assert_array_equal(got, want)


def test_reference_dense_add_relu_flatten_equal_kernels(rng: np.random.Generator) -> None:
    x, w = _int8(rng, 3, 1500), _int8(rng, 7, 1500)
    bias = rng.integers(-2**31, 2**31 - 1, 7).astype(np.int32)
    for shift, relu, b in ((0, False, None), (9, True, bias), (31, False, bias)):
        got = _one_node("dense", x, {"weight": "w", "bias": "b" if b is not None else None,
                                     "shift": shift, "relu": relu}, {"w": w, "b": bias})
        np.testing.assert_array_equal(got, kernels.dense(x, w, b, shift, relu))
    a, z = _int8(rng, 2, 3, 4, 5), _int8(rng, 2, 3, 4, 5)
    for shift, relu in ((0, False), (1, True), (3, False)):
        got = _one_node("add", a, {"shift": shift, "relu": relu}, second=z)
        np.testing.assert_array_equal(got, kernels.add(a, z, shift, relu))
    np.testing.assert_array_equal(_one_node("relu", a, {}), kernels.relu(a))
    np.testing.assert_array_equal(_one_node("flatten", a, {}), a.reshape(2, -1))


@pytest.mark.parametrize(("kernel", "stride", "pad"), [((3, 3), (2, 2), (1, 1)),
                                                       ((2, 2), (2, 2), (0, 0)),
                                                       ((3, 2), (1, 2), (1, 0))])
def test_reference_pools_equal_kernels(rng: np.random.Generator, kernel: tuple, stride: tuple,
                                       pad: tuple) -> None:
    x = _int8(rng, 2, 3, 9, 8)
    attrs = {"kernel": kernel, "stride": stride, "padding": pad}
    np.testing.assert_array_equal(_one_node("max_pool2d", x, attrs),
                                  kernels.max_pool2d(x, kernel, stride, pad))
    np.testing.assert_array_equal(_one_node("avg_pool2d", x, attrs),
                                  kernels.avg_pool2d(x, kernel, stride, pad))
    np.testing.assert_array_equal(_one_node("global_avg_pool", x, {}),
                                  kernels.global_avg_pool(x))


def _run_with_kernels(g: Graph, x: np.ndarray) -> dict[str, np.ndarray]:
    """Every value of a zoo graph computed by runtime.kernels, node by node."""
    env = {"data": x}
    for n in g.nodes:
        a, p = n.attrs, g.params
        args = [env[v] for v in n.inputs]
        bias = p.get(a.get("bias") or "")
        if n.op == "conv2d":
            y = kernels.conv2d(args[0], p[a["weight"]], bias, a["stride"], a["padding"],
                               a["shift"], a["relu"])
        elif n.op == "dense":
            y = kernels.dense(args[0], p[a["weight"]], bias, a["shift"], a["relu"])
        elif n.op == "add":
            y = kernels.add(args[0], args[1], a["shift"], a["relu"])
        elif n.op == "max_pool2d":
            y = kernels.max_pool2d(args[0], a["kernel"], a["stride"], a["padding"])
        elif n.op == "global_avg_pool":
            y = kernels.global_avg_pool(args[0])
        else:
            assert n.op == "flatten"
            y = args[0].reshape(args[0].shape[0], -1)
        env[n.outputs[0]] = y
    return env


def test_reference_network_equals_kernels_value_by_value() -> None:
    g = resnet(18, batch=2, image_size=40)
    x = np.random.default_rng(11).integers(-128, 128, (2, 3, 40, 40)).astype(np.int8)
    ours, theirs = run_reference(g, {"data": x}, keep=True), _run_with_kernels(g, x)
    assert ours.keys() == theirs.keys()
    for v in ours:
        np.testing.assert_array_equal(ours[v], theirs[v], err_msg=v)


def test_reference_rejects_bad_inputs() -> None:
    g = resnet(18, image_size=16)
    with pytest.raises(GraphError, match="no array given for input 'data'"):
        run_reference(g, {})
    with pytest.raises(GraphError, match=r"input 'data' must be int8 of shape \(1, 3, 16, 16\)"):
        run_reference(g, {"data": np.zeros((1, 3, 16, 16), np.float32)})


# --------------------------------------------------------------------------- ONNX
try:
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper
except ImportError:  # the zoo and reference tests above still run
    onnx = None

from compiler.graph.onnx_frontend import import_onnx  # noqa: E402

needs_onnx = pytest.mark.skipif(onnx is None, reason="needs the onnx and onnxruntime packages")


def _model(nodes: list, inits: dict[str, np.ndarray], x_shape: list, y_shape: list,
           name: str = "net") -> Any:
    graph = helper.make_graph(
        nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)],
        [numpy_helper.from_array(v.astype(np.float32), k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def small_cnn(seed: int = 0, classes: int = 10, size: int = 16) -> Any:
    """conv + bn + relu, conv, residual add + relu, max-pool, flatten, gemm."""
    rng = np.random.default_rng(seed)
    inits = {
        "w1": rng.normal(0, 0.3, (8, 3, 3, 3)), "b1": rng.normal(0, 0.1, 8),
        "gamma": rng.uniform(0.5, 1.5, 8), "beta": rng.normal(0, 0.1, 8),
        "mean": rng.normal(0, 0.1, 8), "var": rng.uniform(0.5, 2.0, 8),
        "w2": rng.normal(0, 0.2, (8, 8, 3, 3)), "b2": rng.normal(0, 0.1, 8),
        "wf": rng.normal(0, 0.3, (classes, 8 * (size // 2) ** 2)),
        "bf": rng.normal(0, 0.1, classes),
    }
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c1", "gamma", "beta", "mean", "var"], ["bn1"],
                         name="bn1"),
        helper.make_node("Relu", ["bn1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c2", "r1"], ["s"], name="add"),
        helper.make_node("Relu", ["s"], ["r2"], name="relu2"),
        helper.make_node("MaxPool", ["r2"], ["p"], name="pool", kernel_shape=[2, 2],
                         strides=[2, 2]),
        helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "wf", "bf"], ["y"], name="fc", transB=1),
    ]
    return _model(nodes, inits, ["N", 3, size, size], ["N", classes], "small_cnn")


def _ort(model: Any, x: np.ndarray) -> np.ndarray:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})[0]


@needs_onnx
def test_onnx_import_structure() -> None:
    g = import_onnx(small_cnn(), batch=2)
    assert g.to_text() == "\n".join([
        "graph small_cnn(x: float32[2, 3, 16, 16]{NCHW}):",
        "  c1 = conv2d(x) {weight=w1, bias=b1, stride=(1, 1), padding=(1, 1)}  # conv1"
        "  -> float32[2, 8, 16, 16]{NCHW}",
        "  bn1 = batch_norm(c1) {scale=gamma, bias=beta, mean=mean, var=var, epsilon=1e-05}"
        "  # bn1  -> float32[2, 8, 16, 16]{NCHW}",
        "  r1 = relu(bn1)  # relu1  -> float32[2, 8, 16, 16]{NCHW}",
        "  c2 = conv2d(r1) {weight=w2, bias=b2, stride=(1, 1), padding=(1, 1)}  # conv2"
        "  -> float32[2, 8, 16, 16]{NCHW}",
        "  s = add(c2, r1)  # add  -> float32[2, 8, 16, 16]{NCHW}",
        "  r2 = relu(s)  # relu2  -> float32[2, 8, 16, 16]{NCHW}",
        "  p = max_pool2d(r2) {kernel=(2, 2), stride=(2, 2), padding=(0, 0)}  # pool"
        "  -> float32[2, 8, 8, 8]{NCHW}",
        "  f = flatten(p)  # flatten  -> float32[2, 512]{NC}",
        "  y = dense(f) {weight=fc.weight, bias=fc.bias}  # fc  -> float32[2, 10]{NC}",
        "  return y",
    ])
    np.testing.assert_array_equal(g.params["w1"], numpy_helper.to_array(
        small_cnn().graph.initializer[0]))


@needs_onnx
def test_onnx_float_reference_matches_onnxruntime(tmp_path: Path) -> None:
    model = small_cnn()
    path = tmp_path / "small.onnx"
    onnx.save(model, path)
    g = import_onnx(path, batch=4)
    x = np.random.default_rng(1).normal(0, 1, (4, 3, 16, 16)).astype(np.float32)
    np.testing.assert_allclose(run_reference(g, {"x": x})["y"], _ort(model, x), atol=1e-4,
                               rtol=1e-4)


@needs_onnx
def test_onnx_other_operators_match_onnxruntime() -> None:
    """Identity, Constant, Reshape as flatten, MatMul, AveragePool, GlobalAveragePool."""
    rng = np.random.default_rng(2)
    inits = {"w": rng.normal(0, 0.5, (4, 3, 3, 3)), "m": rng.normal(0, 0.5, (4, 5))}
    shape = helper.make_tensor("shape_value", TensorProto.INT64, [2], [0, -1])
    nodes = [
        helper.make_node("Identity", ["w"], ["w_alias"], name="alias"),
        helper.make_node("Conv", ["x", "w_alias"], ["c"], name="conv", pads=[0, 0, 0, 0],
                         strides=[2, 2]),
        helper.make_node("AveragePool", ["c"], ["a"], name="avg", kernel_shape=[3, 3],
                         pads=[1, 1, 1, 1], count_include_pad=1),
        helper.make_node("GlobalAveragePool", ["a"], ["g"], name="gap"),
        helper.make_node("Constant", [], ["shape"], name="shape", value=shape),
        helper.make_node("Reshape", ["g", "shape"], ["r"], name="reshape"),
        helper.make_node("MatMul", ["r", "m"], ["mm"], name="mm"),
        helper.make_node("Identity", ["mm"], ["y"], name="out"),
    ]
    model = _model(nodes, inits, [2, 3, 11, 11], [2, 5])
    g = import_onnx(model)
    assert [n.op for n in g.nodes] == ["conv2d", "avg_pool2d", "global_avg_pool", "flatten",
                                       "dense"]
    assert g.outputs == ["y"]
    x = rng.normal(0, 1, (2, 3, 11, 11)).astype(np.float32)
    np.testing.assert_allclose(run_reference(g, {"x": x})["y"], _ort(model, x), atol=1e-4,
                               rtol=1e-4)


@needs_onnx
def test_onnx_int8_path_agrees_with_onnxruntime(cfg: HwConfig) -> None:
    """Calibrate on 64 seeded inputs, compare on 64 others.

    Thresholds: a power-of-two scale is at most 2x coarser than a max-abs one, so each int8
    rounding adds noise of rms <= (2 * amax / 127) / sqrt(12), about 35 dB below a signal of
    rms amax / 4; the six roundings of this net (input, two convs, add, weights, logits) add up
    to a relative L2 error near 4-5 % (measured: mean 3-4.3 %, worst sample 5-8.6 % over six
    model seeds). We assert a worst-sample relative error below 15 % and cosine above 0.99
    (both 2x margins), mean relative error below 6 %, and top-1 agreement of at least 90 %
    (random weights leave some near-tied logits; measured 94-100 %). A scale off by one bit
    alone gives a 50 % relative error, so each bound catches a wrong shift.
    """
    model = small_cnn()
    rng = np.random.default_rng(5)
    g = import_onnx(model, batch=64)
    cal = {"x": rng.normal(0, 1, (64, 3, 16, 16)).astype(np.float32)}
    o = optimize(g, cfg, calibration=cal)
    assert [n.op for n in o.nodes].count("dequantize") == 1
    x = rng.normal(0, 1, (64, 3, 16, 16)).astype(np.float32)
    want, got = _ort(model, x), run_reference(o, {"x": x})["y"]
    assert got.dtype == np.float32 and got.shape == want.shape
    rel = np.linalg.norm(got - want, axis=1) / np.linalg.norm(want, axis=1)
    cos = (got * want).sum(1) / np.linalg.norm(got, axis=1) / np.linalg.norm(want, axis=1)
    top1 = np.mean(got.argmax(1) == want.argmax(1))
    assert rel.max() < 0.15 and rel.mean() < 0.06, (rel.max(), rel.mean())
    assert cos.min() > 0.99, cos.min()
    assert top1 >= 0.9, top1


@needs_onnx
def test_onnx_corrupt_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08\x07 this is not a protobuf \xff\xfe")
    with pytest.raises(GraphError, match=rf"^{bad}: not a valid ONNX model: "):
        import_onnx(bad)
    truncated = tmp_path / "truncated.onnx"
    truncated.write_bytes(small_cnn().SerializeToString()[:200])
    with pytest.raises(GraphError, match=rf"^{truncated}: not a valid ONNX model: "):
        import_onnx(truncated)
    with pytest.raises(GraphError, match=rf"{tmp_path / 'missing.onnx'}: no such file"):
        import_onnx(tmp_path / "missing.onnx")


@needs_onnx
def test_onnx_unsupported_operator_names_the_node() -> None:
    scales = helper.make_tensor("scales", TensorProto.FLOAT, [4], [1, 1, 2, 2])
    nodes = [helper.make_node("Constant", [], ["s"], name="scales", value=scales),
             helper.make_node("Relu", ["x"], ["r"], name="relu_1"),
             helper.make_node("Resize", ["r", "", "s"], ["y"], name="conv_7")]
    model = _model(nodes, {}, [1, 3, 4, 4], [1, 3, 8, 8])
    with pytest.raises(GraphError, match=r"^net: node 'conv_7' uses unsupported operator "
                       r"'Resize'$"):
        import_onnx(model)


@needs_onnx
@pytest.mark.parametrize(("op", "inputs", "attrs", "inits", "message"), [
    ("Conv", ["x", "w"], {"name": "grouped", "group": 2}, {"w": np.ones((3, 1, 1, 1))},
     r"node 'grouped' \(Conv\): group=2 does not divide the weight's 3 output channels"),
    ("Conv", ["x", "x"], {"name": "dyn"}, {},
     r"node 'dyn' \(Conv\): weight 'x' must be a constant"),
    ("MaxPool", ["x"], {"name": "mp", "kernel_shape": [2, 2], "pads": [0, 0, 1, 1]}, {},
     r"node 'mp' \(MaxPool\): MaxPool: only symmetric 2-D pads"),
    ("Flatten", ["x"], {"name": "fl", "axis": 2}, {},
     r"node 'fl' \(Flatten\): axis=2 is not supported"),
])
def test_onnx_unsupported_attributes(op: str, inputs: list[str], attrs: dict[str, Any],
                                     inits: dict, message: str) -> None:
    node = helper.make_node(op, inputs, ["y"], **attrs)
    with pytest.raises(GraphError, match=message):
        import_onnx(_model([node], inits, [1, 3, 4, 4], [1, 3, 4, 4]))


def _relu6_cnn(seed: int = 3) -> Any:
    """conv -> Clip(0, 6) (ReLU6 as torch exports it: the bounds as constant inputs) -> conv
    -> Clip(-1, 1), then global average pool and flatten."""
    rng = np.random.default_rng(seed)
    inits = {"w1": rng.normal(0, 0.6, (8, 3, 3, 3)), "w2": rng.normal(0, 0.3, (8, 8, 1, 1)),
             "zero": np.array(0.0), "six": np.array(6.0), "lo": np.array(-1.0),
             "hi": np.array(1.0)}
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Clip", ["c1", "zero", "six"], ["r1"], name="relu6"),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], name="conv2"),
        helper.make_node("Clip", ["c2", "lo", "hi"], ["r2"], name="hardtanh"),
        helper.make_node("GlobalAveragePool", ["r2"], ["p"], name="pool"),
        helper.make_node("Flatten", ["p"], ["y"], name="flatten"),
    ]
    return _model(nodes, inits, ["N", 3, 12, 12], ["N", 8], "relu6_cnn")


def test_clip_on_int8_is_clipping_the_reals_then_quantising() -> None:
    """The int8 bounds are rint(bound * 2**s): the same as clamping the real values and
    rounding them, for every int8 value and bounds that fall between grid points."""
    from compiler.graph import nn

    q = np.arange(-128, 128, dtype=np.int8)
    for s, lo, hi in ((4, 0.0, 6.0), (2, -1.3, 0.7), (6, None, 1.01), (0, -200.0, 300.0)):
        real = q.astype(np.float64) * 2.0**-s
        want = np.clip(np.rint(nn.clip(real, lo, hi) * 2.0**s), -128, 127).astype(np.int8)
        assert np.array_equal(nn.clip(q, lo, hi, s), want), (s, lo, hi)


@needs_onnx
def test_onnx_clip_relu6_imports_runs_and_agrees(cfg: HwConfig) -> None:
    """Clip(0, 6) becomes a relu (fused into the conv on the accelerator) and a clip of 6;
    the float import equals onnxruntime; the int8 network is bit-exact on the accelerator
    against the numpy reference and close to onnxruntime; non-constant bounds are one
    line."""
    import accel

    model = _relu6_cnn()
    g = import_onnx(model, batch=4)
    assert [(n.op, n.attrs.get("min"), n.attrs.get("max")) for n in g.nodes
            if n.op in ("relu", "clip")] == [("relu", None, None), ("clip", None, 6.0),
                                             ("clip", -1.0, 1.0)]
    rng = np.random.default_rng(4)
    x = rng.normal(0, 1, (4, 3, 12, 12)).astype(np.float32)
    np.testing.assert_allclose(run_reference(g, {"x": x})["y"], _ort(model, x), atol=1e-5)
    cal = [{"x": rng.normal(0, 1, (4, 3, 12, 12)).astype(np.float32)} for _ in range(4)]
    exe = accel.compile(g, cfg, calibration=cal)
    assert any(n.op == "clip" and n.attrs["scale_shift"] >= 0 for n in exe.graph.nodes)
    out, report = exe.run(x, backend="sim", check=True)
    assert report.check is True
    want = _ort(model, x)
    cos = (out["y"] * want).sum() / np.linalg.norm(out["y"]) / np.linalg.norm(want)
    assert cos > 0.99, cos
    bad = onnx.helper.make_model(onnx.helper.make_graph(
        [helper.make_node("Clip", ["x", "x"], ["y"], name="clip_by_input")], "bad",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])]),
        opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(GraphError, match=r"clip_by_input.*min 'x' must be a constant"):
        import_onnx(bad)


@needs_onnx
def test_onnx_hard_swish_and_hard_sigmoid_match_onnxruntime() -> None:
    """MobileNetV3's activations, as float operators on the fallback."""
    nodes = [helper.make_node("HardSwish", ["x"], ["h"], name="hswish"),
             helper.make_node("HardSigmoid", ["h"], ["y"], name="hsig", alpha=0.3, beta=0.4)]
    model = _model(nodes, {}, ["N", 3, 5, 5], ["N", 3, 5, 5], "hard")
    g = import_onnx(model, batch=2)
    x = (np.random.default_rng(9).normal(0, 3, (2, 3, 5, 5))).astype(np.float32)
    np.testing.assert_allclose(run_reference(g, {"x": x})["y"], _ort(model, x), atol=1e-6)


@needs_onnx
@pytest.mark.parametrize(("size", "kernel", "stride", "pad"), [
    (13, 3, 2, 0), (14, 3, 2, 0), (12, 2, 2, 0), (11, 3, 2, 1), (10, 3, 3, 1), (7, 3, 1, 0)])
def test_onnx_max_pool_ceil_mode_matches_onnxruntime(size: int, kernel: int, stride: int,
                                                     pad: int) -> None:
    """SqueezeNet's and GoogLeNet's pools: the output size and values of ceil_mode=1 (a last
    window that starts in the bottom padding is dropped), float and int8."""
    node = helper.make_node("MaxPool", ["x"], ["y"], name="pool", kernel_shape=[kernel] * 2,
                            strides=[stride] * 2, pads=[pad] * 4, ceil_mode=1)
    want_hw = -(-(size + 2 * pad - kernel) // stride) + 1
    if (want_hw - 1) * stride >= size + pad:
        want_hw -= 1
    model = _model([node], {}, ["N", 2, size, size], ["N", 2, want_hw, want_hw], "ceil")
    g = import_onnx(model, batch=1)
    x = np.random.default_rng(size).normal(0, 1, (1, 2, size, size)).astype(np.float32)
    want = _ort(model, x)
    assert want.shape[2:] == (want_hw, want_hw)
    np.testing.assert_array_equal(run_reference(g, {"x": x})["y"], want)
    q = np.random.default_rng(1).integers(-128, 128, (1, 2, size, size)).astype(np.int8)
    got = kernels.max_pool2d(q, (kernel, kernel), (stride, stride), (pad, pad), True)
    assert got.shape == (1, 2, want_hw, want_hw)
    np.testing.assert_array_equal(got, run_reference(_int_pool_graph(g), {"x": q})["y"])


def _int_pool_graph(g: Graph) -> Graph:
    """``g`` (one pool node) on an int8 input."""
    t = g.values["x"]
    out = Graph("int_pool", ["x"], ["y"], {}, [g.nodes[0]])
    out.values["x"] = TensorType(t.shape, "int8", t.layout)
    return infer_types(out)


@needs_onnx
def test_a_bias_that_int32_cannot_hold_at_the_accumulator_scale_lowers_the_weights(
        cfg: HwConfig) -> None:
    """Inputs near 1e-10 give the accumulator a scale near 2**40, where a bias of 0.5 is far
    past int32: it was clipped to about 2e-3 (GoogLeNet's logits with random weights were
    wrong); the weight scale is lowered instead, and the output is the bias it should be."""
    rng = np.random.default_rng(12)
    inits = {"w": rng.normal(0, 0.3, (4, 16)), "b": np.array([0.5, -0.25, 0.125, 1.0])}
    model = _model([helper.make_node("Gemm", ["x", "w", "b"], ["y"], name="fc", transB=1)],
                   inits, ["N", 16], ["N", 4], "tiny_inputs")
    g = import_onnx(model, batch=8)
    cal = {"x": (rng.normal(0, 1e-10, (8, 16))).astype(np.float32)}
    o = optimize(g, cfg, calibration=cal)
    x = (rng.normal(0, 1e-10, (8, 16))).astype(np.float32)
    got, want = run_reference(o, {"x": x})["y"], _ort(model, x)
    np.testing.assert_allclose(got, want, rtol=0.02)
