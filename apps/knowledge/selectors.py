"""Reads of knowledge bases, documents, generations and chunks, scoped where an operator asks.

For the retrieval side (search, agent knowledge): `route_readable_knowledge_bases` (the route's
KBs that are on), `generation_active_ids` and `chunk_queryset_searchable` give what is readable —
enabled children of the *active* generation of documents that are *completed* and on, resolved in
one statement.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.db.models import F, OuterRef, Q, QuerySet

from apps.knowledge.errors import (
    DocumentNotFound,
    EmbeddingModelNotFound,
    KnowledgeBaseNotFound,
    KnowledgeForbidden,
)
from apps.knowledge.models import (
    Chunk,
    Document,
    EmbeddingModel,
    IndexGeneration,
    KnowledgeBase,
)
from apps.knowledge.pipeline import retrieve
from apps.knowledge.pipeline.candidates import Hit
from apps.projects.selectors import project_list_editable, project_list_visible
from apps.routes.models import Route

# Operators


def knowledge_base_list_visible(*, user, project_id=None) -> QuerySet[KnowledgeBase]:
    queryset = KnowledgeBase.objects.filter(project__in=project_list_visible(user=user)).select_related(
        "project", "embedding_model"
    )
    if project_id is not None:
        queryset = queryset.filter(project_id=project_id)
    # Project names repeat; the project's id, then the KB's, make the order total, so offset pages
    # of the builder list neither repeat nor skip a KB.
    return queryset.order_by("project__name", "project_id", "name", "id")


def knowledge_base_get_visible(*, user, kb_id) -> KnowledgeBase:
    kb = knowledge_base_list_visible(user=user).filter(pk=kb_id).first()
    if kb is None:
        raise KnowledgeBaseNotFound()
    return kb


def knowledge_base_get_editable(*, user, kb_id) -> KnowledgeBase:
    """A KB the operator may change (owner or editor); 404 when they cannot see it at all."""
    kb = knowledge_base_get_visible(user=user, kb_id=kb_id)
    if not project_list_editable(user=user).filter(pk=kb.project_id).exists():
        raise KnowledgeForbidden()
    return kb


def document_get_visible(*, user, document_id) -> Document:
    document = (
        Document.objects.filter(pk=document_id, knowledge_base__project__in=project_list_visible(user=user))
        .select_related("knowledge_base")
        .first()
    )
    if document is None:
        raise DocumentNotFound()
    return document


def document_get_editable(*, user, document_id) -> Document:
    document = document_get_visible(user=user, document_id=document_id)
    if not project_list_editable(user=user).filter(pk=document.knowledge_base.project_id).exists():
        raise KnowledgeForbidden()
    return document


def document_list(*, kb: KnowledgeBase, status: str | None = None, enabled: bool | None = None
                  ) -> QuerySet[Document]:
    queryset = Document.objects.filter(knowledge_base=kb)
    if status:
        queryset = queryset.filter(status=status)
    if enabled is not None:
        queryset = queryset.filter(enabled=enabled)
    return queryset.order_by("-created_at", "id")


def embedding_model_list() -> QuerySet[EmbeddingModel]:
    return EmbeddingModel.objects.order_by("name")


def embedding_model_get(*, model_id) -> EmbeddingModel:
    model = EmbeddingModel.objects.filter(pk=model_id).first()
    if model is None:
        raise EmbeddingModelNotFound()
    return model


# Generations


def generation_active(*, kb: KnowledgeBase) -> IndexGeneration | None:
    return IndexGeneration.objects.filter(knowledge_base=kb, status=IndexGeneration.Status.ACTIVE).first()


def generation_searchable_chunk_count(*, generation: IndexGeneration | None) -> int:
    """How many of `generation`'s chunks a search can return now: those of completed documents
    that are on (chunk_queryset_searchable). A document still embedding has chunks in the
    generation already, and one turned off keeps its own; neither is searched."""
    if generation is None:
        return 0
    return chunk_queryset_searchable(generation_ids=[generation.pk]).count()


def generation_latest(*, kb: KnowledgeBase) -> IndexGeneration | None:
    """The most recent generation (to show a rebuild's progress or failure)."""
    return IndexGeneration.objects.filter(knowledge_base=kb).order_by("-number").first()


def generation_active_ids(*, kbs: Iterable[KnowledgeBase]) -> list:
    """Ids of the active generations of these KBs. Resolve them once per search and read both
    channels (vector and keyword) against them: a retired generation lives on for
    KNOWLEDGE_RETIRED_GENERATION_GRACE_SECONDS, so a search spanning a switch stays whole."""
    return list(
        IndexGeneration.objects.filter(knowledge_base__in=list(kbs), status=IndexGeneration.Status.ACTIVE)
        .values_list("pk", flat=True)
    )


# Chunks


def chunk_queryset_searchable(*, kbs: Iterable[KnowledgeBase] | None = None, generation_ids=None) -> QuerySet[Chunk]:
    """Children that searches may return: in the active generation of `kbs` (or in the given
    `generation_ids`), not disabled, of completed documents that are on, with a vector. One
    statement resolves the active generation, so a concurrent switch yields the old set or the new
    one, never a mix."""
    queryset = Chunk.objects.filter(
        kind=Chunk.Kind.CHILD, disabled=False, document__status=Document.Status.COMPLETED, document__enabled=True,
        embedding__isnull=False,
    )
    if generation_ids is not None:
        return queryset.filter(generation_id__in=list(generation_ids))
    return queryset.filter(
        generation__knowledge_base__in=list(kbs or []), generation__status=IndexGeneration.Status.ACTIVE
    )


def chunk_list_preview(*, document: Document) -> QuerySet[Chunk]:
    """A document's child chunks for preview: from the active generation, or — for a document
    not yet there — from the newest generation that has its chunks."""
    generations = list(
        IndexGeneration.objects.filter(chunks__document=document)
        .exclude(status=IndexGeneration.Status.FAILED)
        .distinct()
        .order_by("-number")
        .values_list("pk", "status")
    )
    if not generations:
        return Chunk.objects.none()
    chosen = next((pk for pk, status in generations if status == IndexGeneration.Status.ACTIVE), generations[0][0])
    return Chunk.objects.filter(document=document, generation_id=chosen, kind=Chunk.Kind.CHILD).order_by("index")


# Routes


def route_knowledge_bases(*, route: Route) -> QuerySet[KnowledgeBase]:
    """The knowledge bases bound to a route (same project), by name, enabled or not: the route's
    configuration. What its agents read is `route_readable_knowledge_bases`."""
    return KnowledgeBase.objects.filter(
        route_bindings__route=route, project_id=route.project_id
    ).select_related("embedding_model").order_by("name", "id")


def route_readable_knowledge_bases(*, route: Route) -> QuerySet[KnowledgeBase]:
    """The route's bound knowledge bases that are enabled: the ones its agents, turns, answers
    and dry runs read."""
    return route_knowledge_bases(route=route).filter(enabled=True)


def route_source_filter(*, enabled: bool | None = True) -> Q:
    """A filter of `Count("knowledge_bindings")` over Route rows: the bindings to KBs of the
    route's own project (route_knowledge_bases), of those the ones on (`enabled`, the default:
    route_readable_knowledge_bases) or off (False), or either (None). For lists that count every
    route's sources in one query."""
    same_project = Q(knowledge_bindings__knowledge_base__project_id=F("project_id"))
    return same_project if enabled is None else same_project & Q(knowledge_bindings__knowledge_base__enabled=enabled)


def route_knowledge_source_count(*, route: Route) -> int:
    """How many knowledge bases a route reads (routes.selectors.route_profile's knowledge_sources):
    its bound ones that are enabled."""
    return route_readable_knowledge_bases(route=route).count()


# Search


def knowledge_search(*, kbs: Iterable[KnowledgeBase], query: str,
                     options: retrieve.SearchOptions | None = None) -> retrieve.SearchResult:
    """The one retrieval entry point (builder search, admin playground, turns, agent knowledge,
    benchmarks): hits over the active generations of `kbs`, which the caller has scoped."""
    return retrieve.search(kbs=kbs, query=query, options=options)


def route_knowledge_search(*, route: Route, query: str, top_k: int | None = None) -> list[Hit]:
    """Hybrid hits for a route with its own knowledge settings (top_k, max_docs, threshold).
    Empty when the route's knowledge is off or it has no bound KBs."""
    if not route.knowledge_enabled:
        return []
    kbs = list(route_readable_knowledge_bases(route=route))
    if not kbs:
        return []
    options = retrieve.SearchOptions(
        top_k=top_k or route.knowledge_top_k,
        mode="hybrid",
        score_threshold=route.knowledge_score_threshold,
        max_docs=route.knowledge_max_docs,
        route_id=route.pk,
    )
    return retrieve.search(kbs=kbs, query=query, options=options).hits


# Chunk management (operators)


def chunk_get_for_document(*, document: Document, chunk_id) -> Chunk:
    """A child chunk of this document (the caller has scoped the document), or ChunkNotFound."""
    from apps.knowledge.errors import ChunkNotFound

    chunk = (Chunk.objects.filter(pk=chunk_id, document=document, kind=Chunk.Kind.CHILD)
             .select_related("generation", "parent", "override", "document__knowledge_base").defer("embedding")
             .first())
    if chunk is None:
        raise ChunkNotFound()
    return chunk


def chunk_list_managed(*, document: Document) -> QuerySet[Chunk]:
    """The document's child chunks an operator manages (chunk_list_preview's generation), with
    their sections and overrides, in order: three queries whatever the count."""
    return (chunk_list_preview(document=document).select_related("parent", "override__updated_by", "generation")
            .defer("embedding", "search_vector", "parent__embedding", "parent__search_vector"))


def chunk_override_orphans(*, document: Document):
    """Overrides that the generation built last could not place: their chunk is not there."""
    from apps.knowledge.models import ChunkOverride

    return (ChunkOverride.objects.filter(document=document, orphaned_at__isnull=False)
            .select_related("updated_by").order_by("chunk_index"))


def chunk_edit_list(*, document: Document, limit: int = 100):
    """The document's chunk history, newest first (who, when, what)."""
    from apps.knowledge.models import ChunkEdit

    return ChunkEdit.objects.filter(document=document).select_related("user", "override").order_by(
        "-created_at", "-id")[:limit]


# Search playground


def playground_recent_queries(*, user, kb: KnowledgeBase):
    """The operator's own recent playground searches on this KB, newest first."""
    from apps.knowledge.models import PlaygroundQuery

    return PlaygroundQuery.objects.filter(user=user, knowledge_base=kb).order_by("-ran_at", "-id")[
        :PlaygroundQuery.KEEP]


def generation_active_state(*, kb: KnowledgeBase) -> str:
    """`missing` (no active generation), `empty` (no completed document in it yet) or `ready`.
    A generation becomes active only with every completed document in it, so completed
    documents are what it holds."""
    from django.db.models import Exists

    completed = Document.objects.filter(knowledge_base_id=OuterRef("knowledge_base_id"),
                                        status=Document.Status.COMPLETED)
    row = (IndexGeneration.objects.filter(knowledge_base=kb, status=IndexGeneration.Status.ACTIVE)
           .annotate(indexed=Exists(completed)).values_list("indexed", flat=True).first())
    if row is None:
        return "missing"
    return "ready" if row else "empty"
