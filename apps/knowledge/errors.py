"""The knowledge app's errors, with the contract's codes and statuses (knowledge-and-memory.zh.md,
kb-chunking-hybrid-retrieval.zh.md)."""

from __future__ import annotations

from apps.core.errors import ApiError


class KnowledgeBaseNotFound(ApiError):
    code = "knowledge_base_not_found"
    status = 404
    message = "Knowledge base not found."


class DocumentNotFound(ApiError):
    code = "document_not_found"
    status = 404
    message = "Document not found."


class KnowledgeForbidden(ApiError):
    code = "forbidden"
    status = 403
    message = "Your role in this project does not allow this change."


class FileRequired(ApiError):
    code = "file_required"
    status = 422
    message = "At least one file is required."


class TooManyFiles(ApiError):
    code = "too_many_files"
    status = 422
    message = "Too many files in one upload."


class UnsupportedFileType(ApiError):
    code = "unsupported_file_type"
    status = 415
    message = "Unsupported file type."


class FileTooLarge(ApiError):
    code = "file_too_large"
    status = 413
    message = "File too large."


class DocumentConversionFailed(ApiError):
    code = "document_conversion_failed"
    status = 422
    message = "Document conversion failed."


class DocumentBlank(ApiError):
    code = "document_empty"
    status = 422
    message = "The document has no text."


class DocumentInvalid(ApiError):
    code = "invalid_document"
    status = 422
    message = "The document change is invalid."


class InvalidDocumentState(ApiError):
    code = "invalid_document_state"
    status = 409
    message = "Invalid document state."


class DocumentVectorsRemovalFailed(ApiError):
    code = "document_vectors_removal_failed"
    status = 502
    message = "Failed to remove document vectors."


class KnowledgeBaseInvalid(ApiError):
    code = "invalid_knowledge_base"
    status = 422
    message = "The knowledge base settings are invalid."


class KnowledgeBaseNameTaken(ApiError):
    code = "knowledge_base_name_taken"
    status = 409
    message = "A knowledge base with this name already exists in this project."


class EmbeddingModelNotFound(ApiError):
    code = "embedding_model_not_found"
    status = 422
    message = "embedding_model_id is not a registered embedding model."


class EmbeddingDimensionMismatch(ApiError):
    code = "embedding_dimension_mismatch"
    status = 422
    message = "embedding_dim does not match the embedding model's dimension."


class EmbeddingOptionsInvalid(ApiError):
    code = "invalid_embedding_options"
    status = 422
    message = "The embedding model's options must be a JSON object its provider accepts."


class EmbeddingModelFrozen(ApiError):
    code = "embedding_model_frozen"
    status = 422
    message = "A knowledge base's embedding model and dimension cannot change; create a new knowledge base."


class RebuildInProgress(ApiError):
    code = "rebuild_in_progress"
    status = 409
    message = "A rebuild of this knowledge base is already running."


class UrlInvalid(ApiError):
    code = "url_invalid"
    status = 422
    message = "The URL is invalid."


class UrlAddressRefused(ApiError):
    code = "url_address_refused"
    status = 422
    message = "The URL's host resolves to a private, loopback or link-local address, which is refused."


class UrlUnresolvable(ApiError):
    code = "url_unresolvable"
    status = 422
    message = "The URL's host does not resolve."


class NotUrlSource(ApiError):
    code = "not_url_source"
    status = 409
    message = "Only a document registered by URL can be fetched again."


class ChunkNotFound(ApiError):
    code = "chunk_not_found"
    status = 404
    message = "Chunk not found."


class ChunkNotEditable(ApiError):
    code = "chunk_not_editable"
    status = 409
    message = "Only a child chunk of a live index generation can be changed."


class ChunkTextInvalid(ApiError):
    code = "chunk_text_invalid"
    status = 422
    message = "The chunk text is invalid."


class SearchInvalid(ApiError):
    """A builder debug search whose body is refused (the field errors say which)."""

    code = "invalid_search"
    status = 422
    message = "The search request is invalid."


class SearchUnavailable(ApiError):
    """A debug search whose query the KB's embedding model could not embed (a remote model down or
    refusing): the embedder's message says what to check; it never holds a secret."""

    code = "knowledge_unavailable"
    status = 503
    message = "The query could not be embedded; retry shortly."

    retry_after = 5
