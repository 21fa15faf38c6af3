"""Seeds: the run's global seed, and per-call seeds that make sampling independent of who samples.

A rollout's sampling calls (translator queries, reranker selections) each get a seed derived
from (train.seed, rollout number, micro-batch index); a call draws from a generator seeded
with it alone. So a micro-batch draws the same samples in this process or on any replica of
a pool, in any order, and a resumed or re-dispatched rollout draws what the first one would.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import numpy as np
import torch

if TYPE_CHECKING:
    from mmrag.models.translator import QuerySample, QueryTranslator
    from mmrag.training.stages import QuestionTable


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def call_seed(seed: int, rollout: int, micro_batch: int) -> int:
    """The seed of one micro-batch's sampling calls: numpy's SeedSequence mix of the three, 63 bits."""
    return int(np.random.SeedSequence([seed, rollout, micro_batch]).generate_state(1, np.uint64)[0] >> 1)


@contextmanager
def seeded_torch(seed: int, device: torch.device | str = "cpu") -> Iterator[None]:
    """Torch's global RNG (which HF `generate` samples from) seeded with `seed` inside, restored after."""
    device = torch.device(device)
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(seed)
        yield


def sample_queries(translator: QueryTranslator, table: QuestionTable, n: int, seed: int) -> list[list[QuerySample]]:
    """n queries per question at `translator.temperature`, drawn from a generator seeded with `seed` alone."""
    with seeded_torch(seed, translator.model.device):
        return translator.sample(table.images, table.questions, n)
