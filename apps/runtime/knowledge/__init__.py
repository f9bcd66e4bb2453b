"""Agent knowledge on demand, protocol `bailing.agent-knowledge.v1`: capabilities, search hints
and paged reads through signed references.

The knowledge *scope* of a route (`scope`) is everything that decides what its agents may read:
the route's knowledge settings and, for each bound knowledge base, its id, embedding model and
active index generation; its SHA-256 (`knowledge_scope_revision`) changes with any of them.
`search` finds documents and issues hints with signed references (`references`); `read` pages
through a document's body (`documents`) by reference and cursor. Nothing here writes: no
invocation, job or ledger row is created. The limits are in `limits`, the errors in
apps.runtime.errors.
"""

from apps.runtime.knowledge.documents import document_revision
from apps.runtime.knowledge.limits import (
    QUERY_MAX_CHARS,
    READ_DEFAULT_BYTES,
    READ_MAX_BYTES,
    READ_MIN_BYTES,
    SEARCH_MAX_RESULTS,
)
from apps.runtime.knowledge.read import knowledge_read
from apps.runtime.knowledge.scope import KnowledgeScope, knowledge_scope_get, run_get_current
from apps.runtime.knowledge.search import (
    PreparedDelivery,
    chapter_path_out,
    knowledge_capabilities,
    knowledge_delivery_prepare,
    knowledge_search_hints,
)
from apps.runtime.knowledge.tool import kb_search_run

__all__ = [
    "QUERY_MAX_CHARS",
    "READ_DEFAULT_BYTES",
    "READ_MAX_BYTES",
    "READ_MIN_BYTES",
    "SEARCH_MAX_RESULTS",
    "KnowledgeScope",
    "PreparedDelivery",
    "chapter_path_out",
    "document_revision",
    "kb_search_run",
    "knowledge_capabilities",
    "knowledge_delivery_prepare",
    "knowledge_read",
    "knowledge_scope_get",
    "knowledge_search_hints",
    "run_get_current",
]
