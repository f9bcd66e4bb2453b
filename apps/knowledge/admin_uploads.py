"""What the console says when it refuses an upload, in one place and one shape. A file the batch
refuses is "Not uploaded: <file> — <reason>."; an upload refused whole is "Nothing was uploaded:
<reason>."; sizes are read as sizes (filesizeformat), never as byte counts. The upload form's help
and the oversize page state the limits in the same words.

The console used to show three shapes for the same refusals, as the service's API messages read
("<file> — Unsupported file type: …", "<file> is empty (0 bytes).", "Document conversion failed:
<file>: …", "File too large: <file> is 2400 bytes; the limit is 2000."). The builder API keeps
its own messages (spec/); only the console's are made here."""

from __future__ import annotations

from django.conf import settings
from django.template.defaultfilters import filesizeformat

from apps.knowledge.services import UploadRefusal

UPLOAD_TYPES = "txt, md, json, csv or pdf"


def _files(count: int) -> str:
    return f"{count} file{'' if count == 1 else 's'}"


def upload_limits() -> str:
    """The upload's limits, as the help and the refusals state them."""
    return (f"up to {_files(settings.KNOWLEDGE_UPLOAD_MAX_FILES)} at once, "
            f"{filesizeformat(settings.KNOWLEDGE_UPLOAD_MAX_BYTES)} each")


def upload_help() -> str:
    return (f"{UPLOAD_TYPES} — {upload_limits()}. Files that cannot be accepted are named with the "
            "reason; the others are uploaded.")


def _sentence(detail: str) -> str:
    """A parser's sentence after a colon: its first letter lower-cased unless it begins a word in
    capitals ("JSON"), and one full stop at the end."""
    if detail[:1].isupper() and detail[1:2].islower():
        detail = detail[0].lower() + detail[1:]
    return detail.rstrip(".") + "."


def refusal_message(refusal: UploadRefusal) -> str:
    """One refused file of a batch, by its error code; a code this does not know reads as the
    service's own message."""
    if refusal.code == "file_too_large":
        reason = (f"too large: {filesizeformat(refusal.size)}, over the limit of "
                  f"{filesizeformat(settings.KNOWLEDGE_UPLOAD_MAX_BYTES)} a file.")
    elif refusal.code == "unsupported_file_type":
        reason = f"unsupported type: {_sentence(refusal.detail)}" if refusal.detail else "unsupported type."
    elif refusal.code == "document_conversion_failed":
        reason = f"cannot be read: {_sentence(refusal.detail)}" if refusal.detail else "cannot be read."
    elif refusal.code == "document_empty":
        reason = "empty (0 bytes)." if refusal.size == 0 else "no text, only white space."
    else:
        reason = _sentence(refusal.message)
    return f"Not uploaded: {refusal.filename} — {reason}"


def batch_refusal_message(code: str, message: str) -> str:
    """An upload refused whole (the service's file_required, too_many_files)."""
    reasons = {
        "file_required": "choose at least one file.",
        "too_many_files": f"one upload takes {upload_limits()}; choose fewer files.",
        "unreadable": "the upload could not be read; choose the files again.",
    }
    return f"Nothing was uploaded: {reasons.get(code) or _sentence(message)}"


def body_too_large_message(*, max_bytes: int) -> str:
    """An upload's body over what a full batch may send (the middleware's 413 page)."""
    return (f"Nothing was uploaded: the upload is over {filesizeformat(max_bytes)}; one upload takes "
            f"{upload_limits()}. Upload fewer or smaller files.")
