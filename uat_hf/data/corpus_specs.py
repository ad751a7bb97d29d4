"""Corpus specs: which named corpora there are, their language pairs, and where each split comes from.

A :class:`CorpusSpec` names one corpus and says where its ``train``/``dev``/``test`` splits are (local
files in a table format, OPUS Moses pairs, the TED talks TSV, or a Hub dataset at a revision), and which dev
and test pairs are carved out of the train source when there is only one split;
:func:`corpus_specs_from_directory` makes them for a directory of
``NAME.{train,dev,test}.jsonl.gz`` files (the bundled layout), with the language pairs that the
``direction`` gives each NAME. Nothing here reads a corpus (:mod:`uat_hf.data.corpora` does), so this module,
and the argument parsing built on it, loads without ``datasets`` or torch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..utils.names import check_corpus_name
from .corpus_files import corpus_files

__all__ = [
    "BUNDLED_DIR",
    "BUNDLED_PREFIX",
    "DEFAULT_HUB_SPLITS",
    "DIRECTIONS",
    "FORMATS",
    "SPLITS",
    "TED_TALKS_FILES",
    "CorpusSpec",
    "check_split",
    "corpus_specs_from_directory",
    "language_tag",
    "resolve_bundled",
]

#: Sample corpora shipped with the package (see ``bundled/NOTICE.md``).
BUNDLED_DIR: Path = Path(__file__).parents[1] / "bundled"
#: ``bundled:NAME`` in a path means ``uat_hf/bundled/NAME`` (the sample corpora shipped with the package).
BUNDLED_PREFIX = "bundled:"
#: The split names this library uses; Hub datasets usually call the dev split "validation".
SPLITS: tuple[str, ...] = ("train", "dev", "test")
#: The split of a Hub dataset each split reads unless the spec names one.
DEFAULT_HUB_SPLITS = {"train": "train", "dev": "validation", "test": "test"}
#: Values of ``CorpusSpec.format``: layouts that are not one pair per row, read by :mod:`uat_hf.data.corpus_formats`.
FORMATS: tuple[str, ...] = ("moses", "ted_talks")
#: The files of the TED talks corpus (Qi et al. 2018, ``ted_talks.tar.gz``) each split reads when ``path`` is its
#: directory.
TED_TALKS_FILES = {"train": "all_talks_train.tsv", "dev": "all_talks_dev.tsv", "test": "all_talks_test.tsv"}
#: ``datasets.load_dataset``'s ``data_files``: a file (pattern), a list of them, or split name → either.
DataFiles = str | list[str] | dict[str, str | list[str]]
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

    Where the data is:

    * Local files: ``train``/``dev``/``test`` are file paths (``.jsonl``, ``.json``, ``.tsv``, ``.csv``,
      ``.parquet``, optionally compressed, e.g. ``.jsonl.gz``).
    * A Hub dataset: ``path`` is a Hub id (``"wmt/wmt14"``) or a local directory laid out like a Hub dataset
      repository (``data/train-00000-of-00001.parquet``, ``validation.jsonl``, README YAML configs...),
      ``hub_config`` its configuration (``"de-en"``), and ``train``/``dev``/``test`` are SPLIT names
      (defaults ``train``/``validation``/``test``). ``revision`` (a branch, tag or commit, e.g. the Hub's
      parquet conversion ``refs/convert/parquet``) and ``data_files`` (a pattern, a list, or split name →
      patterns, relative to the dataset) are passed to ``datasets.load_dataset`` as they are; with
      ``data_files``, a split they do not name is absent unless given.
    * ``format: moses``: OPUS Moses pairs. ``train``/``dev``/``test`` are file prefixes: ``data/EMEA.de-en``
      reads ``data/EMEA.de-en.en`` and ``data/EMEA.de-en.de`` (suffixes ``source_lang``/``target_lang``, or
      ``source_field``/``target_field``; each file plain or ``.gz``/``.bz2``/``.xz``), line i of one the
      translation of line i of the other.
    * ``format: ted_talks``: the multi-way TED talks TSV (Qi et al. 2018): a header row of language codes,
      one talk sentence per row, missing translations ``__NULL__``. The columns are ``source_lang`` and
      ``target_lang`` (or ``source_field``/``target_field``); ``train``/``dev``/``test`` are the TSV files,
      or, with ``path`` the unpacked ``ted_talks`` directory, files in it (default
      ``all_talks_{train,dev,test}.tsv``).

    ``carve_dev``/``carve_test`` (for a source with one split, such as OPUS) carve that many pairs out of the
    train source, chosen at random with ``carve_seed`` (the same seed carves the same pairs): test first, then
    dev, and the rest trains, less any pair identical to a carved one.

    A split value that is a directory or a Hub id (``org/name``) without ``path`` is loaded like ``path``
    with the default split name.

    Rows use the ``{"translation": {source_lang: ..., target_lang: ...}}`` layout unless ``source_field``
    and ``target_field`` name two text columns (columns already named ``source`` and ``target`` are used as
    they are). TSV/CSV files: without field names, two header-less columns, source then target (quotes are
    ordinary characters in TSV); with field names, the first line is a header.

    A split left as ``None`` (local files) is absent:
    :func:`load_corpora` skips it, :func:`load_corpus_split` refuses it. Contradictory or unused fields are
    refused when the spec is made, with the corpus, the field and the value in the message.

    ``streaming: true`` reads the train split as a stream (:mod:`uat_hf.data.streams`; ``None``: the recipe's
    ``streaming``), ``num_examples`` its size in pairs where no metadata gives it (for the temperature priors).
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
    format: str | None = None
    revision: str | None = None
    data_files: DataFiles | None = None
    carve_dev: int | None = None
    carve_test: int | None = None
    carve_seed: int = 0
    streaming: bool | None = None
    num_examples: int | None = None

    def __post_init__(self) -> None:
        check_corpus_name(self.name, "CorpusSpec name")
        where = f"Corpus {self.name!r}"
        if self.format is not None and self.format not in FORMATS:
            raise ValueError(f"{where}: format {self.format!r} is not one of {list(FORMATS)} (leave it unset for "
                             "files read by their suffix, or a Hub dataset).")
        for key in ("revision", "data_files"):
            value = getattr(self, key)
            if value is not None and self.format is not None:
                raise ValueError(f"{where}: {key} {value!r} is for datasets.load_dataset; format {self.format!r} "
                                 "reads its files itself.")
            if value is not None and self.path is None:
                raise ValueError(f"{where}: {key} {value!r} needs path: the Hub id (e.g. wmt/wmt14) or local "
                                 "dataset directory it applies to.")
        if self.data_files is not None and not _is_data_files(self.data_files):
            raise ValueError(f"{where}: data_files must be a file pattern, a list of them, or a mapping of split name "
                             f"to them; got {self.data_files!r}.")
        if self.format == "moses" and self.path is not None:
            raise ValueError(f"{where}: format 'moses' reads file prefixes given as train/dev/test (e.g. train: "
                             f"data/EMEA.de-en for EMEA.de-en.en and EMEA.de-en.de), not path {self.path!r}.")
        self._check_carve(where)
        size = self.num_examples
        if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 1):
            raise ValueError(f"{where}: num_examples must be a positive number of pairs, got {size!r}.")
        if size is not None and self.streaming is False:
            raise ValueError(f"{where}: num_examples {size} is the size of a streamed corpus, but streaming is false "
                             "(a loaded corpus counts its own pairs); remove it or stream the corpus.")

    def _check_carve(self, where: str) -> None:
        for split in ("dev", "test"):
            size = self.carve_size(split)
            if size is None:
                continue
            if isinstance(size, bool) or not isinstance(size, int) or size < 1:
                raise ValueError(f"{where}: carve_{split} must be a positive number of pairs, got {size!r}.")
            if getattr(self, split) is not None:
                raise ValueError(f"{where}: carve_{split}={size} carves the {split} split out of train, but {split} "
                                 f"is given too ({getattr(self, split)!r}); keep one of them.")
        if isinstance(self.carve_seed, bool) or not isinstance(self.carve_seed, int):
            raise ValueError(f"{where}: carve_seed must be an integer, got {self.carve_seed!r}.")
        if not self.carves and self.carve_seed != 0:
            raise ValueError(f"{where}: carve_seed {self.carve_seed!r} has no effect without carve_dev or carve_test.")
        if self.carves and self.split_location("train") is None:
            raise ValueError(f"{where}: carve_dev/carve_test carve pairs out of the train split, but train is not "
                             "given.")

    @property
    def carves(self) -> bool:
        """Whether dev or test pairs are carved out of the train source (which then loses them)."""
        return self.carve_dev is not None or self.carve_test is not None

    def carve_size(self, split: str) -> int | None:
        """How many pairs of the train source ``split`` is carved from (``None``: not carved; train never is)."""
        check_split(split)
        return None if split == "train" else getattr(self, f"carve_{split}")

    def split_location(self, split: str) -> str | None:
        """File path or prefix (local files), file name (``ted_talks`` with ``path``) or split name (``path``
        set) of ``split``, the train location for a carved split; ``None`` when absent."""
        if self.carve_size(split) is not None:
            return self.split_location("train")
        location = getattr(self, split)
        if location is not None or self.path is None:
            return location
        if self.format == "ted_talks":
            return TED_TALKS_FILES[split]
        default = DEFAULT_HUB_SPLITS[split]
        if self.data_files is not None:
            named = self.data_files if isinstance(self.data_files, Mapping) else ("train",)  # datasets' default
            return default if default in named else None
        return default


def _is_data_files(value: object) -> bool:
    def patterns(item: object) -> bool:
        return isinstance(item, str) or (isinstance(item, list) and all(isinstance(p, str) for p in item))

    if isinstance(value, Mapping):
        return bool(value) and all(isinstance(k, str) and patterns(v) for k, v in value.items())
    return patterns(value)


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
    for name in names:
        check_corpus_name(name, f"corpus_dir {str(directory)!r}, file {found[name][required_split].name!r}")
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
