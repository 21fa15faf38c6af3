"""The learning benchmark's world sweep: worlds parsed from the command line, each world's jobs on its own data,
the fixed forms' queries compared with the trained ones, and one report section per world."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from benchmarks.learning import (DEFAULT_WORLD, World, WorldResult, parse_worlds, plan, queries_unlike, report,
                                 world_job)

ROOT = Path(__file__).resolve().parents[1]
CONFIG = str(ROOT / "mmrag/configs/local.yaml")


def arguments(out: Path) -> argparse.Namespace:
    return argparse.Namespace(config=CONFIG, set=[], test_limit=None, out=out, runs=["local-reference"],
                              run_seeds={"local-reference": [0, 1, 2, 3, 4]}, run_sets={"local-reference": []},
                              world_seeds=[0, 1], steps=2, eval_every=1, baselines_json=out / "baselines.json")


def test_worlds_are_the_default_first_then_each_named_one_with_its_synth_options():
    worlds = parse_worlds(["mix=--seed 11 --world v2 --entities 40", DEFAULT_WORLD])
    assert [w.name for w in worlds] == [DEFAULT_WORLD, "mix"]
    assert worlds[1].synth_options == ("--seed", "11", "--world", "v2", "--entities", "40")


@pytest.mark.parametrize("spec", ["default=--seed 3", "seed7", "seed 7=--seed 7", "=--seed 7"])
def test_a_malformed_world_is_refused_naming_it(spec):
    with pytest.raises(SystemExit, match="--worlds"):
        parse_worlds([spec])


def test_a_world_named_twice_is_refused():
    with pytest.raises(SystemExit, match="named twice"):
        parse_worlds(["a=--seed 1", "a=--seed 2"])


def test_another_worlds_jobs_train_and_evaluate_on_its_own_data_with_its_own_seeds(tmp_path):
    args = arguments(tmp_path)
    world = World("seed7", ("--seed", "7", "--world", "v2"))
    baseline, runs = plan(args, 10, world)
    default_baseline, default_runs = plan(args, 10)
    data = f"data.dir={tmp_path / 'worlds/seed7/data'}"
    assert sorted(runs) == [("local-reference", 0), ("local-reference", 1)]
    assert len(default_runs) == 5, "the default world keeps its own seeds"
    job = runs["local-reference", 1]
    assert job.name == "seed7/local-reference/seed-1"
    assert job.directory == tmp_path / "worlds/seed7/local-reference/seed-1"
    for command in [*job.commands, *baseline.commands]:
        assert data in command and "data.world=v2" in command
    assert data not in default_baseline.commands[0]
    assert baseline.config_digest != default_baseline.config_digest


def test_a_world_is_written_indexed_and_its_training_free_baselines_measured_before_it_trains(tmp_path):
    args = arguments(tmp_path)
    job = world_job(args, World("seed7", ("--seed", "7")))
    synth, index, baselines = job.commands
    assert synth[synth.index("synth") + 1:][-4:] == ["--out", str(tmp_path / "worlds/seed7/data"), "--seed", "7"]
    assert "index" in index and "--local" in index and f"index.dir={tmp_path / 'worlds/seed7/index'}" in index
    assert baselines[baselines.index("--json") + 1] == str(tmp_path / "worlds/seed7/baselines.json")
    assert "--json-only" in baselines, "another world's baselines leave RESULTS.md alone"


def test_a_query_equal_to_a_fixed_form_up_to_case_and_spacing_is_not_unlike_it():
    fixed = {"question": {"q0": "When was this built?", "q1": "Who made it?"},
             "sight+question": {"q0": "red circle when was this built", "q1": "blue star who made it"}}
    assert queries_unlike({"q0": "red circle  when was this built", "q1": "blue star tower who made it"},
                          fixed) == 0.5


def record(world: str, run: str, seed: int, trained: float) -> dict:
    kinds = {"visual": {"reward": trained, "exact_match": trained, "docs_kept_mean": 0.0, "docs_zero_fraction": 1.0,
                        "docs_at_least_one_fraction": 0.0, "docs_at_least_two_fraction": 0.0, "gold_selected": 0.0}}
    return {"world": world, "run": run, "seed": seed, "questions": 10, "entities": 2, "untrained": 0.3,
            "trained": trained, "gain": trained - 0.3, "recall_at_k": 0.9, "gold_selected": 0.5, "train_minutes": 1.0,
            "eval_minutes": 0.5, "val_curve": {"0": 0.3, "2": trained}, "by_kind": kinds,
            "queries_unlike_fixed_forms": 0.7, "reward_model_gap": None}


def test_the_report_has_one_section_per_world_with_its_own_best_training_free_pipeline_and_targets(tmp_path):
    args = arguments(tmp_path)
    args.plot, args.jobs, args.portable_sets, args.descriptions = tmp_path / "learning.png", 1, [], {}
    results = []
    for world, best in ((World(DEFAULT_WORLD), 0.5), (World("seed7", ("--seed", "7")), 0.9)):
        baselines = [{"world": world.name, "run": name, "exact_match": 0.3, "questions": 10, "entities": 2,
                      "by_kind": {}} for name in ("no_retrieval", "untrained", "oracle")]
        results.append(WorldResult(world, [record(world.name, "local-reference", 0, 0.7)], baselines,
                                   {"name": "rrf: question", "k": {"visual": 0, "one-fact": 3},
                                    "test_reward": best, "by_kind": {}},
                                   {"v0": "e0"}, []))
    text = report(args, results, 1.0)
    assert "### World default (the config's data)" in text and "### World seed7 (`mmrag synth --seed 7`" in text
    assert "learning-seed7.png" in text and "k = visual 0, one-fact 3, test exact match 0.900" in text
    margins = {r.world.name: next(t for t in r.found if "training-free" in t.name) for r in results}
    assert margins["default"].met and not margins["seed7"].met, "0.7 clears 0.5 + 0.10, not 0.9 + 0.10"
    assert json.dumps([t.as_dict() for r in results for t in r.found])


@pytest.mark.slow  # writes, indexes and measures two tiny worlds, then trains 2 steps on each (minutes)
def test_a_two_step_sweep_over_two_tiny_worlds_records_every_world(tmp_path, zoo_dir):
    import subprocess
    import sys

    data, index = tmp_path / "data", tmp_path / "index"
    sets = [f"zoo.cache_dir={zoo_dir}", f"data.dir={data}", f"index.dir={index}"]
    set_options = [option for assignment in sets for option in ("--set", assignment)]
    python = [sys.executable, "-m"]
    for command in (["mmrag.pipelines.cli", "synth", "--entities", "12", *set_options],
                    ["mmrag.pipelines.cli", "index", "--local", *set_options],
                    ["benchmarks.baselines", *set_options, "--json", str(tmp_path / "baselines.json"), "--json-only"],
                    ["benchmarks.learning", "--worlds", "default", "small=--seed 5 --entities 12", "--only",
                     "local-reference", "shuffled", "--seeds", "0", "--world-seeds", "0", "--steps", "2",
                     "--eval-every", "1", "--val-questions", "8", "--test-limit", "12", *set_options,
                     "--baselines-json", str(tmp_path / "baselines.json"), "--out", str(tmp_path / "runs"),
                     "--json", str(tmp_path / "learning.json"), "--plot", str(tmp_path / "learning.png"),
                     "--print-only"]):
        subprocess.run([*python, *command], cwd=ROOT, check=True, capture_output=True)
    figures = json.loads((tmp_path / "learning.json").read_text())
    assert list(figures["worlds"]) == ["default", "small"]
    assert {(r["world"], r["run"]) for r in figures["records"]} == {
        (world, run) for world in ("default", "small") for run in ("local-reference", "shuffled")}
    for world in figures["worlds"].values():
        assert set(world["best_training_free"]) >= {"name", "k", "test_reward"}
        assert any("training-free" in target["target"] for target in world["targets"])
    assert all(r["reward_model_gap"] is None for r in figures["records"]), "the rule reward has no gap"
    assert (tmp_path / "learning-small.png").is_file()
