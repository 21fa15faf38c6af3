"""Public-format loaders: hand-written fixtures in each real format -> internal questions and KB docs."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from PIL import Image

from mmrag.data.dataset import load_kb, load_questions
from mmrag.data.loaders import ImageRoot, LoaderError
from mmrag.data.loaders.aokvqa import load_aokvqa
from mmrag.data.loaders.evqa import load_evqa, split_answer
from mmrag.data.loaders.infoseek import load_infoseek, plain_number
from mmrag.data.loaders.okvqa import load_okvqa
from mmrag.data.loaders.wiki_kb import load_wiki_kb
from mmrag.metrics.answers import relaxed_accuracy
from mmrag.metrics.official import read_references
from mmrag.metrics.okvqa import vqa_accuracy
from mmrag.pipelines.cli import main

FIXTURES = Path(__file__).parent / "fixtures"
IMAGE_FILES = [
    "oven_00000001.jpg", "oven_00000002.jpg", "oven_00000003.jpg", "oven_00000004.jpg",  # InfoSeek (OVEN ids)
    "a1b2c3d4e5f60718.jpg", "9911.jpg", "9912.jpg", "f00dbeef00000001.jpg",  # E-VQA
    "val2014/COCO_val2014_000000297147.jpg", "000000393225.jpg",  # OK-VQA: both COCO namings, one nested
    "000000461751.jpg", "000000081721.jpg", "000000299207.jpg",  # A-OKVQA (COCO 2017)
    "Agave_americana.jpg", "Agave_flower.jpg", "se/front.png",  # KB dump images
]


@pytest.fixture()
def image_dir(tmp_path) -> Path:
    root = tmp_path / "images"
    for index, name in enumerate(IMAGE_FILES):
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (8, 8), (index * 19, 0, 0)).save(path)
    return root


def edited_copy(source: Path, tmp_path: Path, old: str, new: str) -> Path:
    target = tmp_path / source.name
    text = source.read_text()
    assert old in text
    target.write_text(text.replace(old, new, 1))
    return target


def test_infoseek_answers_ranges_and_split_filter(image_dir):
    path = FIXTURES / "infoseek/infoseek_val.jsonl"
    questions, references = load_infoseek(path, ImageRoot(image_dir))
    assert [q.id for q in questions] == [f"infoseek_val_0000{i}" for i in range(4)]
    assert questions[0].answers == ["Lyon", "Lyons"] and questions[0].entity_id == "Q2345"
    assert questions[1].answers == ["291.6 - 356.4"]
    assert relaxed_accuracy("about 330 metres", questions[1].answers) == 1.0
    assert relaxed_accuracy("400 m", questions[1].answers) == 0.0
    assert questions[2].answers == ["1937"] and questions[2].image.size == (8, 8)
    assert [r.data_split for r in references] == ["val_unseen_question"] * 2 + ["val_unseen_entity"] * 2
    assert references[1].answer_eval == [{"wikidata": 324.0, "range": [291.6, 356.4]}]
    assert [q.id for q in load_infoseek(path, ImageRoot(image_dir), source_split="val_unseen_entity")[0]] == [
        "infoseek_val_00002", "infoseek_val_00003"]


def test_infoseek_range_of_a_million_or_more_is_written_in_plain_decimals(image_dir):
    # "%g" wrote 1111110.3 as "1.11111e+06", which the training reward cannot read back.
    questions, _ = load_infoseek(FIXTURES / "infoseek/infoseek_val.jsonl", ImageRoot(image_dir))
    assert questions[3].answers == ["1111110.3 - 1358023.7"]
    assert relaxed_accuracy("1,250,000", questions[3].answers) == 1.0
    assert plain_number(1e16) == "10000000000000000" and plain_number(2.0) == "2" and plain_number(0.5) == "0.5"


def test_infoseek_question_types_come_from_the_question_type_file(image_dir):
    _, references = load_infoseek(FIXTURES / "infoseek/infoseek_val.jsonl", ImageRoot(image_dir),
                                  question_types_path=FIXTURES / "infoseek/infoseek_val_qtype.jsonl")
    assert [r.question_type for r in references] == ["String", "Numerical", "Time", "Numerical"]
    _, untyped = load_infoseek(FIXTURES / "infoseek/infoseek_val.jsonl", ImageRoot(image_dir))
    assert [r.question_type for r in untyped] == [None] * 4 and [r.numerical for r in untyped] == [
        False, True, False, True]


def test_infoseek_unknown_source_split_lists_the_valid_ones(image_dir):
    with pytest.raises(LoaderError, match="source split 'val' is not in this file; its data_split values are: "
                                          "val_unseen_entity, val_unseen_question"):
        load_infoseek(FIXTURES / "infoseek/infoseek_val.jsonl", ImageRoot(image_dir), source_split="val")


def test_infoseek_malformed_line_is_named(image_dir, tmp_path):
    bad = edited_copy(FIXTURES / "infoseek/infoseek_val.jsonl", tmp_path, '"question": "What is the height', '"q": "')
    with pytest.raises(LoaderError, match=rf"{bad}:2: missing field 'question'"):
        load_infoseek(bad, ImageRoot(image_dir))
    broken = edited_copy(FIXTURES / "infoseek/infoseek_val.jsonl", tmp_path,
                         '"data_split": "val_unseen_entity", "entity_id": "Q44440"}', '"data_split": ')
    with pytest.raises(LoaderError, match=rf"{broken}:4: not a JSON record"):
        load_infoseek(broken, ImageRoot(image_dir))


def test_evqa_every_image_is_a_question_with_alternatives_parts_and_gold_sections(image_dir):
    questions, references = load_evqa(FIXTURES / "evqa/val.csv", ImageRoot(image_dir))
    assert [q.id for q in questions] == ["evqa-val-0-a1b2c3d4e5f60718", "evqa-val-1-9911", "evqa-val-1-9912",
                                         "evqa-train-2-f00dbeef00000001"]
    assert [q.answers for q in questions] == [["1.5 m", "150 cm"], ["oxen, horses"], ["oxen, horses"], ["Lisbon"]]
    assert questions[0].gold_doc_ids == ["https://en.wikipedia.org/wiki/Agave#1"]
    assert questions[1].entity_id == "https://en.wikipedia.org/wiki/Cart" and questions[3].gold_doc_ids == []
    assert [(r.answer, r.question_type) for r in references[1:3]] == [("oxen&&horses", "multi_answer")] * 2
    assert [q.id for q in load_evqa(FIXTURES / "evqa/val.csv", ImageRoot(image_dir), "train")[0]] == [
        "evqa-train-2-f00dbeef00000001"]
    assert split_answer("a|b&&c") == ["a", "b, c"]


def test_evqa_unknown_source_split_lists_the_valid_ones(image_dir):
    with pytest.raises(LoaderError, match="source split 'validation' is not in this file; its "
                                          "encyclopedic_vqa_split values are: train, val"):
        load_evqa(FIXTURES / "evqa/val.csv", ImageRoot(image_dir), "validation")


def test_evqa_missing_image_errors_or_is_skipped_and_counted(image_dir):
    (image_dir / "9911.jpg").unlink()
    path = FIXTURES / "evqa/val.csv"
    with pytest.raises(LoaderError, match=rf"{path}:3 \(image 9911\): image not found .*9911.jpg"):
        load_evqa(path, ImageRoot(image_dir))
    images = ImageRoot(image_dir, on_missing="skip")
    assert len(load_evqa(path, images)[0]) == 3 and images.missing == [f"{path}:3 (image 9911)"]


def test_evqa_short_row_is_named(image_dir, tmp_path):
    bad = edited_copy(FIXTURES / "evqa/val.csv", tmp_path, ",Lisbon,f00dbeef00000001", ",Lisbon")
    with pytest.raises(LoaderError, match=rf"{bad}:4: expected 14 fields"):
        load_evqa(bad, ImageRoot(image_dir))


def test_okvqa_ten_annotator_answers(image_dir):
    folder = FIXTURES / "okvqa"
    questions, references = load_okvqa(folder / "OpenEnded_mscoco_val2014_questions.json",
                                       folder / "mscoco_val2014_annotations.json", ImageRoot(image_dir))
    assert [q.id for q in questions] == ["2971475", "3932255"]
    assert len(questions[0].answers) == 10
    # 2 of 10 annotators said "motocross": leave-one-out mean (2 * 1/3 + 8 * 2/3) / 10 = 0.6.
    assert vqa_accuracy("motocross", questions[0].answers) == pytest.approx(0.6)
    assert vqa_accuracy("race", questions[0].answers) == 1.0
    assert [(r.question_type, r.answer_type) for r in references] == [("eight", "other"), ("four", "other")]
    assert len(set(references[0].annotators)) == 10  # answer_id differs between the records


def test_okvqa_unannotated_question_is_named(image_dir, tmp_path):
    folder = FIXTURES / "okvqa"
    annotations = edited_copy(folder / "mscoco_val2014_annotations.json", tmp_path, '"question_id": 3932255',
                              '"question_id": 1')
    questions = folder / "OpenEnded_mscoco_val2014_questions.json"
    with pytest.raises(LoaderError, match=rf"{questions}: record 1 \(question_id 3932255\): question_id 3932255 "
                                          "has no entry"):
        load_okvqa(questions, annotations, ImageRoot(image_dir))


def test_aokvqa_direct_answers_choices_and_difficulty(image_dir):
    questions, references = load_aokvqa(FIXTURES / "aokvqa/aokvqa_v1p0_val.json", ImageRoot(image_dir))
    assert [q.id for q in questions] == ["22jbM6gDxdaMaunuzgrsBB", "2SdfXCaSgH5UrmeqpVxxa9", "22MexNkBPpdZGX6sxbxVBH"]
    assert questions[1].answers.count("thirty") == 8 and len(questions[1].answers) == 10
    assert references[1].choices == ["one", "ten", "nine", "thirty"] and references[0].correct_choice_idx == 3
    assert [r.difficult_direct_answer for r in references] == [False, False, True]


def test_json_syntax_error_names_the_line_and_column(tmp_path, image_dir):
    bad = tmp_path / "aokvqa_v1p0_val.json"
    bad.write_text('[\n  {"question_id": "x",\n   "choices": [1 2]}\n]')
    with pytest.raises(LoaderError, match=rf"{bad}: not valid JSON \(line 3, column 18: Expecting ','"):
        load_aokvqa(bad, ImageRoot(image_dir))


def test_aokvqa_bad_choice_index_is_named(image_dir, tmp_path):
    second_record = '"correct_choice_idx": {},\n    "direct_answers": ["thirty"'
    bad = edited_copy(FIXTURES / "aokvqa/aokvqa_v1p0_val.json", tmp_path, second_record.format(3),
                      second_record.format(4))
    with pytest.raises(LoaderError, match=rf"{bad}: record 1 \(question_id '2SdfXCaSgH5UrmeqpVxxa9'\): field "
                                          "'correct_choice_idx': 4 is not an index"):
        load_aokvqa(bad, ImageRoot(image_dir))


def test_wiki_kb_sections_become_docs_with_images(image_dir):
    docs = load_wiki_kb(FIXTURES / "wiki_kb/encyclopedic_kb_wiki.json", ImageRoot(image_dir))
    wiki = "https://en.wikipedia.org/wiki/"
    assert [d.doc_id for d in docs] == [wiki + "Agave#0", wiki + "Agave#1", wiki + "Cart#0"]
    assert [d.image is not None for d in docs] == [True, True, False]
    assert docs[1].title == "Agave — Description" and docs[1].entity_id == "https://en.wikipedia.org/wiki/Agave"
    jsonl = load_wiki_kb(FIXTURES / "wiki_kb/articles.jsonl", ImageRoot(image_dir))
    assert [(d.doc_id, d.image is not None) for d in jsonl] == [("Se_Cathedral#0", True), ("Se_Cathedral#1", False)]


def test_wiki_kb_missing_image_and_bad_article(image_dir, tmp_path):
    path = FIXTURES / "wiki_kb/encyclopedic_kb_wiki.json"
    (image_dir / "Agave_flower.jpg").unlink()
    with pytest.raises(LoaderError, match=rf"{path}: article 'https://en.wikipedia.org/wiki/Agave' "
                                          r"\(image '.*Agave_flower.jpg'\): image not found"):
        load_wiki_kb(path, ImageRoot(image_dir))
    images = ImageRoot(image_dir, on_missing="skip")
    assert [d.image is not None for d in load_wiki_kb(path, images)] == [True, False, False]
    assert len(images.missing) == 1
    bad = edited_copy(path, tmp_path, '"title": "Cart"', '"name": "Cart"')
    with pytest.raises(LoaderError, match=rf"{bad}: article 'https://en.wikipedia.org/wiki/Cart': missing field "
                                          "'title'"):
        load_wiki_kb(bad, ImageRoot(image_dir, on_missing="skip"))


def test_convert_command_writes_the_internal_format_and_the_official_references(image_dir, tmp_path):
    out = tmp_path / "dataset"
    assert main(["convert", "--format", "wiki-kb", "--input", str(FIXTURES / "wiki_kb/encyclopedic_kb_wiki.json"),
                 "--images", str(image_dir), "--out", str(out)]) == 0
    assert main(["convert", "--format", "evqa", "--input", str(FIXTURES / "evqa/val.csv"), "--images", str(image_dir),
                 "--out", str(out), "--split", "val", "--source-split", "val"]) == 0
    docs, questions = load_kb(out), load_questions(out, "val")
    assert len(docs) == 3 and len(questions) == 3
    assert set(questions[0].gold_doc_ids) <= {d.doc_id for d in docs}
    benchmark, references = read_references(out, "val")
    assert benchmark.name == "evqa" and list(references) == [q.id for q in questions]
    shutil.rmtree(image_dir / "val2014")
    assert main(["convert", "--format", "okvqa", "--input",
                 str(FIXTURES / "okvqa/OpenEnded_mscoco_val2014_questions.json"), "--annotations",
                 str(FIXTURES / "okvqa/mscoco_val2014_annotations.json"), "--images", str(image_dir),
                 "--out", str(out), "--on-missing-image", "skip"]) == 0
    assert [q.id for q in load_questions(out, "test")] == ["3932255"]
    assert list(read_references(out, "test")[1]) == ["3932255"]
    assert main(["convert", "--format", "okvqa", "--input", str(FIXTURES / "okvqa/mscoco_val2014_annotations.json"),
                 "--images", str(image_dir), "--out", str(out)]) == 2


def test_convert_keeps_infoseek_types_and_split_labels_and_aokvqa_difficulty(image_dir, tmp_path, capsys):
    out = tmp_path / "dataset"
    assert main(["convert", "--format", "infoseek", "--input", str(FIXTURES / "infoseek/infoseek_val.jsonl"),
                 "--annotations", str(FIXTURES / "infoseek/infoseek_val_qtype.jsonl"), "--images", str(image_dir),
                 "--out", str(out), "--split", "val"]) == 0
    references = read_references(out, "val")[1]
    assert [(r.question_type, r.data_split) for r in references.values()] == [
        ("String", "val_unseen_question"), ("Numerical", "val_unseen_question"), ("Time", "val_unseen_entity"),
        ("Numerical", "val_unseen_entity")]
    assert main(["convert", "--format", "aokvqa", "--input", str(FIXTURES / "aokvqa/aokvqa_v1p0_val.json"),
                 "--images", str(image_dir), "--out", str(out)]) == 0
    assert [r.difficult_direct_answer for r in read_references(out, "test")[1].values()] == [False, False, True]
    capsys.readouterr()
    assert main(["convert", "--format", "infoseek", "--input", str(FIXTURES / "infoseek/infoseek_val.jsonl"),
                 "--images", str(image_dir), "--out", str(out), "--source-split", "val"]) == 2
    assert "its data_split values are: val_unseen_entity, val_unseen_question" in capsys.readouterr().err
