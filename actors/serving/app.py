"""The Serve application of a trained pipeline: the stage-group deployments placed and bound to the ingress.

`pipeline_app(cfg, checkpoint)` is what `mmrag serve` runs; `build_app(args)` is the
application builder that mmrag/configs/serve/local.yaml names for `serve run` / `serve deploy`.
One deployment per entry of `serving.stage_groups` (a group of only `retrieve`: one per
index shard), each replica running its stages in process; with `serving.first_group_in_ingress`
the ingress replicas run the first group themselves. A group's replicas are the
largest `serving.*_replicas` of its stages and its GPUs the sum of its stages' `num_gpus`.
The ingress queues at most `serving.max_queued_requests` beyond what its replicas work on;
the rest are refused with 503 and Retry-After (by Serve's proxy, or by `mmrag serve`'s front).
Every replica starts with the environment training actors get (`job_env_vars`: the offline
switches among them), through its `runtime_env`.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import ray
from ray.serve import Application
from ray.serve.config import BackpressureConfig
from ray.serve.deployment import Deployment

from mmrag.actors.serving.ingress import AnswerIngress
from mmrag.actors.serving.retrieval import RetrievalShardDeployment
from mmrag.actors.serving.stage_group import StageGroupDeployment
from mmrag.cluster.runtime_env import job_env_vars
from mmrag.config import Config, load_config
from mmrag.retrieval.manifest import Manifest
from mmrag.serving.api import ApiSettings
from mmrag.serving.info import answer_versions, service_info
from mmrag.serving.state import check_stage_groups

BUILDER_ARGS = ("config", "checkpoint", "set")
SHUTDOWN_POLL_S = 0.5
"""How often a stopping replica checks whether its requests are done (Serve's default, 2 s, slows every stop)."""


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
    """Bind one deployment per stage group (per shard for a lone `retrieve`) to the ingress."""
    cfg = _with_absolute_paths(cfg)
    checkpoint = str(Path(checkpoint).expanduser().resolve())
    serving = cfg.serving
    check_stage_groups(serving.stage_groups)
    replicas = {"translate": serving.translator_replicas, "encode": serving.encoder_replicas,
                "retrieve": serving.shard_replicas, "rerank": serving.reranker_replicas,
                "generate": serving.generator_replicas}
    gpus = {"translate": cfg.translator.num_gpus, "encode": cfg.encoder.num_gpus, "retrieve": cfg.index.shard_num_gpus,
            "rerank": cfg.reranker.num_gpus, "generate": cfg.generator.num_gpus}

    def placed(deployment: Deployment, name: str, stages: list[str], least_replicas: int = 1, **options) -> Deployment:
        return deployment.options(
            name=name, num_replicas=max([least_replicas, *(replicas[stage] for stage in stages)]),
            max_ongoing_requests=serving.max_ongoing_requests, health_check_period_s=serving.health_check_period_s,
            graceful_shutdown_timeout_s=serving.graceful_shutdown_timeout_s,
            graceful_shutdown_wait_loop_s=min(SHUTDOWN_POLL_S, serving.graceful_shutdown_timeout_s),
            ray_actor_options={"num_cpus": serving.replica_num_cpus, "num_gpus": sum(gpus[s] for s in stages),
                               "runtime_env": {"env_vars": job_env_vars(cfg)}},
            **options)

    for stages in serving.stage_groups:
        group_gpus = sum(gpus[stage] for stage in stages)
        if group_gpus > 1 and not float(group_gpus).is_integer():
            raise ValueError(f"serving.stage_groups: group {stages} needs {group_gpus:g} GPUs (the sum of its stages' "
                             "num_gpus); a replica takes a fraction of one GPU or whole GPUs: regroup the stages")
    manifest = Manifest.read(cfg.index.dir)
    handles = []
    for number, stages in enumerate(serving.stage_groups):
        if number == 0 and serving.first_group_in_ingress:
            handles.append([])
        elif stages == ["retrieve"]:
            handles.append([placed(RetrievalShardDeployment, f"RetrievalShard{shard}", stages).bind(cfg, entry)
                            for shard, entry in enumerate(manifest.shards)])
        else:
            handles.append([placed(StageGroupDeployment, "+".join(stages), stages).bind(cfg, checkpoint, stages)])
    ingress = placed(AnswerIngress, "AnswerIngress", serving.stage_groups[0] if serving.first_group_in_ingress else [],
                     least_replicas=serving.ingress_replicas, max_queued_requests=serving.max_queued_requests,
                     backpressure_config=BackpressureConfig(retry_after_s=serving.retry_after_s))
    return ingress.bind(serving.stage_groups, handles, cfg, checkpoint, api_settings(cfg, checkpoint))


def api_settings(cfg: Config, checkpoint: str | Path) -> ApiSettings:
    """What the HTTP API of the application reports and enforces (the ingress's, and `mmrag serve`'s front's)."""
    cfg = _with_absolute_paths(cfg)
    checkpoint = str(Path(checkpoint).expanduser().resolve())
    manifest = Manifest.read(cfg.index.dir)
    return ApiSettings.from_config(cfg, service_info(cfg, manifest, checkpoint), answer_versions(manifest, checkpoint))


def _with_absolute_paths(cfg: Config) -> Config:
    """Replicas do not share the caller's working directory: resolve the index and zoo paths here."""
    index = dataclasses.replace(cfg.index, dir=str(Path(cfg.index.dir).expanduser().resolve()))
    zoo = dataclasses.replace(cfg.zoo, cache_dir=str(Path(cfg.zoo.cache_dir).expanduser().resolve()))
    return dataclasses.replace(cfg, index=index, zoo=zoo)


def replica_pids(app_name: str, deployment: str) -> list[int]:
    """Process ids of a deployed application's replicas of `deployment` (for failure tests and benchmarks)."""
    pids = []
    for actor in ray.util.list_named_actors(all_namespaces=True):
        if actor["name"].startswith(f"SERVE_REPLICA::{app_name}#{deployment}#"):
            replica = ray.get_actor(actor["name"], namespace=actor["namespace"])
            pids.append(ray.get(replica.__ray_call__.remote(lambda _: os.getpid()), timeout=30))
    return pids
