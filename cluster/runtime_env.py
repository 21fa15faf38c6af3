"""The Ray runtime_env a run ships to the cluster: the code directory and the process environment.

How the environment reaches every process: a command first sets `job_env_vars` in its own
environment (`mmrag.pipelines.options`), so a Ray it starts locally hands them to its workers, and
`mmrag.cluster.connect` passes them on (`forwarded_env_vars`) when it joins a configured cluster
address. A job submitted with `ray job submit --runtime-env-json "$(mmrag plan
--runtime-env-json)"` gets the whole `runtime_env`: the code directory and the variables.
Only code travels: run outputs, virtual environments and caches are excluded (Ray caps the
upload size), so data, index and run directories must be paths every node can read (shared
storage), not files inside the working dir.
"""

from __future__ import annotations

from collections.abc import Mapping

from mmrag.cluster.resources import plan_totals, resource_plan
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


JOB_ENV_KEYS = ("TOKENIZERS_PARALLELISM", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HUB_DISABLE_PROGRESS_BARS",
                "DS_ACCELERATOR")
"""Every variable `job_env_vars` may set."""


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


def forwarded_env_vars(environ: Mapping[str, str]) -> dict[str, str]:
    """The job variables a command has set in `environ`, for the workers of a cluster it joins."""
    return {key: environ[key] for key in JOB_ENV_KEYS if key in environ}


def runtime_env(cfg: Config, working_dir: str = ".") -> dict:
    """`{"working_dir", "excludes", "env_vars"}` for `ray job submit --runtime-env-json`."""
    return {"working_dir": working_dir, "excludes": list(UPLOAD_EXCLUDES), "env_vars": job_env_vars(cfg)}
