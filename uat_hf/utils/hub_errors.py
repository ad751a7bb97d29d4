"""Hugging Face Hub ids: what counts as one, and a clear error for one that cannot be loaded here.

:func:`is_hub_id` is the one rule by which recipes, models, tokenizers and corpora tell a Hub repository
id (``org/name``) from a local path. ``datasets`` and ``transformers`` report a Hub id that cannot be
reached (offline, or no network) as a bare ``ConnectionError`` / ``OSError`` from deep inside their
loaders; :class:`HubUnavailableError` says what was asked for and what to do instead.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

__all__ = ["HUB_ID", "HubUnavailableError", "caused_by", "hub_unavailable_message", "is_hub_id", "is_hub_unreachable"]

#: A Hub repository id: ``org/name`` (letters, digits, ``_``, ``.`` and ``-`` on each side of one slash).
HUB_ID = re.compile(r"[\w.-]+/[\w.-]+")


def is_hub_id(name: str) -> bool:
    """Whether ``name`` reads as a Hub repository id ``org/name`` and is no existing local path."""
    return bool(HUB_ID.fullmatch(name)) and not Path(name).exists()


def caused_by(error: BaseException, types: type[BaseException] | tuple[type[BaseException], ...]) -> bool:
    """Whether ``error``, or an error it was raised from or while handling (``__cause__`` / ``__context__``,
    followed to the end, each error once), is an instance of ``types``."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, types):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


class HubUnavailableError(ConnectionError, ValueError):
    """A Hub id could not be loaded: offline mode or no network, and not in the local cache.

    A ``ConnectionError`` by nature, and a ``ValueError`` so that command-line tools report it as bad input
    (``uat-train: error: ...``) before any training.
    """


def is_hub_unreachable(error: BaseException) -> bool:
    """Whether ``error`` (or an error it was raised from) says the Hub could not be reached and the files
    were not cached: ``huggingface_hub``'s ``OfflineModeIsEnabled`` / ``LocalEntryNotFoundError``."""
    from huggingface_hub.errors import LocalEntryNotFoundError, OfflineModeIsEnabled

    return caused_by(error, (LocalEntryNotFoundError, OfflineModeIsEnabled))


def hub_offline() -> bool:
    """Whether offline mode is on (``HF_HUB_OFFLINE``, or ``HF_DATASETS_OFFLINE`` for datasets)."""
    import datasets
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE or datasets.config.HF_HUB_OFFLINE)


def hub_unavailable_message(kind: str, name: str, cache: str | None) -> str:
    """``"could not load {kind} {name!r} from the Hugging Face Hub: <why>; <what to do>"``."""
    where = f" ({cache})" if cache else ""
    if hub_offline():
        why = f"offline mode is on (HF_HUB_OFFLINE) and it is not in the local cache{where}"
        fetch = "run once with network access and HF_HUB_OFFLINE unset to cache it"
    else:
        why = f"the Hub cannot be reached (no network?) and it is not in the local cache{where}"
        fetch = "run once with network access to cache it"
    return (
        f"could not load {kind} {name!r} from the Hugging Face Hub: {why}. {name!r} is not a local directory either "
        f"(relative paths start at {os.getcwd()!r}); give a local path instead, or {fetch}."
    )
