"""docs/CONFIG.md is generated from mmrag/config.py and never drifts from it."""

import dataclasses
from pathlib import Path

import yaml

from mmrag import config_reference
from mmrag.config import Config, TranslatorConfig
from mmrag.config_reference import as_yaml, attribute_docstrings, first_sentence, reference

CONFIG_MD = Path(__file__).resolve().parents[1] / "docs" / "CONFIG.md"


def test_docs_config_md_is_what_the_generator_writes():
    assert CONFIG_MD.read_text() == reference(), (
        f"docs/CONFIG.md differs from mmrag/config.py's knobs; regenerate it: {config_reference.COMMAND}")


def test_every_knob_of_every_section_has_one_row_with_its_key_path():
    rows = [line for line in reference().splitlines() if line.startswith("| `")]
    keys = [row.split("`")[1] for row in rows]

    def key_paths(cls, prefix=""):
        for field in dataclasses.fields(cls):
            default = field.default_factory() if field.default_factory is not dataclasses.MISSING else field.default
            if dataclasses.is_dataclass(default):
                yield from key_paths(type(default), f"{prefix}{field.name}.")
            else:
                yield f"{prefix}{field.name}"

    assert keys == list(key_paths(Config))
    assert "translator.lora.rank" in keys


def test_a_row_gives_the_type_the_default_as_yaml_and_the_first_sentence():
    row = next(line for line in reference().splitlines() if line.startswith("| `translator.lora.target_modules`"))
    assert row == ("| `translator.lora.target_modules` | `list[str]` | `[q_proj, v_proj]` | "
                   + first_sentence(attribute_docstrings(config_reference.config_module)["LoraConfig"]["target_modules"])
                   + " |")
    assert TranslatorConfig().lora.target_modules == ["q_proj", "v_proj"]


def test_the_first_sentence_stops_at_a_full_stop_but_not_inside_an_abbreviation():
    assert first_sentence("Model name, e.g. ViT-L-14 or a path.  More detail\n    here.") == \
        "Model name, e.g. ViT-L-14 or a path."
    assert first_sentence("Version 1.5 of the rule; no full stop") == "Version 1.5 of the rule; no full stop"


def test_defaults_read_as_yaml_values_on_one_line_and_load_back_the_same():
    values = ("runs/data", "", None, True, 3e-4, 8, "Evidence:\n{evidence}\nQuestion: {question}")
    written = [as_yaml(value) for value in values]
    assert written[:6] == ["runs/data", "''", "null", "true", "0.0003", "8"]
    assert all("\n" not in text for text in written)
    assert [yaml.safe_load(text) for text in written] == list(values)


def test_a_pipe_in_a_type_is_escaped_so_the_table_keeps_its_columns():
    for line in reference().splitlines():
        if line.startswith("| `"):
            assert line.replace("\\|", "").count("|") == 5, line
