"""`mmrag env`: the versions a bug report needs, read without importing Ray or starting it."""

from __future__ import annotations

import importlib.metadata
import json
import platform
import subprocess
import sys
from pathlib import Path

import torch

import mmrag
from mmrag.model_refs import ZOO_FORMAT_VERSION

ROOT = Path(__file__).resolve().parents[1]


def test_env_prints_every_version_and_the_zoo_builds_without_importing_ray(tmp_path):
    (tmp_path / "tiny-clip").mkdir()
    (tmp_path / "tiny-clip" / "zoo.json").write_text(json.dumps(
        {"name": "tiny-clip", "seed": 3, "format_version": ZOO_FORMAT_VERSION - 1, "build_seconds": 9.5,
         "figures": {"heldout_query_to_passage_top1": 0.97}}))
    for name, revision in (("visual-reader", 1), ("tiny-lvlm-captioner", 2)):  # both are at revision 2
        (tmp_path / name).mkdir()
        (tmp_path / name / "zoo.json").write_text(json.dumps(
            {"name": name, "seed": 0, "format_version": ZOO_FORMAT_VERSION, "revision": revision,
             "build_seconds": 1.0, "figures": {}}))
    code = ("import sys; from pipelines.cli import main; main(['env', '--set', 'zoo.cache_dir=" + str(tmp_path) +
            "']); print('heavy imports:', [m for m in ('ray', 'deepspeed', 'transformers', 'faiss') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True,
                         timeout=120).stdout
    fields = {line.split()[0]: line.split()[1] for line in out.splitlines() if not line.startswith(" ")}
    assert fields["mmrag"] == mmrag.__version__ and fields["python"] == platform.python_version()
    assert fields["torch"] == torch.__version__ and fields["cuda"].rstrip(",") == (torch.version.cuda or "none")
    for label, distribution in (("ray", "ray"), ("deepspeed", "deepspeed"), ("transformers", "transformers"),
                                ("open_clip", "open_clip_torch"), ("faiss", "faiss-cpu")):
        assert fields[label] == importlib.metadata.version(distribution), label
    assert (f"  tiny-clip: format {ZOO_FORMAT_VERSION - 1} revision 1 (stale: rebuilt on next use), seed 3, built in 9.5 s; "
            'figures {"heldout_query_to_passage_top1": 0.97}') in out
    assert f"  visual-reader: format {ZOO_FORMAT_VERSION} revision 1 (stale: rebuilt on next use), seed 0" in out
    assert f"  tiny-lvlm-captioner: format {ZOO_FORMAT_VERSION} revision 2, seed 0" in out
    assert "  tiny-lvlm: not built" in out
    assert "heavy imports: []" in out
