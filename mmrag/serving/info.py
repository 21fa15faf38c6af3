"""What `GET /v1/info` reports and what every answer's `versions` carries, read from disk once at startup.

Built by the Serve application builder (mmrag/actors/serving/app.py) from the config, the index
manifest and the exported checkpoint's export.json, then handed to the API.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mmrag.config import Config
from mmrag.retrieval.manifest import Manifest
from mmrag.training.export_meta import export_meta


def checkpoint_version(checkpoint: str | Path) -> int:
    """The policy version recorded in RUN_DIR/export/export.json."""
    return int(export_meta(checkpoint)["version"])


def answer_versions(manifest: Manifest, checkpoint: str | Path) -> dict[str, Any]:
    """Identifies what produced an answer: the trained policies' version, the checkpoint and the index build."""
    return {"policy_version": checkpoint_version(checkpoint), "checkpoint": str(checkpoint),
            "index_fingerprint": manifest.fingerprint}


def service_info(cfg: Config, manifest: Manifest, checkpoint: str | Path) -> dict[str, Any]:
    """The `GET /v1/info` body: models, knowledge base size, checkpoint, request limits and option defaults."""
    return {
        "models": {
            "translator": {"base": cfg.translator.model, "checkpoint": str(Path(checkpoint) / "translator")},
            "encoder": {"model_name": cfg.encoder.model_name, "pretrained": cfg.encoder.pretrained},
            "reranker": {"backbone_name": cfg.reranker.backbone_name,
                         "backbone_pretrained": cfg.reranker.backbone_pretrained, "head": cfg.reranker.head},
            "generator": {"backend": cfg.generator.backend, "model": cfg.generator.model},
        },
        "kb_size": manifest.num_docs,
        "index": {"dir": cfg.index.dir, "num_shards": len(manifest.shards), "fingerprint": manifest.fingerprint},
        "checkpoint": {"dir": str(checkpoint), "policy_version": checkpoint_version(checkpoint)},
        "limits": {"max_image_bytes": cfg.serving.max_image_bytes, "max_image_side": cfg.serving.max_image_side,
                   "max_question_chars": cfg.serving.max_question_chars, "max_top_k": cfg.serving.max_top_k,
                   "max_docs": cfg.reranker.max_docs},
        "defaults": {"top_k": cfg.index.top_k, "max_docs": cfg.reranker.max_docs, "return_evidence": True},
    }
