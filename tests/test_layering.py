"""The import layering of DESIGN.md §1, read from the source.

Layers, top to bottom (an import may only point down or stay in its layer)::

    entry     accel, accel.api, accel.cli*, accel.dse, accel.plots   imports anything
    runtime   runtime.*            imports compiler, sim, hw, the contract
    compiler  compiler.*           imports the contract
    sim       sim.*                imports the contract
    hw        hw.*                 imports the contract
    testing   accel.testing.*      imports the contract (programs for tests and benchmarks)
    contract  accel.machine.*      imports nothing else of the project

Every ``import`` and ``from ... import`` counts, wherever it stands (inside a function, under
``TYPE_CHECKING``), and so does ``importlib.import_module("...")`` with a literal name. No two
modules may import each other, directly or around a circle, and a module may not import a
``_private`` name of another module (shared helpers are public).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("accel", "compiler", "runtime", "sim", "hw")

ALLOWED: dict[str, frozenset[str]] = {
    "contract": frozenset({"contract"}),
    "testing": frozenset({"testing", "contract"}),
    "compiler": frozenset({"compiler", "contract"}),
    "sim": frozenset({"sim", "contract"}),
    "hw": frozenset({"hw", "contract"}),
    "runtime": frozenset({"runtime", "compiler", "sim", "hw", "contract"}),
    "entry": frozenset({"entry", "runtime", "compiler", "sim", "hw", "testing", "contract"}),
}


def layer_of(module: str) -> str:
    """The layer a module of the project belongs to."""
    if module == "accel.machine" or module.startswith("accel.machine."):
        return "contract"
    if module == "accel.testing" or module.startswith("accel.testing."):
        return "testing"
    top = module.split(".")[0]
    return "entry" if top == "accel" else top


@dataclass(frozen=True)
class Import:
    """One import of a project module: where it stands and what it names."""

    file: str
    line: int
    target: str
    text: str
    private: tuple[str, ...] = ()


def module_sources(root: Path) -> dict[str, tuple[str, str]]:
    """``{module name: (file relative to root, source)}`` of every module of the packages."""
    out = {}
    for pkg in PACKAGES:
        for path in sorted((root / pkg).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = (str(path.relative_to(root)), path.read_text())
    return out


def _resolve(name: str, known: set[str]) -> str | None:
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(module: str, file: str, source: str, known: set[str]) -> list[Import]:
    """The imports of project modules in one module's source."""
    is_package = file.endswith("__init__.py")
    out = []
    lines = source.splitlines()

    def text_of(node: ast.stmt | ast.expr) -> str:
        return lines[node.lineno - 1].strip()

    for node in ast.walk(ast.parse(source, file)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                target = _resolve(alias.name, known)
                if target:
                    out.append(Import(file, node.lineno, target, text_of(node)))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = module.split(".")
                if not is_package:
                    parent = parent[:-1]
                parent = parent[: len(parent) - (node.level - 1)]
                base = ".".join([*parent, *([base] if base else [])])
            for alias in node.names:
                target = _resolve(f"{base}.{alias.name}", known)
                if target is None:
                    continue
                private = ((alias.name,) if alias.name.startswith("_")
                           and target == _resolve(base, known) else ())
                out.append(Import(file, node.lineno, target, text_of(node), private))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr == "import_module" and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            target = _resolve(node.args[0].value, known)
            if target:
                out.append(Import(file, node.lineno, target, text_of(node)))
    return out


def import_graph(sources: dict[str, tuple[str, str]]) -> dict[str, list[Import]]:
    known = set(sources)
    return {m: [i for i in imports_of(m, f, s, known) if i.target != m]
            for m, (f, s) in sources.items()}


def layering_violations(graph: dict[str, list[Import]]) -> list[str]:
    """One line per import that breaks the layering or imports a private name."""
    out: list[str] = []
    for module, imports in graph.items():
        here = layer_of(module)
        seen: set[tuple[int, str]] = set()
        for imp in imports:
            if (imp.line, imp.target) in seen and not imp.private:
                continue                    # one line per import and module it names
            seen.add((imp.line, imp.target))
            there = layer_of(imp.target)
            where = f"{imp.file}:{imp.line}: {imp.text}"
            if there not in ALLOWED[here]:
                out.append(f"{where}: {here} may import only "
                           f"{', '.join(sorted(ALLOWED[here]))}, not {there} ({imp.target})")
            if imp.private and imp.target != module:
                out.append(f"{where}: imports the private name(s) {', '.join(imp.private)} "
                           f"of {imp.target}")
    return out


def import_cycles(graph: dict[str, list[Import]]) -> list[str]:
    """One line per circle of modules that import each other, naming each import in it."""
    edges = {m: {i.target: i for i in imps if i.target in graph} for m, imps in graph.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(v: str) -> None:       # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(component)

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(graph)))
    for v in sorted(edges):
        if v not in index:
            visit(v)
    out = []
    for component in components:
        members = set(component)
        # Walk one circle through the component from its first module.
        path, seen, v = [], set(), min(component)
        while v not in seen:
            seen.add(v)
            w = min(t for t in edges[v] if t in members)
            imp = edges[v][w]
            path.append(f"{imp.file}:{imp.line} ({imp.text})")
            v = w
        out.append(f"import cycle among {', '.join(sorted(members))}: " + " -> ".join(path))
    return out


def package_cycles(graph: dict[str, list[Import]]) -> list[str]:
    """Pairs of layers that import each other (directly or through a third)."""
    reach = {layer: {layer_of(i.target) for m, imps in graph.items() if layer_of(m) == layer
                     for i in imps} - {layer} for layer in ALLOWED}
    changed = True
    while changed:
        changed = False
        for layer, targets in reach.items():
            more = set().union(*(reach[t] for t in targets)) - targets - {layer} if targets \
                else set()
            if more:
                targets |= more
                changed = True
    return [f"layers {a} and {b} import each other" for a in sorted(reach)
            for b in sorted(reach[a]) if a < b and a in reach[b]]


def package_of(module: str, sources: dict[str, tuple[str, str]]) -> str:
    """The package a module belongs to: itself for a package (``__init__.py``), else its
    parent (``accel.dse.runner`` -> ``accel.dse``, ``accel.cli`` -> ``accel``)."""
    return module if sources[module][0].endswith("__init__.py") else module.rpartition(".")[0]


def package_import_cycles(graph: dict[str, list[Import]],
                          sources: dict[str, tuple[str, str]]) -> list[str]:
    """One line per circle of packages that import each other (a package's modules and a
    subpackage's count as two packages: ``accel`` -> ``accel.dse`` -> ``accel`` is a cycle),
    naming one import of each step."""
    packages: dict[str, list[Import]] = {}
    for module, imports in graph.items():
        here = package_of(module, sources)
        packages.setdefault(here, [])
        packages[here] += [Import(i.file, i.line, package_of(i.target, sources), i.text)
                           for i in imports if package_of(i.target, sources) != here]
    return [line.replace("import cycle among", "package import cycle among")
            for line in import_cycles(packages)]


@pytest.fixture(scope="module")
def graph() -> dict[str, list[Import]]:
    return import_graph(module_sources(ROOT))


def test_every_import_points_down(graph: dict[str, list[Import]]) -> None:
    assert layering_violations(graph) == []


def test_no_module_imports_itself_around_a_circle(graph: dict[str, list[Import]]) -> None:
    assert import_cycles(graph) == []
    assert package_cycles(graph) == []


def test_no_package_imports_itself_around_a_circle(graph: dict[str, list[Import]]) -> None:
    assert package_import_cycles(graph, module_sources(ROOT)) == []


def test_a_package_cycle_is_named(tmp_path: Path) -> None:
    """A planted cycle between a package and its subpackage, with no module cycle in it (the
    shape ``accel`` <-> ``accel.dse`` had): caught, naming the imports."""
    files = {
        "accel/__init__.py": "",
        "accel/api.py": "X = 1\n",
        "accel/cli.py": "from accel.dse.runner import run\n",
        "accel/dse/__init__.py": "",
        "accel/dse/runner.py": "def run():\n    from accel.api import X\n",
        "accel/machine/__init__.py": "",
    }
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    sources = module_sources(tmp_path)
    planted = import_graph(sources)
    assert import_cycles(planted) == [] and layering_violations(planted) == []
    assert package_import_cycles(planted, sources) == [
        "package import cycle among accel, accel.dse: accel/cli.py:1 (from accel.dse.runner "
        "import run) -> accel/dse/runner.py:2 (from accel.api import X)"]


def test_the_contract_is_where_the_design_says(graph: dict[str, list[Import]]) -> None:
    contract = {m for m in graph if layer_of(m) == "contract"}
    for name in ("config", "isa", "program", "dram", "builder", "costs", "tokens"):
        assert f"accel.machine.{name}" in contract
    # The engines reach the contract; none of them reaches the entry or another engine.
    for engine in ("compiler", "sim", "hw"):
        targets = {layer_of(i.target) for m, imps in graph.items() if layer_of(m) == engine
                   for i in imps}
        assert targets <= {engine, "contract"} and "contract" in targets


def test_a_bad_import_is_named(tmp_path: Path) -> None:
    """Deliberately bad modules in a temporary tree: each is caught, with file and import."""
    files = {
        "accel/__init__.py": "",
        "accel/api.py": "from runtime.backends import run\n",
        "accel/machine/__init__.py": "",
        "accel/machine/config.py": "X = 1\n",
        "accel/machine/isa.py": "def f():\n    from accel.api import go\n",
        "sim/__init__.py": "",
        "sim/timing.py": "import hw.dram\nfrom accel.machine.config import X\n",
        "hw/__init__.py": "",
        "hw/dram.py": "from hw.top import _helper\n",
        "hw/top.py": "from hw import dram\n\ndef _helper():\n    pass\n",
        "compiler/__init__.py": "",
        "runtime/__init__.py": "",
        "runtime/backends.py": "import importlib\nimportlib.import_module('accel.api')\n",
    }
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    bad = import_graph(module_sources(tmp_path))
    assert sorted(layering_violations(bad)) == sorted([
        "accel/machine/isa.py:2: from accel.api import go: contract may import only "
        "contract, not entry (accel.api)",
        "sim/timing.py:1: import hw.dram: sim may import only contract, sim, not hw (hw.dram)",
        "hw/dram.py:1: from hw.top import _helper: imports the private name(s) _helper of "
        "hw.top",
        "runtime/backends.py:2: importlib.import_module('accel.api'): runtime may import "
        "only compiler, contract, hw, runtime, sim, not entry (accel.api)",
    ])
    assert sorted(import_cycles(bad)) == [
        "import cycle among accel.api, runtime.backends: accel/api.py:1 (from runtime.backends "
        "import run) -> runtime/backends.py:2 (importlib.import_module('accel.api'))",
        "import cycle among hw.dram, hw.top: hw/dram.py:1 (from hw.top import _helper) -> "
        "hw/top.py:1 (from hw import dram)",
    ]
    assert package_cycles(bad) == [
        "layers entry and runtime import each other",
    ]


@pytest.mark.parametrize("package", ["compiler", "sim", "hw"])
def test_importing_an_engine_loads_only_it_and_the_contract(package: str) -> None:
    """At run time too: a fresh interpreter that imports every module of an engine has loaded
    nothing of the entry, the runtime or another engine (``import accel.machine`` runs
    ``accel/__init__.py``, which loads the API only when a name of it is asked for)."""
    code = (
        "import pkgutil, importlib, sys\n"
        f"import {package}\n"
        f"for m in pkgutil.walk_packages({package}.__path__, '{package}.'):\n"
        "    importlib.import_module(m.name)\n"
        "print('\\n'.join(sorted(sys.modules)))\n"
    )
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True, cwd=ROOT).stdout.split()
    ours = [m for m in loaded if m.split(".")[0] in PACKAGES]
    assert f"{package}" in ours and "accel.machine.config" in ours and len(ours) > 10
    outside = [m for m in ours if layer_of(m) not in {package, "contract"} and m != "accel"]
    assert outside == []


def summary(root: Path = ROOT) -> str:
    """Modules per layer, imports between layers, cycles and violations (for reports:
    ``python tests/test_layering.py [ROOT]``)."""
    graph = import_graph(module_sources(root))
    per_layer: dict[str, int] = {}
    for module in graph:
        per_layer[layer_of(module)] = per_layer.get(layer_of(module), 0) + 1
    between: dict[tuple[str, str], int] = {}
    for module, imports in graph.items():
        for imp in imports:
            pair = (layer_of(module), layer_of(imp.target))
            if pair[0] != pair[1]:
                between[pair] = between.get(pair, 0) + 1
    lines = ["modules per layer: " + ", ".join(f"{k} {v}" for k, v in sorted(per_layer.items()))]
    lines += [f"imports {a} -> {b}: {n}" for (a, b), n in sorted(between.items())]
    cycles, bad = import_cycles(graph), layering_violations(graph)
    lines += [f"module cycles: {len(cycles)}", *cycles, f"violations: {len(bad)}", *bad]
    return "\n".join(lines)


if __name__ == "__main__":
    print(summary(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT))
