"""The Ray runtime_env a run ships to the cluster: the code directory and the process environment.

Passed to `ray.init(runtime_env=...)` by the distributed driver, or written as JSON for
`ray job submit --runtime-env-json`. Only code travels: run outputs, virtual environments
and caches are excluded (Ray caps the upload size), so data, index and run directories
must be paths every node can read (shared storage), not files inside the working dir.
"""

from __future__ import annotations

from cluster.resources import plan_totals, resource_plan
from mmrag.config import Config

UPLOAD_EXCLUDES = [
    "runs/",
    ".venv/",
    "venv/",
    ".git/",
    "**/__pycache__/",
    ".pytest_cache/",
    "*.egg-info/",
    ".ruff_cache/",
    ".cache/",
    "build/",
]
"""Working-dir paths never uploaded (gitignore syntax): run outputs, environments, history, caches."""


def job_env_vars(cfg: Config) -> dict[str, str]:
    """Environment of every job and actor process for `cfg` (and of the command that runs it)."""
    env = {"TOKENIZERS_PARALLELISM": "false"}
    if cfg.offline:
        env["HF_HUB_OFFLINE"] = "1"
        env["TRANSFORMERS_OFFLINE"] = "1"
        # Offline nothing is downloaded: the hub's bars would only show each actor loading and
        # saving local checkpoints ("Loading weights", "Writing model shards") into the run's output.
        env["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    if plan_totals(resource_plan(cfg))["GPU"] == 0:
        # Name the accelerator of a CPU-only run: left to detect one, DeepSpeed (imported
        # by transformers whenever a model is saved) warns that it fell back to CPU.
        env["DS_ACCELERATOR"] = "cpu"
    return env


def runtime_env(cfg: Config, working_dir: str = ".") -> dict:
    """`{"working_dir", "excludes", "env_vars"}` for `ray.init` or `ray job submit`."""
    return {"working_dir": working_dir, "excludes": list(UPLOAD_EXCLUDES), "env_vars": job_env_vars(cfg)}
