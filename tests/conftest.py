"""Shared fixtures: one offline zoo cache, one small synthetic dataset, one Ray instance."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# The tiny models' matrices are too small to gain from threads; two threads on two
# busy cores made them ~20x slower.
torch.set_num_threads(1)


@pytest.fixture(scope="session")
def zoo_dir() -> str:
    """The zoo cache shared by every test (and by `mmrag` itself): built once, then reused."""
    path = Path(os.environ.get("MMRAG_ZOO_CACHE", "~/.cache/mmrag/zoo")).expanduser()
    path.mkdir(parents=True, exist_ok=True)
    return str(path)


@pytest.fixture(scope="session")
def synth_dir(tmp_path_factory) -> str:
    """A small synthetic KB-VQA dataset (kb.parquet, questions_{train,val,test}.parquet)."""
    from mmrag.data.synth import generate_dataset

    out = tmp_path_factory.mktemp("synth")
    generate_dataset(str(out), num_entities=24, seed=0, image_size=64)
    return str(out)


@pytest.fixture(scope="session")
def ray_session():
    """One local Ray instance for the whole test session."""
    import ray

    ray.init(num_cpus=8, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()
