"""Tensor expressions: operators written as index formulas over tensors (TVM's ``te``).

    n = 16
    a = placeholder((n, n), "int8", "a")
    b = placeholder((n, n), "int8", "b")
    k = reduce_axis(n, "k")
    c = compute((n, n), lambda i, j: sum(a[i, k].astype("int32") * b[k, j].astype("int32"),
                                          axis=k), "c")

Expressions are immutable trees with integer index arithmetic (``+ - * // %``, ``min_expr``,
``max_expr``), comparisons, ``if_then_else``, casts, tensor reads and ``sum`` reductions.
:func:`evaluate` is a reference interpreter (numpy, exact int64), used to check that an
operator's definition means what the kernels in :mod:`runtime.kernels` compute.
"""

from __future__ import annotations

import builtins
import inspect
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Union

import numpy as np

__all__ = [
    "BinOp",
    "Cast",
    "Cmp",
    "ComputeOp",
    "Expr",
    "IntImm",
    "IterVar",
    "Load",
    "PlaceholderOp",
    "Reduce",
    "Select",
    "Tensor",
    "Var",
    "compute",
    "const",
    "evaluate",
    "if_then_else",
    "max_expr",
    "min_expr",
    "placeholder",
    "reduce_axis",
    "sum",
]

ExprLike = Union["Expr", "IterVar", int]

_counter = itertools.count()


def const(value: ExprLike) -> Expr:
    """Wrap a Python int as an :class:`IntImm` (expressions pass through)."""
    if isinstance(value, Expr):
        return value
    if isinstance(value, IterVar):
        return value.var
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return IntImm(int(value))
    raise TypeError(f"expected an expression or an int, got {type(value).__name__} {value!r}")


class Expr:
    """Base of all expressions; arithmetic operators build :class:`BinOp` nodes."""

    def __add__(self, other: ExprLike) -> Expr:
        return BinOp("+", self, const(other))

    def __radd__(self, other: ExprLike) -> Expr:
        return BinOp("+", const(other), self)

    def __sub__(self, other: ExprLike) -> Expr:
        return BinOp("-", self, const(other))

    def __rsub__(self, other: ExprLike) -> Expr:
        return BinOp("-", const(other), self)

    def __mul__(self, other: ExprLike) -> Expr:
        return BinOp("*", self, const(other))

    def __rmul__(self, other: ExprLike) -> Expr:
        return BinOp("*", const(other), self)

    def __floordiv__(self, other: ExprLike) -> Expr:
        return BinOp("//", self, const(other))

    def __mod__(self, other: ExprLike) -> Expr:
        return BinOp("%", self, const(other))

    def __rshift__(self, other: ExprLike) -> Expr:
        return BinOp(">>", self, const(other))

    def __lt__(self, other: ExprLike) -> Expr:  # type: ignore[override]
        return Cmp("<", self, const(other))

    def __ge__(self, other: ExprLike) -> Expr:  # type: ignore[override]
        return Cmp(">=", self, const(other))

    def __and__(self, other: Expr) -> Expr:
        return Cmp("and", self, other)

    def astype(self, dtype: str) -> Expr:
        return Cast(dtype, self)

    # Expressions are compared structurally by the dataclass __eq__ of each node; hashing uses
    # identity so that Vars can key dictionaries.
    __hash__ = object.__hash__


@dataclass(eq=False, repr=False)
class Var(Expr):
    """An integer variable (a loop index)."""

    name: str

    def __repr__(self) -> str:
        return self.name


@dataclass(eq=False, repr=False)
class IntImm(Expr):
    value: int

    def __repr__(self) -> str:
        return str(self.value)


@dataclass(eq=False, repr=False)
class BinOp(Expr):
    """``a op b`` for op in ``+ - * // % >> min max`` (floor division and modulo)."""

    op: str
    a: Expr
    b: Expr

    def __repr__(self) -> str:
        if self.op in ("min", "max"):
            return f"{self.op}({self.a!r}, {self.b!r})"
        return f"({self.a!r} {self.op} {self.b!r})"


@dataclass(eq=False, repr=False)
class Cmp(Expr):
    """A condition: ``a < b``, ``a >= b`` or ``a and b``."""

    op: str
    a: Expr
    b: Expr

    def __repr__(self) -> str:
        return f"({self.a!r} {self.op} {self.b!r})"


@dataclass(eq=False, repr=False)
class Select(Expr):
    """``true_value if cond else false_value``."""

    cond: Expr
    true_value: Expr
    false_value: Expr

    def __repr__(self) -> str:
        return f"select({self.cond!r}, {self.true_value!r}, {self.false_value!r})"


@dataclass(eq=False, repr=False)
class Cast(Expr):
    dtype: str
    value: Expr

    def __repr__(self) -> str:
        return f"{self.dtype}({self.value!r})"


@dataclass(eq=False, repr=False)
class Load(Expr):
    """A tensor read ``tensor[indices]``."""

    tensor: Tensor
    indices: tuple[Expr, ...]

    def __repr__(self) -> str:
        return f"{self.tensor.name}[{', '.join(repr(i) for i in self.indices)}]"


@dataclass(eq=False)
class IterVar:
    """A loop axis ``var`` in ``[0, extent)``; ``reduce`` axes are summed over."""

    var: Var
    extent: int
    reduce: bool = False

    @property
    def name(self) -> str:
        return self.var.name

    def __add__(self, other: ExprLike) -> Expr:
        return self.var + other

    def __radd__(self, other: ExprLike) -> Expr:
        return const(other) + self.var

    def __mul__(self, other: ExprLike) -> Expr:
        return self.var * other

    def __rmul__(self, other: ExprLike) -> Expr:
        return const(other) * self.var

    def __sub__(self, other: ExprLike) -> Expr:
        return self.var - other

    def __repr__(self) -> str:
        kind = "reduce" if self.reduce else "axis"
        return f"{kind}({self.name}, {self.extent})"

    __hash__ = object.__hash__


@dataclass(eq=False, repr=False)
class Reduce(Expr):
    """``sum(source)`` over the reduce axes ``axis``."""

    source: Expr
    axis: tuple[IterVar, ...]

    def __repr__(self) -> str:
        return f"sum({self.source!r}, axis=[{', '.join(a.name for a in self.axis)}])"


@dataclass(eq=False)
class PlaceholderOp:
    name: str


@dataclass(eq=False)
class ComputeOp:
    """``out[axis] = body`` for every point of the (spatial) ``axis``."""

    name: str
    axis: tuple[IterVar, ...]
    body: Expr
    attrs: dict[str, Any] = field(default_factory=dict)

    @property
    def reduce_axis(self) -> tuple[IterVar, ...]:
        return self.body.axis if isinstance(self.body, Reduce) else ()

    def inputs(self) -> list[Tensor]:
        """The tensors the body reads, in first-read order."""
        found: list[Tensor] = []
        for node in walk(self.body):
            if isinstance(node, Load) and node.tensor not in found:
                found.append(node.tensor)
        return found


@dataclass(eq=False)
class Tensor:
    """A tensor: placeholder input or the output of a :class:`ComputeOp`."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    op: PlaceholderOp | ComputeOp

    def __getitem__(self, indices: ExprLike | tuple[ExprLike, ...]) -> Load:
        idx = indices if isinstance(indices, tuple) else (indices,)
        if len(idx) != len(self.shape):
            raise IndexError(
                f"{self.name} has {len(self.shape)} dimensions, indexed with {len(idx)}"
            )
        return Load(self, tuple(const(i) for i in idx))

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __repr__(self) -> str:
        return f"Tensor({self.name}, {self.shape}, {self.dtype})"

    __hash__ = object.__hash__


def placeholder(shape: Sequence[int], dtype: str, name: str) -> Tensor:
    """An input tensor."""
    return Tensor(name, tuple(int(s) for s in shape), dtype, PlaceholderOp(name))


def reduce_axis(extent: int, name: str) -> IterVar:
    """A reduction axis over ``[0, extent)``."""
    return IterVar(Var(name), int(extent), reduce=True)


def sum(source: Expr, axis: IterVar | Sequence[IterVar]) -> Reduce:
    """Sum ``source`` over the reduce axes ``axis``."""
    axes = (axis,) if isinstance(axis, IterVar) else tuple(axis)
    for a in axes:
        if not a.reduce:
            raise ValueError(f"sum over {a.name}: not a reduce_axis")
    return Reduce(source, axes)


def min_expr(a: ExprLike, b: ExprLike) -> Expr:
    return BinOp("min", const(a), const(b))


def max_expr(a: ExprLike, b: ExprLike) -> Expr:
    return BinOp("max", const(a), const(b))


def if_then_else(cond: Expr, true_value: ExprLike, false_value: ExprLike) -> Expr:
    return Select(cond, const(true_value), const(false_value))


_AXIS_NAMES = "ijklmnpqrstuvw"


def compute(
    shape: Sequence[int],
    fcompute: Callable[..., ExprLike],
    name: str,
    dtype: str | None = None,
    attrs: dict[str, Any] | None = None,
    axis_names: Sequence[str] | None = None,
) -> Tensor:
    """A tensor whose element at each index is ``fcompute(*index_vars)``.

    ``dtype`` defaults to the body's: the cast's target, or ``int32``. Axis variables are named
    ``name.arg`` after the lambda's parameters, or after ``axis_names``.
    """
    names = list(axis_names) if axis_names is not None else _arg_names(fcompute, len(shape))
    axis = tuple(IterVar(Var(f"{name}.{names[i]}"), int(n)) for i, n in enumerate(shape))
    body = const(fcompute(*(a.var for a in axis)))
    if dtype is None:
        dtype = body.dtype if isinstance(body, Cast) else "int32"
    op = ComputeOp(name, axis, body, dict(attrs or {}))
    return Tensor(name, tuple(int(s) for s in shape), dtype, op)


def _arg_names(fcompute: Callable[..., ExprLike], ndim: int) -> list[str]:
    """The lambda's parameter names when it names each axis, else i, j, k, ..."""
    try:
        params = list(inspect.signature(fcompute).parameters.values())
    except (TypeError, ValueError):
        params = []
    if len(params) == ndim and all(p.kind is p.POSITIONAL_OR_KEYWORD for p in params):
        return [p.name for p in params]
    return [_AXIS_NAMES[i] if i < len(_AXIS_NAMES) else str(i) for i in range(ndim)]


def walk(expr: Expr) -> list[Expr]:
    """Every node of ``expr``, pre-order."""
    out: list[Expr] = []
    stack = [expr]
    while stack:
        node = stack.pop()
        out.append(node)
        if isinstance(node, (BinOp, Cmp)):
            stack += [node.b, node.a]
        elif isinstance(node, Select):
            stack += [node.false_value, node.true_value, node.cond]
        elif isinstance(node, Cast):
            stack.append(node.value)
        elif isinstance(node, Load):
            stack += list(reversed(node.indices))
        elif isinstance(node, Reduce):
            stack.append(node.source)
    return out


def substitute(expr: Expr, mapping: dict[Var, Expr]) -> Expr:
    """``expr`` with variables replaced (a new tree; ``expr`` is unchanged)."""
    if isinstance(expr, Var):
        return mapping.get(expr, expr)
    if isinstance(expr, IntImm):
        return expr
    if isinstance(expr, BinOp):
        return BinOp(expr.op, substitute(expr.a, mapping), substitute(expr.b, mapping))
    if isinstance(expr, Cmp):
        return Cmp(expr.op, substitute(expr.a, mapping), substitute(expr.b, mapping))
    if isinstance(expr, Select):
        return Select(substitute(expr.cond, mapping), substitute(expr.true_value, mapping),
                      substitute(expr.false_value, mapping))
    if isinstance(expr, Cast):
        return Cast(expr.dtype, substitute(expr.value, mapping))
    if isinstance(expr, Load):
        return Load(expr.tensor, tuple(substitute(i, mapping) for i in expr.indices))
    if isinstance(expr, Reduce):
        return Reduce(substitute(expr.source, mapping), expr.axis)
    raise TypeError(f"cannot substitute into {type(expr).__name__}")


# ---------------------------------------------------------------------- reference interpreter
_NP_BIN: dict[str, Callable[[Any, Any], Any]] = {
    "+": np.add,
    "-": np.subtract,
    "*": np.multiply,
    "//": np.floor_divide,
    "%": np.mod,
    ">>": np.right_shift,
    "min": np.minimum,
    "max": np.maximum,
    "<": np.less,
    ">=": np.greater_equal,
    "and": np.logical_and,
}


def _wrap(values: np.ndarray, dtype: str) -> np.ndarray:
    return np.asarray(values).astype(np.int64).astype(dtype).astype(np.int64)


def _eval(expr: Expr, env: dict[Var, np.ndarray], feed: dict[Tensor, np.ndarray]) -> Any:
    if isinstance(expr, IntImm):
        return np.int64(expr.value)
    if isinstance(expr, Var):
        return env[expr]
    if isinstance(expr, (BinOp, Cmp)):
        return _NP_BIN[expr.op](_eval(expr.a, env, feed), _eval(expr.b, env, feed))
    if isinstance(expr, Select):
        cond = _eval(expr.cond, env, feed)
        return np.where(cond, _eval(expr.true_value, env, feed),
                        _eval(expr.false_value, env, feed))
    if isinstance(expr, Cast):
        return _wrap(_eval(expr.value, env, feed), expr.dtype)
    if isinstance(expr, Load):
        data = _tensor_value(expr.tensor, feed)
        idx = [np.asarray(_eval(i, env, feed)) for i in expr.indices]
        shape = np.broadcast_shapes(*(i.shape for i in idx))
        clipped = tuple(
            np.clip(np.broadcast_to(i, shape), 0, n - 1) for i, n in zip(idx, data.shape,
                                                                          strict=True)
        )
        return data[clipped].astype(np.int64)
    if isinstance(expr, Reduce):
        # Reduce axes get trailing dimensions, summed away at the end.
        base = builtins.max((v.ndim for v in env.values()), default=0)
        inner = dict(env)
        k = len(expr.axis)
        for pos, axis in enumerate(expr.axis):
            shape = [1] * (base + k)
            shape[base + pos] = axis.extent
            inner[axis.var] = np.arange(axis.extent).reshape(shape)
        for v in env:
            inner[v] = np.asarray(env[v]).reshape(np.shape(env[v]) + (1,) * k)
        total = np.asarray(_eval(expr.source, inner, feed))
        full = np.broadcast_to(total, np.broadcast_shapes(total.shape, *(
            np.shape(inner[a.var]) for a in expr.axis)))
        return full.sum(axis=tuple(range(full.ndim - k, full.ndim)))
    raise TypeError(f"cannot evaluate {type(expr).__name__}")


def _tensor_value(tensor: Tensor, feed: dict[Tensor, np.ndarray]) -> np.ndarray:
    if tensor not in feed:
        if isinstance(tensor.op, PlaceholderOp):
            raise KeyError(f"no value fed for placeholder {tensor.name}")
        feed[tensor] = evaluate(tensor, feed)
    return feed[tensor]


def evaluate(tensor: Tensor, feed: dict[Tensor, np.ndarray]) -> np.ndarray:
    """Compute ``tensor`` from placeholder values in ``feed`` (exact, then cast to its dtype).

    A reference interpreter for small shapes: reads outside a tensor are clamped to its bounds,
    so guard them with :func:`if_then_else` as padding does.
    """
    if isinstance(tensor.op, PlaceholderOp):
        return feed[tensor]
    op = tensor.op
    grids = np.meshgrid(*(np.arange(a.extent) for a in op.axis), indexing="ij")
    env = {a.var: g for a, g in zip(op.axis, grids, strict=True)}
    values = np.broadcast_to(np.asarray(_eval(op.body, env, dict(feed))), tensor.shape)
    return _wrap(values, tensor.dtype).astype(tensor.dtype)
