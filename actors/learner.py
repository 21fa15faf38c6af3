"""The learner group: a Ray Train TorchTrainer whose W workers each run DeepSpeed engines for translator and reranker.

Fed by the distributed driver through one ray.util.queue.Queue per worker (the same
message to every rank); rank 0 answers on a shared reply queue. Messages:
  train      a scored experience batch (object ref to rollout trees): each rank takes its
             slice `roots[rank::W]`, computes the reference trainer's local losses
             (`mmrag.training.updates`) weighted by its share of the examples, DeepSpeed
             reduces gradients and steps (so W ranks take the reference trainer's step on the
             whole batch); rank 0 publishes the new trainable weights to the object store.
  checkpoint DeepSpeed engine + optimiser states of both components into a directory.
  export     `save_export` of the trained components (rank 0).
  stop       leave the loop; the trainer's `fit` returns.
On start (or resume from a checkpoint) rank 0 publishes the weights it starts from.
"""

from __future__ import annotations

import contextlib
import queue as std_queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import ray
import torch
from ray.util.queue import Queue

from mmrag.config import Config
from mmrag.training.updates import LocalLoss


@dataclass
class PublishedWeights:
    """Trainable weights of both components as object refs, and the version they are."""

    version: int
    translator: ray.ObjectRef
    reranker: ray.ObjectRef


def deepspeed_config(lr: float, world_size: int, zero_stage: int, dtype: str) -> dict:
    """One micro-batch (a rank's slice of the experience) per worker per step; torch AdamW as the reference trainer."""
    if zero_stage not in (0, 1, 2, 3):
        raise ValueError(f"learner.zero_stage: expected 0, 1, 2 or 3, got {zero_stage}")
    return {
        "train_batch_size": world_size,
        "train_micro_batch_size_per_gpu": 1,
        "gradient_accumulation_steps": 1,
        "optimizer": {"type": "AdamW", "params": {"lr": lr, "torch_adam": True}},
        "zero_optimization": {"stage": zero_stage},
        "bf16": {"enabled": dtype == "bfloat16"},
    }


class LossModule(torch.nn.Module):
    """What a DeepSpeed engine wraps: `owned` holds the trainable weights, `forward` is the local loss.

    Calling the loss through the engine's forward lets ZeRO-3 gather partitioned weights
    wherever they are read, including weights read outside their own submodule's forward.
    """

    def __init__(self, owned: torch.nn.Module, loss: Callable[[list], LocalLoss]):
        super().__init__()
        self.owned = owned
        self.loss = loss

    def forward(self, roots: list) -> LocalLoss:
        return self.loss(roots)


class _Worker:
    """State of one learner worker: both components, their engines, and the weights version."""

    def __init__(self, cfg: Config):
        import deepspeed
        import ray.train
        import ray.train.torch

        from mmrag.models.reranker import AdaptiveReranker
        from mmrag.models.translator import QueryTranslator
        from mmrag.training.updates import reranker_loss, translator_loss

        context = ray.train.get_context()
        self.cfg, self.rank, self.world = cfg, context.get_world_rank(), context.get_world_size()
        self.version = 0
        self.device = ray.train.torch.get_device()
        torch.manual_seed(cfg.train.seed)
        self.translator = QueryTranslator.from_config(cfg.translator, cfg.zoo.cache_dir, str(self.device))
        self.reranker = AdaptiveReranker.from_config(cfg.reranker, cfg.zoo.cache_dir, str(self.device))
        # The engines own only trainable weights; frozen parts (the CLIP backbone, the translator's
        # reference copy) stay plain replicated modules on every rank.
        losses = {
            "translator": LossModule(self.translator.model, partial(translator_loss, self.translator, cfg=cfg.train)),
            "reranker": LossModule(self.reranker.trainable_modules(),
                                   partial(reranker_loss, self.reranker, cfg=cfg.train,
                                           temperature=cfg.reranker.temperature)),
        }
        dtypes = {"translator": cfg.translator.dtype, "reranker": "float32"}
        lrs = {"translator": cfg.translator.lr, "reranker": cfg.reranker.lr}
        self.trainable = {name: [p for p in module.parameters() if p.requires_grad] for name, module in losses.items()}
        self.engines = {
            name: deepspeed.initialize(
                model=module, model_parameters=self.trainable[name],
                config=deepspeed_config(lrs[name], self.world, cfg.learner.zero_stage, dtypes[name]))[0]
            for name, module in losses.items()
        }

    def _gathered(self):
        """ZeRO-3 partitions weights across ranks: gather them (a collective) before reading them whole."""
        if self.cfg.learner.zero_stage != 3:
            return contextlib.nullcontext()
        import deepspeed

        for engine in self.engines.values():
            engine.empty_partition_cache()  # waits for weights still prefetching from the last step
        return deepspeed.zero.GatheredParameters([p for params in self.trainable.values() for p in params])

    def publish(self) -> PublishedWeights | None:
        with self._gathered():
            if self.rank != 0:
                return None
            return PublishedWeights(self.version, ray.put(self.translator.trainable_state_dict()),
                                    ray.put(self.reranker.trainable_state_dict()))

    def _step(self, name: str, roots: list) -> dict:
        """Forward, backward and step on every rank, or on none when no rank has an example (as the reference skips).

        Every rank runs exactly one forward: under ZeRO-3 a forward gathers weights with collectives.
        """
        from mmrag.training.updates import example_count

        engine, mine = self.engines[name], roots[self.rank::self.world]
        count = example_count(name, mine, self.cfg.train)
        total_count = int(self._sum(count))
        if not total_count:
            return {"loss": 0.0, "examples": 0}
        # DeepSpeed averages gradients over the ranks: weighting this rank's mean loss by its share of
        # the examples makes the step the reference trainer's on the whole batch. A rank whose slice has
        # no signal still joins the gradient reduction, with a zero-weighted loss over the whole batch.
        local = engine(mine if count else roots)
        engine.backward(local.loss * (self.world * count / total_count))
        engine.step()
        # Per-example means, combined over the ranks weighted by their examples.
        means = {"loss": float(local.loss.detach()), **local.stats}
        record = {key: self._sum(value * count) / total_count for key, value in sorted(means.items())}
        return {**record, "examples": total_count}

    def _sum(self, value: float) -> float:
        """The sum of `value` over the ranks."""
        total = torch.tensor([float(value)], dtype=torch.float64, device=self.device)
        torch.distributed.all_reduce(total)
        return float(total)

    def train(self, roots: list) -> dict:
        record = {}
        if self.cfg.train.train_translator:
            record["translator"] = self._step("translator", roots)
        if self.cfg.train.train_reranker:
            record["reranker"] = self._step("reranker", roots)
        self.version += 1
        return record

    def save(self, directory: str) -> None:
        for name, engine in self.engines.items():
            engine.save_checkpoint(str(Path(directory) / name), tag="engine", exclude_frozen_parameters=True,
                                   client_state={"version": self.version, "torch_rng": torch.get_rng_state()})

    def load(self, directory: str) -> None:
        for name, engine in self.engines.items():
            path = Path(directory) / name
            loaded, client_state = engine.load_checkpoint(str(path), tag="engine", load_module_strict=False)
            if loaded is None:
                raise FileNotFoundError(f"{path}: no DeepSpeed checkpoint tagged 'engine' for the {name}")
            self.version = client_state["version"]
            torch.set_rng_state(client_state["torch_rng"])

    def export(self, directory: str) -> None:
        from mmrag.training.export import save_export

        with self._gathered():
            if self.rank == 0:
                save_export(directory, self.translator, self.reranker, self.version, self.cfg)


def learner_loop(config: dict) -> None:
    """Ray Train worker body: serve the driver's messages until `stop`."""
    worker = _Worker(config["cfg"])
    if config["resume_from"]:
        worker.load(config["resume_from"])
    inbox, replies = config["inboxes"][worker.rank], config["replies"]
    published = worker.publish()
    if worker.rank == 0:
        replies.put({"kind": "ready", "weights": published})
    while True:
        message = inbox.get()
        kind = message["kind"]
        if kind == "stop":
            return
        start = time.perf_counter()
        reply = {"kind": kind}
        if kind == "train":
            reply["losses"] = worker.train(ray.get(message["roots"]))
            reply["weights"] = worker.publish()
        elif kind == "checkpoint":
            worker.save(message["dir"])
        elif kind == "export":
            worker.export(message["dir"])
        else:
            raise ValueError(f"learner message kind {kind!r}: expected train, checkpoint, export or stop")
        reply["seconds"] = time.perf_counter() - start
        if worker.rank == 0:
            replies.put(reply)


class LearnerGroup:
    """Driver-side handle: starts the TorchTrainer in a background thread and talks to it through queues."""

    def __init__(self, cfg: Config, resume_from: str | None = None):
        from ray.train import RunConfig, ScalingConfig
        from ray.train.torch import TorchTrainer

        workers = cfg.learner.num_workers
        if workers < 1:
            raise ValueError(f"learner.num_workers: expected at least 1, got {workers}")
        self.inboxes = [Queue() for _ in range(workers)]
        self.replies = Queue()
        self.trainer = TorchTrainer(
            learner_loop,
            train_loop_config={"cfg": cfg, "resume_from": resume_from, "inboxes": self.inboxes,
                               "replies": self.replies},
            scaling_config=ScalingConfig(num_workers=workers, use_gpu=cfg.learner.use_gpu,
                                         resources_per_worker={"CPU": cfg.learner.num_cpus_per_worker}),
            run_config=RunConfig(name="learner", storage_path=str(Path(cfg.train.run_dir).resolve() / "ray_train")),
        )
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._fit, name="learner-group", daemon=True)
        self._thread.start()
        self.weights: PublishedWeights = self._reply("ready")["weights"]

    def _fit(self) -> None:
        try:
            self.trainer.fit()
        except BaseException as exc:  # reported to the driver by the next `_reply`
            self.error = exc

    def _reply(self, kind: str) -> dict:
        """Wait for rank 0's answer, failing fast (with the workers' error) if the group has stopped."""
        while True:
            try:
                reply = self.replies.get(timeout=1.0)
            except std_queue.Empty:
                if not self._thread.is_alive():
                    raise RuntimeError(f"learner group stopped while the driver waited for {kind!r}") from self.error
                continue
            if reply["kind"] != kind:
                raise RuntimeError(f"learner group answered {reply['kind']!r} while the driver waited for {kind!r}")
            return reply

    def _send(self, message: dict) -> None:
        for inbox in self.inboxes:
            inbox.put(message)

    def submit(self, roots_ref: ray.ObjectRef) -> None:
        """Start one update on a scored experience batch; returns at once (collect it with `collect`)."""
        self._send({"kind": "train", "roots": roots_ref})

    def collect(self) -> dict:
        """The submitted update's losses and compute seconds; the new weights become `self.weights`."""
        reply = self._reply("train")
        self.weights = reply["weights"]
        return reply

    def save(self, directory: str | Path) -> None:
        self._send({"kind": "checkpoint", "dir": str(directory)})
        self._reply("checkpoint")

    def export(self, directory: str | Path) -> None:
        self._send({"kind": "export", "dir": str(directory)})
        self._reply("export")

    def stop(self) -> None:
        if self._thread.is_alive():
            self._send({"kind": "stop"})
            self._thread.join(timeout=120)
        for q in [*self.inboxes, self.replies]:
            q.shutdown()
