"""`mmrag eval` (in-process and on Ray Data) and `mmrag report` on a tiny trained run."""

from __future__ import annotations

import json
import os
import shutil

import pytest
from PIL import Image

from mmrag.data.dataset import load_questions
from mmrag.evaluation.settings import SETTINGS
from mmrag.pipelines.cli import main

pytestmark = pytest.mark.slow  # evaluates on Ray Data

COMPARED = ("setting", "id", "query", "answer", "selected", "reward")


@pytest.fixture(scope="module")
def run(tmp_path_factory, synth_dir, zoo_dir) -> dict:
    """Index the shared 24-entity set with random tiny models and train one step, in this process: what eval and
    report need is an export (distributed training has its own tests)."""
    root = tmp_path_factory.mktemp("eval_run")
    # World v1 (the shared dataset's) and its extractive reader: the settings' figures below are that reader's.
    flags = ["--config", "local-v1", "--set", f"data.dir={synth_dir}", "--set", f"index.dir={root / 'index'}", "--set",
             f"zoo.cache_dir={zoo_dir}", "--set", "encoder.pretrained=zoo:tiny-clip-init", "--set",
             "reranker.backbone_pretrained=zoo:tiny-clip-init", "--set", "translator.model=zoo:tiny-lvlm",
             "--set", "translator.max_new_tokens=6"]
    assert main(["index", "--local", *flags]) == 0
    assert main(["train", *flags, "--mode", "local-reference", "--set", f"train.run_dir={root / 'run'}", "--set",
                 "train.steps=1", "--set", "train.questions_per_step=2", "--set", "translator.num_samples=2", "--set",
                 "reranker.num_samples=2", "--set", "train.eval_questions=2", "--no-progress"]) == 0
    return {"flags": flags, "run_dir": root / "run", "export": str(root / "run" / "export"), "root": root}


@pytest.fixture(scope="module")
def local_eval(run) -> dict:
    out = run["root"] / "eval_local"
    assert main(["eval", *run["flags"], "--checkpoint", run["export"], "--local", "--limit", "4",
                 "--batch-size", "4", "--out", str(out), "--no-progress"]) == 0
    records = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    return {"records": records, "metrics": json.loads((out / "metrics.json").read_text())}


def test_local_eval_compares_the_four_settings(local_eval, synth_dir):
    metrics, records = local_eval["metrics"], local_eval["records"]
    assert list(metrics["settings"]) == list(SETTINGS) and metrics["questions"] == 4
    assert len(records) == 16 and [r["setting"] for r in records[::4]] == list(SETTINGS)
    test_ids = [q.id for q in load_questions(synth_dir, "test")[:4]]
    assert [r["id"] for r in records if r["setting"] == "trained"] == test_ids
    no_retrieval, oracle = metrics["settings"]["no_retrieval"], metrics["settings"]["oracle"]
    # No evidence: nothing kept and nothing retrieved; the extractive reader cannot answer.
    assert no_retrieval["docs_kept_mean"] == 0.0 and no_retrieval["recall@1"] == 0.0
    assert no_retrieval["exact_match"] == 0.0
    # Gold evidence: the one gold passage states the answer, so every answer is right.
    assert oracle["recall@1"] == 1.0 and oracle["docs_kept_mean"] == 1.0
    assert oracle["exact_match"] == 1.0 and oracle["reward_mean"] == 1.0
    for setting in ("untrained", "trained"):
        assert metrics["settings"][setting]["docs_kept_mean"] <= 3  # reranker.max_docs


def footer_readers() -> int:
    """The footer-reading actors (Ray Data's Parquet listing) the session's Ray has started so far."""
    from ray._private import state  # the public state API needs the dashboard, which the suite's Ray runs without

    return sum(actor["ActorClassName"] == "FooterReader" for actor in state.actors().values())


def test_ray_data_eval_matches_local(run, local_eval, ray_session, tmp_path, capsys):
    readers_before = footer_readers()
    assert main(["eval", *run["flags"], "--checkpoint", run["export"], "--settings", "trained,oracle",
                 "--limit", "2", "--batch-size", "1", "--out", str(tmp_path), "--no-progress"]) == 0
    header = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("metric"))
    assert header.split() == ["metric", "trained", "oracle"]
    on_ray = [json.loads(line) for line in (tmp_path / "predictions.jsonl").read_text().splitlines()]
    ids = {r["id"] for r in on_ray}

    def key(records):
        compared = [r for r in records if r["setting"] in ("trained", "oracle") and r["id"] in ids]
        return sorted(tuple(json.dumps(r[k]) for k in COMPARED) for r in compared)

    assert len(on_ray) == 4 and len(ids) == 2 and key(on_ray) == key(local_eval["records"])
    assert footer_readers() - readers_before == 1, "one questions file: one footer reader, not a pool of 32"


def test_report_draws_plots_and_lists_examples(run, synth_dir, tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    shutil.copy(run["run_dir"] / "config.json", run_dir / "config.json")
    os.symlink(run["export"], run_dir / "export")
    lines = []
    for step in range(11):
        if step % 5 == 0:
            lines.append({"step": step, "eval": {"reward_mean": 0.1 + 0.04 * step, "recall_at_k": 0.5 + 0.02 * step,
                                                 "gold_selected": 0.3, "docs_kept_mean": 2.0 - 0.1 * step,
                                                 "query_words_mean": 6.0}})
        if step:
            lines.append({"step": step, "reward_mean": 0.05 * step, "docs_kept_mean": 2.5, "query_words_mean": 7.0})
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))

    assert main(["report", str(run_dir), "--examples", "2"]) == 0
    report = run_dir / "report"
    for name in ("reward.png", "docs_kept.png", "query_length.png", "recall.png"):
        with Image.open(report / name) as image:
            image.verify()
            assert image.format == "PNG" and image.size == (600, 350)
    markdown = (report / "REPORT.md").read_text()
    assert "10 training steps logged" in markdown
    assert "| reward_mean | 0.100 | 0.500 | +0.400 |" in markdown
    assert "| recall_at_k | 0.500 | 0.700 | +0.200 |" in markdown
    example_rows = [line for line in markdown.splitlines() if line.startswith("| ") and "exported (step 1)" not in line
                    and "---" not in line and "metric" not in line and "reward_mean" not in line]
    for question in load_questions(synth_dir, "val")[:2]:
        assert any(row.startswith(f"| {question.question} | {question.answers[0]} |") for row in example_rows)
    assert "![reward](reward.png)" in markdown
