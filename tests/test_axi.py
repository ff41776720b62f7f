"""The AXI-wrapped design (``hw.axi``) and its register map (``accel.machine.regmap``).

The cocotb tests (``tests/axi_bench.py``) run the design on Verilator with cocotbext-axi's
AXI RAM and AXI-Lite master; they skip where cocotb, cocotbext-axi or Verilator (with g++,
make and perl) are missing, like the other RTL tests.
"""

from __future__ import annotations

import json
import pickle
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from accel import run_program
from accel.machine import regmap
from accel.machine.actions import ActionCounts
from accel.machine.config import ConfigError, HwConfig
from accel.machine.dram import Dram
from accel.machine.program import Program
from accel.testing.randprog import numpy_pick, random_program
from hw import cocotb_sim

DOCS = Path(__file__).resolve().parents[1] / "docs" / "register-map.md"
HERE = Path(__file__).resolve().parent

needs_cocotb = pytest.mark.skipif(cocotb_sim.available() is not None,
                                  reason=str(cocotb_sim.available()))


# ---------------------------------------------------------------------- the one description
def test_register_map_is_well_formed() -> None:
    offsets = [r.offset for r in regmap.REGISTERS]
    assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
    assert all(r.offset % 4 == 0 and r.offset < regmap.WINDOW_BYTES for r in regmap.REGISTERS)
    for name, _doc in regmap.COUNTERS:
        lo, hi = regmap.counter_registers(name)
        assert hi.offset == lo.offset + 4 and lo.access == hi.access == "ro"
    with pytest.raises(KeyError, match="no register 'NOPE'"):
        regmap.register("NOPE")


def test_docs_table_is_the_generated_one() -> None:
    text = DOCS.read_text()
    table = regmap.markdown()
    assert table in text, "docs/register-map.md's table differs: regenerate it with " \
        "`accel regmap --markdown`"


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
def test_c_header_agrees_with_python(tmp_path: Path) -> None:
    """The header compiles, and every macro's value is the Python map's."""
    (tmp_path / "accel_regmap.h").write_text(regmap.c_header())
    names: list[tuple[str, int]] = [("ACCEL_ID_MAGIC", regmap.ID_MAGIC),
                                    ("ACCEL_WINDOW_BYTES", regmap.WINDOW_BYTES)]
    for r in regmap.REGISTERS:
        names.append((f"ACCEL_{r.name}", r.offset))
        for f in r.fields:
            names += [(f"ACCEL_{r.name}_{f.name}", f.mask),
                      (f"ACCEL_{r.name}_{f.name}_SHIFT", f.lsb)]
    body = "\n".join(f'    std::printf("{n} %llu\\n", (unsigned long long)({n}));'
                     for n, _ in names)
    (tmp_path / "main.cpp").write_text(
        f'#include <cstdio>\n#include "accel_regmap.h"\nint main() {{\n{body}\n}}\n')
    subprocess.run(["g++", "-Wall", "-Werror", "-o", str(tmp_path / "m"),
                    str(tmp_path / "main.cpp")], check=True, cwd=tmp_path)
    out = subprocess.run([str(tmp_path / "m")], capture_output=True, text=True, check=True)
    got = dict(line.split() for line in out.stdout.splitlines())
    assert {k: int(v) for k, v in got.items()} == dict(names)


def test_decoder_is_built_from_the_map() -> None:
    """The generated Verilog's read decoder has a case for every register's word index, and
    none other."""
    from amaranth.back import rtlil

    from hw.axi import AxiLiteRegs
    text = rtlil.convert(AxiLiteRegs(16, 32), name="regs")
    cases = {int(v, 2) for v in re.findall(r"case 10'([01]{10})", text)}
    assert cases == {r.offset // 4 for r in regmap.REGISTERS}


def test_id_bits_is_a_config_field_that_keeps_names(tiny: HwConfig) -> None:
    assert tiny.replace(**{"dram.axi_id_bits": 1}).name == tiny.name
    wide = tiny.replace(**{"dram.axi_id_bits": 4})
    assert wide.name != tiny.name
    with pytest.raises(ConfigError, match=r"dram\.axi_id_bits"):
        tiny.replace(**{"dram.axi_id_bits": 0})


def test_axi_limits_refuse_what_axi_cannot_carry(tiny: HwConfig) -> None:
    from hw.axi import AxiAccelerator
    with pytest.raises(ValueError, match=r"dram\.max_burst 8192"):
        AxiAccelerator(tiny.replace(**{"dram.max_burst": 8192}))


# ---------------------------------------------------------------------- cocotb on Verilator
def _write_cases(folder: Path, cfg: HwConfig, programs: list[tuple[Program, Dram]],
                 stall: float, bases: list[int] | None = None, interrupt: bool = True,
                 seed: int = 1000) -> list[Dram]:
    """The bench's manifest and inputs; returns fsim's result of each program."""
    (folder / "cfg.pkl").write_bytes(pickle.dumps(cfg))
    cases, expected = [], []
    for i, (program, dram) in enumerate(programs):
        reference = dram.copy()
        run_program(program, reference, backend="fsim")
        expected.append(reference)
        (folder / f"in{i}.pkl").write_bytes(pickle.dumps((program, dram)))
        cases.append({"input": f"in{i}.pkl", "output": f"out{i}.npy", "stall": stall,
                      "seed": seed + i, "interrupt": interrupt,
                      "base": (bases or [0])[i % len(bases or [0])]})
    (folder / "cases.json").write_text(json.dumps({"config": str(folder / "cfg.pkl"),
                                                   "cases": cases}))
    return expected


def _run_bench(folder: Path, cfg: HwConfig, testcase: str) -> list[dict]:
    tests, failed = cocotb_sim.run_tests(cfg, "axi_bench", HERE, testcase=[testcase],
                                         env={"ACCEL_AXI_CASES": str(folder / "cases.json")},
                                         results=folder / "results.xml")
    assert tests == 1 and failed == 0, f"cocotb: {failed} of {tests} failed (see the log)"
    path = folder / "results.json"
    return json.loads(path.read_text()) if path.exists() else []


def _check(folder: Path, programs: list[tuple[Program, Dram]], expected: list[Dram],
           results: list[dict]) -> None:
    assert len(results) == len(programs)
    for i, ((program, _dram), ref, res) in enumerate(zip(programs, expected, results,
                                                          strict=True)):
        got = np.load(folder / f"out{i}.npy")
        np.testing.assert_array_equal(got, ref.data, err_msg=f"program {i}")
        counts = ActionCounts.of_program(program.insns, program.config)
        c = res["counters"]
        assert (c["DRAM_RD_BYTES"], c["DRAM_WR_BYTES"]) == \
            (counts.dram_read_bytes, counts.dram_write_bytes), f"program {i}"
        for m in ("LOAD", "COMPUTE", "STORE"):
            assert c[f"{m}_ACTIVE"] + c[f"{m}_STALL"] <= c["CYCLES"]
        assert c["COMPUTE_ACTIVE"] > 0 and not res["dram_error"]
        assert not res["protocol_errors"]


@needs_cocotb
def test_register_map_on_the_rtl(tmp_path: Path, tiny: HwConfig) -> None:
    """Offsets, access kinds, byte strobes and SLVERR for bad accesses, on the design."""
    _write_cases(tmp_path, tiny, [], 0.0)
    _run_bench(tmp_path, tiny, "register_map")


def _run_programs(folder: Path, cfg: HwConfig, programs: list[tuple[Program, Dram]],
                  stall: float, bases: tuple[int, ...] = (0,)) -> list[dict]:
    """Each program in a simulation of its own (the buffers start as fsim's, zero: a program
    may store a tile it never wrote), bit-exact against fsim; the bench's results."""
    out = []
    for i, case in enumerate(programs):
        sub = folder / f"p{i}"
        sub.mkdir()
        expected = _write_cases(sub, cfg, [case], stall, bases=[bases[i % len(bases)]],
                                interrupt=i % 2 == 0, seed=1000 + i)
        results = _run_bench(sub, cfg, "programs")
        _check(sub, [case], expected, results)
        out += results
    return out


@needs_cocotb
def test_random_programs_with_random_stalls(tmp_path: Path, tiny: HwConfig) -> None:
    """Random programs (``accel.testing.randprog``) bit-exact against fsim with random
    ready/valid pauses on every channel, the AXI rules checked on every transaction; the
    image at bus address 0 and at 1 MiB + 4 KB; half the runs wait on the interrupt, half poll
    ``STATUS``."""
    rng = np.random.default_rng(54)
    programs = [random_program(tiny, numpy_pick(rng)) for _ in range(4)]
    _run_programs(tmp_path, tiny, programs, 0.3, bases=(0, (1 << 20) + 4096))


@needs_cocotb
@pytest.mark.slow
@pytest.mark.parametrize("changes", [
    {"dram.max_outstanding": 1},                            # one transaction at a time
    {"dram.bytes_per_cycle": 16, "dram.max_burst": 256},   # a 128-bit bus, 16-beat bursts
    {"core.batch": 2},                                      # two rows per GEMM
], ids=["outstanding1", "bus128", "batch2"])
def test_random_programs_on_other_machines(tmp_path: Path, tiny: HwConfig,
                                           changes: dict) -> None:
    """The random programs with random stalls on machines whose bridge differs: one
    outstanding transaction, a 16-byte data bus, a batch of two."""
    cfg = tiny.replace(**changes)
    rng = np.random.default_rng(57)
    programs = [random_program(cfg, numpy_pick(rng)) for _ in range(3)]
    results = _run_programs(tmp_path, cfg, programs, 0.3, bases=(0, (1 << 20) + 4096))
    assert len(results) == 3


@needs_cocotb
@pytest.mark.slow
@pytest.mark.parametrize("stall", [0.0, 0.2])
def test_resnet18_layer_through_the_wrapped_design(tmp_path: Path, cfg: HwConfig,
                                                   stall: float) -> None:
    """ResNet-18's layer4.0.downsample (1x1, 256 -> 512 channels, 14x14, stride 2), compiled
    for the default config, bit-exact against fsim through the AXI design, with and without
    random stalls; prints its cycles beside the timing simulator's (``pytest -s``)."""
    import time

    from compiler.ops.compiled import compile_conv2d, pack_conv2d_args
    from compiler.ops.conv2d import Conv2dWorkload
    wl = Conv2dWorkload(1, 256, 14, 14, 512, 1, 1, 2, 2, bias=True, shift=8, relu=False)
    op = compile_conv2d(wl, cfg)
    rng = np.random.default_rng(18)
    x = rng.integers(-128, 128, (1, 256, 14, 14), dtype=np.int8)
    w = rng.integers(-128, 128, (512, 256, 1, 1), dtype=np.int8)
    b = rng.integers(-1000, 1000, 512).astype(np.int32)
    dram = op.dram(**pack_conv2d_args(op, x, w, b))
    sim = run_program(op.program, dram.copy(), backend="sim")
    start = time.perf_counter()
    (res,) = _run_programs(tmp_path, cfg, [(op.program, dram)], stall)
    wall = time.perf_counter() - start
    print(f"\nlayer4.0.downsample on {cfg.name} through accel_axi, stall {stall}: "
          f"{res['counters']['CYCLES']:,} cycles (timing simulator: {sim.cycles:,}), "
          f"{wall:.1f} s wall, bursts {res['bursts']}")
