"""Tensor expressions, schedule primitives (loop nests before and after) and lowering."""

from __future__ import annotations

import re

import numpy as np
import pytest

from accel.machine.config import load_config
from accel.machine.dram import pack_activation, pack_weight, unpack_activation
from compiler.errors import LoweringError
from compiler.intrin import gemm_intrinsic
from compiler.lower import lower
from compiler.ops.conv2d import Conv2dWorkload, conv2d_compute
from compiler.schedule import Pragma, ScheduleError, create_schedule
from compiler.te import compute, evaluate, placeholder, reduce_axis, sum
from compiler.tir import to_text, verify
from runtime import kernels


def matmul_te(n: int = 8):  # type: ignore[no-untyped-def]
    a = placeholder((n, n), "int8", "a")
    b = placeholder((n, n), "int8", "b")
    k = reduce_axis(n, "k")
    c = compute((n, n), lambda i, j: sum(a[i, k].astype("int32") * b[k, j].astype("int32"),
                                         axis=k), "c")
    return a, b, c


def test_evaluate_matmul_expression() -> None:
    rng = np.random.default_rng(1)
    a, b, c = matmul_te(6)
    av = rng.integers(-128, 128, (6, 6), dtype=np.int8)
    bv = rng.integers(-128, 128, (6, 6), dtype=np.int8)
    np.testing.assert_array_equal(evaluate(c, {a: av, b: bv}), kernels.matmul_acc(av, bv))


def test_conv2d_definition_means_the_kernel() -> None:
    """The blocked TE of conv2d, evaluated, equals the numpy kernel (bias, shift, ReLU, clip)."""
    cfg = load_config("tiny")
    rng = np.random.default_rng(2)
    wl = Conv2dWorkload(2, 5, 5, 4, 6, 3, 2, 2, 1, 1, 1, bias=True, shift=5, relu=True)
    t = conv2d_compute(wl, cfg)
    x = rng.integers(-128, 128, (2, 5, 5, 4), dtype=np.int8)
    w = rng.integers(-128, 128, (6, 5, 3, 2), dtype=np.int8)
    bias = rng.integers(-3000, 3000, 6).astype(np.int32)
    bias_tiles = np.zeros((2, 1, 4), np.int32)
    bias_tiles.reshape(-1)[:6] = bias
    feed = {t["data"]: pack_activation(x, 1, 4), t["kernel"]: pack_weight(w, 4, 4),
            t["bias"]: bias_tiles}
    out = evaluate(t["out"], feed)
    got = unpack_activation(out, (2, 6, wl.out_height, wl.out_width))
    want = kernels.conv2d(x, w, bias, stride=(2, 1), padding=1, shift=5, relu=True)
    np.testing.assert_array_equal(got, want)


def test_split_reorder_fuse_tile_loop_nests() -> None:
    _, _, c = matmul_te(16)
    s = create_schedule(c)
    sc = s[s.tensor("c")]
    i, j, k = sc.leaf_iter_vars
    assert s.loop_nest().splitlines()[1:] == [
        "  for c.i in 0..16:", "    for c.j in 0..16:", "      for k in 0..16:"]
    io, ii = sc.split(i, 4)
    sc.reorder(io, j, ii)
    assert s.loop_nest().splitlines()[1:] == [
        "  for c.i.outer in 0..4:", "    for c.j in 0..16:", "      for c.i.inner in 0..4:",
        "        for k in 0..16:"]
    fused = sc.fuse(j, ii)
    assert fused.extent == 64 and fused.name == "c.j.c.i.inner"
    s2 = create_schedule(c)
    st = s2[s2.tensor("c")]
    a, b, _ = st.leaf_iter_vars
    xo, yo, xi, yi = st.tile(a, b, 4, 8)
    assert [v.name for v in st.leaf_iter_vars] == [
        "c.i.outer", "c.j.outer", "c.i.inner", "c.j.inner", "k"]
    assert (xo.extent, yo.extent, xi.extent, yi.extent) == (4, 2, 4, 8)
    del k


def test_root_values_follow_split_and_fuse() -> None:
    _, _, c = matmul_te(8)
    s = create_schedule(c)
    st = s[s.tensor("c")]
    i, j, _ = st.leaf_iter_vars
    io, ii = st.split(i, 2)
    f = st.fuse(ii, j)
    values = st.root_values()
    env_names = {repr(values[i.var])}
    assert env_names == {f"(({io.name} * 2) + ({f.name} // 8))"}
    assert repr(values[j.var]) == f"({f.name} % 8)"


def test_schedule_errors_name_the_stage() -> None:
    _, _, c = matmul_te(16)
    s = create_schedule(c)
    st = s[s.tensor("c")]
    i, j, k = st.leaf_iter_vars
    with pytest.raises(ScheduleError, match=re.escape(
            "stage c: split of c.i (extent 16) by 5: the factor must be a positive divisor of "
            "the extent")):
        st.split(i, 5)
    with pytest.raises(ScheduleError, match=r"^stage c: fuse: k must directly follow c.i$"):
        st.fuse(i, k)
    with pytest.raises(ScheduleError, match=r"^stage c: fuse: cannot fuse a reduce loop with a "
                                            r"spatial loop$"):
        st.fuse(j, k)
    with pytest.raises(ScheduleError, match=r"^stage c: a reduction cannot be inlined$"):
        st.compute_inline()
    with pytest.raises(ScheduleError, match=r"^stage c: unknown scope 'sram'"):
        st.set_scope("sram")
    with pytest.raises(ScheduleError, match=re.escape(
            "stage c: tensorize at c.j: the loops from it inward have extents (16, 16), the "
            "gemm intrinsic needs (1, 8, 8)")):
        st.tensorize(j, gemm_intrinsic(load_config()))
    _, _, other_c = matmul_te(16)
    other = create_schedule(other_c)
    foreign = other[other.tensor("c")].leaf_iter_vars[0]
    with pytest.raises(ScheduleError, match=r"^stage c: c.i is not a loop of this stage"):
        st.pragma(foreign, Pragma.ALU)


def test_cache_read_rewrites_readers_but_not_the_callers_tensors() -> None:
    _a, _b, c = matmul_te(8)
    s = create_schedule(c)
    ca = s.cache_read(s.tensor("a"), "inp", [s.tensor("c")])
    assert ca.name == "a.inp"
    assert [t.name for t in s[s.tensor("c")].op.inputs()] == ["a.inp", "b"]
    assert [t.name for t in c.op.inputs()] == ["a", "b"]  # the caller's graph is untouched
    assert [st.name for st in s.stages] == ["a.inp", "c"]


def test_lowering_infers_the_region_of_an_attached_stage() -> None:
    x = placeholder((4, 10), "int32", "x")
    y = compute((4, 8), lambda i, j: x[i, j] + x[i, j + 2], "y")
    s = create_schedule(y)
    sy = s[s.tensor("y")]
    _i, j = sy.leaf_iter_vars
    jo, _ji = sy.split(j, 4)
    cx = s.cache_read(s.tensor("x"), "acc", [s.tensor("y")])
    s[cx].compute_at(sy, jo)
    func = lower(s, "f")
    verify(func)
    text = to_text(func)
    # Each j.outer iteration needs columns 4*jo .. 4*jo + 5 of x: a 1 x 6 region.
    assert "alloc x.acc: acc int32[1, 6]" in text
    assert "x.acc[x.acc.i, x.acc.j] = x[(y.i + x.acc.i), ((y.j.outer * 4) + x.acc.j)]" in text
    assert "y[y.i, ((y.j.outer * 4) + y.j.inner)] = (x.acc[0, y.j.inner] + " \
           "x.acc[0, (y.j.inner + 2)])" in text


def test_lowering_rejects_splitting_a_region_axis() -> None:
    x = placeholder((4, 8), "int32", "x")
    y = compute((4, 8), lambda i, j: x[i, j] * 2, "y")
    z = compute((4, 8), lambda i, j: y[i, j] + 1, "z")
    s = create_schedule(z)
    sz, sy = s[s.tensor("z")], s[s.tensor("y")]
    i, _ = sz.leaf_iter_vars
    sy.set_scope("acc")
    sy.compute_at(sz, i)
    sy.split(sy.leaf_iter_vars[0], 1)
    with pytest.raises(LoweringError, match=r"^stage y: axis y.i is split or fused but computed "
                                            r"only over a region at z.i"):
        lower(s, "f")
