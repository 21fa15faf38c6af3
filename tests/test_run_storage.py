"""A run directory by URI: every rank writes its part to shared storage, and a checkpoint is complete only
when the driver sees every part. End to end against a real S3-compatible server (moto's, on loopback)."""

from __future__ import annotations

import json
import os

import pytest
from helpers import assert_same_exported_weights

from mmrag import storage
from mmrag.training.checkpoint import IncompleteCheckpoint, latest_checkpoint
from mmrag.training.metrics_log import step_records
from mmrag.pipelines.train import train_distributed

# Ray's workers inherit the environment the session's Ray started with, which is before any fixture runs:
# the fake server's credentials are set when the suite is collected (moto accepts any).
for _name, _value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                      "AWS_DEFAULT_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"}.items():
    os.environ.setdefault(_name, _value)

BUCKET = "runs"


@pytest.fixture(scope="module")
def s3_endpoint():
    """host:port of moto's S3 server on loopback, holding one empty bucket."""
    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    endpoint = f"127.0.0.1:{server._server.server_port}"
    boto3.client("s3", endpoint_url=f"http://{endpoint}").create_bucket(Bucket=BUCKET)
    yield endpoint
    server.stop()


def s3_uri(endpoint: str, prefix: str) -> str:
    return f"s3://{BUCKET}/{prefix}?endpoint_override={endpoint}&scheme=http&region=us-east-1"


def test_a_part_is_listed_only_once_its_writer_finished_and_a_changed_file_is_missing(tmp_path):
    target = str(tmp_path / "step")
    with storage.writing_to(target, "rank_0") as local:
        (local / "a.pt").write_bytes(b"12345")
    with pytest.raises(RuntimeError), storage.writing_to(target, "rank_1") as local:
        (local / "b.pt").write_bytes(b"1")
        raise RuntimeError("the writer died")
    assert storage.missing_files(target, ["rank_0"]) == []
    assert storage.missing_files(target, ["rank_0", "rank_1"]) == ["_parts/rank_1.json"]
    (tmp_path / "step" / "a.pt").write_bytes(b"123")
    assert storage.missing_files(target, ["rank_0"]) == ["a.pt"]


def test_a_uri_keeps_its_query_after_the_joined_path():
    assert storage.join("s3://b/run?endpoint_override=h:1", "checkpoints", "latest") == \
        "s3://b/run/checkpoints/latest?endpoint_override=h:1"
    assert storage.join("runs/x", "export") == "runs/x/export"


@pytest.mark.slow
def test_two_ranks_checkpoint_to_s3_and_a_run_resumed_on_fresh_disks_ends_where_the_uninterrupted_one_does(
        s3_endpoint, distributed_sync_run, tiny_config, tmp_path, monkeypatch):
    """Each process stages in its own scratch directory; nothing passes between them but the S3 bucket."""
    uri = s3_uri(s3_endpoint, "two-ranks")
    overrides = ("train.checkpoint_every=2", "learner.num_workers=2", "learner.zero_stage=1")
    monkeypatch.setenv("MMRAG_SCRATCH_DIR", str(tmp_path / "first_driver"))
    train_distributed(tiny_config(uri, *overrides, "train.steps=2"), progress=False)
    learner_files = storage.list_files(storage.join(uri, "checkpoints", "step_000002", "learner"))
    assert {"_parts/rank_0.json", "_parts/rank_1.json"} <= learner_files.keys()
    assert any("zero_pp_rank_1" in name for name in learner_files), "rank 1 uploaded its own optimiser shard"

    monkeypatch.setenv("MMRAG_SCRATCH_DIR", str(tmp_path / "second_driver"))
    summary = train_distributed(tiny_config(uri, *overrides, "train.resume=auto"), progress=False)
    assert latest_checkpoint(uri) == storage.join(uri, "checkpoints", "step_000004")
    assert summary["trained_rollouts"] == [1, 2, 3, 4], "the resumed run trained rollouts 3 and 4 after 1 and 2"
    assert summary["ledger"]["trained"] == summary["ledger"]["started"] == 4
    assert summary["ledger"]["abandoned_attempts"] == 0, "a synchronous run has nothing queued at a checkpoint"
    downloaded = tmp_path / "downloaded"
    storage.download(storage.join(uri, "export"), downloaded / "export")
    storage.mirror_down(uri, downloaded, ("metrics.jsonl",))
    resumed, uninterrupted = (step_records(d) for d in (downloaded, distributed_sync_run))
    assert [r["step"] for r in resumed] == [1, 2, 3, 4], "the first run's metrics came back from S3"
    assert [r["reward_mean"] for r in resumed] == [r["reward_mean"] for r in uninterrupted]
    for a, b in zip(resumed, uninterrupted):
        assert a["reranker"]["loss"] == pytest.approx(b["reranker"]["loss"], abs=1e-5)
    assert_same_exported_weights(downloaded, distributed_sync_run)


def test_a_checkpoint_whose_rank_part_is_missing_is_refused_naming_the_part(s3_endpoint):
    """What a rank writing to its own node's disk looks like from the driver: its part is not there."""
    uri = s3_uri(s3_endpoint, "incomplete")
    checkpoint = storage.join(uri, "checkpoints", "step_000001")
    with storage.writing_to(storage.join(checkpoint, "learner"), "rank_0") as local:
        (local / "model.pt").write_bytes(b"weights")
    with storage.writing_to(checkpoint, "driver") as local:
        (local / "driver.pt").write_bytes(b"state")
    parts = {"learner": ["rank_0", "rank_1"], ".": ["driver"]}
    storage.write_text(storage.join(checkpoint, "manifest.json"), json.dumps({"step": 1, "parts": parts}))
    storage.write_text(storage.join(uri, "checkpoints", "latest"), "step_000001\n")
    with pytest.raises(IncompleteCheckpoint, match="learner/_parts/rank_1.json is missing"):
        latest_checkpoint(uri)
    assert latest_checkpoint(storage.join(uri, "elsewhere")) is None
