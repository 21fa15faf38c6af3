"""Published weights kept in the run's storage, so that losing the node that published them loses nothing.

The learner's rank 0 puts each version's trainable weights into the object store, where the only copy
lives on its own node: when that node is lost, a policy replica that still needs the version cannot fetch
it (Ray cannot rebuild the return value of a rank that is gone). With `learner.durable_weights` rank 0 also
writes each version it publishes to RUN_DIR/weights/<stamp>-v<version>/ (`train.run_dir`, storage every
process reaches, `mmrag.storage`), one file per component, and keeps the newest `max_policy_lag + 2` such
directories (a call may still sample with a version up to the lag behind, or re-sent from before the newest
update). A replica whose fetch from the object store fails reads the version there instead
(`mmrag.actors.policy.InstalledVersion`).
"""

from __future__ import annotations

import io
import time
from pathlib import Path

import torch

from mmrag import storage

WEIGHTS_DIR = "weights"
"""Subdirectory of the run directory holding the published versions."""


def write_published(run_dir: str | Path, version: int, components: dict[str, dict], keep: int) -> str:
    """Write one published version's state dicts (component name -> state dict) and prune to the newest `keep`;
    the URI of the version's directory. Named by the time it was written, so a rebuilt rank 0 (which knows
    nothing of what its predecessor wrote) still prunes the oldest first."""
    root = storage.join(run_dir, WEIGHTS_DIR)
    uri = storage.join(root, f"{time.time_ns():020d}-v{version:06d}")
    with storage.writing_to(uri, "rank_0") as local:
        for name, state in components.items():
            torch.save(state, local / f"{name}.pt")
    for old in sorted(_versions(root))[:-keep]:
        storage.delete_dir(storage.join(root, old))
    return uri


def _versions(root: str) -> set[str]:
    return {name.split("/")[0] for name in storage.list_files(root)}


def component_file(uri: str, component: str) -> str:
    """Where `write_published` put `component`'s state dict inside version directory `uri`."""
    return storage.join(uri, f"{component}.pt")


def read_published(uri: str) -> dict:
    """The state dict `write_published` wrote as `component_file(...)`; `FileNotFoundError` naming it if gone."""
    if not storage.exists(uri):
        raise FileNotFoundError(f"{uri}: published weights not found (pruned? learner.durable_weights keeps the "
                                f"newest train.max_policy_lag + 2 versions)")
    return torch.load(io.BytesIO(storage.read_bytes(uri)), weights_only=True)


def state_digest(state: dict[str, torch.Tensor]) -> dict[str, tuple[float, float]]:
    """Per tensor, (sum, sum of squares) in float64: what the learner publishes with a version, so a replica can
    check that what it installed is what was sent (a dropped or corrupted bucket, a wrong cast, a stale tensor)."""
    return {name: (tensor.double().sum().item(), tensor.double().square().sum().item())
            for name, tensor in state.items()}


def largest_difference(expected: dict[str, tuple[float, float]],
                       installed: dict[str, tuple[float, float]]) -> tuple[str, float]:
    """The tensor whose digest differs most, and by how much (relative: |a - b| / (1 + |b|)); a tensor missing on
    either side differs by inf."""
    worst, difference = "", 0.0
    for name in sorted(expected.keys() | installed.keys()):
        if name not in expected or name not in installed:
            return name, float("inf")
        gap = max(abs(a - b) / (1.0 + abs(b)) for a, b in zip(installed[name], expected[name]))
        if gap > difference or not worst:
            worst, difference = name, gap
    return worst, difference
