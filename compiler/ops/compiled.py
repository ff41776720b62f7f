"""Compiled operators: program + how to lay out its arguments in DRAM, cached per
(config name, operator signature, knobs)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from accel.machine.cache import cache_dir, code_version
from accel.machine.config import HwConfig
from accel.machine.dram import Dram, pack_activation, pack_weight, unpack_activation
from accel.machine.program import Program
from compiler.errors import LoweringError
from compiler.ops.conv2d import (
    Conv2dKnobs,
    Conv2dWorkload,
    GroupedConv2dWorkload,
    conv2d_schedule,
    pack_conv2d_kernel,
    per_group,
)
from compiler.ops.heuristic import default_conv2d_knobs
from compiler.ops.matmul import (
    MatmulKnobs,
    MatmulWorkload,
    default_matmul_knobs,
    matmul_schedule,
)
from compiler.ops.tuning_log import as_log
from compiler.pipeline.build import build

__all__ = ["CompiledOp", "bias_tiles", "cache_clear", "compile_cached", "compile_conv2d",
           "compile_matmul", "conv2d_program", "logged_knobs", "matmul_program"]

_CACHE: dict[tuple[HwConfig, str, Any], CompiledOp] = {}


@dataclass
class CompiledOp:
    """A compiled operator and its DRAM argument layout."""

    workload: Any
    knobs: Any
    program: Program
    config: HwConfig
    compile_seconds: float

    def dram(self, **arrays: np.ndarray) -> Dram:
        """A DRAM image with the program's regions and the given packed arguments written."""
        image = Dram()
        for region in self.program.regions.values():
            image.add_region(region)
        for name, value in arrays.items():
            image.write(name, value)
        return image

    def bias_tiles(self, bias: np.ndarray, channels: int) -> np.ndarray:
        """Per-channel int32 bias as ``(O/o, batch, o)`` acc tiles (see :func:`bias_tiles`)."""
        return bias_tiles(bias, channels, self.config)

    def read_output(self, image: Dram, shape: tuple[int, int, int, int]) -> np.ndarray:
        """The int8 output, unpacked from its blocked layout and cropped to ``shape`` (NCHW)."""
        region = self.program.regions["out"]
        assert region.shape is not None
        blocked = image.read("out", "int8", region.shape)
        if blocked.ndim == 4:  # matmul (M/b, N/o, b, o): one-pixel images
            blocked = blocked[:, :, None, None]
        elif blocked.ndim == 7:  # grouped conv2d (N/b, G, O/o, ...): the groups' blocks
            blocked = blocked.reshape(blocked.shape[0], -1, *blocked.shape[3:])
        return unpack_activation(blocked, shape)


def bias_tiles(bias: np.ndarray, channels: int, cfg: HwConfig) -> np.ndarray:
    """Per-channel int32 bias as ``(O/o, batch, o)`` acc tiles (zero in padded channels)."""
    blocks = -(-channels // cfg.block_out)
    padded = np.zeros(blocks * cfg.block_out, dtype=np.int32)
    padded[:channels] = bias
    tiles = padded.reshape(blocks, 1, cfg.block_out)
    return np.ascontiguousarray(np.broadcast_to(tiles, (blocks, cfg.batch, cfg.block_out)))


def cache_clear() -> None:
    """Forget every compiled operator held in memory (the disk cache stays)."""
    _CACHE.clear()


def compile_cached(wl: Any, knobs: Any,
                   cfg: HwConfig, make: Callable[[], Program]) -> CompiledOp:
    """The cached program of (config, signature, knobs): in memory, then on disk
    (``$ACCEL_CACHE_DIR/programs``), else built by ``make`` and stored in both."""
    # The config itself, not its name: configs that differ only in their description share a
    # name, and a program keeps the config it was built for.
    key = (cfg, wl.signature(), knobs)
    if key in _CACHE:
        return _CACHE[key]
    start = time.perf_counter()
    folder = cache_dir("programs")
    knob_tag = "_".join(f"{v}" for v in knobs.to_dict().values())
    path = None
    if folder is not None:
        path = folder / (f"{cfg.name}__{wl.signature()}__{knob_tag}__"
                         f"{code_version('accel.machine', 'compiler')}.bin")
    program = None
    if path is not None and path.exists():
        try:
            program = Program.load(path, config=cfg)
        except ValueError:
            program = None  # a damaged entry is rebuilt and replaced
    if program is None:
        program = make()
        if path is not None:
            with contextlib.suppress(OSError):
                program.save(path)
    _CACHE[key] = CompiledOp(wl, knobs, program, cfg, time.perf_counter() - start)
    return _CACHE[key]


def conv2d_program(wl: Conv2dWorkload | GroupedConv2dWorkload, cfg: HwConfig,
                   knobs: Conv2dKnobs) -> Program:
    """Build ``wl`` for ``cfg`` with ``knobs``, uncached (the tuner builds thousands of
    settings once each; keeping them would only fill memory and the disk cache).

    Raises
    ------
    compiler.errors.LoweringError
        Knobs the schedule or a pass rejects.
    """
    return build(conv2d_schedule(wl, knobs, cfg), cfg, "conv2d",
                 meta={"signature": wl.signature(), "knobs": knobs.to_dict()}).program


def matmul_program(wl: MatmulWorkload, cfg: HwConfig, knobs: MatmulKnobs) -> Program:
    """Build ``wl`` for ``cfg`` with ``knobs``, uncached (see :func:`conv2d_program`)."""
    return build(matmul_schedule(wl, knobs, cfg), cfg, "matmul",
                 meta={"signature": wl.signature(), "knobs": knobs.to_dict()}).program


def logged_knobs(tuning_log: Any, wl: Conv2dWorkload | MatmulWorkload, cfg: HwConfig,
                 cls: type[Conv2dKnobs] | type[MatmulKnobs]) -> Any:
    """The knobs of the fastest record of ``wl`` on ``cfg`` in ``tuning_log`` (a
    :class:`compiler.ops.tuning_log.TuningLog` or a path), or None when it has none.

    Raises
    ------
    compiler.errors.LoweringError
        The record's knobs are not fields of ``cls`` (a log from another version).
    """
    log = as_log(tuning_log)
    record = log.best(cfg.name, wl.signature())
    if record is None:
        return None
    try:
        return cls(**record.knobs)
    except TypeError:
        raise LoweringError(f"{log.path}: the logged knobs {record.knobs} of {wl.signature()} "
                            f"are not {cls.__name__} fields") from None


def compile_conv2d(wl: Conv2dWorkload | GroupedConv2dWorkload, cfg: HwConfig,
                   knobs: Conv2dKnobs | None = None, tuning_log: Any = None) -> CompiledOp:
    """Compile ``wl`` for ``cfg``, cached.

    Knobs: ``knobs`` when given; else the fastest logged for (``cfg.name``,
    ``wl.signature()``) in ``tuning_log`` (a :class:`compiler.ops.tuning_log.TuningLog` or a
    path) when it has one; else the heuristic's (a grouped ``wl``'s: one block group's).
    """
    chosen = knobs or (logged_knobs(tuning_log, wl, cfg, Conv2dKnobs) if tuning_log is not None
                       else None) or default_conv2d_knobs(per_group(wl, cfg)[0], cfg)
    return compile_cached(wl, chosen, cfg, lambda: conv2d_program(wl, cfg, chosen))


def compile_matmul(wl: MatmulWorkload, cfg: HwConfig, knobs: MatmulKnobs | None = None,
                   tuning_log: Any = None) -> CompiledOp:
    """Compile ``wl`` for ``cfg``, cached; knobs chosen as :func:`compile_conv2d` does."""
    chosen = knobs or (logged_knobs(tuning_log, wl, cfg, MatmulKnobs) if tuning_log is not None
                       else None) or default_matmul_knobs(wl, cfg)
    return compile_cached(wl, chosen, cfg, lambda: matmul_program(wl, cfg, chosen))


def pack_conv2d_args(op: CompiledOp, x: np.ndarray, w: np.ndarray,
                     bias: np.ndarray | None) -> dict[str, np.ndarray]:
    cfg = op.config
    args = {"data": pack_activation(x, cfg.batch, cfg.block_in),
            "kernel": pack_conv2d_kernel(w, op.workload, cfg)}
    if bias is not None:
        args["bias"] = op.bias_tiles(bias, w.shape[0])
    return args


def pack_matmul_args(op: CompiledOp, a: np.ndarray, b: np.ndarray,
                     bias: np.ndarray | None) -> dict[str, np.ndarray]:
    cfg = op.config
    packed_a = pack_activation(a[:, :, None, None], cfg.batch, cfg.block_in)[:, :, 0, 0]
    packed_b = pack_weight(np.ascontiguousarray(b.T)[:, :, None, None], cfg.block_out,
                           cfg.block_in)[:, :, 0, 0]
    args = {"a": np.ascontiguousarray(packed_a), "b": np.ascontiguousarray(packed_b)}
    if bias is not None:
        args["bias"] = op.bias_tiles(bias, b.shape[1])
    return args
