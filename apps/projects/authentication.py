"""DRF authentication by operator personal API token: `Authorization: Bearer bhop_…`.

The token's scopes are on `request.auth.scopes`; views check them (apps.projects.builder).
Session-authenticated operators have `request.auth` None and every scope their project role allows.
"""

from __future__ import annotations

import hmac

from django.utils import timezone
from rest_framework import authentication, exceptions

from apps.projects.models import OperatorToken
from apps.projects.tokens import OPERATOR_TOKEN_PREFIX, operator_token_hash, operator_token_touch


class OperatorTokenAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).decode("latin-1")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != self.keyword.lower() or not token.startswith(OPERATOR_TOKEN_PREFIX):
            return None  # not ours: another authenticator (or none) decides
        hashed = operator_token_hash(token.strip())
        row = OperatorToken.objects.select_related("user").filter(token_hash=hashed).first()
        now = timezone.now()
        if (
            row is None
            or not hmac.compare_digest(row.token_hash, hashed)
            or row.revoked_at is not None
            or (row.expires_at is not None and row.expires_at <= now)
            or not row.user.is_active
        ):
            raise exceptions.AuthenticationFailed("The token is invalid, expired or revoked.")
        operator_token_touch(token=row, now=now)
        return row.user, row

    def authenticate_header(self, request):
        return self.keyword
