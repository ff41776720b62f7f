"""Transformers: the fallback operators against plain numpy, batch_matmul on the accelerator
against its kernel on every backend and shipped config, and the zoo encoders end to end."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import accel
from accel.machine.config import HwConfig
from compiler.graph.ir import TensorType
from compiler.graph.reference import run_reference, to_logical, to_physical
from compiler.graph.transformers import TRANSFORMERS, VitConfig, bert, vit
from compiler.ops.batch_matmul import (
    BATCH_MATMUL,
    BatchMatmulWorkload,
    pack_input_operand,
    pack_weight_operand,
    unpack_output,
)
from runtime import kernels
from runtime.backends import run_program

F32_ULP = 2.0**-23


def _close(got: np.ndarray, want: np.ndarray) -> None:
    """Within one float32 ulp (plus a hair for values near zero)."""
    assert got.dtype == np.float32 and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=F32_ULP, atol=1e-7)


# --------------------------------------------------------------------------- fallback kernels
floats = st.integers(1, 4).flatmap(
    lambda rank: st.lists(st.integers(1, 7), min_size=rank, max_size=rank))


@settings(max_examples=25, deadline=None)
@given(shape=floats, seed=st.integers(0, 2**16))
def test_float_kernels_against_plain_numpy(shape: list[int], seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape) * 3).astype(np.float32)
    rows = x.reshape(-1, shape[-1]).astype(np.float64)
    # softmax, row by row with math.exp
    want = []
    for r in rows:
        e = [math.exp(v - max(r)) for v in r]
        want.append([v / sum(e) for v in e])
    _close(kernels.softmax(x), np.asarray(want, np.float32).reshape(shape))
    # layer_norm: mean and biased variance of each row
    gamma = rng.standard_normal(shape[-1]).astype(np.float32)
    beta = rng.standard_normal(shape[-1]).astype(np.float32)
    want = []
    for r in rows:
        mean = sum(r) / len(r)
        var = sum((v - mean) ** 2 for v in r) / len(r)
        want.append([(v - mean) / math.sqrt(var + 1e-5) * g + b
                     for v, g, b in zip(r, gamma, beta, strict=True)])
    np.testing.assert_allclose(kernels.layer_norm(x, gamma, beta, 1e-5),
                               np.asarray(want, np.float32).reshape(shape), rtol=1e-5,
                               atol=1e-5)
    # gelu, both forms, value by value
    flat = x.astype(np.float64).ravel()
    erf_form = [0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in flat]
    tanh_form = [0.5 * v * (1 + math.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v**3)))
                 for v in flat]
    _close(kernels.gelu(x, "erf"), np.asarray(erf_form, np.float32).reshape(shape))
    _close(kernels.gelu(x, "tanh"), np.asarray(tanh_form, np.float32).reshape(shape))
    # elementwise with a broadcast operand, and a reduction
    y = rng.standard_normal(shape[-1]).astype(np.float32) + 4
    for op, fn in (("sub", lambda a, b: a - b), ("mul", lambda a, b: a * b),
                   ("div", lambda a, b: a / b)):
        want = np.asarray([[fn(a, b) for a, b in zip(r, y.astype(np.float64), strict=True)]
                           for r in rows], np.float32).reshape(shape)
        _close(kernels.elementwise(op, x, y), want)
    _close(kernels.reduce("reduce_mean", x, [-1 % len(shape)], True),
           np.asarray([[sum(r) / len(r)] for r in rows], np.float32).reshape(
               (*shape[:-1], 1)))
    _close(kernels.reduce("reduce_sum", x, [-1 % len(shape)], False),
           np.asarray([math.fsum(r) for r in rows], np.float32).reshape(shape[:-1]))
    _close(kernels.reduce("reduce_max", x, [-1 % len(shape)], False),
           np.asarray([max(r) for r in rows], np.float32).reshape(shape[:-1]))
    # unary functions and pow, value by value with math
    pos = np.abs(flat) + 0.5
    for op, fn, arg in (("sqrt", math.sqrt, pos), ("erf", math.erf, flat),
                        ("tanh", math.tanh, flat),
                        ("sigmoid", lambda v: 1 / (1 + math.exp(-v)), flat)):
        _close(kernels.elementwise(op, arg.astype(np.float32).reshape(shape)),
               np.asarray([fn(v) for v in arg], np.float32).reshape(shape))
    _close(kernels.elementwise("pow", pos.astype(np.float32).reshape(shape), np.float32(3)),
           np.asarray([v**3 for v in pos.astype(np.float32).astype(np.float64)],
                      np.float32).reshape(shape))
    cond = rng.integers(0, 2, shape[-1]).astype(bool)
    want = np.asarray([[a if c else b for a, c, b in zip(r, cond, y.astype(np.float64),
                                                           strict=True)] for r in rows],
                      np.float32).reshape(shape)
    assert np.array_equal(kernels.where(cond, x, y), want)


@settings(max_examples=25, deadline=None)
@given(shape=st.lists(st.integers(1, 6), min_size=2, max_size=4), seed=st.integers(0, 2**16))
def test_data_movement_kernels_are_exact(shape: list[int], seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = rng.integers(-128, 128, shape, dtype=np.int8)
    perm = list(rng.permutation(len(shape)))
    t = kernels.transpose(x, perm)
    for idx in np.ndindex(*x.shape):
        assert t[tuple(idx[p] for p in perm)] == x[idx]
    assert kernels.reshape(x, (-1,)).tolist() == [x[i] for i in np.ndindex(*x.shape)]
    assert np.array_equal(kernels.concat([x, x[:1]], 0),
                          np.asarray([*list(x), x[0]], dtype=np.int8))
    assert np.array_equal(kernels.slice_axis(x, 0, 0, shape[0], 2), x[::2])
    assert np.array_equal(kernels.take(x, np.array(0), 1), x[:, 0])
    table = rng.integers(-128, 128, (9, 4), dtype=np.int8)
    ids = rng.integers(0, 9, shape[:2])
    emb = kernels.embedding(ids, table)
    assert emb.shape == (*shape[:2], 4) and all(
        np.array_equal(emb[i, j], table[ids[i, j]]) for i, j in np.ndindex(*shape[:2]))


@settings(max_examples=25, deadline=None)
@given(g=st.integers(1, 3), m=st.integers(1, 9), k=st.integers(1, 20), n=st.integers(1, 11),
       shift=st.integers(0, 12), relu=st.booleans(), seed=st.integers(0, 2**16))
def test_batch_matmul_kernel_against_integers(g: int, m: int, k: int, n: int, shift: int,
                                              relu: bool, seed: int) -> None:
    rng = np.random.default_rng(seed)
    a = rng.integers(-128, 128, (g, m, k), dtype=np.int8)
    b = rng.integers(-128, 128, (g, k, n), dtype=np.int8)
    acc = np.einsum("gmk,gkn->gmn", a.astype(np.int64), b.astype(np.int64)) >> shift
    want = np.clip(acc, 0 if relu else -128, 127).astype(np.int8)
    assert np.array_equal(kernels.batch_matmul(a, b, shift, relu), want)
    with pytest.raises(ValueError, match=r"batch_matmul: a .* and b .* do not multiply"):
        kernels.batch_matmul(a, b.swapaxes(1, 2) if k != n else b[:, :-1] if k > 1 else
                             np.zeros((g, 2, n), np.int8))


# --------------------------------------------------------------------------- the accelerator
def _run_batch_matmul(cfg: HwConfig, wl: BatchMatmulWorkload, a: np.ndarray, b: np.ndarray,
                      backend: str) -> tuple[np.ndarray, int | None]:
    op = BATCH_MATMUL.compile(wl, cfg)
    physical = op.workload  # padded where that tiles better
    image = op.dram(a=pack_input_operand(a, physical, cfg),
                    b=pack_weight_operand(b, physical, cfg))
    result = run_program(op.program, image, config=cfg, backend=backend)
    out = image.read("out", "int8", op.program.regions["out"].shape)
    got = unpack_output(out, physical, wl, cfg).reshape(*a.shape[:-1], b.shape[-1])
    return got, result.cycles


@pytest.mark.parametrize("config", ["tiny", "default", "vta_1x16x16"])
@settings(max_examples=4, deadline=None)
@given(heads=st.integers(1, 3), seq=st.integers(1, 21), head_dim=st.integers(1, 19),
       shift=st.integers(0, 10), seed=st.integers(0, 2**16))
def test_batch_matmul_on_the_accelerator_is_bit_exact(config: str, heads: int, seq: int,
                                                      head_dim: int, shift: int,
                                                      seed: int) -> None:
    """Q.K^T and A.V shapes, sequence lengths and head dimensions off the block size, on fsim
    and sim: the same int8 array as the kernel."""
    cfg = accel.load_config(config)
    rng = np.random.default_rng(seed)
    q = rng.integers(-128, 128, (1, heads, seq, head_dim), dtype=np.int8)
    kt = rng.integers(-128, 128, (1, heads, head_dim, seq), dtype=np.int8)
    v = rng.integers(-128, 128, (1, heads, seq, head_dim), dtype=np.int8)
    for a, b in ((q, kt), (kt.swapaxes(2, 3).copy(), v.swapaxes(2, 3).copy()), (q, q[..., :1,
                                                                                 :].swapaxes(
                                                                                     2, 3))):
        wl = BatchMatmulWorkload(heads, a.shape[-2], a.shape[-1], b.shape[-1], shift)
        want = kernels.batch_matmul(a, b, shift)
        for backend in ("fsim", "sim"):
            got, cycles = _run_batch_matmul(cfg, wl, a, b, backend)
            assert np.array_equal(got, want), (backend, wl)
            assert (cycles is not None) == (backend == "sim")
            if cycles is not None:
                assert cycles >= BATCH_MATMUL.bound(wl, cfg)


def test_matmul_heuristic_reads_deep_reduction_chunks(cfg: HwConfig) -> None:
    """The heuristic's knobs against the simulator: fewer cycles than the same tiles with one
    reduction block per chunk (what conv2d's model picked), and within 15% of the best
    reduction depth."""
    from accel.machine.dram import Dram
    from compiler.ops.matmul import MatmulKnobs, MatmulWorkload, default_matmul_knobs
    from compiler.ops.registry import DENSE
    from sim.timing import TimingSimulator

    wl = MatmulWorkload(64, 256, 64, True, 8, False)
    chosen = default_matmul_knobs(wl, cfg)
    assert chosen.tile_k > 1

    def cycles(k: MatmulKnobs) -> int:
        return TimingSimulator(cfg).run(DENSE.program(wl, cfg, k), Dram()).cycles

    shallow = MatmulKnobs(chosen.tile_m, 1, chosen.tile_n, chosen.n_nthread)
    depths = [MatmulKnobs(chosen.tile_m, tk, chosen.tile_n, chosen.n_nthread)
              for tk in (2, 4, 8, 16, 32)]
    assert cycles(chosen) < cycles(shallow)
    assert cycles(chosen) <= 1.15 * min(cycles(k) for k in depths)


def test_prime_block_counts_are_padded_and_stay_exact(vta: HwConfig) -> None:
    """ViT's attention on vta_1x16x16: 197 tokens are 197 row blocks and 13 column blocks,
    both prime. The program is built for a zero-padded product that tiles; the cropped output
    is the kernel's, and it takes fewer cycles than the unpadded program."""
    from accel.machine.dram import Dram
    from compiler.ops.batch_matmul import default_batch_matmul_knobs, physical_workload
    from sim.timing import TimingSimulator

    wl = BatchMatmulWorkload(1, 197, 64, 197, shift=9)
    padded = physical_workload(wl, vta)
    assert padded != wl and padded.m >= 197 and padded.n >= 197 and padded.k >= 64
    rng = np.random.default_rng(7)
    a = rng.integers(-128, 128, (1, 197, 64), dtype=np.int8)
    b = rng.integers(-128, 128, (1, 64, 197), dtype=np.int8)
    got, cycles = _run_batch_matmul(vta, wl, a, b, "sim")
    assert np.array_equal(got, kernels.batch_matmul(a, b, 9))
    plain = BATCH_MATMUL.program(wl, vta, default_batch_matmul_knobs(wl, vta))
    assert cycles is not None and cycles < TimingSimulator(vta).run(plain, Dram()).cycles


def test_batch_matmul_roofline_and_partition_rule(cfg: HwConfig) -> None:
    wl = BatchMatmulWorkload(12, 128, 64, 128)
    assert BATCH_MATMUL.macs(wl) == 12 * 128 * 64 * 128
    assert BATCH_MATMUL.dram_bytes(wl) == 12 * (128 * 64 + 64 * 128 + 128 * 128)
    assert BATCH_MATMUL.bound(wl, cfg) == 12 * 128 * 64 * 128 / 64
    assert BATCH_MATMUL.supports(wl, cfg)
    two = cfg.replace(**{"core.batch": 2})
    assert not BATCH_MATMUL.supports(BatchMatmulWorkload(2, 3, 8, 8), two)  # rows straddle


# --------------------------------------------------------------------------- zoo encoders
@pytest.mark.parametrize("backend", ["fsim", "sim"])
def test_bert_tiny_is_bit_exact_end_to_end(backend: str) -> None:
    """A sequence length off the block size; every layer and the output against the numpy
    reference network, every MAC on the accelerator."""
    exe = accel.compile("bert_tiny", "default", seq_len=20)
    x, _ = accel.sample_inputs(exe.graph, 3)
    outputs, report = exe.run(x, backend=backend, check=True)
    assert report.check is True
    ref = exe.reference(x)
    assert all(np.array_equal(outputs[k], ref[k]) for k in ref)
    assert report.offloaded_mac_share == 1.0
    ops = {layer.op for layer in report.layers if layer.target == "accel"}
    assert ops == {"dense", "batch_matmul", "add"}
    cpu = {layer.op for layer in report.layers if layer.target == "cpu"}
    assert {"layer_norm", "softmax", "gelu", "embedding", "transpose"} <= cpu
    attention = [layer for layer in report.layers if layer.op == "batch_matmul"]
    assert len(attention) == 2 * 2 and attention[0].input_shapes == [[1, 2, 20, 64],
                                                                      [1, 2, 64, 20]]
    if backend == "sim":
        assert report.accel_cycles > 0 and 0 < report.roofline_efficiency <= 1


def test_small_vit_is_bit_exact_end_to_end(tiny: HwConfig) -> None:
    """The ViT graph (patch conv, class token, pre-LN blocks, head) at a small size."""
    g = vit(VitConfig(layers=1, hidden=32, heads=2, ffn=64, image_size=16, patch=4,
                      classes=10), "vit_small", batch=2)
    exe = accel.compile(g, tiny)
    x = np.random.default_rng(5).integers(-128, 128, (2, 3, 16, 16), dtype=np.int8)
    outputs, report = exe.run(x, backend="fsim", check=True)
    assert report.check is True and report.offloaded_mac_share == 1.0
    assert np.array_equal(outputs["head"], exe.reference(x)["head"])
    assert outputs["head"].shape == (2, 10)


def test_zoo_activations_neither_vanish_nor_saturate() -> None:
    """On a fresh input, every int8 value the accelerator produces spreads over several bits
    and clips in at most 1% of its elements."""
    g = bert(TRANSFORMERS["bert_tiny"], "bert_tiny", seq_len=32, seed=0)
    x, _ = accel.sample_inputs(g, 9)
    env = run_reference(g, {"input_ids": x}, keep=True)
    for n in g.nodes:
        if n.op in ("dense", "batch_matmul", "add"):
            v = env[n.outputs[0]]
            clipped = float(np.mean((v == 127) | (v == -128)))
            assert clipped <= 0.01 and np.std(v.astype(np.float64)) > 2, (n.name, clipped)


def test_accel_run_bert_tiny(capsys: pytest.CaptureFixture[str]) -> None:
    from accel.cli import main

    assert main(["run", "bert_tiny", "--seq-len", "12", "--backend", "fsim"]) == 0
    out = capsys.readouterr().out
    assert "MACs offloaded: 100.00%" in out
    assert "% of the run's" in out and "bit-exact with the numpy reference network" in out
    assert main(["run", "bert_tiny", "--seq-len", "0"]) == 2
    err = capsys.readouterr().err
    assert err == "accel: error: bert_tiny: seq_len must be an int in 1..512, got 0\n"


def test_transformers_benchmark_reads_a_run_folder(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """benchmarks/transformers.py summarises what accel run --out wrote (its keys follow
    report.json's)."""
    import runpy
    import sys

    from accel.cli import main

    out = tmp_path / "bert"
    assert main(["run", "bert_tiny", "--seq-len", "8", "--no-trace", "--quiet",
                 "--out", str(out)]) == 0
    capsys.readouterr()
    bench = Path(__file__).parent.parent / "benchmarks" / "transformers.py"
    argv = sys.argv
    sys.argv = [str(bench), str(out)]
    try:
        runpy.run_path(str(bench), run_name="__main__")
    finally:
        sys.argv = argv
    text = capsys.readouterr().out
    report = json.loads((out / "report.json").read_text())
    assert text.startswith(f"bert_tiny on {report['config']}: "
                           f"{report['totals']['accel_cycles']:,} cycles, roofline efficiency ")
    assert "GEMM utilisation: qkv " in text and "attention " in text and "ffn " in text


@pytest.mark.slow
def test_vit_tiny_is_bit_exact_end_to_end() -> None:
    """DeiT-Tiny at 224x224 (197 tokens: rows off every block size) on the functional
    simulator, every layer against the numpy reference network."""
    exe = accel.compile("vit_tiny", "vta_1x16x16")
    x, _ = accel.sample_inputs(exe.graph, 1)
    outputs, report = exe.run(x, backend="fsim", check=True)
    assert report.check is True and report.offloaded_mac_share == 1.0
    assert np.array_equal(outputs["head"], exe.reference(x)["head"])
    assert sum(layer.op == "batch_matmul" for layer in report.layers) == 2 * 12


def test_a_residual_add_of_tokens_runs_as_rows_of_tiles(cfg: HwConfig) -> None:
    """The (rows, C, 1, 1) add is compiled as one image of rows x C/8 tiles (the same bytes):
    identical output, and a DMA per tile row instead of per tile."""
    from accel.machine.dram import Dram
    from accel.machine.isa import MemInsn, MemType
    from accel.machine.program import Program
    from compiler.ops.eltwise import AddWorkload, default_add_knobs
    from compiler.ops.registry import ADD
    from sim.timing import TimingSimulator

    wl = AddWorkload(48, 96, 1, 1, shift=1, relu=False)
    physical = ADD.physical(wl, cfg)
    assert physical == AddWorkload(1, 8, 48, 12, shift=1, relu=False)
    rng = np.random.default_rng(2)
    a, b = (rng.integers(-128, 128, (1, 48, 96), dtype=np.int8) for _ in range(2))
    t = TensorType(a.shape, "int8", f"TC{cfg.batch}n{cfg.block_out}c")
    op = ADD.compile(wl, cfg)
    image = op.dram(a=to_physical(a, t), b=to_physical(b, t), ident=np.eye(8, dtype=np.int8)[
        None, None])
    run_program(op.program, image, config=cfg, backend="fsim")
    got = to_logical(image.read("out", "int8").reshape(48, 12, 1, 8), t)
    assert np.array_equal(got, kernels.add(a.reshape(48, 96, 1, 1), b.reshape(48, 96, 1, 1),
                                           shift=1).reshape(1, 48, 96))
    logical = ADD.program(wl, cfg, default_add_knobs(wl, cfg))

    def copies(program: Program) -> int:
        return sum(isinstance(i, MemInsn) and i.mem_type is not MemType.UOP and i.y_size > 0
                   and i.x_size > 0 for i in program.insns)

    assert copies(op.program) * 10 < copies(logical)
    fast = TimingSimulator(cfg).run(op.program, Dram()).cycles
    slow = TimingSimulator(cfg).run(logical, Dram()).cycles
    assert fast * 1.5 < slow
