"""Python entry points. Heavy subsystems are imported inside the functions that need them.

The network functions (:func:`load_model`, :func:`sample_inputs`, :func:`compile`) live in
:mod:`runtime.network`, where the sweep runner reaches them too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from accel.machine.config import HwConfig, load_config
from runtime.backends import RunResult, run_program
from runtime.network import compile_network as compile
from runtime.network import load_model, open_tuning_log, sample_inputs

__all__ = ["Report", "RunResult", "add", "compile", "conv2d", "load_model", "matmul",
           "run_program", "sample_inputs"]



# ---------------------------------------------------------------------- operators
@dataclass
class Report:
    """What running one operator on a backend measured.

    ``cycles`` and ``gemm_utilization`` are None on ``fsim`` (no notion of time). ``bytes`` are
    DRAM bytes loaded per buffer and stored; ``stalls`` are cycles by module and cause.
    ``energy`` is the run's :class:`accel.machine.energy.EnergyReport` with the config's energy
    table (None on ``fsim``: leakage and the modules' clocks need time). ``alu_busy`` is the
    compute module's cycles issuing ALU micro-ops (``sim`` only; ``costs.alu_cycles``).
    """

    backend: str
    op: str
    knobs: dict[str, int]
    cycles: int | None
    gemm_utilization: float | None
    macs: int
    bytes: dict[str, int]
    stalls: dict[str, dict[str, int]]
    insn_counts: dict[str, int]
    compile_seconds: float
    clock_mhz: float
    energy: Any = None
    alu_busy: int | None = None

    @property
    def milliseconds(self) -> float | None:
        """Run time at the config's clock (None on fsim)."""
        return None if self.cycles is None else self.cycles / (self.clock_mhz * 1000.0)

    def to_dict(self) -> dict[str, Any]:
        return {
            "backend": self.backend, "op": self.op, "knobs": dict(self.knobs),
            "cycles": self.cycles, "milliseconds": self.milliseconds,
            "gemm_utilization": self.gemm_utilization, "macs": self.macs,
            "bytes": dict(self.bytes), "stalls": {m: dict(s) for m, s in self.stalls.items()},
            "insn_counts": dict(self.insn_counts), "compile_seconds": self.compile_seconds,
            "energy": None if self.energy is None else self.energy.to_dict(),
            "alu_busy": self.alu_busy,
        }


def _report(result: RunResult, compiled: Any, macs: int, cfg: HwConfig) -> Report:
    """``cfg`` is the caller's config: a cached compiled op may carry an equal one with another
    energy table (tables take no part in equality)."""
    from runtime.backends import find_backend

    caps = find_backend(result.backend).caps
    stats = result.stats
    stalls: dict[str, dict[str, int]] = {}
    util = None
    if caps.module_stats:
        moved = {**stats.dram_loaded, "out": stats.dram_stored}
        stalls = {m: dict(s.stalls) for m, s in stats.modules.items()}
    elif hasattr(stats, "bytes_loaded"):
        moved = {**stats.bytes_loaded, "out": stats.bytes_stored}
    else:
        d = stats.to_dict()
        moved = {"read": d.get("dram_bytes_read", 0), "written": d.get("dram_bytes_written", 0)}
    if caps.timed and result.cycles:
        util = macs / (result.cycles * compiled.config.peak_macs_per_cycle)
    return Report(
        backend=result.backend, op=compiled.workload.signature(),
        knobs=compiled.knobs.to_dict(), cycles=result.cycles, gemm_utilization=util,
        macs=macs, bytes=moved, stalls=stalls,
        insn_counts=compiled.program.counts(), compile_seconds=compiled.compile_seconds,
        clock_mhz=compiled.config.clock_mhz, energy=result.energy(cfg),
        alu_busy=getattr(stats, "alu_busy", None) if caps.module_stats else None,
    )


def conv2d(
    x: Any, w: Any, bias: Any = None, stride: int | tuple[int, int] = 1,
    padding: int | tuple[int, int] = 0, shift: int = 0, relu: bool = False,
    config: HwConfig | str | None = None, backend: str = "sim", knobs: Any = None,
    tuning_log: Any = None, groups: int = 1,
) -> tuple[Any, Report]:
    """Run an int8 conv2d on the accelerator: compile (cached), lay out DRAM, run, unpack.

    Parameters
    ----------
    x, w, bias, stride, padding, shift, relu, groups
        As :func:`runtime.kernels.conv2d` (NCHW int8, OIHW int8, int32 per channel; ``w``
        ``(OC, C / groups, KH, KW)``): the result is identical to it. A grouped or depthwise
        convolution runs as block groups (:class:`compiler.ops.conv2d.GroupedConv2dWorkload`).
    config
        The hardware (default: the packaged default).
    backend
        ``"fsim"``, ``"sim"`` or ``"rtl"``.
    knobs
        A :class:`compiler.ops.conv2d.Conv2dKnobs`; default: the fastest logged in
        ``tuning_log`` for this layer and config, else the heuristic's choice.
    tuning_log
        A tuning log (path or :class:`compiler.ops.tuning_log.TuningLog`) written by
        ``accel tune``.

    Returns
    -------
    (y, report)
        ``y`` int8 NCHW; ``report`` a :class:`Report`.

    Raises
    ------
    TypeError, ValueError
        Bad arguments (the kernels' messages).
    compiler.errors.LoweringError
        The layer cannot be compiled for this config.
    compiler.ops.tuning_log.TuningLogError
        ``tuning_log`` names no file, or cannot be read.
    """
    from compiler.ops.compiled import compile_conv2d, pack_conv2d_args
    from compiler.ops.conv2d import Conv2dWorkload, GroupedConv2dWorkload
    from runtime.kernels import check_conv2d_args

    x, w, bias, (sh, sw), (ph, pw), shift, relu = check_conv2d_args(
        "conv2d", x, w, bias, stride, padding, shift, relu, groups=groups)
    cfg = load_config(config) if not isinstance(config, HwConfig) else config
    conv = Conv2dWorkload(x.shape[0], x.shape[1], x.shape[2], x.shape[3], w.shape[0],
                          w.shape[2], w.shape[3], sh, sw, ph, pw, bias is not None, shift, relu)
    wl = conv if groups == 1 else GroupedConv2dWorkload(conv, int(groups))
    op = compile_conv2d(wl, cfg, knobs, tuning_log=open_tuning_log(tuning_log))
    image = op.dram(**pack_conv2d_args(op, x, w, bias))
    result = run_program(op.program, image, config=cfg, backend=backend)
    y = op.read_output(image, (conv.batch, conv.out_channels, conv.out_height, conv.out_width))
    return y, _report(result, op, wl.macs, cfg)


def matmul(
    a: Any, b: Any, bias: Any = None, shift: int = 0, relu: bool = False,
    config: HwConfig | str | None = None, backend: str = "sim", knobs: Any = None,
) -> tuple[Any, Report]:
    """Run an int8 ``a (M, K) @ b (K, N)`` on the accelerator; identical to
    :func:`runtime.kernels.matmul`. See :func:`conv2d` for the other arguments."""
    from compiler.ops.compiled import compile_matmul, pack_matmul_args
    from compiler.ops.matmul import MatmulWorkload
    from runtime.kernels import check_matmul_args

    a, b, bias, shift, relu = check_matmul_args("matmul", a, b, bias, shift, relu)
    cfg = load_config(config) if not isinstance(config, HwConfig) else config
    wl = MatmulWorkload(a.shape[0], a.shape[1], b.shape[1], bias is not None, shift, relu)
    op = compile_matmul(wl, cfg, knobs)
    image = op.dram(**pack_matmul_args(op, a, b, bias))
    result = run_program(op.program, image, config=cfg, backend=backend)
    y = op.read_output(image, (wl.m, wl.n, 1, 1))[:, :, 0, 0]
    return y, _report(result, op, wl.macs, cfg)


def add(a: Any, b: Any, shift: int = 0, relu: bool = False,
        config: HwConfig | str | None = None, backend: str = "sim", knobs: Any = None,
        ) -> tuple[Any, Report]:
    """Run the int8 residual add ``clip(relu?((a + b) >> shift))`` (NCHW) on the accelerator;
    identical to :func:`runtime.kernels.add`. Needs ``block_in == block_out`` (else
    LoweringError). ``knobs``: an AddKnobs. See :func:`conv2d` for the other arguments."""
    from compiler.ops.eltwise import AddWorkload, compile_add, pack_add_args
    from runtime.kernels import check_add_args

    a, b, shift, relu = check_add_args("add", a, b, shift, relu)
    cfg = load_config(config) if not isinstance(config, HwConfig) else config
    wl = AddWorkload(*a.shape, shift=shift, relu=relu)
    op = compile_add(wl, cfg, knobs)
    image = op.dram(**pack_add_args(op, a, b))
    result = run_program(op.program, image, config=cfg, backend=backend)
    return op.read_output(image, wl.shape), _report(result, op, 0, cfg)

