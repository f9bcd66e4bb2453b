"""Which unique constraint a failed write broke: services answer a race on a unique value (two
saves at once, both past the service's own check) with the error that check raises."""

from __future__ import annotations

from django.db import IntegrityError


def unique_violated(exc: BaseException | None) -> str | None:
    """The unique constraint whose violation raised `exc` — an IntegrityError, or a service's error
    raised from (or while handling) one — or None."""
    while exc is not None:
        if isinstance(exc, IntegrityError):
            return getattr(getattr(exc.__cause__, "diag", None), "constraint_name", None)
        exc = exc.__cause__ or exc.__context__
    return None
