"""Torch threads by what a process owns (`mmrag.cpu_threads`): an explicit OMP_NUM_THREADS / MKL_NUM_THREADS wins,
then the CPUs Ray (or a parent) assigned, then the CPU affinity; small models get one intra-op thread. Each kind of
process the project runs in ends up with those threads: the Python API, a CLI command, a Ray actor."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from mmrag.cpu_threads import PARAMETERS_PER_THREAD, decide_threads, largest_model_parameters

ROOT = Path(__file__).resolve().parents[1]
BIG = 3 * PARAMETERS_PER_THREAD


def test_an_explicit_omp_num_threads_wins_over_assigned_cpus_affinity_and_model_size():
    decision = decide_threads({"OMP_NUM_THREADS": "3"}, assigned_cpus=1.0, affinity=8, largest_model_parameters=10)
    assert (decision.intra_op, decision.inter_op, decision.source) == (3, 3, "OMP_NUM_THREADS=3")


def test_mkl_num_threads_counts_when_omp_num_threads_is_unset_and_an_omp_list_takes_its_first_level():
    assert decide_threads({"MKL_NUM_THREADS": "5"}, None, 2).intra_op == 5
    assert decide_threads({"OMP_NUM_THREADS": "4,2", "MKL_NUM_THREADS": "5"}, None, 2).intra_op == 4
    assert decide_threads({"OMP_NUM_THREADS": " "}, None, 2).source == "CPU affinity of 2"


@pytest.mark.parametrize("value", ["0", "two", "-1", "1.5"])
def test_a_bad_thread_setting_is_an_error_naming_the_variable(value):
    with pytest.raises(ValueError, match=f"OMP_NUM_THREADS='{value}': expected a positive whole number"):
        decide_threads({"OMP_NUM_THREADS": value}, None, 2)


@pytest.mark.parametrize("assigned, threads", [(4.0, 4), (2.5, 2), (0.5, 1), (0.0, 1)])
def test_assigned_cpus_give_their_whole_number_of_threads_and_at_least_one(assigned, threads):
    decision = decide_threads({}, assigned_cpus=assigned, affinity=16)
    assert (decision.intra_op, decision.inter_op) == (threads, threads)


def test_without_a_setting_or_assignment_the_cpu_affinity_decides():
    assert decide_threads({}, None, affinity=6).intra_op == 6


def test_a_small_model_gets_one_intra_op_thread_and_a_large_one_a_thread_per_share_of_parameters():
    small = decide_threads({}, None, affinity=8, largest_model_parameters=7_600_000)
    assert (small.intra_op, small.inter_op) == (1, 8)
    assert "largest model 7.6M parameters" in small.source
    assert decide_threads({}, None, affinity=8, largest_model_parameters=BIG).intra_op == 3
    assert decide_threads({}, None, affinity=2, largest_model_parameters=BIG).intra_op == 2
    assert decide_threads({}, 4.0, affinity=8, largest_model_parameters=0).intra_op == 1


def test_the_largest_model_is_found_among_components_and_the_objects_they_hold():
    class Wrapper:
        def __init__(self):
            self.model = torch.nn.Linear(10, 10)  # 110 parameters
            self.settings = {"head": torch.nn.Linear(20, 20)}  # 420

    assert largest_model_parameters([Wrapper(), torch.nn.Linear(3, 3), "text", 5]) == 420
    assert largest_model_parameters([]) == 0


def _run_python(code: str, env_overrides: dict[str, str], cwd: Path) -> dict:
    env = {key: value for key, value in os.environ.items() if key not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    env.update({"PYTHONPATH": str(ROOT), **env_overrides})
    done = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return {"stdout": json.loads(done.stdout.strip().splitlines()[-1]), "stderr": done.stderr}


API_PROBE = """
import json, logging, torch
logging.basicConfig(level=logging.INFO)
torch.set_num_threads(4)  # whatever the process had, from_pretrained sets its own
from mmrag import Pipeline
Pipeline.from_pretrained({export!r})
print(json.dumps(torch.get_num_threads()))
"""


@pytest.mark.parametrize("env, threads", [({}, 1), ({"OMP_NUM_THREADS": "3"}, 3)])
def test_the_python_api_runs_the_tiny_models_on_one_thread_unless_the_user_sets_threads(tiny_export, tmp_path, env,
                                                                                       threads):
    _, export, _ = tiny_export
    ran = _run_python(API_PROBE.format(export=str(export)), env, tmp_path)
    assert ran["stdout"] == threads
    assert "mmrag.Pipeline: " in ran["stderr"]


CLI_PROBE = """
import json, logging, os, torch
logging.basicConfig(level=logging.INFO)
os.sched_setaffinity(0, {{min(os.sched_getaffinity(0))}})  # a process given one CPU
torch.set_num_threads(4)
from mmrag.pipelines import cli
cli.main(["eval", "--local", "--checkpoint", {export!r}, "--settings", "trained", "--limit", "2",
          "--out", "eval-out", "--set", "data.dir={data}", "--set", "index.dir={index}", "--set", "zoo.cache_dir={zoo}",
          *[item for override in {overrides!r} for item in ("--set", override)]])
print(json.dumps(torch.get_num_threads()))
"""


def test_a_cli_command_sets_threads_from_the_cpus_its_process_owns(tiny_export, synth_dir, zoo_dir, tmp_path):
    from tests.conftest import TINY_MODELS

    cfg, export, _ = tiny_export
    code = CLI_PROBE.format(export=str(export), data=synth_dir, index=cfg.index.dir, zoo=zoo_dir, overrides=TINY_MODELS)
    ran = _run_python(code, {}, tmp_path)
    assert ran["stdout"] == 1
    assert "mmrag eval: 1 intra-op thread(s), 1 inter-op (CPU affinity of 1)" in ran["stderr"]


@pytest.mark.parametrize("num_cpus, omp_num_threads, threads", [(1, "", 1), (3, "", 3), (1, "2", 2)])
def test_a_ray_actor_runs_as_many_threads_as_the_cpus_ray_assigned_it_unless_the_user_set_them(
        ray_session, zoo_dir, num_cpus, omp_num_threads, threads):
    from mmrag.actors.encoder import EncoderActor
    from mmrag.config import EncoderConfig

    ray = ray_session
    # The workers inherit this process's environment; "" stands for a user who set no thread count.
    runtime_env = {"env_vars": {"OMP_NUM_THREADS": omp_num_threads, "MKL_NUM_THREADS": ""}}
    actor = ray.remote(EncoderActor).options(num_cpus=num_cpus, runtime_env=runtime_env).remote(EncoderConfig(),
                                                                                                 zoo_dir)
    try:
        got = ray.get(actor.__ray_call__.remote(lambda _: (torch.get_num_threads(), torch.get_num_interop_threads())))
        assert got == (threads, threads)
    finally:
        ray.kill(actor)
