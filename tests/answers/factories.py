import factory
from django.utils import timezone

from apps.ledger.models import RagQuery
from apps.ledger.rag import RagRecord, rag_query_record
from tests.routes.factories import RouteFactory


class RagQueryFactory(factory.Factory):
    """A recorded answer, written through the ledger's service; `days_ago` back-dates it."""

    class Meta:
        model = RagQuery

    route = factory.SubFactory(RouteFactory)
    question = factory.Sequence(lambda n: f"问题 {n}")
    answer = "答案。[1]"
    grounded = True
    useful = True
    error_code = None
    latency_ms = 100
    helpful = None
    days_ago = 0

    @classmethod
    def _create(cls, model_class, *, route, helpful, days_ago, **fields):
        record = RagRecord(
            question=fields["question"], answer=fields["answer"], evidence=[], confidence=0.5,
            grounded=fields["grounded"], useful=fields["useful"], missing_points=[],
            error_code=fields["error_code"], error_message=None, interaction_mode="knowledge", trace=[],
            latency_ms=fields["latency_ms"], generator="extractive",
        )
        row = rag_query_record(route=route, record=record)
        updates = {"created_at": timezone.now() - timezone.timedelta(days=days_ago)}
        if helpful is not None:
            updates.update(helpful=helpful, feedback_at=timezone.now())
        RagQuery.objects.filter(pk=row.pk).update(**updates)
        row.refresh_from_db()
        return row
