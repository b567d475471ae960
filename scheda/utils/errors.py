"""Errors a user can fix.

They derive from Hydra's ``CompactHydraException`` so that ``python train.py`` prints the
message alone (one line that names the fix) instead of a stack trace.
"""

from hydra.errors import CompactHydraException


class SchedaError(CompactHydraException):
    """Base class of every error that is the user's to fix."""


class ConfigError(SchedaError, ValueError):
    """A configuration value is outside its domain."""


class DataError(SchedaError):
    """A data file is missing, truncated or malformed."""


class CheckpointError(SchedaError):
    """A checkpoint (or another output file) cannot be read or written, or does not fit the model."""


class DivergenceError(SchedaError):
    """Training produced a non-finite loss."""


class BusyError(SchedaError):
    """Another live process writes into the same run or protocol directory (``holder``: its pid,
    host and start, as its lock file says)."""

    def __init__(self, message: str, holder: str = "another process"):
        super().__init__(message)
        self.holder = holder
