"""The store's errors, and the one place each backend turns its driver's errors into them.

Code outside ``store/`` catches only these classes: it never imports a database driver to tell a
deadlock from a lost connection. Each backend lists its driver's errors once, as rules for
``map_exceptions``, and wraps its connections and units of work in it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from tally_pipeline.core.errors import ConfigurationError
from tally_pipeline.core.errors import StoreError as StoreError  # the group; its members are below
from tally_pipeline.redaction import redact


class UnsupportedDatabase(ConfigurationError, ValueError):
    """A database URL no backend opens."""

    def __init__(self, url: str):
        super().__init__(f"unsupported database URL {redact(url)!r}: give duckdb:///PATH (an embedded file) or "
                         "postgresql://USER@HOST/DB, in --database, $TALLY_DATABASE or the config's database")


class StoreUnavailable(StoreError):
    """The database cannot be reached or lost the connection; nothing of the unit was committed."""


class StoreBusy(StoreError):
    """The database stayed locked or conflicted past the retry budget; nothing was committed."""


class TransientConflict(StoreError):
    """Raised by a backend for a conflict that a retry of the whole unit can resolve."""


class TransactionFailed(StoreError):
    """The database refused the transaction itself (not one row's data); nothing was committed.

    Not retried: a retry would meet the same refusal. Callers that isolate bad rows (the ledger
    poster) let it through instead of blaming an entity for it.
    """


#: A rule: a driver error class and what it becomes. The factory may return ``None`` for an
#: instance it does not claim (a message test), which lets later rules, then the error itself, through.
Rule = tuple[type[BaseException], Callable[[BaseException], StoreError | None]]


@contextmanager
def map_exceptions(rules: Sequence[Rule]) -> Iterator[None]:
    """Re-raise a driver error raised in the block as the store error of the first rule claiming it.

    Rules are tried in order, so a subclass (a deadlock) goes before its base (any operational
    error). The driver error stays attached as ``__cause__``. Store errors and errors no rule
    claims pass unchanged: a row the database refuses is the caller's to report.
    """
    try:
        yield
    except StoreError:
        raise
    except Exception as exc:  # noqa: BLE001 - re-raised below, translated or as it was
        for driver_error, make in rules:
            if isinstance(exc, driver_error):
                translated = make(exc)
                if translated is not None:
                    raise translated from exc
        raise
