"""What an accelerator operator declares: one :class:`AccelOp` per graph operator it runs.

An entry ties a graph operator (``conv2d``, ``dense``, ``add``, ...) to everything the compiler,
the partitioner, the runtime and the tuner need of it, so that none of them branches on the
operator's name:

- **workload**: the operator's shapes and requantisation, read from a graph node; the
  workload's ``signature()`` keys compiled programs and tuning-log records;
- **partition rule** (``supports``): whether a config can run the workload (a cheap check,
  e.g. that the smallest tiling fits the buffers);
- **compute definition and schedule** (``schedule``), its knob dataclass, the heuristic's
  knobs and the knob space the tuners search;
- **operand layouts** (``inputs``): for each graph input, the DRAM region of the program it
  fills and the blocked layout it arrives in; ``constants`` packs the node's params (weights,
  bias tiles) once, at compile time;
- **roofline** (:data:`../shared/ROOFLINE.md`): the layer's MACs before channel padding and its
  compulsory DRAM bytes, from which :meth:`AccelOp.bound` computes the roofline bound.

The table of entries is :mod:`compiler.ops.registry`; this module only defines their shape, so
that an operator's own module can build its entry without importing the table.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from accel.machine.config import HwConfig
from compiler.graph.ir import Graph, Node
from compiler.schedule import Schedule

__all__ = ["AccelOp", "Block", "Operand", "roofline_bound", "roofline_efficiency"]


class Block(enum.Enum):
    """How the runtime lays out a graph input before it goes into the program's DRAM region."""

    IN = "in"
    """The activation layout blocked by the config's ``block_in`` (read into the inp buffer)."""
    OUT = "out"
    """The activation layout blocked by ``block_out`` (an accelerator output, passed on as is)."""
    CUSTOM = "custom"
    """The operand's own ``pack`` function lays out the logical array (e.g. into the weight
    buffer's blocked layout); the layout pass leaves the value plain."""


@dataclass(frozen=True)
class Operand:
    """One graph input of an accelerator operator.

    Attributes
    ----------
    region
        The DRAM region of the program that the input fills.
    block
        The layout it arrives in (:class:`Block`).
    image
        Whether a rank-4 value is an ``NCHW`` image (blocked ``NCHW{b}n{c}c``, channels on
        axis 1) rather than a channels-last tensor (blocked ``TC{b}n{c}c``: every axis but the
        last are rows).
    pack
        For :attr:`Block.CUSTOM`: ``pack(logical_array, workload, cfg) -> region array``.
    """

    region: str
    block: Block = Block.IN
    image: bool = True
    pack: Callable[[np.ndarray, Any, HwConfig], np.ndarray] | None = None


def roofline_bound(macs: int, dram_bytes: int, cfg: HwConfig) -> float:
    """The roofline bound in cycles: ``max(MACs / peak MACs per cycle, bytes / DRAM bytes per
    cycle)`` (ROOFLINE.md)."""
    return max(macs / cfg.peak_macs_per_cycle, dram_bytes / cfg.dram.bytes_per_cycle)


def roofline_efficiency(bound: float, cycles: int | None) -> float | None:
    """``bound / cycles`` (at most 1 on a correct simulator); None without cycles."""
    return None if not cycles else bound / cycles


@dataclass(frozen=True)
class AccelOp:
    """An operator the accelerator runs (see the module docstring).

    Attributes
    ----------
    op
        The graph operator's name.
    kind
        The program's name (``Program`` meta, tuning tasks): ``"conv2d"``, ``"matmul"``, ...
    workload_type, knobs_type
        The workload and knob dataclasses.
    workload
        ``workload(node, graph)``: the node's workload, from its shapes and attributes (int8 or
        float alike: MACs count either). Raises ``LoweringError`` when the node cannot be one
        (a rank the operator does not take, a shift out of range).
    supports
        ``supports(workload, cfg)``: can ``cfg`` run it (the partition rule)?
    schedule
        ``schedule(workload, knobs, cfg)``: the compute definition scheduled with ``knobs``.
    default_knobs
        ``default_knobs(workload, cfg)``: the heuristic's knobs (LoweringError if none fit).
    space
        ``space(workload, cfg)``: the knob space the tuners search.
    inputs
        One :class:`Operand` per graph input, in order.
    constants
        ``constants(workload, node, graph, cfg)``: DRAM arrays of the node's params by region
        name (packed weights, bias tiles), computed once at compile time.
    macs
        ``macs(workload)``: multiply-accumulates before channel padding.
    dram_bytes
        ``dram_bytes(workload)``: compulsory DRAM bytes (ROOFLINE.md).
    output_image
        Whether a rank-4 output is an ``NCHW`` image (see :attr:`Operand.image`).
    physical
        ``physical(workload, cfg)``: the workload the program is built for, when a view of
        the same DRAM bytes, or a zero-padded one, tiles better on ``cfg`` (default: the
        workload itself). MACs, bytes and the roofline bound stay the logical workload's.
    unpack
        ``unpack(out_region, physical, logical, cfg) -> array``: the output's logical values
        (in any shape of its size) from the program's ``out`` region, where ``physical``
        pads; None: the region is the output in its blocked layout.
    layers
        ``layers(workload) -> [(MACs, bytes), ...]``: for an operator that runs several of
        the network's layers fused (conv2d_add: a conv2d and a residual add), each layer's
        MACs and compulsory bytes; the roofline bound is the sum of theirs, so that fusing
        leaves a network's bound as ROOFLINE.md defines it. None: one layer, ``macs`` and
        ``dram_bytes``.
    estimate
        ``estimate(workload, knobs, cfg) -> cycles``: the heuristic's cycle model of the
        program ``knobs`` build (the co-design search ranks machines by it); None where the
        operator has none, and :meth:`predict` answers the roofline bound.
    """

    op: str
    kind: str
    workload_type: type | tuple[type, ...]
    knobs_type: type
    workload: Callable[[Node, Graph], Any]
    supports: Callable[[Any, HwConfig], bool]
    schedule: Callable[[Any, Any, HwConfig], Schedule]
    default_knobs: Callable[[Any, HwConfig], Any]
    space: Callable[[Any, HwConfig], Any]
    inputs: tuple[Operand, ...]
    constants: Callable[[Any, Node, Graph, HwConfig], dict[str, np.ndarray]]
    macs: Callable[[Any], int]
    dram_bytes: Callable[[Any], int]
    output_image: bool = True
    physical: Callable[[Any, HwConfig], Any] = lambda workload, cfg: workload
    unpack: Callable[[np.ndarray, Any, Any, HwConfig], np.ndarray] | None = None
    layers: Callable[[Any], list[tuple[int, int]]] | None = None
    estimate: Callable[[Any, Any, HwConfig], float] | None = None

    def bound(self, workload: Any, cfg: HwConfig) -> float:
        """The roofline bound of ``workload`` on ``cfg`` in cycles (:func:`roofline_bound`;
        summed over the network's layers it runs, where it fuses several)."""
        if self.layers is not None:
            return sum(roofline_bound(m, b, cfg) for m, b in self.layers(workload))
        return roofline_bound(self.macs(workload), self.dram_bytes(workload), cfg)

    def predict(self, workload: Any, cfg: HwConfig) -> tuple[float, bool]:
        """``(cycles, modelled)`` of ``workload`` compiled for ``cfg`` with the heuristic's
        knobs, without building it: the operator's :attr:`estimate` (``modelled`` True), else
        its roofline bound (False: a lower bound, not a model).

        Raises
        ------
        compiler.errors.LoweringError
            No knobs fit ``cfg``.
        """
        workload = self.physical(workload, cfg)
        knobs = self.default_knobs(workload, cfg)
        if self.estimate is None:
            return self.bound(workload, cfg), False
        return self.estimate(workload, knobs, cfg), True

    def program(self, workload: Any, cfg: HwConfig, knobs: Any) -> Any:
        """Build ``workload`` with ``knobs``, uncached (the tuner builds thousands of settings
        once each).

        Raises
        ------
        compiler.errors.LoweringError
            Knobs the schedule or a pass rejects.
        """
        from compiler.pipeline.build import build

        return build(self.schedule(workload, knobs, cfg), cfg, self.kind,
                     meta={"signature": workload.signature(), "knobs": knobs.to_dict()}).program

    def compile(self, workload: Any, cfg: HwConfig, knobs: Any = None,
                tuning_log: Any = None) -> Any:
        """The compiled operator (:class:`compiler.ops.compiled.CompiledOp`) of
        ``physical(workload, cfg)``, cached.

        Knobs: ``knobs`` when given; else the fastest logged for (``cfg.name``,
        ``workload.signature()``) in ``tuning_log`` when it has one; else the heuristic's.
        """
        from compiler.ops.compiled import compile_cached, logged_knobs

        workload = self.physical(workload, cfg)
        chosen = knobs or (logged_knobs(tuning_log, workload, cfg, self.knobs_type)
                           if tuning_log is not None else None) \
            or self.default_knobs(workload, cfg)
        return compile_cached(workload, chosen, cfg,
                              lambda: self.program(workload, cfg, chosen))
