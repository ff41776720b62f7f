"""FPGA device budgets: the shipped parts, their validation (one line naming file and key), the
block-RAM shape count, and ``accel device``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from accel.cli import main
from accel.machine.fpga import DeviceError, load_device, parse_device, shipped_devices
from hw.names import ECP5_DEVICES


def test_the_issue_s_parts_are_shipped_and_round_trip() -> None:
    assert shipped_devices() == ["ecp5-25f", "ecp5-45f", "ecp5-85f", "zu3eg", "zynq-7020"]
    for name in shipped_devices():
        dev = load_device(name)
        assert dev.name == name
        assert parse_device(dev.to_dict(), dev.source, name=name) == dev
        assert all(v > 0 for v in dev.budget().values())


def test_ecp5_parts_place_where_synth_places() -> None:
    """A part's nextpnr device and package are those ``accel synth --pnr --device`` uses, and
    its DSP and BRAM primitives are cells ``hw.synth`` counts for its family."""
    for name in shipped_devices():
        dev = load_device(name)
        if dev.family == "ecp5":
            assert dev.nextpnr is not None
            assert ECP5_DEVICES[dev.nextpnr["device"]] == dev.nextpnr["package"]
        else:
            assert dev.nextpnr is None
    # the 45F figures the notes cite from nextpnr's placement reports (docs/notes/memory-system.md)
    assert load_device("ecp5-45f").budget() == {"luts": 43848, "ffs": 43848, "dsps": 72,
                                                "brams": 108}


@pytest.mark.parametrize(("depth", "width", "blocks"), [
    (1024, 256, 15),     # the default's acc buffer: 1024 x 18 shapes, ceil(256 / 18)
    (1024, 512, 29),     # its wgt buffer
    (4096, 64, 16),      # its inp buffer: every shape gives 16
    (512, 130, 4),       # a 512-entry command queue: 512 x 36 (pseudo dual port)
    (16, 8, 1),
    (20000, 1, 2),
])
def test_blocks_for_takes_the_best_single_shape(depth: int, width: int, blocks: int) -> None:
    assert load_device("ecp5-45f").bram.blocks_for(depth, width) == blocks


def _data() -> dict:
    return load_device("zynq-7020").to_dict()


@pytest.mark.parametrize(("change", "message"), [
    (lambda d: d.update(lut=1), "lut: unknown key; expected one of description, family, part"),
    (lambda d: d.pop("ffs"), "ffs: missing"),
    (lambda d: d.update(family="stratix"), "family: expected one of ecp5, ice40, xilinx, got "
                                           "str 'stratix'"),
    (lambda d: d.update(clock_mhz=0), "clock_mhz: expected a positive number of MHz, got int 0"),
    (lambda d: d["dsp"].update(count=-1), "dsp.count: expected a positive whole number, got "
                                          "int -1"),
    (lambda d: d["dsp"].pop("a_bits"), "dsp.a_bits: missing"),
    (lambda d: d["bram"].update(shapes=[[1024, 36]]), "bram.shapes[0]: expected a shape of at "
                                                      "most kbits (18) x 1024 bits"),
    (lambda d: d["bram"].update(shapes=[[1024]]), "bram.shapes[0]: expected a [depth, width] "
                                                  "pair"),
    (lambda d: d["memory"].update(bytes_per_cycle=12), "memory.bytes_per_cycle: expected a "
                                                       "power of two, got int 12"),
    (lambda d: d.update(nextpnr={"device": "45k", "package": "CABGA381"}),
     "nextpnr: only for family ecp5 (this part's is xilinx)"),
    (lambda d: d["luts"].update(primitive=""), "luts.primitive: expected a non-empty string"),
])
def test_a_bad_device_file_is_one_line_naming_file_and_key(
        tmp_path: Path, change: object, message: str) -> None:
    data = _data()
    change(data)  # type: ignore[operator]
    path = tmp_path / "part.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(DeviceError) as info:
        load_device(path)
    text = str(info.value)
    assert "\n" not in text
    assert text.startswith(f"{path}: {message}")


def test_missing_empty_and_malformed_files(tmp_path: Path) -> None:
    with pytest.raises(DeviceError, match="no such shipped device; expected one of ecp5-25f"):
        load_device("ecp5-12f")
    with pytest.raises(DeviceError, match="no such device file"):
        load_device(tmp_path / "none.yaml")
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    with pytest.raises(DeviceError, match=r"empty\.yaml: <top>: expected a mapping"):
        load_device(empty)
    broken = tmp_path / "broken.yaml"
    broken.write_text("family: [ecp5\n")
    with pytest.raises(DeviceError, match=r"broken.yaml:\d+:\d+: malformed YAML"):
        load_device(broken)


def test_cli_device_list_show_validate(tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["device", "list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:5] == ["name", "LUTs", "FFs", "DSPs", "BRAMs"]
    assert [line.split()[0] for line in lines[1:]] == shipped_devices()
    assert main(["device", "list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed[1]["name"] == "ecp5-45f" and listed[1]["dsps"] == 72
    assert main(["device", "show", "zu3eg", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["part"] == "xczu3eg-sbva484-1-e" and shown["memory"]["bytes_per_cycle"] == 16
    good = tmp_path / "mine.yaml"
    good.write_text(yaml.safe_dump(_data()))
    assert main(["device", "validate", str(good)]) == 0
    assert capsys.readouterr().out == f"{good}: ok (xc7z020clg400-1, xilinx)\n"
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({**_data(), "ffs": "many"}))
    assert main(["device", "validate", str(bad)]) == 2
    assert capsys.readouterr().err == (f"accel: error: {bad}: ffs: expected a positive whole "
                                       "number, got str 'many'\n")
