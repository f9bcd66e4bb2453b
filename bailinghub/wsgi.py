import os
from collections.abc import Callable, Iterable
from typing import Any

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bailinghub.settings")

_django = get_wsgi_application()

from apps.core.middleware import CLOSE_CONNECTION  # noqa: E402  (after Django is set up)


def application(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    """Django's WSGI application. A request marked CLOSE_CONNECTION in its environ closes its
    connection under gunicorn: the start_response belongs to the response being built, whose
    `force_close` makes it send `Connection: close` and close after the body (gunicorn drops the
    application's own `Connection` header). Under another server the mark is ignored."""
    response = _django(environ, start_response)
    if environ.get(CLOSE_CONNECTION):
        force_close = getattr(getattr(start_response, "__self__", None), "force_close", None)
        if callable(force_close):
            force_close()
    return response
