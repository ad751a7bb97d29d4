"""How a strategy's own settings are spelled outside Python: ``--<strategy>.<setting> VALUE`` on the command line,
``strategy_settings`` in a recipe, and the older flat fields that became settings (:data:`MOVED_SETTINGS`).

A strategy's settings are not fields of any argument class (an outside strategy brings its own), so the parser
takes them out of ``argv`` and the recipe here and hands them to ``UATConfig.strategy_settings``, which the
strategy types and checks.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from ..training.balancing_arguments import MOVED_SETTINGS

__all__ = ["merged_settings", "moved_flags", "moved_recipe_settings", "strategy_flags"]


def strategy_flags(argv: Sequence[str]) -> tuple[list[str], dict[str, tuple[str, str]]]:
    """``argv`` without its ``--<strategy>.<setting> VALUE`` (or ``=VALUE``) flags, and those: setting → (the
    strategy they name, the value as text). A strategy's own settings are not fields of any argument class."""
    rest, settings, i = [], {}, 0
    while i < len(argv):
        token = argv[i]
        name, has_value, value = token[2:].partition("=")
        if token.startswith("--") and "." in name and not name.startswith("."):
            owner, _, setting = name.rpartition(".")
            if not has_value:
                if i + 1 >= len(argv):
                    raise ValueError(f"{token} needs a value.")
                value, i = argv[i + 1], i + 1
            settings[setting] = (owner, value)
        else:
            rest.append(token)
        i += 1
    return rest, settings


def moved_flags(argv: Sequence[str]) -> list[str]:
    """``argv`` with each flag of a field that became a strategy's setting (:data:`MOVED_SETTINGS`) spelled as that
    setting's ``--<strategy>.<setting>`` flag, with a warning."""
    renamed = []
    for token in argv:
        name, has_value, value = token[2:].partition("=")
        if token.startswith("--") and name in MOVED_SETTINGS:
            owner, setting = MOVED_SETTINGS[name]
            _warn_moved(f"--{name}", f"--{owner}.{setting}")
            token = f"--{owner}.{setting}" + (f"={value}" if has_value else "")
        renamed.append(token)
    return renamed


def moved_recipe_settings(mapping: Mapping[str, Any], source: str,
                          ) -> tuple[dict[str, Any], dict[str, tuple[str, Any]]]:
    """``mapping`` without the fields that became a strategy's settings (:data:`MOVED_SETTINGS`), and those as
    :func:`strategy_flags` gives them (setting → (strategy, value)), with a warning: an older recipe.yaml loads."""
    kept, moved = {}, {}
    for key, value in mapping.items():
        if key in MOVED_SETTINGS:
            owner, setting = MOVED_SETTINGS[key]
            _warn_moved(f"{key} (in {source})", f"strategy_settings: {{{setting}: ...}} (or --{owner}.{setting})")
            moved[setting] = (owner, value)
        else:
            kept[key] = value
    return kept, moved


def _warn_moved(old: str, new: str) -> None:
    warnings.warn(f"{old} is now a setting of its strategy: {new}. The old name will be removed in a later version.",
                  FutureWarning, stacklevel=3)


def merged_settings(given: Any, flags: Mapping[str, tuple[str, str]], strategy: str) -> dict[str, Any]:
    """``strategy_settings`` as the recipe (or ``--strategy_settings``) gives them, then the ``--<strategy>.<setting>``
    flags, which win; a flag naming another strategy than the run's is refused."""
    settings = dict(json.loads(given) if isinstance(given, str) else given or {})
    for setting, (owner, value) in flags.items():
        if owner not in ("strategy", strategy, strategy.split("-")[0]):
            raise ValueError(f"--{owner}.{setting} sets a setting of strategy {owner!r}, but strategy is "
                             f"{strategy!r}: write --{strategy}.{setting} (or --strategy.{setting}).")
        settings[setting] = value
    return settings
