"""Graph passes on hand-built graphs: the expected graph is built as code and compared through
the canonical printer (``Graph.to_text``), plus the failure cases of each pass."""

from __future__ import annotations

import numpy as np
import pytest

from accel.machine.config import HwConfig
from compiler.graph.ir import Graph, GraphError, Node, TensorType
from compiler.graph.ops import OPS, OpPattern, infer_types, op_pattern, physical_shape
from compiler.graph.passes import (
    PASSES,
    default_supports,
    fold_batch_norm,
    fold_constants,
    fuse,
    optimize,
    pack_layout,
    partition,
    plan_memory,
    quantize,
)
from compiler.graph.reference import run_reference, to_logical
from compiler.graph.zoo import resnet

F32, I8 = "float32", "int8"


def build(name: str, inputs: dict[str, TensorType], nodes: list[Node], outputs: list[str],
          params: dict[str, np.ndarray] | None = None) -> Graph:
    """A typed graph from its parts (output types inferred)."""
    g = Graph(name, list(inputs), outputs, dict(inputs), nodes, dict(params or {}))
    return infer_types(g)


def conv(name: str, x: str, out: str, relu: bool = False, shift: int = 0, target: str = "",
         bias: bool = True) -> Node:
    attrs = {"weight": f"{name}.w", "bias": f"{name}.b" if bias else None, "stride": (1, 1),
             "padding": (1, 1), "shift": shift, "relu": relu}
    if target:
        attrs["target"] = target
    return Node(name, "conv2d", [x], [out], attrs)


def int_params(rng: np.random.Generator, *layers: tuple[str, int, int]) -> dict[str, np.ndarray]:
    """int8 3x3 weights and int32 biases for conv layers (name, in, out)."""
    p = {}
    for name, cin, cout in layers:
        p[f"{name}.w"] = rng.integers(-20, 21, (cout, cin, 3, 3)).astype(np.int8)
        p[f"{name}.b"] = rng.integers(-500, 501, cout).astype(np.int32)
    return p


def snapshot(g: Graph) -> tuple[str, dict[str, bytes], dict]:
    return g.to_text(), {k: v.tobytes() for k, v in g.params.items()}, dict(g.attrs)


# --------------------------------------------------------------------------- registry
def test_registry_categories_and_pass_list() -> None:
    assert op_pattern("conv2d") is OpPattern.COMPLEX_OUT_FUSABLE
    assert op_pattern("dense") is OpPattern.COMPLEX_OUT_FUSABLE
    assert op_pattern("add") is OpPattern.INJECTIVE
    assert op_pattern("relu") is OpPattern.INJECTIVE
    assert op_pattern("max_pool2d") is OpPattern.REDUCTION
    assert op_pattern("global_avg_pool") is OpPattern.REDUCTION
    assert op_pattern("constant") is OpPattern.OPAQUE
    assert set(OPS) >= {"conv2d", "dense", "add", "relu", "flatten", "max_pool2d",
                        "avg_pool2d", "global_avg_pool", "batch_norm", "quantize",
                        "dequantize", "layout_pack", "layout_unpack", "fold_window"}
    assert [p.__name__ for p in PASSES] == ["fold_constants", "match_patterns",
                                            "fold_batch_norm", "quantize", "fuse", "partition",
                                            "fuse_residual", "fold_conv_windows",
                                            "pack_layout", "plan_memory"]
    with pytest.raises(GraphError, match="unknown operator 'swish'"):
        op_pattern("swish")


def test_infer_types_errors_name_the_node(rng: np.random.Generator) -> None:
    params = int_params(rng, ("c1", 4, 8))
    x = {"x": TensorType((1, 3, 8, 8), I8)}
    with pytest.raises(GraphError, match=r"node c1 \(conv2d\).*4 input channels"):
        build("g", x, [conv("c1", "x", "y")], ["y"], params)
    with pytest.raises(GraphError, match="node s uses unknown operator 'swish'"):
        build("g", x, [Node("s", "swish", ["x"], ["y"])], ["y"])
    with pytest.raises(GraphError, match=r"node a \(add\): operands must have one shape"):
        build("g", {**x, "z": TensorType((1, 3, 4, 4), I8)},
              [Node("a", "add", ["x", "z"], ["y"], {"shift": 0, "relu": False})], ["y"])


def test_physical_shape_pads_channels() -> None:
    assert physical_shape(TensorType((1, 3, 5, 5), I8, "NCHW1n8c")) == (1, 1, 5, 5, 1, 8)
    assert physical_shape(TensorType((3, 20), I8, "NC2n8c")) == (2, 3, 2, 8)
    assert physical_shape(TensorType((1, 3, 5, 5), I8)) == (1, 3, 5, 5)


# --------------------------------------------------------------------------- fold_constants
def test_fold_constants_evaluates_constant_subgraphs() -> None:
    a = np.array([[1.0, -2.0, 3.0]], np.float32)
    b = np.array([[0.5, 0.5, -4.0]], np.float32)
    x = {"x": TensorType((1, 3), F32, "NC")}
    before = build("g", x, [
        Node("ca", "constant", [], ["a"], {"value": "a"}),
        Node("cb", "constant", [], ["b"], {"value": "b"}),
        Node("sum", "add", ["a", "b"], ["s"]),
        Node("r", "relu", ["s"], ["rs"]),
        Node("out", "add", ["x", "rs"], ["y"]),
    ], ["y"], {"a": a, "b": b})
    text = snapshot(before)
    after = fold_constants(before)
    expected = build("g", x, [
        Node("r", "constant", [], ["rs"], {"value": "rs"}),
        Node("out", "add", ["x", "rs"], ["y"]),
    ], ["y"], {"rs": np.array([[1.5, 0.0, 0.0]], np.float32)})
    assert after.to_text() == expected.to_text()
    assert set(after.params) == {"rs"}
    np.testing.assert_array_equal(after.params["rs"], expected.params["rs"])
    assert snapshot(before) == text  # the input graph is untouched
    xin = {"x": np.array([[1.0, 2.0, 3.0]], np.float32)}
    np.testing.assert_array_equal(run_reference(before, xin)["y"], run_reference(after, xin)["y"])


def test_fold_constants_leaves_graphs_without_constants_alone(rng: np.random.Generator) -> None:
    g = build("g", {"x": TensorType((1, 4, 6, 6), I8)}, [conv("c1", "x", "y")], ["y"],
              int_params(rng, ("c1", 4, 4)))
    assert fold_constants(g).to_text() == g.to_text()


# --------------------------------------------------------------------------- fold_batch_norm
def _bn_params(rng: np.random.Generator, prefix: str, c: int) -> dict[str, np.ndarray]:
    return {f"{prefix}.scale": rng.uniform(0.5, 2, c).astype(np.float32),
            f"{prefix}.beta": rng.normal(0, 1, c).astype(np.float32),
            f"{prefix}.mean": rng.normal(0, 1, c).astype(np.float32),
            f"{prefix}.var": rng.uniform(0.5, 2, c).astype(np.float32)}


def _bn(name: str, x: str, out: str) -> Node:
    return Node(name, "batch_norm", [x], [out], {
        "scale": f"{name}.scale", "bias": f"{name}.beta", "mean": f"{name}.mean",
        "var": f"{name}.var", "epsilon": 1e-5})


def test_fold_batch_norm_into_conv(rng: np.random.Generator) -> None:
    params = {"c1.w": rng.normal(0, 1, (4, 3, 3, 3)).astype(np.float32),
              **_bn_params(rng, "bn", 4)}
    x = {"x": TensorType((2, 3, 6, 6), F32)}
    before = build("g", x, [
        Node("c1", "conv2d", ["x"], ["c"], {"weight": "c1.w", "bias": None, "stride": (1, 1),
                                            "padding": (1, 1)}),
        _bn("bn", "c", "b"),
        Node("r", "relu", ["b"], ["y"]),
    ], ["y"], params)
    text = snapshot(before)
    after = fold_batch_norm(before)
    p = {k: params[k].astype(np.float64) for k in params}
    k = p["bn.scale"] / np.sqrt(p["bn.var"] + 1e-5)
    expected = build("g", x, [
        Node("c1", "conv2d", ["x"], ["b"], {"weight": "c1.bn_weight", "bias": "c1.bn_bias",
                                            "stride": (1, 1), "padding": (1, 1)}),
        Node("r", "relu", ["b"], ["y"]),
    ], ["y"], {"c1.bn_weight": (p["c1.w"] * k[:, None, None, None]).astype(np.float32),
               "c1.bn_bias": (p["bn.beta"] - p["bn.mean"] * k).astype(np.float32)})
    assert after.to_text() == expected.to_text()
    assert set(after.params) == {"c1.bn_weight", "c1.bn_bias"}
    for name in expected.params:
        np.testing.assert_allclose(after.params[name], expected.params[name], rtol=1e-6)
    assert snapshot(before) == text
    xin = {"x": rng.normal(0, 1, (2, 3, 6, 6)).astype(np.float32)}
    np.testing.assert_allclose(run_reference(after, xin)["y"], run_reference(before, xin)["y"],
                               rtol=1e-5, atol=1e-5)


def test_fold_batch_norm_leaves_unfoldable_ones(rng: np.random.Generator) -> None:
    params = {"c1.w": rng.normal(0, 1, (4, 3, 3, 3)).astype(np.float32),
              **_bn_params(rng, "bn", 4)}
    g = build("g", {"x": TensorType((1, 3, 6, 6), F32)}, [
        Node("c1", "conv2d", ["x"], ["c"], {"weight": "c1.w", "bias": None, "stride": (1, 1),
                                            "padding": (1, 1)}),
        Node("r", "relu", ["c"], ["rc"]),
        _bn("bn", "rc", "y"),  # after a relu: cannot fold
    ], ["y"], params)
    assert fold_batch_norm(g).to_text() == g.to_text()
    with pytest.raises(GraphError, match=r"node bn \(batch_norm\) cannot be quantized: a "
                       "batch_norm that does not follow"):
        quantize(g, {"x": np.ones((1, 3, 6, 6), np.float32)})


# --------------------------------------------------------------------------- quantize
def _dense_graph(w: np.ndarray, b: np.ndarray | None) -> Graph:
    params = {"w": w.astype(np.float32)}
    if b is not None:
        params["b"] = b.astype(np.float32)
    return build("g", {"x": TensorType((1, w.shape[1]), F32, "NC")}, [
        Node("fc", "dense", ["x"], ["y"], {"weight": "w", "bias": "b" if b is not None else None}),
    ], ["y"], params)


def test_quantize_dense_power_of_two_scales() -> None:
    g = _dense_graph(0.5 * np.eye(4), None)
    cal = {"x": np.array([[1.0, -0.5, 0.25, 0.0]], np.float32)}
    q = quantize(g, cal)
    # s_x = floor(log2(127 / 1.0)) = 6; s_w = floor(log2(127 / 0.5)) = 7;
    # s_y = floor(log2(127 / 0.5)) = 7; shift = 6 + 7 - 7 = 6; rounding bias 2**5.
    expected = build("g", {"x": TensorType((1, 4), F32, "NC")}, [
        Node("x.quantize", "quantize", ["x"], ["x.q"], {"scale_shift": 6}),
        Node("fc", "dense", ["x.q"], ["y.q"], {"weight": "w", "bias": "fc.bias", "shift": 6,
                                               "relu": False}),
        Node("y.dequantize", "dequantize", ["y.q"], ["y"], {"scale_shift": 7}),
    ], ["y"], {"w": (64 * np.eye(4)).astype(np.int8), "fc.bias": np.full(4, 32, np.int32)})
    assert q.to_text() == expected.to_text()
    for name in ("w", "fc.bias"):
        np.testing.assert_array_equal(q.params[name], expected.params[name])
    assert q.attrs["quantization"] == {"scale_shift": {"x.q": 6, "y.q": 7}}
    assert g.params["w"].dtype == np.float32  # input untouched
    y = run_reference(q, {"x": np.array([[0.5, -1.0, 0.125, 0.75]], np.float32)})["y"]
    np.testing.assert_array_equal(y, [[0.25, -0.5, 0.0625, 0.375]])


def test_quantize_lowers_an_output_scale_finer_than_the_accumulator() -> None:
    # y = x0 - x1 nearly cancels: calibrated s_y = 16 would need a left shift of 4; the output
    # scale is lowered to s_x + s_w = 6 + 6 = 12 and the shift is 0.
    g = _dense_graph(np.array([[1.0, -1.0]]), None)
    q = quantize(g, {"x": np.array([[1.0, 0.999]], np.float32)})
    assert q.node("fc").attrs["shift"] == 0
    assert q.node("y.dequantize").attrs["scale_shift"] == 12


def test_quantize_add_inputs_share_the_coarser_scale() -> None:
    x = {"a": TensorType((1, 4), F32, "NC"), "b": TensorType((1, 4), F32, "NC")}
    g = build("g", x, [Node("add", "add", ["a", "b"], ["y"])], ["y"])
    q = quantize(g, {"a": np.array([[1.0, 0, 0, 0]], np.float32),
                     "b": np.array([[0.25, 0, 0, 0]], np.float32)})
    expected = build("g", x, [
        Node("a.quantize", "quantize", ["a"], ["a.q"], {"scale_shift": 6}),
        Node("b.quantize", "quantize", ["b"], ["b.q"], {"scale_shift": 6}),
        Node("add", "add", ["a.q", "b.q"], ["y.q"], {"shift": 0, "relu": False}),
        Node("y.dequantize", "dequantize", ["y.q"], ["y"], {"scale_shift": 6}),
    ], ["y"])
    assert q.to_text() == expected.to_text()


def test_quantize_failures(rng: np.random.Generator) -> None:
    g = _dense_graph(np.eye(2), None)
    with pytest.raises(GraphError, match="calibration sample 0 has no array for input 'x'"):
        quantize(g, {"z": np.ones((1, 2), np.float32)})
    with pytest.raises(GraphError, match=r"input 'x' must have shape \(any, 2\)"):
        quantize(g, {"x": np.ones((1, 3), np.float32)})
    with pytest.raises(GraphError, match="needs at least one calibration input"):
        quantize(g, [])
    with pytest.raises(GraphError, match="a float graph needs calibration inputs"):
        optimize(g, HwConfig())
    c = build("g", {"x": TensorType((1, 2), F32, "NC")}, [
        Node("c", "constant", [], ["k"], {"value": "k"}),
        Node("add", "add", ["x", "k"], ["y"]),
    ], ["y"], {"k": np.ones((1, 2), np.float32)})
    # An add of a constant is no residual add: it stays a float operator (on the fallback).
    kept = quantize(c, {"x": np.ones((1, 2), np.float32)})
    assert [n.op for n in kept.nodes] == ["constant", "add"]
    assert kept.values["y"].dtype == "float32"
    qg = quantize(g, {"x": np.ones((1, 2), np.float32)})
    assert quantize(qg, {}).to_text() == qg.to_text()  # integer graphs pass through


# --------------------------------------------------------------------------- fuse
def test_fuse_merges_relu_into_conv_and_add(rng: np.random.Generator) -> None:
    params = int_params(rng, ("c1", 4, 4), ("c2", 4, 4))
    x = {"x": TensorType((1, 4, 6, 6), I8)}
    before = build("g", x, [
        conv("c1", "x", "a", shift=4),
        Node("r1", "relu", ["a"], ["ra"]),
        conv("c2", "ra", "b", shift=4),
        Node("add", "add", ["b", "ra"], ["s"], {"shift": 1, "relu": False}),
        Node("r2", "relu", ["s"], ["rs"]),
        Node("r3", "relu", ["rs"], ["y"]),
    ], ["y"], params)
    text = snapshot(before)
    after = fuse(before)
    expected = build("g", x, [
        conv("c1", "x", "ra", shift=4, relu=True),
        conv("c2", "ra", "b", shift=4),
        Node("add", "add", ["b", "ra"], ["y"], {"shift": 1, "relu": True}),
    ], ["y"], params)
    assert after.to_text() == expected.to_text()
    assert after.attrs["fusion"] == [
        {"node": "c1", "pattern": "complex_out_fusable",
         "ops": ["conv2d", "bias", "requantize", "relu"], "absorbed": ["r1"]},
        {"node": "c2", "pattern": "complex_out_fusable", "ops": ["conv2d", "bias", "requantize"],
         "absorbed": []},
        {"node": "add", "pattern": "injective", "ops": ["add", "requantize", "relu"],
         "absorbed": ["r2", "r3"]},
    ]
    assert snapshot(before) == text
    xin = {"x": rng.integers(-128, 128, (1, 4, 6, 6)).astype(np.int8)}
    np.testing.assert_array_equal(run_reference(after, xin)["y"], run_reference(before, xin)["y"])


def test_fuse_keeps_relu_when_the_value_is_seen_elsewhere(rng: np.random.Generator) -> None:
    params = int_params(rng, ("c1", 4, 4), ("c2", 4, 4))
    x = {"x": TensorType((1, 4, 6, 6), I8)}
    g = build("g", x, [
        conv("c1", "x", "a", shift=4),
        Node("r1", "relu", ["a"], ["ra"]),   # a has a second reader (c2)
        conv("c2", "a", "b", shift=4),
        Node("r2", "relu", ["b"], ["rb"]),   # b is a graph output
    ], ["ra", "b", "rb"], params)
    after = fuse(g)
    assert [n.name for n in after.nodes] == ["c1", "r1", "c2", "r2"]
    assert not after.node("c1").attrs["relu"] and not after.node("c2").attrs["relu"]


# --------------------------------------------------------------------------- partition
def test_partition_sets_targets_and_segments(rng: np.random.Generator) -> None:
    params = int_params(rng, ("c1", 4, 4), ("c2", 4, 4))
    g = build("g", {"x": TensorType((1, 4, 6, 6), I8)}, [
        conv("c1", "x", "a", shift=4),
        conv("c2", "a", "b", shift=4),
        Node("pool", "max_pool2d", ["b"], ["y"], {"kernel": (2, 2), "stride": (2, 2),
                                                  "padding": (0, 0)}),
    ], ["y"], params)
    after = partition(g, lambda n, _: n.op == "conv2d")
    assert [n.attrs["target"] for n in after.nodes] == ["accel", "accel", "cpu"]
    assert "target" not in g.nodes[0].attrs
    macs = 2 * 4 * 6 * 6 * 4 * 9
    assert after.attrs["partition"] == {
        "segments": [{"target": "accel", "nodes": ["c1", "c2"]},
                     {"target": "cpu", "nodes": ["pool"]}],
        "accel_macs": macs, "total_macs": macs}
    with pytest.raises(GraphError, match="partition must run before pack_layout"):
        partition(pack_layout(after, HwConfig()), lambda n, _: False)


def test_default_supports_rejects_layers_no_tile_fits(cfg: HwConfig) -> None:
    g = resnet(18, image_size=32)
    small = cfg.replace(**{"buffers.wgt": 2048})  # 32 weight tiles: a 7x7 kernel needs 49
    on_cpu = [n.name for n in partition(g, default_supports(small)).nodes
              if n.attrs["target"] == "cpu" and n.op in ("conv2d", "dense")]
    assert on_cpu == ["conv1"]
    part = partition(g, default_supports(cfg))
    assert {n.op for n in part.nodes if n.attrs["target"] == "accel"} == \
        {"conv2d", "dense", "add"}
    assert part.attrs["partition"]["accel_macs"] == part.attrs["partition"]["total_macs"]


# --------------------------------------------------------------------------- pack_layout
def _mixed_graph(rng: np.random.Generator) -> Graph:
    params = int_params(rng, ("c1", 3, 8), ("c2", 8, 8))
    params["fc.w"] = rng.integers(-20, 21, (5, 8 * 4 * 4)).astype(np.int8)
    g = build("g", {"x": TensorType((1, 3, 4, 4), I8)}, [
        conv("c1", "x", "a", shift=6, relu=True),
        conv("c2", "a", "b", shift=6),
        Node("add", "add", ["b", "a"], ["s"], {"shift": 1, "relu": True}),
        Node("flat", "flatten", ["s"], ["f"]),
        Node("fc", "dense", ["f"], ["y"], {"weight": "fc.w", "bias": None, "shift": 7,
                                           "relu": False}),
    ], ["y"], params)
    return partition(g, lambda n, _: n.op in ("conv2d", "dense"))


def _layout_node(name: str, op: str, x: str, out: str, layout: str) -> Node:
    return Node(name, op, [x], [out], {"layout": layout, "target": "cpu"})


def test_pack_layout_transforms_only_at_boundaries(rng: np.random.Generator,
                                                   cfg: HwConfig) -> None:
    before = _mixed_graph(rng)
    text = snapshot(before)
    after = pack_layout(before, cfg)
    L, NC = "NCHW1n8c", "NC1n8c"
    expected_nodes = [
        _layout_node("x.pack", "layout_pack", "x", f"x.{L}", L),
        conv("c1", f"x.{L}", f"a.{L}", shift=6, relu=True, target="accel"),
        conv("c2", f"a.{L}", f"b.{L}", shift=6, target="accel"),
        _layout_node("b.unpack", "layout_unpack", f"b.{L}", "b", L),
        _layout_node("a.unpack", "layout_unpack", f"a.{L}", "a", L),
        Node("add", "add", ["b", "a"], ["s"], {"shift": 1, "relu": True, "target": "cpu"}),
        Node("flat", "flatten", ["s"], ["f"], {"target": "cpu"}),
        _layout_node("f.pack", "layout_pack", "f", f"f.{NC}", NC),
        Node("fc", "dense", [f"f.{NC}"], [f"y.{NC}"], {"weight": "fc.w", "bias": None,
                                                       "shift": 7, "relu": False,
                                                       "target": "accel"}),
        _layout_node("y.unpack", "layout_unpack", f"y.{NC}", "y", NC),
    ]
    types = {"x": TensorType((1, 3, 4, 4), I8)}
    for v, shape, layout in ((f"x.{L}", (1, 3, 4, 4), L), (f"a.{L}", (1, 8, 4, 4), L),
                             (f"b.{L}", (1, 8, 4, 4), L), (f"f.{NC}", (1, 128), NC),
                             (f"y.{NC}", (1, 5), NC)):
        types[v] = TensorType(shape, I8, layout)
    expected = infer_types(Graph("g", ["x"], ["y"], types, expected_nodes, before.params))
    assert after.to_text() == expected.to_text()
    assert snapshot(before) == text
    xin = {"x": rng.integers(-128, 128, (1, 3, 4, 4)).astype(np.int8)}
    np.testing.assert_array_equal(run_reference(after, xin)["y"], run_reference(before, xin)["y"])
    stored = run_reference(after, xin, keep=True)
    assert stored[f"x.{L}"].shape == (1, 1, 4, 4, 1, 8)  # 3 channels padded to one block
    np.testing.assert_array_equal(to_logical(stored[f"a.{L}"], after.values[f"a.{L}"]),
                                  stored["a"])


def test_pack_layout_repacks_when_blocks_differ(rng: np.random.Generator,
                                                cfg: HwConfig) -> None:
    wide = cfg.replace(**{"core.block_in": 16})  # reads 16-channel blocks, writes 8
    after = pack_layout(_mixed_graph(rng), wide)
    ops = [(n.name, n.op) for n in after.nodes]
    assert ops[:6] == [("x.pack", "layout_pack"), ("c1", "conv2d"), ("a.unpack", "layout_unpack"),
                       ("a.pack", "layout_pack"), ("c2", "conv2d"), ("b.unpack", "layout_unpack")]
    assert after.node("c2").inputs == ["a.NCHW1n16c"]
    assert after.node("c1").outputs == ["a.NCHW1n8c"]


def test_pack_layout_failures(rng: np.random.Generator, cfg: HwConfig) -> None:
    g = _mixed_graph(rng)
    unpartitioned = g.copy()
    del unpartitioned.nodes[2].attrs["target"]
    with pytest.raises(GraphError, match=r"pack_layout needs partition first: node add \(add\)"):
        pack_layout(unpartitioned, cfg)
    with pytest.raises(GraphError, match="pack_layout ran already"):
        pack_layout(pack_layout(g, cfg), cfg)


# --------------------------------------------------------------------------- plan_memory
def test_plan_memory_reuses_dead_buffers() -> None:
    t = TensorType((1, 64), I8, "NC")  # 64 bytes each
    g = build("g", {"x": t}, [
        Node("r1", "relu", ["x"], ["a"]),
        Node("r2", "relu", ["a"], ["b"]),
        Node("r3", "relu", ["b"], ["c"]),
        Node("r4", "relu", ["c"], ["y"]),
    ], ["y"])
    plan = plan_memory(g).attrs["memory_plan"]
    # Lifetimes x [0, 1], a [1, 2], b [2, 3], c [3, 4], y [4, 5]: neighbours overlap, so two
    # buffers alternate.
    assert plan["lifetimes"] == {"x": (0, 1), "a": (1, 2), "b": (2, 3), "c": (3, 4), "y": (4, 5)}
    assert plan["offsets"] == {"x": 0, "a": 64, "b": 0, "c": 64, "y": 0}
    assert (plan["peak_bytes"], plan["naive_bytes"]) == (128, 320)
    assert "memory_plan" not in g.attrs


def test_plan_memory_resnet18_is_valid_and_tight(cfg: HwConfig) -> None:
    g = optimize(resnet(18, image_size=64), cfg)
    plan = g.attrs["memory_plan"]
    values = list(plan["offsets"])
    for i, u in enumerate(values):  # no two values live at once share a byte
        a0, a1 = plan["lifetimes"][u]
        for v in values[i + 1:]:
            b0, b1 = plan["lifetimes"][v]
            if a1 < b0 or b1 < a0:
                continue
            ou, ov = plan["offsets"][u], plan["offsets"][v]
            assert ou + plan["sizes"][u] <= ov or ov + plan["sizes"][v] <= ou, (u, v)
    steps = len(g.nodes) + 2
    live_peak = max(sum(plan["sizes"][v] for v in values
                        if plan["lifetimes"][v][0] <= s <= plan["lifetimes"][v][1])
                    for s in range(steps))
    assert live_peak <= plan["peak_bytes"] <= 1.25 * live_peak
    # The two largest values are the stem's gathered window (fold_conv_windows) and its packed
    # copy, live together, and fuse_residual took away eight conv outputs (all naive bytes):
    # the plan still needs less than half of one buffer per value.
    assert plan["peak_bytes"] < plan["naive_bytes"] / 2


# --------------------------------------------------------------------------- optimize
def test_optimize_zoo_graph_is_bit_exact_and_packed(cfg: HwConfig,
                                                    rng: np.random.Generator) -> None:
    g = resnet(18, batch=2, image_size=32)
    o = optimize(g, cfg)
    assert o.to_text() == optimize(g, cfg).to_text()  # deterministic
    x = rng.integers(-128, 128, (2, 3, 32, 32)).astype(np.int8)
    np.testing.assert_array_equal(run_reference(o, {"data": x})["fc"],
                                  run_reference(g, {"data": x})["fc"])
    ops = [n.op for n in o.nodes]
    # Convolutions, residual adds and the classifier run on the accelerator, so values stay
    # packed through all 8 blocks; layouts change only around the CPU's max-pool (after the
    # stem) and global pool + flatten (before the classifier): packs of the input, the pool
    # output and the flattened features; unpacks of the stem, the last block and the logits.
    assert ops.count("layout_pack") == 3
    assert ops.count("layout_unpack") == 3
    assert set(o.attrs) >= {"fusion", "partition", "memory_plan"}
