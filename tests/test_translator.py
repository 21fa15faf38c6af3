"""LVLM plumbing and the query translator on zoo:tiny-lvlm (random weights): log-prob
consistency between sampling and recomputation (a forced end of turn scoring nothing),
greedy determinism, LoRA / full-model references (also when continuing from an export),
weight sync, export round trip, and the Ray replica."""

from __future__ import annotations

import dataclasses
import json
import shutil
import warnings

import pytest
import torch
from PIL import Image

from mmrag.config import LoraConfig, TranslatorConfig
from mmrag.models import lvlm
from mmrag.models.translator import QueryTemplate, QueryTranslator
from mmrag.models.visual_reader import seen_description
from mmrag.training.stages import QuestionTable

QUESTIONS = ["When was this built?", "Who was the architect of this?"]


@pytest.fixture(scope="module")
def images() -> list[Image.Image]:
    return [Image.new("RGB", (64, 64), (200, 30, 30)), Image.new("RGB", (48, 64), (20, 40, 160))]


@pytest.fixture(scope="module")
def tiny_lvlm_path(zoo_dir) -> str:
    from mmrag.zoo import resolve

    return resolve("zoo:tiny-lvlm", zoo_dir)


def make_config(model: str, lora: bool = False) -> TranslatorConfig:
    """The LVLM's response is the query (`{response}`), so hand-written queries score as responses."""
    return TranslatorConfig(
        model=model, max_new_tokens=8, num_samples=3, lora=LoraConfig(enabled=lora, rank=4, alpha=8),
        query_template="{response}",
    )


@pytest.fixture(scope="module")
def full_translator(tiny_lvlm_path, zoo_dir) -> QueryTranslator:
    return QueryTranslator.from_config(make_config(tiny_lvlm_path), zoo_dir)


def moved_state(translator: QueryTranslator, seed: int, scale: float = 0.3) -> dict[str, torch.Tensor]:
    """The translator's trainable weights, each moved by seeded noise (LoRA's zero B matrices included)."""
    generator = torch.Generator().manual_seed(seed)
    return {name: tensor + scale * torch.randn(tensor.shape, generator=generator)
            for name, tensor in translator.trainable_state_dict().items()}


def one_policy_step(translator: QueryTranslator, images, queries: list[str]) -> None:
    """One Adam step raising the policy log-prob of `queries` (a stand-in for a DPO update)."""
    optimizer = torch.optim.Adam(translator.trainable_parameters(), lr=1e-2)
    loss = -translator.logprobs(images, QUESTIONS, queries).sum()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_sampled_token_logprobs_equal_recomputation(full_translator, images, temperature):
    torch.manual_seed(1)
    prompts = full_translator.prompts(QUESTIONS)
    sampled = lvlm.generate_token_ids(
        full_translator.model, full_translator.processor, images, prompts, 8, True, temperature
    )
    assert all(ids[-1] == lvlm.end_of_turn_id(full_translator.processor) for ids in sampled.token_ids)
    with torch.no_grad():
        recomputed = lvlm.sequence_logprobs(
            full_translator.model, full_translator.processor, images, prompts, sampled.token_ids, temperature, 8
        )
    assert torch.allclose(sampled.logprobs, recomputed, atol=1e-4), (sampled.logprobs, recomputed)
    # Sampling-time log-probs really are temperature-scaled: at T=1 they differ.
    if temperature != 1.0:
        with torch.no_grad():
            at_one = lvlm.sequence_logprobs(
                full_translator.model, full_translator.processor, images, prompts, sampled.token_ids, 1.0, 8
            )
        assert (at_one - recomputed).abs().min() > 1e-2


def test_a_query_cut_at_max_new_tokens_scores_without_its_forced_end_of_turn(full_translator, images):
    """The end of turn forced at the last step has probability 1 under the sampling process."""
    model, processor = full_translator.model, full_translator.processor
    prompts = full_translator.prompts(QUESTIONS) * 3
    torch.manual_seed(5)
    sampled = lvlm.generate_token_ids(model, processor, images * 3, prompts, 3, True)
    cut = [len(ids) == 3 for ids in sampled.token_ids]
    assert any(cut), "the random tiny model should run into max_new_tokens = 3"
    with torch.no_grad():
        # Scored independently, token by token as given: a cut query without its forced last token.
        scored = [ids[:-1] if was_cut else ids for ids, was_cut in zip(sampled.token_ids, cut)]
        expected = lvlm.sequence_logprobs(model, processor, images * 3, prompts, scored)
        with_eos = lvlm.sequence_logprobs(model, processor, images * 3, prompts, sampled.token_ids)
    assert torch.allclose(sampled.logprobs, expected, atol=1e-4), (sampled.logprobs, expected)
    assert all((with_eos[i] - expected[i]).abs() > 1e-3 for i in range(len(cut)) if cut[i])
    # The translator scores its sampled queries the same way, for DPO and its reference alike.
    translator = QueryTranslator(model, processor, dataclasses.replace(full_translator.cfg, max_new_tokens=3))
    samples = translator.sample(images, QUESTIONS, n=3)
    queries = [s.text for row in samples for s in row]
    flat_images, flat_questions = [i for i in images for _ in range(3)], [q for q in QUESTIONS for _ in range(3)]
    # A sample reports its log-prob under the distribution it was drawn from: at the sampling temperature.
    temperature = translator.cfg.temperature
    with torch.no_grad():
        recomputed = translator.logprobs(flat_images, flat_questions, queries, temperature)
    reference = translator.reference_logprobs(flat_images, flat_questions, queries, temperature)
    reported = torch.tensor([s.logprob for row in samples for s in row])
    assert torch.allclose(reported, recomputed, atol=1e-4) and torch.allclose(reference, recomputed, atol=1e-5)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_sample_returns_n_queries_whose_logprobs_match_policy_logprobs(full_translator, images, temperature):
    torch.manual_seed(2)
    samples = full_translator.sample(images, QUESTIONS, n=3, temperature=temperature, max_new_tokens=8)
    assert [len(row) for row in samples] == [3, 3]
    flat_images = [image for image in images for _ in range(3)]
    flat_questions = [q for q in QUESTIONS for _ in range(3)]
    queries = [s.text for row in samples for s in row]
    reported = torch.tensor([s.logprob for row in samples for s in row])
    assert torch.isfinite(reported).all() and (reported < 0).all()
    with torch.no_grad():
        recomputed = full_translator.logprobs(flat_images, flat_questions, queries, temperature=temperature)
    assert torch.allclose(reported, recomputed, atol=1e-3), (reported, recomputed)


def test_checkpoint_sampling_defaults_do_not_distort_logprobs(tiny_lvlm_path, zoo_dir, images, tmp_path):
    """Qwen2-VL-Instruct ships top_k=1, top_p=0.001, repetition_penalty=1.05: they must not apply."""
    checkpoint = tmp_path / "qwen-like"
    shutil.copytree(tiny_lvlm_path, checkpoint)
    shipped = json.loads((checkpoint / "generation_config.json").read_text())
    shipped.update(do_sample=True, temperature=0.1, top_k=1, top_p=0.001, repetition_penalty=1.05)
    (checkpoint / "generation_config.json").write_text(json.dumps(shipped))
    translator = QueryTranslator.from_config(make_config(str(checkpoint)), zoo_dir)
    torch.manual_seed(4)
    samples = translator.sample(images[:1], QUESTIONS[:1], n=4, temperature=1.0)[0]
    assert len({s.text for s in samples}) > 1  # top_k=1 would make all four identical
    with torch.no_grad():
        recomputed = translator.logprobs(images[:1] * 4, QUESTIONS[:1] * 4, [s.text for s in samples])
    assert torch.allclose(torch.tensor([s.logprob for s in samples]), recomputed, atol=1e-3)


def test_greedy_is_deterministic(full_translator, images):
    first = full_translator.greedy(images, QUESTIONS)
    second = full_translator.greedy(images[::-1], QUESTIONS[::-1])[::-1]
    assert first == second and len(first) == 2


def test_lora_trains_only_adapter_and_starts_at_reference(tiny_lvlm_path, zoo_dir, images):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        translator = QueryTranslator.from_config(make_config(tiny_lvlm_path, lora=True), zoo_dir)
    assert [str(w.message) for w in caught if issubclass(w.category, FutureWarning)] == []  # peft's, once
    trainable = translator.trainable_state_dict()
    total = sum(p.numel() for p in translator.model.parameters())
    assert trainable and all("lora_" in name for name in trainable)
    assert 0 < sum(t.numel() for t in trainable.values()) < 0.05 * total
    queries = ["red striped circle", "blue square on navy"]
    with torch.no_grad():
        before = translator.logprobs(images, QUESTIONS, queries)
    reference = translator.reference_logprobs(images, QUESTIONS, queries)
    assert torch.allclose(before, reference, atol=1e-5)
    one_policy_step(translator, images, queries)
    with torch.no_grad():
        after = translator.logprobs(images, QUESTIONS, queries)
    assert (after - before).min() > 1e-3  # the step raised both log-probs
    assert torch.allclose(translator.reference_logprobs(images, QUESTIONS, queries), reference, atol=1e-5)


def test_full_model_reference_copy_is_frozen(tiny_lvlm_path, zoo_dir, images):
    translator = QueryTranslator.from_config(make_config(tiny_lvlm_path), zoo_dir)
    assert not any(p.requires_grad for p in translator._reference.parameters())
    outside_vision = [p for name, p in translator.model.named_parameters() if ".visual." not in name]
    assert len(translator.trainable_parameters()) == len(outside_vision)
    queries = ["dotted star", "plain heart on teal"]
    reference = translator.reference_logprobs(images, QUESTIONS, queries)
    assert torch.allclose(translator.logprobs(images, QUESTIONS, queries).detach(), reference, atol=1e-5)
    one_policy_step(translator, images, queries)
    with torch.no_grad():
        after = translator.logprobs(images, QUESTIONS, queries)
    assert (after - reference).min() > 1e-3
    assert torch.equal(translator.reference_logprobs(images, QUESTIONS, queries), reference)


def test_trainable_state_dict_syncs_a_replica(tiny_lvlm_path, zoo_dir, images):
    trained = QueryTranslator.from_config(make_config(tiny_lvlm_path, lora=True), zoo_dir)
    replica = QueryTranslator.from_config(make_config(tiny_lvlm_path, lora=True), zoo_dir)
    queries = ["green cross", "white hexagon on pink"]
    state = moved_state(trained, seed=0, scale=0.05)
    trained.load_trainable_state_dict(state)
    with torch.no_grad():
        before = replica.logprobs(images, QUESTIONS, queries)
        replica.load_trainable_state_dict(trained.trainable_state_dict())
        after = replica.logprobs(images, QUESTIONS, queries)
        assert torch.equal(after, trained.logprobs(images, QUESTIONS, queries))
    assert (after - before).abs().max() > 1e-3  # the weights it took were not the ones it had
    with pytest.raises(KeyError, match="missing keys"):
        replica.load_trainable_state_dict(dict(list(state.items())[1:]))


@pytest.mark.parametrize("continue_with_lora", [True, False])
def test_continuing_from_a_lora_export_keeps_that_export_as_the_dpo_reference(
    tiny_lvlm_path, zoo_dir, images, tmp_path, continue_with_lora
):
    trained = QueryTranslator.from_config(make_config(tiny_lvlm_path, lora=True), zoo_dir)
    trained.load_trainable_state_dict(moved_state(trained, seed=1))
    export_dir = trained.export(str(tmp_path / "export"))
    continued = QueryTranslator.from_config(make_config(export_dir, lora=continue_with_lora), zoo_dir)
    queries = ["red striped circle", "blue square on navy"]
    with torch.no_grad():
        start = continued.logprobs(images, QUESTIONS, queries)
        bare_base = QueryTranslator.from_config(make_config(tiny_lvlm_path), zoo_dir).logprobs(images, QUESTIONS, queries)
    assert (start - bare_base).abs().max() > 1e-2  # the export is not the bare base model
    reference = continued.reference_logprobs(images, QUESTIONS, queries)
    assert torch.allclose(reference, start, atol=1e-4)
    one_policy_step(continued, images, queries)
    assert torch.equal(continued.reference_logprobs(images, QUESTIONS, queries), reference)


@pytest.mark.parametrize("lora", [False, True])
def test_export_reload_gives_identical_greedy_queries(tiny_lvlm_path, zoo_dir, images, tmp_path, lora):
    cfg = make_config(tiny_lvlm_path, lora=lora)
    translator = QueryTranslator.from_config(cfg, zoo_dir)
    one_policy_step(translator, images, ["yellow plain diamond", "black checkered star"])
    export_dir = translator.export(str(tmp_path / "export"))
    reloaded = QueryTranslator.from_config(dataclasses.replace(cfg, model=export_dir), zoo_dir)
    assert reloaded.greedy(images, QUESTIONS) == translator.greedy(images, QUESTIONS)
    queries = ["red dotted heart", "navy"]
    with torch.no_grad():
        assert torch.allclose(
            reloaded.logprobs(images, QUESTIONS, queries), translator.logprobs(images, QUESTIONS, queries), atol=1e-5
        )


def test_default_query_is_what_the_reader_sees_then_the_response_then_the_question_and_only_the_response_is_scored(
        tiny_lvlm_path, zoo_dir, images):
    translator = QueryTranslator.from_config(dataclasses.replace(make_config(tiny_lvlm_path),
                                                                 query_template=TranslatorConfig().query_template),
                                             zoo_dir)
    responses = QueryTranslator.from_config(make_config(tiny_lvlm_path), zoo_dir).greedy(images, QUESTIONS)
    seen = [seen_description(reading) for reading in translator.visual_reader.read(images)]
    queries = translator.greedy(images, QUESTIONS)
    assert queries == [f"{seen[0]} {responses[0]} when was this built",
                       f"{seen[1]} {responses[1]} who was the architect of this"]
    with torch.no_grad():
        scored = translator.logprobs(images, QUESTIONS, queries)
        alone = lvlm.sequence_logprobs(translator.model, translator.processor, images, translator.prompts(QUESTIONS),
                                       responses, 1.0, 8)
    assert torch.allclose(scored, alone, atol=1e-5)
    torch.manual_seed(3)
    sampled = translator.sample(images, QUESTIONS, n=2)
    assert all(s.text.startswith(f"{seen[0]} ") and s.text.endswith(" when was this built") for s in sampled[0])
    assert all(s.text.startswith(f"{seen[1]} ") for s in sampled[1])


def test_the_empty_sibling_is_each_questions_last_sample_scored_as_the_policy_scores_it(tiny_lvlm_path, zoo_dir,
                                                                                       images):
    cfg = dataclasses.replace(make_config(tiny_lvlm_path), query_template="{response} {question}", empty_sibling=True)
    translator = QueryTranslator.from_config(cfg, zoo_dir)
    torch.manual_seed(3)
    drawn = translator.sample(images, QUESTIONS, n=3, temperature=0.5)
    assert [row[-1].text for row in drawn] == [" when was this built", " who was the architect of this"]
    assert all(translator.responses([image], [q], [s.text])[0] for image, q, row in zip(images, QUESTIONS, drawn)
               for s in row[:-1]), "the other samples are drawn as before (the tiny LVLM writes something)"
    with torch.no_grad():
        scored = translator.logprobs(images, QUESTIONS, [row[-1].text for row in drawn], temperature=0.5)
    assert [row[-1].logprob for row in drawn] == pytest.approx(scored.tolist(), abs=1e-5)
    single = translator.sample(images, QUESTIONS, n=1)
    assert all(translator.responses([image], [q], [row[0].text])[0]
               for image, q, row in zip(images, QUESTIONS, single)), "a single sample stays a draw"


def test_a_template_placing_what_the_reader_sees_needs_a_reader(tiny_lvlm_path, zoo_dir):
    cfg = dataclasses.replace(make_config(tiny_lvlm_path), query_template="{seen} {response}", visual_reader="")
    with pytest.raises(ValueError, match=r"translator.query_template.*\{seen\}.*translator.visual_reader"):
        QueryTranslator.from_config(cfg, zoo_dir)
    assert QueryTranslator.from_config(make_config(tiny_lvlm_path), zoo_dir).visual_reader is None, \
        "a template without {seen} loads no reader"


def test_query_template_round_trip_and_a_foreign_query_is_named():
    template = QueryTemplate("find: {response} | {question}")
    query = template.query("red circle", "Who built this? ")
    assert query == "find: red circle | who built this"
    assert template.response(query, "Who built this?") == "red circle"
    with pytest.raises(ValueError, match="translator.query_template.*'red circle'"):
        template.response("red circle", "Who built this?")
    with pytest.raises(ValueError, match=r"translator.query_template.*\{response\} exactly once"):
        QueryTemplate("{question}")
    sighted = QueryTemplate("{seen} {response} {question}")
    query = sighted.query("circle", "Who built this?", "red plain circle pictured on grey")
    assert query == "red plain circle pictured on grey circle who built this"
    assert sighted.response(query, "Who built this?", "red plain circle pictured on grey") == "circle"
    with pytest.raises(ValueError, match="for question 'Who built this\\?' and sight 'blue plain circle"):
        sighted.response(query, "Who built this?", "blue plain circle pictured on grey")


def test_an_update_leaves_the_frozen_vision_tower_unchanged(tiny_lvlm_path, zoo_dir, images):
    translator = QueryTranslator.from_config(make_config(tiny_lvlm_path), zoo_dir)
    before = {name: p.detach().clone() for name, p in translator.model.named_parameters()}
    assert any(".visual." in name for name in before)
    one_policy_step(translator, images, ["dotted star", "plain heart on teal"])
    after = dict(translator.model.named_parameters())
    assert all(torch.equal(after[name], before[name]) for name in before if ".visual." in name)
    assert any(not torch.equal(after[name], before[name]) for name in before if ".visual." not in name)
    unfrozen = QueryTranslator.from_config(dataclasses.replace(make_config(tiny_lvlm_path), train_vision_tower=True),
                                           zoo_dir)
    assert len(unfrozen.trainable_parameters()) == len(list(unfrozen.model.parameters()))


def test_prompt_template_without_question_is_rejected(tiny_lvlm_path, zoo_dir):
    cfg = dataclasses.replace(make_config(tiny_lvlm_path), prompt_template="Search query:")
    with pytest.raises(ValueError, match=r"translator.prompt_template.*\{question\}"):
        QueryTranslator.from_config(cfg, zoo_dir)


def test_translator_actor_samples_with_the_weights_each_call_names(ray_session, tiny_lvlm_path, zoo_dir, images):
    from mmrag.actors.policy import PolicyWeights
    from mmrag.actors.translator import TranslatorActor

    actor = ray_session.remote(TranslatorActor).remote(make_config(tiny_lvlm_path, lora=True), zoo_dir)
    table = QuestionTable(images, QUESTIONS, [[], []])
    initial = PolicyWeights(0, ())
    drawn = ray_session.get(actor.sample.remote(table, 2, 5, initial))
    assert drawn.policy_version == 0
    assert [len(row) for row in drawn.queries] == [2, 2]
    assert ray_session.get(actor.sample.remote(table, 2, 5, initial)) == drawn, "a call's draws depend on its seed"
    trained = QueryTranslator.from_config(make_config(tiny_lvlm_path, lora=True), zoo_dir)
    untrained_queries = trained.greedy(images, QUESTIONS)
    trained.load_trainable_state_dict(moved_state(trained, seed=2))
    trained_queries = trained.greedy(images, QUESTIONS)
    assert trained_queries != untrained_queries  # else installing the weights could go unnoticed
    assert ray_session.get(actor.greedy.remote(table, initial)) == untrained_queries
    version_7 = PolicyWeights(7, (ray_session.put(trained.trainable_state_dict()),))
    assert ray_session.get(actor.greedy.remote(table, version_7)) == trained_queries
    assert ray_session.get(actor.sample.remote(table, 2, 5, version_7)).policy_version == 7
    ray_session.kill(actor)
