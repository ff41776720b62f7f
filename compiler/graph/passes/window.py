"""Folding a convolution's window into its channels, for convolutions with few channels.

The GEMM core multiplies ``block_in`` input channels at a time, so a convolution with fewer
channels is zero-padded to the block: ResNet's stem (3 channels, 7x7, stride 2) multiplies
zeros in 5 of every 8 MACs on a 1x8x8 core and 13 of 16 on a 1x16x16 one. Gathering the
kernel's columns (or rows, or the whole window) into the channel dimension on the host turns
it into a convolution with ``C * KW`` (or ``C * KH``, or ``C * KH * KW``) channels and a
smaller kernel: the same MACs, less padding. ResNet-18's ``conv1`` on default, before::

    conv1 = conv2d(data) {weight=conv1.w, stride=(2, 2), padding=(3, 3), ...}
        # data int8[1, 3, 224, 224]; conv1.w (64, 3, 7, 7): 8 * 49 = 392 MACs per output value

and after (:func:`choose_fold` picks the whole window there)::

    data.window7x7 = fold_window(data) {kernel=(7, 7), stride=(2, 2), padding=(3, 3),
                                         target=cpu}  # conv1.fold
        # int8[1, 147, 112, 112]: channel (i * 7 + j) * 3 + c at (r, q) holds
        # data[c, 2r + i - 3, 2q + j - 3] (zero outside the image)
    conv1 = conv2d(data.window7x7) {weight=conv1.w.fold7x7, stride=(1, 1), padding=(0, 0), ...}
        # conv1.w.fold7x7 (64, 147, 1, 1): 152 MACs per output value

A fold of the columns only keeps the rows' stride and padding in the convolution:
``fold_window {kernel=(1, 7), stride=(1, 2), padding=(0, 3)}`` gives 21 channels at
224 x 112, and the convolution a 7x1 kernel with stride (2, 1) and padding (3, 0).

The rule (:func:`choose_fold`): the candidates fold the columns, the rows, or both (a dimension
whose kernel is 1 wide has nothing to fold); a candidate counts only if it has strictly fewer
padded MACs (:func:`padded_macs`: channels rounded up to ``block_in``) and the accelerator
still runs it; of those, the one with the fewest cycles estimated by the conv2d heuristic's
model (``compiler.ops.heuristic.estimate_conv2d_cycles`` under its default knobs, the model
that picks the tiling; it counts the larger input's DRAM traffic as well as the GEMMs) wins
if it beats the unfolded convolution's estimate, ties going to fewer padded MACs. A
convolution whose channels are a multiple of ``block_in`` never folds: its padded MACs cannot
fall. The gather runs on the fallback (host) kernels, where its input is a plain NCHW array;
the weights are rearranged once, here, as a new param.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from accel.machine.config import HwConfig
from compiler.errors import LoweringError
from compiler.graph.ir import Graph, Node, unique_name
from compiler.graph.ops import infer_types
from compiler.graph.passes.common import prune_params, require_targets
from compiler.graph.passes.partition import partition_report
from compiler.ops.conv2d import Conv2dWorkload
from compiler.ops.heuristic import default_conv2d_knobs, estimate_conv2d_cycles
from compiler.ops.registry import CONV2D

__all__ = ["Choose", "WindowFold", "choose_fold", "fold_conv_windows", "padded_macs"]


def padded_macs(wl: Conv2dWorkload, cfg: HwConfig) -> int:
    """MACs the GEMM core performs for ``wl`` on ``cfg``: batch, input and output channels
    rounded up to whole blocks (``Conv2dWorkload.macs`` counts them unpadded)."""
    nb, cib, cob = wl.blocks(cfg)
    return (nb * cfg.batch * cib * cfg.block_in * cob * cfg.block_out
            * wl.out_height * wl.out_width * wl.kernel_h * wl.kernel_w)


@dataclass(frozen=True)
class WindowFold:
    """Which of a convolution's kernel dimensions go into its channels."""

    rows: bool
    columns: bool

    def name(self, wl: Conv2dWorkload) -> str:
        """The gathered window, ``"1x7"`` for the columns of a 7x7 kernel."""
        kh, kw = self.window(wl)
        return f"{kh}x{kw}"

    def window(self, wl: Conv2dWorkload) -> tuple[int, int]:
        """The part of the kernel that the gather takes, (rows, columns)."""
        return (wl.kernel_h if self.rows else 1, wl.kernel_w if self.columns else 1)

    def gather_attrs(self, wl: Conv2dWorkload) -> dict[str, tuple[int, int]]:
        """The ``fold_window`` node's kernel, stride and padding."""
        return {"kernel": self.window(wl),
                "stride": (wl.stride_h if self.rows else 1, wl.stride_w if self.columns else 1),
                "padding": (wl.pad_h if self.rows else 0, wl.pad_w if self.columns else 0)}

    def workload(self, wl: Conv2dWorkload) -> Conv2dWorkload:
        """The convolution after the fold: a folded dimension has a 1-wide kernel, stride 1,
        no padding and the original output's size."""
        kh, kw = self.window(wl)
        return replace(
            wl, in_channels=wl.in_channels * kh * kw,
            height=wl.out_height if self.rows else wl.height,
            width=wl.out_width if self.columns else wl.width,
            kernel_h=wl.kernel_h // kh, kernel_w=wl.kernel_w // kw,
            stride_h=1 if self.rows else wl.stride_h, stride_w=1 if self.columns else wl.stride_w,
            pad_h=0 if self.rows else wl.pad_h, pad_w=0 if self.columns else wl.pad_w)

    def weight(self, w: np.ndarray) -> np.ndarray:
        """OIHW weights of the folded convolution: input channel ``(i * KW' + j) * C + c``
        holds the original kernel's row ``i``, column ``j`` of channel ``c`` (the order of
        ``fold_window``'s output channels), ``KW'`` the gathered window's width."""
        oc, c, kh, kw = w.shape
        fh, fw = (kh if self.rows else 1), (kw if self.columns else 1)
        split = w.transpose(0, 2, 3, 1).reshape(oc, fh, kh // fh, fw, kw // fw, c)
        return np.ascontiguousarray(
            split.transpose(0, 1, 3, 5, 2, 4).reshape(oc, fh * fw * c, kh // fh, kw // fw))


def _estimate(wl: Conv2dWorkload, cfg: HwConfig) -> float | None:
    """The heuristic's cycle estimate of ``wl`` under its default knobs; None if it does not
    compile on ``cfg``."""
    try:
        return estimate_conv2d_cycles(wl, default_conv2d_knobs(wl, cfg), cfg)
    except LoweringError:
        return None


def choose_fold(wl: Conv2dWorkload, cfg: HwConfig) -> WindowFold | None:
    """The fold of ``wl`` that the module docstring's rule picks on ``cfg``, or None (no
    candidate has fewer padded MACs and a lower estimate than the convolution as it is)."""
    padded = padded_macs(wl, cfg)
    candidates = [WindowFold(rows, columns)
                  for rows, columns in ((False, True), (True, False), (True, True))
                  if (wl.kernel_h > 1 or not rows) and (wl.kernel_w > 1 or not columns)]
    ranked = []
    for fold in candidates:
        folded = fold.workload(wl)
        if padded_macs(folded, cfg) >= padded or not CONV2D.supports(folded, cfg):
            continue
        estimate = _estimate(folded, cfg)
        if estimate is not None:
            ranked.append((estimate, padded_macs(folded, cfg), fold))
    if not ranked:
        return None
    estimate, _, best = min(ranked, key=lambda r: (r[0], r[1]))
    unfolded = _estimate(wl, cfg)
    return best if unfolded is None or estimate < unfolded else None


#: How :func:`fold_conv_windows` picks the fold of a convolution (None: leave it alone).
Choose = Callable[[Conv2dWorkload, HwConfig], WindowFold | None]


def fold_conv_windows(graph: Graph, cfg: HwConfig, choose: Choose = choose_fold) -> Graph:
    """Fold the window of every accelerator ``conv2d`` for which ``choose`` finds a fold into
    its channels: a ``fold_window`` node (target ``cpu``) before it, folded weights (param
    ``<weight>.fold<KH>x<KW>``), and the stride and padding of the folded dimensions moved to
    the gather (see the module docstring). Runs between ``partition`` and ``pack_layout``;
    recomputes ``attrs["partition"]``.

    Parameters
    ----------
    graph
        A partitioned graph (every node has ``attrs["target"]``), not yet packed; not modified.
    cfg
        The hardware: its block sizes and buffers decide the folds.
    choose
        ``choose(workload, cfg) -> WindowFold | None`` per accelerator conv2d: default
        :func:`choose_fold`, the module docstring's rule (a benchmark forces a fold with its
        own).

    Returns
    -------
    Graph
        The folded copy (the same graph, copied, where nothing folds).

    Raises
    ------
    GraphError
        A node without a target.
    """
    require_targets(graph, "fold_conv_windows")
    g = graph.copy()
    node_names = {n.name for n in g.nodes}
    nodes: list[Node] = []
    for n in g.nodes:
        if n.op != "conv2d" or n.attrs["target"] != "accel":
            nodes.append(n)
            continue
        wl = CONV2D.workload(n, g)
        fold = choose(wl, cfg) if isinstance(wl, Conv2dWorkload) else None  # not grouped
        if fold is None:
            nodes.append(n)
            continue
        suffix = fold.name(wl)
        gathered = unique_name(g.values, f"{n.inputs[0]}.window{suffix}")
        gather = unique_name(node_names, f"{n.name}.fold")
        node_names.add(gather)
        g.values[gathered] = g.values[n.inputs[0]]  # a placeholder: infer_types sets it
        nodes.append(Node(gather, "fold_window", [n.inputs[0]], [gathered],
                          {**fold.gather_attrs(wl), "target": "cpu"}))
        weight = unique_name(g.params, f"{n.attrs['weight']}.fold{suffix}")
        g.params[weight] = fold.weight(g.params[n.attrs["weight"]])
        folded = fold.workload(wl)
        n.inputs = [gathered]
        n.attrs.update(weight=weight, stride=(folded.stride_h, folded.stride_w),
                       padding=(folded.pad_h, folded.pad_w))
        nodes.append(n)
    g.nodes = nodes
    prune_params(g)
    g = infer_types(g)
    g.attrs["partition"] = partition_report(g)
    g.verify()
    return g
