"""Simulators: the bit-exact functional simulator and the SimPy cycle-level timing model."""
