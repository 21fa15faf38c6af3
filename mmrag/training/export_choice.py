"""Which training step a run exports (`train.export`): the last one, or the one with the best held-out reward.

`best_val` guards against a decline after the peak (issue 22 item 6): every evaluation on the
val questions that beats all earlier ones (step 0, the untrained pipeline, included) replaces
RUN_DIR/export, so the export is the best-validated weights whatever training did after
them. The choice is made on val only; test figures of the export stay unbiased. A tie keeps
the earlier step: a later step must beat it by more than nothing to replace it.
"""

from __future__ import annotations

from mmrag.training.evaluate import CHOICE_FIELD, mean_name

EXPORT_METRIC = mean_name(CHOICE_FIELD)
"""The held-out metric `best_val` maximises: the config's reward, a choice on val like every other."""


def best_validation_step(evaluations: dict[int, dict[str, float]]) -> int:
    """The evaluated step with the highest held-out reward; among equal rewards, the earliest."""
    if not evaluations:
        raise ValueError("best_validation_step: no evaluations (train.export: best_val needs at least one)")
    return max(sorted(evaluations), key=lambda step: evaluations[step][EXPORT_METRIC])

