"""Affine index arithmetic: expressions of the form ``c0 + sum(ci * vi)``.

Bound inference, DMA injection and micro-op loop folding all need to know how an index moves
with each loop variable; :func:`to_affine` answers that or raises :class:`NotAffine`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from compiler.te import BinOp, Expr, IntImm, Var

__all__ = ["Affine", "NotAffine", "to_affine"]


class NotAffine(ValueError):
    """The expression is not affine in its variables (``//``, ``%``, products of variables)."""


@dataclass
class Affine:
    """``const + sum(coeffs[v] * v)``."""

    coeffs: dict[Var, int] = field(default_factory=dict)
    const: int = 0

    def __add__(self, other: Affine) -> Affine:
        coeffs = dict(self.coeffs)
        for v, c in other.coeffs.items():
            coeffs[v] = coeffs.get(v, 0) + c
        return Affine({v: c for v, c in coeffs.items() if c}, self.const + other.const)

    def scale(self, k: int) -> Affine:
        return Affine({v: c * k for v, c in self.coeffs.items() if c * k}, self.const * k)

    def coeff(self, v: Var) -> int:
        return self.coeffs.get(v, 0)

    def without(self, vs: set[Var] | list[Var]) -> Affine:
        """This form with the given variables set to zero."""
        return Affine({v: c for v, c in self.coeffs.items() if v not in vs}, self.const)

    def bounds(self, ranges: dict[Var, int]) -> tuple[Affine, int]:
        """(minimum as an affine form of the other variables, extent) over ``v in [0, n)``."""
        lo = self.without(list(ranges))
        span = 0
        for v, n in ranges.items():
            c = self.coeff(v)
            if c < 0:
                lo = lo + Affine({}, c * (n - 1))
            span += abs(c) * (n - 1)
        return lo, span + 1

    def to_expr(self) -> Expr:
        expr: Expr | None = None
        for v, c in self.coeffs.items():
            term: Expr = v if c == 1 else BinOp("*", v, IntImm(c))
            expr = term if expr is None else BinOp("+", expr, term)
        if expr is None:
            return IntImm(self.const)
        return BinOp("+", expr, IntImm(self.const)) if self.const else expr


def to_affine(expr: Expr) -> Affine:
    """The affine form of ``expr``.

    Raises
    ------
    NotAffine
        For floor division, modulo, min/max, or a product of two variables.
    """
    if isinstance(expr, IntImm):
        return Affine({}, expr.value)
    if isinstance(expr, Var):
        return Affine({expr: 1}, 0)
    if isinstance(expr, BinOp):
        if expr.op == "+":
            return to_affine(expr.a) + to_affine(expr.b)
        if expr.op == "-":
            return to_affine(expr.a) + to_affine(expr.b).scale(-1)
        if expr.op == "*":
            a, b = to_affine(expr.a), to_affine(expr.b)
            if not a.coeffs:
                return b.scale(a.const)
            if not b.coeffs:
                return a.scale(b.const)
    raise NotAffine(f"{expr!r} is not affine")
