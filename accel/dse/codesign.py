"""Co-design search: given an FPGA part and a network, the machine that runs it fastest.

A candidate machine is a point of :data:`SPACE` (GEMM shape, buffer sizes, DRAM width and
requests in flight, the store and reset options) over a base config, at the part's clock
(:mod:`accel.machine.fpga`), with as many of its MACs in LUTs (``gemm.lut_macs``) as the
part's multiplier blocks are short of (unless ``lut_multipliers`` is off). Each is priced in
two steps, cheapest first:

1. **Area** (:mod:`accel.dse.area_model`, milliseconds): the predicted LUT positions,
   flip-flops, DSP and block-RAM cells held to the part's budget; a machine over it, or one the
   contract or the RTL reject, is not priced further.
2. **Cycles** (an *evaluation*): the network's graph is optimised and partitioned for the
   machine, and every accelerator layer is priced by its operator's model with the knobs the
   compiler would choose (:meth:`compiler.ops.accel_op.AccelOp.predict`: the conv2d heuristic's
   cycle model, the matmul model; an operator without a model at its roofline bound, and the
   report says which share of the cycles that is).

Before both, a machine that would leave on the CPU a layer the base config runs (an elementwise
add needs ``block_in == block_out``) is rejected: its cycles would not be the same network's.

:func:`search` walks the space by coordinate descent from the base config (and, with
``starts > 1``, from seeded random points too): over and over, one axis at a time (the GEMM
shape is one axis), every value of that axis with the others held, moving to the best, until
no axis improves; the best machine of all starts wins (fewest cycles, then fewest LUT
positions). From a machine over the budget (the base on a smaller part) the descent moves to
the neighbour nearest the budget until one fits. :func:`grid` prices every point, for tests
and for ``benchmarks/codesign_quality.py``, which compares the two.

The objective is latency at the part's clock (which for one part ranks as cycles do), energy
per inference, or their product (``edp``). Energy needs a third step for each machine that
passes the other two: every accelerator layer compiled with the compiler's knobs and its
program's actions counted (:meth:`Evaluator.energy`), priced by the config's energy table;
DRAM traffic, most of the energy, is the compiled program's own.
"""

from __future__ import annotations

import dataclasses
import itertools
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from accel.dse.area_model import SPACE as AREA_SPACE
from accel.dse.area_model import AreaEstimate, budget_use
from accel.dse.area_model import estimate as estimate_area
from accel.machine.config import ConfigError, HwConfig, load_config
from accel.machine.fpga import FpgaDevice

__all__ = ["OBJECTIVES", "SPACE", "CodesignError", "Evaluator", "Machine", "SearchResult",
           "axes_of", "grid", "search"]

SPACE: dict[str, tuple[Any, ...]] = {k: tuple(dict.fromkeys(v)) for k, v in AREA_SPACE.items()
                                     if k != "core.batch"}
"""The fields the search varies and their values: the area model's sampled space (the fit
holds there), batch 1 (the networks' batch)."""

OBJECTIVES = ("latency", "energy", "edp")
"""What the search minimises: latency at the part's clock (as cycles rank), the network's
energy per inference, or their product (energy-delay)."""

JOINT = (("core.block_in", "core.block_out"),)
"""Fields that move together as one axis (every combination of their values)."""


class CodesignError(ValueError):
    """A search that cannot run: an unknown field or value, a part without an area model, a
    budget nothing fits. The message is one line."""


@dataclass(frozen=True)
class Machine:
    """One priced point: its config, and either its predicted cycles or why it was rejected."""

    config: HwConfig
    point: tuple[tuple[str, Any], ...]
    cycles: float | None = None
    reason: str = ""
    area: AreaEstimate | None = None
    use: dict[str, tuple[int, int]] = field(default_factory=dict)
    modelled: float = 1.0
    """The share of the cycles priced by an operator model (the rest: roofline bounds)."""
    layers: dict[str, float] = field(default_factory=dict)
    energy_uj: float | None = None
    """The network's predicted energy per inference (:meth:`Evaluator.energy`), where the
    objective needed it or it was asked for."""
    score: float | None = None
    """The objective's value: cycles (latency), microjoules (energy) or their product with
    the latency in milliseconds (edp)."""

    @property
    def ok(self) -> bool:
        return self.cycles is not None

    @property
    def latency_ms(self) -> float:
        assert self.cycles is not None
        return self.cycles / (self.config.clock_mhz * 1e3)

    @property
    def over(self) -> float:
        """How far over the part's budget: the sum of each resource's excess share."""
        return sum(max(0.0, used / have - 1) for used, have in self.use.values())

    def key(self) -> tuple[int, float, float]:
        """The ranking: the lowest objective (:attr:`score`), then fewest LUT positions; then
        the machines over budget, nearest it first (so that a descent from one walks into the
        budget); then the others rejected."""
        if self.cycles is not None and self.area is not None:
            score = self.cycles if self.score is None else self.score
            return (0, score, self.area.lut_positions)
        if self.over > 0:
            return (1, self.over, 0)
        return (2, 0, 0)


class Evaluator:
    """Prices points of a space for one network on one part, each once.

    ``evaluations`` counts the points whose cycles were predicted (the costly step);
    ``area_checks`` every point priced at all.
    """

    def __init__(self, model: Any, device: FpgaDevice, base: HwConfig | str | None = None,
                 graph_options: dict[str, Any] | None = None,
                 lut_multipliers: bool = True, objective: str = "latency") -> None:
        from runtime.network import load_model

        if objective not in OBJECTIVES:
            raise CodesignError(f"objective {objective!r}: expected one of "
                                f"{', '.join(OBJECTIVES)}")
        self.objective = objective
        if device.family != "ecp5":
            raise CodesignError(
                f"{device.name}: no area model for the {device.family} family yet (the model "
                "is fitted to Yosys's ECP5 counts); a search needs one to hold machines to "
                "the part's budget")
        self.device = device
        self.lut_multipliers = lut_multipliers
        base_cfg = base if isinstance(base, HwConfig) else load_config(base)
        self.base = base_cfg.replace(clock_mhz=device.clock_mhz)
        self.graph = load_model(model, **(graph_options or {}))
        self.batch = int(self.graph.values[self.graph.inputs[0]].shape[0]) \
            if self.graph.inputs else 1
        self._optimised: dict[HwConfig, dict[str, tuple[Any, Any]]] = {}
        self.required = set(self._layers(self.base))
        self.evaluations = 0
        self.area_checks = 0
        self._seen: dict[tuple[tuple[str, Any], ...], Machine] = {}
        self._predicted: dict[tuple[str, Any, HwConfig], tuple[float, bool]] = {}
        self._actions: dict[tuple[str, Any, HwConfig], Any] = {}
        self._partitions: dict[HwConfig, set[str]] = {}

    def _layers(self, cfg: HwConfig) -> dict[str, tuple[Any, Any]]:
        """The accelerator layers of the network on ``cfg``: name -> (entry, workload), the
        graph optimised once per config (the partition check and the pricing both ask)."""
        from compiler.graph.passes import optimize
        from compiler.ops.registry import accel_op

        if cfg not in self._optimised:
            graph = optimize(self.graph, cfg)
            self._optimised[cfg] = {
                node.name: (accel_op(node.op), accel_op(node.op).workload(node, graph))
                for node in graph.nodes if node.attrs.get("target") == "accel"}
        return self._optimised[cfg]

    def _names_of(self, cfg: HwConfig) -> set[str]:
        """The names of :meth:`_layers`, remembered for every config that differs only in its
        DRAM (which the partition does not read; the stem fold does, so the layers themselves
        are not remembered): the check that a machine runs the base's layers comes before its
        area, so that a descent never settles where the network cannot run."""
        key = cfg.replace(dram=self.base.to_dict()["dram"])
        if key not in self._partitions:
            self._partitions[key] = set(self._layers(cfg))
        return self._partitions[key]

    def __call__(self, point: Sequence[tuple[str, Any]]) -> Machine:
        point = tuple(sorted(point))
        if point not in self._seen:
            self._seen[point] = self._price(point)
        return self._seen[point]

    @property
    def machines(self) -> list[Machine]:
        """Every point priced so far, in order of pricing."""
        return list(self._seen.values())

    def _with_lut_macs(self, cfg: HwConfig) -> HwConfig:
        """``cfg`` with the fewest LUT multipliers (``gemm.lut_macs``) that leave the part's
        multiplier blocks enough for the rest of the array and the ALU lanes (one each)."""
        macs = cfg.batch * cfg.block_in * cfg.block_out
        need = macs + cfg.batch * cfg.block_out - self.device.dsp.count
        return cfg.replace(**{"gemm.lut_macs": min(macs, max(0, need))})

    def _price(self, point: tuple[tuple[str, Any], ...]) -> Machine:
        from compiler.errors import LoweringError
        from hw.params import check_rtl_config

        self.area_checks += 1
        try:
            cfg = self.base.replace(**dict(point))
            if self.lut_multipliers:
                cfg = self._with_lut_macs(cfg)
            check_rtl_config(cfg)
        except (ConfigError, ValueError) as exc:
            return Machine(self.base, point, reason=f"invalid: {exc}")
        if cfg.dram.bytes_per_cycle > self.device.memory_bytes_per_cycle:
            return Machine(cfg, point, reason=f"DRAM {cfg.dram.bytes_per_cycle} bytes/cycle > "
                           f"the part's {self.device.memory_bytes_per_cycle}")
        missing = self.required - self._names_of(cfg)
        if missing:
            return Machine(cfg, point, reason=f"{len(missing)} layers the base runs would run "
                           f"on the CPU (first: {sorted(missing)[0]})")
        area = estimate_area(cfg, self.device.family)
        use = budget_use(area, self.device)
        over = [f"{k} {u} > {h}" for k, (u, h) in use.items() if u > h]
        if over:
            return Machine(cfg, point, reason="over budget: " + ", ".join(over), area=area,
                           use=use)
        self.evaluations += 1
        layers = self._layers(cfg)
        cycles: dict[str, float] = {}
        modelled = 0.0
        for name, (entry, wl) in layers.items():
            key = (entry.op, wl, cfg)
            if key not in self._predicted:
                try:
                    self._predicted[key] = entry.predict(wl, cfg)
                except LoweringError as exc:
                    return Machine(cfg, point, area=area, use=use,
                                   reason=f"{name} does not compile: {exc}")
            cycles[name], by_model = self._predicted[key]
            modelled += cycles[name] if by_model else 0.0
        total = sum(cycles.values())
        machine = Machine(cfg, point, cycles=total, area=area, use=use,
                          modelled=modelled / total if total else 1.0, layers=cycles)
        if self.objective == "latency":
            return machine
        try:
            energy = self.energy(machine)
        except LoweringError as exc:
            return Machine(cfg, point, area=area, use=use, reason=f"does not compile: {exc}")
        score = energy if self.objective == "energy" else energy * machine.latency_ms
        return dataclasses.replace(machine, energy_uj=energy, score=score)

    def with_energy(self, machine: Machine) -> Machine:
        """``machine`` with its :attr:`Machine.energy_uj` (priced now if the objective did not
        need it; left None for a machine not priced for cycles or one that does not
        compile)."""
        from compiler.errors import LoweringError

        if machine.energy_uj is not None or not machine.ok:
            return machine
        try:
            return dataclasses.replace(machine, energy_uj=self.energy(machine))
        except LoweringError:
            return machine

    def energy(self, machine: Machine) -> float:
        """The network's energy per inference on ``machine``, microjoules: each accelerator
        layer compiled as the compiler would (its knobs, cached on disk), its actions counted
        from the program (:meth:`ActionCounts.of_program`: exactly the simulator's), priced by
        the config's energy table over the layer's predicted cycles. Module activity, which
        only a simulation knows, is left out: 0.3 to 1% of a run's energy (ResNet-18 on
        default and tiny), so the figure is that much low (``tests/test_codesign.py``).

        Raises
        ------
        LoweringError
            A layer the compiler cannot build for the machine.
        """
        from accel.machine.actions import ActionCounts
        from accel.machine.energy import estimate

        assert machine.cycles is not None
        cfg, total = machine.config, 0.0
        for name, (entry, wl) in self._layers(cfg).items():
            key = (entry.op, wl, cfg)
            if key not in self._actions:
                program = entry.compile(wl, cfg).program
                self._actions[key] = ActionCounts.of_program(program.insns, cfg)
            total += estimate(self._actions[key], cfg, round(machine.layers[name]),
                              {}).total_uj
        return total / self.batch


@dataclass(frozen=True)
class SearchResult:
    """The machines a search priced, best first, and what it cost."""

    ranked: list[Machine]
    evaluations: int
    area_checks: int
    base: Machine

    @property
    def best(self) -> Machine:
        return self.ranked[0]


Axis = tuple[tuple[str, ...], list[tuple[Any, ...]]]


def axes_of(space: dict[str, Sequence[Any]]) -> list[Axis]:
    """The search's axes: each field alone, the :data:`JOINT` groups together."""
    axes: list[Axis] = []
    done: set[str] = set()
    for group in JOINT:
        if all(k in space for k in group):
            axes.append((group, list(itertools.product(*(space[k] for k in group)))))
            done.update(group)
    axes += [((k,), [(v,) for v in values]) for k, values in space.items() if k not in done]
    return axes


def check_space(space: dict[str, Sequence[Any]]) -> None:
    """Every field is one of :data:`SPACE`'s and every value one of its values (the area
    model is fitted there)."""
    for k, values in space.items():
        if k not in SPACE:
            raise CodesignError(f"space: {k}: not a field the search varies; expected one of "
                                f"{', '.join(SPACE)}")
        if not values:
            raise CodesignError(f"space: {k}: no values")
        bad = [v for v in values if v not in SPACE[k]]
        if bad:
            raise CodesignError(f"space: {k}: {bad[0]!r} is outside the area model's sampled "
                                f"values {list(SPACE[k])}")


def _base_point(ev: Evaluator, space: dict[str, Sequence[Any]]) -> dict[str, Any]:
    """The base config's value of each field, or the space's value nearest it."""
    data = ev.base.to_dict()
    out = {}
    for k, values in space.items():
        section, _, leaf = k.partition(".")
        have = data[section][leaf]
        out[k] = have if have in values else min(
            values, key=lambda v: abs(float(v) - float(have)))
    return out


def _finish(ev: Evaluator, base: Machine) -> SearchResult:
    ranked = sorted((m for m in ev.machines if m.ok), key=Machine.key)
    if not ranked:
        reasons = sorted({m.reason.split(":")[0] for m in ev.machines})
        raise CodesignError(f"no machine of the space fits {ev.device.name} and runs the "
                            f"network ({ev.area_checks} priced: {', '.join(reasons)})")
    return SearchResult(ranked, ev.evaluations, ev.area_checks, base)


def search(ev: Evaluator, space: dict[str, Sequence[Any]] | None = None, starts: int = 1,
           seed: int = 0, progress: Callable[[Machine, int], None] | None = None
           ) -> SearchResult:
    """Coordinate descent from the base config and ``starts - 1`` seeded random points (module
    docstring; ``benchmarks/codesign_quality.py`` measures one start against the grid).
    ``progress(best, evaluations)`` after each axis step.

    Raises
    ------
    CodesignError
        A bad space, or no point of it fits the part and runs the network.
    """
    space = dict(space or SPACE)
    check_space(space)
    axes = axes_of(space)
    rng = random.Random(seed)
    base_point = _base_point(ev, space)
    base = ev(tuple(base_point.items()))
    points = [base_point] + [{k: rng.choice(list(v)) for k, v in space.items()}
                             for _ in range(max(0, starts - 1))]
    for at in points:
        current = ev(tuple(at.items()))
        improved = True
        while improved:
            improved = False
            for keys, values in rng.sample(axes, len(axes)):
                tried = [ev(tuple({**at, **dict(zip(keys, v, strict=True))}.items()))
                         for v in values]
                best = min(tried, key=Machine.key)
                if best.key() < current.key():
                    current, at, improved = best, dict(best.point), True
                if progress is not None:
                    progress(current, ev.evaluations)
    return _finish(ev, base)


def grid(ev: Evaluator, space: dict[str, Sequence[Any]] | None = None) -> SearchResult:
    """Every point of ``space``, priced (the exhaustive answer :func:`search` is held to)."""
    space = dict(space or SPACE)
    check_space(space)
    base = ev(tuple(_base_point(ev, space).items()))
    for values in itertools.product(*space.values()):
        ev(tuple(zip(space, values, strict=True)))
    return _finish(ev, base)
