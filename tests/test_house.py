"""The house rules of the package gmp that a reader can check by reading its source: dependencies go one way
(no import circle), and no module is much over 800 lines (one that outgrew that becomes a small package)."""

import ast
from pathlib import Path

from conftest import ROOT

PACKAGE = ROOT / "gmp"
MAX_LINES = 800

# Modules over MAX_LINES that are still to be split, each with its length when listed; a module that has come
# under MAX_LINES must leave this list (a test says so). None is left (issue #39 split the last, runs.py).
KNOWN_LONG: dict[str, int] = {}


def _module_file(parts: list[str], package: Path) -> Path | None:
    """The source file of the module ``gmp.<parts>`` (a package's ``__init__.py``), None if there is none."""
    folder = package.joinpath(*parts)
    for candidate in (folder / "__init__.py", folder.with_suffix(".py")):
        if candidate.is_file():
            return candidate
    return None


def _imported_names(tree: ast.AST, here: tuple[str, ...]) -> list[tuple[list[str], list[str]]]:
    """``(module, names)`` of every import in ``tree``, at module level or inside a function, by statement
    (``from module import names``, ``import module``) or by ``importlib.import_module("<constant>")``;
    ``here`` is the dotted name of the package the module is in, for relative imports."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name.split("."), []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = list(here[:len(here) - node.level + 1]) if node.level else []
            found.append((base + (node.module.split(".") if node.module else []), [a.name for a in node.names]))
        elif (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) == "import_module"
              and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            found.append((node.args[0].value.split("."), []))
    return found


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """Each module of ``package`` (its path inside it) and the modules of it that it imports.

    Importing ``gmp.a.b`` runs ``gmp/a/__init__.py`` and ``gmp/a/b.py``; ``from gmp.a import c`` runs
    ``gmp/a/c.py`` where ``c`` is a module, else takes the name ``c`` from ``gmp/a/__init__.py``. The
    ``__init__.py`` of a package that a module is inside of has already started when the module runs, so
    importing a module of that package through it is no edge to it; taking a name from it is.
    """
    graph = {}
    for path in sorted(package.rglob("*.py")):
        name = path.relative_to(package).as_posix()
        here = (package.name, *path.relative_to(package).parts[:-1])
        inside = {package / Path(*here[1:end]) / "__init__.py" for end in range(1, len(here) + 1)}
        edges = set()
        for module, names in _imported_names(ast.parse(path.read_bytes()), here):
            if module[:1] != [package.name]:
                continue
            for end in range(2, len(module) + 1):  # the packages on the way, then the module
                target = _module_file(module[1:end], package)
                if target is not None and target not in inside:
                    edges.add(target)
            for item in names:
                target = _module_file(module[1:] + [item], package)
                if target is None:  # a name taken from the module itself
                    target = _module_file(module[1:], package)
                if target is not None:
                    edges.add(target)
        graph[name] = {p.relative_to(package).as_posix() for p in edges} - {name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[tuple[frozenset[str], list[str]]]:
    """Each group of modules that import one another, directly or not (a strongly connected component of
    ``graph`` with more than one module), with its shortest circle from its first module back to it."""
    index, low, stack, groups = {}, {}, [], []

    def visit(node):  # Tarjan's algorithm
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(graph.get(node, ())):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            group = set()
            while node not in group:
                group.add(stack.pop())
            if len(group) > 1:
                groups.append(frozenset(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return [(group, _circle(graph, group)) for group in groups]


def _circle(graph: dict[str, set[str]], group: frozenset[str]) -> list[str]:
    """The shortest path within ``group`` from its first module back to it (breadth first)."""
    start = min(group)
    parent, frontier = {start: None}, [start]
    while frontier:
        node = frontier.pop(0)
        for other in sorted(graph[node] & group):
            if other == start:
                path = [node]
                while parent[path[0]] is not None:
                    path.insert(0, parent[path[0]])
                return [*path, start]
            if other not in parent:
                parent[other] = node
                frontier.append(other)
    raise AssertionError(f"{sorted(group)} is no strongly connected group")


def test_the_import_graph_finds_circles_through_packages_functions_and_import_module(tmp_path):
    files = {"__init__.py": "from gmp import a\n", "a.py": "def f():\n    from gmp.sub import d\n",
             "sub/__init__.py": "from gmp.sub.d import x\n", "sub/d.py": "from gmp.sub import e\nx = 1\n",
             "sub/e.py": "import importlib\nimportlib.import_module('gmp.a')\n", "b.py": "from gmp.sub import x\n"}
    for name, text in files.items():
        (tmp_path / "gmp" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "gmp" / name).write_text(text)
    graph = import_graph(tmp_path / "gmp")
    assert graph == {"__init__.py": {"a.py"}, "a.py": {"sub/__init__.py", "sub/d.py"}, "sub/__init__.py": {"sub/d.py"},
                     "sub/d.py": {"sub/e.py"}, "sub/e.py": {"a.py"}, "b.py": {"sub/__init__.py"}}
    [(group, circle)] = circles(graph)
    assert group == {"a.py", "sub/__init__.py", "sub/d.py", "sub/e.py"}
    assert circle == ["a.py", "sub/d.py", "sub/e.py", "a.py"]
    (tmp_path / "gmp" / "sub" / "e.py").write_text("import importlib\n")
    assert circles(import_graph(tmp_path / "gmp")) == []


def test_no_module_of_gmp_imports_itself_through_others():
    found = [circle for group, circle in circles(import_graph())]
    for circle in found:
        print("import circle:", " -> ".join(circle))
    assert not found, "import circles (each module imports the next): " + "; ".join(" -> ".join(c) for c in found)


def long_modules(package: Path = PACKAGE, known: dict[str, int] = KNOWN_LONG) -> list[str]:
    """What is wrong with the lengths of the modules of ``package``, one line each: a module over MAX_LINES not in
    ``known``, one in ``known`` that is no longer over it, one in ``known`` that grew since it was listed."""
    lengths = {p.relative_to(package).as_posix(): len(p.read_text(encoding="utf-8").splitlines())
               for p in package.rglob("*.py")}
    long = {module: n for module, n in sorted(lengths.items()) if n > MAX_LINES and module not in known}
    done = sorted(module for module in known if lengths.get(module, 0) <= MAX_LINES)
    grown = {module: lengths[module] for module in known if lengths.get(module, 0) > known[module]}
    return ([f"modules over {MAX_LINES} lines (split each into a small package): {long}"] * bool(long)
            + [f"{done} no longer over {MAX_LINES} lines: remove them from KNOWN_LONG"] * bool(done)
            + [f"modules still to be split have grown since listed (split them first): {grown}"] * bool(grown))


def test_a_module_that_outgrows_the_limit_is_found_and_so_is_a_listed_one_that_no_longer_does(tmp_path):
    (tmp_path / "short.py").write_text("x = 1\n" * MAX_LINES)
    assert long_modules(tmp_path, {}) == []
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "long.py").write_text("x = 1\n" * (MAX_LINES + 1))
    assert long_modules(tmp_path, {}) == [f"modules over {MAX_LINES} lines (split each into a small package): "
                                          f"{{'sub/long.py': {MAX_LINES + 1}}}"]
    assert long_modules(tmp_path, {"sub/long.py": MAX_LINES + 1}) == []
    assert "have grown since listed" in long_modules(tmp_path, {"sub/long.py": MAX_LINES})[0]
    assert "['short.py'] no longer over" in long_modules(tmp_path, {"sub/long.py": MAX_LINES + 1, "short.py": 900})[0]


def test_no_module_of_gmp_is_much_over_800_lines():
    problems = long_modules()
    assert not problems, "; ".join(problems)
