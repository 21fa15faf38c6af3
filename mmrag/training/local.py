"""The single-process mode: the trainer loop on in-process parts, no Ray.

`LocalPipeline` stages (run at once by `InlinePools`) and a `LocalLearner` training the
pipeline's own translator and reranker in place, with no lag. The yardstick the
distributed mode is checked against, and the way to run the algorithm where Ray is absent.
"""

from __future__ import annotations

import dataclasses
import threading

from mmrag.config import Config
from mmrag.training.learner import LocalLearner
from mmrag.training.loop import train
from mmrag.training.pipeline import LocalPipeline
from mmrag.training.streaming import InlinePools


def train_local(cfg: Config, resume: bool = False, progress: bool = True, device: str = "cpu",
                stop: threading.Event | None = None) -> dict:
    """Train on `device` in this process; returns the first and last held-out evaluations (see `loop.train`)."""
    cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, max_policy_lag=0))
    pipeline = LocalPipeline.from_config(cfg, device)
    learner = LocalLearner(cfg, pipeline.translator, pipeline.reranker)
    return train(cfg, InlinePools(pipeline), learner, resume=resume, progress=progress, stop=stop)
