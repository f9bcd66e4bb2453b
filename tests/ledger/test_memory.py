"""Pure memory assembly: budgets and the execution-summary projection, without a database."""

import importlib.util
import json
import math

import pytest

from apps.ledger.memory import (
    EXECUTION_SUMMARY_SCHEMA,
    LedgerMessage,
    MemorySettings,
    execution_summary_fit,
    execution_summary_parse,
    memory_assemble,
    token_count,
)


def _settings(**changes):
    values = {"recent_messages": 12, "recent_budget_chars": 8000, "per_message_chars": 2000,
              "summary_enabled": False, "summary_max_chars": 1200}
    values.update(changes)
    return MemorySettings(**values)


def _messages(*contents):
    """Newest first, alternating user/assistant from the oldest."""
    count = len(contents)
    return [LedgerMessage(sequence=count - i, role="user" if (count - i) % 2 else "assistant", kind="text",
                          content=content) for i, content in enumerate(contents)]


def _summary(n_entries, **extra):
    return {"schema_version": EXECUTION_SUMMARY_SCHEMA,
            "invocations": [{"invocation_id": f"{n:064x}", "tool": "stock_adjust", "last_known_state": "executed"}
                            for n in range(n_entries)],
            "total_invocations": n_entries, "omitted_invocations": 0, **extra}


@pytest.mark.skipif(importlib.util.find_spec("tiktoken") is not None, reason="tiktoken counts instead")
def test_token_count_is_the_spec_estimate_without_tiktoken():
    assert token_count("x" * 10) == 4 + math.ceil(10 / 4)


def test_memory_is_oldest_first_within_the_window():
    memory = memory_assemble(messages=_messages("a2", "q2", "a1", "q1"), prior_messages=4, settings=_settings())
    assert [entry["content"] for entry in memory.recent] == ["q1", "a1", "q2", "a2"]
    assert memory.stats == {"recent_included": 4, "recent_truncated": 0, "recent_left_out": 0}


def test_the_budget_never_admits_more_characters_than_it_allows():
    memory = memory_assemble(messages=_messages("abc", "defg", "hij"), prior_messages=3,
                             settings=_settings(recent_budget_chars=7, per_message_chars=7))
    assert sum(len(entry["content"]) for entry in memory.recent) <= 7
    assert [entry["content"] for entry in memory.recent] == ["defg", "abc"]


def test_a_summary_never_becomes_half_a_json():
    summary = execution_summary_parse(json.dumps(_summary(10)))
    for allowance in range(0, 1500, 37):
        content, omitted = execution_summary_fit(summary, allowance)
        assert len(content) <= allowance
        if content.startswith("{"):
            projected = json.loads(content)
            assert projected["omitted_invocations"] == omitted == 10 - len(projected["invocations"])


def test_a_summary_that_fits_keeps_every_entry():
    summary = execution_summary_parse(json.dumps(_summary(2)))
    content, omitted = execution_summary_fit(summary, 10_000)
    assert omitted == 0
    assert json.loads(content) == summary


@pytest.mark.parametrize("content", [
    "plain text",
    json.dumps({"schema_version": "something-else", "invocations": []}),
    json.dumps({"schema_version": EXECUTION_SUMMARY_SCHEMA}),
    json.dumps({"schema_version": EXECUTION_SUMMARY_SCHEMA, "invocations": "all"}),
    json.dumps([{"schema_version": EXECUTION_SUMMARY_SCHEMA}]),
    "{not json",
])
def test_only_a_whole_summary_object_is_recognised(content):
    assert execution_summary_parse(content) is None


def test_counts_are_never_taken_from_a_lying_summary():
    parsed = execution_summary_parse(json.dumps(_summary(3, total_invocations=1, omitted_invocations=-5)))
    assert (parsed["total_invocations"], parsed["omitted_invocations"]) == (3, 0)


def test_next_action_is_only_inspect_original_and_only_for_pending_states():
    raw = _summary(0)
    raw["invocations"] = [
        {"invocation_id": "a" * 64, "tool": "t", "last_known_state": "executed", "next_action": "inspect_original"},
        {"invocation_id": "b" * 64, "tool": "t", "last_known_state": "awaiting_approval", "next_action": "retry"},
    ]
    parsed = execution_summary_parse(json.dumps(raw))
    assert parsed["invocations"] == [
        {"invocation_id": "a" * 64, "tool": "t", "last_known_state": "executed"},
        {"invocation_id": "b" * 64, "tool": "t", "last_known_state": "awaiting_approval",
         "next_action": "inspect_original"},
    ]


def test_a_message_cut_to_its_allowance_but_left_out_by_the_budget_is_not_counted_truncated():
    """"abcdefghij" is cut to 6 characters, then does not fit the 4 left of the budget: it is left out,
    not truncated (the run's stats counted it as both)."""
    memory = memory_assemble(messages=_messages("xyz", "abcdefghij"), prior_messages=2,
                             settings=_settings(recent_budget_chars=7, per_message_chars=6))
    assert [entry["content"] for entry in memory.recent] == ["xyz"]
    assert memory.stats == {"recent_included": 1, "recent_truncated": 0, "recent_left_out": 1}


def test_content_nested_past_the_interpreters_limit_is_not_a_summary():
    """json.loads raises RecursionError, not ValueError, for a content nested thousands deep: the
    completion that carried it answered 500 (its recognition ran on every completion)."""
    deep = '{"a":' + "[" * 30_000 + "]" * 30_000 + "}"
    assert execution_summary_parse(deep) is None
