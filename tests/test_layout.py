"""The package's layout: no import cycles, and the composition package small modules in data-flow order.

Imports are read from the source (``ast``), not by importing: a cycle that only shows when modules are
imported in some order would otherwise pass or fail by accident.
"""
import ast
import pathlib
import re

import pytest

import fastpld

ROOT = pathlib.Path(fastpld.__file__).parent
COMPOSITION = "fastpld.composition"
# the modules of the composition package and the FFT backends behind it (issue 19)
OWNED_BACKENDS = ("fastpld._fft", "fastpld._backend", "fastpld._fft_error", "fastpld._native")
MAX_LINES = 600  # docs/STYLE: past ~600 lines a module is split by concept


def _module_name(path):
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _modules():
    mods = {_module_name(p): p for p in ROOT.rglob("*.py")}
    # compiled extensions are leaves of the graph (their .pyx import nothing of the package)
    for p in ROOT.glob("*.pyx"):
        mods.setdefault(_module_name(p), None)
    return mods


MODULES = _modules()


def _imports(name, lazy):
    """Modules of the package that ``name`` imports: at module level, or anywhere (``lazy``: also inside
    functions)."""
    path = MODULES[name]
    if path is None:
        return set()
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    nodes = ast.walk(tree) if lazy else tree.body
    out = set()
    for node in nodes:
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                out.add(sub if sub in MODULES else target)
        elif isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
    return {m for m in out if m in MODULES and m != name}


def _cycles(graph):
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, on_stack, stack, out = {}, {}, set(), [], []
    counter = 0
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def _owned():
    return sorted(m for m in MODULES if m.startswith(COMPOSITION + ".") or m in OWNED_BACKENDS)


def test_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_at_module_level():
    graph = {m: _imports(m, lazy=False) for m in MODULES}
    assert _cycles(graph) == []


def test_no_import_cycle_in_composition_and_backends_even_inside_functions():
    owned = set(_owned())
    graph = {m: _imports(m, lazy=True) & owned for m in owned}
    assert _cycles(graph) == []


def test_composition_modules_import_only_modules_listed_above_them():
    doc = ast.get_docstring(ast.parse(MODULES[COMPOSITION].read_text()))
    order = re.findall(r"^``(\w+)``\s", doc, flags=re.M)
    listed = [f"{COMPOSITION}.{m}" for m in order]
    assert sorted(listed) == sorted(m for m in MODULES if m.startswith(COMPOSITION + ".")), \
        "the package docstring's table lists every module once"
    for i, name in enumerate(listed):
        inside = {m for m in _imports(name, lazy=True) if m.startswith(COMPOSITION + ".")}
        assert inside <= set(listed[:i]), (name, sorted(inside - set(listed[:i])))


@pytest.mark.parametrize("name", _owned())
def test_module_is_small(name):
    n = len(MODULES[name].read_text().splitlines())
    assert n <= MAX_LINES, f"{name} has {n} lines"


PACKAGE_MAX_LINES = 750  # issue 19: no module of the package past ~700 lines


@pytest.mark.parametrize("name", sorted(m for m, p in MODULES.items() if p is not None))
def test_no_module_is_large(name):
    n = len(MODULES[name].read_text().splitlines())
    assert n <= PACKAGE_MAX_LINES, f"{name} has {n} lines: split it by concept"
