"""The two rules every input keyed by corpus name obeys, written once.

Corpora are named everywhere (specs, probabilities, rewards, dev sets, test sets), and every layer checks
the same two things: a list of names holds each name once (:func:`check_unique_names`), and a mapping
names exactly the corpora it is for (:func:`check_exact_names`). A corpus name also becomes a file name
(``hypotheses/<corpus>.txt``), so wherever names are declared they must be safe file names
(:func:`check_corpus_name`). Each caller keeps its own words -- the
messages say what was given where -- but the rule, and the order in which names at fault are reported,
is this module's. Pure Python: every layer may import it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

__all__ = ["SAFE_NAME", "check_corpus_name", "check_exact_names", "check_unique_names", "repeated_names"]

#: A corpus name that is safe as a file name: letters, digits (Unicode ones too), ``.``, ``_`` and ``-``.
SAFE_NAME = re.compile(r"[\w.-]+")


def check_corpus_name(name: Any, where: str = "corpus name") -> str:
    """Return ``name`` if it is a safe file name, else raise ``ValueError`` naming ``where`` and the value.

    Safe: a non-empty string of letters, digits, ``.``, ``_`` and ``-``, not ``.`` or ``..`` -- so that
    ``<folder>/<name>.txt`` can never leave ``<folder>`` (no path separators, no parent directory).
    """
    if not isinstance(name, str) or not SAFE_NAME.fullmatch(name) or name in (".", ".."):
        raise ValueError(
            f"{where}: corpus name {name!r} is not a safe file name; corpus names become file names (e.g. "
            "hypotheses/<name>.txt), so use only letters, digits, '.', '_' and '-' (no path separators, not '.' "
            "or '..')."
        )
    return name


def repeated_names(names: Iterable[Any]) -> list[Any]:
    """The names that occur more than once in ``names``, sorted."""
    names = list(names)
    return sorted({name for name in names if names.count(name) > 1})


def check_unique_names(names: Iterable[Any], message: str = "Corpus names must be unique; repeated: {repeated}.",
                       **fields: Any) -> None:
    """Raise ``ValueError`` when a name occurs twice in ``names``.

    ``message`` is a ``str.format`` template: ``{repeated}`` the repeated names (sorted), ``{names}`` all of
    them, plus ``fields``.
    """
    names = list(names)
    repeated = repeated_names(names)
    if repeated:
        raise ValueError(message.format(repeated=repeated, names=names, **fields))


def check_exact_names(given: Iterable[Any], expected: Sequence[Any], *, missing: str, extra: str | None = None,
                      **fields: Any) -> None:
    """Raise ``ValueError`` unless ``given`` names exactly the names ``expected`` (in any order).

    A name of ``given`` absent from ``expected`` is reported first, with the ``extra`` template (default:
    ``missing``) -- an unknown name is usually a misspelt one, the cause of the name that is then missing --
    else a name of ``expected`` absent from ``given`` with ``missing``. Both are ``str.format``
    templates with ``{name}`` (the first name at fault), ``{missing}`` and ``{extra}`` (all of each kind, in
    the order of ``expected`` and of ``given``), ``{expected}`` and ``{given}`` (as lists), plus ``fields``.
    """
    given, expected = list(given), list(expected)
    absent = [name for name in expected if name not in given]
    unknown = [name for name in given if name not in expected]
    values = {"missing": absent, "extra": unknown, "expected": expected, "given": given, **fields}
    if unknown:
        raise ValueError((extra or missing).format(name=unknown[0], **values))
    if absent:
        raise ValueError(missing.format(name=absent[0], **values))
