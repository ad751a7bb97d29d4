"""Local corpus files: which ``datasets`` builder reads a file and how, which files a corpus directory holds,
and the checks that name the culprit file (and line) when one is unusable.

Used by :mod:`uat_hf.data.corpora`; nothing here reads a corpus into a Dataset.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

import fsspec

from ..utils.hub_errors import caused_by

#: File suffix (after an optional compression suffix) → datasets packaged builder.
FILE_BUILDERS = {".jsonl": "json", ".json": "json", ".tsv": "csv", ".csv": "csv", ".parquet": "parquet"}
COMPRESSION_SUFFIXES = {".gz", ".bz2", ".xz", ".zst", ".lz4"}
#: Builders that read text (and so need UTF-8); parquet stores its strings itself.
_TEXT_BUILDERS = {"json", "csv"}
_CHUNK = 1 << 20


def builder_for(file: Path) -> str | None:
    """The ``datasets`` builder for a corpus file (``"json"``, ``"csv"``, ``"parquet"``), ``None`` if unknown."""
    suffixes = file.suffixes
    if suffixes and suffixes[-1] in COMPRESSION_SUFFIXES:
        suffixes = suffixes[:-1]
    return FILE_BUILDERS.get(suffixes[-1]) if suffixes else None


def csv_kwargs(file: Path, source_field: str | None, target_field: str | None) -> dict:
    """TSV/CSV: without field names, two header-less columns (source, target); with them, a header row."""
    delimiter = "\t" if ".tsv" in file.suffixes else ","
    headerless = source_field is None and target_field is None
    text_columns = ["source", "target"] if headerless else [source_field, target_field]
    # Text stays text: no NaN for "NA"/"null", no numbers inferred for a column of digits.
    kwargs: dict = {"delimiter": delimiter, "keep_default_na": False, "converters": dict.fromkeys(text_columns, str)}
    if delimiter == "\t":
        kwargs["quoting"] = 3  # csv.QUOTE_NONE: quotes are ordinary characters in tab-separated text
    if headerless:
        kwargs.update(header=None, names=text_columns)
    return kwargs


def corpus_files(directory: Path, splits: Sequence[str]) -> dict[str, dict[str, Path]]:
    """``{NAME: {split: file}}`` for the ``NAME.SPLIT.*`` files of ``directory``.

    Two files for one corpus and split (``X.train.jsonl`` beside ``X.train.jsonl.gz``, or ``X.train.tsv``
    beside ``X.train.jsonl``) are refused rather than one of them read silently. A file of no corpus format
    (a checksum ``X.train.jsonl.gz.md5``, an editor backup) does not count as a rival of one that has a format.
    """
    candidates: dict[tuple[str, str], list[Path]] = {}
    for path in sorted(directory.iterdir()):
        parts = path.name.split(".")
        if len(parts) >= 3 and parts[1] in splits and path.is_file():
            candidates.setdefault((parts[0], parts[1]), []).append(path)
    if not candidates:
        raise FileNotFoundError(f"No NAME.{{train,dev,test}}.jsonl.gz files in {str(directory)!r}.")
    found: dict[str, dict[str, Path]] = {}
    for (name, split), paths in candidates.items():
        readable = [p for p in paths if builder_for(p) is not None] or paths
        if len(readable) > 1:
            names = ", ".join(repr(p.name) for p in readable)
            raise ValueError(
                f"Corpus directory {str(directory)!r} has {len(readable)} files for corpus {name!r} split {split!r}: "
                f"{names}; keep one (move or rename the others) so it is clear which one to read."
            )
        found.setdefault(name, {})[split] = readable[0]
    return found


def may_be_invalid_utf8(error: BaseException) -> bool:
    """Whether ``error`` may come from text that is not UTF-8, so the files are worth checking: it is, or was
    raised from, a ``UnicodeDecodeError`` (CSV; JSON when rows are read) or a failure of a ``datasets`` loader
    (JSON arrays: the JSON parser's own "Invalid octet in UTF-8 sequence")."""
    from datasets.exceptions import DatasetGenerationError

    return caused_by(error, (UnicodeDecodeError, DatasetGenerationError))


def text_files(location: Path) -> list[Path]:
    """The text corpus files at ``location``: the file itself, or those in a directory (recursively)."""
    if location.is_file():
        return [location] if builder_for(location) in _TEXT_BUILDERS else []
    if location.is_dir():
        return sorted(p for p in location.rglob("*") if p.is_file() and builder_for(p) in _TEXT_BUILDERS)
    return []


def first_invalid_utf8(file: Path) -> tuple[int, int, bytes] | None:
    """``(line, column, bad bytes)`` (1-based) of the first text in ``file`` that is not UTF-8, or ``None``.

    Compressed files (``.gz``, ``.bz2``, ``.xz``, ...) are read decompressed. Reads whole lines in large
    chunks: a newline byte never occurs inside a UTF-8 character, so lines can be checked separately.
    """
    line = 1
    carry = b""
    with fsspec.open(str(file), "rb", compression="infer") as f:
        while True:
            chunk = f.read(_CHUNK)
            block = carry + chunk
            end = len(block) if not chunk else block.rfind(b"\n") + 1
            block, carry = block[:end], block[end:]
            try:
                block.decode("utf-8")
            except UnicodeDecodeError as error:
                line_start = block.rfind(b"\n", 0, error.start) + 1
                column = len(block[line_start : error.start].decode("utf-8")) + 1
                return line + block.count(b"\n", 0, error.start), column, block[error.start : error.end]
            line += block.count(b"\n")
            if not chunk:
                return None


def invalid_utf8_message(files: Iterable[Path]) -> str | None:
    """``"'FILE' is not valid UTF-8 text: line N, column M ..."`` for the first such file, else ``None``."""
    for file in files:
        found = first_invalid_utf8(file)
        if found is not None:
            line, column, bad = found
            return (
                f"{str(file)!r} is not valid UTF-8 text: line {line}, column {column} has the byte "
                f"{' '.join(f'0x{b:02x}' for b in bad)}. Convert the file to UTF-8 (e.g. `iconv -f latin1 -t utf-8` "
                "if it is Latin-1) or fix that line."
            )
    return None
