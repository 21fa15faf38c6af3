"""Resumable checkpoints of a training run, written atomically.

RUN_DIR (a URI: a path, s3://, gs://; `mmrag.storage`)/checkpoints/step_NNNNNN/ holds `learner/`
(the learner's own state: weights and optimiser, each rank uploading its part, written by
`Learner.save`), `driver.pt` (this module's `DriverState`: step, versions, rollback point, RNG
states, ledger) and `manifest.json`, which names every part and is written only once
the driver sees them all. RUN_DIR/checkpoints/latest then names the checkpoint, replaced in one
step (a rename, or one PUT). `latest_checkpoint` checks every part the manifest names, so a run
killed at any moment, or a rank that wrote to a disk only it sees, never passes for a complete one.
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch

from mmrag import storage
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


def checkpoint_dir(run_dir: str | Path, step: int) -> str:
    return storage.join(run_dir, "checkpoints", f"step_{step:06d}")


def learner_dir(checkpoint: str | Path) -> str:
    """Where the learner writes its state inside one checkpoint (each rank its part: `rank_<r>`)."""
    return storage.join(checkpoint, "learner")


def learner_parts(world_size: int) -> list[str]:
    """The parts a learner of `world_size` ranks writes into `learner_dir` (`storage.writing_to`)."""
    return [f"rank_{rank}" for rank in range(world_size)]


class IncompleteCheckpoint(RuntimeError):
    """A checkpoint some of whose parts are not in the run's storage."""


def save_checkpoint(run_dir: str | Path, learner: Learner, state: DriverState) -> str:
    """Write the learner's and the driver's state as checkpoint `state.step`, then mark it the latest.

    `run_dir` is a URI (`mmrag.storage`). Every rank uploads its own part; the driver then checks that it
    sees every part (`learner.world_size` ranks, and its own `driver.pt`), writes `manifest.json` naming them and
    only then replaces `latest`.
    """
    final = checkpoint_dir(run_dir, state.step)
    storage.delete_dir(final)  # the same step saved again, after the learner was restored from an older one
    learner.save(learner_dir(final))
    with storage.writing_to(final, "driver") as local:
        torch.save(asdict(state), local / "driver.pt")
    parts = {"learner": learner_parts(learner.world_size), ".": ["driver"]}
    _raise_if_incomplete(final, parts, "was just written, but ")
    storage.write_text(storage.join(final, "manifest.json"), json.dumps({"step": state.step, "parts": parts}))
    storage.write_text(storage.join(run_dir, "checkpoints", "latest"), f"step_{state.step:06d}\n")
    return final


def _raise_if_incomplete(checkpoint: str, parts: dict[str, list[str]], context: str) -> None:
    for subdir, names in parts.items():
        where = checkpoint if subdir == "." else storage.join(checkpoint, subdir)
        missing = storage.missing_files(where, names)
        if missing:
            raise IncompleteCheckpoint(
                f"{checkpoint}: {context}{', '.join(f'{subdir}/{m}' for m in missing[:4])} is missing; every rank "
                f"writes its part there, so train.run_dir must be storage they all reach (NFS, s3://, gs://)")


def latest_checkpoint(run_dir: str | Path) -> str | None:
    """The newest complete checkpoint of a run (every part its manifest names is present), or None when none."""
    marker = storage.join(run_dir, "checkpoints", "latest")
    if not storage.exists(marker):
        return None
    checkpoint = storage.join(run_dir, "checkpoints", storage.read_text(marker).strip())
    manifest = storage.join(checkpoint, "manifest.json")
    if not storage.exists(manifest):
        raise IncompleteCheckpoint(f"{marker}: names {checkpoint}, which has no manifest.json (delete the marker "
                                   f"or point it at another step_NNNNNN directory)")
    _raise_if_incomplete(checkpoint, json.loads(storage.read_text(manifest))["parts"], "")
    return checkpoint


def checkpoint_to_resume(run_dir: str | Path, resume: str) -> str | None:
    """The checkpoint a run starts from under `train.resume`: "never" none, "auto" the latest if there is one
    (so a retried job command resumes), "required" the latest, or `FileNotFoundError` when there is none."""
    if resume not in ("never", "auto", "required"):
        raise ValueError(f"train.resume: expected never, auto or required, got {resume!r}")
    checkpoint = None if resume == "never" else latest_checkpoint(run_dir)
    if resume == "required" and checkpoint is None:
        raise FileNotFoundError(f"--resume: no checkpoint under {storage.join(run_dir, 'checkpoints')} "
                                f"(train.run_dir); --resume-if-present or train.resume=auto starts fresh instead")
    return checkpoint


def load_driver_state(checkpoint: str | Path) -> DriverState:
    with storage.reading_from(checkpoint) as local:
        return DriverState(**torch.load(local / "driver.pt", weights_only=False))
