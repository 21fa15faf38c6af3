"""Config loading: strict keys and types, overrides, presets, one-line errors."""

import dataclasses
from pathlib import Path

import pytest

from mmrag.config import Config, ConfigError, config_from_dict, config_to_dict, load_config

CONFIGS = Path(__file__).resolve().parents[1] / "mmrag" / "configs"
PATH_FIELDS = {("data", "dir"), ("zoo", "cache_dir"), ("index", "dir"), ("train", "run_dir")}


@pytest.mark.parametrize("name", sorted(p.name for p in CONFIGS.glob("*.yaml")))
def test_every_shipped_config_loads(name):
    cfg = load_config(CONFIGS / name)
    assert isinstance(cfg, Config)


def test_local_config_is_tiny_cpu():
    cfg = load_config(CONFIGS / "local.yaml")
    assert cfg.offline is True
    assert cfg.translator.model.startswith("zoo:")
    assert cfg.generator.num_gpus == 0 and cfg.translator.num_gpus == 0


def test_local_preset_equals_the_defaults_paths_aside():
    preset, defaults = config_to_dict(load_config(CONFIGS / "local.yaml")), config_to_dict(Config())
    for section, key in PATH_FIELDS:
        del preset[section][key], defaults[section][key]
    assert preset == defaults


@pytest.mark.parametrize("preset", ["local.yaml", "local-v1.yaml"])
def test_each_local_world_reranks_with_the_clip_its_retriever_embeds_with(preset):
    cfg = load_config(CONFIGS / preset)
    assert cfg.reranker.backbone_name == cfg.encoder.model_name
    assert cfg.reranker.backbone_pretrained == cfg.encoder.pretrained


def test_configs_stay_plain_dataclasses_that_round_trip():
    cfg = load_config(CONFIGS / "gpu_qwen2vl.yaml")
    assert config_from_dict(config_to_dict(cfg)) == cfg
    changed = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, steps=3))
    assert changed.train.steps == 3 and cfg.train.steps != 3


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


def test_scientific_notation_reads_as_float(tmp_path):
    assert config_from_dict({}, ["translator.lr=3e-4"]).translator.lr == 3e-4
    with pytest.raises(ConfigError, match=r"train\.steps: expected int, got 1000\.0"):
        config_from_dict({}, ["train.steps=1e3"])
    preset = tmp_path / "short.yaml"
    preset.write_text("reranker:\n  lr: 5e-3\n")
    assert load_config(preset).reranker.lr == 5e-3


def test_several_errors_report_the_first_and_count_the_rest():
    with pytest.raises(ConfigError, match=r"^index\.top_k: expected int, got None \(and 2 more\)$"):
        config_from_dict({"train": {"steps": "x", "seed": "y"}, "index": {"top_k": None}})


def test_overrides_parse_yaml_values():
    cfg = config_from_dict({}, ["train.steps=7", "train.aggregate=max", "translator.lora.enabled=true",
                               "translator.lora.target_modules=[q_proj, k_proj]"])
    assert cfg.train.steps == 7 and cfg.train.aggregate == "max"
    assert cfg.translator.lora.enabled is True
    assert cfg.translator.lora.target_modules == ["q_proj", "k_proj"]
    saved = {"train": {"steps": 3}}
    assert config_from_dict(saved, ["train.seed=4"]).train.seed == 4 and saved == {"train": {"steps": 3}}


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


def test_a_stage_pool_key_still_under_learner_is_refused_naming_its_new_section():
    with pytest.raises(ConfigError, match=r"^learner\.call_retries: moved to pools\.call_retries$"):
        config_from_dict({}, ["learner.call_retries=5"])
    assert config_from_dict({}, ["pools.call_retries=5"]).pools.call_retries == 5
