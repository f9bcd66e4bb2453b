"""Request shapes of Agent Auth v1: exact fields (unknown ones refused), exact limits."""

from __future__ import annotations

import re
import unicodedata
from typing import Any

from rest_framework import serializers

from apps.agent_auth.validators import loopback_redirect_uri_problem, route_key_is_valid
from apps.core.fields import BoundedListField, ExactFieldsSerializer, StrictCharField
from apps.core.validators import BIDI_CONTROLS

CODE_CHALLENGE_RE = re.compile(r"^[A-Za-z0-9_-]{43}$")
CODE_VERIFIER_RE = re.compile(r"^[A-Za-z0-9._~-]{43,128}$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def no_control_characters(value: str) -> None:
    if _CONTROL.search(value):
        raise serializers.ValidationError("Control characters are not allowed.")


def shown_text(value: str) -> None:
    """Text a person reads to decide (a device label or a name on the consent page, the session
    list): no control characters (C0 or C1), no line or paragraph separators (U+2028, U+2029: a
    second line where one is shown), and none of the invisible characters that steer the bidi
    algorithm (BIDI_CONTROLS, the marks too: `Shop\u200f (verified)` draws its parenthesis on the
    other side), as the console's own names are held to."""
    if any(unicodedata.category(char) in ("Cc", "Cs", "Zl", "Zp") for char in value):
        raise serializers.ValidationError("Control characters and line or paragraph separators are not allowed.")
    if any(char in BIDI_CONTROLS for char in value):
        raise serializers.ValidationError("Invisible direction controls (such as U+202E or U+200F) are not allowed: "
                                          "they make the text read other than it is.")


def _text(max_length: int, *, min_length: int | None = None, **kwargs: Any) -> serializers.CharField:
    return StrictCharField(
        max_length=max_length, min_length=min_length, trim_whitespace=False,
        validators=[no_control_characters], **kwargs,
    )


class RouteKeyListField(BoundedListField):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(child=StrictCharField(trim_whitespace=False), min_length=1, max_length=64, **kwargs)

    def to_internal_value(self, data: Any) -> list[Any]:
        keys = super().to_internal_value(data)
        bad = [key for key in keys if not route_key_is_valid(key)]
        if bad:
            raise serializers.ValidationError(
                f"'{bad[0][:64]}' is not a route key (^[a-z0-9][a-z0-9_-]{{1,63}}$, never 'auto' or '*')."
            )
        if len(set(keys)) != len(keys):
            raise serializers.ValidationError("Route keys must be unique.")
        return keys


class AuthorizationCreateSerializer(ExactFieldsSerializer):
    client_app_id = _text(64)
    redirect_uri = StrictCharField(max_length=2048, trim_whitespace=False)
    state = _text(512, min_length=8)
    requested_routes = RouteKeyListField()
    device_label = StrictCharField(max_length=128, trim_whitespace=False, validators=[shown_text])
    code_challenge = StrictCharField(trim_whitespace=False)
    code_challenge_method = serializers.ChoiceField(choices=["S256"])

    def validate_redirect_uri(self, value: str) -> str:
        problem = loopback_redirect_uri_problem(value)
        if problem:
            raise serializers.ValidationError(problem)
        return value

    def validate_code_challenge(self, value: str) -> str:
        if not CODE_CHALLENGE_RE.fullmatch(value):
            raise serializers.ValidationError("code_challenge is 43 base64url characters (S256 of the verifier).")
        return value


class PrincipalSerializer(ExactFieldsSerializer):
    id = _text(128)
    tenant = _text(128, required=False, allow_null=True)
    roles = BoundedListField(child=_text(64), max_length=64, required=False)
    audience = _text(64, required=False, allow_null=True)
    channel = _text(128, required=False, allow_null=True)

    def validate_audience(self, value: str | None) -> str | None:
        if value is not None and (not value or any(ch.isspace() for ch in value)):
            raise serializers.ValidationError("An audience is 1–64 characters without spaces.")
        return value


SUBJECT_DISPLAY_MAX_UNITS = 120


class SubjectDisplaySerializer(ExactFieldsSerializer):
    """``{name}``: 1–120 UTF-16 code units, no control characters (nor bidirectional ones)."""

    name = StrictCharField(trim_whitespace=False)

    def validate_name(self, value: str) -> str:
        units = len(value.encode("utf-16-le", "surrogatepass")) // 2
        if not value.strip() or units > SUBJECT_DISPLAY_MAX_UNITS:
            raise serializers.ValidationError(f"A name is 1–{SUBJECT_DISPLAY_MAX_UNITS} UTF-16 code units.")
        shown_text(value)
        return value


class AuthorizationApproveSerializer(ExactFieldsSerializer):
    principal = PrincipalSerializer()
    on_behalf_of = _text(191)
    allowed_routes = RouteKeyListField()
    subject_display = SubjectDisplaySerializer(required=False)

    def validate_principal(self, value: dict[str, Any]) -> dict[str, Any]:
        value.setdefault("roles", [])
        return {key: item for key, item in value.items() if item is not None}


class AuthorizationDenySerializer(ExactFieldsSerializer):
    pass


class CodeGrantSerializer(ExactFieldsSerializer):
    grant_type = serializers.ChoiceField(choices=["authorization_code"])
    client_app_id = _text(64)
    code = StrictCharField(max_length=256, trim_whitespace=False)
    redirect_uri = StrictCharField(max_length=2048, trim_whitespace=False)
    code_verifier = StrictCharField(trim_whitespace=False)

    def validate_code_verifier(self, value: str) -> str:
        if not CODE_VERIFIER_RE.fullmatch(value):
            raise serializers.ValidationError("code_verifier is 43–128 characters of [A-Za-z0-9._~-].")
        return value


class RefreshGrantSerializer(ExactFieldsSerializer):
    grant_type = serializers.ChoiceField(choices=["refresh_token"])
    client_app_id = _text(64)
    refresh_token = StrictCharField(max_length=256, trim_whitespace=False)


class RevokeSerializer(ExactFieldsSerializer):
    """The agent's revoke without a bearer: the refresh token names the session."""

    client_app_id = _text(64)
    refresh_token = StrictCharField(max_length=256, trim_whitespace=False)


class BearerRevokeSerializer(ExactFieldsSerializer):
    """The agent's revoke with its bearer, which names the session: `{}` (or no body), or the
    `{client_app_id, refresh_token}` a revoke without one sends, whole and well-formed."""

    client_app_id = _text(64, required=False)
    refresh_token = StrictCharField(max_length=256, trim_whitespace=False, required=False)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        missing = sorted({"client_app_id", "refresh_token"} - attrs.keys())
        if len(missing) == 1:
            raise serializers.ValidationError({missing[0]: ["Send client_app_id and refresh_token together, or "
                                                            "neither: the bearer names the session."]})
        return attrs


class SessionRevokeSerializer(ExactFieldsSerializer):
    """The client's revoke of one of its sessions: `{}` (or no body); the path names the session."""
