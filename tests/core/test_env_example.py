"""`.env.example` lists every environment variable the project reads (settings, the embedded
servers, the dev server, the demo data)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_environment_variable_the_project_reads_is_in_env_example():
    read: set[str] = set()
    for path in [*(ROOT / "bailinghub").glob("*.py"), *(ROOT / "apps").rglob("*.py")]:
        if "/migrations/" in str(path):
            continue
        text = path.read_text()
        read |= set(re.findall(r"""\benv(?:\.[a-z]+)?\(\s*["']([A-Z][A-Z0-9_]*)["']""", text))
        read |= set(re.findall(r"""os\.environ(?:\.get\(|\[)\s*["']([A-Z][A-Z0-9_]*)["']""", text))
        read |= set(re.findall(r"""_int\(\s*["']([A-Z][A-Z0-9_]*)["']""", text))
    listed = set(re.findall(r"^#?\s*([A-Z][A-Z0-9_]*)=", (ROOT / ".env.example").read_text(), re.MULTILINE))
    assert len(read) > 30
    assert sorted(read - listed) == []


def test_a_copy_of_env_example_as_dot_env_keeps_the_embedded_servers(monkeypatch):
    """Its first line says to copy it to .env, and a DATABASE_URL or REDIS_URL in .env now counts for
    `make run` and `make test` (bailinghub.embedded reads it): a copy naming compose's hosts (db,
    redis) sent them to servers that are not there. Examples of those are commented out."""
    import environ

    read: dict[str, str] = {}
    monkeypatch.setattr(environ.Env, "ENVIRON", read)
    environ.Env.read_env(ROOT / ".env.example")
    assert len(read) > 30
    assert {name: read[name] for name in ("DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL", "CELERY_RESULT_BACKEND")
            if read.get(name)} == {}
