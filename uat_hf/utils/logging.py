"""uat-hf's messages, on the verbosity a Transformers user already sets.

Every module logs to a logger under ``uat_hf`` (``logging.getLogger(__name__)``), and one handler on the ``uat_hf``
logger writes them to standard error (``[uat-hf] ...``). What it shows follows Transformers' verbosity, as
Transformers' own messages do: ``transformers.logging.set_verbosity_info()`` shows uat-hf's progress too,
``set_verbosity_error()`` silences its warnings, and so do ``TRANSFORMERS_VERBOSITY`` and the Trainer's
``log_level`` (which the Trainer applies). :func:`set_verbosity` sets uat-hf's level alone (``None``: follow
Transformers again), as ``uat-train`` does for its progress lines. As with Transformers' logger, the records do not
also go to the root logger (a configured root would print them twice); :func:`enable_propagation` sends them on.
"""

from __future__ import annotations

import logging
import sys

__all__ = ["LIBRARY_LOGGER", "configure_library_logger", "enable_propagation", "get_verbosity", "set_verbosity"]

LIBRARY_LOGGER = "uat_hf"
_own_level: int | None = None


def get_verbosity() -> int:
    """The level below which uat-hf's messages are not shown: its own when set, else Transformers'."""
    if _own_level is not None:
        return _own_level
    from transformers.utils import logging as transformers_logging  # on the first message: a light import stays light

    return transformers_logging.get_verbosity()


def set_verbosity(level: int | str | None) -> None:
    """Show uat-hf's messages from ``level`` up (``logging.INFO``, ``"warning"``, ...), whatever Transformers shows;
    ``None``: follow Transformers' verbosity again."""
    global _own_level
    _own_level = logging.getLevelName(level.upper()) if isinstance(level, str) else level
    if not isinstance(_own_level, (int, type(None))):
        raise ValueError(f"Unknown log level {level!r}; use debug, info, warning, error or critical.")


def enable_propagation(enabled: bool = True) -> None:
    """Send uat-hf's records on to the root logger's handlers too (a test's ``caplog``, an application's setup)."""
    logging.getLogger(LIBRARY_LOGGER).propagate = enabled


class _CurrentStderrHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is at the time (a test or notebook may replace it after import)."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self):  # type: ignore[override]
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:
        pass


class _Formatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        level = "" if record.levelno < logging.WARNING else f"{record.levelname}: "
        return f"[uat-hf] {level}{record.getMessage()}"


def configure_library_logger() -> None:
    """Give the ``uat_hf`` logger its handler, once (the package does it on import)."""
    library = logging.getLogger(LIBRARY_LOGGER)
    if any(isinstance(handler, _CurrentStderrHandler) for handler in library.handlers):
        return
    handler = _CurrentStderrHandler()
    handler.setFormatter(_Formatter())
    handler.addFilter(lambda record: record.levelno >= get_verbosity())
    library.addHandler(handler)
    library.setLevel(logging.DEBUG)  # records are made; the handler's filter decides what shows
    library.propagate = False
