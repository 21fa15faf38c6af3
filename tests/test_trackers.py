"""`train.loggers`: TensorBoard, W&B (offline) and MLflow (a file store) get the same scalars and the rollout samples.

Each tracker is read back the way its own tools read it: TensorBoard's event files with its
EventAccumulator, W&B's offline run file (`run-ID.wandb`, the LevelDB-style log of protobuf
records that `wandb sync` uploads) and its table files, MLflow through its client.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from wandb.proto import wandb_internal_pb2

from mmrag.config import load_config
from mmrag.training.local import train_local
from mmrag.training.metrics_log import MetricsLog
from mmrag.training.trackers import ROLLOUT_FIELDS, mlflow_name, open_trackers
from mmrag.pipelines.cli import main

ALL_TRACKERS = "train.loggers=[tensorboard, wandb, mlflow]"
WANDB_BLOCK = 32768
WANDB_FULL, WANDB_FIRST, WANDB_MIDDLE, WANDB_LAST = 1, 2, 3, 4


@pytest.fixture(autouse=True)
def offline_trackers(tmp_path, monkeypatch):
    """W&B offline, writing nothing to the home directory; MLflow's default store (RUN_DIR/mlruns)."""
    for name in ("WANDB_CACHE_DIR", "WANDB_CONFIG_DIR", "WANDB_DATA_DIR", "WANDB_ARTIFACT_DIR"):
        monkeypatch.setenv(name, str(tmp_path / "wandb-home" / name.lower()))
    monkeypatch.setenv("WANDB_SILENT", "true")
    for name in ("MLFLOW_TRACKING_URI", "WANDB_MODE", "WANDB_PROJECT", "WANDB_ENTITY"):
        monkeypatch.delenv(name, raising=False)


def _wandb_records(run_dir: Path) -> list[wandb_internal_pb2.Record]:
    """The records of the run's offline .wandb file: a 7-byte header (":W&B", magic, version), then 32 KiB
    blocks of chunks, each a 7-byte header (CRC, length, type) and data; a record spans FIRST..LAST chunks."""
    data = next(run_dir.glob("wandb/offline-run-*/run-*.wandb")).read_bytes()
    ident, magic, _ = struct.unpack("<4sHB", data[:7])
    assert (ident, magic) == (b":W&B", 0xBEE1)
    records, pending, position = [], b"", 7
    while position + 7 <= len(data):
        left = WANDB_BLOCK - position % WANDB_BLOCK
        _, length, kind = struct.unpack("<IHB", data[position:position + 7])
        if left < 7 or (length, kind) == (0, 0):  # the rest of a block is padding
            position += left
            continue
        chunk, position = data[position + 7:position + 7 + length], position + 7 + length
        pending = chunk if kind in (WANDB_FULL, WANDB_FIRST) else pending + chunk
        if kind in (WANDB_FULL, WANDB_LAST):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            records.append(record)
    return records


def wandb_scalars(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    scalars: dict[str, list[tuple[int, float]]] = {}
    for record in _wandb_records(run_dir):
        if record.WhichOneof("record_type") != "history":
            continue
        items = {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item}
        for name, value in items.items():
            # W&B's own fields start with "_"; a logged table adds its size as rollouts/ncols, nrows, size.
            if not name.startswith(("_", "rollouts/")) and isinstance(value, (int, float)):
                scalars.setdefault(name, []).append((items["_step"], float(value)))
    return scalars


def wandb_rollouts(run_dir: Path) -> dict[int, list[dict]]:
    """{step: rows} of the `rollouts` tables (their files are named rollouts_STEP_HASH.table.json)."""
    tables = {}
    for path in run_dir.glob("wandb/offline-run-*/files/media/table/rollouts_*.table.json"):
        table = json.loads(path.read_text())
        tables[int(path.name.split("_")[1])] = [dict(zip(table["columns"], row)) for row in table["data"]]
    return tables


def tensorboard_scalars(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    events = EventAccumulator(str(run_dir / "tensorboard")).Reload()
    return {tag: [(event.step, pytest.approx(event.value)) for event in events.Scalars(tag)]
            for tag in events.Tags()["scalars"]}


def mlflow_run(run_dir: Path) -> tuple[MlflowClient, str]:
    return MlflowClient(tracking_uri=(run_dir / "mlruns").resolve().as_uri()), (run_dir / "mlflow_run_id").read_text()


def mlflow_scalars(run_dir: Path, names: list[str]) -> dict[str, list[tuple[int, float]]]:
    client, run_id = mlflow_run(run_dir)
    return {name: sorted((m.step, m.value) for m in client.get_metric_history(run_id, mlflow_name(name)))
            for name in names}


def mlflow_rollouts(run_dir: Path) -> dict[int, list[dict]]:
    client, run_id = mlflow_run(run_dir)
    local = Path(client.download_artifacts(run_id, "rollouts", str(run_dir / "downloaded")))
    return {int(path.stem.split("_")[1]): json.loads(path.read_text()) for path in local.glob("step_*.json")}


def test_every_tracker_gets_the_scalars_tensorboard_gets_and_the_rollouts(tmp_path):
    cfg = load_config(None, [ALL_TRACKERS, "trackers.wandb_mode=offline", f"train.run_dir={tmp_path}"])
    log = MetricsLog(tmp_path, open_trackers(cfg, tmp_path))
    log.log(1, {"reward_mean": 0.5, "stage_seconds": {"learn": 0.25}, "sampled_versions": [0, 1], "lagged": True})
    log.log(2, {"reward_mean": 0.75, "stage_seconds": {"learn": 0.5}})
    log.log(2, {"eval": {"recall@1": 1.0, "reward_mean": 0.625}})
    rollouts = [{"question": "What is it?", "query": "red circle", "selected_titles": ["Red | Circle", "Disc"],
                 "answer": "a disc", "reward": 1.0}]
    log.log_rollouts(2, rollouts)
    log.close()
    # Numbers only, nested names joined with "/"; the list and the boolean are left out.
    expected = {"reward_mean": [(1, 0.5), (2, 0.75)], "stage_seconds/learn": [(1, 0.25), (2, 0.5)],
                "eval/recall@1": [(2, 1.0)], "eval/reward_mean": [(2, 0.625)]}
    assert tensorboard_scalars(tmp_path) == expected
    assert wandb_scalars(tmp_path) == expected
    assert mlflow_scalars(tmp_path, list(expected)) == expected  # "eval/recall@1" is "eval/recall_1" there
    assert wandb_rollouts(tmp_path) == {2: rollouts}
    assert mlflow_rollouts(tmp_path) == {2: rollouts}
    text = EventAccumulator(str(tmp_path / "tensorboard"), size_guidance={"tensors": 0}).Reload()
    table = text.Tensors("rollouts/text_summary")[0].tensor_proto.string_val[0].decode()
    assert table.splitlines()[2] == r"| What is it? | red circle | Red \| Circle; Disc | a disc | 1.0 |"


def test_a_requested_tracker_that_is_not_installed_stops_train_naming_the_key_and_the_extra(monkeypatch, capsys):
    monkeypatch.setitem(__import__("sys").modules, "mlflow", None)  # what an environment without it finds
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "--set", "train.loggers=[tensorboard, mlflow]"])
    assert exit_info.value.code == 2
    assert ("config error: train.loggers: 'mlflow' needs the mlflow package, which is not installed: "
            "pip install 'mmrag[mlflow]'") in capsys.readouterr().err


def test_an_unknown_tracker_is_a_config_error_listing_the_valid_ones():
    with pytest.raises(ValueError, match="train.loggers.*tensorboard.*wandb.*mlflow"):
        load_config(None, ["train.loggers=[neptune]"])


@pytest.mark.slow
def test_a_training_run_logs_the_same_scalars_to_every_tracker_and_rollouts_at_every_evaluation(tiny_config,
                                                                                               tmp_path):
    run_dir = tmp_path / "run"
    train_local(tiny_config(run_dir, ALL_TRACKERS, "trackers.wandb_mode=offline", "train.steps=2",
                            "train.eval_every=2", "trackers.rollout_samples=2"), progress=False)
    expected = tensorboard_scalars(run_dir)
    assert {"reward_mean", "eval/reward_mean", "ledger/trained"} <= set(expected)
    assert wandb_scalars(run_dir) == expected
    assert mlflow_scalars(run_dir, list(expected)) == expected
    for rollouts in (wandb_rollouts(run_dir), mlflow_rollouts(run_dir)):
        assert sorted(rollouts) == [0, 2] and all(len(rows) == 2 for rows in rollouts.values())
        assert all(tuple(row) == ROLLOUT_FIELDS and row["question"] for rows in rollouts.values() for row in rows)
