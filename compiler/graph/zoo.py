"""Built-in model zoo: ResNet v1 (18, 34, 50), MobileNetV2 and EfficientNet-B0 as integer
graphs with seeded weights (the transformers: :mod:`compiler.graph.transformers`).

The graphs are integer from the start: int8 activations and weights, int32 biases, and a
per-layer ``shift`` calibrated while building, so that activations neither vanish nor saturate
on any input size:

1. weights are drawn from ``N(0, 32**2)``, rounded and clipped to [-127, 127], in a fixed order
   from ``numpy.random.default_rng([seed, 0])``, so the same seed gives the same weights whatever
   the batch or image size;
2. one calibration image of the requested size, uniform int8 from
   ``default_rng([seed, 1])``, runs through the layers built so far (exact integer arithmetic,
   :mod:`compiler.graph.reference`);
3. each layer's int32 bias is a seeded ``N(0, (0.1 * std(acc))**2)`` draw, and its shift is the
   smallest in 0..31 with ``p99.9(|acc + bias|) >> shift <= 127`` (after ReLU where the layer
   has one), which puts that percentile in 64..127: at most 0.1 % of the calibration values
   clip, and the bulk of them spans several bits;
4. residual adds and the classifier get their shifts the same way.

Structure (ResNet v1, He et al. 2015): 7x7/2 conv + 3x3/2 max-pool stem; basic blocks
(3x3, 3x3) for 18 and 34, bottlenecks (1x1, 3x3, 1x1, expansion 4) for 50 with the stride on the
first 1x1 conv as in v1; a 1x1 strided downsample conv when the shape changes; residual add with
ReLU; global average pool, flatten, dense. Each conv carries its bias, shift and ReLU (the
integer graph is born fused); the residual ``add`` carries ``relu=True``.
"""

from __future__ import annotations

import contextlib
import pickle

import numpy as np

from accel.machine.cache import cache_dir, code_version, write_atomic
from compiler.graph.ir import Graph, GraphError, Node, TensorType
from compiler.graph.ops import infer_types
from compiler.graph.reference import conv2d_acc, dense_acc, requantize, run_node
from compiler.graph.transformers import TRANSFORMERS, bert, vit

__all__ = ["IMAGE_MODELS", "ZOO", "efficientnet_b0", "load_zoo", "mobilenet_v2", "resnet"]

#: Blocks per stage and block kind of each depth.
_DEPTHS: dict[int, tuple[tuple[int, int, int, int], bool]] = {
    18: ((2, 2, 2, 2), False),
    34: ((3, 4, 6, 3), False),
    50: ((3, 4, 6, 3), True),
}

#: Zoo model names (the transformers: :mod:`compiler.graph.transformers`).
ZOO = ("resnet18", "resnet34", "resnet50", "mobilenet_v2", "efficientnet_b0", "bert_tiny",
       "bert_base", "vit_tiny")

#: The zoo models sized by ``image_size`` (the CNNs; ViT-tiny is 224x224).
IMAGE_MODELS = ("resnet18", "resnet34", "resnet50", "mobilenet_v2", "efficientnet_b0")

SILU_SCALE_SHIFT = 4
"""The fixed point of the values around EfficientNet's float SiLU and sigmoid gates: int8
``v`` stands for ``v / 2**4`` (-8 to 7.94), where the logistic function bends."""

_WEIGHT_STD = 32.0
_BIAS_FRACTION = 0.1
_PERCENTILE = 99.9


def _pick_shift(acc: np.ndarray, relu: bool) -> int:
    """Smallest shift in 0..31 that brings the 99.9th percentile of |acc| (after ReLU) to 127
    or below."""
    vals = np.maximum(acc, 0) if relu else np.abs(acc)
    p = float(np.percentile(vals, _PERCENTILE))
    shift = 0
    while shift < 31 and p / 2.0**shift >= 128.0:
        shift += 1
    return shift


def _check_sizes(model: str, batch: int, image_size: int, num_classes: int) -> None:
    """Raise GraphError unless the CNN's batch, image size and classes are ints >= 1."""
    for what, v in (("batch", batch), ("image_size", image_size), ("num_classes", num_classes)):
        if not isinstance(v, int | np.integer) or v < 1:
            raise GraphError(f"{model}: {what} must be an int >= 1, got {v!r}")


class _Builder:
    """Appends nodes to a graph while running the calibration image through them."""

    def __init__(self, name: str, seed: int, batch: int, image_size: int) -> None:
        self.rng = np.random.default_rng([seed, 0])
        sample = np.random.default_rng([seed, 1]).integers(
            -128, 128, size=(1, 3, image_size, image_size))
        self.act: dict[str, np.ndarray] = {"data": sample.astype(np.int8)}
        self.graph = Graph(name, ["data"], [], {
            "data": TensorType((batch, 3, image_size, image_size), "int8")}, [])

    def _weights(self, shape: tuple[int, ...]) -> np.ndarray:
        w = np.rint(self.rng.standard_normal(shape, dtype=np.float32) * _WEIGHT_STD)
        return np.clip(w, -127, 127).astype(np.int8)

    def _bias(self, acc: np.ndarray, channels: int) -> np.ndarray:
        draw = self.rng.standard_normal(channels)
        return np.rint(draw * _BIAS_FRACTION * max(float(acc.std()), 1.0)).astype(np.int32)

    def _add_node(self, node: Node, out: np.ndarray) -> str:
        self.graph.nodes.append(node)
        self.act[node.outputs[0]] = out
        return node.outputs[0]

    def conv(self, name: str, x: str, out_channels: int, kernel: int, stride: int,
             relu: bool, groups: int = 1) -> str:
        xa = self.act[x]
        w = self._weights((out_channels, xa.shape[1] // groups, kernel, kernel))
        pad = kernel // 2
        acc = conv2d_acc(xa, w, stride, pad, groups)
        bias = self._bias(acc, out_channels)
        shifted = acc + bias.astype(np.int64)[None, :, None, None]
        shift = _pick_shift(shifted, relu)
        self.graph.params[f"{name}.weight"] = w
        self.graph.params[f"{name}.bias"] = bias
        attrs = {"weight": f"{name}.weight", "bias": f"{name}.bias", "stride": (stride, stride),
                 "padding": (pad, pad), "shift": shift, "relu": relu}
        if groups != 1:
            attrs["groups"] = groups
        node = Node(name, "conv2d", [x], [name], attrs)
        return self._add_node(node, requantize(acc, bias, shift, relu))

    def emit(self, name: str, op: str, inputs: list[str], attrs: dict[str, object]) -> str:
        """A node whose calibration output the reference computes (the float operators)."""
        node = Node(name, op, inputs, [name], attrs)
        return self._add_node(node, run_node(node, [self.act[v] for v in inputs], self.graph))

    def silu(self, name: str, x: str) -> str:
        """``x * sigmoid(x)`` in float on the fallback, between a dequantize and a quantize
        at :data:`SILU_SCALE_SHIFT` (as torch exports SiLU: Sigmoid, then Mul)."""
        s = {"scale_shift": SILU_SCALE_SHIFT}
        xf = self.emit(f"{name}.dequantize", "dequantize", [x], s)
        gate = self.emit(f"{name}.sigmoid", "sigmoid", [xf], {})
        return self.emit(name, "quantize", [self.emit(f"{name}.mul", "mul", [xf, gate], {})],
                         s)

    def squeeze_excite(self, name: str, x: str, squeezed: int) -> str:
        """Squeeze-and-excitation: the global average, a 1x1 conv to ``squeezed`` channels
        and SiLU, a 1x1 conv back and a sigmoid gate that scales ``x``'s channels (float)."""
        xa = self.act[x]
        pooled = (xa.sum(axis=(2, 3), keepdims=True, dtype=np.int64)
                  // (xa.shape[2] * xa.shape[3])).astype(np.int8)
        pool = self._add_node(Node(f"{name}.pool", "global_avg_pool", [x], [f"{name}.pool"]),
                              pooled)
        y = self.silu(f"{name}.act", self.conv(f"{name}.fc1", pool, squeezed, 1, 1, False))
        y = self.conv(f"{name}.fc2", y, xa.shape[1], 1, 1, False)
        s = {"scale_shift": SILU_SCALE_SHIFT}
        gate = self.emit(f"{name}.gate", "sigmoid",
                         [self.emit(f"{y}.dequantize", "dequantize", [y], s)], {})
        xf = self.emit(f"{name}.dequantize", "dequantize", [x], s)
        return self.emit(name, "quantize", [self.emit(f"{name}.scale", "mul", [xf, gate], {})],
                         s)

    def add(self, name: str, a: str, b: str, relu: bool = True) -> str:
        acc = self.act[a].astype(np.int64) + self.act[b].astype(np.int64)
        shift = _pick_shift(acc, relu)
        node = Node(name, "add", [a, b], [name], {"shift": shift, "relu": relu})
        return self._add_node(node, requantize(acc, None, shift, relu))

    def max_pool(self, name: str, x: str) -> str:
        xa = self.act[x]
        padded = np.pad(xa, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-128)
        win = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))
        oh, ow = (xa.shape[2] - 1) // 2 + 1, (xa.shape[3] - 1) // 2 + 1
        out = win[:, :, ::2, ::2][:, :, :oh, :ow].max(axis=(4, 5))
        node = Node(name, "max_pool2d", [x], [name], {"kernel": (3, 3), "stride": (2, 2),
                                                       "padding": (1, 1)})
        return self._add_node(node, out)

    def head(self, x: str, num_classes: int) -> str:
        xa = self.act[x]
        pooled = (xa.sum(axis=(2, 3), keepdims=True, dtype=np.int64)
                  // (xa.shape[2] * xa.shape[3])).astype(np.int8)
        pool = self._add_node(Node("avgpool", "global_avg_pool", [x], ["avgpool"]), pooled)
        flat = self._add_node(Node("flatten", "flatten", [pool], ["flatten"]),
                              pooled.reshape(pooled.shape[0], -1))
        w = self._weights((num_classes, xa.shape[1]))
        acc = dense_acc(self.act[flat], w)
        bias = self._bias(acc, num_classes)
        shift = _pick_shift(acc + bias.astype(np.int64)[None, :], False)
        self.graph.params["fc.weight"] = w
        self.graph.params["fc.bias"] = bias
        node = Node("fc", "dense", [flat], ["fc"], {
            "weight": "fc.weight", "bias": "fc.bias", "shift": shift, "relu": False})
        return self._add_node(node, requantize(acc, bias, shift, False))


def resnet(depth: int, batch: int = 1, image_size: int = 224, num_classes: int = 1000,
           seed: int = 0) -> Graph:
    """ResNet v1 of ``depth`` 18, 34 or 50 as an integer graph with seeded weights.

    Parameters
    ----------
    depth
        18 or 34 (basic blocks) or 50 (bottleneck blocks).
    batch
        Images per run (N of the ``data`` input, int8 ``(N, 3, S, S)``).
    image_size
        Height and width S of the input, >= 1; the global average pool makes any size work.
    num_classes
        Outputs of the classifier (``fc``, int8 ``(N, num_classes)``).
    seed
        Seeds the weights, biases and the calibration image (same seed, same params).

    Returns
    -------
    Graph
        Typed and verified; nodes named like torchvision's modules (``conv1``,
        ``layer1.0.conv2``, ``layer2.0.downsample``, ``fc``).

    Raises
    ------
    GraphError
        Unsupported depth, or batch / image size / classes below 1.
    """
    if depth not in _DEPTHS:
        raise GraphError(f"unsupported ResNet depth {depth}; expected one of 18, 34, 50")
    _check_sizes(f"resnet{depth}", batch, image_size, num_classes)
    blocks, bottleneck = _DEPTHS[depth]
    b = _Builder(f"resnet{depth}", seed, batch, image_size)
    x = b.conv("conv1", "data", 64, 7, 2, relu=True)
    x = b.max_pool("maxpool", x)
    channels = 64
    for stage, count in enumerate(blocks):
        width = 64 * 2**stage
        for i in range(count):
            stride = 2 if stage > 0 and i == 0 else 1
            p = f"layer{stage + 1}.{i}"
            if bottleneck:
                y = b.conv(f"{p}.conv1", x, width, 1, stride, relu=True)
                y = b.conv(f"{p}.conv2", y, width, 3, 1, relu=True)
                y = b.conv(f"{p}.conv3", y, width * 4, 1, 1, relu=False)
                out_channels = width * 4
            else:
                y = b.conv(f"{p}.conv1", x, width, 3, stride, relu=True)
                y = b.conv(f"{p}.conv2", y, width, 3, 1, relu=False)
                out_channels = width
            shortcut = x
            if stride != 1 or channels != out_channels:
                shortcut = b.conv(f"{p}.downsample", x, out_channels, 1, stride, relu=False)
            x = b.add(f"{p}.add", y, shortcut)
            channels = out_channels
    out = b.head(x, num_classes)
    b.graph.outputs = [out]
    g = infer_types(b.graph)
    g.verify()
    return g


#: MobileNetV2's inverted residual stages (Sandler et al. 2018, table 2): expansion t,
#: output channels c, blocks n, first block's stride s.
_MOBILENET_V2 = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                 (6, 160, 3, 2), (6, 320, 1, 1))


def mobilenet_v2(batch: int = 1, image_size: int = 224, num_classes: int = 1000,
                 seed: int = 0) -> Graph:
    """MobileNetV2 (width 1.0) as an integer graph with seeded weights, built as
    :func:`resnet` is.

    A 3x3/2 stem of 32 channels; the inverted residual blocks of :data:`_MOBILENET_V2`, each
    a 1x1 expansion (but in the first stage), a 3x3 depthwise convolution (``groups`` equal
    to its channels) carrying the block's stride, and a linear 1x1 projection, with a residual
    add (no ReLU, as the paper's linear bottleneck) where the stride is 1 and the channels
    stay; a 1x1 convolution to 1280 channels; global average pool and the classifier. ReLU6
    is the integer graph's ReLU (int8 saturates at 127). Nodes are named after torchvision's
    modules: ``features.0``, ``features.<i>.expand`` / ``.dw`` / ``.project`` / ``.add``,
    ``features.18``, ``fc``.

    Raises
    ------
    GraphError
        Batch, image size or classes below 1.
    """
    _check_sizes("mobilenet_v2", batch, image_size, num_classes)
    b = _Builder("mobilenet_v2", seed, batch, image_size)
    x = b.conv("features.0", "data", 32, 3, 2, relu=True)
    channels, index = 32, 1
    for t, c, n, s in _MOBILENET_V2:
        for i in range(n):
            stride, p = s if i == 0 else 1, f"features.{index}"
            hidden = channels * t
            y = b.conv(f"{p}.expand", x, hidden, 1, 1, relu=True) if t != 1 else x
            y = b.conv(f"{p}.dw", y, hidden, 3, stride, relu=True, groups=hidden)
            y = b.conv(f"{p}.project", y, c, 1, 1, relu=False)
            x = b.add(f"{p}.add", y, x, relu=False) if stride == 1 and channels == c else y
            channels, index = c, index + 1
    x = b.conv(f"features.{index}", x, 1280, 1, 1, relu=True)
    out = b.head(x, num_classes)
    b.graph.outputs = [out]
    g = infer_types(b.graph)
    g.verify()
    return g


#: EfficientNet-B0's MBConv stages (Tan and Le 2019, table 1): expansion t, kernel k, output
#: channels c, blocks n, first block's stride s.
_EFFICIENTNET_B0 = ((1, 3, 16, 1, 1), (6, 3, 24, 2, 2), (6, 5, 40, 2, 2), (6, 3, 80, 3, 2),
                    (6, 5, 112, 3, 1), (6, 5, 192, 4, 2), (6, 3, 320, 1, 1))


def efficientnet_b0(batch: int = 1, image_size: int = 224, num_classes: int = 1000,
                    seed: int = 0) -> Graph:
    """EfficientNet-B0 as an integer graph with seeded weights, built as :func:`resnet` is,
    with SiLU and the squeeze-and-excitation gates in float on the fallback.

    A 3x3/2 stem of 32 channels and SiLU; the MBConv blocks of :data:`_EFFICIENTNET_B0`, each
    a 1x1 expansion and SiLU (but in the first stage), a ``k x k`` depthwise convolution
    carrying the block's stride and SiLU, squeeze-and-excitation to a quarter of the block's
    input channels, and a linear 1x1 projection, with a residual add where the stride is 1 and
    the channels stay; a 1x1 convolution to 1280 channels and SiLU; global average pool and
    the classifier. The convolutions, the adds and the classifier are integer (the
    accelerator's); each SiLU and gate is ``dequantize``, ``sigmoid`` and ``mul``,
    ``quantize`` at :data:`SILU_SCALE_SHIFT`. Nodes are named after torchvision's modules:
    ``features.0``, ``features.<stage>.<block>.expand`` / ``.dw`` / ``.se`` / ``.project`` /
    ``.add``, ``features.8``, ``fc``. Stochastic depth and dropout are training-only and left
    out.

    Raises
    ------
    GraphError
        Batch, image size or classes below 1.
    """
    _check_sizes("efficientnet_b0", batch, image_size, num_classes)
    b = _Builder("efficientnet_b0", seed, batch, image_size)
    x = b.silu("features.0.act", b.conv("features.0", "data", 32, 3, 2, relu=False))
    channels = 32
    for stage, (t, k, c, n, s) in enumerate(_EFFICIENTNET_B0, start=1):
        for i in range(n):
            stride, p = s if i == 0 else 1, f"features.{stage}.{i}"
            hidden = channels * t
            y = x
            if t != 1:
                y = b.silu(f"{p}.expand.act", b.conv(f"{p}.expand", x, hidden, 1, 1, False))
            y = b.silu(f"{p}.dw.act", b.conv(f"{p}.dw", y, hidden, k, stride, False,
                                             groups=hidden))
            y = b.squeeze_excite(f"{p}.se", y, max(1, channels // 4))
            y = b.conv(f"{p}.project", y, c, 1, 1, relu=False)
            x = b.add(f"{p}.add", y, x, relu=False) if stride == 1 and channels == c else y
            channels = c
    x = b.silu("features.8.act", b.conv("features.8", x, 1280, 1, 1, relu=False))
    out = b.head(x, num_classes)
    b.graph.outputs = [out]
    g = infer_types(b.graph)
    g.verify()
    return g


def load_zoo(name: str, batch: int = 1, image_size: int = 224, seq_len: int = 128) -> Graph:
    """A zoo model by name (seed 0): ``resnet18``, ``resnet34``, ``resnet50``,
    ``mobilenet_v2``, ``efficientnet_b0`` (1000 classes, ``image_size`` square inputs),
    ``bert_tiny``, ``bert_base`` (``seq_len`` tokens) or ``vit_tiny`` (224x224).

    Raises
    ------
    GraphError
        Unknown name (one line listing the known ones).
    """
    if name not in ZOO:
        raise GraphError(f"unknown model {name!r}; expected one of {', '.join(ZOO)}")
    # Building calibrates every layer's shift on a forward pass; keep the result on disk.
    folder = cache_dir("zoo")
    path = None
    if folder is not None:
        size = seq_len if name.startswith("bert") else image_size
        path = folder / (f"{name}-b{batch}-s{size}-{code_version('compiler')}.pickle")
        if path.exists():
            try:
                with path.open("rb") as f:
                    graph = pickle.load(f)
                if isinstance(graph, Graph):
                    return graph
            except (OSError, pickle.UnpicklingError, EOFError, AttributeError):
                pass  # a damaged entry is rebuilt and replaced
    if name.startswith("resnet"):
        graph = resnet(int(name[len("resnet"):]), batch=batch, image_size=image_size)
    elif name == "mobilenet_v2":
        graph = mobilenet_v2(batch=batch, image_size=image_size)
    elif name == "efficientnet_b0":
        graph = efficientnet_b0(batch=batch, image_size=image_size)
    elif name.startswith("bert"):
        graph = bert(TRANSFORMERS[name], name, batch=batch, seq_len=seq_len)  # type: ignore[arg-type]
    else:
        graph = vit(TRANSFORMERS[name], name, batch=batch)  # type: ignore[arg-type]
    if path is not None:
        with contextlib.suppress(OSError):
            write_atomic(path, pickle.dumps(graph, protocol=pickle.HIGHEST_PROTOCOL))
    return graph
