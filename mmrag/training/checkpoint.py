"""Resumable checkpoints of a training run, written atomically.

RUN_DIR/checkpoints/step_NNNNNN/ holds `learner/` (the learner's own state: weights and
optimiser, written by `Learner.save`) and `driver.pt` (this module's `DriverState`: step,
versions, rollback point, RNG states, ledger). A checkpoint is assembled in
`step_NNNNNN.tmp/` and renamed into place when complete; RUN_DIR/checkpoints/latest then
names it, replaced atomically. A run killed at any moment leaves `latest` naming a complete
checkpoint (or none), never a half-written one.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch

from mmrag.atomic import atomic_directory, atomic_write_text, remove_leftovers
from mmrag.training.learner import Learner


@dataclass
class DriverState:
    """Everything the driver needs to continue a run exactly where a checkpoint left it."""

    step: int
    """Optimiser steps completed."""
    learner_version: int
    """Weights version of the learner at this step."""
    rollouts_started: int
    """Rollout batches started and kept: every batch up to the oldest one not yet trained (exclusive), so a
    restore rolls that one and every later one out again (the numbers seed their sampling)."""
    cursor_epoch: int
    """QuestionCursor before the oldest batch not yet trained drew its questions: completed passes."""
    cursor_position: int
    """QuestionCursor before the oldest batch not yet trained drew its questions: position in the pass."""
    reward_shuffle_rng: tuple
    """`random.Random` state of the reward-shuffle control."""
    ledger: dict
    """The rollout ledger's state at this step (`RolloutLedger.state`)."""
    learned: list[int]
    """The rollout numbers the learner reported training on, step by step, up to this step."""
    generation: int
    """Restores and resumes of this run so far: part of every weights id, so no id is used twice."""
    torch_rng: torch.Tensor = field(default_factory=torch.get_rng_state)
    numpy_rng: tuple = field(default_factory=np.random.get_state)
    python_rng: tuple = field(default_factory=random.getstate)

    def restore_global_rngs(self) -> None:
        torch.set_rng_state(self.torch_rng)
        np.random.set_state(self.numpy_rng)
        random.setstate(self.python_rng)


def checkpoint_dir(run_dir: str | Path, step: int) -> Path:
    return Path(run_dir) / "checkpoints" / f"step_{step:06d}"


def learner_dir(checkpoint: str | Path) -> Path:
    """Where the learner writes its state inside one checkpoint."""
    return Path(checkpoint) / "learner"


def save_checkpoint(run_dir: str | Path, learner: Learner, state: DriverState) -> Path:
    """Write the learner's and the driver's state as checkpoint `state.step`, then mark it the latest."""
    final = checkpoint_dir(run_dir, state.step)
    remove_leftovers(final.parent)  # of a run killed while it saved
    # The same step may be saved again, after the learner was restored from an older one: replaced.
    with atomic_directory(final) as staging:
        learner.save(learner_dir(staging))
        torch.save(asdict(state), staging / "driver.pt")
    atomic_write_text(final.parent / "latest", final.name + "\n")
    return final


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
    return DriverState(**torch.load(Path(checkpoint) / "driver.pt", weights_only=False))
