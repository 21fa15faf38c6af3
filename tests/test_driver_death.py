"""Driver death: the same `mmrag train --resume-if-present` command, run again after its driver was SIGKILLed,
finishes the run (what a job-level retry, e.g. a RayJob's backoffLimit, does)."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
import yaml

from mmrag.config import config_to_dict
from mmrag.training.metrics_log import step_records

STEPS = 6


@pytest.mark.slow
def test_a_distributed_driver_killed_mid_run_is_finished_by_the_same_command_run_again(ray_session, tiny_config,
                                                                                      tmp_path):
    address = ray_session.get_runtime_context().gcs_address
    cfg = tiny_config(tmp_path / "run", "train.checkpoint_every=1", f"train.steps={STEPS}", f"ray.address={address}")
    config_file = tmp_path / "config.yaml"
    config_file.write_text(yaml.safe_dump(config_to_dict(cfg)))
    command = [sys.executable, "-m", "mmrag.pipelines.train", "--config", str(config_file), "--mode", "distributed",
               "--resume-if-present", "--no-progress"]
    latest = tmp_path / "run" / "checkpoints" / "latest"
    log = tmp_path / "first_driver.log"
    with log.open("w") as output:
        driver = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 400
    while not (latest.is_file() and latest.read_text().strip() >= "step_000002"):
        assert driver.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(0.05)
    driver.kill()
    driver.wait()
    killed_at = int(latest.read_text().strip().removeprefix("step_"))
    assert killed_at < STEPS

    retried = subprocess.run(command, capture_output=True, text=True, timeout=400)
    assert retried.returncode == 0, retried.stderr[-2000:]
    records = step_records(tmp_path / "run")
    assert records[-1]["step"] == STEPS
    assert {r["step"] for r in records} == set(range(1, STEPS + 1))
    ledger = records[-1]["ledger"]
    assert ledger["trained"] == STEPS and ledger["failed_attempts"] == 0, \
        "a synchronous run trains one rollout per step"
    assert latest.read_text().strip() == f"step_{STEPS:06d}"
