"""Stops as clusters send them, to a distributed `mmrag train`: SIGTERM (Kubernetes, Slurm, `ray job stop`) and
Ctrl-C checkpoint at the next step boundary and exit 0; a second Ctrl-C exits at once; `--resume` with nothing to
resume says so before Ray starts.

Each run starts its own local Ray in the `mmrag train` process (as a user's command does), except the last, which
is a job on a private head (tests/test_cluster.py's).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from test_cluster import RAY_BIN, ROOT, _PrivateRayHead

from mmrag.cluster.runtime_env import runtime_env
from mmrag.config import config_to_dict
from mmrag.training.metrics_log import step_records

GRACE_S = 90
"""`train.preemption_grace_s` of these runs: far above a tiny step, so a stop that waits it out shows."""


def _command(tiny_config, tmp_path: Path, *overrides: str) -> list[str]:
    """`mmrag train --mode distributed` of the tiny config, long enough to be stopped in the middle."""
    cfg = tiny_config(tmp_path / "run", "train.steps=40", f"train.preemption_grace_s={GRACE_S}",
                      "train.eval_every=1000", *overrides)
    config_file = tmp_path / "config.yaml"
    config_file.write_text(yaml.safe_dump(config_to_dict(cfg)))
    return [sys.executable, "-m", "mmrag.pipelines.train", "--config", str(config_file), "--mode", "distributed",
            "--no-progress"]


def _wait_for_a_step(run_dir: Path, running, timeout_s: float = 900) -> None:
    """Until the run has logged a step; `running()` false first fails the test."""
    deadline = time.monotonic() + timeout_s
    metrics = run_dir / "metrics.jsonl"
    while not (metrics.is_file() and '"ledger"' in metrics.read_text()):
        assert running() and time.monotonic() < deadline, "the run ended (or hung) before it could be stopped"
        time.sleep(0.2)


def _assert_stopped_at_a_checkpointed_boundary(run_dir: Path) -> int:
    stopped_at = step_records(run_dir)[-1]["step"]
    saved = (run_dir / "checkpoints" / "latest").read_text().strip()
    assert saved == f"step_{stopped_at:06d}" and stopped_at < 40, "the step in progress was saved, no later one"
    return stopped_at


def test_resume_with_no_checkpoint_fails_in_one_line_before_ray_starts(tiny_config, tmp_path):
    done = subprocess.run([*_command(tiny_config, tmp_path), "--resume"], capture_output=True, text=True, timeout=900)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"train: --resume: no checkpoint under {tmp_path / 'run' / 'checkpoints'} (train.run_dir); "
        "--resume-if-present or train.resume=auto starts fresh instead"]
    assert "Ray" not in done.stdout + done.stderr


@pytest.mark.slow  # starts Ray in the driver
@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGINT], ids=lambda s: s.name)
def test_a_stop_signal_checkpoints_the_distributed_run_at_the_next_step_and_exits_0(stop_signal, tiny_config,
                                                                                       tmp_path):
    """SIGTERM to the driver process (as Kubernetes sends it to a container's first process; Ray's own processes,
    which the driver started, would exit on it), SIGINT to the whole process group, as Ctrl-C in a terminal sends it
    (Ray's own processes ignore it)."""
    command = _command(tiny_config, tmp_path)
    driver = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              start_new_session=True)
    _wait_for_a_step(tmp_path / "run", lambda: driver.poll() is None)
    signalled = time.monotonic()
    (os.killpg if stop_signal == signal.SIGINT else os.kill)(driver.pid, stop_signal)
    output, errors = driver.communicate(timeout=GRACE_S + 60)
    assert driver.returncode == 0, errors[-3000:]
    assert time.monotonic() - signalled < GRACE_S, "it waited out the grace instead of stopping at a boundary"
    stopped_at = _assert_stopped_at_a_checkpointed_boundary(tmp_path / "run")
    name = stop_signal.name
    assert [line for line in errors.splitlines() if name in line] == [
        f"{name}: checkpointing at the next step boundary (at most {GRACE_S} s, train.preemption_grace_s)"]
    assert "Traceback" not in errors and "received ***" not in errors, errors[-3000:]
    assert f"stopped by {name} at step {stopped_at} (checkpointed); continue with --resume" in output


@pytest.mark.slow  # starts Ray in the driver
def test_a_second_ctrl_c_stops_at_once_in_one_line(tiny_config, tmp_path):
    driver = subprocess.Popen(_command(tiny_config, tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, start_new_session=True)
    _wait_for_a_step(tmp_path / "run", lambda: driver.poll() is None)
    os.killpg(driver.pid, signal.SIGINT)
    time.sleep(0.5)
    signalled = time.monotonic()
    os.killpg(driver.pid, signal.SIGINT)
    _, errors = driver.communicate(timeout=60)
    assert driver.returncode == 130
    assert time.monotonic() - signalled < 15
    assert [line for line in errors.splitlines() if "SIGINT" in line] == [
        f"SIGINT: checkpointing at the next step boundary (at most {GRACE_S} s, train.preemption_grace_s)",
        "SIGINT again: stopping now; the latest complete checkpoint stays"]
    assert "Traceback" not in errors and "KeyboardInterrupt" not in errors, errors[-3000:]


@pytest.mark.slow  # starts a Ray head and submits a job to it
def test_ray_job_stop_checkpoints_a_submitted_run_at_the_next_step(tiny_config, tmp_path, monkeypatch):
    """`ray job stop` sends SIGTERM, then SIGKILL after the head's RAY_JOB_STOP_WAIT_TIME_S: set to the grace."""
    monkeypatch.setenv("RAY_JOB_STOP_WAIT_TIME_S", str(GRACE_S))
    command = _command(tiny_config, tmp_path)
    head = _PrivateRayHead(num_cpus=16)
    try:
        head.wait_ready(timeout_s=90)
        cfg = tiny_config(tmp_path / "run")
        submit = [str(RAY_BIN), "job", "submit", "--address", head.dashboard, "--submission-id", "stop-test",
                  "--no-wait", "--working-dir", str(ROOT),
                  "--runtime-env-json", json.dumps(runtime_env(cfg, str(ROOT))), "--", *command]
        submitted = head.submit(submit, timeout_s=120)
        assert submitted.returncode == 0, submitted.stderr[-3000:]

        def job(*action: str) -> subprocess.CompletedProcess:
            return subprocess.run([str(RAY_BIN), "job", *action, "--address", head.dashboard, "stop-test"],
                                  env=head.env, capture_output=True, text=True, timeout=120)

        _wait_for_a_step(tmp_path / "run",
                         lambda: any(state in job("status").stdout for state in ("PENDING", "RUNNING")))
        stopped = job("stop")
        assert stopped.returncode == 0, stopped.stdout[-2000:] + stopped.stderr[-2000:]
        logs = job("logs").stdout
    finally:
        head.stop()
    stopped_at = _assert_stopped_at_a_checkpointed_boundary(tmp_path / "run")
    assert "SIGTERM: checkpointing at the next step boundary" in logs, logs[-3000:]
    assert f"stopped by SIGTERM at step {stopped_at}" in logs, logs[-3000:]
    assert "received ***" not in logs and "Traceback" not in logs, logs[-3000:]
