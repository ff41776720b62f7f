"""The compiler's pass pipeline: a flat, visible list of named IR -> IR functions.

    PASSES = [inject_dma, tensorize, inplace_acc, inject_alu, accumulate_add, reset_bias,
              load_bias, store_requant, insert_dependencies, inject_virtual_threads,
              plan_sram, fold_uop_loops, cache_uop_kernels]

Each takes ``(PrimFunc, HwConfig)`` and returns a ``PrimFunc``; ``compiler.pipeline.build``
runs the verifier after every one, and codegen turns the result into a program.
"""

from __future__ import annotations

from collections.abc import Callable

from accel.machine.config import HwConfig
from compiler.passes.alu import (
    accumulate_add,
    inject_alu,
    inplace_acc,
    load_bias,
    reset_bias,
    store_requant,
)
from compiler.passes.deps import insert_dependencies
from compiler.passes.dma import inject_dma
from compiler.passes.storage import plan_sram
from compiler.passes.tensorize import tensorize
from compiler.passes.uops import cache_uop_kernels, fold_uop_loops
from compiler.passes.vthread import inject_virtual_threads
from compiler.tir import PrimFunc

__all__ = ["PASSES", "Pass"]

Pass = Callable[[PrimFunc, HwConfig], PrimFunc]

PASSES: list[Pass] = [
    inject_dma,
    tensorize,
    inplace_acc,
    inject_alu,
    accumulate_add,
    reset_bias,
    load_bias,
    store_requant,
    insert_dependencies,
    inject_virtual_threads,
    plan_sram,
    fold_uop_loops,
    cache_uop_kernels,
]
