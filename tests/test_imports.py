"""Import structure, read statically (ast): no cycles between files or packages; each top-level
folder imports only the folders below it (docs/ARCHITECTURE.md §8); Ray only at the edges; and
imports at the top of each module except heavy optional dependencies marked with why.

Every import counts as an edge, wherever it sits: at the top, inside a function, or
under `if TYPE_CHECKING:` (a late or type-only import hides a cycle, it does not remove
it). Importing `a.b.c` also runs the `__init__` of `a.b`, so that is an edge too.
"""

from __future__ import annotations

import ast
import graphlib
import io
import tokenize
from dataclasses import dataclass
from pathlib import Path

import pytest

from benchmarks.actor_imports import import_cost

ROOT = Path(__file__).resolve().parents[1]
SCANNED = ("mmrag", "benchmarks", "research")

LATE_IMPORT_ALLOWED = {
    "deepspeed": "the DeepSpeed learner only; slow to import and pulls in compilers",
    "peft": "LoRA only; a config without adapters never needs it",
    "wandb": "an optional tracker (extra mmrag[wandb]), imported only when train.loggers lists it",
    "mlflow": "an optional tracker (extra mmrag[mlflow]), imported only when train.loggers lists it",
    "mmrag.models.lvlm_generator": "the hf generator backend only; it alone of the generators needs transformers",
    "mmrag.models.visual_reader": "the grounded generator's eye only; of the generators' readers it alone needs "
                                  "torch",
    "mmrag.models.reward_models": "the model reward backends only; the rule reward needs neither torch nor "
                                  "transformers",
    "mmrag.serving.greedy_stages": "the Serve replicas' models, loaded in the replica: `mmrag serve`'s driver "
                                   "only builds the application and must not import the model stack",
}
"""Heavy optional dependencies (packages, or the project's modules that alone bring one) a function may import
late, with a comment saying why."""

EDGE_PACKAGES = ("mmrag.cluster", "mmrag.actors", "mmrag.pipelines")
"""The edges of the one installed namespace; the rest of `mmrag` is the Ray-free core."""

MAPPED_FOLDERS = ("actors", "cluster", "pipelines", "configs")
"""Top-level folders of the repository that `mmrag/` links in and the wheel installs under `mmrag.` only."""

LAYER_MAY_IMPORT = {
    "core": {"core"},
    "mmrag.cluster": {"mmrag.cluster", "core"},
    "mmrag.actors": {"mmrag.actors", "mmrag.cluster", "core"},
    "mmrag.pipelines": {"mmrag.pipelines", "mmrag.actors", "mmrag.cluster", "core"},
    "benchmarks": {"benchmarks", "mmrag.pipelines", "mmrag.actors", "mmrag.cluster", "core"},
    "research": {"research", "benchmarks", "mmrag.pipelines", "mmrag.actors", "mmrag.cluster", "core"},
}
"""The layers each layer may import (docs/ARCHITECTURE.md §8): `core` is `mmrag` less its edge packages."""


def layer(module: str) -> str | None:
    """The layer a dotted module name belongs to; None outside the project."""
    for edge in EDGE_PACKAGES:
        if module == edge or module.startswith(edge + "."):
            return edge
    top = module.split(".")[0]
    return {"mmrag": "core", "benchmarks": "benchmarks", "research": "research"}.get(top)


RAY_ALLOWED_IN_CLUSTER = {"mmrag.cluster.connect"}
"""The one `mmrag.cluster` module that talks to Ray; the rest of it is plans and environments."""

LAZY_EXPORTS = {
    "mmrag/__init__.py": "`mmrag.Pipeline` (PEP 562 `__getattr__`), imported on first use so that importing any "
                         "mmrag module stays free of torch; no module of the repository goes through it",
}
"""Files whose late imports are public re-exports on first use: outside the import graph and the late-import rule."""


@dataclass(frozen=True)
class Import:
    importer: str
    """Dotted name of the importing module."""
    targets: tuple[str, ...]
    """Dotted names of the modules it runs: what it names, plus package `__init__`s on the way."""
    names: tuple[str, ...]
    """The module names it imports, as written (absolute)."""
    late: bool
    """Inside a function body."""
    path: str
    line: int
    end_line: int


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_of(module: str, modules: dict[str, Path]) -> str:
    """The directory a module's file sits in, as a dotted name (a package is its own `__init__`'s)."""
    path = modules[module]
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def source_files() -> dict[str, Path]:
    return {module_name(path): path for top in SCANNED for path in sorted((ROOT / top).rglob("*.py"))}


def _named_modules(node: ast.AST, importer: str, is_package: bool, modules: dict[str, Path]) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base_parts = importer.split(".") if is_package else importer.split(".")[:-1]
    if node.level:
        base = ".".join(base_parts[: len(base_parts) - node.level + 1] + ([node.module] if node.module else []))
    else:
        base = node.module
    # `from a.b import c` runs a.b.c when c is a module, else only a.b.
    submodules = [f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in modules]
    return [base, *submodules]


def _with_packages(name: str, importer: str, modules: dict[str, Path]) -> list[str]:
    """`name` and the package `__init__`s importing it runs that are not already the importer's own."""
    parts = name.split(".")
    own = {".".join(importer.split(".")[:i]) for i in range(1, importer.count(".") + 2)}
    chain = [".".join(parts[:i]) for i in range(1, len(parts) + 1)]
    return [m for m in chain if m in modules and m not in own]


def _imports_inside_functions(tree: ast.AST) -> set[int]:
    """ids of the import nodes that sit in a function body."""
    return {id(child) for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            for child in ast.walk(node) if isinstance(child, (ast.Import, ast.ImportFrom))}


def imports_of(module: str, modules: dict[str, Path]) -> list[Import]:
    path = modules[module]
    tree = ast.parse(path.read_text(), filename=str(path))
    late = _imports_inside_functions(tree)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        named = _named_modules(node, module, path.name == "__init__.py", modules)
        targets = tuple(dict.fromkeys(t for name in named for t in _with_packages(name, module, modules)))
        found.append(Import(module, targets, tuple(named), id(node) in late, str(path.relative_to(ROOT)),
                            node.lineno, node.end_lineno or node.lineno))
    return found


def comment_lines(path: Path) -> set[int]:
    tokens = tokenize.generate_tokens(io.StringIO(path.read_text()).readline)
    return {token.start[0] for token in tokens if token.type == tokenize.COMMENT and token.string.strip("# ")}


@pytest.fixture(scope="module")
def checked() -> tuple[dict[str, Path], list[Import]]:
    modules = source_files()
    return modules, [imp for module in modules for imp in imports_of(module, modules)
                     if not (imp.late and imp.path in LAZY_EXPORTS)]


def first_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as error:
        return list(reversed(error.args[1]))
    return None


def test_each_folder_imports_only_the_folders_below_it(checked):
    _, imports = checked
    upward = [f"{imp.path}:{imp.line} {name}" for imp in imports for name in imp.names
              if layer(name) is not None and layer(name) not in LAYER_MAY_IMPORT[layer(imp.importer)]]
    assert not upward, f"imports of a folder above the importer's (docs/ARCHITECTURE.md §8): {upward}"


def test_the_mapped_folders_are_imported_only_through_mmrag(checked):
    """`import actors.pool` would load a second copy of a module the package knows as `mmrag.actors.pool`, and
    fail wherever the wheel is installed (it ships `mmrag` alone)."""
    _, imports = checked
    direct = [f"{imp.path}:{imp.line} {name}" for imp in imports for name in imp.names
              if name.split(".")[0] in MAPPED_FOLDERS]
    assert not direct, f"import these as mmrag.<folder>: {direct}"
    assert all((ROOT / "mmrag" / folder).resolve() == ROOT / folder for folder in MAPPED_FOLDERS)


def test_nothing_under_mmrag_or_cluster_but_connect_imports_ray(checked):
    _, imports = checked
    ray_users = [f"{imp.path}:{imp.line}" for imp in imports if any(n.split(".")[0] == "ray" for n in imp.names)
                 and layer(imp.importer) in ("core", "mmrag.cluster")
                 and imp.importer not in RAY_ALLOWED_IN_CLUSTER]
    assert not ray_users, ("Ray imported outside the edges (mmrag/actors/, mmrag/pipelines/, "
                           f"mmrag/cluster/connect.py): {ray_users}")


def test_no_import_cycle_between_files(checked):
    modules, imports = checked
    graph = {module: set() for module in modules}
    for imp in imports:
        graph[imp.importer].update(t for t in imp.targets if t != imp.importer)
    cycle = first_cycle(graph)
    assert cycle is None, "import cycle between files: " + " -> ".join(cycle)


def test_no_import_cycle_between_packages(checked):
    modules, imports = checked
    graph = {package_of(module, modules): set() for module in modules}
    for imp in imports:
        source = package_of(imp.importer, modules)
        graph[source].update(p for p in (package_of(t, modules) for t in imp.targets) if p != source)
    cycle = first_cycle(graph)
    assert cycle is None, "import cycle between packages: " + " -> ".join(cycle)


def test_late_imports_are_only_heavy_optional_dependencies_with_a_reason(checked):
    _, imports = checked
    comments: dict[str, set[int]] = {}
    wrong, unexplained = [], []
    for imp in (imp for imp in imports if imp.late):
        where = f"{imp.path}:{imp.line} {imp.names[0]}"
        if not all(name.split(".")[0] in LATE_IMPORT_ALLOWED or name in LATE_IMPORT_ALLOWED for name in imp.names):
            wrong.append(where)
            continue
        lines = comments.setdefault(imp.path, comment_lines(ROOT / imp.path))
        if not lines & set(range(imp.line - 1, imp.end_line + 1)):
            unexplained.append(where)
    assert not wrong, ("imports inside functions that belong at the top of the module "
                       f"(late imports allowed only for {sorted(LATE_IMPORT_ALLOWED)}): {wrong}")
    assert not unexplained, f"late imports without a comment (on or above the line) saying why: {unexplained}"


@pytest.mark.parametrize("module, allowed", [
    ("mmrag.actors.reward", set()),
    ("mmrag.actors.retrieval", set()),
    ("mmrag.actors.generator", set()),  # the grounded reader's torch comes with its backend
    ("mmrag.actors.translator", {"torch", "torchvision", "torch._dynamo", "transformers"}),  # its LVLM, no CLIP
    ("mmrag.pipelines.serve", set()),
])
def test_an_actor_imports_only_the_model_libraries_its_default_backends_run(module, allowed):
    """Every actor process imports its class's module before it starts; torch, torchvision, transformers and
    open_clip cost seconds of CPU each, times every actor of every run (the rule reward, the shards and the
    readers run none of transformers or open_clip). `mmrag serve`'s driver runs no model at all: it imported the
    whole stack before the replicas did (10.3 CPU s before it could refuse a port in use, now 2.4)."""
    assert set(import_cost(module, ROOT)["libraries"]) <= allowed
