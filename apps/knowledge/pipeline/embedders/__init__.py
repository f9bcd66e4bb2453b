"""Embedders: one interface (base.Embedder), providers chosen from settings.KNOWLEDGE_EMBEDDERS
with import_string. `embedder_for(model)` returns one instance per process and model."""

from __future__ import annotations

import threading

from django.conf import settings
from django.utils.module_loading import import_string

from apps.knowledge.pipeline.embedders.base import Embedder, EmbeddingFailed

__all__ = ["Embedder", "EmbeddingFailed", "embedder_class", "embedder_for"]

_instances: dict[tuple, Embedder] = {}
_instances_lock = threading.Lock()


def embedder_class(provider: str) -> type[Embedder]:
    try:
        path = settings.KNOWLEDGE_EMBEDDERS[provider]
    except KeyError:
        raise EmbeddingFailed(f"No embedding provider {provider!r} is configured.") from None
    return import_string(path)


def embedder_for(model) -> Embedder:
    """The embedder of a registered EmbeddingModel (cached by its id, dimension and options)."""
    # A row written before registration checked its options may hold any JSON: the constructor
    # refuses it with EmbeddingFailed, which every caller reports as the model's configuration error.
    options = model.options
    key = (str(model.pk), model.provider, model.dimension,
           repr(sorted(options.items())) if isinstance(options, dict) else repr(options))
    with _instances_lock:
        embedder = _instances.get(key)
        if embedder is None:
            embedder = embedder_class(model.provider)(name=model.name, dimension=model.dimension,
                                                      options=model.options)
            _instances[key] = embedder
    return embedder
