"""Form posts to the browser pages in a charset that is not a text encoding are refused (415,
an HTML page) before anything decodes them; a real text charset is left to Django."""

from __future__ import annotations

import pytest
from django.test import Client

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("path", ["/admin/login/", "/agent-auth/authorize", "/agent-auth/login"])
@pytest.mark.parametrize("charset", ["rot13", "zlib", "base64", "hex"])
def test_a_form_in_a_codec_that_is_not_text_is_415_html(path, charset):
    client = Client(raise_request_exception=False)
    response = client.generic("POST", path, b"username=%C3%A9&password=x",
                              content_type=f"application/x-www-form-urlencoded; charset={charset}")
    assert response.status_code == 415
    assert response["Content-Type"].startswith("text/html")


def test_a_form_in_latin1_is_read_by_django():
    client = Client(raise_request_exception=False)
    response = client.generic("POST", "/admin/login/", b"username=%E9&password=x",
                              content_type="application/x-www-form-urlencoded; charset=latin-1")
    assert response.status_code not in (415, 500)
