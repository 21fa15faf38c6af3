"""The learner group: a Ray Train TorchTrainer whose W workers each run DeepSpeed engines for translator and reranker.

Fed by the distributed driver through one ray.util.queue.Queue per worker (the same
message to every rank); rank 0 answers on a shared reply queue. Messages:
  train      a scored experience batch (object ref to rollout trees): each rank takes its
             slice `roots[rank::W]`, computes the reference trainer's local losses
             (`mmrag.training.updates`), DeepSpeed all-reduces gradients and steps; rank 0
             publishes the new trainable weights to the object store with the new version.
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
from dataclasses import dataclass
from pathlib import Path

import ray
import torch
from ray.util.queue import Queue

from mmrag.config import Config


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


def _give_scalars_a_dimension(module: torch.nn.Module) -> torch.nn.Module:
    """DeepSpeed broadcasts every parameter viewed as bytes at start-up, which fails on 0-dim tensors.

    The only ones here are frozen (CLIP's logit_scale, which the reranker never reads), so reshape them to [1].
    """
    for name, param in module.named_parameters():
        if param.dim() == 0:
            if param.requires_grad:
                raise ValueError(f"{name}: a trainable 0-dim parameter cannot go to a DeepSpeed engine; "
                                 "declare it with shape [1]")
            param.data = param.data.reshape(1)
    return module


class _Worker:
    """State of one learner worker: both components, their engines, and the weights version."""

    def __init__(self, cfg: Config):
        import deepspeed
        import ray.train
        import ray.train.torch

        from mmrag.models.reranker import AdaptiveReranker
        from mmrag.models.translator import QueryTranslator

        context = ray.train.get_context()
        self.cfg, self.rank, self.world = cfg, context.get_world_rank(), context.get_world_size()
        self.version = 0
        device = str(ray.train.torch.get_device())
        torch.manual_seed(cfg.train.seed)
        self.translator = QueryTranslator.from_config(cfg.translator, cfg.zoo.cache_dir, device)
        self.reranker = AdaptiveReranker.from_config(cfg.reranker, cfg.zoo.cache_dir, device)
        stage = cfg.learner.zero_stage
        reranker_trainable = [p for p in self.reranker.parameters() if p.requires_grad]
        self.engines = {
            "translator": deepspeed.initialize(
                model=self.translator.model, model_parameters=self.translator.trainable_parameters(),
                config=deepspeed_config(cfg.translator.lr, self.world, stage, cfg.translator.dtype))[0],
            "reranker": deepspeed.initialize(
                model=_give_scalars_a_dimension(self.reranker), model_parameters=reranker_trainable,
                config=deepspeed_config(cfg.reranker.lr, self.world, stage, "float32"))[0],
        }

    def _gathered(self):
        """ZeRO-3 partitions weights across ranks: gather them (a collective) before reading them whole."""
        if self.cfg.learner.zero_stage != 3:
            return contextlib.nullcontext()
        import deepspeed

        params = [p for engine in self.engines.values() for p in engine.module.parameters()]
        return deepspeed.zero.GatheredParameters(params)

    def publish(self) -> PublishedWeights | None:
        with self._gathered():
            if self.rank != 0:
                return None
            return PublishedWeights(self.version, ray.put(self.translator.trainable_state_dict()),
                                    ray.put(self.reranker.trainable_state_dict()))

    def _step(self, name: str, loss: torch.Tensor, count: int) -> dict:
        """Backward and step on every rank, or on none when no rank has an example (as the reference skips)."""
        engine = self.engines[name]
        totals = torch.tensor([float(loss.detach()) * count, float(count)], device=engine.device)
        torch.distributed.all_reduce(totals)
        total_loss, total_count = totals.tolist()
        if total_count:
            if not count:
                # This rank's slice has no signal: a zero loss still joins the gradient all-reduce.
                loss = sum((p * 0).sum() for p in engine.module.parameters() if p.requires_grad)
            engine.backward(loss)
            engine.step()
        mean_loss = total_loss / total_count if total_count else 0.0
        return {"loss": mean_loss, "pairs" if name == "translator" else "examples": int(total_count)}

    def train(self, roots: list) -> dict:
        from mmrag.training.updates import reranker_loss, translator_loss

        mine, cfg = roots[self.rank::self.world], self.cfg
        record = {}
        if cfg.train.train_translator:
            record["translator"] = self._step("translator", *translator_loss(self.translator, mine, cfg.train))
        if cfg.train.train_reranker:
            record["reranker"] = self._step(
                "reranker", *reranker_loss(self.reranker, mine, cfg.train, cfg.reranker.temperature))
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
