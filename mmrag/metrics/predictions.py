"""A predictions file for `mmrag score`: JSON lines {"question_id": ..., "prediction": ...[, "choice": ...]}.

`question_id` is the benchmark's own id (a number or a string; OK-VQA's integers may be
given either way); `prediction` is the answer text; `choice`, for A-OKVQA multiple choice,
is the chosen option's index (or its text). Other fields are ignored. Every problem names
the file and line.
"""

from __future__ import annotations

import json
from pathlib import Path

from mmrag.metrics.scoring import Prediction, ScoringError

def read_predictions(path: str | Path) -> dict[str, Prediction]:
    """Question id -> prediction, in file order; a question id given twice is an error."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ScoringError(f"{path}: cannot read the predictions file ({exc})") from None
    predictions: dict[str, Prediction] = {}
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        prediction = _prediction(line, f"{path}:{number}")
        if prediction.question_id in predictions:
            raise ScoringError(f"{prediction.where}: question_id {prediction.question_id!r} already predicted at "
                               f"{predictions[prediction.question_id].where}")
        predictions[prediction.question_id] = prediction
    if not predictions:
        raise ScoringError(f"{path}: no predictions (expected one JSON object per line with question_id and "
                           "prediction)")
    return predictions


def _prediction(line: str, where: str) -> Prediction:
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ScoringError(f"{where}: not a JSON record ({exc.msg})") from None
    if not isinstance(record, dict):
        raise ScoringError(f"{where}: expected a JSON object, got {type(record).__name__}")
    question_id = record.get("question_id")
    if isinstance(question_id, bool) or not isinstance(question_id, (str, int)) or question_id == "":
        raise ScoringError(f"{where}: field 'question_id': expected the question's id (string or integer), "
                           f"got {question_id!r}")
    text = record.get("prediction")
    if text is not None and not isinstance(text, str):
        raise ScoringError(f"{where}: field 'prediction': expected the answer as a string, got {text!r}")
    choice = record.get("choice")
    if choice is not None and (isinstance(choice, bool) or not isinstance(choice, (int, str))):
        raise ScoringError(f"{where}: field 'choice': expected an option index or an option's text, got {choice!r}")
    return Prediction(str(question_id), text, choice, where)
