"""KNOWLEDGE_RETRIEVAL: declared keys with defaults, checked at start-up, read by retrieval."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from apps.knowledge.pipeline.retrieval_settings import RetrievalSettings, retrieval_settings

ROOT = Path(__file__).resolve().parents[2]


def test_defaults_are_the_measured_values():
    knobs = RetrievalSettings()
    assert (knobs.search_candidates, knobs.vector_ef_search, knobs.generation_index_min_rows,
            knobs.hybrid_dense_weight_western, knobs.keyword_posting_budget,
            knobs.hybrid_keyword_posting_budget, knobs.hybrid_vector_ef_search) == (50, 400, 2_000, 0.6, 20_000,
                                                                                   2_000, 200)
    assert (knobs.vector_index_m, knobs.vector_index_ef_construction) == (16, 64)  # pgvector's own
    assert (knobs.hybrid_window_dense, knobs.hybrid_window_keyword, knobs.hybrid_window_shift) == (0.5, 0.75, 0.1)
    assert (knobs.hybrid_window_dense_western, knobs.hybrid_window_keyword_western,
            knobs.hybrid_window_shift_western) == (0.75, 0.0, 0.0)
    assert (knobs.hybrid_window_dense_traditional, knobs.hybrid_window_keyword_traditional,
            knobs.hybrid_window_shift_traditional) == (1.0, 0.75, 0.1)
    assert knobs.hybrid_window_pool == 30
    assert len(fields(knobs)) == 30


def test_a_setting_overrides_one_key_and_keeps_the_others(settings):
    settings.KNOWLEDGE_RETRIEVAL = {"search_candidates": 80}
    assert retrieval_settings().search_candidates == 80
    assert retrieval_settings().keyword_phase1_limit == 100
    settings.KNOWLEDGE_RETRIEVAL = {}
    assert retrieval_settings().search_candidates == 50


@pytest.mark.parametrize(("values", "message"), [
    ({"search_candidate": 80}, "unknown keys: search_candidate"),
    ({"search_candidates": "80"}, "'search_candidates'] must be int"),
    ({"search_candidates": 2.5}, "'search_candidates'] must be int"),
    ({"search_candidates": True}, "'search_candidates'] must be int"),
    ({"search_candidates": 0}, "'search_candidates'] must be ≥ 1"),
    ({"search_candidates": 10**6}, "must be ≤ 1000"),
    ({"hybrid_dense_weight_short": 1.5}, "within 0–1"),
    ({"hybrid_margin_slope": float("nan")}, "must be ≥ 0"),
    ({"vector_ef_search": 0}, "'vector_ef_search'] must be ≥ 1"),
    ({"vector_ef_search": 1001}, "'vector_ef_search'] must be ≤ 1000"),
    ({"hybrid_vector_ef_search": 0}, "'hybrid_vector_ef_search'] must be ≥ 1"),
    ({"hybrid_vector_ef_search": 1001}, "'hybrid_vector_ef_search'] must be ≤ 1000"),
    ({"vector_exact_max": 2000}, "unknown keys: vector_exact_max"),
    ({"vector_index_min_rows": 10, "generation_index_min_rows": 20}, "keep 'generation_index_min_rows'"),
    ({"vector_index_min_rows": -1}, "'generation_index_min_rows'] must be ≥ 0"),
    ({"hybrid_short_units": 20, "hybrid_long_units": 20}, "hybrid_long_units must be >"),
    ({"vector_index_m": 1}, "'vector_index_m'] must be within 2–100"),
    ({"vector_index_m": 101, "vector_index_ef_construction": 400}, "'vector_index_m'] must be within 2–100"),
    ({"vector_index_m": 24, "vector_index_ef_construction": 47}, "'vector_index_ef_construction'] must be within"),
    ({"vector_index_m": 2, "vector_index_ef_construction": 3}, "'vector_index_ef_construction'] must be within"),
    ({"vector_index_ef_construction": 1001}, "'vector_index_ef_construction'] must be within"),
    ({"vector_index_m": 24.0}, "'vector_index_m'] must be int"),
    ({"hybrid_window_pool": -1}, "'hybrid_window_pool'] must be ≥ 0"),
    ({"hybrid_window_pool": 2.5}, "'hybrid_window_pool'] must be int"),
    ({"hybrid_window_dense": 1.5}, "'hybrid_window_dense'] must be within 0–1"),
    ({"hybrid_window_dense_western": 1.5}, "'hybrid_window_dense_western'] must be within 0–1"),
    ({"hybrid_window_keyword_western": -0.1}, "'hybrid_window_keyword_western'] must be ≥ 0"),
    ({"hybrid_window_shift_western": 0.6}, "'hybrid_window_shift_western'] must be within -0.5–0.5"),
    ({"hybrid_window_shift_western": float("nan")}, "'hybrid_window_shift_western'] must be within -0.5–0.5"),
    ({"hybrid_window_dense_traditional": 1.5}, "'hybrid_window_dense_traditional'] must be within 0–1"),
    ({"hybrid_window_keyword_traditional": -0.1}, "'hybrid_window_keyword_traditional'] must be ≥ 0"),
    ({"hybrid_window_shift_traditional": -0.6}, "'hybrid_window_shift_traditional'] must be within -0.5–0.5"),
    ([1, 2], "must be a JSON object"),
])
def test_a_bad_value_is_refused_with_its_name(values, message):
    with pytest.raises(ImproperlyConfigured) as refused:
        RetrievalSettings.from_mapping(values)
    assert message in str(refused.value)


def test_a_window_pool_is_a_count_of_candidates_not_a_share():
    assert RetrievalSettings.from_mapping({"hybrid_window_pool": 30}).hybrid_window_pool == 30


def test_a_renamed_key_is_still_read_under_its_new_name():
    knobs = RetrievalSettings.from_mapping({"vector_index_min_rows": 5_000})
    assert knobs.generation_index_min_rows == 5_000
    assert RetrievalSettings.from_mapping({"generation_index_min_rows": 7}).generation_index_min_rows == 7


def test_a_bad_environment_value_stops_the_boot_naming_the_key():
    env = {**os.environ, "DEBUG": "true", "KNOWLEDGE_RETRIEVAL": '{"search_candidates": -3}'}
    result = subprocess.run([sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode != 0
    assert "KNOWLEDGE_RETRIEVAL['search_candidates'] must be ≥ 0" in result.stderr
