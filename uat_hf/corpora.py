"""Named parallel corpora → cleaned, tagged, tokenized ``datasets.Dataset`` objects: the data entry point.

MultiUAT trains one model on N named corpora (languages or domains) and measures uncertainty on each
corpus's own dev set, so everything here is keyed by corpus name and split. The pipeline is:

1. :func:`load_corpus_split` — a :class:`~uat_hf.corpus_specs.CorpusSpec` split (local
   JSONL/JSON/TSV/CSV/Parquet file, gzip or not, or a Hub dataset / local directory laid out like one) → a
   Dataset with raw ``source`` and ``target`` string columns. Problems are reported with the corpus, split
   and field involved.
2. :func:`~uat_hf.preprocessing.preprocess`, :func:`~uat_hf.preprocessing.add_language_tags` and
   :func:`~uat_hf.preprocessing.tokenize_corpus` — cleaning (train split only), target-language tags,
   tokenization.

:func:`load_corpora` chains them for a list of specs. Every step is a cached ``datasets`` operation on
memory-mapped Arrow data, so re-running a recipe does not redo the work.

This module is where users find the whole data API: it also exports the names of
:mod:`uat_hf.corpus_specs` (specs, directories, bundled data) and :mod:`uat_hf.preprocessing`, which define them.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path

import datasets
from transformers import PreTrainedTokenizerBase

from .corpus_files import FILE_BUILDERS, builder_for, csv_kwargs, invalid_utf8_message, may_be_invalid_utf8, text_files
from .corpus_specs import (
    BUNDLED_DIR,
    DEFAULT_HUB_SPLITS,
    DIRECTIONS,
    SPLITS,
    CorpusSpec,
    check_split,
    corpus_specs_from_directory,
    language_tag,
)
from .hub_errors import HubUnavailableError, hub_unavailable_message, is_hub_id, is_hub_unreachable
from .names import check_unique_names
from .preprocessing import (
    PreprocessingConfig,
    add_language_tags,
    corpus_tags,
    preprocess,
    tokenize_corpus,
)
from .tokenization import check_tags_in_vocab

__all__ = [
    "BUNDLED_DIR",
    "DIRECTIONS",
    "SPLITS",
    "CorpusSpec",
    "PreprocessingConfig",
    "add_language_tags",
    "check_tags_in_vocab",
    "corpus_specs_from_directory",
    "corpus_tags",
    "language_tag",
    "load_corpora",
    "load_corpus_split",
    "preprocess",
    "tokenize_corpus",
]

logger = logging.getLogger(__name__)

_TRANSLATION_FIELD = "translation"


def load_corpus_split(spec: CorpusSpec, split: str, *, cache_dir: str | None = None) -> datasets.Dataset:
    """Load one split of a corpus as a Dataset with exactly two string columns, ``source`` and ``target``.

    ``spec.max_examples`` keeps the first N rows of the train split only. Raises ``FileNotFoundError`` for a
    missing file, ``ValueError`` for an absent or empty split, a row without the source/target text or a
    local file that is not UTF-8 (naming file and line), :class:`~uat_hf.hub_errors.HubUnavailableError`
    (a ``ValueError`` too) for a Hub dataset that is neither reachable nor cached.
    """
    location = spec.split_location(split)
    if location is None:
        raise ValueError(f"Corpus {spec.name!r} has no {split!r} split; set CorpusSpec.{split} to a file path.")
    try:
        raw = _load_raw(spec, split, location, cache_dir)
        if split == "train" and spec.max_examples is not None:
            raw = raw.select(range(min(spec.max_examples, len(raw))))
        if len(raw) == 0:
            raise ValueError(f"Corpus {spec.name!r} split {split!r} ({location}) is empty.")
        return _extract_pair(raw, spec, split)
    except (ValueError, datasets.exceptions.DatasetGenerationError) as error:
        # Text that is not UTF-8 fails in the loader (CSV, JSON arrays) or only when rows are read (JSON lines).
        bad = invalid_utf8_message(text_files(Path(spec.path or location))) if may_be_invalid_utf8(error) else None
        if bad is None:
            raise
        raise ValueError(f"Corpus {spec.name!r} split {split!r}: {bad}") from error


def load_corpora(
    specs: Sequence[CorpusSpec],
    tokenizer: PreTrainedTokenizerBase,
    preprocessing: PreprocessingConfig | None = None,
    *,
    splits: Sequence[str] = SPLITS,
    tags: str | Mapping[str, str | None] | None = "auto",
    max_source_length: int = 256,
    max_target_length: int = 256,
    num_proc: int | None = None,
    cache_dir: str | None = None,
) -> dict[str, dict[str, datasets.Dataset]]:
    """Load, preprocess, tag and tokenize every corpus: ``{split: {corpus_name: Dataset}}``.

    ``preprocessing`` defaults to ``PreprocessingConfig()``; ``tags`` as in :func:`corpus_tags` (tags are
    checked to be single tokens of ``tokenizer`` before any data is read). A split a spec does not define
    (``None`` for local files) is left out of that split's dict.
    """
    check_unique_names(spec.name for spec in specs)
    preprocessing = preprocessing or PreprocessingConfig()
    tag_of = corpus_tags(specs, tags)
    check_tags_in_vocab(tokenizer, sorted({tag for tag in tag_of.values() if tag}))
    result: dict[str, dict[str, datasets.Dataset]] = {}
    for split in splits:
        check_split(split)
        result[split] = {}
        for spec in specs:
            if spec.split_location(split) is None:
                logger.info("Corpus %r has no %r split; skipped.", spec.name, split)
                continue
            raw = load_corpus_split(spec, split, cache_dir=cache_dir)
            pairs = preprocess(raw, preprocessing, corpus=spec.name, split=split)
            pairs = add_language_tags(pairs, target_tag=tag_of[spec.name])
            result[split][spec.name] = tokenize_corpus(
                pairs, tokenizer, max_source_length=max_source_length, max_target_length=max_target_length,
                num_proc=num_proc,
            )
    return result


# --- reading helpers ---------------------------------------------------------------------------------------


def _load_raw(spec: CorpusSpec, split: str, location: str, cache_dir: str | None) -> datasets.Dataset:
    if spec.path is not None:
        return _load_hub(spec, spec.path, location, split, cache_dir)
    file = Path(location)
    builder = builder_for(file)
    if builder is None:
        if file.is_dir() or is_hub_id(location):
            # A Hub id or a directory laid out like a Hub repo given directly as the split value.
            return _load_hub(spec, location, DEFAULT_HUB_SPLITS[split], split, cache_dir)
        raise ValueError(
            f"Corpus {spec.name!r} split {split!r}: cannot tell the format of {location!r}; use a file ending in "
            f"{sorted(FILE_BUILDERS)} (optionally .gz), or set CorpusSpec.path to a Hub dataset ('org/name')."
        )
    if not file.is_file():
        raise FileNotFoundError(f"Corpus {spec.name!r} split {split!r}: file {location!r} does not exist.")
    kwargs = csv_kwargs(file, spec.source_field, spec.target_field) if builder == "csv" else {}
    try:
        return datasets.load_dataset(builder, data_files=str(file), split="train", cache_dir=cache_dir, **kwargs)
    except StopIteration as error:  # what the json builder raises on a file without a single row
        raise ValueError(f"Corpus {spec.name!r} split {split!r} ({location}) is empty.") from error
    except datasets.exceptions.DatasetGenerationError as error:
        reason = error.__cause__ or error
        raise ValueError(f"Corpus {spec.name!r} split {split!r}: cannot read {location!r} as {builder}: "
                         f"{reason}") from error


def _load_hub(spec: CorpusSpec, path: str, hub_split: str, split: str, cache_dir: str | None) -> datasets.Dataset:
    try:
        return datasets.load_dataset(path, spec.hub_config, split=hub_split, cache_dir=cache_dir)
    except (ConnectionError, FileNotFoundError, ValueError) as error:
        # Offline or no network, and not cached: datasets raises ConnectionError("Couldn't reach ... on the Hub"),
        # huggingface_hub LocalEntryNotFoundError (a FileNotFoundError).
        if not Path(path).exists() and (isinstance(error, ConnectionError) or is_hub_unreachable(error)):
            message = hub_unavailable_message("dataset", path, cache_dir or datasets.config.HF_DATASETS_CACHE)
            raise HubUnavailableError(f"Corpus {spec.name!r} split {split!r}: {message}") from error
        if isinstance(error, ConnectionError):
            raise
        config = f" (config {spec.hub_config!r})" if spec.hub_config else ""
        message = (
            f"Corpus {spec.name!r} split {split!r}: could not load split {hub_split!r} of dataset {path!r}{config}: "
            f"{error}"
        )
        raise (FileNotFoundError if isinstance(error, FileNotFoundError) else ValueError)(message) from error


def _extract_pair(raw: datasets.Dataset, spec: CorpusSpec, split: str) -> datasets.Dataset:
    fields = _pair_fields(raw, spec, split)
    return raw.map(
        _pair_batch,
        batched=True,
        with_indices=True,
        remove_columns=raw.column_names,
        fn_kwargs={"fields": fields, "corpus": spec.name, "split": split},
        desc=f"{spec.name}/{split}: select fields",
    )


def _pair_fields(raw: datasets.Dataset, spec: CorpusSpec, split: str) -> dict[str, tuple[str, str | None]]:
    """Where ``source`` and ``target`` come from: (column, key inside the translation dict or None)."""
    columns = raw.column_names
    is_csv_default = columns == ["source", "target"] and spec.source_field is None and spec.target_field is None
    if is_csv_default:
        return {"source": ("source", None), "target": ("target", None)}
    if spec.source_field is not None or spec.target_field is not None:
        pair = {"source": spec.source_field, "target": spec.target_field}
        for side, field in pair.items():
            if field is None:
                raise ValueError(f"Corpus {spec.name!r}: set both source_field and target_field, not just one.")
            if field not in columns:
                raise ValueError(
                    f"Corpus {spec.name!r} split {split!r}: {side} field {field!r} not found; fields present: "
                    f"{columns}."
                )
        return {side: (field, None) for side, field in pair.items()}
    if _TRANSLATION_FIELD not in columns:
        raise ValueError(
            f"Corpus {spec.name!r} split {split!r}: no {_TRANSLATION_FIELD!r} field (fields present: {columns}); "
            "set CorpusSpec.source_field and target_field for a two-column layout."
        )
    keys = _translation_keys(raw.features[_TRANSLATION_FIELD])
    for lang in (spec.source_lang, spec.target_lang):
        if keys is not None and lang not in keys:
            raise ValueError(
                f"Corpus {spec.name!r} split {split!r}: field {_TRANSLATION_FIELD!r} has no language {lang!r} "
                f"(languages present: {sorted(keys)}); check source_lang/target_lang."
            )
    return {"source": (_TRANSLATION_FIELD, spec.source_lang), "target": (_TRANSLATION_FIELD, spec.target_lang)}


def _translation_keys(feature) -> list[str] | None:
    if isinstance(feature, dict):
        return list(feature)
    if isinstance(feature, datasets.Translation):
        return list(feature.languages)
    return None


def _pair_batch(batch: dict, indices: list[int], *, fields: dict, corpus: str, split: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for side, (column, key) in fields.items():
        values = (batch[column] if key is None
                  else [row.get(key) if isinstance(row, dict) else None for row in batch[column]])
        for position, (index, value, row) in enumerate(zip(indices, values, batch[column])):
            if not isinstance(value, str):
                where = f"field {column!r}" if key is None else f"language {key!r} in field {column!r}"
                if key is not None and isinstance(row, dict):
                    present = sorted(k for k, v in row.items() if v is not None)
                else:  # a missing field of a JSON row reads as None
                    present = [c for c in batch if batch[c][position] is not None]
                raise ValueError(
                    f"Corpus {corpus!r} split {split!r} row {index}: {side} text ({where}) is missing or not text "
                    f"(got {value!r}; fields present in this row: {present})."
                )
        out[side] = values
    return out
