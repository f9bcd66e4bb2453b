"""The ingestion pipeline's stages. parsers/ and chunkers/ are pure (bytes and text in, frozen
dataclasses out); embedders/ turn text into vectors; index.py writes chunks and vectors."""
