"""The errors the entry points (the API, the commands, the Dagster wiring) answer or translate.

One place to import them from, so an entry point does not reach into a service module for its
exception type. Each is a ``TallyError`` (``core/errors.py``) under one of its five groups, which are
here too; the tree is in docs/architecture.md.
"""

from __future__ import annotations

from tally_pipeline.config import ConfigError as ConfigError
from tally_pipeline.config import MisconfiguredCloud as MisconfiguredCloud
from tally_pipeline.config import UnknownCloud as UnknownCloud
from tally_pipeline.core.errors import CollectorError as CollectorError
from tally_pipeline.core.errors import ConfigurationError as ConfigurationError
from tally_pipeline.core.errors import InputError as InputError
from tally_pipeline.core.errors import PlatformError as PlatformError
from tally_pipeline.core.errors import TallyError as TallyError
from tally_pipeline.services.ingest import BatchTooLarge as BatchTooLarge
from tally_pipeline.services.landing import LandingFileError as LandingFileError
from tally_pipeline.services.landing import LandingPathError as LandingPathError
from tally_pipeline.services.reconciliation import LockLost as LockLost
from tally_pipeline.services.reconciliation import SyncInProgress as SyncInProgress
from tally_pipeline.services.reconciliation_launch import ShuttingDown as ShuttingDown
from tally_pipeline.store.errors import StoreBusy as StoreBusy
from tally_pipeline.store.errors import StoreError as StoreError
from tally_pipeline.store.errors import StoreUnavailable as StoreUnavailable
from tally_pipeline.store.errors import TransactionFailed as TransactionFailed
from tally_pipeline.store.errors import TransientConflict as TransientConflict
