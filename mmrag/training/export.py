"""The exported checkpoint of a training run: what serving, evaluation and `mmrag.Pipeline` load.

Layout of RUN_DIR/export/:
  translator/                 HF (or PEFT adapter) directory + processor, loadable by QueryTranslator
  reranker/model.safetensors  the reranker's trainable state (head, STOP scorer, LoRA adapters)
  reranker/config.json        the `reranker` config section those weights fit, and the policy version
  export.json                 the policy version, the translator and reranker sections, and the whole
                              config of the run (index, encoder, generator: what `Pipeline` rebuilds)
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
from mmrag.training.export_meta import export_meta

RERANKER_DIR = "reranker"
RERANKER_WEIGHTS = "model.safetensors"
RERANKER_CONFIG = "config.json"
LEGACY_RERANKER_WEIGHTS = "reranker.pt"


def save_export(export_dir: str | Path, translator, reranker, version: int, cfg: Config) -> Path:
    export_dir = Path(export_dir)
    with atomic_directory(export_dir) as staging:
        translator.export(str(staging / "translator"))
        (staging / RERANKER_DIR).mkdir()
        weights = {name: tensor.contiguous() for name, tensor in reranker.trainable_state_dict().items()}
        save_file(weights, staging / RERANKER_DIR / RERANKER_WEIGHTS, metadata={"format": "pt"})
        reranker_config = {"policy_version": version, "reranker": dataclasses.asdict(cfg.reranker)}
        (staging / RERANKER_DIR / RERANKER_CONFIG).write_text(json.dumps(reranker_config, indent=2))
        meta = {"version": version, "translator": dataclasses.asdict(cfg.translator),
                "reranker": dataclasses.asdict(cfg.reranker), "config": config_to_dict(_with_absolute_paths(cfg))}
        (staging / "export.json").write_text(json.dumps(meta, indent=2))
    return export_dir


def _with_absolute_paths(cfg: Config) -> Config:
    """The data, index and zoo paths as absolute paths, so that the export loads from any directory."""
    def absolute(path: str) -> str:
        return str(Path(path).expanduser().resolve())

    return dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, dir=absolute(cfg.data.dir)),
                               index=dataclasses.replace(cfg.index, dir=absolute(cfg.index.dir)),
                               zoo=dataclasses.replace(cfg.zoo, cache_dir=absolute(cfg.zoo.cache_dir)))


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
