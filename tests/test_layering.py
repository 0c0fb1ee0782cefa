"""The package's layers import downward only, and nothing imports in a circle.

Layers, lowest first; a module may import its own layer and the layers below it:

    settings, files  <  tensorfile  <  progress  <  ops  <  functional  <  nn  <  models  <  decode
                     <  pretrained  <  sim  <  data  <  train  <  viz, explore  <  studies  <  lesson, learn  <  cli

(tensorfile, the one reader and writer of safetensors, sits just above the leaf utilities: it needs
numpy, and both train and pretrained import it. decode sits just above models, and below pretrained,
so that a pretrained causal LM decodes with the KV cache; it imports only ops, nn and models. sim, the
gripper world, sits just below data: the palette and instruction grammar both tabletop worlds share live
in sim/language.py, and data's tasks (data/gripper.py) import the world.)

plus three rules: ``decode`` does not import ``data`` (training consumes tasks, decoding does not);
``interop`` (the PyTorch adapters) may import ops, nn and models (and the leaf utilities), and data
and train for the torch engine, and is imported only by the package root's lazy ``__getattr__`` and,
inside its functions, by the command line; the leaf utilities import the standard library only.
Every import counts: at module level, inside functions, and a string that names an npformer module
(``importlib.import_module("npformer.x")``). The source is parsed, not imported.
"""
import ast
import sys
from collections import defaultdict
from pathlib import Path

import npformer

ROOT = Path(npformer.__file__).parent
PKG = "npformer"
LAYERS = [{"settings", "files"}, {"tensorfile"}, {"progress"}, {"ops"}, {"functional"}, {"nn"}, {"models"},
          {"decode"}, {"pretrained"}, {"sim"}, {"data"}, {"train"}, {"viz", "explore"}, {"studies"},
          {"lesson", "learn"}, {"cli", "__main__"}]
RANK = {unit: i for i, layer in enumerate(LAYERS) for unit in layer}
LEAVES = LAYERS[0]
INTEROP_MAY_IMPORT = LEAVES | {"ops", "nn", "models", "data", "train"}   # data, train: the torch engine
FORBIDDEN = {("decode", "data"): "decode does not import data (only train consumes tasks)"}


def _module_names() -> dict[str, Path]:
    """Dotted module name -> file, for every module of the package."""
    names = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names[".".join(parts)] = path
    return names


MODULES = _module_names()


def unit(module: str) -> str:
    """npformer.x.y -> "x" (its subpackage or top-level module); npformer -> "__init__"."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


class _Imports(ast.NodeVisitor):
    """Collects (line, imported npformer module, enclosing function name or None, by name in a string)
    of one module."""

    def __init__(self, here: str, is_package: bool) -> None:
        self.package = here if is_package else here.rpartition(".")[0]
        self.functions: list[str] = []
        self.found: list[tuple[int, str, str | None, bool]] = []

    def _add(self, line: int, target: str, string: bool = False) -> None:
        if target == PKG or target.startswith(PKG + "."):
            while target not in MODULES:                                # npformer.x.name -> npformer.x
                target = target.rpartition(".")[0]
            self.found.append((line, target, self.functions[-1] if self.functions else None, string))

    def _function(self, node) -> None:
        self.functions.append(node.name)
        self.generic_visit(node)
        self.functions.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = _function

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._add(node.lineno, alias.name)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        base = node.module or ""
        if node.level:
            parts = self.package.split(".")
            base = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
        for alias in node.names:                                        # `from . import x` may name a module
            self._add(node.lineno, f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base)

    def visit_Constant(self, node: ast.Constant) -> None:
        # importlib.import_module("npformer.x"); a bare "npformer" is a name (a file format's), not an import
        if isinstance(node.value, str) and node.value in MODULES and node.value != PKG:
            self._add(node.lineno, node.value, string=True)


def _imports() -> list[tuple[str, int, str, str | None, bool]]:
    """(importing module, line, imported module, enclosing function, by string) for every npformer import."""
    rows = []
    for here, path in MODULES.items():
        visitor = _Imports(here, path.name == "__init__.py")
        visitor.visit(ast.parse(path.read_text(encoding="utf-8"), str(path)))
        rows += [(here, *found) for found in visitor.found if found[1] != here]
    return list(dict.fromkeys(rows))                                    # `from x import a, b`: one row


IMPORTS = _imports()


def _why_not(src: str, dst: str, function: str | None) -> str | None:
    """None when unit ``src`` may import unit ``dst`` (inside ``function``), else the reason."""
    if src == dst or dst == "__init__":                                 # the root: e.g. __version__
        return None
    if dst == "interop":
        if (src, function) == ("__init__", "__getattr__") or (src == "cli" and function is not None):
            return None
        return "interop is imported only by the package root's lazy __getattr__ and inside cli's functions"
    if src == "__init__":
        return None
    if src == "interop":
        return None if dst in INTEROP_MAY_IMPORT else f"interop may import only {', '.join(sorted(INTEROP_MAY_IMPORT))}"
    if (src, dst) in FORBIDDEN:
        return FORBIDDEN[src, dst]
    if RANK[dst] > RANK[src]:
        return f"{src} is below {dst}"
    return None


def _where(module: str, line: int) -> str:
    return f"{MODULES[module].relative_to(ROOT.parent)}:{line}"


def test_every_subpackage_and_module_has_a_layer():
    units = {unit(m) for m in MODULES}
    assert units - set(RANK) - {"interop", "__init__"} == set(), "place the new module in LAYERS"


def test_imports_point_downward():
    bad = []
    for src, line, dst, function, _ in IMPORTS:
        why = _why_not(unit(src), unit(dst), function)
        if why:
            bad.append(f"{_where(src, line)}: {src} imports {dst} ({why})")
    assert not bad, "imports against the layer order:\n" + "\n".join(bad)


def test_leaf_utilities_import_only_the_standard_library():
    bad = []
    for module, path in MODULES.items():
        if unit(module) not in LEAVES:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = ["." * node.level + (node.module or "")]
            else:
                continue
            bad += [f"{_where(module, node.lineno)}: {n}" for n in names
                    if n.startswith(".") or n.split(".")[0] not in sys.stdlib_module_names]
    assert not bad, "a leaf utility imports beyond the standard library:\n" + "\n".join(bad)


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while not component or component[-1] != v:
                component.append(stack.pop())
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def _graph(key, strings: bool = True) -> dict[str, set[str]]:
    edges = defaultdict(set)
    for src, _, dst, _, string in IMPORTS:
        if key(src) != key(dst) and (strings or not string):
            edges[key(src)].add(key(dst))
    return edges


def test_no_cycles_between_subpackages():
    cycles = _cycles(_graph(unit))
    assert not cycles, "subpackages that import each other: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_no_cycles_between_modules():
    """Import statements only: a registry may name its entries' modules in strings (data.tasks.TASKS)
    while they import the registry; those strings are imported on first use, never in a circle."""
    cycles = _cycles(_graph(lambda m: m, strings=False))
    assert not cycles, "modules that import each other: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_the_checker_sees_what_it_must():
    """The parser finds in-function imports, `from . import x` modules and importlib strings."""
    found = {(src, dst, fn) for src, _, dst, fn, _ in IMPORTS}
    assert ("npformer", "npformer.interop", "__getattr__") in found
    assert ("npformer", "npformer.functional", None) in found
    assert any(string for *_, string in IMPORTS)                     # e.g. data.tasks' registry tables
    assert _why_not("data", "cli", None) and _why_not("nn", "interop", "__call__")
    assert _why_not("cli", "interop", None) and not _why_not("cli", "interop", "run")
    assert _why_not("decode", "data", None) and not _why_not("train", "data", "resume")
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
