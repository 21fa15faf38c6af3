"""metrics.jsonl keeps one record per step: a resumed run drops the records the interrupted run wrote after the
checkpoint it resumes from, before it writes those steps again."""

from __future__ import annotations

from mmrag.training.metrics_log import MetricsLog, read_metrics


def test_a_resumed_log_keeps_one_record_per_step(tmp_path):
    first = MetricsLog(tmp_path)
    for step in range(1, 8):  # checkpointed at step 4, died after logging step 7
        first.log(step, {"loss": float(step)})
    first.log(4, {"eval": {"reward_mean": 0.5}})
    first.close()
    resumed = MetricsLog(tmp_path, resumed_at=4)
    for step in range(5, 9):
        resumed.log(step, {"loss": 10.0 + step})
    resumed.close()
    records = read_metrics(tmp_path)
    steps = [record["step"] for record in records if "loss" in record]
    assert steps == [1, 2, 3, 4, 5, 6, 7, 8]
    assert [record["loss"] for record in records if "loss" in record][4:] == [15.0, 16.0, 17.0, 18.0]
    assert [record["eval"] for record in records if "eval" in record] == [{"reward_mean": 0.5}]


def test_a_fresh_log_appends_to_what_is_there(tmp_path):
    for _ in range(2):
        log = MetricsLog(tmp_path)
        log.log(1, {"loss": 1.0})
        log.close()
    assert [record["step"] for record in read_metrics(tmp_path)] == [1, 1]
