"""A document's chunks in the operator console: read them (chapter path, section, text), disable
and enable them, edit their text, and see every change made to them. Registered by
DocumentAdmin.get_urls; the writes go through apps.knowledge.services."""

from __future__ import annotations

from functools import partial

from django import forms
from django.contrib import messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponseNotAllowed, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse

from apps.core.bidi import bidi_formatting_found
from apps.core.errors import ApiError
from apps.knowledge import selectors, services
from apps.knowledge.chunk_overrides import text_max_chars
from apps.knowledge.models import Document
from apps.knowledge.pipeline.embedders import EmbeddingFailed

CHUNKS_ON_PAGE = 500


class ChunkTextForm(forms.Form):
    text = forms.CharField(widget=forms.Textarea(attrs={"rows": 14, "style": "width:100%;max-width:60em"}),
                           strip=True,
                           help_text="Only this chunk is re-embedded and re-indexed; its section's text follows. "
                                     "Give back the original text to remove the edit.")

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        # The browser stops where the service does (chunk_overrides checks it, and says so).
        self.fields["text"].widget.attrs["maxlength"] = str(text_max_chars())


def chunk_urls(model_admin) -> list:
    wrap = model_admin.admin_site.admin_view

    def view(fn):
        return wrap(partial(fn, model_admin))

    return [
        path("<path:object_id>/chunks/<uuid:chunk_id>/disable/", view(chunk_disable_view),
             name="knowledge_document_chunk_disable"),
        path("<path:object_id>/chunks/<uuid:chunk_id>/enable/", view(chunk_enable_view),
             name="knowledge_document_chunk_enable"),
        path("<path:object_id>/chunks/<uuid:chunk_id>/edit/", view(chunk_edit_view),
             name="knowledge_document_chunk_edit"),
        path("<path:object_id>/chunks/", view(chunk_list_view), name="knowledge_document_chunks"),
    ]


def _document(model_admin, request, object_id, *, change: bool) -> Document:
    """The document if the operator may see it (404 otherwise, as for another project's), and —
    for a change — change it (403)."""
    document = model_admin.get_object(request, unquote(object_id))
    if document is None or not model_admin.has_view_or_change_permission(request, document):
        raise Http404("No such document.")
    if change and not model_admin.has_change_permission(request, document):
        raise PermissionDenied
    return document


def _chunks_url(document: Document, chunk_id=None) -> str:
    url = reverse("admin:knowledge_document_chunks", args=[document.pk])
    return f"{url}#chunk-{chunk_id}" if chunk_id else url


def _context(model_admin, request, document: Document, **extra) -> dict:
    return {
        **model_admin.admin_site.each_context(request),
        "opts": model_admin.opts,
        "original": document,
        "subtitle": None,
        **extra,
    }


def chunk_list_view(model_admin, request, object_id):
    document = _document(model_admin, request, object_id, change=False)
    chunks = list(selectors.chunk_list_managed(document=document)[:CHUNKS_ON_PAGE])
    context = _context(
        model_admin, request, document,
        title=f"Chunks of {document.filename}",
        chunks=chunks,
        generation=chunks[0].generation if chunks else None,
        disabled_count=sum(1 for c in chunks if c.disabled),
        edited_count=sum(1 for c in chunks if c.override_id and c.override.text is not None),
        orphans=list(selectors.chunk_override_orphans(document=document)),
        edits=list(selectors.chunk_edit_list(document=document)),
        can_change=model_admin.has_change_permission(request, document),
    )
    return TemplateResponse(request, "admin/knowledge/document/chunks.html", context)


def _toggle(model_admin, request, object_id, chunk_id, *, service, done: str):
    if request.method != "POST":
        return HttpResponseNotAllowed(["POST"])
    document = _document(model_admin, request, object_id, change=True)
    try:
        chunk = selectors.chunk_get_for_document(document=document, chunk_id=chunk_id)
    except ApiError as exc:
        raise Http404(exc.message) from exc
    try:
        service(chunk=chunk, user=request.user)
    except ApiError as exc:
        model_admin.message_user(request, exc.message, messages.ERROR)
    else:
        model_admin.message_user(request, done.format(index=chunk.index), messages.SUCCESS)
    return HttpResponseRedirect(_chunks_url(document, chunk.pk))


def chunk_disable_view(model_admin, request, object_id, chunk_id):
    return _toggle(model_admin, request, object_id, chunk_id, service=services.chunk_disable,
                   done="Chunk {index} is disabled: searches and agent reads no longer return it.")


def chunk_enable_view(model_admin, request, object_id, chunk_id):
    return _toggle(model_admin, request, object_id, chunk_id, service=services.chunk_enable,
                   done="Chunk {index} is enabled again.")


def chunk_edit_view(model_admin, request, object_id, chunk_id):
    if request.method not in ("GET", "HEAD", "POST"):
        return HttpResponseNotAllowed(["GET", "HEAD", "POST"])
    document = _document(model_admin, request, object_id, change=True)
    try:
        chunk = selectors.chunk_get_for_document(document=document, chunk_id=chunk_id)
    except ApiError as exc:
        raise Http404(exc.message) from exc
    if request.method == "POST":
        form = ChunkTextForm(request.POST)
        if form.is_valid():
            try:
                services.chunk_text_edit(chunk=chunk, text=form.cleaned_data["text"], user=request.user)
            except (ApiError, EmbeddingFailed) as exc:
                form.add_error("text", getattr(exc, "message", str(exc)))
            else:
                model_admin.message_user(request, f"Chunk {chunk.index} is saved and re-embedded.",
                                         messages.SUCCESS)
                return HttpResponseRedirect(_chunks_url(document, chunk.pk))
    else:
        form = ChunkTextForm(initial={"text": chunk.text})
    # The text box obeys the controls it holds: the page quotes the text with them shown.
    context = _context(model_admin, request, document, title=f"Edit chunk {chunk.index} of {document.filename}",
                       chunk=chunk, form=form, holds_controls=bool(bidi_formatting_found(chunk.text)))
    return TemplateResponse(request, "admin/knowledge/document/chunk_edit.html", context)
