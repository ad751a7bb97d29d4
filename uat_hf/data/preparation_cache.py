"""Prepared data kept between runs: the tokenizer and the tokenized corpora of a recipe, found again by a key.

Preparing tens of millions of pairs (reading, cleaning, training a tokenizer, tokenizing) takes minutes; the
``datasets`` cache of each step helps only partly (every ``map`` is still fingerprinted and opened, a trained
tokenizer is trained again, and a new tokenizer changes every fingerprint downstream). A second run of the same
recipe instead loads the finished result: one folder per key holding ``save_to_disk`` copies of the tokenized
datasets and the tokenizer.

The key is a hash of everything the result depends on: the caller's data and tokenizer fields, each local corpus
file's path, size and modification time, and this package's version. A changed field or file gives another key,
so a stale result is never read; a folder is written under a temporary name and renamed when complete, so a run
killed while writing leaves nothing that a later run would read.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

import datasets

from ..utils.version import __version__
from .corpus_specs import CorpusSpec

__all__ = [
    "CACHE_FOLDER",
    "PreparedData",
    "cache_root",
    "file_fingerprints",
    "load_prepared",
    "preparation_key",
    "save_prepared",
    "spec_fingerprint",
]

logger = logging.getLogger(__name__)

#: The folder under the cache root (``HF_DATASETS_CACHE`` by default) that holds one folder per key.
CACHE_FOLDER = "uat_hf_prepared"
#: Bumped when the layout of a cached folder or the preparation it stands for changes in an incompatible way.
CACHE_FORMAT = 1
_INDEX_FILE = "prepared.json"
_TOKENIZER_FOLDER = "tokenizer"


@dataclass
class PreparedData:
    """A tokenizer and ``{part: {corpus: Dataset}}`` (parts such as ``train``, ``dev``, ``eval``), plus any
    JSON-serialisable ``extra`` the caller needs back (e.g. which evaluation corpora are out of domain)."""

    tokenizer: object
    parts: dict[str, dict[str, datasets.Dataset]]
    extra: dict = field(default_factory=dict)


def cache_root(explicit: str | None = None, dataset_cache_dir: str | None = None) -> Path:
    """Where prepared data is kept: ``explicit`` as given, else ``CACHE_FOLDER`` in ``dataset_cache_dir`` or in the
    ``datasets`` cache (``HF_DATASETS_CACHE``, by default ``~/.cache/huggingface/datasets``)."""
    if explicit:
        return Path(explicit).expanduser()
    # The variable is read now, not when datasets was imported, so that a test or a script can point it elsewhere.
    default = os.environ.get("HF_DATASETS_CACHE") or datasets.config.HF_DATASETS_CACHE
    return Path(dataset_cache_dir or default).expanduser() / CACHE_FOLDER


def file_fingerprints(paths: Iterable[Path]) -> list[list]:
    """``[path, size, modification time in ns]`` of every file at ``paths`` (folders: every file inside)."""
    found = []
    for path in paths:
        files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
        for file in files:
            stat = file.stat()
            found.append([str(file.resolve()), stat.st_size, stat.st_mtime_ns])
    return found


def spec_fingerprint(spec: CorpusSpec) -> tuple[dict | None, str | None]:
    """``(fingerprint, None)``: the spec's fields and the fingerprints of its local files; or ``(None, reason)``
    when its data cannot be fingerprinted: a Hub dataset that is not pinned to a ``revision`` may change upstream."""
    fields = asdict(spec)
    locations = [value for key in ("path", "train", "dev", "test") if isinstance(value := fields.get(key), str)]
    files = []
    for location in locations:
        path = Path(location)
        if path.exists():
            files.append(path)
        elif spec.format == "moses" and path.parent.is_dir():  # a file prefix: data/EMEA.de-en → .en, .de
            files += sorted(path.parent.glob(path.name + ".*"))
    if spec.path is not None and not Path(spec.path).exists() and spec.revision is None:
        return None, f"corpus {spec.name!r} reads the Hub dataset {spec.path!r} without a revision"
    return {"spec": fields, "files": file_fingerprints(files)}, None


def preparation_key(inputs: Mapping) -> str:
    """A hash of ``inputs`` (JSON-serialisable) and of the package and cache format versions."""
    text = json.dumps({"inputs": inputs, "uat_hf": __version__, "format": CACHE_FORMAT}, sort_keys=True,
                      default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:24]


def load_prepared(folder: Path) -> PreparedData | None:
    """The data saved in ``folder``, or ``None`` when there is none (or it cannot be read: the folder is then removed,
    to be prepared and saved anew)."""
    index_file = folder / _INDEX_FILE
    if not index_file.is_file():
        return None
    from .tokenization import load_tokenizer

    try:
        index = json.loads(index_file.read_text(encoding="utf-8"))
        parts = {part: {name: datasets.load_from_disk(str(folder / part / str(i))) for i, name in enumerate(names)}
                 for part, names in index["parts"].items()}
        tokenizer = load_tokenizer(str(folder / _TOKENIZER_FOLDER))
    except (OSError, ValueError, KeyError) as error:
        logger.warning("Prepared data in %s cannot be read (%s); removed, preparing it again.", folder, error)
        shutil.rmtree(folder, ignore_errors=True)
        return None
    return PreparedData(tokenizer, parts, index.get("extra", {}))


def save_prepared(folder: Path, prepared: PreparedData, inputs: Mapping | None = None) -> None:
    """Save ``prepared`` as ``folder``: written beside it under a temporary name, then renamed, so that a reader
    sees a complete folder or none. When another process saved the same key first, its folder is kept."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    temporary = folder.parent / f".{folder.name}.{uuid.uuid4().hex}.tmp"
    try:
        prepared.tokenizer.save_pretrained(str(temporary / _TOKENIZER_FOLDER))
        for part, corpora in prepared.parts.items():
            for i, dataset in enumerate(corpora.values()):
                dataset.save_to_disk(str(temporary / part / str(i)))
        index = {"parts": {part: list(corpora) for part, corpora in prepared.parts.items()}, "extra": prepared.extra,
                 "inputs": inputs}
        (temporary / _INDEX_FILE).write_text(json.dumps(index, indent=1, default=str), encoding="utf-8")
        if folder.exists() and not (folder / _INDEX_FILE).is_file():  # no index: not a folder this function wrote
            shutil.rmtree(folder, ignore_errors=True)
        os.rename(temporary, folder)  # fails when another process has saved the same key meanwhile: its folder stays
    except OSError as error:
        if not (folder / _INDEX_FILE).is_file():
            logger.warning("Could not save the prepared data to %s (%s); the next run prepares it again.", folder,
                           error)
    finally:
        shutil.rmtree(temporary, ignore_errors=True)
