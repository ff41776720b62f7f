"""Graph passes: a flat, named list of ``Graph -> Graph`` functions, and the driver.

Each pass returns a new graph and never modifies its input (params arrays are shared and
treated as immutable). In the order :func:`optimize` runs them (:data:`PASSES`):

==================  ==========================================================================
fold_constants      evaluate nodes whose inputs are all constants
match_patterns      decomposed LayerNorm / GELU -> layer_norm / gelu; bias adds into dense
fold_batch_norm     fold a float batch_norm after a conv2d / dense into its weights and bias
quantize            float -> int8 with power-of-two scales calibrated on sample inputs
fuse                merge relu into conv2d / dense / add; report groups in attrs["fusion"]
partition           attrs["target"] = "accel" / "cpu" from a ``supports`` callable
fuse_residual       a residual add into the conv2d producing an operand (conv2d_add)
fold_conv_windows   gather a small-channel accelerator conv2d's window into its channels
pack_layout         blocked layouts between accelerator nodes, transforms at boundaries
plan_memory         static DRAM offsets by liveness, attrs["memory_plan"]
==================  ==========================================================================
"""

from __future__ import annotations

from collections.abc import Callable

from accel.machine.config import HwConfig
from compiler.graph.ir import Graph, GraphError
from compiler.graph.passes.common import needs_quantization
from compiler.graph.passes.fold import fold_batch_norm, fold_constants
from compiler.graph.passes.fuse import fuse
from compiler.graph.passes.layout import pack_layout
from compiler.graph.passes.match import match_patterns
from compiler.graph.passes.memory import plan_memory
from compiler.graph.passes.partition import Supports, default_supports, partition
from compiler.graph.passes.quantize import Calibration, quantize
from compiler.graph.passes.residual import fuse_residual
from compiler.graph.passes.window import fold_conv_windows

__all__ = [
    "PASSES",
    "Calibration",
    "Supports",
    "default_supports",
    "fold_batch_norm",
    "fold_constants",
    "fold_conv_windows",
    "fuse",
    "fuse_residual",
    "match_patterns",
    "optimize",
    "pack_layout",
    "partition",
    "plan_memory",
    "quantize",
]

#: Every pass, in pipeline order; ``PASSES[i].__name__`` is its name. quantize, partition,
#: fuse_residual, fold_conv_windows and pack_layout take a second argument (calibration,
#: supports, cfg, cfg, cfg).
PASSES: tuple[Callable[..., Graph], ...] = (
    fold_constants, match_patterns, fold_batch_norm, quantize, fuse, partition, fuse_residual,
    fold_conv_windows, pack_layout, plan_memory,
)


def optimize(graph: Graph, cfg: HwConfig, supports: Supports | None = None,
             calibration: Calibration | None = None) -> Graph:
    """Run the pass pipeline: fold constants, match decomposed patterns, fold batch norms,
    quantize (graphs whose accelerator operators are still float),
    fuse, partition, fuse residual adds, fold small-channel convolutions' windows, pack
    layouts, plan memory.

    Parameters
    ----------
    graph
        A typed graph (integer, like the zoo's, or float, like an ONNX import); not modified.
    cfg
        The hardware.
    supports
        ``supports(node, graph) -> bool`` for partitioning; default
        :func:`default_supports` of ``cfg``.
    calibration
        Sample inputs for :func:`quantize`; required when the graph is float.

    Returns
    -------
    Graph
        The optimized graph, verified, with ``attrs`` ``fusion``, ``partition``,
        ``memory_plan`` (and ``quantization`` for float inputs).

    Raises
    ------
    GraphError
        A float graph without calibration inputs, or any pass's error.
    """
    g = fold_batch_norm(match_patterns(fold_constants(graph)))
    if needs_quantization(g):
        if calibration is None:
            raise GraphError(f"{g.name}: a float graph needs calibration inputs to be "
                             "quantized (optimize(..., calibration={input: array}))")
        g = quantize(g, calibration)
    g = fuse(g)
    g = partition(g, supports if supports is not None else default_supports(cfg))
    g = fold_conv_windows(fuse_residual(g, cfg), cfg)
    g = plan_memory(pack_layout(g, cfg))
    g.verify()
    return g
