"""Convert a public KB-VQA dataset or Wikipedia KB dump into the internal Parquet format.

  --format infoseek  --input infoseek_val.jsonl [--annotations infoseek_val_qtype.jsonl]
  --format evqa      --input val.csv
  --format okvqa     --input ..._questions.json --annotations ..._annotations.json
  --format aokvqa    --input aokvqa_v1p0_val.json
  --format wiki-kb   --input kb.json|kb.jsonl|kb.parquet                 -> kb.parquet

Questions go to OUT/questions_SPLIT.parquet, and what the benchmark's official score
needs of them (question types, split labels, A-OKVQA's choices and difficult_direct_answer,
raw answers) to OUT/references_SPLIT.jsonl, which `mmrag eval` scores with. E-VQA gives
one question per (question, image): every image of a row, not only the first.

Images are looked up under --images by file name (sub-folders included). A missing image
stops the conversion naming the record, unless --on-missing-image skip, which skips the
record (questions) or stores the document without an image (KB) and counts it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from mmrag.data.dataset import write_kb, write_questions
from mmrag.data.loaders import ImageRoot, LoaderError
from mmrag.data.loaders.aokvqa import load_aokvqa
from mmrag.data.loaders.evqa import load_evqa
from mmrag.data.loaders.infoseek import load_infoseek
from mmrag.data.loaders.okvqa import load_okvqa
from mmrag.data.loaders.wiki_kb import load_wiki_kb
from mmrag.metrics.official import write_references
from mmrag.pipelines.options import run_main

SOURCE_SPLIT_FORMATS = ("infoseek", "evqa")



def run(args: argparse.Namespace) -> int:
    problem = _argument_problem(args)
    if problem:
        print(f"convert: {problem}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    try:
        images = ImageRoot(Path(args.images), args.on_missing_image)
        written, count = _convert(args, images, out)
    except LoaderError as exc:
        print(f"convert: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {written} ({count} {'documents' if args.format == 'wiki-kb' else 'questions'})")
    if images.missing:
        print(f"skipped {len(images.missing)} missing images, first: {images.missing[0]}")
    return 0


def _argument_problem(args: argparse.Namespace) -> str | None:
    if args.format == "okvqa" and not args.annotations:
        return "--format okvqa needs --annotations (the mscoco_*_annotations.json file)"
    if args.annotations and args.format not in ("okvqa", "infoseek"):
        return f"--annotations is for okvqa and infoseek, not {args.format}"
    if args.source_split is not None and args.format not in SOURCE_SPLIT_FORMATS:
        return f"--source-split is for {' and '.join(SOURCE_SPLIT_FORMATS)}, not {args.format}"
    return None


def _convert(args: argparse.Namespace, images: ImageRoot, out: Path) -> tuple[Path, int]:
    if args.format == "wiki-kb":
        docs = load_wiki_kb(args.input, images)
        return write_kb(docs, out), len(docs)
    if args.format == "infoseek":
        questions, references = load_infoseek(args.input, images, args.source_split, args.annotations)
    elif args.format == "evqa":
        questions, references = load_evqa(args.input, images, args.source_split)
    elif args.format == "okvqa":
        questions, references = load_okvqa(args.input, args.annotations, images)
    else:
        questions, references = load_aokvqa(args.input, images)
    write_references(args.format, references, out, args.split)
    return write_questions(questions, out, args.split), len(questions)


if __name__ == "__main__":
    run_main(sys.modules[__name__])
