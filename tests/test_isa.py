"""ISA encode/decode, program files, assembly text and their error messages."""

from __future__ import annotations

import dataclasses
import re
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accel.cli import main
from accel.machine.config import HwConfig, load_config, shipped_configs
from accel.machine.isa import (
    DEP_FLAGS,
    INSN_BYTES,
    AluInsn,
    AluOp,
    DecodeError,
    EncodeError,
    FieldSpec,
    FinishInsn,
    GemmInsn,
    Insn,
    IsaLayout,
    MemInsn,
    MemType,
    Module,
    Opcode,
    decode_insn,
    decode_uops,
    encode_insn,
    encode_insns,
    encode_uops,
    module_of,
)
from accel.machine.program import (
    AsmError,
    Program,
    ProgramError,
    ProgramFormatError,
    Region,
    _all_valid,
    _check_insn,
    assemble,
    disassemble,
    token_trace,
)

CONFIGS = {name: load_config(name) for name in shipped_configs()}


def field_value(f: FieldSpec) -> st.SearchStrategy[int]:
    return st.integers(f.lo, f.hi)


@st.composite
def instructions(draw: st.DrawFn, cfg: HwConfig) -> Insn:
    """Any encodable instruction of any kind, every field drawn over its full range."""
    layout = IsaLayout.of(cfg)
    opcode = draw(st.sampled_from(list(Opcode)))
    fmt = layout.formats[opcode]
    kwargs: dict[str, object] = {}
    for f in fmt.fields[1:]:
        if f.name in (*DEP_FLAGS, "reset", "use_imm"):
            kwargs[f.name] = draw(st.booleans())
        elif f.name == "mem_type":
            kwargs[f.name] = draw(st.sampled_from(list(MemType)))
        elif f.name == "alu_op":
            kwargs[f.name] = draw(st.sampled_from(list(AluOp)))
        else:
            kwargs[f.name] = draw(field_value(f))
    if opcode in (Opcode.LOAD, Opcode.STORE):
        return MemInsn(store=opcode is Opcode.STORE, **kwargs)  # type: ignore[arg-type]
    cls = {Opcode.GEMM: GemmInsn, Opcode.ALU: AluInsn, Opcode.FINISH: FinishInsn}[opcode]
    return cls(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_encode_decode_round_trip(name: str) -> None:
    cfg = CONFIGS[name]

    @settings(max_examples=300, deadline=None)
    @given(instructions(cfg))
    def check(insn: Insn) -> None:
        word = encode_insn(insn, cfg)
        assert 0 <= word < 1 << 128
        assert decode_insn(word, cfg) == insn

    check()


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_encode_insns_is_encode_insn_of_each(name: str) -> None:
    """The numpy packing of a whole list gives each instruction's own words, every format
    mixed, fields across bit 64 and negative immediates included."""
    cfg = CONFIGS[name]

    @settings(max_examples=60, deadline=None)
    @given(st.lists(instructions(cfg), max_size=40))
    def check(insns: list[Insn]) -> None:
        expected = b"".join(encode_insn(i, cfg).to_bytes(INSN_BYTES, "little") for i in insns)
        assert encode_insns(insns, cfg) == expected

    check()


def test_encode_insns_names_the_first_instruction_that_does_not_fit() -> None:
    cfg = load_config()
    ok = [FinishInsn(), GemmInsn(uop_bgn=1, uop_end=2), AluInsn(alu_op=AluOp.ADD, imm=-5)]
    bad_alu = AluInsn(alu_op=AluOp.ADD, use_imm=True, imm=40000)
    bad_gemm = GemmInsn(uop_bgn=2048, uop_end=2049)
    with pytest.raises(EncodeError, match="^" + re.escape(
            "instruction 4: GEMM.uop_bgn = 2048 does not fit its 11-bit field (0..2047)") + "$"):
        encode_insns([*ok, ok[1], bad_gemm, bad_alu], cfg)
    with pytest.raises(EncodeError, match="^" + re.escape(
            "instruction 3: ALU.imm = 40000 does not fit its 16-bit signed field "
            "(-32768..32767)") + "$"):
        encode_insns([*ok, bad_alu, bad_gemm], cfg)
    # A value numpy cannot hold as int64 gets encode_insn's message too.
    with pytest.raises(EncodeError, match=re.escape("instruction 1: GEMM.uop_end = 36893488147419"
                                                    "103232 does not fit")):
        encode_insns([ok[0], GemmInsn(uop_bgn=1, uop_end=1 << 65)], cfg)
    assert encode_insns([], cfg) == b""


@st.composite
def near_valid_instructions(draw: st.DrawFn, cfg: HwConfig) -> Insn:
    """Instructions about half of which pass ``_check_insn``: small sizes and ranges near the
    buffer depths, any flags, any memory type and ALU op, the odd huge or negative value."""
    edges = [d + k for t in MemType for d in (cfg.depth(t.buffer),) for k in (-1, 0, 1)]
    number = st.one_of(st.integers(0, 4), st.integers(0, 300), st.integers(-3, 2),
                       st.sampled_from([*edges, 1 << 40, -(1 << 62)]))
    flags = {f: draw(st.booleans() if draw(st.booleans()) else st.just(False))
             for f in DEP_FLAGS}
    kind = draw(st.sampled_from(["load", "store", "gemm", "alu", "finish"]))
    if kind in ("load", "store"):
        # Mostly what each may have (a STORE: OUT, no padding), so that one fault decides.
        store = kind == "store"
        names = ("y_pad_0", "y_pad_1", "x_pad_0", "x_pad_1")
        if not store:
            pads = {f: draw(st.just(0) | number) for f in names}
        else:    # a STORE: no padding, or one pad set
            pads = dict.fromkeys(names, 0)
            if draw(st.integers(0, 4)) == 0:
                pads[draw(st.sampled_from(names))] = draw(st.integers(1, 3))
        types = [MemType.OUT] * 4 + list(MemType) if store else list(MemType)
        insn = MemInsn(store=store, mem_type=draw(st.sampled_from(types)),
                       sram_base=draw(number), y_size=draw(number), x_size=draw(number),
                       **pads, **flags)
        if draw(st.booleans()):    # end just inside, at or just past the buffer's end
            base = cfg.depth(insn.mem_type.buffer) - insn.sram_elems + draw(st.integers(-1, 1))
            insn = dataclasses.replace(insn, sram_base=base)
        return insn
    if kind == "finish":
        return FinishInsn(**flags)
    loop = {"uop_bgn": draw(number), "uop_end": draw(number)}
    if kind == "gemm":   # a reset that copies from acc needs gemm.reset_from_acc
        return GemmInsn(**loop, reset=draw(st.booleans()), from_acc=draw(st.booleans()),
                        **flags)
    return AluInsn(alu_op=draw(st.sampled_from([AluOp.SHR] * 3 + list(AluOp))),
                   use_imm=draw(st.booleans()),
                   imm=draw(st.sampled_from([-32, -31, 31, 32]) | st.integers(-40, 40)),
                   **loop, **flags)


def _passes(insn: Insn, cfg: HwConfig) -> bool:
    try:
        _check_insn(0, insn, cfg)
    except ProgramError:
        return False
    return True


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_all_valid_is_check_insn_of_each(name: str) -> None:
    """The numpy check of a whole list never says valid when an instruction fails the
    one-at-a-time check, and says valid when all pass, unless a field is too large for its
    int64 arithmetic (then ``validate`` runs the loop)."""
    cfg = CONFIGS[name]
    verdicts = []

    @settings(max_examples=600, deadline=None)
    @given(st.lists(near_valid_instructions(cfg), min_size=1, max_size=3))
    def check(insns: list[Insn]) -> None:
        expected = all(_passes(i, cfg) for i in insns)
        verdicts.append(expected)
        huge = any(isinstance(v, int) and abs(v) >= 1 << 29
                   for i in insns for v in vars(i).values())
        if huge:
            assert not _all_valid(insns, cfg) or expected
        else:
            assert _all_valid(insns, cfg) == expected

    check()
    assert 30 < sum(verdicts) < len(verdicts) - 30   # both verdicts were tried, many times


def test_validate_names_the_first_invalid_instruction() -> None:
    """``validate`` still reports the first instruction that fails, after the numpy check."""
    cfg = load_config("tiny")
    ok = [GemmInsn(uop_bgn=0, uop_end=1), MemInsn(mem_type=MemType.INP, y_size=2, x_size=2)]
    bad_store = MemInsn(store=True, mem_type=MemType.OUT, x_pad_0=1)
    bad_load = MemInsn(mem_type=MemType.INP, sram_base=cfg.depth("inp"))
    program = Program(cfg, [*ok, bad_load, *ok, bad_store, FinishInsn()])
    with pytest.raises(ProgramError, match="^" + re.escape(
            f"instruction 2 (LOAD_INP): SRAM range [{cfg.depth('inp')}, {cfg.depth('inp') + 1}) "
            f"exceeds the inp buffer depth {cfg.depth('inp')}") + "$"):
        program.validate()
    Program(cfg, [*ok, FinishInsn()]).validate()


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_uop_round_trip(name: str) -> None:
    cfg = CONFIGS[name]
    fmt = IsaLayout.of(cfg).uop

    @settings(max_examples=100, deadline=None)
    @given(st.lists(st.tuples(*(field_value(f) for f in fmt.fields)), max_size=20))
    def check(uops: list[tuple[int, int, int]]) -> None:
        arr = np.array(uops, dtype=np.int64).reshape(-1, 3)
        words = encode_uops(arr, cfg)
        assert words.dtype == (np.uint32 if cfg.uop_bytes == 4 else np.uint64)
        np.testing.assert_array_equal(decode_uops(words, cfg), arr)

    check()


def test_layout_starts_with_opcode_and_flags() -> None:
    layout = IsaLayout.of(load_config("vta_1x16x16"))
    gemm = layout.formats[Opcode.GEMM]
    assert [(f.name, f.lsb, f.width) for f in gemm.fields[:5]] == [
        ("opcode", 0, 3), ("pop_prev", 3, 1), ("pop_next", 4, 1), ("push_prev", 5, 1),
        ("push_next", 6, 1),
    ]
    assert gemm.field("uop_bgn").width == 13 and gemm.field("uop_end").width == 14
    assert gemm.field("wgt_factor_in").width == 10
    assert layout.formats[Opcode.ALU].field("imm").signed
    assert [f.width for f in layout.uop.fields] == [11, 11, 10]


def test_known_encoding() -> None:
    cfg = load_config("vta_1x16x16")
    assert encode_insn(FinishInsn(), cfg) == 3
    assert encode_insn(FinishInsn(pop_prev=True, push_next=True), cfg) == 3 | 1 << 3 | 1 << 6
    load = MemInsn(mem_type=MemType.INP, sram_base=5, dram_base=7, y_size=1, x_size=2,
                   x_stride=2)
    word = encode_insn(load, cfg)
    assert word & 7 == Opcode.LOAD
    assert (word >> 7) & 7 == MemType.INP
    assert (word >> 10) & 0x1FFF == 5


def test_field_overflow_names_the_field() -> None:
    cfg = load_config()
    with pytest.raises(
        EncodeError,
        match="^" + re.escape("GEMM.uop_bgn = 2048 does not fit its 11-bit field (0..2047)") + "$",
    ):
        encode_insn(GemmInsn(uop_bgn=2048, uop_end=2049), cfg)
    with pytest.raises(EncodeError, match=re.escape("ALU.imm = 40000 does not fit its 16-bit "
                                                    "signed field (-32768..32767)")):
        encode_insn(AluInsn(alu_op=AluOp.ADD, use_imm=True, imm=40000), cfg)
    with pytest.raises(EncodeError, match=re.escape("uop 1: wgt = 1024 does not fit its 10-bit "
                                                    "field (0..1023)")):
        encode_uops(np.array([[0, 0, 0], [0, 0, 1024]]), cfg)


def test_decode_rejects_malformed_words() -> None:
    cfg = load_config()
    with pytest.raises(DecodeError, match=r"^unknown opcode 7$"):
        decode_insn(7, cfg)
    bad_mem = Opcode.LOAD | 6 << 7
    with pytest.raises(DecodeError, match=r"^unknown memory type 6$"):
        decode_insn(bad_mem, cfg)
    alu = encode_insn(AluInsn(alu_op=AluOp.MIN), cfg) | 7 << 7
    with pytest.raises(DecodeError, match=r"^unknown ALU opcode 7$"):
        decode_insn(alu, cfg)
    with pytest.raises(DecodeError, match=r"^FINISH has non-zero bits above bit 6$"):
        decode_insn(3 | 1 << 100, cfg)


def test_routing() -> None:
    assert module_of(MemInsn(mem_type=MemType.INP)) is Module.LOAD
    assert module_of(MemInsn(mem_type=MemType.WGT)) is Module.LOAD
    assert module_of(MemInsn(mem_type=MemType.UOP)) is Module.COMPUTE
    assert module_of(MemInsn(mem_type=MemType.ACC)) is Module.COMPUTE
    assert module_of(MemInsn(store=True, mem_type=MemType.OUT)) is Module.STORE
    assert module_of(GemmInsn()) is Module.COMPUTE
    assert module_of(AluInsn(alu_op=AluOp.ADD)) is Module.COMPUTE
    assert module_of(FinishInsn()) is Module.COMPUTE


# ---------------------------------------------------------------------- programs
def sample_program(cfg: HwConfig) -> Program:
    insns: list[Insn] = [
        MemInsn(mem_type=MemType.UOP, sram_base=0, dram_base=0, y_size=1, x_size=3, x_stride=3),
        MemInsn(mem_type=MemType.INP, sram_base=0, dram_base=64, y_size=2, x_size=2, x_stride=4,
                y_pad_0=1, x_pad_1=1, push_next=True),
        GemmInsn(reset=True, uop_bgn=0, uop_end=3, iter_out=2, iter_in=1, dst_factor_out=3,
                 pop_prev=True),
        AluInsn(alu_op=AluOp.SHR, uop_bgn=0, uop_end=3, use_imm=True, imm=-3),
        AluInsn(alu_op=AluOp.ADD, uop_bgn=1, uop_end=2, src_factor_in=1, iter_in=2),
        MemInsn(store=True, mem_type=MemType.OUT, sram_base=0, dram_base=512, y_size=1,
                x_size=6, x_stride=6, push_next=False, pop_prev=False),
        FinishInsn(),
    ]
    return Program(
        cfg,
        insns,
        np.array([[0, 0, 0], [1, 1, 0], [2, 2, 1]]),
        {
            "uop": Region("uop", 0, 64),
            "inp": Region("inp", 512, 256, (1, 2, 4, 4, 1, 8), "int8", "NCHW1n8c"),
            "out": Region("out", 4096, 48),
        },
        uop_region="uop",
        meta={"op": "sample", "knobs": {"tile_h": 2}},
    )


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_program_binary_and_text_round_trip(name: str, tmp_path: Path) -> None:
    program = sample_program(CONFIGS[name])
    program.validate()
    data = program.to_bytes()
    again = Program.from_bytes(data)
    assert again.insns == program.insns
    np.testing.assert_array_equal(again.uops, program.uops)
    assert again.regions == program.regions and again.meta == program.meta
    assert again.config == program.config
    text = disassemble(program)
    assert assemble(text).to_bytes() == data
    path = tmp_path / "p.bin"
    program.save(path)
    assert Program.load(path).to_bytes() == data


def test_disassembly_shows_running_token_counts() -> None:
    cfg = load_config()
    program = Program(cfg, [
        MemInsn(mem_type=MemType.INP, push_next=True),
        MemInsn(mem_type=MemType.INP, push_next=True),
        GemmInsn(pop_prev=True, push_next=True),
        MemInsn(store=True, mem_type=MemType.OUT, pop_prev=True, push_prev=True),
        GemmInsn(pop_prev=True),
        FinishInsn(pop_next=True),
    ])
    lines = [ln for ln in disassemble(program).splitlines() if re.match(r"\s+\d+: [A-Z]", ln)]
    assert lines[0].endswith("; load    l2c=1 c2l=0 c2s=0 s2c=0")
    assert lines[1].endswith("; load    l2c=2 c2l=0 c2s=0 s2c=0")
    assert lines[2].endswith("; compute l2c=1 c2l=0 c2s=1 s2c=0")
    assert lines[3].endswith("; store   l2c=1 c2l=0 c2s=0 s2c=1")
    assert lines[5].endswith("; compute l2c=0 c2l=0 c2s=0 s2c=0")
    trace = token_trace(program.insns)
    assert [sum(t.values()) for t in trace] == [1, 2, 2, 2, 1, 0]


def corrupt(data: bytes, at: int, value: int) -> bytes:
    out = bytearray(data)
    out[at] = value
    return bytes(out)


def with_crc(body: bytes) -> bytes:
    return body + struct.pack("<I", zlib.crc32(body))


def test_corrupt_and_truncated_files_give_clear_errors(tmp_path: Path) -> None:
    cfg = load_config()
    data = sample_program(cfg).to_bytes()
    cases = {
        "short.bin": (data[:10], "truncated: 10 bytes is shorter than the file header"),
        "magic.bin": (b"NOTAPROG" + data[8:], "not an accel program (magic b'NOTAPROG', "
                                               "expected b'ACCELPRG')"),
        "cut.bin": (data[:-20], "checksum mismatch: the file is corrupt or truncated"),
        "flip.bin": (corrupt(data, len(data) - 30, data[-30] ^ 0xFF),
                     "checksum mismatch: the file is corrupt or truncated"),
        "version.bin": (with_crc(data[:8] + b"\x09\x00" + data[10:-4]),
                        "unsupported program format version 9 (expected 1)"),
        "hdr.bin": (with_crc(data[:16] + b"[" + data[17:-4]), "malformed header: "),
    }
    for fname, (blob, message) in cases.items():
        path = tmp_path / fname
        path.write_bytes(blob)
        with pytest.raises(ProgramFormatError, match="^" + re.escape(f"{path}: {message}")):
            Program.load(path)
    # A word that decodes to nothing, checksum intact: the error names the instruction.
    hlen = struct.unpack_from("<I", data, 12)[0]
    first = 16 + hlen + INSN_BYTES  # instruction 1
    bad = with_crc(data[:first] + bytes([0x07]) + data[first + 1 : -4])
    path = tmp_path / "opcode.bin"
    path.write_bytes(bad)
    with pytest.raises(ProgramFormatError,
                       match="^" + re.escape(f"{path}: instruction 1: unknown opcode 7") + "$"):
        Program.load(path)
    with pytest.raises(ProgramFormatError, match=re.escape("built for config 1x8x8_i8w8a32_u8k_i32k"
                                                           "_w64k_a32k_o8_rr_pp_ra, not 1x16x16")):
        Program.from_bytes(data, config=load_config("vta_1x16x16"))


def test_validate_names_the_instruction() -> None:
    cfg = load_config()
    cases = [
        (MemInsn(mem_type=MemType.INP, sram_base=4090, y_size=2, x_size=4, x_stride=4),
         "instruction 0 (LOAD_INP): SRAM range [4090, 4098) exceeds the inp buffer depth 4096"),
        (MemInsn(store=True, mem_type=MemType.WGT),
         "instruction 0 (STORE_WGT): STORE supports memory types OUT and ACC only, got WGT"),
        (MemInsn(store=True, mem_type=MemType.OUT, shift=3),
         "instruction 0 (STORE_OUT): shift and clip bounds belong to a STORE ACC only"),
        (MemInsn(mem_type=MemType.OUT),
         "instruction 0 (LOAD_OUT): LOAD cannot target the OUT buffer"),
        (MemInsn(mem_type=MemType.WGT, pop_prev=True),
         "instruction 0 (LOAD_WGT): pop_prev is not allowed on the load module"),
        (MemInsn(store=True, mem_type=MemType.OUT, push_next=True),
         "instruction 0 (STORE_OUT): push_next is not allowed on the store module"),
        (GemmInsn(uop_bgn=10, uop_end=3000),
         "instruction 0 (GEMM): micro-op range [10, 3000) is outside the uop buffer of depth 2048"),
        (AluInsn(alu_op=AluOp.SHR, use_imm=True, imm=40),
         "instruction 0 (ALU_SHR): SHR amount 40 is outside -31..31"),
    ]
    for insn, message in cases:
        with pytest.raises(ProgramError, match="^" + re.escape(message) + "$"):
            Program(cfg, [insn, FinishInsn()]).validate()
    with pytest.raises(ProgramError, match=r"^program has no FINISH instruction$"):
        Program(cfg, [GemmInsn()]).validate()
    with pytest.raises(ProgramError, match="^" + re.escape(
            "instruction 0 (STORE_ACC): STORE ACC needs the post-processing store "
            "(store.postproc)") + "$"):
        Program(load_config("default_alu"), [MemInsn(store=True, mem_type=MemType.ACC),
                                             FinishInsn()]).validate()
    post = cfg.replace(**{"store.postproc": True})
    for insn, message in [
        (MemInsn(store=True, mem_type=MemType.ACC, shift=32, clip_hi=127),
         "instruction 0 (STORE_ACC): shift 32 is outside 0..31"),
        (MemInsn(store=True, mem_type=MemType.ACC, clip_lo=5, clip_hi=4),
         "instruction 0 (STORE_ACC): clip bounds [5, 4] are not an interval within -128..127"),
        (MemInsn(store=True, mem_type=MemType.ACC, clip_lo=-129, clip_hi=4),
         "instruction 0 (STORE_ACC): clip bounds [-129, 4] are not an interval within "
         "-128..127"),
    ]:
        with pytest.raises(ProgramError, match="^" + re.escape(message) + "$"):
            Program(post, [insn, FinishInsn()]).validate()
    Program(post, [MemInsn(store=True, mem_type=MemType.ACC, shift=8, clip_lo=0, clip_hi=127),
                   FinishInsn()]).validate()


def test_assembly_errors_name_the_line() -> None:
    cases = {
        ".text\n  GEMM bogus=1\n": "<asm>:2: GEMM has no field 'bogus'",
        ".text\nJUMP\n": "<asm>:2: unknown opcode 'JUMP'",
        ".text\nLOAD FOO\n": "<asm>:2: LOAD needs a memory type (UOP, WGT, INP, ACC, OUT)",
        ".text\nGEMM uop_end=x\n": "<asm>:2: expected an integer, got 'x'",
        ".text\nGEMM uop_end=5000\n": "<asm>:2: GEMM.uop_end = 5000 does not fit its 12-bit "
                                      "field (0..4095)",
        ".uops\n0: 1 2\n": "<asm>:2: a micro-op is three integers: dst src wgt",
        "GEMM\n": "<asm>:1: instruction outside .text or .uops",
        ".config 9x9x9\n": "<asm>:1: .config 9x9x9 is not a shipped config; pass the config "
                           "explicitly",
    }
    for text, message in cases.items():
        with pytest.raises(AsmError, match="^" + re.escape(message) + "$"):
            assemble(text, config=None if ".config" in text else load_config())
    with pytest.raises(AsmError, match=r"^<asm>:2: no \.config directive before the first "
                                       r"instruction; add one"):
        assemble(".text\nFINISH\n")
    with pytest.raises(AsmError, match=r"^<asm>: no \.config directive; add one"):
        assemble(".uops\n0: 0 0 0\n")


def test_cli_asm_disasm_round_trip(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    program = sample_program(load_config("vta_1x16x16"))
    original = tmp_path / "a.bin"
    program.save(original)
    assert main(["disasm", str(original)]) == 0
    text = capsys.readouterr().out
    assert ".config 1x16x16_i8w8a32_u32k_i32k_w256k_a128k" in text
    source = tmp_path / "a.s"
    source.write_text(text)
    rebuilt = tmp_path / "b.bin"
    assert main(["asm", str(source), "-o", str(rebuilt)]) == 0
    assert rebuilt.read_bytes() == original.read_bytes()
    # Bad input: one line on stderr, exit 2, and nothing written.
    (tmp_path / "bad.s").write_text(".config default\n.text\nGEMM nope=1\n")
    out = tmp_path / "c.bin"
    assert main(["asm", str(tmp_path / "bad.s"), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err == f"accel: error: {tmp_path / 'bad.s'}:3: GEMM has no field 'nope'\n"
    assert not out.exists()
    (tmp_path / "junk.bin").write_bytes(b"hello")
    assert main(["disasm", str(tmp_path / "junk.bin")]) == 2
    assert "truncated: 5 bytes is shorter than the file header" in capsys.readouterr().err
