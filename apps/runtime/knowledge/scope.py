"""A route's knowledge scope: the settings and sources that decide what its agents may read, and
the revision that changes with any of them; the database limits every knowledge query runs under;
the run a knowledge request may name."""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypedDict

from django.db import DatabaseError
from django.db.models import OuterRef, Subquery

from apps.agent_auth.models import AgentSession
from apps.core import dblimits
from apps.core.revisions import revision_of
from apps.knowledge.models import IndexGeneration, KnowledgeBase
from apps.knowledge.selectors import route_readable_knowledge_bases
from apps.ledger.errors import RunNotFound
from apps.ledger.models import Run
from apps.ledger.selectors import run_get_for_session
from apps.routes.models import Route
from apps.runtime.errors import KnowledgeUnavailable, RunNotActive
from apps.runtime.knowledge.limits import UNAVAILABLE_MESSAGE

if TYPE_CHECKING:
    from django_stubs_ext import WithAnnotations


class _ActiveGeneration(TypedDict):
    active_generation_id: uuid.UUID | None

logger = logging.getLogger("bailinghub.runtime")

LOCK_TIMEOUT_MS = 2000
STATEMENT_TIMEOUT_MS = 10000


def bounded():
    """Knowledge queries give up instead of hanging (LOCK_TIMEOUT_MS, STATEMENT_TIMEOUT_MS); their
    DatabaseError is the caller's to turn into "unavailable". A request wraps its whole work in one
    (`request_bounded`) and each piece that catches its own failure in another: only the outermost
    sets and resets the limits (apps.core.dblimits)."""
    return dblimits.limited(lock_timeout_ms=LOCK_TIMEOUT_MS, statement_timeout_ms=STATEMENT_TIMEOUT_MS)


@contextlib.contextmanager
def request_bounded() -> Iterator[None]:
    """The limits for a whole knowledge request: 503 `knowledge_unavailable` when the database
    cannot even take them."""
    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(bounded())
        except DatabaseError as exc:
            logger.warning("Agent knowledge unavailable: %s", type(exc).__name__)
            raise KnowledgeUnavailable(UNAVAILABLE_MESSAGE) from exc
        yield


@dataclass(frozen=True)
class KnowledgeScope:
    """What a route's agents may read now; `knowledge_bases` carry `active_generation_id`."""

    enabled: bool
    knowledge_bases: tuple[WithAnnotations[KnowledgeBase, _ActiveGeneration], ...]
    revision: str

    @property
    def configured(self) -> bool:
        return self.enabled and bool(self.knowledge_bases)

    @property
    def knowledge_base_ids(self) -> list:
        return [kb.pk for kb in self.knowledge_bases]

    @property
    def generation_ids(self) -> list:
        return [kb.active_generation_id for kb in self.knowledge_bases if kb.active_generation_id]


def knowledge_scope_get(*, route: Route) -> KnowledgeScope:
    """The route's knowledge scope and its revision. One query."""
    # At most one active generation a KB (a unique constraint): no ordering, so none of the
    # model's default ordering's joins (project, KB name) in the subquery.
    active = IndexGeneration.objects.filter(knowledge_base=OuterRef("pk"),
                                            status=IndexGeneration.Status.ACTIVE).order_by()
    kbs = tuple(route_readable_knowledge_bases(route=route).annotate(
        active_generation_id=Subquery(active.values("pk")[:1])))
    configuration = {
        "knowledge": {
            "enabled": route.knowledge_enabled,
            "mode": route.knowledge_mode,
            "top_k": route.knowledge_top_k,
            "max_docs": route.knowledge_max_docs,
            "page_boost": route.knowledge_page_boost,
            "score_threshold": route.knowledge_score_threshold,
        },
        "knowledge_bases": sorted(
            ({"id": str(kb.pk), "embedding_model_id": str(kb.embedding_model_id), "embedding_dim": kb.embedding_dim,
              "active_generation_id": str(kb.active_generation_id) if kb.active_generation_id else None}
             for kb in kbs),
            key=lambda item: str(item["id"]),
        ),
    }
    return KnowledgeScope(enabled=route.knowledge_enabled, knowledge_bases=kbs, revision=revision_of(configuration))


def scope_or_unavailable(route: Route) -> KnowledgeScope:
    try:
        with bounded():
            return knowledge_scope_get(route=route)
    except DatabaseError as exc:
        logger.warning("Agent knowledge scope unavailable: %s", type(exc).__name__)
        raise KnowledgeUnavailable(UNAVAILABLE_MESSAGE) from exc


def run_get_current(*, session: AgentSession, route: Route, run_id: uuid.UUID | str) -> Run:
    """A run this session opened on this route, in `context_ready`: 404 `run_not_found` for any
    other run (another session's, another route's, unknown), 409 `run_not_active` while it is
    being prepared or once it has finished."""
    run = run_get_for_session(session=session, run_id=run_id)
    if run.route_id != route.pk:
        raise RunNotFound()
    if run.state != Run.State.CONTEXT_READY:
        raise RunNotActive()
    return run
