"""The Serve application of a trained pipeline: every deployment placed and bound to the ingress.

`pipeline_app(cfg, checkpoint)` is what `mmrag serve` runs; `build_app(args)` is the
application builder that configs/serve/local.yaml names for `serve run` / `serve deploy`.
Replicas and GPUs per deployment come from the config (`serving.*_replicas`,
`serving.replica_num_cpus`, and each stage's own `num_gpus`); there is one retrieval
deployment per index shard.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from ray.serve import Application
from ray.serve.deployment import Deployment

from actors.serving.encoder import QueryEncoderDeployment
from actors.serving.generator import GeneratorDeployment
from actors.serving.ingress import AnswerIngress
from actors.serving.reranker import RerankerDeployment
from actors.serving.retrieval import RetrievalShardDeployment
from actors.serving.translator import TranslatorDeployment
from mmrag.config import Config, load_config
from mmrag.retrieval.manifest import Manifest
from mmrag.serving.info import answer_versions, service_info

BUILDER_ARGS = ("config", "checkpoint", "set")


def build_app(args: dict[str, Any]) -> Application:
    """`serve run` builder; args: `checkpoint` (RUN_DIR/export, required), `config` (YAML path), `set` (overrides)."""
    unknown = [key for key in args if key not in BUILDER_ARGS]
    if unknown:
        raise ValueError(f"serve application args: unknown key {unknown[0]!r} (valid: {', '.join(BUILDER_ARGS)})")
    if not args.get("checkpoint"):
        raise ValueError("serve application args: `checkpoint` is required (RUN_DIR/export of a training run)")
    overrides = args.get("set") or []
    if not isinstance(overrides, list):
        raise ValueError(f"serve application args: `set` must be a list of KEY.PATH=VALUE strings, got {overrides!r}")
    return pipeline_app(load_config(args.get("config"), overrides), args["checkpoint"])


def pipeline_app(cfg: Config, checkpoint: str | Path) -> Application:
    """Bind translator, encoder, one deployment per retrieval shard, reranker and generator to the ingress."""
    cfg = _with_absolute_paths(cfg)
    checkpoint = str(Path(checkpoint).expanduser().resolve())
    manifest = Manifest.read(cfg.index.dir)
    serving = cfg.serving

    def placed(deployment: Deployment, replicas: int, num_gpus: float, name: str | None = None) -> Deployment:
        return deployment.options(name=name or deployment.name, num_replicas=replicas,
                                  max_ongoing_requests=serving.max_ongoing_requests, ray_actor_options={
                                      "num_cpus": serving.replica_num_cpus, "num_gpus": num_gpus})

    shards = [placed(RetrievalShardDeployment, serving.shard_replicas, cfg.index.shard_num_gpus,
                     f"RetrievalShard{number}").bind(cfg, entry) for number, entry in enumerate(manifest.shards)]
    return placed(AnswerIngress, serving.ingress_replicas, 0.0).bind(
        placed(TranslatorDeployment, serving.translator_replicas, cfg.translator.num_gpus).bind(cfg, checkpoint),
        placed(QueryEncoderDeployment, serving.encoder_replicas, cfg.encoder.num_gpus).bind(cfg),
        shards,
        placed(RerankerDeployment, serving.reranker_replicas, cfg.reranker.num_gpus).bind(cfg, checkpoint),
        placed(GeneratorDeployment, serving.generator_replicas, cfg.generator.num_gpus).bind(cfg),
        cfg,
        service_info(cfg, manifest, checkpoint),
        answer_versions(manifest, checkpoint),
    )


def _with_absolute_paths(cfg: Config) -> Config:
    """Replicas do not share the caller's working directory: resolve the index and zoo paths here."""
    index = dataclasses.replace(cfg.index, dir=str(Path(cfg.index.dir).expanduser().resolve()))
    zoo = dataclasses.replace(cfg.zoo, cache_dir=str(Path(cfg.zoo.cache_dir).expanduser().resolve()))
    return dataclasses.replace(cfg, index=index, zoo=zoo)

