"""The Ray-free core on a CUDA device: correctness checks and step time against CPU.

Builds the random tiny zoo models and a 24-entity synthetic task in a temp dir, then on
CUDA: (1) translator sampled log-probs equal their differentiable recomputation (fp32)
and bf16 drift; (2) reranker Plackett-Luce probabilities of every selection sum to 1;
(3) DPO and PL losses backpropagate to finite gradients; (4) the single-process trainer runs
`--steps` steps on CUDA and on CPU, reporting seconds per step. Prints a Markdown report, writes it
as its section of benchmarks/RESULTS.md and writes benchmarks/results/gpu_core.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import tempfile
import time
from pathlib import Path

import torch

from benchmarks.results import machine, publish_figures
from mmrag.config import load_config
from mmrag.data.dataset import load_questions
from mmrag.data.synth import generate_dataset
from mmrag.models.translator import QueryTranslator
from mmrag.retrieval.build import build_index
from mmrag.rl.losses import dpo_loss, pl_policy_loss
from mmrag.rl.plackett_luce import enumerate_selections, selection_logprobs
from mmrag.training.local import train_local

ROOT = Path(__file__).resolve().parents[1]
RESULTS_JSON = Path(__file__).with_name("results") / "gpu_core.json"


def build_task(work: Path, steps: int):
    overrides = [f"zoo.cache_dir={work / 'zoo'}", f"data.dir={work / 'data'}", f"index.dir={work / 'index'}",
                 "encoder.pretrained=zoo:tiny-clip-init", "reranker.backbone_pretrained=zoo:tiny-clip-init",
                 "translator.model=zoo:tiny-lvlm", f"train.steps={steps}", f"train.eval_every={steps}",
                 "train.eval_questions=16"]
    cfg = load_config(ROOT / "mmrag/configs/local.yaml", overrides)
    generate_dataset(cfg.data.dir, 24, 0)
    build_index(Path(cfg.data.dir) / "kb.parquet", cfg.index.dir, cfg.index, cfg.encoder, cfg.zoo.cache_dir,
                progress=False)
    return cfg, overrides


def translator_checks(cfg, questions) -> dict:
    out = {}
    for dtype in ("float32", "bfloat16"):
        translator = QueryTranslator.from_config(dataclasses.replace(cfg.translator, dtype=dtype),
                                                 cfg.zoo.cache_dir, "cuda")
        images, texts = [q.image for q in questions], [q.question for q in questions]
        samples = translator.sample(images, texts, 4, 1.0)
        queries = [s.text for row in samples for s in row]
        sampled = torch.tensor([s.logprob for row in samples for s in row])
        recomputed = translator.logprobs([i for i in images for _ in range(4)], [t for t in texts for _ in range(4)],
                                         queries).detach().float().cpu()
        out[dtype] = float((sampled - recomputed).abs().max())
    return out


def reranker_check(cfg) -> float:
    logits = torch.randn(1, 4, device="cuda")
    selections = enumerate_selections(3, 3)
    logprobs = selection_logprobs(logits.expand(len(selections), 4), selections, 3)
    return float(logprobs.exp().sum())


def loss_check() -> bool:
    policy = torch.randn(6, device="cuda", requires_grad=True)
    loss = dpo_loss(policy[:3], policy[3:], torch.zeros(3, device="cuda"), torch.zeros(3, device="cuda"), 0.1)
    loss = loss + pl_policy_loss(policy, torch.linspace(-1, 1, 6, device="cuda"))
    loss.backward()
    return bool(torch.isfinite(policy.grad).all())


def seconds_per_step(cfg, device: str, run_dir: Path) -> float:
    cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, run_dir=str(run_dir)))
    train_local(cfg, progress=False, device=device)
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if "ledger" in r]
    later = steps[1:] or steps  # the first step pays for warm-up
    return sum(sum(r["stage_seconds"].values()) for r in later) / len(later)


def measure(steps: int) -> dict:
    """The checks and step times on CUDA and CPU, with the machine and wall time."""
    start = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        cfg, _ = build_task(work, steps)
        questions = load_questions(cfg.data.dir, "train")[:8]
        drift = translator_checks(cfg, questions)
        return {"date": time.strftime("%Y-%m-%d"),
                "machine": f"{torch.cuda.get_device_name(0)}, {machine()}, torch {torch.__version__}, "
                           f"Python {platform.python_version()}",
                "steps": steps, "logprob_drift_float32": drift["float32"], "logprob_drift_bfloat16": drift["bfloat16"],
                "selection_probability_total": reranker_check(cfg), "loss_gradients_finite": loss_check(),
                "seconds_per_step_cuda": seconds_per_step(cfg, "cuda", work / "run-cuda"),
                "seconds_per_step_cpu": seconds_per_step(cfg, "cpu", work / "run-cpu"),
                "wall_seconds": time.time() - start}


def report(figures: dict) -> str:
    """The Markdown section for RESULTS.md."""
    steps = figures["steps"]
    return (
        f"## Ray-free core on CUDA ({figures['date']})\n\n"
        f"Machine: {figures['machine']}. Random tiny zoo models, 24-entity synthetic task; "
        f"wall {figures['wall_seconds']:.0f} s.\n\n"
        "| check | result |\n|---|---|\n"
        f"| translator: max abs(sampled - recomputed log-prob), fp32 | {figures['logprob_drift_float32']:.2e} |\n"
        f"| translator: same, bf16 | {figures['logprob_drift_bfloat16']:.2e} |\n"
        f"| reranker: sum of P(selection) over all 16 selections, K=3 | {figures['selection_probability_total']:.6f} |\n"
        f"| DPO + PL loss gradients finite | {figures['loss_gradients_finite']} |\n"
        f"| single-process trainer s/step, CUDA (steps 2..{steps}) | {figures['seconds_per_step_cuda']:.3f} |\n"
        f"| single-process trainer s/step, CPU (steps 2..{steps}) | {figures['seconds_per_step_cpu']:.3f} |\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=6, help="single-process trainer steps per device (default: 6)")
    parser.add_argument("--print-only", action="store_true", help="print only; leave RESULTS.md and the JSON alone")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("gpu_core: no CUDA device visible")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    figures = measure(args.steps)
    publish_figures(report(figures), figures, RESULTS_JSON, write=not args.print_only)


if __name__ == "__main__":
    main()
