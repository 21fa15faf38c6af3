"""The credit-signal benchmark reads benchmarks.learning's job directories: the ranking's signal per phase, each
job's test reward, shared - tree paired by seed, and it refuses a job trained with the other credit."""

import json
import sys

import pytest

from benchmarks.learning import runs_for
from research.credit_assignment import credit_signal
from research.credit_assignment.credit_signal import measure, pair_differences


def write_job(runs_dir, run, seed, credit, examples, rewards, test_reward, finished=True):
    """A job directory as benchmarks.learning leaves it: one training record per step (256 leaves: 32 queries of
    8 selections, one the gate's skip arm; `examples` ranking draws with a signal plus 32 gate queries), val
    evaluations between them, the config it trained with, its test evaluation, job.json when finished."""
    directory = runs_dir / run / f"seed-{seed}"
    (directory / "eval_test").mkdir(parents=True)
    records = [{"step": 0, "eval": {"reward_mean": 0.5}}]
    for step, (count, reward) in enumerate(zip(examples, rewards), start=1):
        reranker = {"examples": count + 32, "gate_queries": 32 / (count + 32)}
        records.append({"step": step, "leaves": 256, "reward_mean": reward, "reranker": reranker,
                        **({"translator": {"examples": 10}} if "reranker-only" not in run else {})})
    (directory / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (directory / "config.json").write_text(json.dumps({"experimental": {"credit": credit},
                                                       "reranker": {"num_samples": 8, "gate": True}}))
    (directory / "eval_test" / "metrics.json").write_text(
        json.dumps({"settings": {"trained": {"reward_mean": test_reward}}, "by_kind": {"trained": {}}}))
    (directory / "eval_test" / "predictions.jsonl").write_text(json.dumps({"id": "q0"}) + "\n")
    if finished:
        (directory / "job.json").write_text("{}")


def test_each_pair_differs_in_the_credit_alone_in_benchmark_learning():
    sets, _ = runs_for("mean")
    for shared, tree in credit_signal.PAIRS:
        assert sets[shared] == [*sets[tree], "experimental.credit=shared"]


def test_signal_per_phase_and_shared_minus_tree_paired_by_seed(tmp_path):
    for seed, offset in ((0, 0.0), (1, 0.1)):
        write_job(tmp_path, "local-reference", seed, "tree", [168, 112, 56, 56], [0.5, 0.6, 0.7, 0.8], 0.9 + offset)
        write_job(tmp_path, "shared-reward", seed, "shared", [224, 224, 224, 224], [0.5, 0.5, 0.6, 0.7],
                  0.85 + offset)
    write_job(tmp_path, "reranker-only", 0, "tree", [112, 112], [0.5, 0.5], 0.9)  # its pair has no shared seed
    write_job(tmp_path, "reranker-only-shared", 0, "shared", [224, 224], [0.5, 0.5], 0.8, finished=False)
    rows, tests = measure(tmp_path, phase=2)
    tree = [r for r in rows if r["run"] == "local-reference" and r["seed"] == 0]
    assert [r["phase"] for r in tree] == ["1-2", "3-4"] and [r["steps"] for r in tree] == [2, 2]
    assert [r["signal_fraction"] for r in tree] == pytest.approx([0.625, 0.25])  # of the 224 draws
    assert [r["training_reward"] for r in tree] == pytest.approx([0.55, 0.75])
    assert {t["run"] for t in tests} == {"local-reference", "shared-reward", "reranker-only"}
    [pair] = pair_differences(rows, tests)
    assert (pair["shared"], pair["tree"]) == ("shared-reward", "local-reference")
    assert pair["test_reward"].mean == pytest.approx(-0.05) and pair["test_reward"].n == 2
    assert pair["phases"]["3-4"]["signal_fraction"].mean == pytest.approx(0.75)
    assert pair["phases"]["1-2"]["training_reward"].mean == pytest.approx(-0.05)


def test_a_job_trained_with_the_other_credit_is_refused(tmp_path):
    write_job(tmp_path, "shared-reward", 0, "tree", [224], [0.5], 0.8)
    with pytest.raises(SystemExit, match="experimental.credit=tree, not shared"):
        measure(tmp_path, phase=100)


def test_the_report_prints_and_nothing_is_written_with_print_only(tmp_path, monkeypatch, capsys):
    for run, credit in (("local-reference", "tree"), ("shared-reward", "shared")):
        write_job(tmp_path, run, 0, credit, [112, 56], [0.5, 0.6], 0.9)
    written = tmp_path / "never.json"
    monkeypatch.setattr(credit_signal, "RESULTS_JSON", written)
    monkeypatch.setattr(sys, "argv", ["credit_signal", "--runs-dir", str(tmp_path), "--phase", "1", "--print-only"])
    credit_signal.main()
    out = capsys.readouterr().out
    assert "| shared-reward - local-reference | 0.900 ± 0.000 | 0.900 ± 0.000 | +0.000 ± 0.000 (n = 1)" in out
    assert "| local-reference | 2-2 | 1 | 0.250 ± 0.000 |" in out
    assert not written.exists()
    monkeypatch.setattr(sys, "argv", ["credit_signal", "--runs-dir", str(tmp_path / "none")])
    with pytest.raises(SystemExit, match="no seed finished by both runs"):
        credit_signal.main()
