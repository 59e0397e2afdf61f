"""The root of every error tally raises on purpose, and the five groups every one of them sits under.

A group says what to look at: the configuration (``ConfigurationError``), what was given to tally
(``InputError``), the database (``StoreError``), the cloud platform or a sync of it
(``PlatformError``), or the collector (``CollectorError``). Every error tally raises has exactly one
group among its ancestors (a test holds it), so a caller may catch a group, everything of tally's
(``TallyError``), or the built-in kind. Each public error keeps the built-in base that says what
kind of failure it is (``ValueError`` for bad input, ``RuntimeError`` for a failed operation,
``KeyError`` for an unknown name), so ``except ValueError`` callers keep working. The messages say
what to do. The tree is drawn in docs/architecture.md.
"""

from __future__ import annotations


class TallyError(Exception):
    """Something tally detected and explains: bad input, a refused or failed operation."""


class ConfigurationError(TallyError):
    """The configuration cannot be used (its file, an option standing for it, a tokens file, a type
    schema): change it and run again."""


class InputError(TallyError):
    """What was given to tally is refused (a request, a body, an event, an argument): nothing of it
    was used; send or give it again, corrected."""


class PlatformError(TallyError):
    """A cloud platform, or a sync of one, failed or answered what tally cannot read (a listing, a
    notification, a sync run), or a tally API process a benchmark started failed."""


# StoreError and CollectorError were public bases before the groups, raised and caught as
# ``RuntimeError`` too; they keep that base so existing ``except RuntimeError`` callers still work.
class StoreError(TallyError, RuntimeError):
    """The database failed or refused a unit of work (unreachable, busy, a query it rejected)."""


class CollectorError(TallyError, RuntimeError):
    """The collector failed: its buffer, its sending to the ingest API, or its process."""


#: The groups, in the order the documentation lists them.
GROUPS: tuple[type[TallyError], ...] = (ConfigurationError, InputError, StoreError, PlatformError, CollectorError)
