"""A call the business system refused with 401 or 403: the invocation's page names the provider's
signing secret, with a link to the provider, as the first thing to check (a secret generated on
Save and never configured on the business side gave 401 invalid_signature on every call)."""

from __future__ import annotations

from django.test import Client

from apps.projects.models import Membership
from apps.tools.models import Invocation
from apps.tools.services import provider_update
from tests.projects.factories import MembershipFactory

pytest_plugins = ["tests.tools.invocation_fixtures"]

HINT = 'id="signature-refused"'


def _page(shop, inv: Invocation) -> str:
    membership = MembershipFactory(project=shop.route.project, role=Membership.Role.OWNER)
    client = Client()
    client.force_login(membership.user)
    response = client.get(f"/admin/tools/invocation/{inv.pk}/change/")
    assert response.status_code == 200
    return response.content.decode()


def test_a_call_refused_for_its_signature_names_the_providers_signing_secret(shop, dispatching):
    provider_update(provider=shop.provider, secret="not-the-business-secret-16")
    body = shop.invoke("item_read", {"item_id": "1"}).json()
    assert (body["state"], body["business_status"]) == ("business_rejected", 401)
    page = _page(shop, Invocation.objects.get(invocation_id=body["invocation_id"]))
    assert (f'{HINT}>The business system refused this call with HTTP 401 <code>invalid_signature</code>: it did '
            "not accept the hub's signature. Check the signing secret of provider "
            f'<a href="/admin/tools/toolprovider/{shop.provider.pk}/change/">shop</a>') in page.replace("&#x27;", "'")
    assert "not-the-business-secret-16" not in page


def test_a_403_names_the_signing_secret_too(shop, dispatching):
    shop.server.respond("/api/items", status=403, body=b'{"error":"forbidden"}')
    body = shop.invoke("item_read", {"item_id": "1"}).json()
    page = _page(shop, Invocation.objects.get(invocation_id=body["invocation_id"]))
    assert f"{HINT}>The business system refused this call with HTTP 403. Check the signing secret" in page


def test_another_refusal_names_no_secret(shop, dispatching):
    shop.server.respond("/api/items", status=404, body=b'{"error":"not_found"}')
    body = shop.invoke("item_read", {"item_id": "1"}).json()
    assert HINT not in _page(shop, Invocation.objects.get(invocation_id=body["invocation_id"]))
