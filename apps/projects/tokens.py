"""Operator personal API tokens (builder API): created here, stored only as SHA-256 hex."""

from __future__ import annotations

import hashlib
import secrets
from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from apps.projects.models import OperatorToken

OPERATOR_TOKEN_PREFIX = "bhop_"  # noqa: S105 -- a prefix, not a secret
LAST_USED_RESOLUTION = timedelta(seconds=60)


def operator_token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


@transaction.atomic
def operator_token_create(*, user, name: str, scopes: list[str], expires_at: datetime | None = None
                          ) -> tuple[OperatorToken, str]:
    """Create a token for `user`; returns the row and the token, which is never shown again."""
    unknown = sorted(set(scopes) - set(OperatorToken.Scope.values))
    if unknown:
        raise ValueError(f"Unknown scopes: {', '.join(unknown)}")
    token = OPERATOR_TOKEN_PREFIX + secrets.token_urlsafe(32)
    row = OperatorToken.objects.create(
        user=user,
        name=name,
        token_hash=operator_token_hash(token),
        prefix=token[: len(OPERATOR_TOKEN_PREFIX) + 6],
        scopes=sorted(set(scopes)),
        expires_at=expires_at,
    )
    return row, token


def operator_token_revoke(*, token: OperatorToken) -> OperatorToken:
    if token.revoked_at is None:
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at", "updated_at"])
    return token


def operator_token_touch(*, token: OperatorToken, now: datetime) -> None:
    """Record the token's use, at most once a minute (one UPDATE, no read)."""
    if token.last_used_at is not None and now - token.last_used_at <= LAST_USED_RESOLUTION:
        return
    OperatorToken.objects.filter(pk=token.pk).update(last_used_at=now)
    token.last_used_at = now
