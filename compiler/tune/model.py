"""The statistical cost model: gradient-boosted trees with a pairwise rank objective.

The model never predicts cycles; it learns which of two knob settings is faster (XGBoost's
``rank:pairwise`` over one query group holding every measured setting of the task), which is
all the explorer needs to pick candidates. Labels are ``best_cycles / cycles`` (1 for the
fastest, towards 0 for slow ones); a higher score means predicted faster.

XGBoost runs on one thread (``nthread=1``) with ``OMP_WAIT_POLICY=PASSIVE``: on a 2-core
machine beside other busy processes, a fit that takes 0.25 s on one thread took 14-98 s with
two spinning OpenMP threads. With a fixed seed, fits are deterministic.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

__all__ = ["RankModel", "kendall_tau", "pairwise_accuracy"]


def _xgboost() -> Any:
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    import xgboost

    return xgboost


class RankModel:
    """XGBoost ranking model of knob settings.

    Parameters
    ----------
    seed
        Seed of XGBoost's sampling (fits are deterministic for a seed).
    rounds
        Boosting rounds per fit.
    params
        Extra XGBoost parameters (override the defaults).
    """

    def __init__(self, seed: int = 0, rounds: int = 80, params: dict[str, Any] | None = None
                 ) -> None:
        self.seed = seed
        self.rounds = rounds
        self.params: dict[str, Any] = {
            "objective": "rank:pairwise",
            "lambdarank_pair_method": "mean",
            "lambdarank_num_pair_per_sample": 8,
            "max_depth": 6,
            "eta": 0.3,
            "min_child_weight": 1,
            "subsample": 1.0,
            "colsample_bytree": 1.0,
            "nthread": 1,
            "seed": seed,
            "verbosity": 0,
        }
        self.params.update(params or {})
        self._booster: Any = None

    @property
    def fitted(self) -> bool:
        return self._booster is not None

    def fit(self, features: np.ndarray, cycles: np.ndarray) -> RankModel:
        """Fit on measured settings: ``features`` ``(n, d)``, ``cycles`` ``(n,)`` (> 0).

        Raises
        ------
        ValueError
            Mismatched lengths, fewer than two settings, or non-positive cycles.
        """
        x = np.asarray(features, dtype=np.float64)
        c = np.asarray(cycles, dtype=np.float64)
        if x.ndim != 2 or len(x) != len(c):
            raise ValueError(f"fit: {len(x)} feature rows for {len(c)} cycle counts")
        if len(c) < 2:
            raise ValueError(f"fit: a ranking needs at least two measured settings, got {len(c)}")
        if np.any(c <= 0):
            raise ValueError("fit: cycles must be positive")
        xgb = _xgboost()
        data = xgb.DMatrix(x, label=c.min() / c)
        data.set_group([len(c)])
        self._booster = xgb.train(self.params, data, num_boost_round=self.rounds)
        return self

    def predict(self, features: np.ndarray) -> np.ndarray:
        """Scores of ``(n, d)`` features: higher means predicted faster.

        Raises
        ------
        RuntimeError
            The model was not fitted.
        """
        if self._booster is None:
            raise RuntimeError("predict: the model has not been fitted")
        x = np.asarray(features, dtype=np.float64)
        if not len(x):
            return np.zeros(0)
        xgb = _xgboost()
        return np.asarray(self._booster.predict(xgb.DMatrix(x)), dtype=np.float64)


def pairwise_accuracy(scores: np.ndarray, cycles: np.ndarray) -> float:
    """Share of pairs with different cycles that ``scores`` order correctly (higher score =
    fewer cycles); 0.5 is chance. Ties in score count half."""
    s = np.asarray(scores, dtype=np.float64)
    c = np.asarray(cycles, dtype=np.float64)
    i, j = np.triu_indices(len(c), k=1)
    keep = c[i] != c[j]
    i, j = i[keep], j[keep]
    if not len(i):
        raise ValueError("pairwise_accuracy: needs two settings with different cycles")
    faster_i = c[i] < c[j]
    right = np.where(s[i] == s[j], 0.5, (s[i] > s[j]) == faster_i)
    return float(np.mean(right))


def kendall_tau(scores: np.ndarray, cycles: np.ndarray) -> float:
    """Kendall's tau between ``scores`` and speed (``-cycles``) over the pairs with different
    cycles: 1 is a perfect ranking, 0 chance, -1 reversed."""
    return 2.0 * pairwise_accuracy(scores, cycles) - 1.0
