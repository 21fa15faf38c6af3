"""The learning benchmark's job reuse: a finished job is reused only if it would run the same config again."""

import argparse
import json
from pathlib import Path

from benchmarks.learning import plan

ROOT = Path(__file__).resolve().parents[1]


def _plan(config: Path, out: Path):
    args = argparse.Namespace(config=str(config), set=[], test_limit=None, out=out, runs=["local-reference"],
                              run_seeds={"local-reference": [0]}, run_sets={"local-reference": []}, steps=4,
                              eval_every=2)
    baseline, runs = plan(args, 10)
    return baseline, runs["local-reference", 0]


def _finish(job) -> None:
    job.directory.mkdir(parents=True)
    job.seconds = [1.0] * len(job.commands)
    job.mark_finished()


def test_a_finished_job_is_reused_when_its_commands_and_config_are_unchanged(tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text((ROOT / "mmrag/configs/local.yaml").read_text())
    for job in _plan(config, tmp_path / "out"):
        _finish(job)
    assert all(job.finished_before() for job in _plan(config, tmp_path / "out"))


def test_a_job_whose_commands_are_unchanged_but_whose_config_changed_is_run_again(tmp_path):
    """What a changed default does: the same command lines resolve to another config (here the config file's
    content changes under the same path: a document costs more), so the finished job measured something else."""
    config = tmp_path / "config.yaml"
    text = (ROOT / "mmrag/configs/local.yaml").read_text()
    config.write_text(text)
    for job in _plan(config, tmp_path / "out"):
        _finish(job)
    config.write_text(text.replace("train:\n", "train:\n  doc_cost: 0.5\n", 1))
    baseline, run = _plan(config, tmp_path / "out")
    assert not run.finished_before() and not baseline.finished_before()


def test_a_job_marked_before_markers_held_a_config_digest_is_reused_on_its_commands_and_said(tmp_path, capsys):
    config = tmp_path / "config.yaml"
    config.write_text((ROOT / "mmrag/configs/local.yaml").read_text())
    _, run = _plan(config, tmp_path / "out")
    run.directory.mkdir(parents=True)
    run.marker.write_text(json.dumps({"commands": run.commands, "seconds": [60.0, 30.0]}))
    assert run.finished_before() and run.seconds == [60.0, 30.0]
    said = capsys.readouterr().err
    assert f"{run.directory}: finished before job markers recorded their config" in said
    assert run.finished_before() and capsys.readouterr().err == "", "said once per job"
