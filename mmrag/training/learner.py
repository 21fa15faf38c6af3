"""TEMPORARY (runtime branch): the learner interface, replaced by the learner helper's module at merge."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch

from mmrag.config import Config
from mmrag.training.export import save_export
from mmrag.training.updates import update_reranker, update_translator


class LearnerFailed(RuntimeError):
    pass


@dataclass
class Weights:
    version: int
    translator: Any
    reranker: Any


@dataclass
class LearnerUpdate:
    version: int
    losses: dict[str, dict]
    seconds: float
    weights: Weights


class PendingUpdate(Protocol):
    futures: list

    def done(self) -> bool: ...

    def result(self) -> LearnerUpdate: ...


@dataclass
class DoneUpdate:
    update: LearnerUpdate
    futures: tuple = ()

    def done(self) -> bool:
        return True

    def result(self) -> LearnerUpdate:
        return self.update


class Learner(Protocol):
    version: int

    def weights(self) -> Weights: ...

    def start_update(self, roots: list) -> PendingUpdate: ...

    def save(self, directory: str | Path) -> None: ...

    def load(self, directory: str | Path) -> None: ...

    def export(self, directory: str | Path) -> None: ...

    def shutdown(self) -> None: ...


class LocalLearner:
    def __init__(self, cfg: Config, translator, reranker):
        self.cfg, self.translator, self.reranker = cfg, translator, reranker
        self.version = 0
        self.translator_opt = torch.optim.AdamW(translator.trainable_parameters(), lr=cfg.translator.lr)
        self.reranker_opt = torch.optim.AdamW(reranker.trainable_modules().parameters(), lr=cfg.reranker.lr)

    def weights(self) -> Weights:
        return Weights(self.version, None, None)

    def start_update(self, roots: list) -> DoneUpdate:
        start = time.perf_counter()
        losses = {}
        if self.cfg.train.train_translator:
            losses["translator"] = update_translator(self.translator, self.translator_opt, roots, self.cfg.train)
        if self.cfg.train.train_reranker:
            losses["reranker"] = update_reranker(self.reranker, self.reranker_opt, roots, self.cfg.train,
                                                 self.cfg.reranker.temperature)
        self.version += 1
        return DoneUpdate(LearnerUpdate(self.version, losses, time.perf_counter() - start, self.weights()))

    def save(self, directory) -> None:
        Path(directory).mkdir(parents=True, exist_ok=True)
        torch.save({"version": self.version, "translator": self.translator.trainable_state_dict(),
                    "reranker": self.reranker.trainable_state_dict(),
                    "translator_opt": self.translator_opt.state_dict(), "reranker_opt": self.reranker_opt.state_dict()},
                   Path(directory) / "local_learner.pt")

    def load(self, directory) -> None:
        state = torch.load(Path(directory) / "local_learner.pt", weights_only=False)
        self.translator.load_trainable_state_dict(state["translator"])
        self.reranker.load_trainable_state_dict(state["reranker"])
        self.translator_opt.load_state_dict(state["translator_opt"])
        self.reranker_opt.load_state_dict(state["reranker_opt"])
        self.version = state["version"]

    def export(self, directory) -> None:
        save_export(directory, self.translator, self.reranker, self.version, self.cfg)

    def restart(self, directory) -> None:
        self.load(directory)

    def shutdown(self) -> None:
        pass
