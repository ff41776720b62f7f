"""HwConfig: shipped configs, derived values, canonical names, and one-line rejection messages."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from accel.cli import main
from accel.machine.config import ConfigError, HwConfig, load_config, shipped_configs


def write(tmp_path: Path, text: str, name: str = "cfg.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


CORE = "core: {batch: 1, block_in: 8, block_out: 8}\n"


def test_shipped_configs_load() -> None:
    assert shipped_configs() == ["default", "default_alu", "tiny", "vta_1x16x16",
                                 "vta_1x16x16_alu"]
    for name in shipped_configs():
        assert isinstance(load_config(name), HwConfig)


def test_packaged_default_is_found_without_a_path() -> None:
    cfg = load_config()
    assert cfg == load_config("default")
    assert (cfg.batch, cfg.block_in, cfg.block_out) == (1, 8, 8)
    assert cfg.clock_mhz == 100.0
    assert cfg.dram.bytes_per_cycle == 8
    assert cfg.store.postproc and cfg.gemm.reset_from_acc
    assert cfg.name == "1x8x8_i8w8a32_u8k_i32k_w64k_a32k_o8_rr_pp_ra"


def test_alu_configs_are_the_machines_before_issue_35() -> None:
    """default_alu and vta_1x16x16_alu: the packaged machines with both requantisation options
    off (default_alu with the 64 KB acc default had), the machines the old names meant."""
    for name, acc in (("default", 65536), ("vta_1x16x16", 131072)):
        old = load_config(f"{name}_alu")
        assert not old.store.postproc and not old.gemm.reset_from_acc
        assert old == load_config(name).replace(**{"store.postproc": False,
                                                   "gemm.reset_from_acc": False,
                                                   "buffers.acc": acc,
                                                   "description": old.description})
    assert load_config("default_alu").name == "1x8x8_i8w8a32_u8k_i32k_w64k_a64k_o8_rr"
    for old, new in (("default_postproc", "default"), ("vta_1x16x16_postproc", "vta_1x16x16")):
        with pytest.raises(ConfigError) as info:
            load_config(old)
        assert str(info.value) == (f"{old}: no longer shipped; it is now {new} (the machine "
                                   f"before it, with requantisation on the ALU: {new}_alu)")


def test_default_derived_values() -> None:
    cfg = load_config()
    assert cfg.inp_tile_bytes == 8
    assert cfg.wgt_tile_bytes == 64
    assert cfg.acc_tile_bytes == 32
    assert cfg.out_tile_bytes == 8
    assert (cfg.inp_depth, cfg.wgt_depth, cfg.acc_depth, cfg.out_depth) == (4096, 1024, 1024, 1024)
    assert (cfg.inp_index_bits, cfg.wgt_index_bits, cfg.acc_index_bits) == (12, 10, 10)
    # A micro-op (acc 10 + inp 12 + wgt 10 bits) fits 32 bits; default_alu's 11-bit acc
    # index made it 33, stored in 8 bytes.
    assert cfg.uop_bits == 32 and cfg.uop_bytes == 4 and cfg.uop_depth == 2048
    old = load_config("default_alu")
    assert old.uop_bits == 33 and old.uop_bytes == 8 and old.uop_depth == 1024
    assert cfg.peak_macs_per_cycle == 64
    assert cfg.peak_gops == pytest.approx(12.8)


def test_vta_config_matches_published_layout() -> None:
    cfg = load_config("vta_1x16x16_alu")
    assert cfg.name == "1x16x16_i8w8a32_u32k_i32k_w256k_a128k_o8_rr"
    # VTA's micro-op is 32 bits: acc 11, inp 11, wgt 10.
    assert (cfg.acc_index_bits, cfg.inp_index_bits, cfg.wgt_index_bits) == (11, 11, 10)
    assert cfg.uop_bits == 32 and cfg.uop_depth == 8192
    bits = cfg.derived()["instruction_bits"]
    assert bits["GEMM"] == 127 and bits["ALU"] == 126
    assert cfg.peak_macs_per_cycle == 256
    assert cfg.peak_gops == pytest.approx(51.2)
    # vta_1x16x16: the same layout; the options add STORE's post-processing fields and
    # GEMM's from_acc bit.
    pp = load_config("vta_1x16x16")
    assert pp.name == "1x16x16_i8w8a32_u32k_i32k_w256k_a128k_o8_rr_pp_ra"
    assert (pp.acc_index_bits, pp.inp_index_bits, pp.wgt_index_bits) == (11, 11, 10)
    assert pp.derived()["instruction_bits"] == {**bits, "STORE": 124, "GEMM": 128}


def test_tiny_config_is_small() -> None:
    cfg = load_config("tiny")
    assert (cfg.block_in, cfg.block_out) == (4, 4)
    assert cfg.acc_depth == 128
    # The memory system's features are spelled out; non-default queue and DRAM latency and
    # burst make a hash suffix.
    assert re.fullmatch(r"1x4x4_i8w8a32_u1k_i1k_w2k_a2k_o8_rr-[0-9a-f]{6}", cfg.name)


def test_names_differ_when_any_parameter_differs() -> None:
    cfg = load_config()
    names = {
        cfg.name,
        cfg.replace(**{"dram.latency": 64}).name,
        cfg.replace(clock_mhz=200).name,
        cfg.replace(**{"buffers.wgt": 32768}).name,
        cfg.replace(**{"gemm.ii": 2}).name,
        cfg.replace(**{"dram.max_outstanding": 2}).name,
        cfg.replace(**{"dram.arbiter": "priority"}).name,
        cfg.replace(**{"dram.merge_rows": True}).name,
    }
    assert len(names) == 8
    assert cfg.replace(**{"buffers.wgt": 32768}).name == \
        "1x8x8_i8w8a32_u8k_i32k_w32k_a32k_o8_rr_pp_ra"
    assert cfg.replace(**{"dram.merge_rows": True}).name == \
        "1x8x8_i8w8a32_u8k_i32k_w64k_a32k_o8_rr_mr_pp_ra"
    # The original channel (one request at a time, fixed priority) and requantisation on the
    # ALU have the plain name.
    original = load_config("default_alu").replace(**{"dram.max_outstanding": 1,
                                                     "dram.arbiter": "priority"})
    assert original.name == "1x8x8_i8w8a32_u8k_i32k_w64k_a64k"


def test_replace_and_dict_round_trip() -> None:
    cfg = load_config("vta_1x16x16")
    again = HwConfig.from_dict(cfg.to_dict())
    assert again == cfg and again.name == cfg.name
    assert cfg.replace(**{"core.batch": 2}).batch == 2


def test_config_is_frozen() -> None:
    cfg = load_config()
    with pytest.raises(AttributeError):
        cfg.clock_mhz = 5.0  # type: ignore[misc]


# ---------------------------------------------------------------------- rejections
REJECTIONS = [
    (
        CORE + "bogus: 1\n",
        "bogus: unknown key; expected one of alu, buffers, clock_mhz, core, description, "
        "dram, energy, gemm, isa, precision, queues, store",
    ),
    (
        CORE + "buffers: {inpp: 1024}\n",
        "buffers.inpp: unknown key; expected one of uop, inp, wgt, acc",
    ),
    (CORE + "buffers: {inp: '32k'}\n", "buffers.inp: expected an integer, got str '32k'"),
    (CORE + "clock_mhz: fast\n", "clock_mhz: expected a number of MHz, got str 'fast'"),
    (CORE + "buffers: {wgt: 30000}\n",
     "buffers.wgt: expected a power-of-two number of bytes, got 30000"),
    ("core: {batch: 1, block_in: 12, block_out: 8}\n",
     "core.block_in: expected a power of two, got 12"),
    (CORE + "buffers: {wgt: 32}\n",
     "buffers.wgt: expected at least one tile (64 bytes), got 32"),
    (CORE + "precision: {inp_bits: 4}\n", "precision.inp_bits: expected one of (8,), got 4"),
    (CORE + "dram: {bytes_per_cycle: 8, max_burst: 4}\n",
     "dram.max_burst: expected a power of two >= bytes_per_cycle (8), got 4"),
    (CORE + "gemm: {ii: 0}\n", "gemm.ii: expected an initiation interval >= 1 cycle, got 0"),
    (CORE + "core: [1, 8, 8]\n".replace("core", "queues"),
     "queues: expected a mapping with keys cmd_depth, token_depth, got list [1, 8, 8]"),
    ("- 1\n- 2\n", "<top>: expected a mapping of config sections, got list"),
    ("", "<top>: expected a mapping of config sections, got empty file"),
]


@pytest.mark.parametrize(("text", "message"), REJECTIONS)
def test_rejection_messages(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError, match="^" + re.escape(f"{path}: {message}") + "$"):
        load_config(path)


def test_instruction_field_overflow_is_rejected(tmp_path: Path) -> None:
    # Huge buffers make index fields so wide that the GEMM instruction passes 128 bits.
    text = (
        "core: {batch: 1, block_in: 1, block_out: 1}\n"
        "buffers: {uop: 1024, inp: 4194304, wgt: 4194304, acc: 16777216}\n"
    )
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    msg = str(info.value)
    assert "\n" not in msg
    assert msg.startswith(f"{path}: buffers: expected ")
    assert "micro-op indices (acc 22 + src 22 + wgt 22 bits) to fit 64 bits, got 66" in msg
    text = CORE + "buffers: {uop: 262144, inp: 4194304, wgt: 4194304, acc: 4194304}\n"
    path = write(tmp_path, text, "wide.yaml")
    with pytest.raises(ConfigError, match=re.escape(f"{path}: buffers: expected GEMM instruction "
                                                    "fields (opcode:3")) as info:
        load_config(path)
    assert str(info.value).endswith("to fit 128 bits, got 171")


def test_malformed_yaml_names_line_and_column(tmp_path: Path) -> None:
    path = write(tmp_path, "core: {batch: 1\nbuffers: [\n")
    pattern = "^" + re.escape(f"{path}:") + r"\d+:\d+: malformed YAML: "
    with pytest.raises(ConfigError, match=pattern):
        load_config(path)


def test_missing_file_and_unknown_name(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError, match="^" + re.escape(f"{missing}: no such config file") + "$"):
        load_config(missing)
    with pytest.raises(
        ConfigError,
        match="^" + re.escape("vta_2x2: no such shipped config; expected one of default, "
                              "default_alu, tiny, vta_1x16x16, vta_1x16x16_alu or a "
                              "path to a .yaml file") + "$",
    ):
        load_config("vta_2x2")


def test_direct_construction_validates() -> None:
    cfg = load_config()
    message = "<dict>: core.batch: expected a power of two, got 3"
    with pytest.raises(ConfigError, match=re.escape(message)):
        HwConfig(core=type(cfg.core)(batch=3, block_in=8, block_out=8))


# ---------------------------------------------------------------------- command line
def test_cli_validate_ok_and_bad(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = write(tmp_path, CORE, "good.yaml")
    assert main(["config", "validate", str(good)]) == 0
    assert "ok (1x8x8_i8w8a32_u8k_i32k_w64k_a64k)" in capsys.readouterr().out
    bad = write(tmp_path, CORE + "buffers: {acc: 100}\n", "bad.yaml")
    assert main(["config", "validate", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err == (f"accel: error: {bad}: buffers.acc: expected a power-of-two number of bytes, "
                   "got 100\n")


def test_cli_show_prints_config_and_derived(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "show", "vta_1x16x16"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# 1x16x16_i8w8a32_u32k_i32k_w256k_a128k_o8_rr_pp_ra")
    assert "peak_macs_per_cycle: 256" in out
    assert "instruction_bits: {LOAD: 119, STORE: 124, GEMM: 128, FINISH: 7, ALU: 126}" in out


def test_a_pickled_config_hashes_as_one_loaded_in_the_process_that_reads_it() -> None:
    """The hash a config remembers is not pickled: string hashes differ between processes
    (a sweep's workers), and a carried-over hash would miss every cache keyed by configs."""
    import os
    import pickle
    import subprocess
    import sys

    cfg = load_config("default")
    hash(cfg)  # remembered here
    data = pickle.dumps(cfg).hex()
    code = ("import pickle, sys; from accel.machine.config import load_config; "
            f"c = pickle.loads(bytes.fromhex('{data}')); "
            "sys.exit(0 if hash(c) == hash(load_config('default')) and c in {load_config("
            "'default'): 1} else 1)")
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        assert subprocess.run([sys.executable, "-c", code], env=env).returncode == 0
