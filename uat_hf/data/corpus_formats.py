"""Readers for the layouts the paper's corpora come in that are not one pair per row: OPUS Moses pairs and the
multi-way TED talks TSV. Each gives a Dataset with exactly two string columns, ``source`` and ``target``.

* **OPUS Moses** (``moses/de-en.txt.zip`` on opus.nlpl.eu, unpacked): two aligned text files, ``X.en`` and
  ``X.de``, line i of one the translation of line i of the other. Files whose line counts differ are refused
  (naming both files and both counts) rather than paired off by position, which would shift every pair after
  the first missing line. Lines are split at ``\\n`` only, so a stray ``\\r`` or Unicode line separator inside
  a sentence cannot misalign the two sides.
* **TED talks** (Qi et al. 2018, ``all_talks_{train,dev,test}.tsv``; the source of TED-8): a header row of
  language codes, one talk sentence per row, a missing translation written ``__NULL__`` (or ``_ _ NULL _ _``,
  or left empty). A corpus is one (source column, target column) pair; rows missing either side are dropped
  and how many is logged.

Both are cached by ``datasets``: Moses pairs under a key that includes each file's size and modification
time, so an edited file is read again.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from itertools import zip_longest
from pathlib import Path

import datasets
import fsspec

from .corpus_files import csv_kwargs
from .corpus_specs import CorpusSpec

__all__ = ["MOSES_COMPRESSIONS", "TED_NULL_MARKERS", "CorpusFormatError", "moses_files", "read_format",
           "read_moses", "read_ted_talks"]

logger = logging.getLogger(__name__)

#: Compressions a Moses file may have (none first): ``X.en``, ``X.en.gz``, ``X.en.bz2``, ``X.en.xz``.
MOSES_COMPRESSIONS: tuple[str, ...] = ("", ".gz", ".bz2", ".xz")
#: How the TED talks TSV marks a sentence without a translation (an empty cell counts too).
TED_NULL_MARKERS: tuple[str, ...] = ("__NULL__", "_ _ NULL _ _")
_PAIR_FEATURES = datasets.Features({"source": datasets.Value("string"), "target": datasets.Value("string")})


class CorpusFormatError(ValueError):
    """A corpus file that does not have its format's shape (raised where the rows are read)."""


def read_format(spec: CorpusSpec, split: str, location: str, cache_dir: str | None) -> datasets.Dataset:
    """The ``source``/``target`` pairs at ``location`` (``spec.split_location``) in ``spec.format``."""
    where = f"Corpus {spec.name!r} split {split!r}"
    source, target = spec.source_field or spec.source_lang, spec.target_field or spec.target_lang
    if spec.format == "moses":
        return read_moses(location, source, target, where=where, cache_dir=cache_dir)
    file = Path(spec.path) / location if spec.path is not None else Path(location)
    if not file.is_file():
        raise FileNotFoundError(f"{where}: TED talks file {str(file)!r} does not exist.")
    return read_ted_talks(file, source, target, where=where, cache_dir=cache_dir)


# --- OPUS Moses ----------------------------------------------------------------------------------------------


def moses_files(prefix: str, source_suffix: str, target_suffix: str, *, where: str) -> tuple[Path, Path]:
    """``PREFIX.SOURCE`` and ``PREFIX.TARGET``, each plain or compressed; refuses a missing or doubled side."""
    found = []
    for suffix in (source_suffix, target_suffix):
        candidates = [Path(f"{prefix}.{suffix}{compression}") for compression in MOSES_COMPRESSIONS]
        present = [path for path in candidates if path.is_file()]
        if not present:
            raise FileNotFoundError(
                f"{where}: Moses file {prefix}.{suffix} not found (nor with .gz, .bz2 or .xz); the spec's value "
                f"{prefix!r} is the prefix before the language suffix (e.g. data/EMEA.de-en for EMEA.de-en.en)."
            )
        if len(present) > 1:
            raise ValueError(f"{where}: {[str(p) for p in present]} are the same side in two files; keep one.")
        found.append(present[0])
    return found[0], found[1]


def read_moses(prefix: str, source_suffix: str, target_suffix: str, *, where: str,
               cache_dir: str | None = None) -> datasets.Dataset:
    """The pairs of the aligned Moses files ``PREFIX.SOURCE`` / ``PREFIX.TARGET`` (see :func:`moses_files`)."""
    source_file, target_file = moses_files(prefix, source_suffix, target_suffix, where=where)
    stamps = tuple((os.stat(f).st_size, os.stat(f).st_mtime_ns) for f in (source_file, target_file))
    try:
        return datasets.Dataset.from_generator(
            _moses_rows,
            features=_PAIR_FEATURES,
            cache_dir=cache_dir,
            gen_kwargs={"source_file": str(source_file), "target_file": str(target_file), "stamps": stamps},
        )
    except datasets.exceptions.DatasetGenerationError as error:
        if isinstance(error.__cause__, CorpusFormatError):
            raise CorpusFormatError(f"{where}: {error.__cause__}") from None
        raise


def _moses_rows(source_file: str, target_file: str, stamps: tuple) -> Iterator[dict[str, str]]:
    """Pairs line by line; ``stamps`` (sizes, mtimes) only keys the cache."""
    with (fsspec.open(source_file, "rb", compression="infer") as source,
          fsspec.open(target_file, "rb", compression="infer") as target):
        for line, (s, t) in enumerate(zip_longest(source, target), start=1):
            if s is None or t is None:
                source_lines = line - 1 + (s is not None) + sum(1 for _ in source)
                target_lines = line - 1 + (t is not None) + sum(1 for _ in target)
                raise CorpusFormatError(
                    f"the Moses files are not aligned: {source_file!r} has {source_lines} lines but "
                    f"{target_file!r} has {target_lines}; line i of one must be the translation of line i of the "
                    "other (were they cut or filtered separately?)."
                )
            yield {"source": _decode(s, source_file, line), "target": _decode(t, target_file, line)}


def _decode(raw: bytes, file: str, line: int) -> str:
    try:
        return raw.removesuffix(b"\n").removesuffix(b"\r").decode("utf-8")
    except UnicodeDecodeError as error:
        raise CorpusFormatError(
            f"{file!r} is not valid UTF-8 text: line {line} has the byte 0x{raw[error.start]:02x} at byte "
            f"{error.start + 1}. Convert the file to UTF-8 or fix that line."
        ) from None


# --- TED talks TSV ---------------------------------------------------------------------------------------------


def read_ted_talks(file: Path, source_column: str, target_column: str, *, where: str,
                   cache_dir: str | None = None) -> datasets.Dataset:
    """The rows of a TED talks TSV that have both ``source_column`` and ``target_column`` translations."""
    with fsspec.open(str(file), "rt", compression="infer", encoding="utf-8") as f:
        columns = f.readline().rstrip("\r\n").split("\t")
    for side, column in (("source", source_column), ("target", target_column)):
        if column not in columns:
            raise CorpusFormatError(f"{where}: {str(file)!r} has no {side} language column {column!r}; its columns: "
                                    f"{columns}. Set {side}_field to the column's name if it differs from "
                                    f"{side}_lang.")
    if source_column == target_column:
        raise CorpusFormatError(f"{where}: source and target are the same column {source_column!r}.")
    table = datasets.load_dataset("csv", data_files=str(file), split="train", cache_dir=cache_dir,
                                  usecols=[source_column, target_column],
                                  **csv_kwargs(file, source_column, target_column))
    pairs = table.rename_columns({source_column: "source", target_column: "target"}).select_columns(
        ["source", "target"])
    kept = pairs.filter(_both_translated, batched=True, desc=f"{where}: drop rows without a translation")
    logger.info("%s: %d of %d rows of %s lack a %r or %r translation (empty or __NULL__) and were dropped.",
                where, len(pairs) - len(kept), len(pairs), file, source_column, target_column)
    return kept


def _both_translated(batch: dict[str, list[str]]) -> list[bool]:
    return [_translated(s) and _translated(t) for s, t in zip(batch["source"], batch["target"])]


def _translated(text: str) -> bool:
    return bool(text.strip()) and not any(marker in text for marker in TED_NULL_MARKERS)
