"""Signing secrets: encrypted with the first key, readable with any, rotated onto the newest."""

from __future__ import annotations

import pytest
from cryptography.fernet import Fernet
from django.core.exceptions import ImproperlyConfigured

from apps.tools import services
from apps.tools.crypto import SecretUnreadable, secret_decrypt, secret_encrypt
from apps.tools.models import ToolProvider

from .factories import ToolProviderFactory

OLD, NEW = Fernet.generate_key().decode(), Fernet.generate_key().decode()


def test_secret_round_trips(settings):
    settings.TOOL_SECRET_KEYS = [NEW]
    token = secret_encrypt("abc")
    assert token != "abc" and secret_decrypt(token) == "abc"


def test_an_old_key_still_decrypts_after_a_new_one_is_put_first(settings):
    settings.TOOL_SECRET_KEYS = [OLD]
    token = secret_encrypt("abc")
    settings.TOOL_SECRET_KEYS = [NEW, OLD]
    assert secret_decrypt(token) == "abc"


def test_a_secret_no_key_decrypts_is_reported(settings):
    settings.TOOL_SECRET_KEYS = [OLD]
    token = secret_encrypt("abc")
    settings.TOOL_SECRET_KEYS = [NEW]
    with pytest.raises(SecretUnreadable):
        secret_decrypt(token)


def test_missing_keys_outside_debug_is_a_configuration_error(settings):
    settings.TOOL_SECRET_KEYS = []
    settings.DEBUG = False
    with pytest.raises(ImproperlyConfigured):
        secret_encrypt("abc")


def test_a_key_that_is_not_a_fernet_key_is_a_configuration_error(settings):
    settings.TOOL_SECRET_KEYS = ["not-a-key"]
    with pytest.raises(ImproperlyConfigured):
        secret_encrypt("abc")


@pytest.mark.django_db
def test_rotation_reencrypts_every_secret_with_the_newest_key(settings):
    settings.TOOL_SECRET_KEYS = [OLD]
    provider = ToolProviderFactory(secret="rotate-me-of-16-chars")
    settings.TOOL_SECRET_KEYS = [NEW, OLD]
    assert services.provider_secrets_rotate() == 1
    settings.TOOL_SECRET_KEYS = [NEW]
    assert secret_decrypt(ToolProvider.objects.get(pk=provider.pk).secret_encrypted) == "rotate-me-of-16-chars"
