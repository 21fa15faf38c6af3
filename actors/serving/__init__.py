"""Ray Serve deployments of a trained pipeline: one role per module, composed in `app.py`.

Each stage-group deployment runs some consecutive stages of the offline greedy path in
process (`serving.stage_groups`) and groups concurrent requests with `@serve.batch`; the
ingress sends each validated request through the groups in inference order
(`stage_path.py`); the HTTP API (`mmrag.serving.api`) is served by `mmrag serve`'s front
(`front.py`), or by the ingress itself behind Serve's proxy.
"""

from __future__ import annotations

import ray

from mmrag.config import ServingConfig


def replica_device() -> str:
    """This replica's torch device: "cuda" when Serve gave it a GPU (`num_gpus` in its ray_actor_options), else "cpu".

    (The offline switches reach the replica through its `runtime_env`, set where it is placed in
    app.py: before the process imports anything, as huggingface_hub and transformers need.)
    """
    return "cuda" if ray.get_gpu_ids() else "cpu"


def configure_batching(batched_method, cfg: ServingConfig) -> None:
    """Apply `serving.max_batch_size` / `batch_wait_timeout_s` to a `@serve.batch` method of this replica."""
    batched_method.set_max_batch_size(cfg.max_batch_size)
    batched_method.set_batch_wait_timeout_s(cfg.batch_wait_timeout_s)
