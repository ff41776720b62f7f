"""Built-in transformer encoders: BERT (``bert_tiny``, ``bert_base``) and ViT (``vit_tiny``).

The graphs are integer where the accelerator computes and float where the fallback does, with
explicit ``quantize`` / ``dequantize`` nodes at the edges between the two (every value of an
int8 tensor ``q`` stands for ``q * 2**-s``, ``s`` its scale shift):

- ``dense`` (Q, K, V, output, FFN and classifier projections), ``batch_matmul`` (``Q . K^T``
  and ``A . V`` per head), the residual ``add``, the ViT patch ``conv2d``: int8 in and out,
  int32 accumulation, on the accelerator;
- ``layer_norm``, ``softmax``, ``gelu``: float32 on the fallback, between a ``dequantize`` of
  their int8 input and a ``quantize`` of their output;
- ``reshape`` / ``transpose`` (splitting and joining heads), ``embedding``, ``concat``, ``take``:
  exact data movement on int8.

Building calibrates as the ResNet zoo does: float weights are drawn from a seeded generator
(``N(0, 1/K)`` for a layer of ``K`` inputs, so activations keep their spread), quantised per
tensor to int8 with the finest power-of-two scale that holds their largest value; a seeded
calibration input runs through the layers built so far (the reference executor, exactly), and
each layer's right shift puts the 99.9th percentile of its accumulators at 64..127, so nothing
vanishes or saturates; a float operator's output scale is the finest that holds its largest
calibration value. A residual add needs both operands at one scale: the projection that feeds
it is given the residual stream's scale. ``1/sqrt(head_dim)`` is folded into the scores'
scale when it is a power of two (head dimension 64, as in all three models), else applied by
a float ``mul`` before the softmax.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from compiler.graph.ir import Graph, GraphError, Node, TensorType
from compiler.graph.ops import OPS, infer_types
from compiler.graph.reference import run_node

__all__ = ["TRANSFORMERS", "BertConfig", "GraphBuilder", "VitConfig", "bert", "vit"]

_PERCENTILE = 99.9


@dataclass(frozen=True)
class BertConfig:
    """A BERT encoder's shape."""

    layers: int
    hidden: int
    heads: int
    ffn: int
    vocab: int = 30522
    max_positions: int = 512


@dataclass(frozen=True)
class VitConfig:
    """A ViT's shape."""

    layers: int
    hidden: int
    heads: int
    ffn: int
    image_size: int = 224
    patch: int = 16
    classes: int = 1000


#: Zoo names -> shapes.
TRANSFORMERS: dict[str, BertConfig | VitConfig] = {
    "bert_tiny": BertConfig(layers=2, hidden=128, heads=2, ffn=512),
    "bert_base": BertConfig(layers=12, hidden=768, heads=12, ffn=3072),
    "vit_tiny": VitConfig(layers=12, hidden=192, heads=3, ffn=768),
}


def _shift_for(amax: float) -> int:
    if not amax > 0 or not math.isfinite(amax):
        return 0
    return math.floor(math.log2(127.0 / amax))


def _pick_shift(acc: np.ndarray) -> int:
    p = float(np.percentile(np.abs(acc), _PERCENTILE)) if acc.size else 0.0
    shift = 0
    while shift < 31 and p / 2.0**shift >= 128.0:
        shift += 1
    return shift


class GraphBuilder:
    """Appends nodes to a graph while running the calibration input through them.

    With ``frozen`` (the :attr:`made` of an earlier builder), every weight, bias and shift is
    taken from it by node name instead of drawn and calibrated, and nothing is run: a graph of
    another shape with the same parameters and arithmetic (a decoder's prefill and its
    decoding steps).
    """

    def __init__(self, name: str, seed: int, frozen: dict[str, Any] | None = None) -> None:
        self.rng = np.random.default_rng([seed, 0])
        self.graph = Graph(name, [], [], {}, [])
        self.act: dict[str, np.ndarray] = {}
        self.scale: dict[str, int] = {}
        self.frozen = frozen
        self.made: dict[str, Any] = {}
        """Each weight, bias and calibrated shift, by ``node.what``: what ``frozen`` takes."""

    def once(self, key: str, make: Callable[[], Any]) -> Any:
        """``make()`` recorded under ``key``, or what ``frozen`` recorded there."""
        if self.frozen is None:
            self.made[key] = make()
            return self.made[key]
        if key not in self.frozen:
            raise GraphError(f"{self.graph.name}: no calibrated {key} (a graph of another "
                             "structure than the one calibrated)")
        return self.frozen[key]

    # ------------------------------------------------------------------ plumbing
    def input(self, name: str, value: np.ndarray, scale: int | None = None) -> str:
        self.graph.inputs.append(name)
        self.graph.values[name] = TensorType(value.shape, str(value.dtype),
                                             {4: "NCHW", 2: "NC"}.get(value.ndim, "ANY"))
        self.act[name] = value
        if scale is not None:
            self.scale[name] = scale
        return name

    def emit(self, name: str, op: str, inputs: list[str], attrs: dict[str, object],
             scale: int | None = None) -> str:
        node = Node(name, op, inputs, [name], attrs)
        (out_t,) = OPS[op].infer(node, [self.graph.values[v] for v in inputs], self.graph)
        self.graph.nodes.append(node)
        self.graph.values[name] = out_t
        if self.frozen is None:
            self.act[name] = run_node(node, [self.act[v] for v in inputs], self.graph)
        if scale is not None:
            self.scale[name] = scale
        return name

    def param(self, name: str, value: np.ndarray) -> str:
        self.graph.params[name] = value
        return name

    def _float_weights(self, shape: tuple[int, ...], fan_in: int) -> np.ndarray:
        return self.rng.standard_normal(shape) / math.sqrt(fan_in)

    @staticmethod
    def quantize_weights(w: np.ndarray) -> tuple[np.ndarray, int]:
        s = _shift_for(float(np.max(np.abs(w))))
        return np.clip(np.rint(w * 2.0**s), -127, 127).astype(np.int8), s

    # ------------------------------------------------------------------ integer layers
    def dense(self, name: str, x: str, out_features: int, out_scale: int | None = None,
              bias: bool = True, tied: tuple[str, int] | None = None) -> str:
        """An int8 dense layer, with a bias unless ``bias`` is False; its shift from the
        calibration accumulators, or the one that gives ``out_scale``. ``tied`` names the
        graph's int8 ``(out_features, in)`` param that is its weight, with that param's scale
        (a language model's head tied to its embedding table); else the weight is drawn."""
        k = self.graph.values[x].shape[-1]

        def make() -> tuple[np.ndarray | None, int, np.ndarray | None]:
            w, s_w = (None, tied[1]) if tied else self.quantize_weights(
                self._float_weights((out_features, k), k))
            return w, s_w, self.rng.standard_normal(out_features) * 0.02 if bias else None

        w, s_w, b = self.once(f"{name}.weight", make)
        weight = tied[0] if tied else self.param(f"{name}.weight", w)
        s_acc = self.scale[x] + s_w
        q = None if b is None else np.clip(np.rint(b * 2.0**s_acc), -(2**31),
                                           2**31 - 1).astype(np.int32)

        def calibrate() -> int:
            if out_scale is not None:
                return max(0, s_acc - out_scale)
            acc = self.act[x].astype(np.float64) @ self.graph.params[weight].astype(np.float64).T
            return _pick_shift(acc if q is None else acc + q)

        shift = self.once(f"{name}.shift", calibrate)
        return self.emit(name, "dense", [x], {
            "weight": weight, "bias": None if q is None else self.param(f"{name}.bias", q),
            "shift": shift, "relu": False}, scale=s_acc - shift)

    def batch_matmul(self, name: str, a: str, b: str, real_scale: float = 1.0) -> str:
        """``a @ b`` per group, times ``real_scale`` when that is a power of two (folded into
        the output's scale); the caller applies any other factor."""
        e = math.log2(real_scale)
        e = int(e) if e.is_integer() else 0
        shift = self.once(f"{name}.shift", lambda: _pick_shift(
            self.act[a].astype(np.float64) @ self.act[b].astype(np.float64)))
        return self.emit(name, "batch_matmul", [a, b], {"shift": shift, "relu": False},
                         scale=self.scale[a] + self.scale[b] - e - shift)

    def add(self, name: str, a: str, b: str) -> str:
        """The residual add of two int8 values at one scale."""
        if self.scale[a] != self.scale[b]:
            raise GraphError(f"{name}: operands at scales {self.scale[a]} and {self.scale[b]}")
        shift = self.once(f"{name}.shift", lambda: _pick_shift(
            self.act[a].astype(np.int64) + self.act[b].astype(np.int64)))
        return self.emit(name, "add", [a, b], {"shift": shift, "relu": False},
                         scale=self.scale[a] - shift)

    def move(self, name: str, op: str, inputs: list[str], **attrs: object) -> str:
        """Data movement (reshape, transpose, concat, take): the scale passes through."""
        return self.emit(name, op, inputs, dict(attrs), scale=self.scale[inputs[0]])

    # ------------------------------------------------------------------ float edges
    def dequantize(self, x: str) -> str:
        return self.emit(f"{x}.dequantize", "dequantize", [x], {"scale_shift": self.scale[x]})

    def quantize(self, name: str, x: str) -> str:
        s = self.once(f"{name}.shift", lambda: _shift_for(float(np.max(np.abs(self.act[x])))))
        return self.emit(name, "quantize", [x], {"scale_shift": s}, scale=s)

    def layer_norm(self, name: str, x: str) -> str:
        """dequantize -> layer_norm -> quantize."""
        h = self.graph.values[x].shape[-1]
        gamma, beta = self.once(f"{name}.ln", lambda: (
            (1.0 + 0.05 * self.rng.standard_normal(h)).astype(np.float32),
            (0.02 * self.rng.standard_normal(h)).astype(np.float32)))
        y = self.emit(f"{name}.ln", "layer_norm", [self.dequantize(x)], {
            "scale": self.param(f"{name}.gamma", gamma), "bias": self.param(f"{name}.beta", beta),
            "epsilon": 1e-12 if self.graph.name.startswith("bert") else 1e-6})
        return self.quantize(name, y)

    def gelu(self, name: str, x: str) -> str:
        return self.quantize(name, self.emit(f"{name}.gelu", "gelu", [self.dequantize(x)],
                                             {"form": "erf"}))

    def constant(self, name: str, value: np.ndarray, scale: int) -> str:
        return self.emit(name, "constant", [], {"value": self.param(name, value)}, scale=scale)

    # ------------------------------------------------------------------ blocks
    def attention(self, p: str, x: str, heads: int, residual_scale: int) -> str:
        """Multi-head self-attention of ``x`` (B, S, H); the output projection at
        ``residual_scale``."""
        b, s, h = self.graph.values[x].shape
        d = h // heads
        split = (b, s, heads, d)
        q = self.dense(f"{p}.query", x, h)
        k = self.dense(f"{p}.key", x, h)
        v = self.dense(f"{p}.value", x, h)
        qh = self.move(f"{p}.q_heads", "transpose",
                       [self.move(f"{p}.q_split", "reshape", [q], shape=split)],
                       perm=(0, 2, 1, 3))
        kt = self.move(f"{p}.k_heads_t", "transpose",
                       [self.move(f"{p}.k_split", "reshape", [k], shape=split)],
                       perm=(0, 2, 3, 1))
        vh = self.move(f"{p}.v_heads", "transpose",
                       [self.move(f"{p}.v_split", "reshape", [v], shape=split)],
                       perm=(0, 2, 1, 3))
        factor = 1.0 / math.sqrt(d)
        scores = self.batch_matmul(f"{p}.scores", qh, kt, factor)
        sf = self.dequantize(scores)
        if not math.log2(factor).is_integer():
            c = self.emit(f"{p}.scale", "constant", [], {
                "value": self.param(f"{p}.scale", np.array(factor, np.float32))})
            sf = self.emit(f"{p}.scaled", "mul", [sf, c], {})
        probs = self.quantize(f"{p}.probs", self.emit(f"{p}.softmax", "softmax", [sf],
                                                       {"axis": -1}))
        ctx = self.batch_matmul(f"{p}.context", probs, vh)
        joined = self.move(f"{p}.merge", "reshape",
                           [self.move(f"{p}.context_t", "transpose", [ctx], perm=(0, 2, 1, 3))],
                           shape=(b, s, h))
        return self.dense(f"{p}.output", joined, h, out_scale=residual_scale)

    def ffn(self, p: str, x: str, inner: int, residual_scale: int) -> str:
        h = self.graph.values[x].shape[-1]
        up = self.gelu(f"{p}.act", self.dense(f"{p}.intermediate", x, inner))
        return self.dense(f"{p}.output", up, h, out_scale=residual_scale)

    def finish(self, outputs: list[str], **attrs: object) -> Graph:
        self.graph.outputs = outputs
        self.graph.attrs.update(attrs)
        g = infer_types(self.graph)
        g.verify()
        return g


def bert(config: BertConfig, name: str = "bert", batch: int = 1, seq_len: int = 128,
         seed: int = 0) -> Graph:
    """A BERT encoder (post-LN, as the original) as an int8 / float graph with seeded weights.

    Parameters
    ----------
    config
        The shape (:data:`TRANSFORMERS`).
    batch, seq_len
        The ``input_ids`` input is int32 ``(batch, seq_len)``; ``seq_len`` up to
        ``config.max_positions``.
    seed
        Weights, biases and the calibration input.

    Returns
    -------
    Graph
        Output ``hidden``: the last layer's int8 ``(batch, seq_len, hidden)``; attrs
        ``input_range`` (token ids are ``0 .. vocab - 1``) and ``output_scale``.

    Raises
    ------
    GraphError
        ``batch`` or ``seq_len`` out of range, or heads that do not divide the hidden size.
    """
    for what, v, top in (("batch", batch, 1 << 16), ("seq_len", seq_len, config.max_positions)):
        if not isinstance(v, int | np.integer) or not 1 <= v <= top:
            raise GraphError(f"{name}: {what} must be an int in 1..{top}, got {v!r}")
    if config.hidden % config.heads:
        raise GraphError(f"{name}: {config.heads} heads do not divide hidden {config.hidden}")
    bld = GraphBuilder(name, seed)
    h = config.hidden
    word, s_t = bld.quantize_weights(bld.rng.standard_normal((config.vocab, h)))
    position = bld.rng.standard_normal((config.max_positions, h))
    token_type = bld.rng.standard_normal(h)  # every token of segment 0
    pos = np.clip(np.rint((position[:seq_len] + token_type) * 2.0**s_t), -127, 127)
    ids = np.random.default_rng([seed, 1]).integers(0, config.vocab, (batch, seq_len))
    x = bld.input("input_ids", ids.astype(np.int32))
    words = bld.emit("embeddings.word", "embedding", [x],
                     {"table": bld.param("embeddings.word.table", word)}, scale=s_t)
    posc = bld.constant("embeddings.position",
                        np.ascontiguousarray(np.broadcast_to(pos.astype(np.int8),
                                                             (batch, seq_len, h))), s_t)
    hid = bld.layer_norm("embeddings.norm", bld.add("embeddings.add", words, posc))
    for i in range(config.layers):
        p = f"layer{i}"
        att = bld.attention(f"{p}.attention", hid, config.heads, bld.scale[hid])
        hid = bld.layer_norm(f"{p}.attention.norm", bld.add(f"{p}.attention.residual", att,
                                                             hid))
        out = bld.ffn(f"{p}.ffn", hid, config.ffn, bld.scale[hid])
        hid = bld.layer_norm(f"{p}.ffn.norm", bld.add(f"{p}.ffn.residual", out, hid))
    return bld.finish([hid], input_range={"input_ids": [0, config.vocab]},
                      output_scale={hid: bld.scale[hid]})


def vit(config: VitConfig, name: str = "vit", batch: int = 1, seed: int = 0) -> Graph:
    """A ViT (pre-LN, DeiT's) as an int8 / float graph with seeded weights: the patch
    embedding as a strided conv2d, a class token and position embeddings, the encoder, a
    final layer norm and the classifier on the class token.

    Returns
    -------
    Graph
        Input ``data`` int8 ``(batch, 3, S, S)``; output ``logits`` int8 ``(batch, classes)``.

    Raises
    ------
    GraphError
        ``batch`` out of range, or a patch size that does not divide the image.
    """
    if not isinstance(batch, int | np.integer) or batch < 1:
        raise GraphError(f"{name}: batch must be an int >= 1, got {batch!r}")
    if config.image_size % config.patch:
        raise GraphError(f"{name}: patch {config.patch} does not divide {config.image_size}")
    bld = GraphBuilder(name, seed)
    h, size, patch = config.hidden, config.image_size, config.patch
    image = np.random.default_rng([seed, 1]).integers(-128, 128, (batch, 3, size, size))
    x = bld.input("data", image.astype(np.int8), scale=7)  # pixels in [-1, 1)
    fan_in = 3 * patch * patch
    w, s_w = bld.quantize_weights(bld._float_weights((h, 3, patch, patch), fan_in))
    acc_scale = bld.scale[x] + s_w
    from compiler.graph.reference import conv2d_acc

    shift = _pick_shift(conv2d_acc(bld.act[x], w, patch, 0))
    conv = bld.emit("patch_embed", "conv2d", [x], {
        "weight": bld.param("patch_embed.weight", w), "bias": None, "stride": (patch, patch),
        "padding": (0, 0), "shift": shift, "relu": False}, scale=acc_scale - shift)
    grid = size // patch
    tokens = bld.move("patch_embed.tokens", "transpose",
                      [bld.move("patch_embed.flat", "reshape", [conv],
                                shape=(batch, h, grid * grid))], perm=(0, 2, 1))
    s = bld.scale[tokens]
    q = lambda a: np.clip(np.rint(a * 2.0**s), -127, 127).astype(np.int8)  # noqa: E731
    cls = bld.constant("cls_token", np.ascontiguousarray(np.broadcast_to(
        q(bld.rng.standard_normal(h)), (batch, 1, h))), s)
    seq = bld.move("embed.concat", "concat", [cls, tokens], axis=1)
    pos = bld.constant("pos_embed", np.ascontiguousarray(np.broadcast_to(
        q(bld.rng.standard_normal((grid * grid + 1, h))), (batch, grid * grid + 1, h))), s)
    hid = bld.add("embed.add", seq, pos)
    for i in range(config.layers):
        p = f"block{i}"
        att = bld.attention(f"{p}.attn", bld.layer_norm(f"{p}.norm1", hid), config.heads,
                            bld.scale[hid])
        hid = bld.add(f"{p}.attn.residual", hid, att)
        out = bld.ffn(f"{p}.mlp", bld.layer_norm(f"{p}.norm2", hid), config.ffn,
                      bld.scale[hid])
        hid = bld.add(f"{p}.mlp.residual", hid, out)
    final = bld.layer_norm("norm", hid)
    cls_out = bld.emit("cls", "take", [final], {
        "indices": bld.param("cls.index", np.array(0, np.int64)), "axis": 1},
        scale=bld.scale[final])
    logits = bld.dense("head", cls_out, config.classes)
    return bld.finish([logits], output_scale={logits: bld.scale[logits]})
