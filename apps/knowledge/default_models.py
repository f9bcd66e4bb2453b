"""The local embedding models every database starts with: migration 0002 registers them on a
fresh database, and apps.knowledge.services.embedding_models_restore_defaults again on a flushed
one. No imports, so the migration can read it."""

DEFAULT_EMBEDDING_MODELS = (
    {"name": "multilingual-e5-small", "provider": "local", "dimension": 384},
    {"name": "universal-sentence-encoder-multilingual", "provider": "use", "dimension": 512},
)
