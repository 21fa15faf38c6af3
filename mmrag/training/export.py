"""The exported checkpoint of a training run: what serving, evaluation and `mmrag.Pipeline` load.

Layout of RUN_DIR/export/:
  translator/                 HF (or PEFT adapter) directory + processor, loadable by QueryTranslator
  reranker/model.safetensors  the reranker's trainable state (head, STOP scorer, LoRA adapters)
  reranker/config.json        the `reranker` config section those weights fit, and the policy version
  export.json                 the policy version, the translator and reranker sections, and the whole
                              config of the run (index, encoder, generator: what `Pipeline` rebuilds),
                              its paths relative to the export (`mmrag.training.export_meta`)
  README.md                   the model card (`mmrag.training.model_card`), after the run's last evaluation

The directory is written beside its final place and renamed into it, so a reader never sees a
half-written export. Exports written before safetensors (a pickled `reranker.pt` instead of
`reranker/`) still load.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from mmrag.atomic import atomic_directory
from mmrag.config import Config, config_to_dict
from mmrag.training.export_meta import META_FILE, export_meta, portable_config

RERANKER_DIR = "reranker"
RERANKER_WEIGHTS = "model.safetensors"
RERANKER_CONFIG = "config.json"
LEGACY_RERANKER_WEIGHTS = "reranker.pt"


def save_export(export_dir: str | Path, translator, reranker, version: int, cfg: Config,
                location: str | Path | None = None) -> Path:
    """Write the export into `export_dir`; `location` is where it will be read from (a path or URI; default
    `export_dir`), what its recorded paths are relative to, when it is written in a scratch directory first."""
    export_dir = Path(export_dir)
    with atomic_directory(export_dir) as staging:
        translator.export(str(staging / "translator"))
        _record_base_by_reference(staging / "translator", cfg.translator.model)
        (staging / RERANKER_DIR).mkdir()
        weights = {name: tensor.contiguous() for name, tensor in reranker.trainable_state_dict().items()}
        save_file(weights, staging / RERANKER_DIR / RERANKER_WEIGHTS, metadata={"format": "pt"})
        reranker_config = {"policy_version": version, "reranker": dataclasses.asdict(cfg.reranker)}
        (staging / RERANKER_DIR / RERANKER_CONFIG).write_text(json.dumps(reranker_config, indent=2))
        meta = {"version": version, "translator": dataclasses.asdict(cfg.translator),
                "reranker": dataclasses.asdict(cfg.reranker),
                "config": portable_config(config_to_dict(cfg), export_dir if location is None else location)}
        (staging / META_FILE).write_text(json.dumps(meta, indent=2))
    return export_dir


def _record_base_by_reference(translator_dir: Path, base_ref: str) -> None:
    """A LoRA adapter names its base model as the config does (`zoo:NAME`, a Hub id), not by the local path it was
    resolved to, which exists on the training machine only (in adapter_config.json and the card PEFT writes beside
    it); a base configured as a local path stays as PEFT wrote it."""
    adapter_config = translator_dir / "adapter_config.json"
    if not adapter_config.is_file() or Path(base_ref).expanduser().exists():
        return
    adapter = json.loads(adapter_config.read_text())
    resolved, adapter["base_model_name_or_path"] = adapter["base_model_name_or_path"], base_ref
    adapter_config.write_text(json.dumps(adapter, indent=2))
    peft_card = translator_dir / "README.md"
    if resolved and peft_card.is_file():
        peft_card.write_text(peft_card.read_text().replace(resolved, base_ref))


def with_exported_translator(cfg: Config, export_dir: str | Path) -> Config:
    """A copy of `cfg` whose translator loads from the export (the LoRA flag as trained)."""
    meta = export_meta(export_dir)
    lora = dataclasses.replace(cfg.translator.lora, **meta["translator"]["lora"])
    translator = dataclasses.replace(cfg.translator, model=str(Path(export_dir) / "translator"), lora=lora)
    return dataclasses.replace(cfg, translator=translator)


EXPORTED_RERANKER_FIELDS = ("backbone_name", "backbone_pretrained", "visual_reader", "backbone", "head", "hidden_dim",
                            "score_temperature", "lora_rank", "lora_alpha", "max_docs", "gate")
"""The `reranker` fields an export's weights and its greedy selection depend on: loading it takes them from the
export (for example the k that component-level training chose on val as `max_docs`, or a retrieval gate); the rest
(sampling, learning rates, placement) stay the loading config's."""


def with_exported_reranker(cfg: Config, export_dir: str | Path) -> Config:
    """A copy of `cfg` whose reranker is the export's (`EXPORTED_RERANKER_FIELDS`; a field an older export does not
    record stays the config's)."""
    exported = export_meta(export_dir)["reranker"]
    fields = {name: exported[name] for name in EXPORTED_RERANKER_FIELDS if name in exported}
    return dataclasses.replace(cfg, reranker=dataclasses.replace(cfg.reranker, **fields))


def load_reranker_weights(reranker, export_dir: str | Path) -> None:
    reranker.load_trainable_state_dict(exported_reranker_state(export_dir))


def exported_reranker_state(export_dir: str | Path) -> dict[str, torch.Tensor]:
    """The reranker's trained weights by name, on CPU: from reranker/model.safetensors, or an older reranker.pt."""
    export_dir = Path(export_dir)
    path = export_dir / RERANKER_DIR / RERANKER_WEIGHTS
    if path.is_file():
        return load_file(path)
    legacy = export_dir / LEGACY_RERANKER_WEIGHTS
    if legacy.is_file():
        return torch.load(legacy, map_location="cpu", weights_only=True)
    raise FileNotFoundError(f"{path}: missing reranker weights in the exported checkpoint")


def exported_trainable_weights(export_dir: str | Path) -> dict[str, torch.Tensor]:
    """Every trained weight of an export by name (`translator/...` from its safetensors, `reranker/...`), on CPU."""
    export_dir = Path(export_dir)
    weights = {f"reranker/{name}": tensor for name, tensor in exported_reranker_state(export_dir).items()}
    for path in sorted((export_dir / "translator").glob("*.safetensors")):
        weights.update({f"translator/{name}": tensor for name, tensor in load_file(path).items()})
    return weights
