"""Parallel zoo builds: the declared needs are the warm starts the builders resolve, needs build first, and a
model built in a worker process is byte for byte the one built in this process."""

from __future__ import annotations

import ast
import importlib
import inspect
import textwrap

import pytest

from benchmarks.zoo_build import model_files
from mmrag.model_refs import MODELS, ensure_built
from mmrag.zoo.parallel_build import build_models, build_order


def resolved_zoo_names(builder: str) -> set[str]:
    """The `zoo:NAME` constants a builder function passes to `resolve` (read from its source)."""
    module_name, function_name = builder.split(":")
    source = textwrap.dedent(inspect.getsource(getattr(importlib.import_module(module_name), function_name)))
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "resolve" and node.args:
            first = node.args[0]
            if isinstance(first, ast.Constant) and str(first.value).startswith("zoo:"):
                names.add(first.value.removeprefix("zoo:"))
    return names


@pytest.mark.parametrize("name", list(MODELS))
def test_needs_are_exactly_the_zoo_models_the_builder_resolves(name):
    model = MODELS[name]
    assert set(model.needs) == resolved_zoo_names(model.builder)


def test_build_order_puts_every_need_first_and_keeps_the_rest_in_order():
    order = build_order(["tiny-clip-v2", "visual-reader", "tiny-clip", "tiny-clip-init"])
    assert order == ["tiny-clip-init", "tiny-clip", "tiny-clip-v2", "visual-reader"]
    every = build_order(list(reversed(MODELS)))
    assert sorted(every) == sorted(MODELS)
    for position, name in enumerate(every):
        assert all(every.index(need) < position for need in MODELS[name].needs)


def test_models_built_in_worker_processes_equal_models_built_here(tmp_path):
    """The cheap models built by `build_models`'s worker processes and rebuilt in this process come out byte for
    byte the same (benchmarks/zoo_build.py compares every model). Both builds are made here, into empty caches: the
    session's zoo may come from an earlier run's cache."""
    names = ["tiny-clip-init", "tiny-lvlm"]
    build_models(names, str(tmp_path / "workers"), workers=2)
    for name in names:
        ensure_built(name, str(tmp_path / "here"))
        in_workers, here = model_files(tmp_path / "workers", name), model_files(tmp_path / "here", name)
        assert sorted(in_workers) == sorted(here), name
        differing = [file for file in here if in_workers[file] != here[file]]
        assert not differing, f"{name}: {differing} differ"


def test_a_lone_model_is_built_in_this_process_and_then_found_cached(tmp_path):
    first = build_models(["tiny-clip-init"], str(tmp_path), workers=1)
    again = build_models(["tiny-clip-init"], str(tmp_path), workers=4)
    assert first["tiny-clip-init"].built_now and not again["tiny-clip-init"].built_now
