"""Convert a public KB-VQA dataset or Wikipedia KB dump into the internal Parquet format.

  --format infoseek  --input infoseek_val.jsonl                          -> questions_SPLIT.parquet
  --format evqa      --input val.csv                                     -> questions_SPLIT.parquet
  --format okvqa     --input ..._questions.json --annotations ..._annotations.json
  --format aokvqa    --input aokvqa_v1p0_val.json            (also writes choices_SPLIT.jsonl)
  --format wiki-kb   --input kb.json|kb.jsonl|kb.parquet                 -> kb.parquet

Images are looked up under --images by file name (sub-folders included). A missing image
stops the conversion naming the record, unless --on-missing-image skip, which skips the
record (questions) or stores the document without an image (KB) and counts it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pipelines.options import run_main

FORMATS = ("infoseek", "evqa", "okvqa", "aokvqa", "wiki-kb")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--format", required=True, choices=FORMATS, help="public format of --input")
    parser.add_argument("--input", required=True, help="file in that format (questions, or the KB dump)")
    parser.add_argument("--annotations", help="okvqa: the annotations JSON that goes with --input")
    parser.add_argument("--images", required=True, help="image root directory")
    parser.add_argument("--out", required=True, help="dataset directory to write (internal format)")
    parser.add_argument("--split", default="test", choices=["train", "val", "test"],
                        help="internal split the questions become (default: test)")
    parser.add_argument("--source-split", help="infoseek/evqa: keep only records whose data_split / "
                                               "encyclopedic_vqa_split equals this")
    parser.add_argument("--on-missing-image", choices=["error", "skip"], default="error",
                        help="a record whose image file is missing: stop (default) or skip and count it")


def run(args: argparse.Namespace) -> int:
    from mmrag.data.loaders import ImageRoot, LoaderError

    if args.format == "okvqa" and not args.annotations:
        print("convert: --format okvqa needs --annotations (the mscoco_*_annotations.json file)", file=sys.stderr)
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


def _convert(args: argparse.Namespace, images, out: Path) -> tuple[Path, int]:
    from mmrag.data.dataset import write_kb, write_questions
    from mmrag.data.loaders.aokvqa import load_aokvqa, write_choices
    from mmrag.data.loaders.evqa import load_evqa
    from mmrag.data.loaders.infoseek import load_infoseek
    from mmrag.data.loaders.okvqa import load_okvqa
    from mmrag.data.loaders.wiki_kb import load_wiki_kb

    if args.format == "wiki-kb":
        docs = load_wiki_kb(args.input, images)
        return write_kb(docs, out), len(docs)
    if args.format == "infoseek":
        questions = load_infoseek(args.input, images, args.source_split)
    elif args.format == "evqa":
        questions = load_evqa(args.input, images, args.source_split)
    elif args.format == "okvqa":
        questions = load_okvqa(args.input, args.annotations, images)
    else:
        questions, choices = load_aokvqa(args.input, images)
        write_choices(choices, out, args.split)
    return write_questions(questions, out, args.split), len(questions)


if __name__ == "__main__":
    run_main(sys.modules[__name__])
