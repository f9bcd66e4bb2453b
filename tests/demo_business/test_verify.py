"""The copyable signature helper: pure functions, no database."""

from __future__ import annotations

import ast
import hashlib
import hmac
import sys
from pathlib import Path

import pytest

from apps.demo_business import verify
from apps.demo_business.verify import InvalidSignature, bailing_headers, canonical_string, sign_request, verify_request

SECRET = "s3cret-provider-key"
NOW = 1_795_000_000
TARGET = "/demo-business/products?query=%E8%80%B3%E6%9C%BA"


def signed(**overrides):
    options = {"secret": SECRET, "method": "POST", "path_with_query": "/demo-business/refunds",
               "body": b'{"amount":1}', "timestamp": NOW}
    options.update(overrides)
    return sign_request(**options)


def check(headers, **overrides):
    options = {"secret": SECRET, "method": "POST", "path_with_query": "/demo-business/refunds",
               "body": b'{"amount":1}', "headers": headers, "now": NOW}
    options.update(overrides)
    verify_request(**options)


def test_canonical_string_is_the_documented_one():
    assert canonical_string(timestamp=NOW, method="get", path_with_query=TARGET, body=b"") == (
        f"v1\n{NOW}\nGET\n{TARGET}\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")


def test_signature_is_hmac_sha256_of_the_canonical_string_in_hex():
    body = b'{"note":"hi"}'
    expected = hmac.new(SECRET.encode(), f"v1\n{NOW}\nPOST\n/x/notes\n{hashlib.sha256(body).hexdigest()}".encode(),
                        hashlib.sha256).hexdigest()
    assert signed(path_with_query="/x/notes", body=body) == {
        "X-Bailing-Signature": f"v1={expected}", "X-Bailing-Timestamp": str(NOW)}


def test_a_signed_request_verifies():
    assert check(signed()) is None


def test_header_names_are_matched_case_insensitively():
    headers = {name.lower(): value for name, value in signed().items()}
    assert check(headers) is None


@pytest.mark.parametrize("field,value", [
    ("body", b'{"amount":2}'),
    ("path_with_query", "/demo-business/refunds?x=1"),
    ("method", "PUT"),
    ("secret", "another-secret"),
])
def test_a_changed_request_or_secret_is_rejected(field, value):
    with pytest.raises(InvalidSignature, match="does not match"):
        check(signed(), **{field: value})


@pytest.mark.parametrize("skew", [301, -301])
def test_a_timestamp_more_than_300_seconds_off_is_rejected(skew):
    with pytest.raises(InvalidSignature, match="skew"):
        check(signed(timestamp=NOW + skew))


@pytest.mark.parametrize("skew", [300, -300])
def test_a_timestamp_300_seconds_off_is_accepted(skew):
    assert check(signed(timestamp=NOW + skew), now=NOW) is None


@pytest.mark.parametrize("missing", ["X-Bailing-Signature", "X-Bailing-Timestamp"])
def test_a_missing_header_is_rejected(missing):
    headers = signed()
    del headers[missing]
    with pytest.raises(InvalidSignature, match="missing"):
        check(headers)


@pytest.mark.parametrize("signature", ["", "v2=" + "0" * 64, "v1=" + "A" * 64, "v1=abc", "sha256=" + "0" * 64])
def test_a_malformed_signature_header_is_rejected(signature):
    with pytest.raises(InvalidSignature, match="not v1="):
        check({**signed(), "X-Bailing-Signature": signature})


@pytest.mark.parametrize("timestamp", ["", "12.5", "-5", "1e9", "١٧٩٥٠٠٠٠٠٠", "9" * 13])
def test_a_malformed_timestamp_is_rejected(timestamp):
    with pytest.raises(InvalidSignature, match="unix seconds"):
        check({**signed(), "X-Bailing-Timestamp": timestamp})


def test_any_of_several_secrets_verifies_during_a_rotation():
    assert check(signed(secret="old-key"), secret=["new-key", "old-key"]) is None


def test_an_empty_secret_never_verifies():
    with pytest.raises(InvalidSignature, match="no signing secret"):
        check(signed(secret=""), secret="")


def test_the_hub_headers_are_read_beside_the_signature():
    assert bailing_headers({"x-bailing-tool-scope": "shop.orders.read", "X-Bailing-Job-Id": "job-9",
                            "X-Bailing-On-Behalf-Of": "王芳", "X-Bailing-Idempotency-Key": "k1"}) == (
        verify.BailingHeaders(tool_scope="shop.orders.read", job_id="job-9", on_behalf_of="王芳", idempotency_key="k1"))


def test_the_helper_imports_only_the_standard_library():
    tree = ast.parse(Path(verify.__file__).read_text())
    modules = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
               for alias in node.names}
    modules |= {node.module.split(".")[0] for node in ast.walk(tree)
                if isinstance(node, ast.ImportFrom) and node.level == 0}
    assert modules - {"__future__"} <= set(sys.stdlib_module_names)
    assert modules >= {"hmac", "hashlib"}


def test_a_known_vector_for_implementations_to_mirror():
    assert signed() == {"X-Bailing-Signature": "v1=690840eca16d429063bb79b5b4088426605572d1dc31211a41c9db6156c9f914",
                        "X-Bailing-Timestamp": "1795000000"}


@pytest.mark.parametrize("on_behalf_of", ["مستخدم@example.com", "王芳", "50%41off@example.com", "ada@example.com", ""])
@pytest.mark.parametrize("scope", ["shop.orders.read", "商店.订单", "shop.%41"])
def test_the_hubs_informational_headers_reach_the_backend_as_they_were(on_behalf_of, scope):
    """A non-ASCII end user went percent-encoded and an ASCII one with a "%" went raw: the shop
    stored "%D9%85…@example.com" as a note's author, and no decoding could serve both."""
    from apps.tools.dispatch import request_build

    request = request_build(base_url="https://shop.example", arguments={}, secret="s" * 16, job_id="job-1",
                            idempotency_key="k1", on_behalf_of=on_behalf_of, timestamp=1_700_000_000,
                            compiled={"method": "GET", "path": "/orders", "scope": scope, "parameter_locations": {}})
    assert all(value.isascii() for value in request.headers.values())
    headers = bailing_headers(request.headers)
    assert (headers.on_behalf_of, headers.tool_scope) == (on_behalf_of, scope)
