"""The package as a user installs it: a wheel with every module and preset, true metadata, no stray files.

The wheel test builds from a copy of the sources, installs the wheel with `--no-deps` into a
fresh virtual environment that sees this environment's site-packages (so nothing is
downloaded or reinstalled), and runs the commands in a directory outside the checkout.
"""

from __future__ import annotations

import ast
import configparser
import functools
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
PACKAGE_ROOTS = ("mmrag",)
"""The top-level packages the wheel ships: one namespace (`mmrag.configs` holds the presets as data)."""
SOURCES = (*PACKAGE_ROOTS, "setup.cfg", "pyproject.toml", "README.md", "LICENSE")
LOCAL_MODULES = {*PACKAGE_ROOTS, "benchmarks", "research", "tests", "helpers", "conftest", "__future__"}


def _setup_cfg() -> configparser.ConfigParser:
    parser = configparser.ConfigParser()
    parser.read(ROOT / "setup.cfg")
    return parser


def _requirements(field: str) -> list[Requirement]:
    section, _, key = field.rpartition(".")
    return [Requirement(line) for line in _setup_cfg()[section][key].strip().splitlines()]


def _names(requirements: list[Requirement]) -> set[str]:
    return {canonicalize_name(r.name) for r in requirements}


def _third_party_imports(folder: str) -> dict[str, bool]:
    """{top-level module: imported at some module's top level} over the .py files under `folder`."""
    found: dict[str, bool] = {}
    siblings = {path.stem for path in (ROOT / folder).glob("*.py")}  # e.g. one test module reusing another's helper
    for path in (ROOT / folder).rglob("*.py"):
        tree = ast.parse(path.read_text())
        top_level = {id(node) for node in tree.body}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                modules = [node.module]
            else:
                continue
            for module in modules:
                name = module.split(".")[0]
                if name not in sys.stdlib_module_names and name not in LOCAL_MODULES and name not in siblings:
                    found[name] = found.get(name, False) or id(node) in top_level
    return found


@functools.cache
def _module_distributions() -> dict[str, list[str]]:
    return importlib.metadata.packages_distributions()


def _distribution(module: str) -> str:
    distributions = _module_distributions().get(module)
    assert distributions, f"import {module}: no installed distribution provides it"
    return canonicalize_name(distributions[0])


def test_every_third_party_import_is_a_declared_requirement():
    base = _names(_requirements("options.install_requires"))
    optional = _names(_requirements("options.extras_require.wandb") + _requirements("options.extras_require.mlflow"))
    for folder in PACKAGE_ROOTS:
        for module, at_top in _third_party_imports(folder).items():
            name = _distribution(module)
            # An optional tracker is imported only where it is used (inside a function), never at a module's top.
            assert name in base or (name in optional and not at_top), f"{folder}/ imports {module} ({name})"
    test = base | _names(_requirements("options.extras_require.test"))
    assert {_distribution(m) for m in _third_party_imports("tests")} <= test
    bench = base | _names(_requirements("options.extras_require.bench"))
    assert {_distribution(m) for m in _third_party_imports("benchmarks")} <= bench
    assert {_distribution(m) for m in _third_party_imports("research")} <= bench


def test_installed_versions_meet_the_stated_minimums():
    requirements = _requirements("options.install_requires") + _requirements("options.extras_require.test")
    too_old = [f"{r.name} {importlib.metadata.version(r.name)} (setup.cfg: {r.specifier})" for r in requirements
               if not r.specifier.contains(importlib.metadata.version(r.name), prereleases=True)]
    assert too_old == []
    assert sys.version_info >= (3, 11) and _setup_cfg()["options"]["python_requires"] == ">=3.11"


def test_no_built_package_is_tracked_and_gitignore_keeps_them_out():
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert [name for name in tracked.splitlines() if name.endswith((".whl", ".tar.gz"))] == []
    ignored = subprocess.run(["git", "check-ignore", "-q", "stray-1.0-py3-none-any.whl"], cwd=ROOT)
    assert ignored.returncode == 0


@pytest.fixture(scope="module")
def installed_wheel(tmp_path_factory) -> tuple[Path, Path]:
    """(the wheel, a fresh venv's bin directory with it installed) built from a copy of the sources."""
    root = tmp_path_factory.mktemp("wheel")
    source = root / "source"
    for name in SOURCES:
        copy = shutil.copytree if (ROOT / name).is_dir() else shutil.copy2
        copy(ROOT / name, source / name, **({"ignore": shutil.ignore_patterns("__pycache__")}
                                          if (ROOT / name).is_dir() else {}))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(root / "dist"), str(source)], check=True, capture_output=True)
    wheel = next((root / "dist").glob("mmrag-*.whl"))
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "-q", str(wheel)],
                   check=True, capture_output=True)
    # The dependencies: this environment's site-packages, after the venv's own (where the wheel went).
    fresh_site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                capture_output=True, text=True, check=True).stdout.strip()
    ours = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (Path(fresh_site) / "dependencies.pth").write_text("".join(f"{path}\n" for path in sorted(ours)))
    return wheel, venv / "bin"


def test_the_wheel_ships_every_package_the_presets_and_the_license(installed_wheel):
    wheel, _ = installed_wheel
    names = zipfile.ZipFile(wheel).namelist()
    packages = sorted(str(init.parent.relative_to(ROOT)) for root in PACKAGE_ROOTS
                      for init in (ROOT / root).rglob("__init__.py"))
    assert [p for p in packages if f"{p}/__init__.py" not in names] == []
    presets = sorted(str(path.relative_to(ROOT)) for path in (ROOT / "mmrag" / "configs").rglob("*.yaml"))
    assert presets and [p for p in presets if p not in names] == []
    metadata = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert "License: Apache-2.0" in metadata and "Requires-Python: >=3.11" in metadata
    assert "Apache License\n                           Version 2.0" in (ROOT / "LICENSE").read_text()
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)


@pytest.mark.slow
def test_the_installed_wheel_runs_every_command_from_any_directory(installed_wheel, tmp_path):
    _, bin_dir = installed_wheel
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "RAY_ADDRESS")}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"

    def mmrag(*args: str) -> str:
        result = subprocess.run(["mmrag", *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, f"mmrag {' '.join(args)}: {result.stderr[-2000:]}"
        return result.stdout

    where = subprocess.run([bin_dir / "python", "-c", "import mmrag, importlib.metadata as m; "
                            "print(mmrag.__file__, mmrag.__version__, m.version('mmrag'))"],
                           cwd=tmp_path, env=env, capture_output=True, text=True, check=True).stdout.split()
    assert where[0].startswith(str(bin_dir.parent)) and where[1] == where[2]  # the wheel's copy, one version
    assert "serve" in mmrag("--help") and "--checkpoint" in mmrag("serve", "--help")
    assert "fits" in mmrag("plan")  # the embedded defaults: no --config, no mmrag/configs/ folder here
    assert '"HF_HUB_OFFLINE"' not in mmrag("plan", "--config", "gpu_qwen2vl", "--runtime-env-json")  # by name
    mmrag("synth", "--entities", "8")
    assert (tmp_path / "runs" / "data" / "kb.parquet").is_file()


def test_the_wheel_installs_the_mmrag_namespace_alone(installed_wheel):
    wheel, _ = installed_wheel
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names}
    assert {top for top in tops if not top.endswith(".dist-info")} == {"mmrag"}
    top_level = [n for n in names if n.endswith(".dist-info/top_level.txt")]
    assert all(zipfile.ZipFile(wheel).read(n).decode().split() == ["mmrag"] for n in top_level)


def _stand_in_wheel(name: str, out: Path) -> Path:
    """A tiny distribution named `name` with a top-level package `name`, as the package index's `configs` and
    `cluster` have: what a clash with a generic top-level name would overwrite."""
    source = out / f"{name}-source"
    (source / name).mkdir(parents=True)
    (source / name / "__init__.py").write_text(f'STAND_IN = "{name}"\n')
    (source / "pyproject.toml").write_text(
        f'[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n\n'
        f'[project]\nname = "{name}"\nversion = "9.9"\n\n[tool.setuptools]\npackages = ["{name}"]\n')
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out),
                    str(source)], check=True, capture_output=True)
    return next(out.glob(f"{name}-9.9-*.whl"))


@pytest.mark.slow
def test_the_wheel_works_beside_packages_named_configs_and_cluster_installed_and_removed(installed_wheel, tmp_path):
    _, bin_dir = installed_wheel
    python = bin_dir / "python"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "RAY_ADDRESS")}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    stand_ins = [_stand_in_wheel(name, tmp_path) for name in ("configs", "cluster")]

    def pip(*args: str) -> None:
        subprocess.run([sys.executable, "-m", "pip", "--python", str(python), *args], check=True,
                       capture_output=True)

    def every_command_works(workdir: Path) -> None:
        workdir.mkdir()

        def mmrag(*args: str) -> str:
            result = subprocess.run(["mmrag", *args], cwd=workdir, env=env, capture_output=True, text=True,
                                    timeout=300)
            assert result.returncode == 0, f"mmrag {' '.join(args)}: {result.stderr[-2000:]}"
            return result.stdout

        assert "serve" in mmrag("--help")
        assert "fits" in mmrag("plan")
        assert json.loads(mmrag("plan", "--config", "gpu_qwen2vl", "--runtime-env-json"))["env_vars"]
        mmrag("synth", "--entities", "8")
        assert (workdir / "runs" / "data" / "kb.parquet").is_file()

    pip("install", "--no-deps", "-q", *map(str, stand_ins))
    every_command_works(tmp_path / "beside")
    probe = "import configs, cluster; print(configs.STAND_IN, cluster.STAND_IN)"
    assert subprocess.run([python, "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True,
                          check=True).stdout.split() == ["configs", "cluster"], "mmrag overwrote a stand-in"
    pip("uninstall", "-y", "-q", "configs", "cluster")
    every_command_works(tmp_path / "after_removal")
