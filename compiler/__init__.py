"""Compiler: tensor expressions, schedules, loop-nest IR passes, graph passes, tuning."""
