"""The names of the RTL's tools the command line offers, importable without Amaranth.

``accel --help`` builds every subcommand's parser, so its choices come from here rather than
from :mod:`hw.synth` or :mod:`hw.backend`, which load Amaranth.
"""

from __future__ import annotations

__all__ = ["ECP5_DEVICES", "RTL_ENGINES", "SYNTH_TARGETS"]

SYNTH_TARGETS = ("ecp5", "ice40", "xilinx")
"""The FPGA families :func:`hw.synth.synthesize` maps to (the keys of ``hw.synth.TARGETS``)."""

ECP5_DEVICES = {"25k": "CABGA256", "45k": "CABGA381", "85k": "CABGA381"}
"""ECP5 devices nextpnr places on (``--device``), with the package used for each."""

RTL_ENGINES = ("auto", "verilator", "amaranth")
"""How :func:`hw.backend.run_rtl` simulates: Verilator, Amaranth's simulator, or Verilator
where it is installed (``auto``)."""
