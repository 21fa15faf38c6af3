"""Reward backends: rule metrics, a tiny local HF classifier, the tiny LVLM judge, and RewardActor."""

from __future__ import annotations

import pytest
import torch

from mmrag.config import RewardConfig
from mmrag.models.reward import build_reward
from mmrag.models.reward_models import LvlmJudgeReward
from mmrag.training.stages import QuestionTable

QUESTIONS = ["When was this built?", "How tall is this?", "Who designed this?"]
ANSWERS = ["1889", "about 150 m", "Gustave Eiffel"]
REFERENCES = [["1889"], ["120 m"], ["Eiffel"]]


def test_rule_backend_matches_hand_computed_metrics():
    relaxed = build_reward(RewardConfig(backend="rule", metric="relaxed"), cache_dir="unused")
    # 1889 exact; 150 outside 120 +- 12; "gustave eiffel" != "eiffel".
    assert relaxed.score(QUESTIONS, ANSWERS, REFERENCES) == [1.0, 0.0, 0.0]
    f1 = build_reward(RewardConfig(backend="rule", metric="token_f1"), cache_dir="unused")
    # "gustave eiffel" vs "eiffel": P = 1/2, R = 1, F1 = 2/3; "about 150 m" vs "120 m": P = 1/3, R = 1/2, F1 = 0.4.
    assert f1.score(QUESTIONS, ANSWERS, REFERENCES) == pytest.approx([1.0, 0.4, 2 / 3])


def test_rule_backend_rejects_misaligned_inputs():
    scorer = build_reward(RewardConfig(backend="rule", metric="exact_match"), cache_dir="unused")
    with pytest.raises(ValueError, match=r"differ in length: \{'questions': 3, 'answers': 2, 'references': 3\}"):
        scorer.score(QUESTIONS, ANSWERS[:2], REFERENCES)


def test_model_backend_without_model_and_unknown_backend_are_named():
    with pytest.raises(ValueError, match=r"reward\.model"):
        build_reward(RewardConfig(backend="hf_classifier", model=""), cache_dir="unused")
    with pytest.raises(ValueError, match=r"reward\.model"):
        build_reward(RewardConfig(backend="lvlm_judge", model=""), cache_dir="unused")
    with pytest.raises(ValueError, match=r"reward\.backend"):
        build_reward(RewardConfig(backend="bleurt"), cache_dir="unused")


def _save_tiny_classifier(directory, num_labels: int) -> str:
    """A 1-layer BERT sequence classifier with a WordLevel tokenizer trained on the spot."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors, trainers
    from transformers import BertConfig, BertForSequenceClassification, PreTrainedTokenizerFast

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"]
    backend = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    corpus = [f"question: {q} answer: {a} reference: {' | '.join(r)}" for q, a, r in zip(QUESTIONS, ANSWERS, REFERENCES)]
    backend.train_from_iterator(corpus, trainer=trainers.WordLevelTrainer(special_tokens=specials))
    backend.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)]
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]", sep_token="[SEP]"
    )
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=backend.get_vocab_size(), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=32, max_position_embeddings=32, num_labels=num_labels, pad_token_id=0,
        initializer_range=0.5,  # wide weights, so that different inputs get clearly different scores
    )
    BertForSequenceClassification(config).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return str(directory)


@pytest.mark.parametrize("num_labels", [1, 2])
def test_hf_classifier_scores_one_example_at_a_time_equal_padded_batches(tmp_path, num_labels):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    path = _save_tiny_classifier(tmp_path / "clf", num_labels)
    scorer = build_reward(RewardConfig(backend="hf_classifier", model=path, batch_size=2), cache_dir=str(tmp_path))
    scores = scorer.score(QUESTIONS, ANSWERS, REFERENCES)

    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForSequenceClassification.from_pretrained(path).eval()
    expected = []
    for question, answer, refs in zip(QUESTIONS, ANSWERS, REFERENCES):
        text = f"question: {question} answer: {answer} reference: {' | '.join(refs)}"
        with torch.no_grad():
            logits = model(**tokenizer(text, return_tensors="pt")).logits[0]
        expected.append(torch.sigmoid(logits[0]).item() if num_labels == 1 else torch.softmax(logits, -1)[-1].item())
    assert len(scores) == 3
    assert all(0.0 <= s <= 1.0 for s in scores)
    assert scores == pytest.approx(expected, abs=1e-5)
    # the three examples are different inputs, so a working classifier tells them apart
    assert len({round(s, 6) for s in scores}) == 3


def test_hf_classifier_truncates_inputs_longer_than_its_positions(tmp_path):
    path = _save_tiny_classifier(tmp_path / "clf", 1)
    scorer = build_reward(RewardConfig(backend="hf_classifier", model=path), cache_dir=str(tmp_path))
    long_references = [["Eiffel"] * 100]  # ~200 tokens against 32 positions
    (score,) = scorer.score(QUESTIONS[:1], ANSWERS[:1], long_references)
    assert 0.0 <= score <= 1.0


def _reply_probability_by_hand(model, processor, prompt: str, path: tuple[int, ...]) -> float:
    """P(reply starts with `path`): product of next-token softmaxes along the path, one unpadded sequence."""
    from mmrag.models.lvlm import chat_inputs

    prompt_ids = chat_inputs(processor, [None], [prompt])["input_ids"]
    input_ids = torch.cat([prompt_ids, torch.tensor([path[:-1]], dtype=prompt_ids.dtype)], dim=1)
    with torch.no_grad():
        logits = model(input_ids=input_ids, attention_mask=torch.ones_like(input_ids)).logits[0]
    # the logits at position t predict token t + 1: the path's tokens are predicted from prompt end onwards
    path_logits = logits[prompt_ids.shape[1] - 1 :].float()
    return torch.softmax(path_logits, dim=-1)[torch.arange(len(path)), list(path)].prod().item()


def test_lvlm_judge_normalises_yes_against_no(zoo_dir):
    scorer = build_reward(
        RewardConfig(backend="lvlm_judge", model="zoo:tiny-lvlm", batch_size=2), cache_dir=zoo_dir
    )
    assert isinstance(scorer, LvlmJudgeReward)
    scores = scorer.score(QUESTIONS, ANSWERS, REFERENCES)
    assert len(scores) == 3
    assert all(0.0 < s < 1.0 for s in scores)
    # the tiny tokenizer splits some spellings ("yes" -> "y", "es"), so both scoring paths are exercised
    assert any(len(path) > 1 for path in scorer.yes_paths + scorer.no_paths)

    # Recompute P(yes) / (P(yes) + P(no)) by hand for two prompts alone (no padding, no batching):
    # the first was batched with a longer prompt (left-padded), the third was alone in its batch.
    prompts = scorer.prompts(QUESTIONS, ANSWERS, REFERENCES)
    for index in (0, 2):
        prompt, score = prompts[index], scores[index]
        p_yes = sum(_reply_probability_by_hand(scorer.model, scorer.processor, prompt, p) for p in scorer.yes_paths)
        p_no = sum(_reply_probability_by_hand(scorer.model, scorer.processor, prompt, p) for p in scorer.no_paths)
        assert score == pytest.approx(p_yes / (p_yes + p_no), abs=1e-4)


def test_reward_actor_scores_in_ray(ray_session):
    from mmrag.actors.reward import RewardActor

    cfg = RewardConfig(backend="rule", metric="exact_match")
    actor = ray_session.remote(RewardActor).options(num_gpus=cfg.num_gpus).remote(cfg, "unused")
    table = QuestionTable(image_sources=[None] * 3, questions=QUESTIONS, references=REFERENCES)
    scores = ray_session.get(actor.score.remote(table, [0, 1, 2], ["1889", "120 m", "Eiffel Tower"]))
    assert scores == [1.0, 1.0, 0.0]
    ray_session.kill(actor)
