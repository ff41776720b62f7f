"""The operator pipeline: :func:`compiler.pipeline.build.build` lowers a schedule, runs the
pass list and :func:`compiler.pipeline.codegen.codegen`.

This package sits above :mod:`compiler.passes` (it runs them, and codegen uses the stream
passes), which sit above the IR modules of :mod:`compiler` that they import.
"""
