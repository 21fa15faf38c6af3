"""The exported checkpoint of a training run: what serving and evaluation load.

Layout of RUN_DIR/export/:
  translator/     HF (or PEFT adapter) directory + processor, loadable by QueryTranslator
  reranker.pt     the reranker's trainable state (head, STOP scorer, LoRA adapters)
  export.json     the policy version and the config sections needed to rebuild both
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import torch
from safetensors.torch import load_file

from mmrag.config import Config


def save_export(export_dir: str | Path, translator, reranker, version: int, cfg: Config) -> Path:
    export_dir = Path(export_dir)
    export_dir.mkdir(parents=True, exist_ok=True)
    translator.export(str(export_dir / "translator"))
    torch.save(reranker.trainable_state_dict(), export_dir / "reranker.pt")
    meta = {"version": version, "translator": dataclasses.asdict(cfg.translator),
            "reranker": dataclasses.asdict(cfg.reranker)}
    (export_dir / "export.json").write_text(json.dumps(meta, indent=2))
    return export_dir


def with_exported_translator(cfg: Config, export_dir: str | Path) -> Config:
    """A copy of `cfg` whose translator loads from the export (the LoRA flag as trained)."""
    export_dir = Path(export_dir)
    meta_path = export_dir / "export.json"
    if not meta_path.is_file():
        raise FileNotFoundError(f"{meta_path}: not an exported checkpoint (expected RUN_DIR/export from `mmrag train`)")
    meta = json.loads(meta_path.read_text())
    lora = dataclasses.replace(cfg.translator.lora, **meta["translator"]["lora"])
    translator = dataclasses.replace(cfg.translator, model=str(export_dir / "translator"), lora=lora)
    return dataclasses.replace(cfg, translator=translator)


def load_reranker_weights(reranker, export_dir: str | Path) -> None:
    path = Path(export_dir) / "reranker.pt"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: missing reranker weights in the exported checkpoint")
    reranker.load_trainable_state_dict(torch.load(path, map_location="cpu"))


def exported_trainable_weights(export_dir: str | Path) -> dict[str, torch.Tensor]:
    """Every trained weight of an export by name (`translator/...` from its safetensors, `reranker/...`), on CPU."""
    export_dir = Path(export_dir)
    weights = {f"reranker/{name}": tensor for name, tensor in
               torch.load(export_dir / "reranker.pt", map_location="cpu").items()}
    for path in sorted((export_dir / "translator").glob("*.safetensors")):
        weights.update({f"translator/{name}": tensor for name, tensor in load_file(path).items()})
    return weights
