"""Programs for tests and benchmarks, built on the machine contract only.

- :mod:`accel.testing.randprog`: random, correctly synchronised programs for co-simulating the
  RTL against the simulators;
- :mod:`accel.testing.synthetic`: long synthetic workloads (a pipelined GEMM stream, a GEMM
  tile) whose cycles are known in closed form, for the simulator and RTL speed benchmarks.
"""
