"""The optimisation loop and the fit report shared by the zoo's fits (tiny-clip, tiny-lvlm-captioner, visual reader)."""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

import torch
from tqdm import tqdm

_progress_bars = True


def hide_progress_bars() -> None:
    """Fit in this process without progress bars (a worker of a parallel build: interleaved bars are unreadable)."""
    global _progress_bars
    _progress_bars = False


def run_fit(model: torch.nn.Module, optimizer: torch.optim.Optimizer, schedule, steps: int, name: str,
            batch_loss: Callable[[], torch.Tensor]) -> list[float]:
    """`steps` optimiser steps on `batch_loss()` (a fresh batch each call), with a progress bar.

    Leaves the model in eval mode and returns the per-step losses.
    """
    model.train()
    losses = []
    progress = tqdm(range(steps), desc=f"fitting {name}", unit="step", disable=not _progress_bars)
    for _ in progress:
        loss = batch_loss()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        schedule.step()
        losses.append(loss.item())
        progress.set_postfix(loss=f"{loss.item():.3f}")
    model.eval()
    return losses


def fit_report(losses: list[float], steps: int, started: float, train_entities: int,
               heldout_entities: int | None = None) -> dict:
    """The figures every zoo build records about its fit: steps, first and final loss (mean of the last 10),
    wall seconds since `started` (a `time.perf_counter()` reading) and the entities it was fitted and held out on."""
    report = {
        "steps": steps,
        "first_loss": round(losses[0], 3),
        "final_loss": round(float(np.mean(losses[-10:])), 3),
        "fit_seconds": round(time.perf_counter() - started, 1),
        "train_entities": train_entities,
    }
    if heldout_entities is not None:
        report["heldout_entities"] = heldout_entities
    return report
