"""Tuners: search a task's knob space with measurements, behind one interface.

``tuner.tune(n_trials, measure, callbacks, log)`` asks the tuner for a batch of knob settings
it has not tried, measures the batch with ``measure`` (a callable the caller gives: the
compiler never imports the simulators; :mod:`runtime.tuning` provides one that measures on the
timing simulator in worker processes), tells the tuner the results, and repeats until
``n_trials`` settings were measured or the space is exhausted.

Every setting the tuner proposes passes the space's static validity filter (it divides the
layer, fits the buffers and the pad fields). A setting that then fails to compile comes back
from ``measure`` as a :class:`MeasureResult` with an ``error`` and no cycles: it is not a
trial, is never logged, is marked invalid and never proposed again, and the tuner proposes
another in its place. Every measured setting is a trial, including those a measurement cache
answered.

* :class:`RandomTuner`: settings in a seeded random order, without repetition.
* :class:`GATuner`: a genetic algorithm (fitness-proportional selection, single-point crossover
  on the knob index vectors, per-knob mutation, elites kept, offspring repaired to the nearest
  valid setting).
* :class:`XGBTuner`: the TVM paper's model-based tuner: an XGBoost rank model over program
  features (:mod:`compiler.tune.features`, :mod:`compiler.tune.model`) refit after each batch,
  a simulated-annealing explorer (:mod:`compiler.tune.explorer`) that proposes the settings with
  the best predicted rank, plus epsilon-greedy random settings for exploration.

All three are deterministic for a seed: the same measurements give the same sequence.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from compiler.errors import LoweringError
from compiler.ops.space import Point
from compiler.ops.tuning_log import TuningLog
from compiler.tune.explorer import anneal
from compiler.tune.features import N_FEATURES
from compiler.tune.model import RankModel
from compiler.tune.names import TUNER_NAMES
from compiler.tune.task import Task

__all__ = ["TUNERS", "GATuner", "Measure", "MeasureResult", "RandomTuner", "Trial", "TuneResult",
           "Tuner", "XGBTuner", "make_tuner"]


@dataclass(frozen=True)
class MeasureResult:
    """What measuring one knob setting gave.

    ``cycles`` is None when the setting failed to build; ``error`` then says why.
    ``seconds`` is the wall time spent building and simulating it (0 for a cache hit).
    """

    cycles: int | None
    error: str | None = None
    seconds: float = 0.0
    cached: bool = False


Measure = Callable[[Task, Sequence[Any]], list[MeasureResult]]
"""``measure(task, knobs_list) -> results`` (one per knob setting, in order)."""


@dataclass(frozen=True)
class Trial:
    """One measured setting: ``index`` counts trials from 1."""

    index: int
    knobs: Any
    cycles: int
    seconds: float = 0.0
    cached: bool = False


@dataclass
class TuneResult:
    """The trials of one ``tune`` call, in measurement order."""

    task: Task
    tuner: str
    trials: list[Trial] = field(default_factory=list)
    failed: list[tuple[Any, str]] = field(default_factory=list)
    """Settings that did not build, with the error (not trials)."""
    seconds: float = 0.0

    @property
    def best(self) -> Trial | None:
        """The fastest trial (the first of equals), or None before any."""
        return min(self.trials, key=lambda t: t.cycles, default=None)

    def best_curve(self) -> list[int]:
        """Best cycles so far after each trial."""
        out, best = [], None
        for t in self.trials:
            best = t.cycles if best is None else min(best, t.cycles)
            out.append(best)
        return out


Callback = Callable[["Tuner", TuneResult, list[Trial]], None]
"""Called after each measured batch with the tuner, the result so far and the new trials."""


class Tuner:
    """Base of the tuners: the batch loop, trial counting and logging.

    Parameters
    ----------
    task
        What to tune.
    seed
        Seed of every random choice.
    batch_size
        Settings measured together (in parallel when ``measure`` parallelises).
    """

    name = "base"

    def __init__(self, task: Task, seed: int = 0, batch_size: int = 8) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.task = task
        self.space = task.space
        self.seed = seed
        self.batch_size = batch_size
        self.rng = np.random.default_rng(seed)
        self.visited: set[Point] = set()
        """Points proposed so far (measured or failed to build)."""
        self.measured: dict[Point, int] = {}
        """Cycles of every measured point, in measurement order."""

    # ------------------------------------------------------------------ subclass hooks
    def next_batch(self, k: int) -> list[Point]:
        """Up to ``k`` distinct points not visited yet (fewer when the space runs out)."""
        raise NotImplementedError

    def update(self, results: list[tuple[Point, int]]) -> None:
        """Learn from a measured batch (points and cycles; build failures left out)."""

    # ------------------------------------------------------------------ helpers
    def _unvisited_random(self, k: int, taken: Sequence[Point] = ()) -> list[Point]:
        """Up to ``k`` random unvisited points not in ``taken``."""
        skip = self.visited | set(taken)
        free = len(self.space) - len(skip & set(self.space.points))
        out: list[Point] = []
        if free <= 0:
            return out
        if free < 4 * k:  # nearly exhausted: draw from the explicit list
            rest = [p for p in self.space.points if p not in skip]
            order = self.rng.permutation(len(rest))
            return [rest[i] for i in order[:k]]
        while len(out) < k:
            p = self.space.random_point(self.rng)
            if p not in skip:
                out.append(p)
                skip.add(p)
        return out

    # ------------------------------------------------------------------ the loop
    def tune(self, n_trials: int, measure: Measure, callbacks: Sequence[Callback] = (),
             log: TuningLog | None = None) -> TuneResult:
        """Measure up to ``n_trials`` settings, ``batch_size`` at a time.

        Parameters
        ----------
        n_trials
            Measured settings to reach (fewer when the space has fewer valid ones).
        measure
            ``measure(task, knobs_list) -> [MeasureResult]``.
        callbacks
            Called after each batch (progress displays).
        log
            Every trial is appended to it (tuner name in the record).

        Raises
        ------
        ValueError
            ``n_trials < 1``.
        RuntimeError
            ``measure`` returned a different number of results than settings.
        """
        if n_trials < 1:
            raise ValueError(f"the number of trials must be >= 1, got {n_trials}")
        result = TuneResult(self.task, self.name)
        start = time.perf_counter()
        while len(result.trials) < n_trials:
            points = self.next_batch(min(self.batch_size, n_trials - len(result.trials)))
            if not points:
                break
            self.visited.update(points)
            knobs = [self.space.knobs(p) for p in points]
            outcomes = measure(self.task, knobs)
            if len(outcomes) != len(points):
                raise RuntimeError(f"measure returned {len(outcomes)} results for "
                                   f"{len(points)} settings")
            batch: list[tuple[Point, int]] = []
            new: list[Trial] = []
            for p, k, r in zip(points, knobs, outcomes, strict=True):
                if r.cycles is None:
                    result.failed.append((k, r.error or "build failed"))
                    continue
                trial = Trial(len(result.trials) + 1, k, int(r.cycles), r.seconds, r.cached)
                result.trials.append(trial)
                new.append(trial)
                self.measured[p] = int(r.cycles)
                batch.append((p, int(r.cycles)))
                if log is not None:
                    log.add(self.task.config.name, self.task.signature, k.to_dict(),
                            int(r.cycles), self.name)
            self.update(batch)
            result.seconds = time.perf_counter() - start
            for cb in callbacks:
                cb(self, result, new)
        result.seconds = time.perf_counter() - start
        return result


class RandomTuner(Tuner):
    """Valid settings in a seeded random order, each at most once."""

    name = "random"

    def next_batch(self, k: int) -> list[Point]:
        return self._unvisited_random(k)


class GATuner(Tuner):
    """A genetic algorithm over knob index vectors.

    Parameters
    ----------
    pop_size
        Settings per generation (the first generation is random).
    elite
        Best settings so far that join every generation's parents.
    mutation
        Probability that one knob of an offspring moves to a random value on its axis.
    """

    name = "ga"

    def __init__(self, task: Task, seed: int = 0, batch_size: int = 8, pop_size: int = 16,
                 elite: int = 2, mutation: float = 0.1) -> None:
        super().__init__(task, seed, batch_size)
        self.pop_size = pop_size
        self.elite = elite
        self.mutation = mutation
        self.generation: list[Point] = []
        self.pending: list[Point] = []

    def next_batch(self, k: int) -> list[Point]:
        out: list[Point] = []
        while len(out) < k:
            if not self.pending:
                self.generation = (self._unvisited_random(self.pop_size) if not self.measured
                                   else self._breed())
                self.pending = list(self.generation)
                if not self.pending:
                    break
            p = self.pending.pop(0)
            if p not in self.visited and p not in out:
                out.append(p)
        return out

    def _breed(self) -> list[Point]:
        parents = [p for p in self.generation if p in self.measured]
        best = sorted(self.measured, key=lambda p: self.measured[p])[: self.elite]
        parents += [p for p in best if p not in parents]
        cycles = np.array([self.measured[p] for p in parents], dtype=np.float64)
        fitness = cycles.min() / cycles
        probs = fitness / fitness.sum()
        n_axes = len(self.space.names)
        children: list[Point] = []
        taken = set(self.visited)
        for _ in range(self.pop_size):
            child = None
            for _attempt in range(20):
                a, b = (parents[i] for i in self.rng.choice(len(parents), 2, p=probs))
                cut = int(self.rng.integers(n_axes)) if n_axes > 1 else 0
                genes = list(a[:cut] + b[cut:])
                for axis in range(n_axes):
                    if self.rng.random() < self.mutation:
                        genes[axis] = int(self.rng.integers(len(self.space.values[axis])))
                cand = self.space.nearest(genes)
                if cand not in taken:
                    child = cand
                    break
            if child is None:
                extra = self._unvisited_random(1, list(taken))
                if not extra:
                    break
                child = extra[0]
            children.append(child)
            taken.add(child)
        return children


class XGBTuner(Tuner):
    """Model-based tuning: XGBoost rank model + simulated-annealing explorer.

    Parameters
    ----------
    eps
        Probability that a slot of a batch goes to a random unvisited setting instead of the
        model's next best (epsilon-greedy exploration).
    chains, steps
        Simulated-annealing chains and steps per batch.
    model
        The cost model (default: a :class:`RankModel` seeded with ``seed``).
    """

    name = "xgb"

    def __init__(self, task: Task, seed: int = 0, batch_size: int = 8, eps: float = 0.1,
                 chains: int = 16, steps: int = 16, model: RankModel | None = None) -> None:
        super().__init__(task, seed, batch_size)
        self.eps = eps
        self.chains = chains
        self.steps = steps
        self.model = model or RankModel(seed=seed)
        self.heads: list[Point] = []

    def _features(self, points: list[Point]) -> tuple[np.ndarray, np.ndarray]:
        """Feature rows of ``points`` and which could be extracted; a setting that does not
        lower gets a row of zeros and is marked visited, so it is never proposed."""
        rows, ok = [], []
        for p in points:
            try:
                rows.append(self.task.features(p))
                ok.append(True)
            except LoweringError:
                rows.append(np.zeros(N_FEATURES))
                ok.append(False)
                self.visited.add(p)
        return np.stack(rows) if rows else np.zeros((0, N_FEATURES)), np.array(ok, bool)

    def _score(self, points: list[Point]) -> np.ndarray:
        """Predicted scores (-inf for a setting whose features cannot be extracted)."""
        x, ok = self._features(points)
        scores = self.model.predict(x)
        scores[~ok] = -np.inf
        return scores

    def next_batch(self, k: int) -> list[Point]:
        if not self.model.fitted:
            return self._unvisited_random(k)
        greedy = sum(self.rng.random() >= self.eps for _ in range(k))
        best = sorted(self.measured, key=lambda p: self.measured[p])[: self.chains // 2]
        starts = list(dict.fromkeys(best + self.heads))[: self.chains]
        starts += self._unvisited_random(self.chains - len(starts), starts)
        picked, self.heads = anneal(self.space, self._score, starts, self.rng, self.steps,
                                    keep=greedy, exclude=self.visited)
        return picked + self._unvisited_random(k - len(picked), picked)

    def update(self, results: list[tuple[Point, int]]) -> None:
        points = list(self.measured)
        x, ok = self._features(points)
        cycles = np.array([self.measured[p] for p in points], dtype=np.float64)[ok]
        if len(cycles) >= 2 and len(set(cycles.tolist())) >= 2:
            self.model.fit(x[ok], cycles)


TUNERS: dict[str, type[Tuner]] = dict(zip(TUNER_NAMES, (XGBTuner, RandomTuner, GATuner),
                                           strict=True))


def make_tuner(name: str, task: Task, seed: int = 0, **options: Any) -> Tuner:
    """The tuner called ``name`` (``xgb``, ``random`` or ``ga``) for ``task``.

    Raises
    ------
    ValueError
        Unknown name.
    """
    try:
        cls = TUNERS[name]
    except KeyError:
        raise ValueError(f"unknown tuner {name!r}; expected one of {', '.join(TUNERS)}"
                         ) from None
    return cls(task, seed=seed, **options)
