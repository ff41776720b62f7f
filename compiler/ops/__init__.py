"""Operators: compute definitions on blocked layouts plus accelerator schedules with knobs."""
