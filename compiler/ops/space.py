"""Knob spaces: every setting of a schedule's knobs that is legal for one layer on one config.

A space is a grid: one axis per knob, each with an ordered tuple of candidate values (the
divisors of a blocked dimension, thread counts, loop orders). A *point* is a tuple of value
indices into those axes; the knobs themselves are the schedule's knob dataclass
(:class:`~compiler.ops.conv2d.Conv2dKnobs`, :class:`~compiler.ops.matmul.MatmulKnobs`). The
validity filter is static: the knobs divide the layer's dimensions, their buffers (times the
virtual threads) fit the config's inp, wgt and acc SRAM, the padding fits the LOAD pad fields,
and a loop order is only listed where it changes the loop nest. Whether a valid point also
compiles is found out by building it (the measurement reports a build failure, and the tuners
never count or log one; see :mod:`compiler.tune.tuners`).

Neighbours of a point (what the simulated-annealing explorer and the genetic algorithm's repair
step walk) change one knob to the next valid value up or down its axis.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from accel.machine.config import HwConfig
from compiler.errors import LoweringError
from compiler.ops.conv2d import TILE_ORDERS, Conv2dKnobs, Conv2dWorkload
from compiler.ops.heuristic import fits
from compiler.ops.matmul import MatmulKnobs, MatmulWorkload, matmul_fits

__all__ = ["THREAD_PAIRS", "KnobSpace", "Point", "conv2d_space", "matmul_space"]

Point = tuple[int, ...]
"""Indices into a space's knob axes, in axis order."""

THREAD_PAIRS: tuple[tuple[int, int], ...] = ((1, 1), (2, 1), (1, 2), (2, 2), (4, 1), (1, 4))
"""(oc_nthread, h_nthread) pairs a conv2d may use: at most four virtual threads, as the
heuristic's candidates (:func:`compiler.ops.heuristic.knob_candidates`)."""


def _divisors(n: int) -> tuple[int, ...]:
    return tuple(d for d in range(1, n + 1) if n % d == 0)


@dataclass(frozen=True)
class KnobSpace:
    """The valid knob settings of one operator on one config.

    Parameters
    ----------
    names
        Knob names, one per axis (the knob dataclass's field names).
    values
        Per axis, the candidate values in increasing order.
    make
        Builds the knob dataclass from ``{name: value}``.
    valid
        The static validity filter on knob values.
    """

    names: tuple[str, ...]
    values: tuple[tuple[int, ...], ...]
    make: Callable[..., Any]
    valid: Callable[[Any], bool]

    def __post_init__(self) -> None:
        points = [p for p in itertools.product(*(range(len(v)) for v in self.values))
                  if self.valid(self._build(p))]
        object.__setattr__(self, "_points", tuple(points))
        object.__setattr__(self, "_index", {p: i for i, p in enumerate(points)})

    def _build(self, point: Point) -> Any:
        return self.make(**{n: v[i] for n, v, i in zip(self.names, self.values, point,
                                                        strict=True)})

    # ------------------------------------------------------------------ queries
    @property
    def points(self) -> tuple[Point, ...]:
        """Every valid point, in lexicographic order of value indices."""
        return self._points  # type: ignore[attr-defined,no-any-return]

    def __len__(self) -> int:
        return len(self.points)

    def __iter__(self) -> Iterator[Point]:
        return iter(self.points)

    def __contains__(self, point: object) -> bool:
        return point in self._index  # type: ignore[attr-defined]

    def knobs(self, point: Point) -> Any:
        """The knob dataclass of ``point``."""
        return self._build(point)

    def point(self, knobs: Any) -> Point:
        """The point of a knob dataclass (or a ``{name: value}`` dict).

        Raises
        ------
        LoweringError
            A knob value not on its axis, or a setting the validity filter rejects.
        """
        values = knobs if isinstance(knobs, dict) else knobs.to_dict()
        idx = []
        for name, axis in zip(self.names, self.values, strict=True):
            v = values.get(name)
            if v not in axis:
                raise LoweringError(f"knob {name} = {v} is not one of {list(axis)}")
            idx.append(axis.index(v))
        p = tuple(idx)
        if p not in self:
            raise LoweringError(f"knobs {values} are not valid for this layer and config")
        return p

    def random_point(self, rng: np.random.Generator) -> Point:
        return self.points[int(rng.integers(len(self.points)))]

    def neighbours(self, point: Point) -> list[Point]:
        """Points that change one knob to the next valid value above or below it."""
        out = []
        for axis, n in enumerate(len(v) for v in self.values):
            for step in (-1, 1):
                j = point[axis] + step
                while 0 <= j < n:
                    cand = (*point[:axis], j, *point[axis + 1:])
                    if cand in self:
                        out.append(cand)
                        break
                    j += step
        return out

    def nearest(self, point: Sequence[int]) -> Point:
        """The valid point closest to ``point`` (sum of index distances; first on ties)."""
        p = tuple(int(i) for i in point)
        if p in self:
            return p
        grid = self.as_array()
        dist = np.abs(grid - np.asarray(p)[None, :]).sum(axis=1)
        return self.points[int(np.argmin(dist))]

    def as_array(self) -> np.ndarray:
        """The valid points as an ``(n, axes)`` int array."""
        cached = getattr(self, "_array", None)
        if cached is None:
            cached = np.asarray(self.points, dtype=np.int64).reshape(len(self.points),
                                                                     len(self.names))
            object.__setattr__(self, "_array", cached)
        return cached


# ---------------------------------------------------------------------- conv2d
def conv2d_space(wl: Conv2dWorkload, cfg: HwConfig) -> KnobSpace:
    """The knob space of :func:`compiler.ops.conv2d.conv2d_schedule` for ``wl`` on ``cfg``.

    Axes: tile_b, tile_h, tile_w, tile_ci, tile_co (divisors of the blocked dimensions),
    oc_nthread and h_nthread (1, 2, 4; at most four threads together, :data:`THREAD_PAIRS`)
    and tile_order (:data:`~compiler.ops.conv2d.TILE_ORDERS`; the columns-outer order only
    where both the row-tile and the column-tile loops have more than one iteration, as
    otherwise it is the same loop nest).

    Raises
    ------
    LoweringError
        No setting is valid (the padding exceeds the pad fields, or nothing fits the buffers).
    """
    nb, cib, cob = wl.blocks(cfg)
    oh, ow = wl.out_height, wl.out_width

    def valid(k: Conv2dKnobs) -> bool:
        if (k.oc_nthread, k.h_nthread) not in THREAD_PAIRS:
            return False
        if cob % (k.tile_co * k.oc_nthread) or oh % (k.tile_h * k.h_nthread):
            return False
        if k.tile_order == 1 and (oh // (k.tile_h * k.h_nthread) == 1 or ow // k.tile_w == 1):
            return False
        return fits(wl, k, cfg)

    space = KnobSpace(
        names=("tile_b", "tile_h", "tile_w", "tile_ci", "tile_co", "oc_nthread", "h_nthread",
               "tile_order"),
        values=(_divisors(nb), _divisors(oh), _divisors(ow), _divisors(cib), _divisors(cob),
                (1, 2, 4), (1, 2, 4), tuple(range(len(TILE_ORDERS)))),
        make=Conv2dKnobs, valid=valid,
    )
    if not len(space):
        raise LoweringError(f"conv2d {wl.signature()}: no knob setting is valid on {cfg.name} "
                            "(the padding or the smallest tiles do not fit)")
    return space


# ---------------------------------------------------------------------- matmul
def matmul_space(wl: MatmulWorkload, cfg: HwConfig) -> KnobSpace:
    """The knob space of :func:`compiler.ops.matmul.matmul_schedule` for ``wl`` on ``cfg``:
    tile_m, tile_k, tile_n (divisors of the blocked dimensions) and n_nthread (1, 2, 4), with
    the buffers checked as for a 1x1 convolution over ``M`` one-pixel images.

    Raises
    ------
    LoweringError
        Nothing fits the buffers.
    """
    mb, kb, nb = wl.blocks(cfg)

    def valid(k: MatmulKnobs) -> bool:
        return matmul_fits(wl, k, cfg)

    space = KnobSpace(
        names=("tile_m", "tile_k", "tile_n", "n_nthread"),
        values=(_divisors(mb), _divisors(kb), _divisors(nb), (1, 2, 4)),
        make=MatmulKnobs, valid=valid,
    )
    if not len(space):
        raise LoweringError(f"matmul {wl.signature()}: no knob setting fits the buffers of "
                            f"{cfg.name}")
    return space
