"""One rank of the DeepSpeed learner group, without Ray: what `mmrag.actors.learner.LearnerRank` wraps.

The driver calls the same method on every rank at once (`mmrag.actors.learner.LearnerGroup`).
Each rank joins the torch process group at rank 0's address, loads the translator and
reranker, and holds one DeepSpeed engine per component (ZeRO stage `learner.zero_stage`)
owning only that component's trainable modules. `update` takes this rank's slice
`roots[rank::W]` of a scored batch, runs the local loss (`mmrag.training.updates`) through
the engine's forward weighted by the rank's share of the examples, and steps, so W ranks
take `LocalLearner`'s step on the whole batch; then every rank joins in publishing the new
trainable weights, which rank 0 returns (and, with `learner.durable_weights`, also writes to the run's
storage: `mmrag.training.published_weights`). `save`/`load` checkpoint engines and optimiser
states; `export` writes the trained components (rank 0).
"""

from __future__ import annotations

import contextlib
import datetime
import os
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import torch

from mmrag import storage
from mmrag.config import Config
from mmrag.training.export import save_export
from mmrag.training.learner import (COMPONENTS, learning_rates, load_trainable_components, loss_functions,
                                    parameter_groups, rollouts_of, trainable_parameters, trained_components)
from mmrag.training.published_weights import state_digest, write_published
from mmrag.training.sync_probe import SyncProbe, probe_scores
from mmrag.training.weight_broadcast import send_state
from mmrag.training.updates import LocalLoss, example_count

TrainableWeights = tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]
"""(translator, reranker) `trainable_state_dict()`s."""


def deepspeed_config(lr: float, world_size: int, zero_stage: int, dtype: str) -> dict:
    """One micro-batch (a rank's slice of the experience) per rank per step; torch AdamW as `LocalLearner`."""
    if zero_stage not in (0, 1, 2, 3):
        raise ValueError(f"learner.zero_stage: expected 0, 1, 2 or 3, got {zero_stage}")
    return {
        "train_batch_size": world_size,
        "train_micro_batch_size_per_gpu": 1,
        "gradient_accumulation_steps": 1,
        # DeepSpeed clips the gradient norm to 1 unless told otherwise; LocalLearner does not clip.
        "gradient_clipping": 0.0,
        "optimizer": {"type": "AdamW", "params": {"lr": lr, "torch_adam": True}},
        "zero_optimization": {"stage": zero_stage},
        "bf16": {"enabled": dtype == "bfloat16"},
    }


def serve_rendezvous(world: int) -> torch.distributed.TCPStore:
    """Rank 0's store for the process group, on a port the OS picks (`.port`): held, so no other process takes it."""
    return torch.distributed.TCPStore("0.0.0.0", 0, world, is_master=True, wait_for_workers=False)


def join_process_group(rank: int, world: int, address: str, port: int, use_gpu: bool, timeout_s: float,
                       store: torch.distributed.TCPStore | None = None) -> torch.device:
    """Join the learners' torch process group (NCCL on GPUs, gloo on CPUs) through rank 0's store at address:port
    (`store` on rank 0, from `serve_rendezvous`); its collectives fail after `timeout_s` (not NCCL's default of
    minutes: a dead peer must fail the survivors). The device this rank trains on."""
    # The env:// rendezvous torchrun would set up. Ray shows each rank only its own GPU, hence LOCAL_RANK 0.
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK="0", MASTER_ADDR=address,
                      MASTER_PORT=str(port))
    # deepspeed is heavy (seconds to import, accelerator probing): only rank processes import it.
    import deepspeed

    if not use_gpu:
        # deepspeed.init_distributed JIT-builds (28 s on 2 cores, once per machine) and loads a shared-memory
        # all-reduce that only DeepSpeed's inference kernels call; a gloo rank trains through torch.distributed.
        # Its build also imported torch.utils.cpp_extension, which warns "No CUDA runtime is found" wherever a
        # CUDA toolkit is installed. Marked incompatible, it is neither built nor loaded.
        deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False

    backend = "nccl" if use_gpu else "gloo"
    timeout = datetime.timedelta(seconds=timeout_s)
    store = store or torch.distributed.TCPStore(address, port, world, is_master=False, timeout=timeout)
    torch.distributed.init_process_group(backend, store=store, rank=rank, world_size=world, timeout=timeout)
    deepspeed.init_distributed(dist_backend=backend, auto_mpi_discovery=False, verbose=False, timeout=timeout)
    if not use_gpu:
        return torch.device("cpu")
    torch.cuda.set_device(0)
    return torch.device("cuda", 0)


class LossModule(torch.nn.Module):
    """What a DeepSpeed engine wraps: `owned` holds the trainable weights, `forward` is the local loss.

    Calling the loss through the engine's forward lets ZeRO-3 gather partitioned weights
    wherever they are read, including weights read outside their own submodule's forward.
    """

    def __init__(self, owned: torch.nn.Module, loss: Callable[..., LocalLoss]):
        super().__init__()
        self.owned = owned
        self.loss = loss

    def forward(self, roots: list, policy_version: int) -> LocalLoss:
        return self.loss(roots, policy_version=policy_version)


class DeepSpeedRank:
    """Both components, their engines and the weights version, on one rank of the process group."""

    def __init__(self, cfg: Config, rank: int, world: int, address: str, port: int,
                 store: torch.distributed.TCPStore | None = None):
        self.cfg, self.rank, self.world = cfg, rank, world
        self.device = join_process_group(rank, world, address, port, cfg.learner.use_gpu, cfg.learner.call_timeout_s,
                                         store)
        self.version = 0
        self.published: dict[str, dict] = {}
        """Rank 0: the last published trainable weights per component (what `send_published` sends)."""
        self.sync_probe: SyncProbe | None = None
        """The weight-sync probe batch the published versions are scored on (`mmrag.training.sync_probe`)."""
        self.translator, self.reranker = load_trainable_components(cfg, str(self.device))
        # The engines own only trainable weights; frozen parts (the CLIP backbone, the translator's
        # reference copy) stay plain replicated modules on every rank.
        owned = {"translator": self.translator.model, "reranker": self.reranker.trainable_modules()}
        losses = loss_functions(cfg, self.translator, self.reranker)
        self.trainable = trainable_parameters(self.translator, self.reranker)
        groups = parameter_groups(cfg, self.translator, self.reranker)
        dtypes = {"translator": cfg.translator.dtype, "reranker": "float32"}
        # deepspeed is heavy (seconds to import, accelerator probing): only rank processes import it.
        import deepspeed

        self.engines = {
            name: deepspeed.initialize(
                model=LossModule(owned[name], losses[name]), model_parameters=groups[name],
                config=deepspeed_config(learning_rates(cfg)[name], world, cfg.learner.zero_stage, dtypes[name]))[0]
            for name in COMPONENTS
        }

    def _gathered(self, whole_modules: bool = False):
        """ZeRO-3 partitions weights across ranks: gather them (a collective) before reading them whole; the
        trainable ones, or with `whole_modules` every weight of the engines' modules (frozen ones too, e.g. the
        translator's frozen vision tower, which ZeRO-3 partitions with the module it sits in)."""
        if self.cfg.learner.zero_stage != 3:
            return contextlib.nullcontext()
        for engine in self.engines.values():
            engine.empty_partition_cache()  # waits for weights still prefetching from the last step
        # deepspeed is heavy (seconds to import, accelerator probing): only rank processes import it.
        import deepspeed

        if whole_modules:
            return deepspeed.zero.GatheredParameters([p for engine in self.engines.values()
                                                      for p in engine.module.parameters()])
        return deepspeed.zero.GatheredParameters([p for params in self.trainable.values() for p in params])

    def publish(self) -> tuple[TrainableWeights | None, dict]:
        """The current trainable weights on rank 0 (None on the others), kept for `send_published`, and
        {"publish_id", "durable", "probe_scores", "digests"}: a fresh id, where rank 0 also wrote them in the run's
        storage (`learner.durable_weights`, else None) and the weight-sync check's figures (`_sync_check`); every rank
        must call it."""
        with self._gathered():
            weights = (self.translator.trainable_state_dict(), self.reranker.trainable_state_dict()) \
                if self.rank == 0 else None
        checked = self._sync_check(weights)
        if weights is None:
            return None, {"publish_id": "", "durable": None, **checked}
        self.published = dict(zip(COMPONENTS, weights))
        durable = None
        if self.cfg.learner.durable_weights:
            durable = write_published(self.cfg.train.run_dir, self.version, self.published,
                                      keep=self.cfg.train.max_policy_lag + 2)
        return weights, {"publish_id": uuid.uuid4().hex, "durable": durable, **checked}

    def _sync_check(self, weights: TrainableWeights | None) -> dict:
        """{"probe_scores", "digests"} of the version being published (`Weights`), when it is one the replicas check
        (`learner.sync_check_every`, once `sync_probe` is set), else Nones. Under ZeRO-3 every rank scores the probe
        (a forward gathers weights collectively); otherwise rank 0 alone."""
        every = self.cfg.learner.sync_check_every
        if self.sync_probe is None or not every or self.version % every or (
                weights is None and self.cfg.learner.zero_stage != 3):
            return {"probe_scores": None, "digests": None}
        scores = probe_scores(self.translator, self.reranker, self.sync_probe)
        if weights is None:
            return {"probe_scores": None, "digests": None}
        return {"probe_scores": scores, "digests": {name: state_digest(state) for name, state in
                                                    zip(COMPONENTS, weights)}}

    def send_published(self, component: str, group: torch.distributed.ProcessGroup) -> None:
        """Rank 0: broadcast the last published `component` weights to the sync group (`weight_broadcast`)."""
        send_state(group, self.published[component], self.cfg.learner.sync_bucket_mb << 20, self.device.type)

    def update(self, roots: list) -> tuple[dict, TrainableWeights | None]:
        """One step per trained component, then publish: ({"version", "losses", "seconds", "rollouts", "publish_id",
        "durable"}, rank 0's weights)."""
        start = time.perf_counter()
        losses = {name: self._step(name, roots) for name in trained_components(self.cfg)}
        self.version += 1
        weights, published = self.publish()
        return ({"version": self.version, "losses": losses, "seconds": time.perf_counter() - start,
                 "rollouts": rollouts_of(roots), **published}, weights)

    def _step(self, name: str, roots: list) -> dict:
        """Forward, backward and step on every rank, or on none when no rank has an example (as LocalLearner skips).

        Every rank runs exactly one forward: under ZeRO-3 a forward gathers weights with collectives.
        """
        engine, mine = self.engines[name], roots[self.rank::self.world]
        count = example_count(name, mine, self.cfg.train)
        total_count = int(self._sum(count))
        if not total_count:
            return {"loss": 0.0, "examples": 0}
        # DeepSpeed averages gradients over the ranks: weighting this rank's mean loss by its share of
        # the examples makes the step LocalLearner's on the whole batch. A rank whose slice has no
        # signal still joins the gradient reduction, with a zero-weighted loss over the whole batch.
        local = engine(mine if count else roots, policy_version=self.version)
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

    def save(self, directory: str | Path) -> None:
        """Engine and optimiser states of both components, version, RNG: each rank writes its own files locally
        and uploads them to `directory` (a storage URI) as its part `rank_<r>`."""
        with storage.writing_to(directory, f"rank_{self.rank}") as local:
            for name, engine in self.engines.items():
                engine.save_checkpoint(str(local / name), tag="engine", exclude_frozen_parameters=True,
                                       client_state={"version": self.version, "torch_rng": torch.get_rng_state()})

    def load(self, directory: str | Path) -> None:
        with storage.reading_from(directory) as local:
            for name, engine in self.engines.items():
                loaded, client_state = engine.load_checkpoint(str(local / name), tag="engine",
                                                              load_module_strict=False)
                if loaded is None:
                    raise FileNotFoundError(f"{directory}: no DeepSpeed checkpoint tagged 'engine' for the {name}")
                self.version = client_state["version"]
                torch.set_rng_state(client_state["torch_rng"])

    def export(self, directory: str | Path) -> None:
        with self._gathered(whole_modules=True):
            if self.rank == 0:
                with storage.writing_to(directory, "export") as local:
                    save_export(local, self.translator, self.reranker, self.version, self.cfg, location=directory)
