"""The demo shop mounted and keyed for each test, and a client that signs like the hub does."""

from __future__ import annotations

import importlib
import json
import time
from typing import Any

import pytest
from django.test import Client
from django.urls import clear_url_caches

import bailinghub.urls
from apps.demo_business.verify import sign_request

TEST_SECRET = "demo-shop-test-signing-key-7f3a"


def mount(settings, *, enabled: bool) -> None:
    """Re-evaluate the root URLconf with the demo switched on or off, as a fresh process would."""
    settings.DEMO_BUSINESS_ENABLED = enabled
    importlib.reload(bailinghub.urls)
    clear_url_caches()


@pytest.fixture
def mounted(settings):
    original = settings.DEMO_BUSINESS_ENABLED
    settings.DEMO_BUSINESS_SIGNING_SECRET = TEST_SECRET
    mount(settings, enabled=True)
    yield
    mount(settings, enabled=original)


class ShopClient:
    """Sends requests signed as the hub's dispatcher signs them."""

    def __init__(self, client: Client) -> None:
        self.client = client

    def headers(self, method: str, target: str, body: bytes, *, secret: str = TEST_SECRET,
                timestamp: int | None = None, key: str | None = None, **extra: str) -> dict[str, str]:
        signed = sign_request(secret=secret, method=method, path_with_query=target, body=body,
                              timestamp=int(time.time()) if timestamp is None else timestamp)
        headers = {**signed, "X-Bailing-Tool-Scope": extra.pop("scope", "shop.test"),
                   "X-Bailing-Job-Id": extra.pop("job_id", "job-1"),
                   "X-Bailing-On-Behalf-Of": extra.pop("on_behalf_of", "alice@example.com"), **extra}
        if key is not None:
            headers["X-Bailing-Idempotency-Key"] = key
        return headers

    def get(self, target: str, **options: Any):
        return self.client.get(target, headers=self.headers("GET", target, b"", **options))

    def post(self, target: str, payload: Any, *, key: str | None = "key-1", raw: bytes | None = None,
             **options: Any):
        body = raw if raw is not None else json.dumps(payload, ensure_ascii=False).encode("utf-8")
        return self.client.post(target, data=body, content_type="application/json",
                                headers=self.headers("POST", target, body, key=key, **options))


@pytest.fixture
def shop(mounted, client) -> ShopClient:
    return ShopClient(client)
