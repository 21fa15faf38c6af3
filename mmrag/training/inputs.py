"""The files a command reads, checked before it starts anything: dataset splits and a complete index.

`mmrag train` and `mmrag eval` check their inputs in the driver before Ray starts or a model
loads, so a missing one fails in one line naming the config key and the file, not in a
traceback from deep inside a stage's start-up or a Ray Data worker.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from mmrag.config import Config
from mmrag.data.dataset import questions_file
from mmrag.retrieval.manifest import Manifest

TRAINING_SPLITS = ("train", "val")
"""The splits a run reads: it trains on `train` and evaluates on a held-out sample of `val`."""


def check_questions(data_dir: str | Path, splits: Iterable[str]) -> None:
    """FileNotFoundError naming `data.dir` and the first split's file that is missing."""
    for split in splits:
        path = Path(data_dir) / questions_file(split)
        if not path.is_file():
            raise FileNotFoundError(f"data.dir: {path} not found; make the dataset with `mmrag synth` "
                                    f"(or `mmrag convert`)")


def check_index(index_dir: str | Path) -> None:
    """FileNotFoundError (ValueError for an unreadable manifest) naming `index.dir` and the file."""
    try:
        manifest = Manifest.read(index_dir)
    except (FileNotFoundError, ValueError) as exc:
        raise type(exc)(f"index.dir: {exc}") from None
    missing = manifest.missing_files(index_dir)
    if missing:
        raise FileNotFoundError(f"index.dir: {missing[0]} is listed in the manifest but missing; "
                                f"rebuild with `mmrag index --force`")


def check_training_inputs(cfg: Config) -> None:
    """What a training run reads: the training splits and the index."""
    check_questions(cfg.data.dir, TRAINING_SPLITS)
    check_index(cfg.index.dir)
