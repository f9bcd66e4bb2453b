"""Which unique constraint a failed write broke: services answer a race on a unique value (two
saves at once, both past the service's own check) with the error that check raises."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from django.db import IntegrityError, transaction


def unique_violated(exc: BaseException | None) -> str | None:
    """The unique constraint whose violation raised `exc` — an IntegrityError, or a service's error
    raised from (or while handling) one — or None."""
    while exc is not None:
        if isinstance(exc, IntegrityError):
            return getattr(getattr(exc.__cause__, "diag", None), "constraint_name", None)
        exc = exc.__cause__ or exc.__context__
    return None


@contextmanager
def unique_race(constraint: str, error: Callable[[], Exception]) -> Iterator[None]:
    """Run a write in its own savepoint; when it breaks `constraint` (another save took the value
    since the caller's own check), raise `error()` — the check's error — instead of the
    IntegrityError (a 500). Any other integrity failure stays what it is."""
    try:
        with transaction.atomic():
            yield
    except IntegrityError as exc:
        if unique_violated(exc) == constraint:
            raise error() from exc
        raise
