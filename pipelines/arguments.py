"""The options of every `mmrag` command, declared apart from what the commands run.

`mmrag COMMAND --help` and argument errors need only this module: the command's own module
(`mmrag.pipelines.COMMAND`, whose run() imports torch, Ray or transformers at its top) is
imported once the arguments have parsed. One function per command adds its options to a parser.
"""

from __future__ import annotations

import argparse

from mmrag.data.dataset import SPLITS
from mmrag.data.loaders.annotations import FORMATS as SCORE_FORMATS
from mmrag.metrics.okvqa import RULES
from mmrag.model_refs import MODELS
from mmrag.presets import preset_names

CONVERT_FORMATS = ("infoseek", "evqa", "okvqa", "aokvqa", "wiki-kb")
"""The public formats `mmrag convert` reads."""


def add_config_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        metavar="FILE|PRESET",
        help="YAML config: a file, or a preset by name (" + ", ".join(preset_names()) + "); default: the "
             "embedded defaults (tiny offline models on CPU, synthetic data; what preset `local` restates)",
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY.PATH=VALUE",
        help="override one config field, e.g. --set train.steps=10 (repeatable; VALUE is parsed as YAML)",
    )


def synth_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_options(parser)
    parser.add_argument("--out", help="output directory (default: data.dir)")
    parser.add_argument("--entities", type=int, help="number of entities (default: data.entities)")
    parser.add_argument("--world", choices=("v1", "v2", "v3"),
                        help="v2: varying knowledge demand, a KB in its own wording; v3: knowledge demand the "
                             "question's wording does not reveal, misleading passages; v1: the earliest figures' world "
                             "(default: data.world)")
    parser.add_argument("--seed", type=int, help="generator seed (default: data.seed)")
    parser.add_argument("--image-size", type=int, help="image side in pixels (default: data.image_size)")
    parser.add_argument("--kb-docs", type=int, default=0, metavar="N",
                        help="also add N text-only distractor passages to the KB, e.g. 1000000 to measure the "
                             "index at scale (they state no facts; default 0)")
    parser.add_argument("--family-sizes", metavar="MIN,MAX",
                        help="world v3: smallest and largest near-duplicate family, e.g. 2,4 (default 3,4)")
    parser.add_argument("--kind-mix", metavar="V,O,T",
                        help="world v3: expected fractions of visual, one-fact and two-fact questions, e.g. "
                             "0.2,0.5,0.3 (default 0.3,0.4,0.3)")


def zoo_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_options(parser)
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--only", nargs="+", metavar="NAME", choices=list(MODELS),
                       help="models to build (default: those the config names as zoo:NAME, with the models they "
                            f"start from); one or more of {', '.join(MODELS)}")
    which.add_argument("--all", action="store_true", help="build every model of the zoo")
    parser.add_argument("--rebuild", action="store_true", help="build again even when a cached build exists")
    parser.add_argument("--workers", type=int, metavar="N",
                        help="processes building at once, each model once the models it starts from are built "
                             "(default: 3, one per independent chain of fits, however many cores; 1: in order, "
                             "in this process)")


def index_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_options(parser)
    parser.add_argument("--force", action="store_true",
                        help="rebuild from scratch, re-embedding every part, even if the index matches the KB and config")
    parser.add_argument("--local", action="store_true",
                        help="embed in this process instead of a Ray Data pool of index.num_workers encoder workers")


def train_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_options(parser)
    parser.add_argument("--mode", choices=["local-reference", "distributed"],
                        help="training mode (default: train.mode from the config)")
    parser.add_argument("--steps", type=int, help="optimiser steps (default: train.steps)")
    parser.add_argument("--run-dir", help="run directory (default: train.run_dir)")
    resume = parser.add_mutually_exclusive_group()
    resume.add_argument("--resume", action="store_true", help="continue from the run directory's latest checkpoint")
    resume.add_argument("--resume-if-present", action="store_true",
                        help="continue from the latest checkpoint if there is one, else start fresh "
                             "(train.resume=auto: the same command can be retried after the driver died)")
    parser.add_argument("--device", default="cpu",
                        help="local-reference mode: torch device for every model, e.g. cuda (default: cpu)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar (e.g. in CI logs)")


def serve_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_options(parser)
    parser.add_argument("--checkpoint", required=True,
                        help="exported checkpoint of a training run (RUN_DIR/export); its config is the default")
    parser.add_argument("--host", help="address to listen on (default: serving.host)")
    parser.add_argument("--port", type=int, help="port to listen on (default: serving.port)")
    parser.add_argument("--address", help="Ray cluster address (default: ray.address, else $RAY_ADDRESS; "
                                          "with neither, a local Ray starts)")
    parser.add_argument("--name", default="mmrag", help="Serve application name (default: mmrag); another name "
                                                         "lets several pipelines share a cluster's Serve")


def plan_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_options(parser)
    parser.add_argument("--cluster-yaml", help="check against this Ray launcher config at max_workers")
    parser.add_argument("--address", help="check against the running cluster at this address (default: ray.address)")
    parser.add_argument("--runtime-env-json", action="store_true",
                        help="print the config's job runtime_env as JSON (working dir: the current one) and exit")


def eval_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_options(parser)
    parser.add_argument("--checkpoint", help="exported checkpoint (RUN_DIR/export); without it the 'trained' "
                                             "setting is left out")
    parser.add_argument("--split", default="test", choices=["train", "val", "test"],
                        help="question split of data.dir to evaluate (default: test)")
    parser.add_argument("--settings", default="no_retrieval,untrained,trained,oracle",
                        help="comma-separated settings to compare (default: all four)")
    parser.add_argument("--limit", type=int, help="evaluate only the first N questions of the split")
    parser.add_argument("--batch-size", type=int, default=16, help="questions per greedy batch (default: 16)")
    parser.add_argument("--out", help="output directory (default: RUN_DIR/eval_SPLIT beside the checkpoint, "
                                      "else train.run_dir/eval_SPLIT)")
    parser.add_argument("--local", action="store_true", help="run in this process instead of on Ray Data")
    parser.add_argument("--workers", type=int, default=1, help="Ray Data predictor replicas (default: 1)")
    parser.add_argument("--device", default="cpu", help="torch device of the pipelines (default: cpu)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar (e.g. in CI logs)")


def report_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", help="run directory written by `mmrag train`")
    parser.add_argument("--out", help="report directory (default: RUN_DIR/report)")
    parser.add_argument("--examples", type=int, default=5,
                        help="validation questions shown with their early and late queries (0: none; default: 5)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY.PATH=VALUE",
                        help="override a field of the run's saved config, e.g. --set data.dir=... (repeatable)")


def convert_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--format", required=True, choices=CONVERT_FORMATS, help="public format of --input")
    parser.add_argument("--input", required=True, help="file in that format (questions, or the KB dump)")
    parser.add_argument("--annotations", help="okvqa: the annotations JSON that goes with --input (required); "
                                              "infoseek: the question-type file (infoseek_val_qtype.jsonl), which "
                                              "the official score's per-type results need")
    parser.add_argument("--images", required=True, help="image root directory")
    parser.add_argument("--out", required=True, help="dataset directory to write (internal format)")
    parser.add_argument("--split", default="test", choices=SPLITS,
                        help="internal split the questions become (default: test)")
    parser.add_argument("--source-split", help="infoseek/evqa: keep only records whose data_split / "
                                               "encyclopedic_vqa_split equals this (e.g. val_unseen_entity); "
                                               "a name the file does not have is an error listing those it has")
    parser.add_argument("--on-missing-image", choices=["error", "skip"], default="error",
                        help="a record whose image file is missing: stop (default) or skip and count it")


def score_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--format", required=True, choices=SCORE_FORMATS, help="benchmark of the annotations")
    parser.add_argument("--annotations", required=True, nargs="+", metavar="FILE",
                        help="the benchmark's annotation file(s) as distributed (infoseek: the questions file and "
                             "the question-type file)")
    parser.add_argument("--predictions", required=True, metavar="FILE",
                        help="JSON lines: question_id, prediction (and choice for A-OKVQA multiple choice)")
    parser.add_argument("--per-example", metavar="OUT.jsonl", help="write each scored question's score(s) here")
    parser.add_argument("--okvqa-rules", choices=RULES, default="current",
                        help="OK-VQA only: `current` vqaEval.py (default, since its 2021-03-11 fix of answer "
                             "processing) or `pre-2021` (the older code: prediction always normalised, differing "
                             "answers by punctuation only), for comparing with papers that used it")
    parser.add_argument("--partial", action="store_true",
                        help="score only the annotated questions that have a prediction (default: every annotated "
                             "question must have one, and every prediction an annotated question)")


def env_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_options(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of lines")


ARGUMENTS = {
    "synth": synth_arguments, "zoo": zoo_arguments, "index": index_arguments, "train": train_arguments,
    "serve": serve_arguments, "plan": plan_arguments, "eval": eval_arguments, "report": report_arguments,
    "convert": convert_arguments, "score": score_arguments, "env": env_arguments,
}
"""Each command's options, by command name."""
