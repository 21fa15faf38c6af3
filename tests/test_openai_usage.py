"""The OpenAI-compatible reply parses as a stock client's `ChatCompletion` with its `usage` filled (zero tokens, as
documented: two models with their own tokenizers answer, so no single count stands for the reply)."""

from __future__ import annotations

from openai.types.chat import ChatCompletion

from mmrag.serving.openai_chat import UNCOUNTED_USAGE, chat_completion
from mmrag.serving.schema import Evidence


def test_a_chat_completion_reply_has_usage_a_stock_client_reads():
    reply = chat_completion("1220", "stone tower", [Evidence(doc_id="d1", title="T", snippet="s", score=0.5)], "mmrag")
    parsed = ChatCompletion.model_validate(reply)
    assert parsed.usage is not None
    assert (parsed.usage.prompt_tokens, parsed.usage.completion_tokens, parsed.usage.total_tokens) == (0, 0, 0)
    assert reply["usage"] == UNCOUNTED_USAGE and reply["usage"] is not UNCOUNTED_USAGE
    assert parsed.choices[0].message.content == "1220"
