"""Shared pytest fixtures: the shipped hardware configs and a seeded random generator."""

from __future__ import annotations

import numpy as np
import pytest

import accel
from accel.machine.config import HwConfig

RNG_SEED = 20240607

ORIGINAL_CHANNEL = {"dram.max_outstanding": 1, "dram.arbiter": "priority", "dram.merge_rows": False}
"""The original DRAM channel (one transaction at a time, fixed priority, rows one by one): the
hand-computed timelines of its rules use it, as a config would that predates the fields."""


def original(cfg: HwConfig) -> HwConfig:
    """``cfg`` with the original DRAM channel."""
    return cfg.replace(**ORIGINAL_CHANNEL)


@pytest.fixture(scope="session")
def cfg() -> HwConfig:
    """The packaged default config (1x8x8 core)."""
    return accel.load_config()


@pytest.fixture(scope="session")
def tiny() -> HwConfig:
    """The tiny config (1x4x4 core, small buffers, shallow queues)."""
    return accel.load_config("tiny")


@pytest.fixture(scope="session")
def vta() -> HwConfig:
    """VTA's published default shape and buffer sizes (1x16x16 core)."""
    return accel.load_config("vta_1x16x16")


@pytest.fixture
def rng() -> np.random.Generator:
    """A freshly seeded generator per test, so every test sees the same numbers."""
    return np.random.default_rng(RNG_SEED)


def pytest_configure(config: pytest.Config) -> None:
    """Tests never read or write the user's cache: each run gets a fresh one."""
    import os
    import tempfile

    if "ACCEL_CACHE_DIR" not in os.environ:
        os.environ["ACCEL_CACHE_DIR"] = tempfile.mkdtemp(prefix="accel-test-cache-")
