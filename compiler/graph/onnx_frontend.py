"""ONNX front end: a float ONNX model becomes a float :class:`~compiler.graph.ir.Graph`.

Supported operators and how they map:

==================  =========================================================================
Conv                conv2d (2-D, symmetric pads, dilations 1, any group); W, B -> params
BatchNormalization  batch_norm (inference form); scale, B, mean, var -> params
Relu, Add           relu, add (an operand that is a constant becomes a ``constant`` node)
MaxPool             max_pool2d (symmetric pads, ceil_mode 0 or 1, dilations 1)
AveragePool         avg_pool2d (count_include_pad=1, or no padding)
GlobalAveragePool   global_avg_pool
Flatten             flatten (axis 1)
Gemm                dense (transA 0; alpha and beta folded into the params)
MatMul              dense (any rank) when the right operand is a constant (K, N) matrix; else
                    batch_matmul (same leading axes)
Sub, Mul, Div, Pow  sub, mul, div, pow (float, broadcasting; constants become constant nodes)
Sqrt, Erf, Tanh     sqrt, erf, tanh
Sigmoid             sigmoid (float; SiLU as torch exports it is Sigmoid then Mul)
Clip                clip (constant bounds; Clip(0, hi), ReLU6, as relu then clip of hi)
HardSigmoid         mul, add of constants, clip(0, 1) (float)
HardSwish           x * HardSigmoid(x) with alpha 1/6, beta 1/2 (float)
Softmax             softmax (axis)
LayerNormalization  layer_norm (last axis; Scale, B -> params)
ReduceMean/Sum/Max  reduce_mean / reduce_sum / reduce_max (axes as attribute or input)
Transpose           transpose (perm)
Reshape             reshape (the target shape a constant; 0 and -1 resolved)
Unsqueeze, Squeeze  reshape
Gather              embedding (constant table, indices an input) or take (constant indices)
Concat, Slice       concat; slice (one slice node per sliced axis)
Split               one slice node per output
Cast                nothing, from float to float
Where               where (a constant condition)
Constant, Identity  resolved at import (constants; aliases)
==================  =========================================================================

Nodes whose inputs are all constants are evaluated at import (numpy), and ``Shape`` of a value
gives its static shape, so the Shape / Gather / Unsqueeze / Concat chains that frameworks export
to compute reshape targets fold away. The decomposed LayerNorm and GELU patterns become
``layer_norm`` and ``gelu`` nodes in :func:`compiler.graph.passes.match.match_patterns`.

Weights, biases and batch-norm statistics must be constants (initializers, ``Constant`` nodes,
or ``Identity`` of those); they become params named after their ONNX tensors. A symbolic batch
dimension of a graph input takes the ``batch`` argument.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from compiler.graph.ir import Graph, GraphError, Node, TensorType, unique_name
from compiler.graph.ops import OPS, infer_types

__all__ = ["SUPPORTED_OPS", "import_onnx"]

SUPPORTED_OPS = ("Conv", "BatchNormalization", "Relu", "Add", "MaxPool", "AveragePool",
                 "GlobalAveragePool", "Flatten", "Gemm", "MatMul", "Reshape", "Constant",
                 "Identity", "Sub", "Mul", "Div", "Pow", "Sqrt", "Erf", "Tanh", "Sigmoid",
                 "Softmax", "Clip", "HardSigmoid", "HardSwish",
                 "LayerNormalization", "ReduceMean", "ReduceSum", "ReduceMax", "Transpose",
                 "Unsqueeze", "Squeeze", "Gather", "Concat", "Slice", "Split", "Cast", "Where",
                 "Shape", "Equal", "ConstantOfShape", "Range", "Expand", "Not", "Neg")

#: Evaluated at import when every input is a constant (shape arithmetic); a non-constant
#: input makes them an error naming the node, except where SUPPORTED_OPS maps them.
_FOLD_ONLY = ("Shape", "Equal", "ConstantOfShape", "Range", "Expand", "Not", "Neg")

_ONNX_DTYPES = {1: "float32", 6: "int32", 7: "int64", 9: "bool", 11: "float64"}


def _load(path_or_model: Any) -> tuple[Any, str]:
    """The ModelProto and a name for messages."""
    try:
        import onnx
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise GraphError("importing ONNX models needs the 'onnx' package (pip install onnx)") \
            from e
    if isinstance(path_or_model, onnx.ModelProto):
        model, where = path_or_model, path_or_model.graph.name or "<model>"
    else:
        where = os.fspath(path_or_model)
        if not Path(where).is_file():
            raise GraphError(f"{where}: no such file")
        try:
            model = onnx.load(where)
        except Exception as e:
            raise GraphError(f"{where}: not a valid ONNX model: {_reason(e)}") from e
    try:
        onnx.checker.check_model(model)
    except Exception as e:
        raise GraphError(f"{where}: not a valid ONNX model: {_reason(e)}") from e
    return model, where


def _reason(e: Exception) -> str:
    text = " ".join(str(e).split()) or type(e).__name__
    return text if len(text) <= 200 else text[:197] + "..."


def _evaluate(op: str, xs: list[np.ndarray], a: dict[str, Any], outputs: int
              ) -> list[np.ndarray] | None:
    """``op`` on constant arrays with numpy (shape arithmetic and constant subgraphs), or None
    for an operator this does not evaluate."""
    def axes_of(default: Any) -> list[int]:
        if "axes" in a:
            return [int(x) for x in a["axes"]]
        return [int(x) for x in xs[1].reshape(-1)] if len(xs) > 1 else list(default)

    binary = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Equal": np.equal,
              "Pow": np.power}
    if op in binary:
        return [binary[op](xs[0], xs[1])]
    if op == "Div":
        kind = np.result_type(xs[0], xs[1]).kind
        return [xs[0] // xs[1] if kind in "iu" else xs[0] / xs[1]]
    if op == "Gather":
        return [np.take(xs[0], xs[1].astype(np.int64), axis=int(a.get("axis", 0)))]
    if op == "Concat":
        return [np.concatenate(xs, axis=int(a["axis"]))]
    if op == "Unsqueeze":
        out = xs[0]
        for ax in sorted(int(x) % (out.ndim + len(axes_of([]))) for x in axes_of([])):
            out = np.expand_dims(out, ax)
        return [out]
    if op == "Squeeze":
        axes = axes_of([i for i, d in enumerate(xs[0].shape) if d == 1])
        return [np.squeeze(xs[0], axis=tuple(axes))]
    if op == "Cast":
        return [xs[0].astype(_ONNX_DTYPES[int(a["to"])])]
    if op == "Where":
        return [np.where(xs[0], xs[1], xs[2])]
    if op == "Reshape":
        shape = [xs[0].shape[i] if d == 0 else int(d) for i, d in enumerate(xs[1])]
        return [xs[0].reshape(shape)]
    if op == "ConstantOfShape":
        from onnx import numpy_helper

        fill = numpy_helper.to_array(a["value"]) if "value" in a else np.zeros(1, np.float32)
        return [np.full(tuple(int(d) for d in xs[0]), fill.reshape(-1)[0], fill.dtype)]
    if op == "Range":
        return [np.arange(xs[0], xs[1], xs[2])]
    if op == "Transpose":
        return [np.transpose(xs[0], a.get("perm"))]
    if op == "Slice":
        index = [slice(None)] * xs[0].ndim
        axes = xs[3] if len(xs) > 3 else range(len(xs[1]))
        steps = xs[4] if len(xs) > 4 else [1] * len(xs[1])
        for s0, e0, ax, st0 in zip(xs[1], xs[2], axes, steps, strict=True):
            index[int(ax)] = slice(int(s0), int(e0), int(st0))
        return [xs[0][tuple(index)]]
    if op == "Expand":
        return [xs[0] * np.ones(tuple(int(d) for d in xs[1]), xs[0].dtype)]
    if op == "Not":
        return [np.logical_not(xs[0])]
    if op == "Neg":
        return [np.negative(xs[0])]
    if op == "Sqrt":
        return [np.sqrt(xs[0])]
    return None


class _Importer:
    def __init__(self, model: Any, where: str, batch: int) -> None:
        from onnx import numpy_helper

        self.numpy_helper = numpy_helper
        self.where = where
        self.batch = batch
        gm = model.graph
        self.onnx_graph = gm
        self.consts: dict[str, np.ndarray] = {
            t.name: numpy_helper.to_array(t) for t in gm.initializer}
        self.alias: dict[str, str] = {}
        name = gm.name or Path(where).stem or "onnx"
        self.graph = Graph(name, [], [], {}, [])
        self.const_nodes: set[str] = set()
        self.node_names: set[str] = set()
        self.types: dict[str, TensorType] = {}

    # ------------------------------------------------------------------ helpers
    @staticmethod
    def label(node: Any) -> str:
        """The node's name, or its first output's name when it has none."""
        return str(node.name or (node.output[0] if node.output else node.op_type))

    def fail(self, node: Any, what: str) -> GraphError:
        return GraphError(f"{self.where}: node {self.label(node)!r} ({node.op_type}): {what}")

    def resolve(self, v: str) -> str:
        while v in self.alias:
            v = self.alias[v]
        return v

    def const(self, node: Any, v: str, what: str) -> np.ndarray:
        v = self.resolve(v)
        if v not in self.consts:
            raise self.fail(node, f"{what} {v!r} must be a constant (initializer or Constant)")
        return self.consts[v]

    def param(self, v: str, value: np.ndarray) -> str:
        name = self.resolve(v)
        if name not in self.graph.params:
            self.graph.params[name] = np.ascontiguousarray(value.astype(np.float32))
        return name

    def data(self, v: str) -> str:
        """A value input: a constant becomes a ``constant`` node (once)."""
        v = self.resolve(v)
        if v in self.consts and v not in self.const_nodes:
            value = np.ascontiguousarray(self.consts[v].astype(np.float32))
            self.graph.params[v] = value
            self.graph.nodes.append(Node(unique_name(self.node_names, v), "constant", [],
                                         [v], {"value": v}))
            self.node_names.add(self.graph.nodes[-1].name)
            self.const_nodes.add(v)
            self.types[v] = TensorType(value.shape, "float32")
        return v

    def type_of(self, node: Any, v: str) -> TensorType:
        v = self.resolve(v)
        if v in self.consts:
            c = self.consts[v]
            return TensorType(tuple(int(d) for d in c.shape), str(c.dtype))
        if v not in self.types:
            raise self.fail(node, f"input {v!r} is produced by nothing this importer knows")
        return self.types[v]

    def ints(self, node: Any, v: str, what: str) -> list[int]:
        return [int(i) for i in np.asarray(self.const(node, v, what)).reshape(-1)]

    @staticmethod
    def attrs(node: Any) -> dict[str, Any]:
        from onnx import helper

        return {a.name: helper.get_attribute_value(a) for a in node.attribute}

    def emit(self, node: Any, op: str, inputs: list[str], attrs: dict[str, Any],
             output: str | None = None) -> str:
        name = unique_name(self.node_names, self.label(node))
        self.node_names.add(name)
        out = output or node.output[0]
        n = Node(name, op, [self.data(v) for v in inputs], [out], attrs)
        try:
            (t,) = OPS[op].infer(n, [self.types[v] for v in n.inputs], self.graph)
        except GraphError as e:
            raise self.fail(node, str(e).split(": ", 2)[-1]) from None
        self.graph.nodes.append(n)
        self.types[out] = t
        return out

    def spatial(self, node: Any, a: dict[str, Any], what: str) -> tuple[tuple[int, int],
                                                                        tuple[int, int]]:
        """(stride, padding) of a 2-D window operator, rejecting what we do not support."""
        auto_pad = a.get("auto_pad", b"NOTSET")
        auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad
        if auto_pad not in ("NOTSET", "VALID"):
            raise self.fail(node, f"auto_pad={auto_pad} is not supported")
        pads = list(a.get("pads", [0, 0, 0, 0]))
        if len(pads) != 4 or pads[0] != pads[2] or pads[1] != pads[3]:
            raise self.fail(node, f"{what}: only symmetric 2-D pads are supported, got {pads}")
        if any(d != 1 for d in a.get("dilations", [1, 1])):
            raise self.fail(node, f"dilations {list(a['dilations'])} are not supported")
        if a.get("ceil_mode", 0) and node.op_type != "MaxPool":
            raise self.fail(node, "ceil_mode=1 is supported on MaxPool only")
        strides = list(a.get("strides", [1, 1]))
        return (int(strides[0]), int(strides[1])), (int(pads[0]), int(pads[1]))

    # ------------------------------------------------------------------ operators
    def op_conv(self, node: Any, a: dict[str, Any]) -> None:
        w = self.const(node, node.input[1], "weight")
        if w.ndim != 4:
            raise self.fail(node, f"only 2-D convolutions are supported, weight is {w.shape}")
        group = int(a.get("group", 1))
        if group < 1 or w.shape[0] % group:
            raise self.fail(node, f"group={group} does not divide the weight's {w.shape[0]} "
                            "output channels")
        stride, padding = self.spatial(node, a, "Conv")
        attrs: dict[str, Any] = {"weight": self.param(node.input[1], w), "bias": None}
        if len(node.input) > 2 and node.input[2]:
            attrs["bias"] = self.param(node.input[2], self.const(node, node.input[2], "bias"))
        attrs.update(stride=stride, padding=padding)
        if group != 1:  # grouped and depthwise convolutions
            attrs["groups"] = group
        self.emit(node, "conv2d", [node.input[0]], attrs)

    def op_batchnormalization(self, node: Any, a: dict[str, Any]) -> None:
        if a.get("training_mode", 0):
            raise self.fail(node, "training_mode=1 is not supported")
        names = ("scale", "bias", "mean", "var")
        attrs: dict[str, Any] = {k: self.param(v, self.const(node, v, k))
                                 for k, v in zip(names, node.input[1:5], strict=True)}
        attrs["epsilon"] = float(str(np.float32(a.get("epsilon", 1e-5))))  # 1e-05, not 9.99e-06
        self.emit(node, "batch_norm", [node.input[0]], attrs)

    def op_relu(self, node: Any, a: dict[str, Any]) -> None:
        self.emit(node, "relu", [node.input[0]], {})

    def op_clip(self, node: Any, a: dict[str, Any]) -> None:
        """Clip with constant bounds (inputs from opset 11, attributes before); Clip(0, hi),
        ReLU6 as torch exports it, is a ``relu`` (which fuses into the layer before it) and a
        ``clip`` of the upper bound."""
        bounds: list[float | None] = [a.get("min"), a.get("max")]
        for i in (1, 2):
            if len(node.input) > i and node.input[i]:
                v = self.const(node, node.input[i], ("min", "max")[i - 1])
                if v.size != 1:
                    raise self.fail(node, f"{('min', 'max')[i - 1]} must be one number")
                bounds[i - 1] = float(v.reshape(()))
        lo, hi = (None if b is None else float(b) for b in bounds)
        x = node.input[0]
        if lo == 0.0:
            x = self.emit(node, "relu", [x], {}, output=unique_name(self.types,
                                                                    f"{node.output[0]}.relu"))
            lo = None
        self.emit(node, "clip", [x], {"min": lo, "max": hi})

    def _scalar(self, node: Any, what: str, value: float) -> str:
        """A float32 scalar constant for ``node`` (a constant node on first use)."""
        name = unique_name(self.consts, f"{node.output[0]}.{what}")
        self.consts[name] = np.array(value, np.float32)
        return name

    def _hard_sigmoid(self, node: Any, x: str, alpha: float, beta: float, out: str) -> str:
        scaled = self.emit(node, "mul", [x, self._scalar(node, "alpha", alpha)], {},
                           output=unique_name(self.types, f"{out}.scaled"))
        shifted = self.emit(node, "add", [scaled, self._scalar(node, "beta", beta)], {},
                            output=unique_name(self.types, f"{out}.shifted"))
        return self.emit(node, "clip", [shifted], {"min": 0.0, "max": 1.0}, output=out)

    def op_hardsigmoid(self, node: Any, a: dict[str, Any]) -> None:
        """``clip(alpha x + beta, 0, 1)``, float on the fallback."""
        self._hard_sigmoid(node, node.input[0], float(a.get("alpha", 0.2)),
                           float(a.get("beta", 0.5)), node.output[0])

    def op_hardswish(self, node: Any, a: dict[str, Any]) -> None:
        """``x * hard_sigmoid(x)`` with alpha 1/6 and beta 1/2, float on the fallback."""
        gate = self._hard_sigmoid(node, node.input[0], 1.0 / 6.0, 0.5,
                                  unique_name(self.types, f"{node.output[0]}.gate"))
        self.emit(node, "mul", [node.input[0], gate], {})

    def op_add(self, node: Any, a: dict[str, Any]) -> None:
        self.emit(node, "add", [node.input[0], node.input[1]], {})

    def op_maxpool(self, node: Any, a: dict[str, Any]) -> None:
        if a.get("storage_order", 0) or (len(node.output) > 1 and node.output[1]):
            raise self.fail(node, "the Indices output is not supported")
        stride, padding = self.spatial(node, a, "MaxPool")
        kernel = tuple(int(k) for k in a["kernel_shape"])
        attrs: dict[str, Any] = {"kernel": kernel, "stride": stride, "padding": padding}
        if a.get("ceil_mode", 0):
            attrs["ceil_mode"] = True
        self.emit(node, "max_pool2d", [node.input[0]], attrs)

    def op_averagepool(self, node: Any, a: dict[str, Any]) -> None:
        stride, padding = self.spatial(node, a, "AveragePool")
        if padding != (0, 0) and not a.get("count_include_pad", 0):
            raise self.fail(node, "padding with count_include_pad=0 is not supported")
        kernel = tuple(int(k) for k in a["kernel_shape"])
        self.emit(node, "avg_pool2d", [node.input[0]],
                  {"kernel": kernel, "stride": stride, "padding": padding})

    def op_globalaveragepool(self, node: Any, a: dict[str, Any]) -> None:
        self.emit(node, "global_avg_pool", [node.input[0]], {})

    def op_flatten(self, node: Any, a: dict[str, Any]) -> None:
        if a.get("axis", 1) != 1:
            raise self.fail(node, f"axis={a['axis']} is not supported (only 1)")
        self.emit(node, "flatten", [node.input[0]], {})

    def op_reshape(self, node: Any, a: dict[str, Any]) -> None:
        src = self.type_of(node, node.input[0])
        shape = self.resolve_shape(node, src, self.ints(node, node.input[1], "shape"))
        if len(src.shape) > 2 and len(shape) == 2 and shape[0] == src.shape[0]:
            self.emit(node, "flatten", [node.input[0]], {})  # a CNN's (N, -1) before its head
            return
        self.emit(node, "reshape", [node.input[0]], {"shape": shape})

    def resolve_shape(self, node: Any, src: TensorType, shape: list[int]) -> tuple[int, ...]:
        out = [src.shape[i] if d == 0 else d for i, d in enumerate(shape)]
        if out.count(-1) == 1:
            known = int(np.prod([d for d in out if d != -1], dtype=np.int64))
            out[out.index(-1)] = src.size // max(known, 1)
        if min(out, default=1) < 1 or int(np.prod(out, dtype=np.int64)) != src.size:
            raise self.fail(node, f"cannot reshape {src} to {shape}")
        return tuple(out)

    def op_unsqueeze(self, node: Any, a: dict[str, Any]) -> None:
        src = self.type_of(node, node.input[0])
        axes = a.get("axes") or self.ints(node, node.input[1], "axes")
        shape = list(src.shape)
        for ax in sorted(int(x) % (len(shape) + len(axes)) for x in axes):
            shape.insert(ax, 1)
        self.emit(node, "reshape", [node.input[0]], {"shape": tuple(shape)})

    def op_squeeze(self, node: Any, a: dict[str, Any]) -> None:
        src = self.type_of(node, node.input[0])
        axes = a.get("axes") or (self.ints(node, node.input[1], "axes")
                                 if len(node.input) > 1 and node.input[1] else
                                 [i for i, d in enumerate(src.shape) if d == 1])
        drop = {int(x) % len(src.shape) for x in axes}
        shape = tuple(d for i, d in enumerate(src.shape) if i not in drop)
        self.emit(node, "reshape", [node.input[0]], {"shape": shape})

    def op_transpose(self, node: Any, a: dict[str, Any]) -> None:
        rank = len(self.type_of(node, node.input[0]).shape)
        perm = tuple(int(p) for p in a.get("perm", range(rank - 1, -1, -1)))
        self.emit(node, "transpose", [node.input[0]], {"perm": perm})

    def binary(self, node: Any, op: str) -> None:
        self.emit(node, op, [node.input[0], node.input[1]], {})

    def op_sub(self, node: Any, a: dict[str, Any]) -> None:
        self.binary(node, "sub")

    def op_mul(self, node: Any, a: dict[str, Any]) -> None:
        self.binary(node, "mul")

    def op_div(self, node: Any, a: dict[str, Any]) -> None:
        self.binary(node, "div")

    def op_pow(self, node: Any, a: dict[str, Any]) -> None:
        self.binary(node, "pow")

    def op_sqrt(self, node: Any, a: dict[str, Any]) -> None:
        self.emit(node, "sqrt", [node.input[0]], {})

    def op_erf(self, node: Any, a: dict[str, Any]) -> None:
        self.emit(node, "erf", [node.input[0]], {})

    def op_tanh(self, node: Any, a: dict[str, Any]) -> None:
        self.emit(node, "tanh", [node.input[0]], {})

    def op_sigmoid(self, node: Any, a: dict[str, Any]) -> None:
        self.emit(node, "sigmoid", [node.input[0]], {})

    def op_softmax(self, node: Any, a: dict[str, Any]) -> None:
        self.emit(node, "softmax", [node.input[0]], {"axis": int(a.get("axis", -1))})

    def op_layernormalization(self, node: Any, a: dict[str, Any]) -> None:
        rank = len(self.type_of(node, node.input[0]).shape)
        if int(a.get("axis", -1)) % rank != rank - 1:
            raise self.fail(node, f"only the last axis is supported, got axis={a['axis']}")
        gamma = self.const(node, node.input[1], "scale")
        beta = (self.const(node, node.input[2], "bias") if len(node.input) > 2
                and node.input[2] else np.zeros_like(gamma))
        self.emit(node, "layer_norm", [node.input[0]], {
            "scale": self.param_new(node, "gamma", gamma),
            "bias": self.param_new(node, "beta", beta),
            "epsilon": float(str(np.float32(a.get("epsilon", 1e-5))))})

    def reduce(self, node: Any, a: dict[str, Any], op: str) -> None:
        rank = len(self.type_of(node, node.input[0]).shape)
        axes = a.get("axes") or (self.ints(node, node.input[1], "axes")
                                 if len(node.input) > 1 and node.input[1] else range(rank))
        self.emit(node, op, [node.input[0]], {"axes": tuple(int(x) % rank for x in axes),
                                              "keepdims": bool(a.get("keepdims", 1))})

    def op_reducemean(self, node: Any, a: dict[str, Any]) -> None:
        self.reduce(node, a, "reduce_mean")

    def op_reducesum(self, node: Any, a: dict[str, Any]) -> None:
        self.reduce(node, a, "reduce_sum")

    def op_reducemax(self, node: Any, a: dict[str, Any]) -> None:
        self.reduce(node, a, "reduce_max")

    def op_gather(self, node: Any, a: dict[str, Any]) -> None:
        axis = int(a.get("axis", 0))
        data, idx = self.resolve(node.input[0]), self.resolve(node.input[1])
        if data in self.consts and idx not in self.consts:
            table = self.consts[data]
            if table.ndim != 2 or axis != 0:
                raise self.fail(node, "a lookup needs a 2-D table gathered on axis 0")
            self.emit(node, "embedding", [idx], {"table": self.param_new(
                node, "table", table)})
            return
        if idx not in self.consts:
            raise self.fail(node, "gathering with computed indices from a computed tensor is "
                            "not supported")
        name = unique_name(self.graph.params, f"{self.label(node)}.indices")
        self.graph.params[name] = np.asarray(self.consts[idx]).astype(np.int64)
        self.emit(node, "take", [node.input[0]], {"indices": name, "axis": axis})

    def op_concat(self, node: Any, a: dict[str, Any]) -> None:
        self.emit(node, "concat", list(node.input), {"axis": int(a["axis"])})

    def op_slice(self, node: Any, a: dict[str, Any]) -> None:
        src = self.type_of(node, node.input[0])
        starts = self.ints(node, node.input[1], "starts")
        ends = self.ints(node, node.input[2], "ends")
        axes = (self.ints(node, node.input[3], "axes") if len(node.input) > 3 and node.input[3]
                else list(range(len(starts))))
        steps = (self.ints(node, node.input[4], "steps") if len(node.input) > 4
                 and node.input[4] else [1] * len(starts))
        v = node.input[0]
        for i, (start, end, axis, step) in enumerate(zip(starts, ends, axes, steps,
                                                         strict=True)):
            dim = src.shape[axis % len(src.shape)]
            last = i == len(starts) - 1
            out = node.output[0] if last else f"{node.output[0]}.{i}"
            v = self.emit(node, "slice", [v], {"axis": axis % len(src.shape),
                                               "start": max(-dim, min(start, dim)),
                                               "stop": max(-dim - 1, min(end, dim)),
                                               "step": step}, output=out)

    def op_split(self, node: Any, a: dict[str, Any]) -> None:
        src = self.type_of(node, node.input[0])
        axis = int(a.get("axis", 0)) % len(src.shape)
        if len(node.input) > 1 and node.input[1]:
            sizes = self.ints(node, node.input[1], "split")
        elif "split" in a:
            sizes = [int(x) for x in a["split"]]
        else:
            n = len(node.output)
            sizes = [-(-src.shape[axis] // n)] * n
            sizes[-1] = src.shape[axis] - sum(sizes[:-1])
        start = 0
        for out, size in zip(node.output, sizes, strict=True):
            self.emit(node, "slice", [node.input[0]], {"axis": axis, "start": start,
                                                       "stop": start + size, "step": 1},
                      output=out)
            start += size

    def op_cast(self, node: Any, a: dict[str, Any]) -> None:
        src = self.type_of(node, node.input[0])
        if _ONNX_DTYPES.get(int(a["to"])) != src.dtype:
            raise self.fail(node, f"a cast of {src} to {_ONNX_DTYPES.get(int(a['to']))} is not "
                            "supported (only casts that change nothing)")
        self.alias[node.output[0]] = self.resolve(node.input[0])

    def op_where(self, node: Any, a: dict[str, Any]) -> None:
        cond = np.asarray(self.const(node, node.input[0], "condition")).astype(bool)
        name = unique_name(self.graph.params, f"{self.label(node)}.condition")
        self.graph.params[name] = cond
        self.emit(node, "where", [node.input[1], node.input[2]], {"condition": name})

    def op_gemm(self, node: Any, a: dict[str, Any]) -> None:
        if a.get("transA", 0):
            raise self.fail(node, "transA=1 is not supported")
        b = self.const(node, node.input[1], "weight").astype(np.float64)
        w = b if a.get("transB", 0) else b.T  # (N, K)
        w = w * float(a.get("alpha", 1.0))
        attrs: dict[str, Any] = {"weight": self.param_new(node, "weight", w), "bias": None}
        if len(node.input) > 2 and node.input[2]:
            c = self.const(node, node.input[2], "bias").astype(np.float64)
            if c.size != w.shape[0]:
                raise self.fail(node, f"bias C of shape {c.shape} is not per output "
                                f"({w.shape[0]},)")
            attrs["bias"] = self.param_new(node, "bias", c.reshape(-1) * float(a.get("beta",
                                                                                     1.0)))
        self.emit(node, "dense", [node.input[0]], attrs)

    def op_matmul(self, node: Any, a: dict[str, Any]) -> None:
        right = self.resolve(node.input[1])
        if right not in self.consts:
            self.emit(node, "batch_matmul", [node.input[0], node.input[1]], {})
            return
        b = self.consts[right]
        if b.ndim != 2:
            raise self.fail(node, f"only a 2-D constant right operand is supported, got "
                            f"{b.shape}")
        self.emit(node, "dense", [node.input[0]],
                  {"weight": self.param_new(node, "weight", b.T), "bias": None})

    def fold(self, node: Any, a: dict[str, Any]) -> bool:
        """Evaluate ``node`` now when its inputs are constants (or it is the Shape of a typed
        value); its outputs become constants. Returns whether it did."""
        names = [self.resolve(v) for v in node.input if v]
        if node.op_type == "Shape":
            t = self.type_of(node, node.input[0])
            self.consts[node.output[0]] = np.asarray(t.shape, dtype=np.int64)
            return True
        if not all(v in self.consts for v in names):
            return False
        xs = [self.consts[v] for v in names]
        op = node.op_type
        try:
            out = _evaluate(op, xs, a, len(node.output))
        except (ValueError, IndexError, TypeError, KeyError) as e:
            raise self.fail(node, f"cannot evaluate on constants: {_reason(e)}") from None
        if out is None:
            return False
        for name, value in zip(node.output, out, strict=True):
            self.consts[name] = np.asarray(value)
        return True

    def output(self, name: str) -> str:
        """Keep the ONNX output name: rename the value an Identity chain aliases."""
        src = self.data(self.resolve(name))
        if src == name or src in self.graph.inputs or name in self.graph.values:
            return src
        for n in self.graph.nodes:
            n.inputs = [name if v == src else v for v in n.inputs]
            n.outputs = [name if v == src else v for v in n.outputs]
        self.graph.outputs = [name if v == src else v for v in self.graph.outputs]
        self.alias = {k: (name if v == src else v) for k, v in self.alias.items()}
        return name

    def param_new(self, node: Any, what: str, value: np.ndarray) -> str:
        name = unique_name(self.graph.params, f"{node.name or node.output[0]}.{what}")
        self.graph.params[name] = np.ascontiguousarray(value.astype(np.float32))
        return name

    # ------------------------------------------------------------------ driver
    def run(self) -> Graph:
        gm = self.onnx_graph
        for vi in gm.input:
            if vi.name in self.consts:
                continue
            tt = vi.type.tensor_type
            dtype = _ONNX_DTYPES.get(tt.elem_type)
            if dtype not in ("float32", "int32", "int64"):
                raise GraphError(f"{self.where}: input {vi.name!r} must be float32 (or int32 / "
                                 "int64 token ids)")
            dims = []
            for i, d in enumerate(tt.shape.dim):
                if d.HasField("dim_value"):
                    dims.append(int(d.dim_value))
                elif i == 0:
                    dims.append(self.batch)
                else:
                    raise GraphError(f"{self.where}: input {vi.name!r} has a symbolic "
                                     f"dimension {i} ({d.dim_param!r}); only the batch may be")
            self.graph.inputs.append(vi.name)
            self.graph.values[vi.name] = TensorType(tuple(dims), dtype,
                                                    {4: "NCHW", 2: "NC"}.get(len(dims), "ANY"))
            self.types[vi.name] = self.graph.values[vi.name]
        for node in gm.node:
            if node.op_type not in SUPPORTED_OPS or node.domain not in ("", "ai.onnx"):
                raise GraphError(f"{self.where}: node {self.label(node)!r} uses unsupported "
                                 f"operator {node.op_type!r}")
            a = self.attrs(node)
            if node.op_type == "Constant":
                if "value" not in a:
                    raise self.fail(node, "only the 'value' form of Constant is supported")
                self.consts[node.output[0]] = self.numpy_helper.to_array(a["value"])
            elif node.op_type == "Identity":
                self.alias[node.output[0]] = self.resolve(node.input[0])
            elif self.fold(node, a):
                continue
            elif node.op_type in _FOLD_ONLY:
                raise self.fail(node, "supported only on constants (static shapes)")
            else:
                getattr(self, f"op_{node.op_type.lower()}")(node, a)
        for o in gm.output:
            name = self.output(o.name)
            self.graph.outputs.append(name)
        g = infer_types(self.graph)
        g.verify()
        return g


def import_onnx(path_or_model: str | os.PathLike[str] | Any, batch: int = 1) -> Graph:
    """Import a float ONNX model as a float graph.

    Parameters
    ----------
    path_or_model
        A path to an ``.onnx`` file, or an ``onnx.ModelProto``.
    batch
        The batch size given to a symbolic first dimension of an input.

    Returns
    -------
    Graph
        A typed, verified float32 graph; weights are params.

    Raises
    ------
    GraphError
        ``"<path>: not a valid ONNX model: <reason>"`` for an unreadable or invalid model;
        ``"<path>: node '<name>' uses unsupported operator '<op>'"``; an unsupported attribute
        or a non-constant weight, naming the node.
    """
    model, where = _load(path_or_model)
    return _Importer(model, where, batch).run()
