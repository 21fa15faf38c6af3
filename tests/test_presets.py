"""`--config` takes a file or a preset by name from any directory; no `--config` is the embedded defaults."""

from __future__ import annotations

from pathlib import Path

import pytest

from mmrag.config import Config, ConfigError, config_to_dict
from mmrag.presets import preset_names, resolve_config
from mmrag.pipelines.cli import build_parser
from mmrag.pipelines.options import config_from_args

ROOT = Path(__file__).resolve().parents[1]


def test_every_yaml_directly_in_configs_is_a_preset_and_serve_configs_are_not():
    assert preset_names() == sorted(path.stem for path in (ROOT / "mmrag" / "configs").glob("*.yaml"))
    assert "gpu_qwen2vl" in preset_names() and "serve/local" not in preset_names()


@pytest.mark.parametrize("value", ["gpu_qwen2vl", "gpu_qwen2vl.yaml", "mmrag/configs/gpu_qwen2vl.yaml"])
def test_a_preset_is_found_by_name_from_any_directory(value, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert resolve_config(value).read_text() == (ROOT / "mmrag/configs/gpu_qwen2vl.yaml").read_text()


def test_an_existing_file_wins_over_a_preset_of_the_same_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "local").write_text("train:\n  steps: 3\n")
    assert resolve_config("local") == Path("local")


def test_an_unknown_config_names_the_value_and_the_presets():
    with pytest.raises(ConfigError, match=r"--config nope: no such file, and not a preset name \(presets: gpu_qwen2vl"):
        resolve_config("nope")


def test_no_config_gives_the_embedded_defaults_from_any_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = config_from_args(build_parser("plan").parse_args(["plan"]))
    assert config_to_dict(cfg) == config_to_dict(Config())
    named = config_from_args(build_parser("plan").parse_args(["plan", "--config", "gpu_qwen2vl"]))
    assert named.translator.model == "Qwen/Qwen2-VL-2B-Instruct"
