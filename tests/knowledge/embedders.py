"""Test-only embedding providers, configured per test through settings.KNOWLEDGE_EMBEDDERS."""

from __future__ import annotations

from apps.knowledge import services
from apps.knowledge.models import Document
from apps.knowledge.pipeline.embedders.hashing import HashingEmbedder


class DeletingEmbedder(HashingEmbedder):
    """Deletes the documents being embedded, as an operator would mid-run, then embeds."""

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        for document in Document.objects.filter(status=Document.Status.EMBEDDING):
            services.document_delete(document=document)
        return super().embed_documents(texts)


class UndeclaredOptionsEmbedder(HashingEmbedder):
    """A provider that does not say which options it reads, as one added by KNOWLEDGE_EMBEDDERS may not."""

    option_names = None
