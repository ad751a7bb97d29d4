"""Named parallel corpora → cleaned, tagged, tokenized ``datasets.Dataset`` objects: the data entry point.

MultiUAT trains one model on N named corpora (languages or domains) and measures uncertainty on each
corpus's own dev set, so everything here is keyed by corpus name and split. The pipeline is:

1. :func:`load_corpus_split` — a :class:`~uat_hf.data.corpus_specs.CorpusSpec` split (local
   JSONL/JSON/TSV/CSV/Parquet file, gzip or not, OPUS Moses pairs, the TED talks TSV, or a Hub dataset at a
   revision / local directory laid out like one; dev/test carved out of train when the spec asks) → a Dataset
   with raw ``source`` and ``target`` string columns. Problems are reported with the corpus, split and field
   involved.
2. :func:`~uat_hf.data.preprocessing.preprocess`, :func:`~uat_hf.data.preprocessing.add_language_tags` and
   :func:`~uat_hf.data.preprocessing.tokenize_corpus` — cleaning (train split only), target-language tags,
   tokenization.

:func:`load_corpora` chains them for a list of specs. Every step is a cached ``datasets`` operation on
memory-mapped Arrow data, so re-running a recipe does not redo the work.

This module is where users find the whole data API: it also exports the names of
:mod:`uat_hf.data.corpus_specs` (specs, directories, bundled data) and :mod:`uat_hf.data.preprocessing`, which
define them.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path

import datasets
import numpy as np
from transformers import PreTrainedTokenizerBase

from ..utils.hub_errors import HubUnavailableError, hub_unavailable_message, is_hub_id, is_hub_unreachable
from ..utils.names import check_unique_names
from .causal_data import CausalPrompt, tokenize_causal_corpus
from .corpus_files import FILE_BUILDERS, builder_for, csv_kwargs, invalid_utf8_message, may_be_invalid_utf8, text_files
from .corpus_formats import read_format
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
from .language_codes import CODE_SCHEMES, check_language_codes, corpus_language_codes
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
    "CausalPrompt",
    "SPLITS",
    "CorpusSpec",
    "PreprocessingConfig",
    "add_language_tags",
    "check_tags_in_vocab",
    "corpus_specs_from_directory",
    "corpus_tags",
    "clean_corpora",
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

    ``spec.max_examples`` keeps the first N rows of the train split only (after any carve). Raises
    ``FileNotFoundError`` for a missing file, ``ValueError`` for an absent or empty split, a row without the
    source/target text, Moses files of different lengths or a local file that is not UTF-8 (naming file and
    line), :class:`~uat_hf.utils.hub_errors.HubUnavailableError` (a ``ValueError`` too) for a Hub dataset that is
    neither reachable nor cached.
    """
    location = spec.split_location(split)
    if location is None:
        raise ValueError(f"Corpus {spec.name!r} has no {split!r} split; set CorpusSpec.{split} to a file path.")
    limit = spec.max_examples if split == "train" else None
    try:
        if spec.carves and (split == "train" or spec.carve_size(split) is not None):
            pairs = _head(_carve(_read(spec, "train", spec.split_location("train"), cache_dir), spec, split), limit)
        else:
            pairs = _read(spec, split, location, cache_dir, limit)
        if len(pairs) == 0:
            raise ValueError(f"Corpus {spec.name!r} split {split!r} ({location}) is empty.")
        return pairs
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
    language_codes: Mapping[str, str] | None = None,
    max_source_length: int = 256,
    max_target_length: int = 256,
    num_proc: int | None = None,
    cache_dir: str | None = None,
    prompt: CausalPrompt | None = None,
    cleaned: Mapping[str, Mapping[str, datasets.Dataset]] | None = None,
) -> dict[str, dict[str, datasets.Dataset]]:
    """Load, preprocess, tag and tokenize every corpus: ``{split: {corpus_name: Dataset}}``.

    ``cleaned``: pairs :func:`clean_corpora` already read and cleaned with the same ``preprocessing``, ``{split:
    {corpus_name: Dataset}}``, tagged and tokenized as they are instead of being read again.

    ``preprocessing`` defaults to ``PreprocessingConfig()``; ``tags`` as in :func:`corpus_tags` (tags are
    checked to be single tokens of ``tokenizer`` before any data is read). With ``tags`` a language-code scheme
    (``"nllb"``, ``"m2m100"``, ``"mbart50"``) each corpus is tokenized with its own source and target code
    (:func:`~uat_hf.data.language_codes.corpus_language_codes`, ``language_codes`` mapping a language to its code
    where the table has none), checked against ``tokenizer`` first. A split a spec does not define
    (``None`` for local files) is left out of that split's dict.

    ``prompt`` (a :class:`~uat_hf.data.causal_data.CausalPrompt`) makes prompt + completion examples for a
    decoder-only model instead (:func:`~uat_hf.data.causal_data.tokenize_causal_corpus`); the prompt names the
    languages, so ``tags`` must then be ``"auto"`` or ``None`` and no tag is added.
    """
    check_unique_names(spec.name for spec in specs)
    if prompt is not None and tags not in ("auto", None, "none"):
        raise ValueError(f"tags={tags!r} with a causal-LM prompt: the prompt names the target language; leave tags "
                         "as 'auto' or None.")
    tags = None if prompt is not None else tags
    preprocessing = preprocessing or PreprocessingConfig()
    tag_of = corpus_tags(specs, tags)
    check_tags_in_vocab(tokenizer, sorted({tag for tag in tag_of.values() if tag}))
    codes = corpus_language_codes(specs, tags, language_codes) if tags in CODE_SCHEMES else {}
    check_language_codes(tokenizer, codes)
    result: dict[str, dict[str, datasets.Dataset]] = {}
    for split in splits:
        check_split(split)
        result[split] = {}
        for spec in specs:
            if spec.split_location(split) is None:
                logger.info("Corpus %r has no %r split; skipped.", spec.name, split)
                continue
            pairs = (cleaned or {}).get(split, {}).get(spec.name)
            if pairs is None:
                pairs = _clean(spec, split, preprocessing, cache_dir, num_proc)
            if prompt is not None:
                result[split][spec.name] = tokenize_causal_corpus(
                    pairs, tokenizer, spec, prompt, max_source_length=max_source_length,
                    max_target_length=max_target_length, num_proc=num_proc,
                )
                continue
            pairs = add_language_tags(pairs, target_tag=tag_of[spec.name])
            result[split][spec.name] = tokenize_corpus(
                pairs, tokenizer, max_source_length=max_source_length, max_target_length=max_target_length,
                num_proc=num_proc, languages=codes.get(spec.name),
            )
    return result


def clean_corpora(specs: Sequence[CorpusSpec], preprocessing: PreprocessingConfig | None = None, *,
                  splits: Sequence[str] = ("train", "dev"), num_proc: int | None = None, cache_dir: str | None = None,
                  ) -> dict[str, dict[str, datasets.Dataset]]:
    """Read and clean the ``splits`` of every corpus (:func:`load_corpus_split`, then
    :func:`~uat_hf.data.preprocessing.preprocess`): ``{split: {corpus_name: Dataset}}`` of ``source``/``target``
    pairs, a split a spec does not define left out. A caller that looks at the cleaned pairs before tokenizing them
    (the corpus audit) passes them to :func:`load_corpora` as its ``cleaned``, so that each corpus is cleaned once."""
    preprocessing = preprocessing or PreprocessingConfig()
    return {split: {spec.name: _clean(spec, split, preprocessing, cache_dir, num_proc) for spec in specs
                    if spec.split_location(split) is not None} for split in splits}


def _clean(spec: CorpusSpec, split: str, preprocessing: PreprocessingConfig, cache_dir: str | None,
           num_proc: int | None) -> datasets.Dataset:
    raw = load_corpus_split(spec, split, cache_dir=cache_dir)
    return preprocess(raw, preprocessing, corpus=spec.name, split=split, num_proc=num_proc)


# --- reading helpers ---------------------------------------------------------------------------------------


def _read(spec: CorpusSpec, split: str, location: str, cache_dir: str | None, limit: int | None = None
          ) -> datasets.Dataset:
    """The ``source``/``target`` pairs at ``location``, only the first ``limit`` when set (cut before the text
    columns are extracted, so a large corpus is not processed for pairs it would drop)."""
    if spec.format is not None:
        return _head(read_format(spec, split, location, cache_dir), limit)
    return _extract_pair(_head(_load_raw(spec, split, location, cache_dir), limit), spec, split)


def _head(dataset: datasets.Dataset, limit: int | None) -> datasets.Dataset:
    return dataset if limit is None else dataset.select(range(min(limit, len(dataset))))


def _carve(pairs: datasets.Dataset, spec: CorpusSpec, split: str) -> datasets.Dataset:
    """``split`` of a corpus whose dev/test pairs are carved out of its train source ``pairs``.

    One permutation drawn with ``spec.carve_seed`` orders the pairs: test takes the first ``carve_test``, dev the
    next ``carve_dev`` (so changing ``carve_dev`` keeps the test set), train the rest, less the pairs identical to
    a carved one (corpora such as KDE4 and EMEA repeat sentences, which would otherwise be tested on after being
    trained on). Each part keeps the source's order.
    """
    test_size, dev_size = spec.carve_test or 0, spec.carve_dev or 0
    held = test_size + dev_size
    if held >= len(pairs):
        asked = " and ".join(f"carve_{part}={size}" for part, size in (("dev", dev_size), ("test", test_size)) if size)
        raise ValueError(f"Corpus {spec.name!r}: {asked} would take {held} of the {len(pairs)} pairs of its train "
                         "source, leaving none to train on; carve fewer.")
    order = np.random.default_rng(spec.carve_seed).permutation(len(pairs))
    if split != "train":
        part = order[:test_size] if split == "test" else order[test_size:held]
        return pairs.select(np.sort(part))
    carved = pairs.select(np.sort(order[:held]))
    held_out = set(zip(carved["source"], carved["target"]))
    train = pairs.select(np.sort(order[held:]))
    keep, position = [], 0
    for batch in train.iter(batch_size=10_000):
        keep += [position + i for i, pair in enumerate(zip(batch["source"], batch["target"])) if pair not in held_out]
        position += len(batch["source"])
    logger.info("Corpus %r: carved %d test and %d dev pairs (carve_seed %d); %d training pairs identical to a carved "
                "one dropped.", spec.name, test_size, dev_size, spec.carve_seed, len(train) - len(keep))
    return train if len(keep) == len(train) else train.select(keep)


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
    options = {key: value for key, value in (("revision", spec.revision), ("data_files", spec.data_files))
               if value is not None}
    try:
        return datasets.load_dataset(path, spec.hub_config, split=hub_split, cache_dir=cache_dir, **options)
    except (ConnectionError, FileNotFoundError, ValueError) as error:
        # Offline or no network, and not cached: datasets raises ConnectionError("Couldn't reach ... on the Hub"),
        # huggingface_hub LocalEntryNotFoundError (a FileNotFoundError).
        revision = f" (revision {spec.revision!r})" if spec.revision else ""
        if not Path(path).exists() and (isinstance(error, ConnectionError) or is_hub_unreachable(error)):
            message = hub_unavailable_message("dataset", path, cache_dir or datasets.config.HF_DATASETS_CACHE)
            raise HubUnavailableError(f"Corpus {spec.name!r} split {split!r}{revision}: {message}") from error
        if isinstance(error, ConnectionError):
            raise
        config = f" (config {spec.hub_config!r})" if spec.hub_config else ""
        files = f" (data_files {spec.data_files!r})" if spec.data_files is not None else ""
        message = (
            f"Corpus {spec.name!r} split {split!r}: could not load split {hub_split!r} of dataset "
            f"{path!r}{config}{revision}{files}: {error}"
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
