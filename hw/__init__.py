"""Amaranth RTL model of the accelerator.

- ``hw.top.Accelerator``: the whole design for one ``HwConfig``; ``hw.params`` derives every
  width and the instruction decoder from ``accel.machine.isa.IsaLayout``.
- Blocks: ``hw.fetch``, ``hw.units`` (load, store), ``hw.compute`` (sequencer, GEMM core, ALU),
  ``hw.control`` (instruction issue and dependency tokens), ``hw.queues``, ``hw.sram``,
  ``hw.dma``, ``hw.dram`` (DRAM port and arbiter).
- Running programs: ``hw.backend.run_rtl`` with the Amaranth simulator
  (``hw.amaranth_engine``) or Verilator (``hw.verilator``, harness in ``hw/harness``).
- Tools: ``hw.export`` (Verilog), ``hw.synth`` (Yosys / nextpnr), ``hw.cli`` (``accel
  verilog`` and ``accel synth``), ``accel.testing.randprog`` (random programs for co-simulation).

Nothing heavy is imported here.
"""
