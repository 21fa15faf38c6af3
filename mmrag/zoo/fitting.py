"""The optimisation loop shared by the zoo's fits (tiny-clip, tiny-lvlm-captioner)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from tqdm import tqdm


def run_fit(model: torch.nn.Module, optimizer: torch.optim.Optimizer, schedule, steps: int, name: str,
            batch_loss: Callable[[], torch.Tensor]) -> list[float]:
    """`steps` optimiser steps on `batch_loss()` (a fresh batch each call), with a progress bar.

    Leaves the model in eval mode and returns the per-step losses.
    """
    model.train()
    losses = []
    progress = tqdm(range(steps), desc=f"fitting {name}", unit="step")
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
