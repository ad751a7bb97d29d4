"""Recipe and command-line field values turned into checked Python values, for the argument dataclasses.

A recipe gives ``corpus_specs`` as a YAML list of mappings and ``model_overrides`` as a YAML mapping; the
command line gives the same as JSON strings. These helpers accept both, so that ``__post_init__`` of
:class:`~uat_hf.cli.arguments.DataArguments`, :class:`~uat_hf.cli.arguments.ModelArguments` and the tools'
arguments (:mod:`uat_hf.cli.tool_arguments`) see one form, and refuse a bad value before any data is read with
a message naming the field and the value.
"""

from __future__ import annotations

import json
from dataclasses import fields
from typing import Any

from ..data.corpus_specs import CorpusSpec
from ..data.language_codes import CODE_SCHEMES
from ..utils.names import check_corpus_name, check_unique_names

#: The keys a corpus mapping may have: the fields of :class:`~uat_hf.data.corpus_specs.CorpusSpec`.
SPEC_FIELDS = {f.name for f in fields(CorpusSpec)}


def as_corpus_specs(value: Any, name: str) -> list[dict] | None:
    """A YAML list of mappings, or the same as a JSON string (command line), → list of dicts."""
    if value is None or value == "" or value == []:
        return None
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as error:
            raise ValueError(
                f"{name}: expected a list of corpus mappings (YAML list, or JSON on the command line such as "
                f"'[{{\"name\": \"kde4\", \"source_lang\": \"en\", \"target_lang\": \"de\", "
                f"\"path\": \"Helsinki-NLP/kde4\"}}]'); "
                f"could not parse {value!r}: {error}"
            ) from None
    if isinstance(value, dict):
        value = [value]
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"{name}: expected a list of corpus mappings, got {type(value).__name__} {value!r}.")
    result = []
    for i, item in enumerate(value):
        if not isinstance(item, dict):
            raise ValueError(f"{name}[{i}]: expected a mapping with CorpusSpec fields, got {item!r}.")
        unknown = sorted(set(item) - SPEC_FIELDS)
        if unknown:
            raise ValueError(
                f"{name}[{i}] ({item.get('name', '?')}): unknown field(s) {unknown}; CorpusSpec fields are "
                f"{sorted(SPEC_FIELDS)}."
            )
        missing = [key for key in ("name", "source_lang", "target_lang") if not item.get(key)]
        if missing:
            raise ValueError(f"{name}[{i}] ({item.get('name', '?')}): missing required field(s) {missing}.")
        check_corpus_name(item["name"], f"{name}[{i}] name")
        result.append(dict(item))
    check_unique_names((item["name"] for item in result),
                       "{field}: corpus names must be unique; repeated: {repeated}.", field=name)
    return result


def check_string_fields(arguments: Any, names: tuple[str, ...]) -> None:
    """Refuse a list or mapping given to one of the single-string fields ``names`` of ``arguments``, e.g.
    ``corpus_dir: [a, b]`` in a recipe, which would otherwise fail deep inside as a ``TypeError`` traceback."""
    for name in names:
        value = getattr(arguments, name)
        if isinstance(value, (list, tuple, dict)):
            hint = (" For several corpus folders, list each corpus in corpus_specs (name, source_lang, target_lang "
                    "and its train/dev/test files) instead." if name == "corpus_dir" else "")
            raise ValueError(f"{name} must be a single string, got {type(value).__name__} {value!r}.{hint}")


def as_mapping(value: Any, name: str) -> dict | None:
    """A YAML mapping, or the same as a JSON string (command line), → dict (``None`` when unset)."""
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else None
        except json.JSONDecodeError as error:
            raise ValueError(f"{name}: not a JSON object: {value!r} ({error}).") from None
    if value is not None and not isinstance(value, dict):
        raise ValueError(f"{name} must be a mapping of field: value, got {value!r}.")
    return value or None


def as_language_codes(value: Any, scheme: str) -> dict[str, str] | None:
    """``language_codes`` as a mapping of language → code, refused unless ``scheme`` uses language codes."""
    codes = as_mapping(value, "language_codes")
    if codes and scheme not in CODE_SCHEMES:
        raise ValueError(f"language_codes {codes!r} gives codes of a language-code scheme, but language_tags is "
                         f"{scheme!r}: set language_tags to one of {list(CODE_SCHEMES)}, or drop language_codes.")
    return {str(language): str(code) for language, code in codes.items()} if codes else None


def check_positive(obj: Any, *names: str) -> None:
    """Refuse a set integer field of ``obj`` below 1 (``None`` means unset and passes)."""
    for name in names:
        value = getattr(obj, name)
        if value is not None and value < 1:
            raise ValueError(f"{name} must be a positive integer (or unset), got {value!r}.")
