"""ONNX front end: a float ONNX model becomes a float :class:`~compiler.graph.ir.Graph`.

Supported operators and how they map:

==================  =========================================================================
Conv                conv2d (2-D, symmetric pads, dilations 1, group 1); W, B -> params
BatchNormalization  batch_norm (inference form); scale, B, mean, var -> params
Relu, Add           relu, add (an operand that is a constant becomes a ``constant`` node)
MaxPool             max_pool2d (symmetric pads, ceil_mode 0, dilations 1)
AveragePool         avg_pool2d (count_include_pad=1, or no padding)
GlobalAveragePool   global_avg_pool
Flatten             flatten (axis 1)
Gemm                dense (transA 0; alpha and beta folded into the params)
MatMul              dense, when the right operand is a constant (K, N) matrix
Reshape             flatten, when the target shape is (N, -1), (0, -1) or (N, C*H*W)
Constant, Identity  resolved at import (constants; aliases)
==================  =========================================================================

Weights, biases and batch-norm statistics must be constants (initializers, ``Constant`` nodes,
or ``Identity`` of those); they become params named after their ONNX tensors. A symbolic batch
dimension of a graph input takes the ``batch`` argument.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from compiler.graph.ir import Graph, GraphError, Node, TensorType
from compiler.graph.ops import infer_types
from compiler.graph.passes.common import unique_name

__all__ = ["SUPPORTED_OPS", "import_onnx"]

SUPPORTED_OPS = ("Conv", "BatchNormalization", "Relu", "Add", "MaxPool", "AveragePool",
                 "GlobalAveragePool", "Flatten", "Gemm", "MatMul", "Reshape", "Constant",
                 "Identity")


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
            self.graph.params[v] = np.ascontiguousarray(self.consts[v].astype(np.float32))
            self.graph.nodes.append(Node(unique_name(self.node_names, v), "constant", [],
                                         [v], {"value": v}))
            self.node_names.add(self.graph.nodes[-1].name)
            self.const_nodes.add(v)
        return v

    @staticmethod
    def attrs(node: Any) -> dict[str, Any]:
        from onnx import helper

        return {a.name: helper.get_attribute_value(a) for a in node.attribute}

    def emit(self, node: Any, op: str, inputs: list[str], attrs: dict[str, Any]) -> None:
        name = unique_name(self.node_names, self.label(node))
        self.node_names.add(name)
        self.graph.nodes.append(Node(name, op, [self.data(v) for v in inputs],
                                     [node.output[0]], attrs))

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
        if a.get("ceil_mode", 0):
            raise self.fail(node, "ceil_mode=1 is not supported")
        strides = list(a.get("strides", [1, 1]))
        return (int(strides[0]), int(strides[1])), (int(pads[0]), int(pads[1]))

    # ------------------------------------------------------------------ operators
    def op_conv(self, node: Any, a: dict[str, Any]) -> None:
        if a.get("group", 1) != 1:
            raise self.fail(node, f"group={a['group']} is not supported (only 1)")
        w = self.const(node, node.input[1], "weight")
        if w.ndim != 4:
            raise self.fail(node, f"only 2-D convolutions are supported, weight is {w.shape}")
        stride, padding = self.spatial(node, a, "Conv")
        attrs: dict[str, Any] = {"weight": self.param(node.input[1], w), "bias": None}
        if len(node.input) > 2 and node.input[2]:
            attrs["bias"] = self.param(node.input[2], self.const(node, node.input[2], "bias"))
        attrs.update(stride=stride, padding=padding)
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

    def op_add(self, node: Any, a: dict[str, Any]) -> None:
        self.emit(node, "add", [node.input[0], node.input[1]], {})

    def op_maxpool(self, node: Any, a: dict[str, Any]) -> None:
        if a.get("storage_order", 0) or (len(node.output) > 1 and node.output[1]):
            raise self.fail(node, "the Indices output is not supported")
        stride, padding = self.spatial(node, a, "MaxPool")
        kernel = tuple(int(k) for k in a["kernel_shape"])
        self.emit(node, "max_pool2d", [node.input[0]],
                  {"kernel": kernel, "stride": stride, "padding": padding})

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
        shape = [int(s) for s in self.const(node, node.input[1], "shape")]
        src = self.resolve(node.input[0])
        t = self.types_so_far().get(src)
        flat = t is not None and len(shape) == 2 and shape[0] in (0, t.shape[0]) \
            and shape[1] in (-1, t.size // max(t.shape[0], 1))
        if not flat:
            raise self.fail(node, f"only a Reshape that flattens to (N, -1) is supported, "
                            f"got shape {shape}")
        self.emit(node, "flatten", [node.input[0]], {})

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
        b = self.const(node, node.input[1], "right operand")
        if b.ndim != 2:
            raise self.fail(node, f"only a 2-D constant right operand is supported, got "
                            f"{b.shape}")
        self.emit(node, "dense", [node.input[0]],
                  {"weight": self.param_new(node, "weight", b.T), "bias": None})

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

    def types_so_far(self) -> dict[str, TensorType]:
        return infer_types(Graph(self.graph.name, self.graph.inputs, [], self.graph.values,
                                 self.graph.nodes, self.graph.params)).values

    # ------------------------------------------------------------------ driver
    def run(self) -> Graph:
        gm = self.onnx_graph
        for vi in gm.input:
            if vi.name in self.consts:
                continue
            tt = vi.type.tensor_type
            if tt.elem_type != 1:  # TensorProto.FLOAT
                raise GraphError(f"{self.where}: input {vi.name!r} must be float32")
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
            self.graph.values[vi.name] = TensorType(tuple(dims), "float32",
                                                    {4: "NCHW", 2: "NC"}.get(len(dims), "ANY"))
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
