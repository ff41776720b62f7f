"""Amaranth RTL model of the accelerator."""
