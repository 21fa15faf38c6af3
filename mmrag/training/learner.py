"""The learner the trainer loop drives, written down as a Protocol, and its in-process implementation.

Data flow: the loop rolls out and scores a batch of trees -> `Learner.start_update(roots)`
takes one optimiser step per trainable component on its local loss (`mmrag.training.updates`)
-> `PendingUpdate.result()` gives a `LearnerUpdate`: the combined losses and the new
`Weights` version, which the loop installs on the policy replicas before they sample again.
Two implementations: `LocalLearner` here (in process, torch AdamW; the single-process mode
trains the pipeline's own models in place) and `mmrag.actors.learner.LearnerGroup` (W DeepSpeed
ranks as Ray actors, driven by method calls).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Protocol

import torch

from mmrag import storage
from mmrag.config import Config
from mmrag.models.reranker import AdaptiveReranker
from mmrag.models.translator import QueryTranslator
from mmrag.rl.rollout import Node
from mmrag.training.export import save_export
from mmrag.training.updates import LocalLoss, reranker_loss, translator_loss

COMPONENTS = ("translator", "reranker")
"""The trainable components, in the order every learner steps them."""


class LearnerFailed(RuntimeError):
    """A learner call (update, save, export, publishing, rebuild) that cannot finish; `Learner.restart` it.

    `lost` tells a lost part of the learner (a rank's process died or hung) from an exception
    its own code raised (which a restore may well meet again).
    """

    def __init__(self, message: str, lost: bool = True):
        super().__init__(message)
        self.lost = lost


@dataclass
class Weights:
    """The trainable weights of one version (only the adapters with LoRA)."""

    version: int
    translator: Any
    """`QueryTranslator.trainable_state_dict()`, or a Ray ObjectRef to one."""
    reranker: Any
    """`AdaptiveReranker.trainable_state_dict()`, or a Ray ObjectRef to one."""
    generation: int = 0
    """The run's restore generation when these weights were published (the trainer stamps it): with `version`,
    the weights id, never the same for two different sets of weights of one run."""
    publish_id: str = ""
    """Unique per publication by the learner: a replica that received these weights by broadcast knows them by it."""
    durable: str | None = None
    """Where the learner also wrote them in the run's storage (`mmrag.training.published_weights`), if it did: what
    a replica reads when the object store lost them with the publishing node."""
    probe_scores: dict | None = None
    """Component -> the learner's scores of `sync_probe` with these weights (`mmrag.training.sync_probe`): what
    replicas check the weights they installed against (`learner.sync_check_every`); None: not checked."""
    sync_probe: Any = None
    """The `SyncProbe` (or a Ray ObjectRef to it) `probe_scores` scored."""
    digests: dict | None = None
    """Component -> `published_weights.state_digest` of its weights, with `probe_scores`: names the tensor that
    differs when a replica's check fails."""

    @property
    def id(self) -> str:
        return f"{self.generation}.{self.version}"


@dataclass
class LearnerUpdate:
    """What one optimiser step produced."""

    version: int
    """The version these weights now are (the previous one + 1)."""
    losses: dict[str, dict]
    """Per trained component: {"loss", "examples", **LocalLoss.stats}, combined over ranks."""
    seconds: float
    """Compute seconds of the update (rank 0's, publishing included)."""
    weights: Weights
    rollouts: list[int]
    """The rollout numbers of the trees the learner trained on (read from the roots it was given)."""


class PendingUpdate(Protocol):
    """An update that has been started; the loop may go on rolling out until it needs the result."""

    futures: list
    """What a Ray scheduler may `ray.wait()` on together with other work (empty in-process)."""

    def done(self) -> bool: ...

    def result(self) -> LearnerUpdate:
        """Block until the update is finished; raises if a rank died (naming the rank)."""


class Learner(Protocol):
    """Trains the translator and reranker on scored experience, publishes versions, saves and exports."""

    version: int
    """Version of the current weights (0 = initial, or the loaded checkpoint's)."""
    world_size: int
    """Ranks, each writing its own part `rank_<r>` of a checkpoint (`mmrag.storage.writing_to`)."""

    def weights(self) -> Weights:
        """The current version's published weights."""

    def start_update(self, roots: list[Node]) -> PendingUpdate:
        """One optimiser step per trainable component on a scored batch, under the weights of `version`."""

    def use_sync_probe(self, probe: Any) -> None:
        """Score `probe` (`mmrag.training.sync_probe.SyncProbe`) with every `learner.sync_check_every`-th version
        published from now on (`Weights.probe_scores`), for the policy replicas to check the weights they install."""

    def save(self, directory: str | Path) -> None:
        """Model and optimiser states, version and RNG, into `directory` (a storage URI, `mmrag.storage`)."""

    def load(self, directory: str | Path) -> None:
        """Restore what `save` wrote, version included."""

    def export(self, directory: str | Path) -> None:
        """The trained components in `mmrag.training.export.save_export`'s layout."""

    def restart(self, directory: str | Path | None) -> None:
        """After a `LearnerFailed`: rebuild, restoring what `save` wrote into `directory` (None: the initial weights)."""

    def shutdown(self) -> None: ...


def load_trainable_components(cfg: Config, device: str) -> tuple[QueryTranslator, AdaptiveReranker]:
    """The translator and reranker a learner starts from: seeded, so every learner (and every rank) draws the
    same randomly initialised weights (the reranker's head, LoRA adapters)."""
    torch.manual_seed(cfg.train.seed)
    return (QueryTranslator.from_config(cfg.translator, cfg.zoo.cache_dir, device),
            AdaptiveReranker.from_config(cfg.reranker, cfg.zoo.cache_dir, device))


def trained_components(cfg: Config) -> list[str]:
    """The components `train.train_translator` / `train.train_reranker` ask to step."""
    wanted = {"translator": cfg.train.train_translator, "reranker": cfg.train.train_reranker}
    return [name for name in COMPONENTS if wanted[name]]


def loss_functions(cfg: Config, translator: QueryTranslator,
                   reranker: AdaptiveReranker) -> dict[str, Callable[..., LocalLoss]]:
    """Each component's local loss as `loss(roots, policy_version=...)`."""
    return {"translator": partial(translator_loss, translator, cfg=cfg.train),
            "reranker": partial(reranker_loss, reranker, cfg=cfg.train, temperature=cfg.reranker.temperature,
                                off_policy_correction=cfg.experimental.off_policy_correction)}


def trainable_parameters(translator: QueryTranslator, reranker: AdaptiveReranker) -> dict[str, list]:
    """What each component's optimiser updates (the adapters with LoRA)."""
    return {"translator": translator.trainable_parameters(),
            "reranker": reranker.trainable_parameters()}


def learning_rates(cfg: Config) -> dict[str, float]:
    return {"translator": cfg.translator.lr, "reranker": cfg.reranker.lr}


def parameter_groups(cfg: Config, translator: QueryTranslator, reranker: AdaptiveReranker) -> dict[str, list[dict]]:
    """Each component's optimiser param groups, each with its learning rate (the gate's `reranker.gate_lr`)."""
    return {"translator": [{"params": translator.trainable_parameters(), "lr": cfg.translator.lr}],
            "reranker": reranker.parameter_groups(cfg.reranker.lr, cfg.reranker.gate_lr)}


def rollouts_of(roots: list[Node]) -> list[int]:
    """The rollout numbers `assemble_trees` wrote into these roots."""
    return sorted({root.payload["rollout"] for root in roots})


def loss_record(local: LocalLoss) -> dict:
    """The ledger's record of one component's loss: {"loss", "examples", **stats}."""
    return {"loss": float(local.loss.detach()), "examples": local.examples, **local.stats}


@dataclass
class CompletedUpdate:
    """A pending update whose result is already there (the in-process learner computes at once)."""

    update: LearnerUpdate
    futures: list = field(default_factory=list)

    def done(self) -> bool:
        return True

    def result(self) -> LearnerUpdate:
        return self.update


class LocalLearner:
    """The in-process learner: torch AdamW per component, on the models it is given (trained in place)."""

    def __init__(self, cfg: Config, translator: QueryTranslator, reranker: AdaptiveReranker):
        self.cfg, self.translator, self.reranker = cfg, translator, reranker
        self.version = 0
        self.world_size = 1
        self.losses = loss_functions(cfg, translator, reranker)
        self.optimizers = {name: torch.optim.AdamW(groups)
                           for name, groups in parameter_groups(cfg, translator, reranker).items()}

    @classmethod
    def from_config(cls, cfg: Config, device: str = "cpu") -> LocalLearner:
        """A learner on freshly loaded components (reseeds torch's global RNG, see `load_trainable_components`)."""
        return cls(cfg, *load_trainable_components(cfg, device))

    def weights(self) -> Weights:
        return Weights(self.version, self.translator.trainable_state_dict(), self.reranker.trainable_state_dict())

    def start_update(self, roots: list[Node]) -> CompletedUpdate:
        start = time.perf_counter()
        losses = {}
        for name in trained_components(self.cfg):
            local = self.losses[name](roots, policy_version=self.version)
            if local.examples:  # a batch without signal for this component takes no step
                self.optimizers[name].zero_grad(set_to_none=True)
                local.loss.backward()
                self.optimizers[name].step()
            losses[name] = loss_record(local)
        self.version += 1
        return CompletedUpdate(LearnerUpdate(self.version, losses, time.perf_counter() - start, self.weights(),
                                             rollouts_of(roots)))

    def use_sync_probe(self, probe: Any) -> None:
        """In process the stages sample with the very models this learner trains: there is no sync to check."""

    def save(self, directory: str | Path) -> None:
        weights = self.weights()
        with storage.writing_to(directory, "rank_0") as local:
            torch.save({"version": self.version, "translator": weights.translator, "reranker": weights.reranker,
                        "optimizers": {name: opt.state_dict() for name, opt in self.optimizers.items()},
                        "torch_rng": torch.get_rng_state()}, local / "learner.pt")

    def load(self, directory: str | Path) -> None:
        with storage.reading_from(directory) as local:
            path = local / "learner.pt"
            if not path.is_file():
                raise FileNotFoundError(f"{directory}: no learner.pt (an in-process learner checkpoint, written by "
                                        f"LocalLearner.save)")
            state = torch.load(path, weights_only=False)
        self.translator.load_trainable_state_dict(state["translator"])
        self.reranker.load_trainable_state_dict(state["reranker"])
        for name, optimizer in self.optimizers.items():
            optimizer.load_state_dict(state["optimizers"][name])
        torch.set_rng_state(state["torch_rng"])
        self.version = state["version"]

    def export(self, directory: str | Path) -> None:
        with storage.writing_to(directory, "export") as local:
            save_export(local, self.translator, self.reranker, self.version, self.cfg, location=directory)

    def restart(self, directory: str | Path | None) -> None:
        """In process nothing is lost without the driver: restarting is loading a checkpoint."""
        if directory is None:
            raise ValueError("LocalLearner.restart: needs a checkpoint (its initial weights were trained in place)")
        self.load(directory)

    def shutdown(self) -> None:
        """Nothing to release: the components belong to whoever passed them in."""
