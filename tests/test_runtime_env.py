"""mmrag.cluster.runtime_env: the job variables reach the workers of a cluster a command joins."""

from __future__ import annotations

from pathlib import Path

from mmrag.cluster.runtime_env import forwarded_env_vars, job_env_vars
from mmrag.config import load_config

ROOT = Path(__file__).resolve().parents[1]


def test_a_joined_cluster_gets_every_job_variable_the_command_set_and_nothing_else():
    variables = job_env_vars(load_config(ROOT / "mmrag/configs/local.yaml"))
    assert len(variables) == 5  # the offline config sets every variable there is
    assert forwarded_env_vars({**variables, "HOME": "/root", "PATH": "/usr/bin"}) == variables
