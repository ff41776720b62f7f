"""Runtime: executes compiled networks; numpy operator kernels are the CPU fallback and oracle."""
