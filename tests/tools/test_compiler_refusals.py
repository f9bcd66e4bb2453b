"""Specs refused as a whole: each reason has its stable code and a precise message."""

from __future__ import annotations

import json

import pytest

from apps.tools.compiler import SpecRefused, compile_spec
from apps.tools.compiler.loader import MAX_SPEC_BYTES

from .compiler_helpers import spec


def refusal(data: bytes) -> SpecRefused:
    with pytest.raises(SpecRefused) as caught:
        compile_spec(data)
    return caught.value


def test_spec_over_20_mib_is_refused():
    data = b'{"openapi": "3.0.0", "x": "' + b"a" * MAX_SPEC_BYTES + b'"}'
    error = refusal(data)
    assert error.code == "spec_too_large" and str(len(data)) in error.message


def test_empty_spec_is_refused():
    assert refusal(b"  \n").code == "spec_empty"


def test_bytes_that_are_not_utf8_are_refused():
    assert refusal(b"\xff\xfe{}").code == "spec_not_utf8"


def test_broken_json_is_refused():
    error = refusal(b'{"openapi": "3.0.0",')
    assert error.code == "spec_not_parseable" and "JSON" in error.message


def test_broken_json_is_explained_by_line_and_column():
    error = refusal(b'{"openapi": "3.0.0",\n  "info" {}}')
    assert (error.code, error.message) == (
        "spec_not_parseable", "The spec is not valid JSON (line 2, column 10: expecting ':' delimiter).")


def test_text_that_is_neither_json_nor_yaml_is_refused():
    error = refusal(b"openapi: [3.0\n  - : :")
    assert error.code == "spec_not_parseable"


def test_broken_yaml_is_explained_by_line_and_column_without_the_parsers_source_name():
    error = refusal(b"openapi: 3.0.0\ninfo: {title: x\n  version: 1\n")
    assert (error.code, error.message) == (
        "spec_not_parseable", "The spec is neither JSON nor YAML (line 3, column 10: did not find expected ',' "
                              "or '}' while parsing a flow mapping that starts at line 2, column 7).")


def test_json_with_nan_is_refused():
    assert refusal(b'{"openapi": "3.0.0", "x": NaN}').code == "spec_not_parseable"


def test_yaml_with_a_value_json_cannot_hold_is_refused():
    assert refusal(b"openapi: 3.0.0\nx: !!binary aGk=\n").code == "spec_not_parseable"


def test_yaml_alias_bomb_is_refused():
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]
    error = refusal(("openapi: 3.0.0\n" + "\n".join(lines) + "\n").encode())
    assert error.code == "spec_too_large" and "aliases" in error.message


def test_recursive_yaml_is_refused():
    error = refusal(b"openapi: 3.0.0\na: &x {b: *x}\n")
    assert error.code == "spec_not_parseable" and "recursive" in error.message


def test_top_level_list_is_refused():
    assert refusal(b"[1, 2]").code == "spec_not_openapi"


def test_document_without_openapi_field_is_refused():
    error = refusal(b'{"info": {}}')
    assert error.code == "spec_not_openapi" and error.pointer == "/openapi"


def test_swagger_2_is_refused():
    error = refusal(b'{"swagger": "2.0", "info": {}, "paths": {}}')
    assert error.code == "spec_not_openapi3" and "Swagger 2.0" in error.message


@pytest.mark.parametrize("version", ["3.2.0", "2.0", "3", "4.0.0"])
def test_other_openapi_versions_are_refused(version):
    error = refusal(json.dumps({"openapi": version, "info": {}, "paths": {}}).encode())
    assert error.code == "spec_not_openapi3" and version in error.message


def test_a_version_with_a_trailing_newline_is_refused():
    error = refusal(json.dumps({"openapi": "3.0.3\n", "info": {}, "paths": {}}).encode())
    assert error.code == "spec_not_openapi3" and "'3.0.3\\n'" in error.message


def test_structurally_invalid_spec_is_refused_with_the_location():
    data = b'{"openapi": "3.0.3", "info": {"title": "T"}, "paths": {}}'
    error = refusal(data)
    assert error.code == "spec_invalid"
    assert error.pointer == "/info" and '"version" is a required property' in error.message


def test_remote_ref_is_refused():
    data = spec({"/a": {"get": {"operationId": "a", "responses": {"200": {"$ref": "https://example.com/r.yaml"}}}}})
    error = refusal(data)
    assert error.code == "ref_remote" and error.pointer == "/paths/~1a/get/responses/200"


def test_relative_file_ref_is_refused():
    data = spec({"/a": {"get": {"operationId": "a", "responses": {"200": {"$ref": "common.yaml#/R"}}}}})
    assert refusal(data).code == "ref_remote"


def test_ref_to_nothing_is_refused():
    data = spec({"/a": {"get": {"operationId": "a", "parameters": [{"$ref": "#/components/parameters/Nope"}],
                                "responses": {"200": {"description": "ok"}}}}})
    error = refusal(data)
    assert error.code == "ref_unresolvable" and "#/components/parameters/Nope" in error.message


@pytest.mark.parametrize("index", ["\u00b2", "\u0661", "1\u00b2", "9" * 30])
def test_a_ref_into_a_list_by_an_index_that_is_not_ascii_digits_or_past_its_end_is_refused(index):
    """`isdigit()` holds for "²", which int() refuses: the import was a 500."""
    data = spec({"/a": {"get": {"operationId": "a", "parameters": [{"$ref": f"#/x-parameters/{index}"}],
                                "responses": {"200": {"description": "ok"}}}}})
    document = json.loads(data)
    document["x-parameters"] = [{"name": "q", "in": "query", "schema": {"type": "string"}}] * 2
    assert refusal(json.dumps(document).encode()).code == "ref_unresolvable"


def test_ref_loop_is_refused_with_the_chain():
    components = {"schemas": {"A": {"$ref": "#/components/schemas/B"}, "B": {"$ref": "#/components/schemas/A"}}}
    error = refusal(spec({}, components=components))
    assert error.code == "ref_loop"
    assert "#/components/schemas/A -> #/components/schemas/B -> #/components/schemas/A" in error.message \
        or "#/components/schemas/B -> #/components/schemas/A -> #/components/schemas/B" in error.message


def test_self_ref_is_refused():
    components = {"schemas": {"A": {"$ref": "#/components/schemas/A"}}}
    assert refusal(spec({}, components=components)).code == "ref_loop"


def test_overlong_ref_chain_is_refused():
    schemas = {f"S{i}": {"$ref": f"#/components/schemas/S{i + 1}"} for i in range(40)}
    schemas["S40"] = {"type": "string"}
    assert refusal(spec({}, components={"schemas": schemas})).code == "ref_too_deep"


def test_ref_text_inside_an_example_is_not_a_reference():
    schema = {"type": "object", "example": {"$ref": "https://example.com/not-a-ref"}}
    data = spec({"/a": {"post": {"operationId": "a", "responses": {"200": {"description": "ok"}},
                                 "requestBody": {"content": {"application/json": {"schema": schema}}}}}})
    assert [tool.name for tool in compile_spec(data).tools] == ["a"]


def test_recursive_schema_is_not_a_loop():
    node = {"type": "object", "properties": {"child": {"$ref": "#/components/schemas/Node"}}}
    components = {"schemas": {"Node": node}}
    data = spec({"/a": {"post": {"operationId": "a", "responses": {"200": {"description": "ok"}}, "requestBody": {
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Node"}}}}}}}, components=components)
    result = compile_spec(data)
    assert result.tools[0].input_schema["properties"]["child"] == {}
    assert "input_schema_recursion_cut" in [warning.code for warning in result.warnings]


def test_yaml_dates_become_text_like_json_would_have_them():
    data = b"""openapi: 3.0.3
info: {title: T, version: 2024-01-31}
paths:
  /a:
    get:
      operationId: a
      summary: A
      responses: {"200": {description: ok}}
"""
    result = compile_spec(data)
    assert result.api_version == "2024-01-31" and [tool.name for tool in result.tools] == ["a"]
