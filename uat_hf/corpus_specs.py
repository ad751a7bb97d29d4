"""Corpus specs: which named corpora there are, their language pairs, and where each split comes from.

A :class:`CorpusSpec` names one corpus and says where its ``train``/``dev``/``test`` splits are (local
files, or a Hub dataset); :func:`corpus_specs_from_directory` makes them for a directory of
``NAME.{train,dev,test}.jsonl.gz`` files (the bundled layout), with the language pairs that the
``direction`` gives each NAME. Nothing here reads a corpus (:mod:`uat_hf.corpora` does), so this module,
and the argument parsing built on it, loads without ``datasets`` or torch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from .corpus_files import corpus_files

__all__ = [
    "BUNDLED_DIR",
    "BUNDLED_PREFIX",
    "DEFAULT_HUB_SPLITS",
    "DIRECTIONS",
    "SPLITS",
    "CorpusSpec",
    "check_split",
    "corpus_specs_from_directory",
    "language_tag",
    "resolve_bundled",
]

#: Sample corpora shipped with the package (see ``bundled/NOTICE.md``).
BUNDLED_DIR: Path = Path(__file__).parent / "bundled"
#: ``bundled:NAME`` in a path means ``uat_hf/bundled/NAME`` (the sample corpora shipped with the package).
BUNDLED_PREFIX = "bundled:"
#: The split names this library uses; Hub datasets usually call the dev split "validation".
SPLITS: tuple[str, ...] = ("train", "dev", "test")
#: The split of a Hub dataset each split reads unless the spec names one.
DEFAULT_HUB_SPLITS = {"train": "train", "dev": "validation", "test": "test"}
#: How corpus NAMEs of a directory map to language pairs (aliases included).
DIRECTIONS = {
    "multi-domain": "multi-domain",
    "many-to-one": "many-to-one",
    "m2o": "many-to-one",
    "x2en": "many-to-one",
    "one-to-many": "one-to-many",
    "o2m": "one-to-many",
    "en2x": "one-to-many",
}


@dataclass
class CorpusSpec:
    """One named corpus: where its splits come from and its language pair.

    Two ways to say where the data is:

    * Local files: ``train``/``dev``/``test`` are file paths (``.jsonl``, ``.json``, ``.tsv``, ``.csv``,
      ``.parquet``, optionally compressed, e.g. ``.jsonl.gz``).
    * A Hub dataset: ``path`` is a Hub id (``"wmt/wmt14"``) or a local directory laid out like a Hub dataset
      repository (``data/train-00000-of-00001.parquet``, ``validation.jsonl``, README YAML configs...),
      ``hub_config`` its configuration (``"de-en"``), and ``train``/``dev``/``test`` are SPLIT names
      (defaults ``train``/``validation``/``test``).

    A split value that is a directory or a Hub id (``org/name``) without ``path`` is loaded like ``path``
    with the default split name.

    Rows use the ``{"translation": {source_lang: ..., target_lang: ...}}`` layout unless ``source_field``
    and ``target_field`` name two text columns (columns already named ``source`` and ``target`` are used as
    they are). TSV/CSV files: without field names, two header-less columns, source then target (quotes are
    ordinary characters in TSV); with field names, the first line is a header.

    A split left as ``None`` (local files) is absent:
    :func:`load_corpora` skips it, :func:`load_corpus_split` refuses it.
    """

    name: str
    source_lang: str
    target_lang: str
    train: str | None = None
    dev: str | None = None
    test: str | None = None
    hub_config: str | None = None
    path: str | None = None
    source_field: str | None = None
    target_field: str | None = None
    max_examples: int | None = None

    def split_location(self, split: str) -> str | None:
        """File path (local files) or split name (``path`` set) of ``split``; ``None`` when absent."""
        check_split(split)
        location = getattr(self, split)
        if location is None and self.path is not None:
            return DEFAULT_HUB_SPLITS[split]
        return location


def language_tag(lang: str) -> str:
    """Marian's target-language tag, e.g. ``">>de<<"``."""
    return f">>{lang}<<"


def resolve_bundled(path: str | None) -> str | None:
    """``"bundled:multidomain-en-de"`` → the absolute path of that bundled directory; other values unchanged."""
    if path is None or not isinstance(path, str) or not path.startswith(BUNDLED_PREFIX):
        return path
    name = path[len(BUNDLED_PREFIX):].strip("/")
    resolved = BUNDLED_DIR / name
    if not resolved.exists():
        available = sorted(p.name for p in BUNDLED_DIR.iterdir() if p.is_dir())
        raise ValueError(f"{path!r}: no bundled data named {name!r}; available: "
                         f"{[BUNDLED_PREFIX + a for a in available]}.")
    return str(resolved)


def corpus_specs_from_directory(
    directory: str | Path,
    source_lang: str | None = None,
    target_lang: str | None = None,
    *,
    corpora: Sequence[str] | None = None,
    direction: str = "multi-domain",
    max_examples: int | None = None,
    required_split: str = "train",
) -> list[CorpusSpec]:
    """Specs for a directory of ``NAME.{train,dev,test}.jsonl.gz`` files (the bundled layout).

    Args:
        directory: e.g. ``BUNDLED_DIR / "multidomain-en-de"``.
        source_lang, target_lang: the language pair. For ``direction="multi-domain"`` both are required
            and every NAME is a domain. For ``"many-to-one"`` (alias ``"x2en"``) every NAME is a source
            language and ``target_lang`` is the shared target (default ``"en"``); for ``"one-to-many"``
            (alias ``"en2x"``) every NAME is a target language and ``source_lang`` the shared source
            (default ``"en"``). Leave the per-corpus side unset in the multilingual directions.
        corpora: names to use, in this order (default: every NAME found, sorted).
        direction: ``"multi-domain"``, ``"many-to-one"`` or ``"one-to-many"``.
        max_examples: passed to every spec (first N training pairs).
        required_split: the split every selected corpus must have; ``"test"`` admits test-only
            (out-of-domain) corpora, and the default corpus list is then every NAME with a test file.

    A split file that does not exist leaves that split ``None``; two files for one corpus and split
    (``X.train.jsonl`` beside ``X.train.jsonl.gz``) are refused with ``ValueError``.
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise FileNotFoundError(f"Corpus directory {str(directory)!r} does not exist.")
    mode = DIRECTIONS.get(direction)
    if mode is None:
        raise ValueError(f"Unknown direction {direction!r}; choose one of {sorted(set(DIRECTIONS))}.")
    check_split(required_split)
    found = corpus_files(directory, SPLITS)
    names = _select_corpora(found, corpora, directory, required_split)
    return [
        CorpusSpec(
            name=name,
            **_language_pair(mode, name, source_lang, target_lang),
            **{split: (str(found[name][split]) if split in found[name] else None) for split in SPLITS},
            max_examples=max_examples,
        )
        for name in names
    ]


def check_split(split: str) -> None:
    if split not in SPLITS:
        raise ValueError(f"Unknown split {split!r}; use one of {list(SPLITS)}.")


def _select_corpora(
    found: Mapping[str, Mapping[str, Path]], corpora: Sequence[str] | None, directory: Path, required_split: str
) -> list[str]:
    available = sorted(name for name, splits in found.items() if required_split in splits)
    names = available if corpora is None else list(corpora)
    if not names:
        raise FileNotFoundError(f"No NAME.{required_split}.* files in {str(directory)!r}.")
    for name in names:
        if required_split not in found.get(name, {}):
            where = "not found" if name not in found else "incomplete"
            raise ValueError(
                f"Corpus {name!r} {where} in {str(directory)!r}: it has no {required_split} file "
                f"({name}.{required_split}.*); available: {available}."
            )
    return names


def _language_pair(mode: str, name: str, source_lang: str | None, target_lang: str | None) -> dict[str, str]:
    if mode == "multi-domain":
        if not source_lang or not target_lang:
            raise ValueError("A multi-domain directory needs both source_lang and target_lang (e.g. 'en', 'de').")
        return {"source_lang": source_lang, "target_lang": target_lang}
    if mode == "many-to-one":
        if source_lang:
            raise ValueError("In 'many-to-one' each corpus name is its source language; give only target_lang.")
        return {"source_lang": name, "target_lang": target_lang or "en"}
    if target_lang:
        raise ValueError("In 'one-to-many' each corpus name is its target language; give only source_lang.")
    return {"source_lang": source_lang or "en", "target_lang": name}
