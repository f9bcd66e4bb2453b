"""Errors of the runtime turn endpoints that are not the ledger's."""

from __future__ import annotations

from apps.core.errors import ApiError


class UnsupportedOption(ApiError):
    code = "unsupported_option"
    status = 400
    message = "This option is not supported by this server."
