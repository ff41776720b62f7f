"""The loop-nest IR between schedules and instructions, with a printer and a verifier.

Statements are immutable dataclasses; passes build new trees. Element-level statements
(:class:`Store` of an expression) come out of lowering; the passes replace them with tile-level
hardware statements (:class:`DmaCopy`, :class:`Gemm`, :class:`Alu`, then :class:`UopLoop`) and
dependency-token statements (:class:`DepPush`, :class:`DepPop`) until codegen can read the tree
as an instruction stream.

On-chip buffers hold whole tiles: the last two dimensions of a buffer's shape are the tile
(``batch x block_in`` for inp, ``block_out x block_in`` for wgt, ``batch x block_out`` for acc),
and hardware statements address buffers by flattened tile index (:class:`TileRef`).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from accel.machine.isa import AluOp, MemType, Module, TokenQueue
from compiler.schedule import Pragma
from compiler.te import BinOp, Cast, Cmp, Expr, IntImm, Select, Var, walk

__all__ = [
    "Allocate",
    "Alu",
    "Buffer",
    "BufferLoad",
    "DepPop",
    "DepPush",
    "DmaCopy",
    "For",
    "ForKind",
    "Gemm",
    "IRVerifyError",
    "PrimFunc",
    "Seq",
    "Stmt",
    "Store",
    "TileRef",
    "UopLoop",
    "format_expr",
    "map_stmts",
    "stmts",
    "to_text",
    "verify",
]


class ForKind(enum.Enum):
    SERIAL = "serial"
    VTHREAD = "vthread"


@dataclass(eq=False)
class Buffer:
    """A tensor's storage: in DRAM (a program argument) or in an on-chip scope.

    ``shape`` is the full element shape; the last two dimensions form one tile. ``base`` is the
    on-chip offset in tiles, assigned by storage planning.
    """

    name: str
    scope: str
    shape: tuple[int, ...]
    dtype: str
    base: int | None = None
    origin: str = ""
    """Where the buffer comes from, for error messages: ``stage conv, loop x.outer``."""

    @property
    def tile_shape(self) -> tuple[int, ...]:
        return self.shape[-2:]

    @property
    def tile_grid(self) -> tuple[int, ...]:
        """The shape in tiles (all but the tile dimensions)."""
        return self.shape[:-2]

    @property
    def n_tiles(self) -> int:
        n = 1
        for d in self.tile_grid:
            n *= d
        return n

    def tile_index(self, indices: tuple[Expr, ...]) -> Expr:
        """Row-major flattened tile index of the tile-grid ``indices``."""
        flat: Expr = IntImm(0)
        for idx, dim in zip(indices, self.tile_grid, strict=True):
            flat = _simplify(BinOp("+", BinOp("*", flat, IntImm(dim)), idx))
        return flat

    def __repr__(self) -> str:
        return f"{self.name}"

    __hash__ = object.__hash__


@dataclass(eq=False, repr=False)
class BufferLoad(Expr):
    """An element read ``buffer[indices]``."""

    buffer: Buffer
    indices: tuple[Expr, ...]

    def __repr__(self) -> str:
        return f"{self.buffer.name}[{', '.join(format_expr(i) for i in self.indices)}]"


@dataclass(frozen=True, eq=False)
class TileRef:
    """One tile of a buffer: ``buffer`` at flattened tile index ``index``."""

    buffer: Buffer
    index: Expr

    def __repr__(self) -> str:
        return f"{self.buffer.name}@{format_expr(self.index)}"


class Stmt:
    """Base of all statements."""

    __hash__ = object.__hash__


@dataclass(eq=False)
class Seq(Stmt):
    body: list[Stmt]


@dataclass(eq=False)
class For(Stmt):
    var: Var
    extent: int
    body: Stmt
    kind: ForKind = ForKind.SERIAL
    pragma: Pragma | None = None
    intrinsic: Any = None
    """The :class:`~compiler.schedule.Intrinsic` the nest from here is tensorized with."""


@dataclass(eq=False)
class Allocate(Stmt):
    buffer: Buffer
    body: Stmt


@dataclass(eq=False)
class Store(Stmt):
    """An element write ``buffer[indices] = value`` (element level: lowered away by passes)."""

    buffer: Buffer
    indices: tuple[Expr, ...]
    value: Expr


@dataclass(eq=False)
class DmaCopy(Stmt):
    """A 2-D strided tile copy: one LOAD (DRAM -> SRAM, with zero padding) or STORE.

    ``y_size``, ``x_size`` and the pads are expressions of the enclosing loop variables (a tile
    at a border gets padding, one in the middle does not); ``dram`` and ``sram`` are the first
    tile of the copied block (the DRAM side starts after the pad).
    """

    mem_type: MemType
    store: bool
    sram: TileRef
    dram: TileRef
    y_size: Expr
    x_size: Expr
    x_stride: int
    y_pad_0: Expr = field(default_factory=lambda: IntImm(0))
    y_pad_1: Expr = field(default_factory=lambda: IntImm(0))
    x_pad_0: Expr = field(default_factory=lambda: IntImm(0))
    x_pad_1: Expr = field(default_factory=lambda: IntImm(0))
    shift: int = 0
    """A STORE ACC's post-processing (``store.postproc``): arithmetic shift right, then clip to
    ``[clip_lo, clip_hi]``; all 0 elsewhere."""
    clip_lo: int = 0
    clip_hi: int = 0


@dataclass(eq=False)
class Gemm(Stmt):
    """One GEMM micro-op: ``dst += src . wgt^T`` on tiles (``reset``: ``dst = 0``; a reset
    with an acc ``src`` copies it, ``dst = src``, on a GEMM with ``gemm.reset_from_acc``)."""

    dst: TileRef
    src: TileRef | None = None
    wgt: TileRef | None = None
    reset: bool = False

    @property
    def from_acc(self) -> bool:
        """A reset that copies the acc tile ``src`` (``GemmInsn.from_acc``)."""
        return self.reset and self.src is not None


@dataclass(eq=False)
class Alu(Stmt):
    """One ALU micro-op on acc tiles: ``dst = op(dst, imm or src)``."""

    op: AluOp
    dst: TileRef
    src: TileRef | None = None
    imm: int | None = None


@dataclass(eq=False)
class UopLoop(Stmt):
    """A GEMM/ALU instruction: a micro-op kernel inside up to two hardware loops.

    ``hw_loops`` (outer first, at most two) become ``iter_out`` / ``iter_in``; the micro-op
    kernel enumerates ``kernel_loops`` (outer first) around ``op``.
    """

    op: Gemm | Alu
    hw_loops: list[tuple[Var, int]]
    kernel_loops: list[tuple[Var, int]]


@dataclass(eq=False)
class DepPush(Stmt):
    """Push a token into ``queue`` after the previous instruction of ``module``.

    ``cond`` (an expression of enclosing loop variables, or None for always) guards it.
    """

    module: Module
    queue: TokenQueue
    cond: Expr | None = None


@dataclass(eq=False)
class DepPop(Stmt):
    """Pop a token from ``queue`` before the next instruction of ``module`` (if ``cond``)."""

    module: Module
    queue: TokenQueue
    cond: Expr | None = None


@dataclass(eq=False)
class PrimFunc:
    """A lowered operator: its DRAM arguments and body."""

    name: str
    params: list[Buffer]
    body: Stmt
    attrs: dict[str, Any] = field(default_factory=dict)

    def with_body(self, body: Stmt) -> PrimFunc:
        return replace(self, body=body)

    def __str__(self) -> str:
        return to_text(self)


# ---------------------------------------------------------------------- traversal
def stmts(node: Stmt) -> Iterator[Stmt]:
    """Every statement of the tree, pre-order."""
    yield node
    if isinstance(node, Seq):
        for s in node.body:
            yield from stmts(s)
    elif isinstance(node, (For, Allocate)):
        yield from stmts(node.body)


def map_stmts(node: Stmt, fn: Callable[[Stmt], Stmt | None]) -> Stmt:
    """Rebuild the tree bottom-up; ``fn`` may return a replacement (or None to keep)."""
    if isinstance(node, Seq):
        new: Stmt = Seq([map_stmts(s, fn) for s in node.body])
    elif isinstance(node, (For, Allocate)):
        new = replace(node, body=map_stmts(node.body, fn))
    else:
        new = node
    out = fn(new)
    return new if out is None else out


def flatten_seq(items: list[Stmt]) -> Stmt:
    """A Seq of ``items`` with nested Seqs spliced in (a single item stands alone)."""
    flat: list[Stmt] = []
    for s in items:
        if isinstance(s, Seq):
            flat.extend(s.body)
        else:
            flat.append(s)
    return flat[0] if len(flat) == 1 else Seq(flat)


# ---------------------------------------------------------------------- expressions
def _simplify(e: Expr) -> Expr:
    """Constant folding of ``+``/``*`` with 0 and 1 (enough to keep printed IR readable)."""
    if isinstance(e, BinOp):
        a, b = _simplify(e.a), _simplify(e.b)
        if isinstance(a, IntImm) and isinstance(b, IntImm):
            return IntImm(evaluate_expr(BinOp(e.op, a, b), {}))
        if e.op == "+":
            if isinstance(a, IntImm) and a.value == 0:
                return b
            if isinstance(b, IntImm) and b.value == 0:
                return a
        if e.op == "-" and isinstance(b, IntImm) and b.value == 0:
            return a
        if e.op == "*":
            if (isinstance(a, IntImm) and a.value == 0) or (isinstance(b, IntImm)
                                                             and b.value == 0):
                return IntImm(0)
            if isinstance(a, IntImm) and a.value == 1:
                return b
            if isinstance(b, IntImm) and b.value == 1:
                return a
        return BinOp(e.op, a, b)
    return e


def simplify(e: Expr) -> Expr:
    """Canonical form of an index expression: affine ones as ``c + sum(k * v)``."""
    from compiler.arith import NotAffine, to_affine

    try:
        return _simplify(to_affine(e).to_expr())
    except (NotAffine, TypeError):
        return _simplify(e)


def format_expr(e: Expr) -> str:
    e = _simplify(e)
    if isinstance(e, BinOp):
        if e.op in ("min", "max"):
            return f"{e.op}({format_expr(e.a)}, {format_expr(e.b)})"
        return f"({format_expr(e.a)} {e.op} {format_expr(e.b)})"
    if isinstance(e, Cmp):
        return f"({format_expr(e.a)} {e.op} {format_expr(e.b)})"
    if isinstance(e, Select):
        return (f"select({format_expr(e.cond)}, {format_expr(e.true_value)}, "
                f"{format_expr(e.false_value)})")
    if isinstance(e, Cast):
        return f"{e.dtype}({format_expr(e.value)})"
    return repr(e)


def evaluate_expr(e: Expr, env: dict[Var, int]) -> int:
    """The integer value of an index expression for concrete loop variables."""
    if isinstance(e, IntImm):
        return e.value
    if isinstance(e, Var):
        return env[e]
    if isinstance(e, BinOp):
        a, b = evaluate_expr(e.a, env), evaluate_expr(e.b, env)
        if e.op == "+":
            return a + b
        if e.op == "-":
            return a - b
        if e.op == "*":
            return a * b
        if e.op == "//":
            return a // b
        if e.op == "%":
            return a % b
        if e.op == "min":
            return min(a, b)
        if e.op == "max":
            return max(a, b)
        if e.op == ">>":
            return a >> b
    if isinstance(e, Cmp):
        a, b = evaluate_expr(e.a, env), evaluate_expr(e.b, env)
        return int({"<": a < b, ">=": a >= b, "and": bool(a) and bool(b)}[e.op])
    if isinstance(e, Select):
        return evaluate_expr(e.true_value if evaluate_expr(e.cond, env) else e.false_value, env)
    raise TypeError(f"not an index expression: {format_expr(e)}")


# ---------------------------------------------------------------------- printer
def _flags(s: Stmt) -> str:
    cond = getattr(s, "cond", None)
    return f" if {format_expr(cond)}" if cond is not None else ""


def _lines(s: Stmt, depth: int, out: list[str]) -> None:
    pad = "  " * depth
    if isinstance(s, Seq):
        for item in s.body:
            _lines(item, depth, out)
    elif isinstance(s, For):
        notes = []
        if s.kind is not ForKind.SERIAL:
            notes.append(s.kind.value)
        if s.pragma is not None:
            notes.append(s.pragma.value)
        if s.intrinsic is not None:
            notes.append(f"tensorize {s.intrinsic.name}")
        note = f"  # {', '.join(notes)}" if notes else ""
        out.append(f"{pad}for {s.var.name} in 0..{s.extent}:{note}")
        _lines(s.body, depth + 1, out)
    elif isinstance(s, Allocate):
        b = s.buffer
        base = f" @{b.base}" if b.base is not None else ""
        out.append(f"{pad}alloc {b.name}: {b.scope} {b.dtype}{list(b.shape)}{base}")
        _lines(s.body, depth, out)
    elif isinstance(s, Store):
        idx = ", ".join(format_expr(i) for i in s.indices)
        out.append(f"{pad}{s.buffer.name}[{idx}] = {format_expr(s.value)}")
    elif isinstance(s, DmaCopy):
        kind = "store" if s.store else "load"
        pads = ", ".join(format_expr(p) for p in (s.y_pad_0, s.y_pad_1, s.x_pad_0, s.x_pad_1))
        post = (f" post=(>>{s.shift}, {s.clip_lo}..{s.clip_hi})"
                if s.store and s.mem_type is MemType.ACC else "")
        out.append(
            f"{pad}dma_{kind} {s.mem_type.name} {s.sram!r} <-> {s.dram!r} "
            f"y={format_expr(s.y_size)} x={format_expr(s.x_size)} stride={s.x_stride} "
            f"pad=({pads}){post}"
        )
    elif isinstance(s, Gemm):
        if s.from_acc:
            out.append(f"{pad}gemm_reset {s.dst!r} = {s.src!r}")
        elif s.reset:
            out.append(f"{pad}gemm_reset {s.dst!r}")
        else:
            out.append(f"{pad}gemm {s.dst!r} += {s.src!r} . {s.wgt!r}")
    elif isinstance(s, Alu):
        operand = str(s.imm) if s.src is None else repr(s.src)
        out.append(f"{pad}alu_{s.op.name.lower()} {s.dst!r}, {operand}")
    elif isinstance(s, UopLoop):
        hw = ", ".join(f"{v.name}<{n}" for v, n in s.hw_loops) or "-"
        kern = ", ".join(f"{v.name}<{n}" for v, n in s.kernel_loops) or "-"
        out.append(f"{pad}uop_loop hw[{hw}] kernel[{kern}]:")
        _lines(s.op, depth + 1, out)
    elif isinstance(s, DepPush):
        out.append(f"{pad}push {s.queue.value}{_flags(s)}")
    elif isinstance(s, DepPop):
        out.append(f"{pad}pop {s.queue.value}{_flags(s)}")
    else:
        out.append(f"{pad}<{type(s).__name__}>")


def to_text(node: PrimFunc | Stmt) -> str:
    """Readable text of a function or statement (stable: tests compare it)."""
    out: list[str] = []
    if isinstance(node, PrimFunc):
        params = ", ".join(f"{b.name}: {b.dtype}{list(b.shape)}" for b in node.params)
        out.append(f"func {node.name}({params}):")
        _lines(node.body, 1, out)
    else:
        _lines(node, 0, out)
    return "\n".join(out)


# ---------------------------------------------------------------------- verifier
class IRVerifyError(ValueError):
    """The IR breaks an invariant; the message names the statement and the pass."""


def _expr_vars(e: Expr | None) -> list[Var]:
    if e is None:
        return []
    found = []
    for node in walk(e):
        if isinstance(node, Var):
            found.append(node)
        elif isinstance(node, BufferLoad):
            for i in node.indices:
                found += _expr_vars(i)
    return found


def verify(func: PrimFunc, stage: str = "", hardware_only: bool = False) -> None:
    """Check that every variable is bound by an enclosing loop, loops have positive extents,
    on-chip buffers are used inside their allocation, and (``hardware_only``) that no
    element-level store is left.

    Raises
    ------
    IRVerifyError
        Naming ``stage`` (the pass that ran last) and the offending statement.
    """
    params = set(func.params)

    def fail(why: str) -> IRVerifyError:
        return IRVerifyError(f"after {stage or 'lowering'}: {why}")

    def check(s: Stmt, bound: set[Var], live: set[Buffer]) -> None:
        def uses(e: Expr | None, what: str) -> None:
            for v in _expr_vars(e):
                if v not in bound:
                    raise fail(f"{what} uses {v.name}, which no enclosing loop defines")

        def buf(b: Buffer, what: str) -> None:
            if b not in live and b not in params:
                raise fail(f"{what} uses buffer {b.name} outside its allocation")

        if isinstance(s, Seq):
            for item in s.body:
                check(item, bound, live)
        elif isinstance(s, For):
            if s.extent < 1:
                raise fail(f"loop {s.var.name} has extent {s.extent}")
            if s.var in bound:
                raise fail(f"loop variable {s.var.name} is bound twice")
            check(s.body, bound | {s.var}, live)
        elif isinstance(s, Allocate):
            check(s.body, bound, live | {s.buffer})
        elif isinstance(s, Store):
            if hardware_only:
                raise fail(f"element-level store to {s.buffer.name} was not lowered to hardware")
            buf(s.buffer, "store")
            for i in s.indices:
                uses(i, f"store to {s.buffer.name}")
            uses(s.value, f"store to {s.buffer.name}")
            for node in walk(s.value):
                if isinstance(node, BufferLoad):
                    buf(node.buffer, f"store to {s.buffer.name}")
        elif isinstance(s, DmaCopy):
            buf(s.sram.buffer, "dma")
            buf(s.dram.buffer, "dma")
            for e in (s.sram.index, s.dram.index, s.y_size, s.x_size, s.y_pad_0, s.y_pad_1,
                      s.x_pad_0, s.x_pad_1):
                uses(e, "dma")
        elif isinstance(s, (Gemm, Alu)):
            for ref in (s.dst, s.src, getattr(s, "wgt", None)):
                if ref is not None:
                    buf(ref.buffer, s.__class__.__name__.lower())
                    uses(ref.index, s.__class__.__name__.lower())
        elif isinstance(s, UopLoop):
            inner = set(bound)
            for v, n in s.hw_loops + s.kernel_loops:
                if n < 1:
                    raise fail(f"uop loop {v.name} has extent {n}")
                inner.add(v)
            if len(s.hw_loops) > 2:
                raise fail(f"uop loop has {len(s.hw_loops)} hardware loops, at most 2")
            check(s.op, inner, live)
        elif isinstance(s, (DepPush, DepPop)):
            uses(s.cond, "dependency token")
        else:
            raise fail(f"unknown statement {type(s).__name__}")

    check(func.body, set(), set())
