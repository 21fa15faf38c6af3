"""Experiment trackers: where a run's scalars and rollout samples go besides metrics.jsonl.

`train.loggers` lists them: `tensorboard` (event files in RUN_DIR/tensorboard), `wandb`
(Weights & Biases, `trackers.wandb_*`) and `mlflow` (`trackers.mlflow_*`). `MetricsLog` gives
each the same scalars every step and, at every evaluation, a sample of held-out rollouts
(`ROLLOUT_FIELDS`): TensorBoard as a text table, W&B as a `wandb.Table`, MLflow as a JSON
artifact per evaluation. W&B and MLflow are optional extras, imported only when listed; a
listed tracker whose package is missing is a config error naming `train.loggers` and the
extra that installs it. A resumed run continues the same W&B and MLflow runs (their ids are
kept in the run directory).
"""

from __future__ import annotations

import importlib.util
import os
import re
import time
from pathlib import Path
from typing import Any, Protocol

from torch.utils.tensorboard import SummaryWriter

from mmrag.config import Config, ConfigError, config_to_dict

ROLLOUT_FIELDS = ("question", "query", "selected_titles", "answer", "reward")
"""The columns of a rollout sample: one greedy held-out rollout per row."""
PACKAGES = {"tensorboard": ("tensorboard", "mmrag"), "wandb": ("wandb", "mmrag[wandb]"),
            "mlflow": ("mlflow", "mmrag[mlflow]")}
"""Tracker name -> (the module it imports, what to pip install for it)."""
MLFLOW_PARAMS_PER_BATCH = 100
"""MLflow's limit on the parameters of one `log_batch` call."""
_MLFLOW_NAME_INVALID = re.compile(r"[^\w\-. :/]")


class Tracker(Protocol):
    def log_scalars(self, step: int, scalars: dict[str, float]) -> None:
        """Record `scalars` (name -> value) at `step`."""

    def log_rollouts(self, step: int, rollouts: list[dict[str, Any]]) -> None:
        """Record a sample of rollouts (rows keyed by `ROLLOUT_FIELDS`) at `step`."""

    def close(self) -> None:
        """Flush and end the run."""


def require_trackers(loggers: list[str]) -> None:
    """Raise a ConfigError naming `train.loggers` and the extra to install when a listed tracker's package is missing."""
    for name in loggers:
        module, install = PACKAGES[name]
        if importlib.util.find_spec(module) is None:
            raise ConfigError(f"train.loggers: {name!r} needs the {module} package, which is not installed: "
                              f"pip install '{install}' (or leave {name!r} out of train.loggers)")


def open_trackers(cfg: Config, run_dir: Path) -> list[Tracker]:
    """The trackers `train.loggers` lists, each started for the run in `run_dir`."""
    require_trackers(cfg.train.loggers)
    trackers = {"tensorboard": TensorBoardTracker, "wandb": WandbTracker, "mlflow": MlflowTracker}
    return [trackers[name](cfg, run_dir) for name in dict.fromkeys(cfg.train.loggers)]


def rollout_sample(predictions: list[dict[str, Any]], size: int) -> list[dict[str, Any]]:
    """The first `size` evaluation records as rollout rows (the held-out sample is fixed, so the same questions
    are shown at every evaluation)."""
    return [{field: record[field] for field in ROLLOUT_FIELDS} for record in predictions[:size]]


class TensorBoardTracker:
    """Event files in RUN_DIR/tensorboard; rollouts as a markdown table under the text tag `rollouts`."""

    def __init__(self, cfg: Config, run_dir: Path):
        self._writer = SummaryWriter(log_dir=str(run_dir / "tensorboard"))

    def log_scalars(self, step: int, scalars: dict[str, float]) -> None:
        for name, value in scalars.items():
            self._writer.add_scalar(name, value, step)

    def log_rollouts(self, step: int, rollouts: list[dict[str, Any]]) -> None:
        def cell(value: Any) -> str:
            text = "; ".join(value) if isinstance(value, list) else str(value)
            return text.replace("|", "\\|").replace("\n", " ")

        lines = ["| " + " | ".join(ROLLOUT_FIELDS) + " |", "|" + " --- |" * len(ROLLOUT_FIELDS)]
        lines += ["| " + " | ".join(cell(row[field]) for field in ROLLOUT_FIELDS) + " |" for row in rollouts]
        self._writer.add_text("rollouts", "\n".join(lines), step)

    def close(self) -> None:
        self._writer.close()


class WandbTracker:
    """A W&B run named after the run directory, with the config; rollouts as the table `rollouts`."""

    def __init__(self, cfg: Config, run_dir: Path):
        import wandb  # optional extra

        self._wandb = wandb
        settings = cfg.trackers
        id_file = run_dir / "wandb_run_id"
        earlier_id = id_file.read_text().strip() if id_file.is_file() else None
        self._run = wandb.init(project=settings.wandb_project, entity=settings.wandb_entity or None,
                               name=run_dir.resolve().name, id=earlier_id, resume="allow" if earlier_id else None,
                               dir=str(run_dir), mode=settings.wandb_mode or None, config=config_to_dict(cfg),
                               settings=wandb.Settings(console="off"))
        id_file.write_text(self._run.id)

    def log_scalars(self, step: int, scalars: dict[str, float]) -> None:
        self._run.log(scalars, step=step)

    def log_rollouts(self, step: int, rollouts: list[dict[str, Any]]) -> None:
        rows = [[row[field] for field in ROLLOUT_FIELDS] for row in rollouts]
        self._run.log({"rollouts": self._wandb.Table(columns=list(ROLLOUT_FIELDS), data=rows)}, step=step)

    def close(self) -> None:
        self._run.finish()


class MlflowTracker:
    """An MLflow run in experiment `trackers.mlflow_experiment`, the config as its parameters; rollouts as JSON
    artifacts `rollouts/step_NNNNNN.json`. MLflow accepts fewer characters in names than the other trackers:
    any other (e.g. "@") becomes "_"."""

    def __init__(self, cfg: Config, run_dir: Path):
        from mlflow.tracking import MlflowClient  # optional extra

        uri = cfg.trackers.mlflow_tracking_uri or os.environ.get("MLFLOW_TRACKING_URI", "")
        if not uri:
            uri = (run_dir / "mlruns").resolve().as_uri()
            # MLflow keeps its file store in maintenance mode and refuses it unless asked: this default asks.
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        self._client = client = MlflowClient(tracking_uri=uri)
        name = cfg.trackers.mlflow_experiment
        experiment = client.get_experiment_by_name(name)
        experiment_id = experiment.experiment_id if experiment else client.create_experiment(name)
        id_file = run_dir / "mlflow_run_id"
        if id_file.is_file():
            self.run_id = id_file.read_text().strip()
            client.update_run(self.run_id, status="RUNNING")
        else:
            self.run_id = client.create_run(experiment_id, run_name=run_dir.resolve().name).info.run_id
            id_file.write_text(self.run_id)
            self._log_params(config_to_dict(cfg))

    def _log_params(self, config: dict) -> None:
        from mlflow.entities import Param  # optional extra

        params = [Param(name, str(value)) for name, value in _dotted(config).items()]
        for start in range(0, len(params), MLFLOW_PARAMS_PER_BATCH):
            self._client.log_batch(self.run_id, params=params[start:start + MLFLOW_PARAMS_PER_BATCH])

    def log_scalars(self, step: int, scalars: dict[str, float]) -> None:
        from mlflow.entities import Metric  # optional extra

        now = int(time.time() * 1000)
        self._client.log_batch(self.run_id, metrics=[Metric(mlflow_name(name), value, now, step)
                                                     for name, value in scalars.items()])

    def log_rollouts(self, step: int, rollouts: list[dict[str, Any]]) -> None:
        self._client.log_dict(self.run_id, rollouts, f"rollouts/step_{step:06d}.json")

    def close(self) -> None:
        self._client.set_terminated(self.run_id)


def mlflow_name(name: str) -> str:
    """`name` with every character MLflow refuses in a metric name replaced by "_"."""
    return _MLFLOW_NAME_INVALID.sub("_", name)


def _dotted(config: dict, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, dict):
            out.update(_dotted(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out
