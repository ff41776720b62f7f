"""The project's import graph, read from the source with ``ast``: nothing of the project is
imported, so it reads any checkout, old or new.

Prints, for the packages of the root (every top-level folder with an ``__init__.py`` except
``tests``, ``benchmarks``, ``notebooks`` and hidden ones; ``accel``'s subpackages such as
``accel.machine`` count as packages of their own):

- modules per package;
- import edges between packages: an edge is one file importing one module of the project
  (``import x``, ``from x import y``, ``importlib.import_module("x")``, at module level or inside a
  function; several statements of one file naming one module are one edge), with how many of
  them stand only inside functions;
- file-level import cycles: strongly connected components of more than one file, and files that
  import themselves, each with the imports that close it;
- package-level cycles: strongly connected components of the package graph.

Run: ``python benchmarks/package_graph.py [--root DIR]`` (default: the checkout it sits in), e.g.
``git worktree add /tmp/old REV && python benchmarks/package_graph.py --root /tmp/old``.
"""

from __future__ import annotations

import argparse
import ast
from collections import defaultdict
from pathlib import Path
from typing import Any

SKIP = {"tests", "benchmarks", "notebooks"}
SPLIT = {"accel"}  # packages whose subpackages are shown as packages of their own


def modules(root: Path) -> dict[str, Path]:
    """``{dotted module name: file}`` for every .py file of the root's packages."""
    out = {}
    for pkg in sorted(root.iterdir()):
        if pkg.name in SKIP or pkg.name.startswith(".") or not (pkg / "__init__.py").is_file():
            continue
        for path in sorted(pkg.rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def package_of(module: str, root: Path) -> str:
    parts = module.split(".")
    if parts[0] in SPLIT and len(parts) > 1 and (root / parts[0] / parts[1]).is_dir():
        return ".".join(parts[:2])
    return parts[0]


def resolve(name: str, known: dict[str, Path]) -> str | None:
    """The longest project module that ``name`` starts with (``accel.Program`` -> ``accel``)."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def imports(module: str, path: Path, known: dict[str, Path]) -> list[tuple[str, int, bool]]:
    """``(target module, line, inside a function)`` for each project module the file names."""
    out: list[tuple[str, int, bool]] = []

    def add(name: str, node: ast.AST, in_func: bool) -> None:
        target = resolve(name, known)
        if target:
            out.append((target, node.lineno, in_func))

    def walk(node: ast.AST, in_func: bool) -> None:
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name, node, in_func)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: climb from the module's package
                parent = module.split(".")
                if path.name != "__init__.py":
                    parent = parent[:-1]
                parent = parent[: len(parent) - (node.level - 1)]
                base = ".".join([*parent, *([base] if base else [])])
            for alias in node.names:
                add(f"{base}.{alias.name}", node, in_func)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr == "import_module" and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            add(node.args[0].value, node, in_func)
        in_func = in_func or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        for child in ast.iter_child_nodes(node):
            walk(child, in_func)

    walk(ast.parse(path.read_text(), str(path)), False)
    return out


def components(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while not comp or comp[-1] != v:
                comp.append(stack.pop())
            out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1],
                        help="checkout to read (default: the one this script sits in)")
    root = parser.parse_args().root.resolve()
    known = modules(root)
    pkg = {m: package_of(m, root) for m in known}

    # file edges: (importer, target) -> [(line, inside a function)]
    file_edges: dict[tuple[str, str], list[tuple[int, bool]]] = defaultdict(list)
    for m, path in known.items():
        for target, line, in_func in imports(m, path, known):
            file_edges[m, target].append((line, in_func))

    print(f"root: {root}")
    print(f"modules: {len(known)}, import edges (file -> module): {len(file_edges)}")
    print("\nmodules per package:")
    count: dict[str, int] = defaultdict(int)
    for m in known:
        count[pkg[m]] += 1
    for p in sorted(count):
        print(f"  {p:16} {count[p]:4}")

    print("\nimport edges between packages (edges that stand only inside functions):")
    between: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    for (m, t), sites in file_edges.items():
        if pkg[m] != pkg[t]:
            between[pkg[m], pkg[t]][0] += 1
            between[pkg[m], pkg[t]][1] += all(f for _, f in sites)
    for (a, b), (n, nf) in sorted(between.items()):
        print(f"  {a:16} -> {b:16} {n:4}  ({nf} in functions)")

    def show(m: str, t: str) -> str:
        sites = ", ".join(f"{line}{' (in function)' if f else ''}"
                          for line, f in sorted(set(file_edges[m, t])))
        return f"{known[m].relative_to(root)}:{sites} -> {t}"

    print_cycles("file-level import cycles", file_edges, show, self_loops=True)
    print_cycles("package-level cycles", between,
                 lambda a, b: f"{a} -> {b}: {between[a, b][0]} edge(s)", self_loops=False)


def print_cycles(title: str, edges: Any, describe: Any, self_loops: bool) -> None:
    """The strongly connected components of the graph ``edges`` (keys ``(from, to)``) with
    more than one node (or, with ``self_loops``, a node importing itself), each with its
    edges as ``describe(from, to)`` says them."""
    graph: dict[str, set[str]] = defaultdict(set)
    for a, b in edges:
        graph[a].add(b)
    cycles = [c for c in components(graph) if len(c) > 1 or (self_loops and c[0] in graph[c[0]])]
    print(f"\n{title}: {len(cycles)}")
    for c in cycles:
        print(f"  {{{', '.join(c)}}}")
        for a in c:
            for b in sorted(graph[a] & set(c)):
                print(f"      {describe(a, b)}")

if __name__ == "__main__":
    main()
