"""ONNX transformer graphs as frameworks export them, against onnxruntime.

The encoder layer below is written node by node as PyTorch's exporter writes a BERT layer at
opset 13: MatMul then Add for every projection, the head split as Reshape / Transpose with the
target shape computed by a Shape / Gather / Unsqueeze / Concat chain, the score scaling as a
Div, a constant attention mask through Equal / Where, LayerNorm decomposed into ReduceMean /
Sub / Pow / Sqrt / Div / Mul / Add, and the erf form of GELU.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

import accel
from compiler.graph.ir import GraphError
from compiler.graph.onnx_frontend import import_onnx
from compiler.graph.passes import match_patterns

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

HIDDEN, HEADS, FFN, SEQ = 64, 2, 128, 24


def _init(name: str, value: np.ndarray) -> Any:
    return numpy_helper.from_array(np.asarray(value), name)


def _layer_norm(prefix: str, x: str, nodes: list[Any], inits: list[Any],
                rng: np.random.Generator) -> str:
    p = prefix
    inits += [_init(f"{p}.eps", np.float32(1e-12)), _init(f"{p}.two", np.float32(2.0)),
              _init(f"{p}.gamma", (1 + 0.1 * rng.standard_normal(HIDDEN)).astype(np.float32)),
              _init(f"{p}.beta", (0.1 * rng.standard_normal(HIDDEN)).astype(np.float32))]
    nodes += [
        helper.make_node("ReduceMean", [x], [f"{p}.mean"], axes=[-1], name=f"{p}/ReduceMean"),
        helper.make_node("Sub", [x, f"{p}.mean"], [f"{p}.d"], name=f"{p}/Sub"),
        helper.make_node("Pow", [f"{p}.d", f"{p}.two"], [f"{p}.sq"], name=f"{p}/Pow"),
        helper.make_node("ReduceMean", [f"{p}.sq"], [f"{p}.var"], axes=[-1],
                         name=f"{p}/ReduceMean_1"),
        helper.make_node("Add", [f"{p}.var", f"{p}.eps"], [f"{p}.ve"], name=f"{p}/Add"),
        helper.make_node("Sqrt", [f"{p}.ve"], [f"{p}.std"], name=f"{p}/Sqrt"),
        helper.make_node("Div", [f"{p}.d", f"{p}.std"], [f"{p}.n"], name=f"{p}/Div"),
        helper.make_node("Mul", [f"{p}.n", f"{p}.gamma"], [f"{p}.g"], name=f"{p}/Mul"),
        helper.make_node("Add", [f"{p}.g", f"{p}.beta"], [f"{p}.out"], name=f"{p}/Add_1"),
    ]
    return f"{p}.out"


def _linear(name: str, x: str, k: int, n: int, nodes: list[Any], inits: list[Any],
            rng: np.random.Generator) -> str:
    inits += [_init(f"{name}.weight", (rng.standard_normal((k, n)) / math.sqrt(k)).astype(
        np.float32)), _init(f"{name}.bias", (0.05 * rng.standard_normal(n)).astype(np.float32))]
    nodes += [helper.make_node("MatMul", [x, f"{name}.weight"], [f"{name}.mm"],
                               name=f"{name}/MatMul"),
              helper.make_node("Add", [f"{name}.mm", f"{name}.bias"], [f"{name}.out"],
                               name=f"{name}/Add")]
    return f"{name}.out"


def bert_layer(seed: int = 0, masked: int = 3) -> Any:
    """One BERT encoder layer (post-LN) as PyTorch exports it; ``masked`` last positions are
    hidden by a constant attention mask."""
    rng = np.random.default_rng(seed)
    d = HIDDEN // HEADS
    nodes: list[Any] = []
    inits: list[Any] = []
    mask = np.ones((1, 1, 1, SEQ), np.int64)
    mask[..., SEQ - masked:] = 0
    inits += [_init("zero", np.int64(0)), _init("one", np.int64(1)),
              _init("heads", np.array([HEADS], np.int64)), _init("head_dim",
                                                                 np.array([d], np.int64)),
              _init("hidden", np.array([HIDDEN], np.int64)), _init("axes0", np.array([0],
                                                                                     np.int64)),
              _init("scale", np.float32(math.sqrt(d))), _init("mask", mask),
              _init("neg", np.float32(-10000.0)), _init("sqrt2", np.float32(math.sqrt(2))),
              _init("f_one", np.float32(1.0)), _init("half", np.float32(0.5))]
    # The static shapes, computed the way exported graphs compute them.
    nodes += [
        helper.make_node("Shape", ["x"], ["x.shape"], name="Shape"),
        helper.make_node("Gather", ["x.shape", "zero"], ["batch"], name="Gather", axis=0),
        helper.make_node("Gather", ["x.shape", "one"], ["seq"], name="Gather_1", axis=0),
        helper.make_node("Unsqueeze", ["batch", "axes0"], ["batch_1"], name="Unsqueeze"),
        helper.make_node("Unsqueeze", ["seq", "axes0"], ["seq_1"], name="Unsqueeze_1"),
        helper.make_node("Concat", ["batch_1", "seq_1", "heads", "head_dim"], ["split_shape"],
                         name="Concat", axis=0),
        helper.make_node("Concat", ["batch_1", "seq_1", "hidden"], ["merge_shape"],
                         name="Concat_1", axis=0),
        helper.make_node("Equal", ["mask", "zero"], ["masked"], name="Equal"),
    ]
    heads = {}
    for name, perm in (("query", [0, 2, 1, 3]), ("key", [0, 2, 3, 1]), ("value", [0, 2, 1, 3])):
        proj = _linear(f"attention.{name}", "x", HIDDEN, HIDDEN, nodes, inits, rng)
        nodes += [helper.make_node("Reshape", [proj, "split_shape"], [f"{name}.split"],
                                   name=f"attention.{name}/Reshape"),
                  helper.make_node("Transpose", [f"{name}.split"], [f"{name}.heads"],
                                   name=f"attention.{name}/Transpose", perm=perm)]
        heads[name] = f"{name}.heads"
    nodes += [
        helper.make_node("MatMul", [heads["query"], heads["key"]], ["scores"],
                         name="attention/MatMul"),
        helper.make_node("Div", ["scores", "scale"], ["scaled"], name="attention/Div"),
        helper.make_node("Where", ["masked", "neg", "scaled"], ["masked_scores"],
                         name="attention/Where"),
        helper.make_node("Softmax", ["masked_scores"], ["probs"], name="attention/Softmax",
                         axis=-1),
        helper.make_node("MatMul", ["probs", heads["value"]], ["context"],
                         name="attention/MatMul_1"),
        helper.make_node("Transpose", ["context"], ["context_t"], name="attention/Transpose",
                         perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["context_t", "merge_shape"], ["merged"],
                         name="attention/Reshape"),
    ]
    out = _linear("attention.output", "merged", HIDDEN, HIDDEN, nodes, inits, rng)
    nodes.append(helper.make_node("Add", [out, "x"], ["residual"], name="attention/Add"))
    ln1 = _layer_norm("attention.norm", "residual", nodes, inits, rng)
    up = _linear("ffn.intermediate", ln1, HIDDEN, FFN, nodes, inits, rng)
    nodes += [helper.make_node("Div", [up, "sqrt2"], ["g.div"], name="gelu/Div"),
              helper.make_node("Erf", ["g.div"], ["g.erf"], name="gelu/Erf"),
              helper.make_node("Add", ["g.erf", "f_one"], ["g.add"], name="gelu/Add"),
              helper.make_node("Mul", [up, "g.add"], ["g.mul"], name="gelu/Mul"),
              helper.make_node("Mul", ["g.mul", "half"], ["gelu"], name="gelu/Mul_1")]
    down = _linear("ffn.output", "gelu", FFN, HIDDEN, nodes, inits, rng)
    nodes.append(helper.make_node("Add", [down, ln1], ["residual2"], name="ffn/Add"))
    final = _layer_norm("ffn.norm", "residual2", nodes, inits, rng)
    nodes.append(helper.make_node("Identity", [final], ["hidden_states"], name="out"))
    graph = helper.make_graph(
        nodes, "bert_layer",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", SEQ, HIDDEN])],
        [helper.make_tensor_value_info("hidden_states", TensorProto.FLOAT,
                                       ["batch", SEQ, HIDDEN])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def test_import_folds_shapes_and_matches_patterns() -> None:
    g = match_patterns(import_onnx(bert_layer()))
    ops = [n.op for n in g.nodes]
    assert g.attrs["matched"] == {"layer_norm": 2, "gelu": 1, "dense_bias": 6}
    assert ops.count("dense") == 6 and ops.count("batch_matmul") == 2
    assert ops.count("layer_norm") == 2 and ops.count("gelu") == 1
    for gone in ("reduce_mean", "sqrt", "pow", "erf", "sub"):
        assert gone not in ops
    assert g.node("attention.query/Reshape").attrs["shape"] == (1, SEQ, HEADS, HIDDEN // HEADS)


def test_encoder_layer_agrees_with_onnxruntime() -> None:
    """The int8 accelerator path (every MatMul offloaded) against onnxruntime in float:
    cosine of the final hidden states >= 0.99 on every sample."""
    model = bert_layer(seed=1)
    rng = np.random.default_rng(8)
    calibration = [{"x": rng.standard_normal((1, SEQ, HIDDEN)).astype(np.float32)}
                   for _ in range(8)]
    exe = accel.compile(import_onnx(model), "default",
                        calibration=calibration)
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    cosines = []
    for i in range(4):
        x = rng.standard_normal((1, SEQ, HIDDEN)).astype(np.float32)
        outputs, report = exe.run(x, backend="fsim" if i else "sim", check=True)
        got = outputs["hidden_states"]
        want = session.run(None, {"x": x})[0]
        assert got.dtype == np.float32 and got.shape == want.shape
        cosine = float(np.dot(got.ravel(), want.ravel())
                       / (np.linalg.norm(got) * np.linalg.norm(want)))
        cosines.append(cosine)
        assert report.check is True
        assert report.offloaded_mac_share == 1.0
    assert min(cosines) >= 0.99, cosines


def test_tanh_gelu_and_errors() -> None:
    rng = np.random.default_rng(3)
    inits = [_init("c", np.float32(math.sqrt(2 / math.pi))), _init("k", np.float32(0.044715)),
             _init("three", np.float32(3.0)), _init("one", np.float32(1.0)),
             _init("half", np.float32(0.5))]
    nodes = [helper.make_node("Pow", ["x", "three"], ["cube"], name="Pow"),
             helper.make_node("Mul", ["cube", "k"], ["kc"], name="Mul"),
             helper.make_node("Add", ["x", "kc"], ["inner"], name="Add"),
             helper.make_node("Mul", ["inner", "c"], ["arg"], name="Mul_1"),
             helper.make_node("Tanh", ["arg"], ["t"], name="Tanh"),
             helper.make_node("Add", ["t", "one"], ["t1"], name="Add_1"),
             helper.make_node("Mul", ["half", "x"], ["hx"], name="Mul_2"),
             helper.make_node("Mul", ["hx", "t1"], ["y"], name="Mul_3")]
    graph = helper.make_graph(nodes, "tanh_gelu",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    g = match_patterns(import_onnx(model))
    assert [n.op for n in g.nodes] == ["gelu"] and g.nodes[0].attrs["form"] == "tanh"
    x = rng.standard_normal((2, 8)).astype(np.float32)
    from compiler.graph.reference import run_reference

    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(run_reference(g, {"x": x})["y"], want, rtol=1e-5, atol=1e-6)
    # A non-constant Equal has no meaning here: one line naming the node.
    bad = helper.make_graph([helper.make_node("Equal", ["x", "x"], ["e"], name="eq_3")], "bad",
                            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                            [helper.make_tensor_value_info("e", TensorProto.BOOL, [2])])
    bad_model = helper.make_model(bad, opset_imports=[helper.make_opsetid("", 13)])
    bad_model.ir_version = 8
    with pytest.raises(GraphError, match=r"node 'eq_3' \(Equal\): supported only on constants"):
        import_onnx(bad_model)


def test_opset17_layer_norm_split_slice_squeeze_gather_against_onnxruntime() -> None:
    """LayerNormalization (opset 17), Split, Slice, Concat, Unsqueeze / Squeeze, Gather of a
    token and a Tanh-free float path, imported and compared with onnxruntime in float."""
    from compiler.graph.reference import run_reference

    rng = np.random.default_rng(4)
    inits = [_init("gamma", rng.standard_normal(8).astype(np.float32)),
             _init("beta", rng.standard_normal(8).astype(np.float32)),
             _init("split", np.array([3, 5], np.int64)),
             _init("starts", np.array([1], np.int64)), _init("ends", np.array([6], np.int64)),
             _init("axes", np.array([1], np.int64)), _init("ax0", np.array([0], np.int64)),
             _init("first", np.int64(0))]
    nodes = [
        helper.make_node("LayerNormalization", ["x", "gamma", "beta"], ["ln"], name="ln",
                         axis=-1, epsilon=1e-5),
        helper.make_node("Split", ["ln", "split"], ["s1", "s2"], name="split", axis=2),
        helper.make_node("Concat", ["s2", "s1"], ["cat"], name="cat", axis=2),
        helper.make_node("Slice", ["cat", "starts", "ends", "axes"], ["sl"], name="slice"),
        helper.make_node("Unsqueeze", ["sl", "ax0"], ["un"], name="unsqueeze"),
        helper.make_node("Squeeze", ["un", "ax0"], ["sq"], name="squeeze"),
        helper.make_node("Gather", ["sq", "first"], ["y"], name="token", axis=1),
    ]
    graph = helper.make_graph(nodes, "misc",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 7, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    g = import_onnx(model)
    assert [n.op for n in g.nodes] == ["layer_norm", "slice", "slice", "concat", "slice",
                                       "reshape", "reshape", "take"]
    x = rng.standard_normal((2, 7, 8)).astype(np.float32)
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(run_reference(g, {"x": x})["y"], want, rtol=1e-5, atol=1e-5)
