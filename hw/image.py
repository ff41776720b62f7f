"""The DRAM image an RTL run starts from: the program's data, then its instructions.

The instructions are placed after the data, 16-byte aligned, for fetch to read; that tail is
dropped again after the run (``hw.backend.run_rtl``), so the caller's image keeps its size.
Both engines (``hw.amaranth_engine``, ``hw.verilator``) take an :class:`RtlRun`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from accel.machine.config import HwConfig
from accel.machine.dram import Dram, place_program
from accel.machine.isa import INSN_BYTES
from accel.machine.program import Program, ProgramError

__all__ = ["RtlRun", "prepare_image"]


@dataclass
class RtlRun:
    """A DRAM image ready for the RTL: the program's data, then its instructions."""

    image: np.ndarray
    insn_addr: int
    insn_count: int
    data_bytes: int


def prepare_image(program: Program, dram: Dram, cfg: HwConfig) -> RtlRun:
    """Validate ``program``, place it in ``dram`` and build the RTL's DRAM image.

    Raises
    ------
    ProgramError
        The program was built for another config, or is invalid.
    """
    if program.config != cfg:
        raise ProgramError(
            f"program was built for config {program.config.name}, not {cfg.name}"
        )
    program.validate()
    place_program(program, dram)
    insns = np.frombuffer(program.encode_insns(), dtype=np.uint8)
    data_bytes = dram.nbytes
    insn_addr = -(-data_bytes // INSN_BYTES) * INSN_BYTES
    image = np.zeros(insn_addr + len(insns), dtype=np.uint8)
    image[:data_bytes] = dram.data
    image[insn_addr:] = insns
    return RtlRun(image, insn_addr, len(program.insns), data_bytes)
