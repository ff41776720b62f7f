"""Compile an operator: schedule -> lowering -> passes (verified after each) -> codegen."""

from __future__ import annotations

from dataclasses import dataclass, field

from accel.machine.config import HwConfig
from accel.machine.program import Program
from compiler.lower import lower
from compiler.passes import PASSES, Pass
from compiler.pipeline.codegen import codegen
from compiler.schedule import Schedule
from compiler.tir import PrimFunc, verify

__all__ = ["BuildResult", "build"]


@dataclass
class BuildResult:
    """The program plus the IR after every pass (for inspection and tests)."""

    program: Program
    stages: dict[str, PrimFunc] = field(default_factory=dict)


def build(sch: Schedule, cfg: HwConfig, name: str, passes: list[Pass] | None = None,
          keep_ir: bool = False, meta: dict | None = None) -> BuildResult:
    """Lower ``sch`` and run the pass pipeline and codegen.

    Raises
    ------
    compiler.errors.LoweringError
        From any stage, naming it.
    compiler.tir.IRVerifyError
        A pass produced invalid IR.
    """
    func = lower(sch, name)
    verify(func, "lower")
    stages = {"lower": func} if keep_ir else {}
    for p in passes if passes is not None else PASSES:
        func = p(func, cfg)
        verify(func, p.__name__)
        if keep_ir:
            stages[p.__name__] = func
    verify(func, "passes", hardware_only=True)
    func.attrs["meta"] = dict(meta or {})
    program = codegen(func, cfg)
    program.validate()
    return BuildResult(program, stages)
