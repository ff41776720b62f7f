"""Simulated annealing over a knob space, guided by the cost model's scores.

Several chains walk the space at once. At each step every chain proposes a random neighbour of
its point (one knob moved to the next valid value up or down, :meth:`KnobSpace.neighbours`); a
better-scored neighbour is always taken, a worse one with probability
``exp((new - old) / (scale * temperature))``, where ``scale`` is the spread of the starting
scores and the temperature falls linearly; a point scored ``-inf`` is never moved to. Every
point the chains visit is remembered with its score; the best ones not excluded (already
measured) are the candidates.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from compiler.ops.space import KnobSpace, Point

__all__ = ["anneal"]

ScoreFn = Callable[[list[Point]], np.ndarray]


def anneal(space: KnobSpace, score: ScoreFn, starts: Sequence[Point],
           rng: np.random.Generator, steps: int, keep: int,
           exclude: set[Point] | frozenset[Point] = frozenset(),
           temperature: tuple[float, float] = (1.0, 0.0)) -> tuple[list[Point], list[Point]]:
    """Anneal from ``starts``; return the ``keep`` best-scored visited points not in
    ``exclude`` (best first; among equal scores, the first visited) and the chains' final
    points (to start the next round from).

    ``score`` maps a list of points to an array of scores (higher is better).
    """
    points = list(starts)
    if not points:
        return [], []
    scores = np.asarray(score(points), dtype=np.float64)
    seen: dict[Point, float] = {}
    for p, s in zip(points, scores, strict=True):
        seen.setdefault(p, float(s))
    finite = scores[np.isfinite(scores)]
    spread = (float(np.std(finite)) if len(finite) else 0.0) or 1.0
    t0, t1 = temperature
    for step in range(steps):
        t = t0 + (t1 - t0) * step / max(steps - 1, 1)
        proposals = []
        for p in points:
            near = space.neighbours(p)
            proposals.append(near[int(rng.integers(len(near)))] if near else p)
        new = np.asarray(score(proposals), dtype=np.float64)
        for p, s in zip(proposals, new, strict=True):
            seen.setdefault(p, float(s))
        draws = rng.random(len(points))
        for i, (p, s) in enumerate(zip(proposals, new, strict=True)):
            if s == -np.inf:
                continue
            gain = (s - scores[i]) / (spread * max(t, 1e-9))
            if gain >= 0 or draws[i] < np.exp(gain):
                points[i], scores[i] = p, s
    order = sorted((p for p in seen if p not in exclude), key=lambda p: -seen[p])
    return order[:keep], points
