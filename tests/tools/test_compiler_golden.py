"""Golden files: each fixture spec compiles to exactly its recorded output.

Regenerate after an intended change with UPDATE_GOLDEN=1 and review the diff.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from apps.tools.compiler import compile_spec

FIXTURES = Path(__file__).parent / "fixtures"
SPECS = sorted(path for path in FIXTURES.iterdir() if path.suffix in (".yaml", ".json")
               and not path.name.endswith(".expected.json"))


@pytest.mark.parametrize("spec_path", SPECS, ids=[path.name for path in SPECS])
def test_fixture_compiles_to_its_golden_output(spec_path):
    expected_path = spec_path.with_name(spec_path.stem + ".expected.json")
    actual = compile_spec(spec_path.read_bytes()).as_dict()
    if os.environ.get("UPDATE_GOLDEN") == "1":
        expected_path.write_text(json.dumps(actual, indent=2, ensure_ascii=False, sort_keys=True) + "\n")
    expected = json.loads(expected_path.read_text())
    assert json.loads(json.dumps(actual)) == expected


def test_compiling_twice_gives_identical_output():
    data = (FIXTURES / "store.yaml").read_bytes()
    first = json.dumps(compile_spec(data).as_dict(), sort_keys=True)
    second = json.dumps(compile_spec(data).as_dict(), sort_keys=True)
    assert first == second


def test_yaml_and_json_of_the_same_spec_compile_alike():
    import yaml

    yaml_bytes = (FIXTURES / "store.yaml").read_bytes()
    json_bytes = json.dumps(yaml.safe_load(yaml_bytes)).encode()
    from_yaml = compile_spec(yaml_bytes).as_dict()
    from_json = compile_spec(json_bytes).as_dict()
    assert from_yaml["tools"] == from_json["tools"]
    assert from_yaml["warnings"] == from_json["warnings"]
