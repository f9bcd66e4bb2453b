"""The pipeline's services run in-process (the tasks only call them); the worker tests in
test_worker.py run the same through real Celery workers."""

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from apps.knowledge import errors, ingest, rebuild, selectors, services, watchdog
from apps.knowledge.models import Chunk, Document, EmbeddingCache, EmbeddingModel, IndexGeneration
from tests.knowledge.factories import EmbeddingModelFactory, KnowledgeBaseFactory
from tests.knowledge.helpers import EmbeddingsEndpoint, upload
from tests.projects.factories import ProjectFactory
from tests.routes.factories import RouteFactory

pytestmark = pytest.mark.django_db

POLICY_PATHS = [
    "售后政策",
    "售后政策 / 退款",
    "售后政策 / 退款 / 七天无理由",
    "售后政策 / 退款 / 质量问题",
    "售后政策 / 换货",
]


def _ingest(document):
    return ingest.document_ingest(document_id=document.pk)


def _children(document, **filters):
    return Chunk.objects.filter(document=document, kind=Chunk.Kind.CHILD, **filters)


def test_an_uploaded_document_is_pending_until_a_worker_takes_it():
    kb = KnowledgeBaseFactory()
    [document] = services.document_upload(kb=kb, files=[upload("policy.zh.md")])
    assert (document.status, document.file_type, document.size) == ("pending", "markdown", 571)
    assert Chunk.objects.count() == 0


def test_ingesting_completes_with_structured_chunks_vectors_and_terms():
    kb = KnowledgeBaseFactory()
    [document] = services.document_upload(kb=kb, files=[upload("policy.zh.md")])
    assert _ingest(document) == "completed"
    document.refresh_from_db()
    assert (document.status, document.progress_done, document.progress_total, document.attempts) == (
        "completed", 5, 5, 1)
    children = _children(document).order_by("index")
    assert [c.chapter_path for c in children] == POLICY_PATHS
    assert _children(document, embedding__isnull=True, search_vector__isnull=True).count() == 0
    assert Chunk.objects.filter(document=document, kind=Chunk.Kind.PARENT).count() == 5
    assert all(c.parent.text[c.metadata["parent_start"]:c.metadata["parent_end"]] == c.text for c in children)


def test_every_stage_leaves_its_timestamp():
    kb = KnowledgeBaseFactory()
    [document] = services.document_upload(kb=kb, files=[upload("plain.txt")])
    _ingest(document)
    document.refresh_from_db()
    stamps = [document.queued_at, document.parsing_started_at, document.chunking_started_at,
              document.embedding_started_at, document.completed_at]
    assert None not in stamps
    assert stamps == sorted(stamps)


def test_keyword_terms_are_searchable_with_the_simple_configuration():
    kb = KnowledgeBaseFactory()
    [document] = services.document_upload(kb=kb, files=[upload("policy.zh.md")])
    _ingest(document)
    hits = _children(document).extra(where=["search_vector @@ to_tsquery('simple', '三十 & 十天')"])
    assert [c.chapter_path for c in hits] == ["售后政策 / 退款 / 质量问题"]


def test_running_the_embedding_stage_again_never_duplicates_chunks():
    kb = KnowledgeBaseFactory()
    [document] = services.document_upload(kb=kb, files=[upload("policy.zh.md")])
    _ingest(document)
    ids = set(Chunk.objects.filter(document=document).values_list("pk", flat=True))
    Document.objects.filter(pk=document.pk).update(status=Document.Status.EMBEDDING, run_token=None)
    assert _ingest(document) == "completed"
    Document.objects.filter(pk=document.pk).update(status=Document.Status.QUEUED, run_token=None)
    assert _ingest(document) == "completed"
    assert set(Chunk.objects.filter(document=document).values_list("pk", flat=True)) == ids


def test_a_completed_document_is_left_alone_by_a_repeated_task():
    kb = KnowledgeBaseFactory()
    [document] = services.document_upload(kb=kb, files=[upload("plain.txt")])
    _ingest(document)
    assert _ingest(document) == "skipped"
    document.refresh_from_db()
    assert document.attempts == 1


def test_a_live_run_is_not_taken_over_by_a_second_task():
    kb = KnowledgeBaseFactory()
    [document] = services.document_upload(kb=kb, files=[upload("plain.txt")])
    Document.objects.filter(pk=document.pk).update(status=Document.Status.EMBEDDING, run_token="0" * 32,
                                                   heartbeat_at=timezone.now())
    assert _ingest(document) == "rescheduled"
    assert Chunk.objects.count() == 0
    document.refresh_from_db()
    assert (document.status, document.run_token.hex, document.attempts) == ("embedding", "0" * 32, 0)


def test_require_confirmation_stops_after_chunking_with_a_preview():
    kb = KnowledgeBaseFactory(require_confirmation=True)
    [document] = services.document_upload(kb=kb, files=[upload("policy.zh.md")])
    assert _ingest(document) == "awaiting_confirmation"
    document.refresh_from_db()
    assert document.status == "awaiting_confirmation"
    assert [c.chapter_path for c in selectors.chunk_list_preview(document=document)] == POLICY_PATHS
    assert _children(document, embedding__isnull=False).count() == 0
    assert EmbeddingCache.objects.count() == 0


def test_a_confirmed_document_is_embedded():
    kb = KnowledgeBaseFactory(require_confirmation=True)
    [document] = services.document_upload(kb=kb, files=[upload("policy.zh.md")])
    _ingest(document)
    services.document_confirm(document=document)
    assert _ingest(document) == "completed"
    assert _children(document, embedding__isnull=False).count() == 5


def test_a_confirmed_document_is_embedded_whatever_attempts_its_preview_took(settings):
    """The confirmation starts a run of its own: the preview's run (here the one attempt allowed)
    finished, and counting it failed the document the moment it was confirmed."""
    settings.KNOWLEDGE_MAX_ATTEMPTS = 1
    kb = KnowledgeBaseFactory(require_confirmation=True)
    [document] = services.document_upload(kb=kb, files=[upload("policy.zh.md")])
    assert _ingest(document) == "awaiting_confirmation"
    assert Document.objects.get(pk=document.pk).attempts == 1
    services.document_confirm(document=document)
    assert _ingest(document) == "completed"
    document.refresh_from_db()
    assert (document.status, document.error_code, document.attempts) == ("completed", "", 1)
    assert _children(document, embedding__isnull=False).count() == 5


def test_confirming_a_document_not_awaiting_confirmation_is_refused():
    kb = KnowledgeBaseFactory()
    [document] = services.document_upload(kb=kb, files=[upload("plain.txt")])
    with pytest.raises(errors.InvalidDocumentState):
        services.document_confirm(document=document)
    document.refresh_from_db()
    assert document.status == "pending"


def test_a_pdf_without_text_fails_with_a_stable_code_and_a_reason():
    kb = KnowledgeBaseFactory()
    [document] = services.document_upload(kb=kb, files=[upload("no-text.pdf")])
    assert _ingest(document) == "failed"
    document.refresh_from_db()
    assert (document.status, document.error_code) == ("failed", "document_conversion_failed")
    assert document.error_message == ("Document conversion failed: The PDF has no extractable text "
                                      "(scanned pages need OCR first).")


def test_a_document_without_text_fails_as_empty():
    kb = KnowledgeBaseFactory()
    [document] = services.document_upload(kb=kb, files=[upload("empty.md", b"---\ntitle: x\n---\n<!-- nothing -->\n")])
    _ingest(document)
    document.refresh_from_db()
    assert (document.status, document.error_code) == ("failed", "document_empty")


def test_retry_puts_a_failed_document_back_in_the_queue():
    kb = KnowledgeBaseFactory()
    [document] = services.document_upload(kb=kb, files=[upload("no-text.pdf")])
    _ingest(document)
    services.document_retry(document=document)
    document.refresh_from_db()
    assert (document.status, document.error_code, document.error_message, document.attempts) == ("queued", "", "", 0)


def test_retry_of_a_document_that_did_not_fail_is_refused():
    kb = KnowledgeBaseFactory()
    [document] = services.document_upload(kb=kb, files=[upload("plain.txt")])
    _ingest(document)
    with pytest.raises(errors.InvalidDocumentState):
        services.document_retry(document=document)
    document.refresh_from_db()
    assert document.status == "completed"


def test_an_embedding_failure_fails_the_document_with_the_endpoint_message():
    with EmbeddingsEndpoint(statuses=[400]) as endpoint:
        model = EmbeddingModelFactory(provider="openai", options={"base_url": endpoint.url})
        kb = KnowledgeBaseFactory(embedding_model=model)
        [document] = services.document_upload(kb=kb, files=[upload("plain.txt")])
        _ingest(document)
    document.refresh_from_db()
    assert (document.status, document.error_code) == ("failed", "embedding_failed")
    assert document.error_message == "The embedding endpoint refused the request (HTTP 400): scripted 400"


def test_a_reupload_of_the_same_text_embeds_nothing_again():
    with EmbeddingsEndpoint() as endpoint:
        model = EmbeddingModelFactory(provider="openai", options={"base_url": endpoint.url})
        kb = KnowledgeBaseFactory(embedding_model=model)
        [first] = services.document_upload(kb=kb, files=[upload("policy.zh.md")])
        _ingest(first)
        embedded = len(endpoint.texts)
        [second] = services.document_upload(kb=kb, files=[upload("policy.zh.md")])
        assert _ingest(second) == "completed"
    assert (embedded, len(endpoint.texts)) == (5, 5)
    assert _children(second, embedding__isnull=False).count() == 5


def test_deleting_a_document_removes_its_chunks_in_every_generation():
    kb = KnowledgeBaseFactory()
    services.knowledge_base_rebuild(kb=kb)  # a building generation: ingestion writes to both
    [document] = services.document_upload(kb=kb, files=[upload("policy.zh.md")])
    _ingest(document)
    assert Chunk.objects.filter(document=document).values("generation").distinct().count() == 2
    services.document_delete(document=document)
    assert Chunk.objects.filter(document_id=document.pk).count() == 0
    assert not Document.objects.filter(pk=document.pk).exists()


def test_a_document_deleted_mid_run_is_not_written(settings):
    settings.KNOWLEDGE_EMBEDDERS = {**settings.KNOWLEDGE_EMBEDDERS,
                                    "deleting": "tests.knowledge.embedders.DeletingEmbedder"}
    model = EmbeddingModelFactory(provider="deleting")
    kb = KnowledgeBaseFactory(embedding_model=model)
    [document] = services.document_upload(kb=kb, files=[upload("policy.zh.md")])
    assert _ingest(document) == "lease_lost"
    assert Chunk.objects.filter(document_id=document.pk).count() == 0
    assert not Document.objects.filter(pk=document.pk).exists()


def test_the_watchdog_requeues_a_document_whose_heartbeat_is_stale(settings):
    settings.KNOWLEDGE_HEARTBEAT_STALE_SECONDS = 60
    kb = KnowledgeBaseFactory()
    [document] = services.document_upload(kb=kb, files=[upload("plain.txt")])
    Document.objects.filter(pk=document.pk).update(status=Document.Status.EMBEDDING, attempts=1,
                                                   run_token="1" * 32,
                                                   heartbeat_at=timezone.now() - timedelta(seconds=120))
    assert watchdog.knowledge_watchdog() == {"requeued": 1, "failed": 0, "purged": 0,
                                           "generation_indexes_built": 0, "generation_indexes_dropped": 0}
    document.refresh_from_db()
    assert (document.status, document.run_token, document.attempts) == ("embedding", None, 1)
    assert _ingest(document) == "completed"


def test_the_watchdog_leaves_fresh_work_alone(settings):
    settings.KNOWLEDGE_HEARTBEAT_STALE_SECONDS = 60
    kb = KnowledgeBaseFactory()
    [document] = services.document_upload(kb=kb, files=[upload("plain.txt")])
    Document.objects.filter(pk=document.pk).update(status=Document.Status.EMBEDDING, run_token="1" * 32,
                                                   heartbeat_at=timezone.now())
    assert watchdog.knowledge_watchdog() == {"requeued": 0, "failed": 0, "purged": 0,
                                           "generation_indexes_built": 0, "generation_indexes_dropped": 0}


def test_the_watchdog_fails_a_document_out_of_attempts(settings):
    settings.KNOWLEDGE_HEARTBEAT_STALE_SECONDS = 60
    settings.KNOWLEDGE_MAX_ATTEMPTS = 3
    kb = KnowledgeBaseFactory()
    [document] = services.document_upload(kb=kb, files=[upload("plain.txt")])
    Document.objects.filter(pk=document.pk).update(status=Document.Status.PARSING, attempts=3,
                                                   heartbeat_at=timezone.now() - timedelta(seconds=120))
    assert watchdog.knowledge_watchdog()["failed"] == 1
    document.refresh_from_db()
    assert (document.status, document.error_code) == ("failed", "ingest_stalled")
    assert document.error_message.startswith("The pipeline did not finish in 3 attempts: each time, the worker "
                                             "running it stopped before it was done")


def test_a_document_whose_worker_died_at_every_attempt_fails_saying_so(settings):
    settings.KNOWLEDGE_HEARTBEAT_STALE_SECONDS = 60
    settings.KNOWLEDGE_MAX_ATTEMPTS = 3
    kb = KnowledgeBaseFactory()
    [document] = services.document_upload(kb=kb, files=[upload("plain.txt")])
    # The third run's worker was killed mid-parse; its message, redelivered after its lease ran out, comes back.
    Document.objects.filter(pk=document.pk).update(status=Document.Status.PARSING, attempts=3, run_token="1" * 32,
                                                   heartbeat_at=timezone.now() - timedelta(seconds=120))
    assert _ingest(document) == "skipped"
    document.refresh_from_db()
    assert (document.status, document.error_code) == ("failed", "ingest_attempts_exhausted")
    assert "the worker running it stopped before it was done" in document.error_message
    assert "split it before retrying it" in document.error_message


# Rebuild


def _searchable_texts(kb):
    return sorted(selectors.chunk_queryset_searchable(kbs=[kb]).values_list("text", flat=True))


def test_a_strategy_change_shows_only_after_the_rebuild(settings):
    settings.KNOWLEDGE_RETIRED_GENERATION_GRACE_SECONDS = 0
    kb = KnowledgeBaseFactory(chunk_strategy={"strategy": "by_section", "min_chars": 0, "max_chars": 2000,
                                              "overlap_chars": 0})
    [document] = services.document_upload(kb=kb, files=[upload("policy.zh.md")])
    _ingest(document)
    before = _searchable_texts(kb)
    kb = services.knowledge_base_update(kb=kb, chunk_strategy={"strategy": "fixed", "min_chars": 0,
                                                                "max_chars": 32, "overlap_chars": 0})
    assert _searchable_texts(kb) == before
    generation = services.knowledge_base_rebuild(kb=kb)
    assert _searchable_texts(kb) == before
    assert rebuild.generation_build(generation_id=generation.pk) == "activated"
    after = _searchable_texts(kb)
    assert (len(before), len(after)) == (5, 7)
    assert max(len(text) for text in after) == 32


def test_after_the_switch_the_old_generation_is_deleted(settings):
    settings.KNOWLEDGE_RETIRED_GENERATION_GRACE_SECONDS = 0
    kb = KnowledgeBaseFactory()
    [document] = services.document_upload(kb=kb, files=[upload("plain.txt")])
    _ingest(document)
    old = selectors.generation_active(kb=kb)
    generation = services.knowledge_base_rebuild(kb=kb)
    rebuild.generation_build(generation_id=generation.pk)
    assert list(IndexGeneration.objects.filter(knowledge_base=kb).values_list("pk", "status")) == [
        (generation.pk, "active")]
    assert Chunk.objects.filter(generation_id=old.pk).count() == 0


def test_a_retired_generation_waits_for_its_grace_period(settings):
    settings.KNOWLEDGE_RETIRED_GENERATION_GRACE_SECONDS = 300
    kb = KnowledgeBaseFactory()
    [document] = services.document_upload(kb=kb, files=[upload("plain.txt")])
    _ingest(document)
    old = selectors.generation_active(kb=kb)
    rebuild.generation_build(generation_id=services.knowledge_base_rebuild(kb=kb).pk)
    assert rebuild.generation_purge() == 0
    IndexGeneration.objects.filter(pk=old.pk).update(retired_at=timezone.now() - timedelta(seconds=301))
    assert rebuild.generation_purge() == 1
    assert not IndexGeneration.objects.filter(pk=old.pk).exists()


def test_a_failed_rebuild_leaves_the_active_generation_untouched():
    with EmbeddingsEndpoint() as endpoint:
        model = EmbeddingModelFactory(provider="openai", options={"base_url": endpoint.url})
        kb = KnowledgeBaseFactory(embedding_model=model)
        [document] = services.document_upload(kb=kb, files=[upload("policy.zh.md")])
        _ingest(document)
        active = selectors.generation_active(kb=kb)
        before = _searchable_texts(kb)
        kb = services.knowledge_base_update(kb=kb, chunk_strategy={"strategy": "fixed", "max_chars": 40,
                                                                    "min_chars": 0, "overlap_chars": 0})
        endpoint.statuses = [400]
        generation = services.knowledge_base_rebuild(kb=kb)
        assert rebuild.generation_build(generation_id=generation.pk) == "failed"
    generation.refresh_from_db()
    assert (generation.status, generation.error_code) == ("failed", "embedding_failed")
    assert selectors.generation_active(kb=kb) == active
    assert _searchable_texts(kb) == before
    assert Chunk.objects.filter(generation=generation).count() == 0


def test_a_rebuild_that_a_document_cannot_enter_fails_naming_the_document(settings):
    kb = KnowledgeBaseFactory()
    documents = services.document_upload(kb=kb, files=[upload("plain.txt"), upload("policy.zh.md")])
    for document in documents:
        _ingest(document)
    kb = services.knowledge_base_update(kb=kb, chunk_strategy={"strategy": "fixed", "max_chars": 32,
                                                                "min_chars": 0, "overlap_chars": 0})
    settings.KNOWLEDGE_MAX_CHUNKS = 6  # policy.zh.md makes 7 chunks of 32 characters, plain.txt 2
    generation = services.knowledge_base_rebuild(kb=kb)
    assert rebuild.generation_build(generation_id=generation.pk) == "failed"
    generation.refresh_from_db()
    assert (generation.error_code, generation.error_message) == (
        "document_too_large_after_conversion",
        "policy.zh.md: Document too large after conversion: it makes more than 6 chunks, the cap per "
        "document (KNOWLEDGE_MAX_CHUNKS). Split the document or use larger chunks.",
    )


def test_a_rebuild_slices_a_long_documents_embedding_as_ingestion_does(settings):
    """The rebuild looked at its time slice only between documents, so one document whose
    embedding outlasted the task's soft time limit (a large file on a slow local model) failed
    every rebuild as rebuild_error. Now each task embeds at least a batch, goes on in a new task
    from the embedding cache, and nothing is embedded twice."""
    settings.KNOWLEDGE_RETIRED_GENERATION_GRACE_SECONDS = 0
    settings.KNOWLEDGE_EMBED_BATCH_SIZE = 2
    with EmbeddingsEndpoint() as endpoint:
        model = EmbeddingModelFactory(provider="openai", options={"base_url": endpoint.url})
        kb = KnowledgeBaseFactory(embedding_model=model)
        [document] = services.document_upload(kb=kb, files=[upload("policy.zh.md")])
        assert _ingest(document) == "completed"
        kb = services.knowledge_base_update(kb=kb, chunk_strategy={"strategy": "fixed", "max_chars": 40,
                                                                    "min_chars": 0, "overlap_chars": 0})
        generation = services.knowledge_base_rebuild(kb=kb)
        endpoint.texts.clear()
        endpoint.requests.clear()
        settings.KNOWLEDGE_TASK_SLICE_SECONDS = 0
        outcomes = [rebuild.generation_build(generation_id=generation.pk)]
        assert (outcomes, len(endpoint.texts)) == (["continued"], 2)
        while outcomes[-1] == "continued":
            token = IndexGeneration.objects.get(pk=generation.pk).run_token
            outcomes.append(rebuild.generation_build(generation_id=generation.pk, run_token=str(token)))
    generation.refresh_from_db()
    # A batch a task (four new passages), then a task that writes the vectors, then the switch.
    assert (outcomes, generation.status) == (["continued", "continued", "continued", "activated"],
                                             IndexGeneration.Status.ACTIVE)
    assert [len(request["input"]) for request in endpoint.requests] == [2, 2]
    assert len(set(endpoint.texts)) == 4
    assert _searchable_texts(kb) == sorted(_children(document, generation=generation).values_list("text", flat=True))


def test_only_one_rebuild_runs_at_a_time():
    kb = KnowledgeBaseFactory()
    services.knowledge_base_rebuild(kb=kb)
    with pytest.raises(errors.RebuildInProgress):
        services.knowledge_base_rebuild(kb=kb)
    assert IndexGeneration.objects.filter(knowledge_base=kb).count() == 2


def test_a_document_completed_during_a_rebuild_is_in_the_new_generation(settings):
    settings.KNOWLEDGE_RETIRED_GENERATION_GRACE_SECONDS = 0
    kb = KnowledgeBaseFactory()
    generation = services.knowledge_base_rebuild(kb=kb)
    [document] = services.document_upload(kb=kb, files=[upload("policy.zh.md")])
    _ingest(document)
    rebuild.generation_build(generation_id=generation.pk)
    assert _searchable_texts(kb) == sorted(_children(document, generation=generation).values_list("text", flat=True))
    assert len(_searchable_texts(kb)) == 5


# Vector index


def test_a_dimension_other_than_the_models_is_refused():
    model = EmbeddingModelFactory(dimension=32)
    with pytest.raises(errors.EmbeddingDimensionMismatch):
        services.knowledge_base_create(project=ProjectFactory(), name="x", embedding_model=model, embedding_dim=1536)


def test_a_local_model_must_be_registered_at_its_native_dimension():
    with pytest.raises(errors.EmbeddingDimensionMismatch):
        services.embedding_model_register(name="e5-wrong", provider="local", dimension=768)


@pytest.mark.parametrize(("options", "message"), [
    ([1, 2, 3], 'The options of embedding model m must be a JSON object, like {"batch_size": 16}, not a list.'),
    ("hello", 'The options of embedding model m must be a JSON object, like {"batch_size": 16}, not a string.'),
    ({"batch_size": "many"}, "The batch_size option of embedding model m must be a whole number of 0 or more, "
                             "not 'many'."),
    ({"delay_seconds": -1}, "The delay_seconds option of embedding model m must be a number of 0 or more, not -1."),
    ({"batch_size": "16"}, "The batch_size option of embedding model m must be a whole number of 0 or more, "
                           "not '16'."),
    ({"batch_size": 2.5}, "The batch_size option of embedding model m must be a whole number of 0 or more, "
                          "not 2.5."),
])
def test_options_the_embedder_does_not_take_are_refused_at_registration(options, message):
    with pytest.raises(errors.EmbeddingOptionsInvalid) as refused:
        services.embedding_model_register(name="m", provider="hashing", dimension=32, options=options)
    assert (refused.value.code, refused.value.status, refused.value.message) == (
        "invalid_embedding_options", 422, message)
    assert not EmbeddingModel.objects.filter(name="m").exists()


def test_an_option_the_provider_does_not_read_is_refused_at_registration():
    with pytest.raises(errors.EmbeddingOptionsInvalid) as refused:
        services.embedding_model_register(name="m", provider="local", dimension=384, options={"batchsize": 8})
    assert refused.value.message == ("Unknown option 'batchsize': the local provider takes batch_size, engine, "
                                     "query_adapter.")
    assert not EmbeddingModel.objects.filter(name="m").exists()


@pytest.mark.parametrize("key", ["api_key", "API_KEY", "token", "Authorization", "password"])
def test_a_key_typed_in_as_an_option_is_refused_and_told_where_keys_go(key):
    # Options are shown to every operator on the model's page: a key there is a key for all.
    options = {"base_url": "https://embeddings.example.com/v1", key: "sk-not-for-operators-to-read"}
    with pytest.raises(errors.EmbeddingOptionsInvalid) as refused:
        services.embedding_model_register(name="m", provider="openai", dimension=32, options=options)
    message = refused.value.message
    assert message.startswith(f"Unknown option {key!r}: the openai provider takes api_key_env, backoff_seconds, ")
    assert message.endswith("put it in an environment variable of the web server and the workers, and name that "
                            "variable in api_key_env.")
    assert "sk-not-for-operators-to-read" not in message
    assert not EmbeddingModel.objects.filter(name="m").exists()


@pytest.mark.parametrize(("options", "start"), [
    ({"api_key_env": "sk-live-abc123"}, "api_key_env must be the name of an environment variable"),
    ({"api_key_env": "SECRET_KEY"}, "api_key_env must be the name of an environment variable"),  # sent as the bearer
    ({"api_key_env": "knowledge_openai_api_key"}, "api_key_env must be the name of an environment variable"),
    ({"base_url": "https://user:sk-live-abc@embeddings.example.com/v1"}, "base_url must be the endpoint's address"),
    ({"base_url": "https://embeddings.example.com/v1?key=sk-live-abc"}, "base_url must be the endpoint's address"),
])
def test_an_openai_models_key_is_refused_wherever_it_is_typed_in(options, start):
    with pytest.raises(errors.EmbeddingOptionsInvalid) as refused:
        services.embedding_model_register(name="m", provider="openai", dimension=32,
                                          options={"base_url": "https://embeddings.example.com/v1", **options})
    assert refused.value.message.startswith(start)
    assert "sk-live-abc" not in refused.value.message
    assert not EmbeddingModel.objects.filter(name="m").exists()


def test_an_openai_model_naming_its_key_variable_is_registered():
    model = services.embedding_model_register(name="m", provider="openai", dimension=32, options={
        "base_url": "https://embeddings.example.com/v1", "api_key_env": "EMBEDDING_VENDOR_KEY"})
    assert model.options["api_key_env"] == "EMBEDDING_VENDOR_KEY"


def test_a_provider_that_does_not_say_its_options_keeps_them_but_never_a_key(settings):
    settings.KNOWLEDGE_EMBEDDERS = {**settings.KNOWLEDGE_EMBEDDERS,
                                    "custom": "tests.knowledge.embedders.UndeclaredOptionsEmbedder"}
    model = services.embedding_model_register(name="c", provider="custom", dimension=32, options={"flavour": "x"})
    assert model.options == {"flavour": "x"}
    with pytest.raises(errors.EmbeddingOptionsInvalid) as refused:
        services.embedding_model_register(name="d", provider="custom", dimension=32, options={"token": "t"})
    assert refused.value.message.startswith("Unknown option 'token'. A key is never stored here")


def test_an_openai_model_without_an_http_base_url_is_refused_at_registration():
    with pytest.raises(errors.EmbeddingOptionsInvalid) as refused:
        services.embedding_model_register(name="m", provider="openai", dimension=32,
                                          options={"base_url": "javascript:x"})
    assert refused.value.message == "Embedding model m needs an http(s) base_url option."
    assert not EmbeddingModel.objects.filter(name="m").exists()


def test_a_model_row_with_options_that_are_not_an_object_fails_ingestion_as_embedding_failed():
    kb = KnowledgeBaseFactory()
    EmbeddingModel.objects.filter(pk=kb.embedding_model_id).update(options=[1, 2, 3])  # written before the check
    [document] = services.document_upload(kb=kb, files=[upload("plain.txt")])
    _ingest(document)
    document.refresh_from_db()
    assert (document.status, document.error_code) == ("failed", "embedding_failed")
    assert document.error_message == (f"The options of embedding model {kb.embedding_model.name} must be a JSON "
                                      'object, like {"batch_size": 16}, not a list.')
    assert not Chunk.objects.filter(document=document, embedding__isnull=False).exists()


def test_the_embedding_model_of_a_knowledge_base_cannot_change():
    kb = KnowledgeBaseFactory()
    other = EmbeddingModelFactory()
    with pytest.raises(errors.EmbeddingModelFrozen):
        services.knowledge_base_update(kb=kb, embedding_model_id=other.pk)
    kb.refresh_from_db()
    assert kb.embedding_model_id != other.pk


# Routes


def test_route_knowledge_selectors_count_and_list_bound_bases():
    route = RouteFactory()
    first = KnowledgeBaseFactory(project=route.project, name="A 售后")
    second = KnowledgeBaseFactory(project=route.project, name="B 门店")
    KnowledgeBaseFactory(project=route.project, name="未绑定")
    services.route_knowledge_bind(route=route, knowledge_base=second)
    services.route_knowledge_bind(route=route, knowledge_base=first)
    services.route_knowledge_bind(route=route, knowledge_base=first)
    assert list(selectors.route_knowledge_bases(route=route)) == [first, second]
    assert selectors.route_knowledge_source_count(route=route) == 2


def test_a_route_cannot_bind_another_projects_knowledge_base():
    route = RouteFactory()
    with pytest.raises(ValidationError):
        services.route_knowledge_bind(route=route, knowledge_base=KnowledgeBaseFactory())
    assert selectors.route_knowledge_source_count(route=route) == 0
