"""Config loading: strict keys and types, overrides, presets, one-line errors."""

from pathlib import Path

import pytest

from mmrag.config import Config, ConfigError, config_from_dict, load_config

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


@pytest.mark.parametrize("name", sorted(p.name for p in CONFIGS.glob("*.yaml")))
def test_every_shipped_config_loads(name):
    cfg = load_config(CONFIGS / name)
    assert isinstance(cfg, Config)


def test_local_config_is_tiny_cpu():
    cfg = load_config(CONFIGS / "local.yaml")
    assert cfg.offline is True
    assert cfg.translator.model.startswith("zoo:")
    assert cfg.generator.num_gpus == 0 and cfg.translator.num_gpus == 0


def test_unknown_key_names_its_path():
    with pytest.raises(ConfigError) as err:
        config_from_dict({"train": {"stepz": 3}})
    message = str(err.value)
    assert "train.stepz" in message and "unknown key" in message and "\n" not in message


def test_wrong_type_names_its_path():
    with pytest.raises(ConfigError, match=r"train\.dpo_beta: expected float, got 'abc'"):
        config_from_dict({"train": {"dpo_beta": "abc"}})
    with pytest.raises(ConfigError, match=r"train\.steps: expected int"):
        config_from_dict({"train": {"steps": 2.5}})
    with pytest.raises(ConfigError, match=r"translator\.lora\.enabled: expected bool"):
        config_from_dict({"translator": {"lora": {"enabled": "yes"}}})


def test_literal_lists_valid_choices():
    with pytest.raises(ConfigError, match=r"train\.aggregate: expected one of \['mean', 'max'\]"):
        config_from_dict({"train": {"aggregate": "median"}})


def test_int_promotes_to_float_and_lists_are_checked():
    cfg = config_from_dict({"train": {"dpo_beta": 1}})
    assert cfg.train.dpo_beta == 1.0 and isinstance(cfg.train.dpo_beta, float)
    with pytest.raises(ConfigError, match=r"translator\.lora\.target_modules\[1\]: expected str"):
        config_from_dict({"translator": {"lora": {"target_modules": ["q_proj", 3]}}})


def test_scientific_notation_reads_as_float():
    assert config_from_dict({}, ["translator.lr=3e-4"]).translator.lr == 3e-4
    with pytest.raises(ConfigError, match=r"train\.steps: expected int, got '1e3'"):
        config_from_dict({}, ["train.steps=1e3"])


def test_overrides_parse_yaml_values():
    cfg = config_from_dict({}, ["train.steps=7", "train.aggregate=max", "translator.lora.enabled=true",
                               "translator.lora.target_modules=[q_proj, k_proj]"])
    assert cfg.train.steps == 7 and cfg.train.aggregate == "max"
    assert cfg.translator.lora.enabled is True
    assert cfg.translator.lora.target_modules == ["q_proj", "k_proj"]


def test_override_errors_are_named():
    with pytest.raises(ConfigError, match="expected KEY.PATH=VALUE"):
        config_from_dict({}, ["train.steps"])
    with pytest.raises(ConfigError, match=r"train\.nope: unknown key"):
        config_from_dict({}, ["train.nope=1"])


def test_corrupt_file_gives_one_line_error(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("train:\n  steps: [1, 2\n  seed: 3\n")
    with pytest.raises(ConfigError) as err:
        load_config(bad)
    message = str(err.value)
    assert str(bad) in message and "not valid YAML" in message and "\n" not in message


def test_non_mapping_and_missing_file(tmp_path):
    listy = tmp_path / "list.yaml"
    listy.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="top level must be a mapping"):
        load_config(listy)
    with pytest.raises(ConfigError, match="cannot read config"):
        load_config(tmp_path / "missing.yaml")


def test_section_must_be_a_mapping():
    with pytest.raises(ConfigError, match=r"^train: expected a mapping"):
        config_from_dict({"train": 3})
