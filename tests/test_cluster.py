"""Cluster use: resource plans, the job runtime_env, the launcher YAML, and a real `ray job submit` of training."""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml

from mmrag.cluster.connect import system_config_flag
from mmrag.cluster.resources import (
    ActorGroup,
    PlanDoesNotFit,
    check_fits,
    declared_capacity,
    plan_totals,
    resource_plan,
)
from mmrag.cluster.runtime_env import runtime_env
from mmrag.config import load_config

pytestmark = pytest.mark.slow  # starts a Ray head and submits jobs to it

ROOT = Path(__file__).resolve().parents[1]
RAY_BIN = Path(sys.executable).parent / "ray"
TINY_MODELS = ["encoder.pretrained=zoo:tiny-clip-init", "reranker.backbone_pretrained=zoo:tiny-clip-init",
               "translator.model=zoo:tiny-lvlm"]


def _launcher_yaml() -> dict:
    return yaml.safe_load((ROOT / "ray_cluster.yaml").read_text())


def test_resource_plan_lists_every_actor_group_of_the_local_config():
    plan = resource_plan(load_config(ROOT / "mmrag/configs/local.yaml"))
    assert [(g.name, g.count, g.num_cpus) for g in plan] == [
        ("translator", 1, 0.5), ("encoder", 1, 0.5), ("retrieval_shards", 2, 0.5), ("reranker", 1, 0.5),
        ("generator_pool", 1, 0.5), ("reward_pool", 1, 0.5), ("learner_workers", 1, 1.0)]
    assert plan_totals(plan) == {"CPU": 4.5, "GPU": 0.0}


def test_gpu_preset_fits_the_launcher_yaml_at_full_scale_only():
    plan = resource_plan(load_config(ROOT / "mmrag/configs/gpu_qwen2vl.yaml"))
    # 0.5 + 0.25 + 0.25 GPU share one device; 4 generators, 2 judges and 2 learners take one each.
    assert plan_totals(plan) == {"CPU": 14.5, "GPU": 9.0}
    capacity = declared_capacity(_launcher_yaml())
    assert capacity == {"CPU": 192.0, "GPU": 16.0}
    check_fits(plan, capacity)
    with pytest.raises(PlanDoesNotFit, match=r"^learner_workers: needs 2 x 1 GPU, but only 1 of 8 GPU"):
        check_fits(plan, {"CPU": 96.0, "GPU": 8.0})


def test_check_fits_names_the_first_group_out_of_cpus():
    plan = resource_plan(load_config(ROOT / "mmrag/configs/local.yaml"))
    with pytest.raises(PlanDoesNotFit, match=r"^learner_workers: needs 1 x 1 CPU = 1 CPU, but only 0.5 of 4 CPU"):
        check_fits(plan, {"CPU": 4.0})


def test_check_fits_packs_fractional_gpus_per_device():
    # 2 x 0.6 + 0.8 sums to exactly 2 GPUs, but no single device has 0.8 left.
    plan = [ActorGroup("small", 2, 0.0, 0.6), ActorGroup("large", 1, 0.0, 0.8)]
    with pytest.raises(PlanDoesNotFit, match=r"^large: needs 1 x 0.8 GPU, but only 0.8 of 2 GPU are free"):
        check_fits(plan, {"GPU": 2.0})
    check_fits(plan, {"GPU": 3.0})
    whole = [ActorGroup("shared", 1, 0.0, 0.25), ActorGroup("whole", 2, 0.0, 1.0)]
    with pytest.raises(PlanDoesNotFit, match=r"^whole: "):
        check_fits(whole, {"GPU": 2.0})
    with pytest.raises(ValueError, match=r"^odd: num_gpus above 1 must be a whole number"):
        check_fits([ActorGroup("odd", 1, 0.0, 1.5)], {"GPU": 4.0})


def test_declared_capacity_stops_at_the_cluster_max_workers():
    launcher = {"max_workers": 3, "head_node_type": "head", "available_node_types": {
        "head": {"resources": {"CPU": 8}},
        "gpu": {"max_workers": 2, "resources": {"CPU": 16, "GPU": 2}},
        "cpu": {"max_workers": 5, "resources": {"CPU": 32}}}}
    assert declared_capacity(launcher) == {"CPU": 8 + 2 * 16 + 1 * 32, "GPU": 4.0}
    del launcher["available_node_types"]["cpu"]["resources"]
    with pytest.raises(ValueError, match=r"available_node_types\.cpu\.resources: missing"):
        declared_capacity(launcher)


def test_launcher_yaml_passes_ray_up_validation_and_installs_the_package():
    # The same preparation and schema check `ray up` runs before it contacts the cloud provider.
    from ray.autoscaler._private.util import prepare_config, validate_config

    launcher = _launcher_yaml()
    validate_config(prepare_config(launcher))
    assert {"cluster_name", "provider", "head_node_type", "available_node_types", "setup_commands",
            "file_mounts", "head_start_ray_commands", "worker_start_ray_commands"} <= set(launcher)
    workers = [t for name, t in launcher["available_node_types"].items() if name != launcher["head_node_type"]]
    assert [(t["min_workers"], t["max_workers"], t["resources"]["GPU"]) for t in workers] == [(3, 4, 4)]
    assert launcher["file_mounts"]["~/mmrag"] == "."
    setup = "\n".join(launcher["setup_commands"])
    assert 'pip install -e "$HOME/mmrag[gpu]"' in setup and "faiss-gpu" in setup
    head = " ".join(launcher["head_start_ray_commands"])
    assert f"--system-config='{system_config_flag()}'" in head, "the cluster's head must get RAY_SYSTEM_CONFIG"


def test_a_local_ray_started_by_connect_runs_its_workers_with_the_projects_system_config():
    # In a process of its own: the session's Ray is already initialised, so connect() would only join it.
    probe = ("import ray\n"
             "from cluster.connect import RAY_SYSTEM_CONFIG, connect\n"
             "assert connect('', 1)\n"
             "read = ray.remote(lambda: ray._raylet.Config.kill_worker_timeout_milliseconds())\n"
             "seen = ray.get(read.remote())\n"
             "assert seen == RAY_SYSTEM_CONFIG['kill_worker_timeout_milliseconds'], seen\n"
             "ray.shutdown()\n")
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]


def test_runtime_env_ships_code_and_offline_switches():
    offline = runtime_env(load_config(ROOT / "mmrag/configs/local.yaml"), working_dir="/repo")
    assert offline["working_dir"] == "/repo"
    assert offline["env_vars"] == {"TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1",
                                   "TRANSFORMERS_OFFLINE": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1",
                                   "DS_ACCELERATOR": "cpu"}
    assert {"runs/", ".venv/", "**/__pycache__/"} <= set(offline["excludes"])
    online = runtime_env(load_config(ROOT / "mmrag/configs/gpu_qwen2vl.yaml"))
    assert online["env_vars"] == {"TOKENIZERS_PARALLELISM": "false"} and online["working_dir"] == "."


def test_plan_command_prints_the_runtime_env_for_job_submit(capsys):
    assert _plan_command(["--config", str(ROOT / "mmrag/configs/local.yaml"), "--runtime-env-json"]) == 0
    assert json.loads(capsys.readouterr().out) == runtime_env(load_config(ROOT / "mmrag/configs/local.yaml"))


def _plan_command(argv: list[str]) -> int:
    from mmrag.pipelines import plan
    from mmrag.pipelines.arguments import plan_arguments

    parser = argparse.ArgumentParser()
    plan_arguments(parser)
    return plan.run(parser.parse_args(argv))


def test_plan_command_checks_the_preset_against_the_launcher_yaml(capsys):
    preset = ["--config", str(ROOT / "mmrag/configs/gpu_qwen2vl.yaml"), "--cluster-yaml", str(ROOT / "ray_cluster.yaml")]
    assert _plan_command(preset) == 0
    out = capsys.readouterr().out
    assert "192 CPU, 16 GPU on 5 node(s)" in out and out.rstrip().endswith("fits")
    assert re.search(r"learner_workers +PACK +1 +1 +1 +1 +gpu_worker-0", out), "both ranks' bundles on one node"
    assert _plan_command(preset + ["--set", "generator.num_replicas=16"]) == 1
    assert capsys.readouterr().err.startswith("does not fit: generator_pool: needs 16 x 1 GPU, but only 15 of 16")


def _accepts_connections(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(2)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class _PrivateRayHead:
    """A `ray start --head --block` of this test alone: own temp dir and ports, so the session's Ray is untouched.

    Stopped by signalling its own process group (not `ray stop`, which ends every Ray on the machine).
    """

    PORT_FLAGS = ("port", "dashboard-port", "ray-client-server-port", "dashboard-agent-listen-port",
                  "dashboard-agent-grpc-port", "runtime-env-agent-port", "metrics-export-port",
                  "node-manager-port", "object-manager-port")

    def __init__(self, num_cpus: int):
        # A short temp dir: Ray's socket paths under it must stay within the 107-byte limit.
        self.temp_dir = tempfile.mkdtemp(prefix="mmrag-ray-", dir="/tmp")
        self.ports = {flag: _free_port() for flag in self.PORT_FLAGS}
        # Its own token, so the head, `ray job submit` and the job's driver share it and nothing else.
        token_file = Path(self.temp_dir) / "auth_token"
        token_file.write_text(secrets.token_hex(32))
        self.env = dict(os.environ, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(token_file))
        self.env.pop("RAY_AUTH_TOKEN", None)
        command = [str(RAY_BIN), "start", "--head", "--block", "--temp-dir", self.temp_dir,
                   "--num-cpus", str(num_cpus), "--num-gpus", "0", "--include-dashboard", "true",
                   "--dashboard-host", "127.0.0.1", "--object-store-memory", str(100 * 2**20), "--disable-usage-stats",
                   "--system-config", system_config_flag()]
        command += [arg for flag, port in self.ports.items() for arg in (f"--{flag}", str(port))]
        # On SIGTERM, Ray 2.60's `ray start --block` first drains its node for up to 30 s (so Serve proxies can
        # finish their requests); this head is stopped after its job has ended, with nothing left to drain.
        head_env = dict(self.env, RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S="0")
        with open(Path(self.temp_dir) / "head.log", "w") as log:  # the child keeps its own descriptor
            self.process = subprocess.Popen(command, env=head_env, stdout=log, stderr=subprocess.STDOUT,
                                            start_new_session=True)
        self.dashboard = f"http://127.0.0.1:{self.ports['dashboard-port']}"

        self._address_file = Path(self.temp_dir) / "ray_current_cluster"

    @property
    def gcs_address(self) -> str:
        """The address `ray start` recorded (it binds the machine's interface address, not 127.0.0.1)."""
        return self._address_file.read_text().strip()

    def wait_ready(self, timeout_s: float) -> None:
        """Wait until `ray start` has finished (it records the address last) and the job API and agent listen."""
        deadline = time.monotonic() + timeout_s
        while not (self._address_file.is_file() and _accepts_connections(self.ports["dashboard-port"])
                   and _accepts_connections(self.ports["dashboard-agent-listen-port"])):
            assert self.process.poll() is None, (Path(self.temp_dir) / "head.log").read_text()[-3000:]
            if time.monotonic() > deadline:
                raise TimeoutError(f"ray head in {self.temp_dir} not up after {timeout_s}s")
            time.sleep(1)

    def submit(self, submit_command: list[str], timeout_s: float) -> subprocess.CompletedProcess:
        """Run `ray job submit`, retrying while the job API has not yet seen the node's agent register."""
        deadline = time.monotonic() + timeout_s
        while True:
            done = subprocess.run(submit_command, check=False, env=self.env, capture_output=True, text=True,
                                  timeout=max(deadline - time.monotonic(), 1))
            if "No available agent to submit job" not in done.stderr or time.monotonic() > deadline:
                return done
            time.sleep(2)

    def stop(self) -> None:
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)
        shutil.rmtree(self.temp_dir, ignore_errors=True)


def test_ray_job_submit_trains_on_a_fresh_head(synth_dir, zoo_dir, tmp_path):
    """`ray job submit --working-dir` of the distributed trainer, as the README does it, on a private head."""
    from mmrag.data.dataset import KB_FILE
    from mmrag.retrieval.build import build_index
    from mmrag.training.metrics_log import read_metrics
    from mmrag.zoo import resolve

    overrides = TINY_MODELS + [f"data.dir={synth_dir}", f"index.dir={tmp_path / 'index'}", f"zoo.cache_dir={zoo_dir}"]
    cfg = load_config(ROOT / "mmrag/configs/local.yaml", overrides)
    resolve(cfg.translator.model, zoo_dir)
    build_index(Path(synth_dir) / KB_FILE, cfg.index.dir, cfg.index, cfg.encoder, zoo_dir, progress=False)

    run_dir = tmp_path / "run"
    head = _PrivateRayHead(num_cpus=8)
    try:
        head.wait_ready(timeout_s=90)
        plan = subprocess.Popen([sys.executable, "-m", "mmrag.pipelines.plan", "--address", head.gcs_address], cwd=ROOT,
                                env=head.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        train = [sys.executable, "-m", "mmrag.pipelines.train", "--config", "mmrag/configs/local.yaml", "--no-progress",
                 "--mode", "distributed", "--run-dir", str(run_dir), "--steps", "2"]
        small = ["train.eval_questions=4", "train.questions_per_step=2", "translator.num_samples=2",
                 "reranker.num_samples=2", "train.checkpoint_every=1", "train.max_policy_lag=0"]
        train += [arg for item in overrides + small for arg in ("--set", item)]
        submit = [str(RAY_BIN), "job", "submit", "--address", head.dashboard, "--submission-id", "cluster-test",
                  "--working-dir", str(ROOT), "--runtime-env-json", json.dumps(runtime_env(cfg, str(ROOT))),
                  "--", *train]
        done = head.submit(submit, timeout_s=300)
        logs = done.stdout[-4000:] + done.stderr[-2000:]
        # `ray job submit` tails the logs until the job ends and reports its final status.
        assert done.returncode == 0 and "Job 'cluster-test' succeeded" in done.stdout, logs
        plan_output = plan.communicate(timeout=120)[0]
        assert plan.returncode == 0, plan_output
        assert f"capacity (Ray cluster at {head.gcs_address}): 8 CPU, 0 GPU on " in plan_output
        assert plan_output.rstrip().endswith("\nfits"), plan_output
    finally:
        head.stop()
    records = read_metrics(run_dir)
    assert [r["step"] for r in records if "eval" in r] == [0, 2]
    assert [r["step"] for r in records if "eval" not in r] == [1, 2]
    assert {"export.json", "reranker", "translator"} <= {p.name for p in (run_dir / "export").iterdir()}
    assert (run_dir / "checkpoints" / "latest").read_text().strip() == "step_000002"
    assert {"driver.pt", "learner"} <= {p.name for p in (run_dir / "checkpoints" / "step_000002").iterdir()}
