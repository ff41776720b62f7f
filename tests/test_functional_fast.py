"""The functional simulator's fast paths against a plain loop reference written here.

``sim.functional`` plans micro-op loops, caches the plans by kernel contents, runs regular GEMMs
as batched float products, copies LOAD/STORE rows as bytes and counts instructions per distinct
instruction. :class:`LoopReference` does none of that: it executes one tile per LOAD/STORE
element and one micro-op at a time in int64 arithmetic, in the order of
``accel.machine.tokens.retire_order``, and counts every retired instruction as it goes (the
counters' definitions, ``ActionCounts.add_insn`` included). Random programs
(``accel.testing.randprog``), compiled conv2d and matmul layers and hand-made programs that
reach each fast path run on both; the DRAM images, all five SRAM buffers and
``FsimStats.to_dict()`` must be identical.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest
from numpy.typing import NDArray

from accel.machine.actions import ActionCounts
from accel.machine.builder import ProgramBuilder
from accel.machine.config import HwConfig, load_config
from accel.machine.dram import Dram, place_program
from accel.machine.isa import AluInsn, AluOp, GemmInsn, Insn, MemInsn, MemType, decode_uops
from accel.machine.program import Program, count_key
from accel.machine.tokens import retire_order
from accel.testing.randprog import numpy_pick, random_program
from sim.functional import FsimStats, FunctionalSimulator

BUFFERS = ("uop", "inp", "wgt", "acc", "out")


# --------------------------------------------------------------------------- the reference
def wrap32(value: int) -> int:
    return (value + 2**31) % 2**32 - 2**31


def low8(value: int) -> int:
    return (value + 128) % 256 - 128


def alu_value(op: AluOp, a: int, b: int) -> int:
    """One ALU lane on Python ints (the module docstring of ``sim.functional``)."""
    if op is AluOp.MIN:
        r = min(a, b)
    elif op is AluOp.MAX:
        r = max(a, b)
    elif op is AluOp.ADD:
        r = a + b
    elif op is AluOp.MUL:
        r = a * b
    elif b >= 0:
        r = a >> min(b, 31)
    else:
        r = 0 if -b >= 32 else a << -b
    return wrap32(r)


class LoopReference:
    """One tile, one micro-op at a time; every counter counted per retired instruction."""

    def __init__(self, cfg: HwConfig) -> None:
        self.cfg = cfg
        b, bi, bo = cfg.batch, cfg.block_in, cfg.block_out
        self.uop = np.zeros((cfg.uop_depth, 3), dtype=np.int64)
        self.inp = np.zeros((cfg.inp_depth, b, bi), dtype=np.int8)
        self.wgt = np.zeros((cfg.wgt_depth, bo, bi), dtype=np.int8)
        self.acc = np.zeros((cfg.acc_depth, b, bo), dtype=np.int32)
        self.out = np.zeros((cfg.out_depth, b, bo), dtype=np.int8)
        self.stats = FsimStats()

    def run(self, program: Program, dram: Dram) -> FsimStats:
        program.validate()
        place_program(program, dram)
        self.stats.actions.add_fetch(len(program.insns), self.cfg)
        for _, insn in retire_order(program):
            self.step(insn, dram)
        return self.stats

    def step(self, insn: Insn, dram: Dram) -> None:
        """Execute one instruction and count it."""
        if isinstance(insn, MemInsn):
            (self.store if insn.store else self.load)(insn, dram)
        elif isinstance(insn, GemmInsn):
            self.gemm(insn)
        elif isinstance(insn, AluInsn):
            self.alu(insn)
        key = count_key(insn)
        self.stats.insn_counts[key] = self.stats.insn_counts.get(key, 0) + 1
        self.stats.actions.add_insn(insn, self.cfg)

    def load(self, insn: MemInsn, dram: Dram) -> None:
        if not (insn.y_size and insn.x_size):
            return
        name = insn.mem_type.buffer
        buf = getattr(self, name)
        elem = self.cfg.tile_bytes(name)
        for r in range(insn.rows):
            for c in range(insn.cols):
                y, x = r - insn.y_pad_0, c - insn.x_pad_0
                target = insn.sram_base + r * insn.cols + c
                if not (0 <= y < insn.y_size and 0 <= x < insn.x_size):
                    buf[target] = 0
                    continue
                start = (insn.dram_base + y * insn.x_stride + x) * elem
                raw = dram.data[start : start + elem]
                if insn.mem_type is MemType.UOP:
                    buf[target] = decode_uops(raw.view(f"<u{self.cfg.uop_bytes}"), self.cfg)[0]
                else:
                    buf[target] = raw.view(buf.dtype.newbyteorder("<")).reshape(buf.shape[1:])
        self.stats.bytes_loaded[name] += insn.y_size * insn.x_size * elem

    def store(self, insn: MemInsn, dram: Dram) -> None:
        if not (insn.y_size and insn.x_size):
            return
        elem = self.cfg.out_tile_bytes
        for y in range(insn.y_size):
            for x in range(insn.x_size):
                source = insn.sram_base + y * insn.x_size + x
                if insn.mem_type is MemType.ACC:
                    values = [min(max(int(v) >> insn.shift, insn.clip_lo), insn.clip_hi)
                              for v in self.acc[source].ravel()]
                    tile = np.array(values, dtype=np.int8)
                else:
                    tile = self.out[source].ravel()
                start = (insn.dram_base + y * insn.x_stride + x) * elem
                dram.data[start : start + elem] = tile.view(np.uint8)
        self.stats.bytes_stored += insn.y_size * insn.x_size * elem

    def micro_ops(self, insn: GemmInsn | AluInsn) -> list[tuple[int, int, int]]:
        out = []
        wfo = getattr(insn, "wgt_factor_out", 0)
        wfi = getattr(insn, "wgt_factor_in", 0)
        for i in range(insn.iter_out):
            for j in range(insn.iter_in):
                for d, s, w in self.uop[insn.uop_bgn : insn.uop_end].tolist():
                    out.append((d + i * insn.dst_factor_out + j * insn.dst_factor_in,
                                s + i * insn.src_factor_out + j * insn.src_factor_in,
                                w + i * wfo + j * wfi))
        return out

    def write(self, dst: int, values: NDArray[np.int64]) -> None:
        self.acc[dst] = values
        self.out[dst] = np.array([low8(int(v)) for v in values.ravel()],
                                 dtype=np.int8).reshape(values.shape)

    def gemm(self, insn: GemmInsn) -> None:
        cfg = self.cfg
        for dst, src, w in self.micro_ops(insn):
            if insn.reset:
                self.write(dst, self.acc[src].astype(np.int64) if insn.from_acc
                           else np.zeros(self.acc.shape[1:], dtype=np.int64))
                continue
            a, b = self.inp[src].astype(np.int64), self.wgt[w].astype(np.int64)
            total = self.acc[dst].astype(np.int64) + a @ b.T
            self.write(dst, np.vectorize(wrap32)(total).astype(np.int64))
            self.stats.gemm_uops += 1
            self.stats.macs += cfg.batch * cfg.block_in * cfg.block_out

    def alu(self, insn: AluInsn) -> None:
        for dst, src, _ in self.micro_ops(insn):
            a = self.acc[dst].ravel().tolist()
            b = [insn.imm] * len(a) if insn.use_imm else self.acc[src].ravel().tolist()
            result = [alu_value(insn.alu_op, x, y) for x, y in zip(a, b, strict=True)]
            self.write(dst, np.array(result, dtype=np.int64).reshape(self.acc.shape[1:]))
            self.stats.alu_uops += 1


# --------------------------------------------------------------------------- the comparison
def assert_same_run(program: Program, dram: Dram) -> FunctionalSimulator:
    """Run ``program`` on both; identical DRAM, SRAM and counters. Returns the simulator."""
    ref_image, fast_image = dram.copy(), dram.copy()
    ref = LoopReference(program.config)
    want = ref.run(program, ref_image).to_dict()
    sim = FunctionalSimulator(program.config)
    got = sim.run(program, fast_image).to_dict()
    np.testing.assert_array_equal(fast_image.data, ref_image.data)
    for name in BUFFERS:
        np.testing.assert_array_equal(getattr(sim.sram, name), getattr(ref, name), err_msg=name)
    assert got == want
    assert list(got["insn_counts"]) == list(want["insn_counts"])  # first-retired order too
    return sim


CONFIGS = {
    "default": lambda: load_config(),
    "tiny": lambda: load_config("tiny"),
    "vta": lambda: load_config("vta_1x16x16"),
    "tiny_ra": lambda: load_config("tiny").replace(**{"gemm.reset_from_acc": True}),
    "tiny_batch2": lambda: load_config("tiny").replace(**{"core.batch": 2}),
    "default_alu": lambda: load_config("default_alu"),
}


@pytest.fixture(scope="module")
def configs() -> dict[str, HwConfig]:
    return {name: make() for name, make in CONFIGS.items()}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_random_programs_match_the_loop_reference(configs: dict[str, HwConfig],
                                                  name: str) -> None:
    cfg = configs[name]
    rng = np.random.default_rng(sum(map(ord, name)))
    for _ in range(6):
        program, dram = random_program(cfg, numpy_pick(rng), iterations=int(rng.integers(2, 5)))
        assert_same_run(program, dram)


def random_image(program: Program, rng: np.random.Generator) -> Dram:
    """A DRAM image with the program's regions, every byte random (inputs, bias, junk)."""
    image = Dram()
    for region in program.regions.values():
        image.add_region(region)
    image.data[:] = rng.integers(0, 256, image.nbytes, dtype=np.uint8)
    return image


LAYERS = [
    ("default", "conv2d", (1, 16, 10, 10, 16, 3, 3, 1, 1, 1, 1, True, 7, True)),
    ("default", "conv2d", (1, 8, 9, 9, 24, 3, 3, 2, 2, 1, 1, False, 4, False)),
    ("default", "conv2d", (1, 16, 7, 7, 8, 1, 1, 1, 1, 0, 0, True, 6, True)),
    ("tiny", "conv2d", (1, 8, 6, 6, 8, 3, 3, 1, 1, 1, 1, True, 4, True)),
    ("vta", "conv2d", (1, 32, 6, 6, 16, 3, 3, 1, 1, 1, 1, True, 8, False)),
    ("default", "matmul", (16, 100, 33, True, 6, True)),
    ("vta", "matmul", (7, 64, 40, False, 0, False)),
]


@pytest.mark.parametrize(("name", "op", "shape"), LAYERS)
def test_compiled_layers_match_the_loop_reference(configs: dict[str, HwConfig], name: str,
                                                  op: str, shape: tuple[Any, ...]) -> None:
    from compiler.ops.compiled import compile_conv2d, compile_matmul
    from compiler.ops.conv2d import Conv2dWorkload
    from compiler.ops.matmul import MatmulWorkload

    cfg = configs[name]
    compiled = (compile_conv2d(Conv2dWorkload(*shape), cfg) if op == "conv2d"
                else compile_matmul(MatmulWorkload(*shape), cfg))
    image = random_image(compiled.program, np.random.default_rng(len(shape)))
    assert_same_run(compiled.program, image)


# --------------------------------------------------------------------------- each fast path
def gemm_program(cfg: HwConfig, kernel: list[tuple[int, int, int]], rng: np.random.Generator,
                 loops: dict[str, int] | None = None, reload: bool = False,
                 fill: int | None = None) -> tuple[Program, Dram]:
    """LOAD UOP/ACC/INP/WGT (random contents, or inp and wgt all ``fill`` but for the first
    element, ``fill - 1``), one GEMM of
    ``kernel`` (three, reloading another kernel and it in between, with ``reload``), STORE the
    whole acc slot, FINISH."""
    n_inp, n_wgt, n_acc = min(cfg.inp_depth, 512), min(cfg.wgt_depth, 256), min(cfg.acc_depth,
                                                                                  256)

    def int8(shape: tuple[int, ...]) -> NDArray[np.int8]:
        if fill is not None:
            full = np.full(shape, fill, dtype=np.int8)
            full.flat[0] = fill - 1
            return full
        return rng.integers(-128, 128, shape, dtype=np.int8)

    b = ProgramBuilder(cfg)
    inp = b.tensor("inp", int8((n_inp, cfg.batch, cfg.block_in)))
    wgt = b.tensor("wgt", int8((n_wgt, cfg.block_out, cfg.block_in)))
    acc = b.tensor("acc", rng.integers(-2**31, 2**31, (n_acc, cfg.batch, cfg.block_out),
                                       dtype=np.int32))
    out = b.buffer("out", n_acc * cfg.out_tile_bytes, cfg.out_tile_bytes)
    k = b.uops(kernel)
    other = b.uops([(d, s, (w + 1) % n_wgt) for d, s, w in kernel])
    n = k[1] - k[0]
    b.load(MemType.UOP, dram_base=b.uop_base + k[0], x_size=n, x_stride=n)
    b.load(MemType.ACC, dram_base=acc, x_size=n_acc, x_stride=n_acc)
    b.load(MemType.INP, dram_base=inp, x_size=n_inp, x_stride=n_inp)
    b.load(MemType.WGT, dram_base=wgt, x_size=n_wgt, x_stride=n_wgt, push_next=True)
    b.gemm(uop_bgn=0, uop_end=n, pop_prev=True, **(loops or {}))
    if reload:  # another kernel in the same range, then the first one again
        for span in (other, k):
            b.load(MemType.UOP, dram_base=b.uop_base + span[0], x_size=n, x_stride=n)
            b.gemm(uop_bgn=0, uop_end=n, **(loops or {}))
    b.gemm(uop_bgn=0, uop_end=0, push_next=True)
    b.store(dram_base=out, x_size=n_acc, x_stride=n_acc, pop_prev=True, push_prev=True)
    b.finish(pop_next=True)
    return b.build()


def conv_kernel(rows: int, taps: int, sets: int, dst_step: int = 1,
                shared: bool = True) -> list[tuple[int, int, int]]:
    """``sets`` x ``rows`` destinations, each summing ``taps`` products; set ``g`` uses weight
    tiles ``g * taps + t``; sources shared by the sets or not."""
    return [((g * rows + r) * dst_step, r + t + (0 if shared else 7 * g), g * taps + t)
            for g in range(sets) for r in range(rows) for t in range(taps)]


def block_plan(sim: FunctionalSimulator) -> Any:
    plans = [p for p in sim._plans_by_kernel.values() if p.blocks is not None]
    assert plans, "the GEMM did not take the block path"
    return plans[0].blocks


@pytest.mark.parametrize("case", ["shared", "shared_narrow", "separate", "unequal_sets",
                                  "strided_dst", "loops", "reload"])
def test_block_gemm_forms_match_the_loop_reference(configs: dict[str, HwConfig], case: str,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import sim.functional

    if case == "shared_narrow":   # one product per set, not the sets side by side
        monkeypatch.setattr(sim.functional, "_WIDE_PRODUCT", 0)
    cfg = configs["default"]
    rng = np.random.default_rng(sum(map(ord, case)))
    loops: dict[str, int] = {}
    if case == "unequal_sets":       # 40 destinations of one weight sequence, 24 of another
        kernel = conv_kernel(40, 3, 1) + [(40 + d, s, 3 + w) for d, s, w in conv_kernel(24, 3, 1)]
    elif case == "strided_dst":
        kernel = conv_kernel(32, 3, 2, dst_step=3)
    elif case == "separate":
        kernel = conv_kernel(32, 3, 2, shared=False)
    elif case == "loops":            # accumulation across the hardware loops
        kernel, loops = conv_kernel(16, 3, 2), {"iter_out": 3, "iter_in": 2, "src_factor_out": 5,
                                                "src_factor_in": 1, "wgt_factor_out": 6}
    else:
        kernel = conv_kernel(48, 3, 2)
    program, dram = gemm_program(cfg, kernel, rng, loops, reload=case == "reload")
    sim = assert_same_run(program, dram)
    blocks = block_plan(sim)
    expect = {"shared": (True, True), "shared_narrow": (True, True), "separate": (False, True),
              "unequal_sets": (False, True), "strided_dst": (True, False), "loops": (True, True),
              "reload": (True, True)}[case]
    assert (blocks.shared, blocks.dest_range is not None) == expect
    assert blocks.wide == (blocks.shared and case != "shared_narrow")
    assert (blocks.bounds is not None) == (case == "unequal_sets")


def test_block_gemm_in_float64_and_with_batch_2(configs: dict[str, HwConfig]) -> None:
    """A reduction of more than 1024 products (float64 on vta's 16-wide blocks; with 127s,
    one 126, a sum is odd and above 2**24, which float32 cannot hold) and a batch of two rows
    per destination take the same block path."""
    rng = np.random.default_rng(3)
    vta = configs["vta"]
    for fill in (127, None):
        sim = assert_same_run(*gemm_program(vta, conv_kernel(2, 70, 2), rng, fill=fill))
        assert block_plan(sim).m * vta.block_in > 1024
    batch2 = configs["tiny_batch2"]
    sim = assert_same_run(*gemm_program(batch2, conv_kernel(24, 3, 2), rng))
    assert block_plan(sim).shared


def test_resets_match_the_loop_reference(configs: dict[str, HwConfig]) -> None:
    """Resets to zero of a range and of scattered tiles, and resets that copy acc tiles
    (``gemm.reset_from_acc``) of a range written out of order, of scattered tiles, and of
    tiles read after an earlier micro-op wrote them (one by one)."""
    cfg = configs["default"]
    assert cfg.gemm.reset_from_acc
    rng = np.random.default_rng(13)
    b = ProgramBuilder(cfg)
    acc = b.tensor("acc", rng.integers(-2**31, 2**31, (96, cfg.batch, cfg.block_out),
                                       dtype=np.int32))
    out = b.buffer("out", 96 * cfg.out_tile_bytes, cfg.out_tile_bytes)
    kernels = [[(3, 0, 0)], [(40, 0, 0)], [(58, 80, 0), (50, 81, 0)], [(60, 90, 0)],
               [(70, 72, 0), (72, 71, 0)]]
    spans = [b.uops(k) for k in kernels]
    n = spans[-1][1]
    b.load(MemType.UOP, dram_base=b.uop_base, x_size=n, x_stride=n)
    b.load(MemType.ACC, dram_base=acc, x_size=96, x_stride=96)
    loops = [{"iter_in": 20, "dst_factor_in": 1},                       # acc[3:23] = 0
             {"iter_out": 3, "iter_in": 4, "dst_factor_out": 5, "dst_factor_in": 1},
             {"iter_in": 8, "dst_factor_in": 1, "src_factor_in": 1},    # acc[50:66], reordered
             {"iter_in": 5, "dst_factor_in": 2, "src_factor_in": 1},    # scattered copies
             {"iter_in": 2, "dst_factor_in": 1}]                        # reads what it wrote
    for k, ((bgn, end), fields) in enumerate(zip(spans, loops, strict=True)):
        b.gemm(reset=True, from_acc=k >= 2, uop_bgn=bgn, uop_end=end,
               push_next=k == len(spans) - 1, **fields)
    b.store(dram_base=out, x_size=96, x_stride=96, pop_prev=True, push_prev=True)
    b.finish(pop_next=True)
    program, dram = b.build()
    sim = assert_same_run(program, dram)
    plans = list(sim._plans_by_kernel.values())
    assert [p.dst_range is not None for p in plans] == [True, False, True, False, False]
    assert [p.vectorisable for p in plans][2:] == [True, True, False]


def test_loads_and_stores_through_every_row_layout(configs: dict[str, HwConfig]) -> None:
    """Contiguous, strided, overlapping (stride below the row) and zero-stride DRAM rows, with
    and without padding, strided rows ending at the last byte of the image, and stores."""
    cfg = configs["default"]
    rng = np.random.default_rng(11)
    b = ProgramBuilder(cfg)
    src = b.tensor("src", rng.integers(-128, 128, (60, cfg.batch, cfg.block_in), dtype=np.int8))
    accs = b.tensor("accs", rng.integers(-2**31, 2**31, (30, cfg.batch, cfg.block_out),
                                         dtype=np.int32))
    out = b.buffer("out", 64 * cfg.out_tile_bytes, cfg.out_tile_bytes)
    b.tensor("tail", rng.integers(-128, 128, (16, cfg.batch, cfg.block_in), dtype=np.int8))
    cases: list[dict[str, int]] = [
        {"y_size": 1, "x_size": 7, "x_stride": 7}, {"y_size": 3, "x_size": 4, "x_stride": 9},
        {"y_size": 3, "x_size": 5, "x_stride": 2}, {"y_size": 4, "x_size": 3, "x_stride": 0},
        {"y_size": 3, "x_size": 4, "x_stride": 9, "y_pad_0": 1, "y_pad_1": 2, "x_pad_0": 2,
         "x_pad_1": 1},
        {"y_size": 2, "x_size": 5, "x_stride": 5, "x_pad_1": 3},
        {"y_size": 3, "x_size": 3, "x_stride": 5},   # moved to the image's end below
    ]
    base = 0
    for k, fields in enumerate(cases):
        b.load(MemType.INP, sram_base=base, dram_base=src, push_next=k == len(cases) - 1,
               **fields)
        base += ((fields.get("y_pad_0", 0) + fields["y_size"] + fields.get("y_pad_1", 0))
                 * (fields.get("x_pad_0", 0) + fields["x_size"] + fields.get("x_pad_1", 0)))
    b.load(MemType.ACC, sram_base=0, dram_base=accs, y_size=3, x_size=6, x_stride=10,
           y_pad_0=1, x_pad_0=1, pop_prev=True)
    b.gemm(uop_bgn=0, uop_end=0, push_next=True)
    b.store(mem_type=MemType.ACC, sram_base=0, dram_base=out, y_size=2, x_size=8, x_stride=11,
            shift=3, clip_lo=-50, clip_hi=90, pop_prev=True)
    b.store(sram_base=4, dram_base=out + 30, y_size=1, x_size=9, x_stride=9, push_prev=True)
    b.finish(pop_next=True)
    program, dram = b.build()
    last = len(cases) - 1                        # its last row's last tile: the image's last
    elems = dram.nbytes // cfg.inp_tile_bytes
    program.insns[last] = dataclasses.replace(program.insns[last], dram_base=elems - 13)
    assert (elems - 13 + 2 * 5 + 3) * cfg.inp_tile_bytes == dram.nbytes
    assert_same_run(program, dram)


def test_counts_do_not_read_dram_addresses_or_immediates(configs: dict[str, HwConfig]) -> None:
    """The simulator counts per instruction with ``dram_base`` and ``imm`` left out of the
    key (and every other field in it): no count may depend on them."""
    from sim.functional import _count_key

    load = MemInsn(mem_type=MemType.INP, x_size=2, x_stride=2)
    alu = AluInsn(alu_op=AluOp.ADD, uop_end=1, use_imm=True)
    for insn in (load, alu, GemmInsn(uop_end=1)):
        for f in dataclasses.fields(insn):
            value = getattr(insn, f.name)
            other = (not value if isinstance(value, bool) else
                     MemType.WGT if isinstance(value, MemType) else
                     AluOp.MUL if isinstance(value, AluOp) else value + 1)
            same = _count_key(dataclasses.replace(insn, **{f.name: other})) == _count_key(insn)
            assert same == (f.name in ("dram_base", "imm")), f.name
    rng = np.random.default_rng(5)
    for cfg in configs.values():
        program, _ = random_program(cfg, numpy_pick(rng))
        for insn in program.insns:
            if isinstance(insn, MemInsn):
                other = dataclasses.replace(insn, dram_base=insn.dram_base + 12345)
            elif isinstance(insn, AluInsn):
                other = dataclasses.replace(insn, imm=-insn.imm - 7)
            else:
                continue
            one, two = ActionCounts(), ActionCounts()
            one.add_insn(insn, cfg)
            two.add_insn(other, cfg)
            assert one == two and count_key(insn) == count_key(other)


def test_stats_read_between_instructions(configs: dict[str, HwConfig]) -> None:
    """``execute`` one instruction at a time (as the timing simulator does) and read ``stats``
    after each: the counts so far, each time."""
    cfg = configs["tiny"]
    program, dram = random_program(cfg, numpy_pick(np.random.default_rng(8)))
    ref, sim = LoopReference(cfg), FunctionalSimulator(cfg)
    ref_image, image = dram.copy(), dram.copy()
    program.validate()
    place_program(program, ref_image)
    place_program(program, image)
    for index, insn in retire_order(program):
        sim.execute(insn, index, image)
        ref.step(insn, ref_image)
        assert sim.stats.to_dict() == ref.stats.to_dict()
    np.testing.assert_array_equal(image.data, ref_image.data)
