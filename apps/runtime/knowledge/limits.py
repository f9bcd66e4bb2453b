"""The knowledge protocol's names and limits (`bailing.agent-knowledge.v1`)."""

from __future__ import annotations

PROTOCOL = "bailing.agent-knowledge.v1"
CAPABILITIES_SCHEMA = "bailing.agent-knowledge-capabilities.v1"
SEARCH_SCHEMA = "bailing.agent-knowledge-search.v1"
READ_SCHEMA = "bailing.agent-knowledge-read.v1"
DELIVERY_SCHEMA = "bailing.agent-knowledge-delivery.v1"
TRUST = "reference_only"
DELIVERY_MODES = ["inline", "on_demand"]

SEARCH_MAX_RESULTS = 3
SEARCH_MAX_BYTES = 4096
READ_DEFAULT_BYTES = 16384
READ_MIN_BYTES = 4096
READ_MAX_BYTES = 32768
REFERENCE_TTL_SECONDS = 300
READ_CHAIN_MAX_BYTES = 131072
QUERY_MAX_CHARS = 2000
LIMITS = {
    "search_max_results": SEARCH_MAX_RESULTS,
    "search_max_bytes": SEARCH_MAX_BYTES,
    "read_default_bytes": READ_DEFAULT_BYTES,
    "read_max_bytes": READ_MAX_BYTES,
    "reference_ttl_seconds": REFERENCE_TTL_SECONDS,
    "read_chain_max_bytes": READ_CHAIN_MAX_BYTES,
}
# A hint's summary: an excerpt of the hit, at most this many bytes of JSON string. Three hints
# with ordinary titles fit the 4096-byte search budget.
SUMMARY_MAX_BYTES = 512
# A section's breadcrumb ("售后政策 / 退款 / 七天无理由") in a hint, a read page or a kb_search hit:
# at most this many bytes of JSON string (a longer one is cut), so that it never crowds out the
# text it names. It counts inside each answer's byte budget.
CHAPTER_PATH_MAX_BYTES = 256
# The built-in kb_search tool: passages (not one per document), within the tool-result budget.
KB_SEARCH_DEFAULT_RESULTS = 5
KB_SEARCH_MAX_RESULTS = 12
KB_SEARCH_MAX_BYTES = 16384
KB_SEARCH_SCHEMA = "bailing.kb-search.v1"
# A passage cut to fit is kept only with at least this much text left.
KB_SEARCH_ENTRY_MIN_BYTES = 256
BODY_SEPARATOR = "\n\n"
# Knowledge reads give up rather than hang: a locked index or a runaway query is "unavailable".

# Errors carry fixed messages, never a body, an address, SQL or a credential. 503
# `knowledge_unavailable` is the turns' error class (with its Retry-After), with this message:
UNAVAILABLE_MESSAGE = "Knowledge is unavailable right now; retry later."
