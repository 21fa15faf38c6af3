"""Resumable driver state of a training run: what the distributed driver saves beside the learner's engines.

Layout: RUN_DIR/checkpoints/step_NNNNNN/ holds `driver.pt` (this module: step, policy
version, question cursor, RNG states, cumulative counts) and `learner/` (DeepSpeed engine
and optimiser states, written by the learner workers); RUN_DIR/checkpoints/latest names
the newest complete one. `latest` is written last, so a run killed mid-save resumes from
the previous checkpoint.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch

from mmrag.training.reference import QuestionCursor


@dataclass
class DriverState:
    """Everything the driver needs to continue a run exactly where a checkpoint left it."""

    step: int
    """Optimiser steps completed."""
    policy_version: int
    """Weights version the learner last published."""
    rollouts: int
    """Rollout batches drawn so far (seeds the replicas' samplers; batches buffered ahead are not resumed)."""
    cursor_epoch: int
    """QuestionCursor: completed passes over the training questions."""
    cursor_position: int
    """QuestionCursor: position in the current pass."""
    reward_shuffle_rng: tuple
    """`random.Random` state of the reward-shuffle control."""
    torch_rng: torch.Tensor = field(default_factory=torch.get_rng_state)
    """Driver's torch RNG state."""
    numpy_rng: tuple = field(default_factory=np.random.get_state)
    """Driver's numpy RNG state."""
    python_rng: tuple = field(default_factory=random.getstate)
    """Driver's `random` module state."""
    totals: dict[str, int] = field(default_factory=dict)
    """Cumulative produced / trained / dropped_stale / failed counts."""

    @classmethod
    def capture(cls, step: int, policy_version: int, rollouts: int, cursor: QuestionCursor,
                shuffle_rng: random.Random, totals: dict[str, int]) -> DriverState:
        return cls(step, policy_version, rollouts, cursor.epoch, cursor.position, shuffle_rng.getstate(),
                   totals=dict(totals))

    def restore(self, cursor: QuestionCursor, shuffle_rng: random.Random) -> None:
        """Put the cursor and every RNG back where they were when this state was captured."""
        cursor.epoch = self.cursor_epoch
        cursor._order = cursor._shuffled()
        cursor.position = self.cursor_position
        shuffle_rng.setstate(self.reward_shuffle_rng)
        torch.set_rng_state(self.torch_rng)
        np.random.set_state(self.numpy_rng)
        random.setstate(self.python_rng)


def checkpoint_dir(run_dir: str | Path, step: int) -> Path:
    return Path(run_dir) / "checkpoints" / f"step_{step:06d}"


def learner_dir(checkpoint: str | Path) -> Path:
    """Where the learner workers write their DeepSpeed states inside one checkpoint."""
    return Path(checkpoint) / "learner"


def save_driver_state(checkpoint: str | Path, state: DriverState) -> None:
    """Write the driver's state and mark `checkpoint` as the run's latest (call after the learner saved)."""
    checkpoint = Path(checkpoint)
    checkpoint.mkdir(parents=True, exist_ok=True)
    torch.save(asdict(state), checkpoint / "driver.pt")
    (checkpoint.parent / "latest").write_text(checkpoint.name + "\n")


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    """The newest complete checkpoint of a run, or None when it has none."""
    marker = Path(run_dir) / "checkpoints" / "latest"
    if not marker.is_file():
        return None
    checkpoint = marker.parent / marker.read_text().strip()
    if not (checkpoint / "driver.pt").is_file():
        raise FileNotFoundError(f"{marker}: names {checkpoint}, which has no driver.pt (delete the marker "
                                f"or point it at another step_NNNNNN directory)")
    return checkpoint


def load_driver_state(checkpoint: str | Path) -> DriverState:
    fields = torch.load(Path(checkpoint) / "driver.pt", weights_only=False)
    return DriverState(**fields)
