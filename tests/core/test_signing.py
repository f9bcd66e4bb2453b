import base64
import hashlib
import hmac

import pytest

from apps.core import signing
from apps.core.signing import BadSignature, SignatureExpired, Signer, b64decode, b64encode, hkdf_sha256

T0 = 1_800_000_000


def test_a_token_round_trips_its_body_and_expiry():
    signer = Signer("tests.alpha", ttl_seconds=300)
    token = signer.sign(b"\x00body\xff", at=T0 + 0.9)
    signed = signer.unsign(token, at=T0 + 1)
    assert (signed.body, signed.expires_at) == (b"\x00body\xff", T0 + 300)


def test_a_token_is_payload_dot_mac_in_unpadded_base64url():
    token = Signer("tests.alpha", ttl_seconds=300).sign(b"x" * 10, at=T0)
    payload, mac = token.split(".")
    assert len(b64decode(payload)) == 1 + 8 + 10
    assert len(b64decode(mac)) == 32
    assert "=" not in token and "+" not in token and "/" not in token


def test_a_token_expires_exactly_after_its_ttl():
    signer = Signer("tests.alpha", ttl_seconds=300)
    token = signer.sign(b"body", at=T0)
    assert signer.unsign(token, at=T0 + 299.999).body == b"body"
    with pytest.raises(SignatureExpired) as expired:
        signer.unsign(token, at=T0 + 300)
    assert expired.value.signed.body == b"body"


def test_the_module_clock_is_the_default(monkeypatch):
    signer = Signer("tests.alpha", ttl_seconds=300)
    monkeypatch.setattr(signing, "now", lambda: T0)
    token = signer.sign(b"body")
    monkeypatch.setattr(signing, "now", lambda: T0 + 300)
    with pytest.raises(SignatureExpired):
        signer.unsign(token)


def test_an_explicit_expiry_is_kept():
    signer = Signer("tests.alpha", ttl_seconds=300)
    token = signer.sign(b"body", expires_at=T0 + 5)
    assert signer.unsign(token, at=T0).expires_at == T0 + 5


def test_a_token_of_one_domain_never_verifies_in_another():
    token = Signer("tests.ref", ttl_seconds=300).sign(b"body", at=T0)
    with pytest.raises(BadSignature) as refused:
        Signer("tests.cursor", ttl_seconds=300).unsign(token, at=T0)
    assert not isinstance(refused.value, SignatureExpired)


def test_every_flipped_bit_is_refused():
    signer = Signer("tests.alpha", ttl_seconds=300)
    token = signer.sign(b"some body", at=T0)
    encoded_payload, encoded_mac = token.split(".")
    payload, mac = b64decode(encoded_payload), b64decode(encoded_mac)
    for index in range(len(payload)):
        for bit in range(8):
            changed = bytearray(payload)
            changed[index] ^= 1 << bit
            with pytest.raises(BadSignature):
                signer.unsign(b64encode(bytes(changed)) + "." + encoded_mac, at=T0)
    for index in range(len(mac)):
        changed = bytearray(mac)
        changed[index] ^= 1
        with pytest.raises(BadSignature):
            signer.unsign(encoded_payload + "." + b64encode(bytes(changed)), at=T0)


@pytest.mark.parametrize("token", ["", ".", "abc", "a.b.c", "!!!.???", "YQ.YQ", "YR.x" + "A" * 42,
                                   "x" * 5000 + "." + "A" * 43])
def test_malformed_tokens_are_refused(token):
    with pytest.raises(BadSignature):
        Signer("tests.alpha", ttl_seconds=300).unsign(token, at=T0)


def test_another_spelling_of_the_same_bytes_is_refused():
    signer = Signer("tests.alpha", ttl_seconds=300)
    token = signer.sign(b"ab", at=T0)  # 11 payload bytes: the last base64 character has spare bits
    payload, mac = token.split(".")
    last = payload[-1]
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    sibling = alphabet[alphabet.index(last) ^ 1]
    assert base64.urlsafe_b64decode(payload[:-1] + sibling + "=") == b64decode(payload)  # same bytes
    with pytest.raises(BadSignature):
        signer.unsign(payload[:-1] + sibling + "." + mac, at=T0)


def test_rotating_the_secret_invalidates_every_token(settings):
    signer = Signer("tests.alpha", ttl_seconds=300)
    token = signer.sign(b"body", at=T0)
    settings.SECRET_KEY = "a-rotated-secret-that-is-long-enough-0123456789"
    with pytest.raises(BadSignature):
        signer.unsign(token, at=T0)
    assert signer.unsign(signer.sign(b"body", at=T0), at=T0).body == b"body"


def test_the_old_secret_is_not_a_fallback(settings):
    signer = Signer("tests.alpha", ttl_seconds=300)
    old = settings.SECRET_KEY
    token = signer.sign(b"body", at=T0)
    settings.SECRET_KEY = "a-rotated-secret-that-is-long-enough-0123456789"
    settings.SECRET_KEY_FALLBACKS = [old]
    with pytest.raises(BadSignature):
        signer.unsign(token, at=T0)


def test_the_key_is_hkdf_of_the_secret_per_domain(settings):
    settings.SECRET_KEY = "the-secret"
    token = Signer("tests.alpha", ttl_seconds=300).sign(b"body", at=T0)
    payload, mac = token.split(".")
    key = hkdf_sha256(b"the-secret", salt=b"bailinghub.signing.v1", info=b"tests.alpha")
    expected = hmac.new(key, b"tests.alpha\x00" + b64decode(payload), hashlib.sha256).digest()
    assert b64decode(mac) == expected
    assert key != settings.SECRET_KEY.encode()


def test_hkdf_matches_rfc_5869_test_case_1():
    ikm = bytes.fromhex("0b" * 22)
    salt = bytes.fromhex("000102030405060708090a0b0c")
    info = bytes.fromhex("f0f1f2f3f4f5f6f7f8f9")
    okm = hkdf_sha256(ikm, salt=salt, info=info, length=42)
    assert okm.hex() == ("3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf"
                         "34007208d5b887185865")


@pytest.mark.parametrize("domain", ["", "ünïcode", "with\x00nul"])
def test_a_domain_is_a_plain_ascii_name(domain):
    with pytest.raises(ValueError):
        Signer(domain, ttl_seconds=300)
