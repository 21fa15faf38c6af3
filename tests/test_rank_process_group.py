"""A CPU rank joins its process group without building DeepSpeed's shared-memory all-reduce (a 28 s JIT build on a
new machine, for an op only DeepSpeed's inference kernels use) and without torch's CUDA-toolkit notice that the build
printed (users see a rank's output in the driver's terminal)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
NOTICE = "No CUDA runtime is found"

JOIN = """
from mmrag.training.deepspeed_rank import join_process_group, serve_rendezvous
store = serve_rendezvous(1)
print(join_process_group(0, 1, "127.0.0.1", store.port, use_gpu=False, timeout_s=30, store=store))
"""


def run(code: str, tmp_path: Path) -> subprocess.CompletedProcess:
    # A CUDA toolkit where torch looks for one (what makes torch warn on a machine without a GPU), and an empty
    # directory for JIT-built extensions (as on a new machine).
    env = {**os.environ, "CUDA_HOME": str(tmp_path), "TORCH_EXTENSIONS_DIR": str(tmp_path / "extensions"),
           "DS_ACCELERATOR": "cpu"}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env,
                          timeout=120)


@pytest.mark.skipif(torch.cuda.is_available(), reason="torch warns of a missing CUDA runtime only without a GPU")
def test_a_cpu_rank_joins_its_group_without_building_an_op_or_the_cuda_toolkit_notice(tmp_path):
    plain = run("import torch.utils.cpp_extension", tmp_path)
    assert NOTICE in plain.stderr, "the setup makes torch warn"
    joined = run(JOIN, tmp_path)
    assert joined.returncode == 0, joined.stderr[-3000:]
    assert joined.stdout.strip().splitlines()[-1] == "cpu"
    assert NOTICE not in joined.stdout + joined.stderr
    assert not (tmp_path / "extensions").exists(), "nothing was JIT-built"
