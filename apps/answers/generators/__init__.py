"""Answer generators behind one interface (base.AnswerGenerator), chosen by name from settings:
`RAG_GENERATOR` for every route, `RAG_ROUTE_GENERATORS` ({"<project slug>/<route key>": {...}})
to override it for one route. Options of `openai_compatible` come from RAG_LLM_* settings unless
the route's override names them."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.utils.module_loading import import_string

from apps.answers.generators.base import AnswerGenerator, Draft, Evidence, GenerationFailed

GENERATORS = {
    "extractive": "apps.answers.generators.extractive.ExtractiveGenerator",
    "openai_compatible": "apps.answers.generators.openai_compatible.OpenAICompatibleGenerator",
}

__all__ = ["AnswerGenerator", "Draft", "Evidence", "GenerationFailed", "generator_for", "generator_options"]


def generator_options(*, route_label: str | None = None) -> dict[str, Any]:
    """{"name": ..., **options} for a route ("<project slug>/<route key>"), or the default."""
    options: dict[str, Any] = {
        "name": settings.RAG_GENERATOR,
        "base_url": settings.RAG_LLM_BASE_URL,
        "api_key": settings.RAG_LLM_API_KEY,
        "model": settings.RAG_LLM_MODEL,
        "timeout_seconds": settings.RAG_LLM_TIMEOUT_SECONDS,
        "max_retries": settings.RAG_LLM_MAX_RETRIES,
    }
    if route_label:
        options.update(settings.RAG_ROUTE_GENERATORS.get(route_label) or {})
    return options


def generator_for(*, route_label: str | None = None) -> AnswerGenerator:
    """The configured generator. Raises GenerationFailed when it is misconfigured."""
    options = generator_options(route_label=route_label)
    name = options.pop("name")
    if name not in GENERATORS:
        raise GenerationFailed("The answer generator is not configured.")
    return import_string(GENERATORS[name])(**options)
