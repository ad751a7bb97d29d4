"""Named parallel corpora → cleaned, tagged, tokenized ``datasets.Dataset`` objects.

MultiUAT trains one model on N named corpora (languages or domains) and measures uncertainty on each
corpus's own dev set, so everything here is keyed by corpus name and split. The pipeline is:

1. :func:`load_corpus_split` — a :class:`CorpusSpec` split (local JSONL/JSON/TSV/CSV/Parquet file, gzip
   or not, or a Hub dataset / local directory laid out like one) → a Dataset with raw ``source`` and
   ``target`` string columns. Problems are reported with the corpus, split and field involved.
2. :func:`preprocess` — the paper's cleaning (Moses ``clean-corpus-n`` style length-ratio filter,
   length limit, de-duplication) on the TRAIN split only; dev and test sets are the yardstick for rewards
   and BLEU, so they lose nothing but rows with an empty side (which have no meaningful score).
3. :func:`add_language_tags` — Marian-style ``>>de<<`` prefix on the source side, so a one-to-many
   model knows which language to produce.
4. :func:`tokenize_corpus` — ``input_ids``/``attention_mask``/``labels`` plus the reference text.

:func:`load_corpora` chains the four for a list of specs. Every step is a cached ``datasets`` operation
on memory-mapped Arrow data, so re-running a recipe does not redo the work.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import datasets
from transformers import PreTrainedTokenizerBase

from .corpus_files import FILE_BUILDERS, builder_for, corpus_files, csv_kwargs, invalid_utf8_message
from .corpus_files import may_be_invalid_utf8, text_files
from .names import check_unique_names
from .hub_errors import HubUnavailableError, hub_unavailable_message, is_hub_id, is_hub_unreachable
from .tokenization import check_tags_in_vocab

__all__ = [
    "BUNDLED_DIR",
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

#: Sample corpora shipped with the package (see ``bundled/NOTICE.md``).
BUNDLED_DIR: Path = Path(__file__).parent / "bundled"
#: The split names this library uses; Hub datasets usually call the dev split "validation".
SPLITS: tuple[str, ...] = ("train", "dev", "test")
_DEFAULT_HUB_SPLITS = {"train": "train", "dev": "validation", "test": "test"}
_TRANSLATION_FIELD = "translation"
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
        _check_split(split)
        location = getattr(self, split)
        if location is None and self.path is not None:
            return _DEFAULT_HUB_SPLITS[split]
        return location


def language_tag(lang: str) -> str:
    """Marian's target-language tag, e.g. ``">>de<<"``."""
    return f">>{lang}<<"


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
    _check_split(required_split)
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


#: Share of a training corpus removed by the cleaning filters above which :func:`preprocess` warns.
FILTER_WARNING_SHARE = 0.2


@dataclass
class PreprocessingConfig:
    """Training-data cleaning, applied to the TRAIN split only (see :func:`preprocess`).

    Lengths are whitespace-separated words, as in Moses ``clean-corpus-n.perl`` (which the paper's
    ``ratio 1.5`` comes from), not subwords: filtering does not depend on the tokenizer. For a language
    written without spaces that makes a sentence one word, so disable the ratio filter for it;
    :func:`preprocess` warns, naming the corpus, when the filters remove more than 20% of a training corpus.

    Attributes:
        max_length_ratio: drop a pair when ``max(src_words / tgt_words, tgt_words / src_words)`` exceeds
            this (likely misalignments). ``None`` disables the filter.
        max_source_words, max_target_words: drop a pair whose side has more words. ``None``: no limit
            (tokenization still truncates to ``max_source_length``/``max_target_length`` subwords).
        dedupe: keep only the first occurrence of each identical (source, target) pair.
        drop_empty: drop pairs with an empty (or whitespace-only) side; applies to every split.
    """

    max_length_ratio: float | None = 1.5
    max_source_words: int | None = None
    max_target_words: int | None = None
    dedupe: bool = True
    drop_empty: bool = True

    def __post_init__(self) -> None:
        if self.max_length_ratio is not None and not self.max_length_ratio >= 1:
            raise ValueError(f"max_length_ratio must be >= 1 (or None to disable), got {self.max_length_ratio}.")
        for name in ("max_source_words", "max_target_words"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be a positive number of words (or None), got {value}.")


def preprocess(
    dataset: datasets.Dataset, config: PreprocessingConfig, *, corpus: str, split: str = "train"
) -> datasets.Dataset:
    """Strip whitespace and clean a ``source``/``target`` Dataset.

    On ``split="train"`` every filter of ``config`` applies. On ``dev``/``test`` only rows with an empty
    side are removed (if ``config.drop_empty``): evaluation sets stay comparable across runs and papers.
    The number of rows removed is logged with the corpus name.
    """
    _check_split(split)
    before = len(dataset)
    dataset = dataset.map(_strip_batch, batched=True, desc=f"{corpus}/{split}: strip")
    is_train = split == "train"
    filter_kwargs = {
        "drop_empty": config.drop_empty,
        "max_length_ratio": config.max_length_ratio if is_train else None,
        "max_source_words": config.max_source_words if is_train else None,
        "max_target_words": config.max_target_words if is_train else None,
    }
    if any(value not in (None, False) for value in filter_kwargs.values()):
        unfiltered = len(dataset)
        dataset = dataset.filter(_keep_batch, batched=True, fn_kwargs=filter_kwargs, desc=f"{corpus}/{split}: filter")
        removed = unfiltered - len(dataset)
        if is_train and removed > FILTER_WARNING_SHARE * unfiltered:
            logger.warning(
                "Corpus %r split %r: the cleaning filters removed %d of %d pairs (%.0f%%). Lengths are whitespace-"
                "separated words, so a language written without spaces (Chinese, Japanese, Thai) counts a whole "
                "sentence as one word and fails the length-ratio filter: set max_length_ratio to None (YAML: null) "
                "for such corpora, or check the data for misaligned pairs.",
                corpus, split, removed, unfiltered, 100 * removed / unfiltered,
            )
    if is_train and config.dedupe:
        dataset = _dedupe(dataset)
    if len(dataset) == 0:
        raise ValueError(
            f"Preprocessing removed all {before} pairs of corpus {corpus!r} split {split!r}; "
            f"relax the PreprocessingConfig ({config})."
        )
    logger.info("Corpus %r split %r: kept %d of %d pairs after preprocessing.", corpus, split, len(dataset), before)
    return dataset


def add_language_tags(
    dataset: datasets.Dataset, *, target_tag: str | None, source_tag: str | None = None
) -> datasets.Dataset:
    """Prefix the source text with ``"{target_tag} {source_tag} "`` (each only when given).

    ``target_tag`` (e.g. ``">>de<<"``) tells a one-to-many model which language to produce, as in
    Marian multi-target models; ``source_tag`` optionally marks the source language. With neither, the
    dataset is returned unchanged.
    """
    prefix = " ".join(tag for tag in (target_tag, source_tag) if tag)
    if not prefix:
        return dataset
    return dataset.map(_prefix_batch, batched=True, fn_kwargs={"prefix": prefix + " "}, desc=f"tag {prefix}")


def corpus_tags(specs: Sequence[CorpusSpec], tags: str | Mapping[str, str | None] | None = "auto") -> dict[str, str | None]:
    """Target-language tag for each corpus (``None``: untagged).

    ``tags``: ``"auto"`` tags only when the corpora have more than one target language (one-to-many);
    ``"target"`` always tags with the target language; ``None``/``"none"`` never tags; a mapping gives
    the tag per corpus name explicitly. Use the values to train the tokenizer with these special tokens.
    """
    if tags is None or tags == "none":
        return {spec.name: None for spec in specs}
    if isinstance(tags, Mapping):
        return {spec.name: tags.get(spec.name) for spec in specs}
    if tags not in ("auto", "target"):
        raise ValueError(f"tags must be 'auto', 'target', 'none', None or a mapping corpus -> tag; got {tags!r}.")
    one_to_many = len({spec.target_lang for spec in specs}) > 1
    if tags == "auto" and not one_to_many:
        return {spec.name: None for spec in specs}
    return {spec.name: language_tag(spec.target_lang) for spec in specs}


def tokenize_corpus(
    dataset: datasets.Dataset,
    tokenizer: PreTrainedTokenizerBase,
    *,
    max_source_length: int,
    max_target_length: int,
    num_proc: int | None = None,
) -> datasets.Dataset:
    """Tokenize a ``source``/``target`` Dataset for a seq2seq model.

    Output columns: ``input_ids``, ``attention_mask``, ``labels`` (target ids, ending with EOS for Marian
    style tokenizers; truncation keeps the EOS) and ``target_text`` (the raw reference, for BLEU). Drop
    ``target_text`` before collating (the Trainer does so itself with ``remove_unused_columns=True``).
    """
    missing = {"source", "target"} - set(dataset.column_names)
    if missing:
        raise ValueError(f"tokenize_corpus needs 'source' and 'target' columns; missing {sorted(missing)}.")
    return dataset.map(
        _tokenize_batch,
        batched=True,
        num_proc=num_proc,
        remove_columns=dataset.column_names,
        fn_kwargs={"tokenizer": tokenizer, "max_source_length": max_source_length, "max_target_length": max_target_length},
        desc="tokenize",
    )


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
        _check_split(split)
        result[split] = {}
        for spec in specs:
            if spec.split_location(split) is None:
                logger.info("Corpus %r has no %r split; skipped.", spec.name, split)
                continue
            raw = load_corpus_split(spec, split, cache_dir=cache_dir)
            pairs = preprocess(raw, preprocessing, corpus=spec.name, split=split)
            pairs = add_language_tags(pairs, target_tag=tag_of[spec.name])
            result[split][spec.name] = tokenize_corpus(
                pairs, tokenizer, max_source_length=max_source_length, max_target_length=max_target_length, num_proc=num_proc
            )
    return result


# --- loading helpers -----------------------------------------------------------------------------------


def _check_split(split: str) -> None:
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


def _load_raw(spec: CorpusSpec, split: str, location: str, cache_dir: str | None) -> datasets.Dataset:
    if spec.path is not None:
        return _load_hub(spec, spec.path, location, split, cache_dir)
    file = Path(location)
    builder = builder_for(file)
    if builder is None:
        if file.is_dir() or is_hub_id(location):
            # A Hub id or a directory laid out like a Hub repo given directly as the split value.
            return _load_hub(spec, location, _DEFAULT_HUB_SPLITS[split], split, cache_dir)
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
        raise ValueError(f"Corpus {spec.name!r} split {split!r}: cannot read {location!r} as {builder}: {reason}") from error


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
            f"Corpus {spec.name!r} split {split!r}: could not load split {hub_split!r} of dataset {path!r}{config}: {error}"
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
                    f"Corpus {spec.name!r} split {split!r}: {side} field {field!r} not found; fields present: {columns}."
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
        values = batch[column] if key is None else [row.get(key) if isinstance(row, dict) else None for row in batch[column]]
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


# --- preprocessing / tagging / tokenization helpers ------------------------------------------------------


def _strip_batch(batch: dict) -> dict[str, list[str]]:
    return {"source": [s.strip() for s in batch["source"]], "target": [t.strip() for t in batch["target"]]}


def _keep_batch(
    batch: dict,
    *,
    drop_empty: bool,
    max_length_ratio: float | None,
    max_source_words: int | None,
    max_target_words: int | None,
) -> list[bool]:
    return [
        _keep_pair(len(s.split()), len(t.split()), drop_empty, max_length_ratio, max_source_words, max_target_words)
        for s, t in zip(batch["source"], batch["target"])
    ]


def _keep_pair(
    src_words: int,
    tgt_words: int,
    drop_empty: bool,
    max_length_ratio: float | None,
    max_source_words: int | None,
    max_target_words: int | None,
) -> bool:
    if src_words == 0 or tgt_words == 0:
        return not drop_empty
    if max_source_words is not None and src_words > max_source_words:
        return False
    if max_target_words is not None and tgt_words > max_target_words:
        return False
    if max_length_ratio is not None and max(src_words / tgt_words, tgt_words / src_words) > max_length_ratio:
        return False
    return True


def _dedupe(dataset: datasets.Dataset) -> datasets.Dataset:
    seen: set[tuple[str, str]] = set()
    keep: list[int] = []
    pairs = dataset.select_columns(["source", "target"]).iter(batch_size=10_000)
    offset = 0
    for batch in pairs:
        for i, pair in enumerate(zip(batch["source"], batch["target"])):
            if pair not in seen:
                seen.add(pair)
                keep.append(offset + i)
        offset += len(batch["source"])
    return dataset if len(keep) == len(dataset) else dataset.select(keep)


def _prefix_batch(batch: dict, *, prefix: str) -> dict[str, list[str]]:
    return {"source": [prefix + text for text in batch["source"]]}


def _tokenize_batch(
    batch: dict, *, tokenizer: PreTrainedTokenizerBase, max_source_length: int, max_target_length: int
) -> dict[str, list]:
    inputs = tokenizer(batch["source"], max_length=max_source_length, truncation=True)
    labels = tokenizer(text_target=batch["target"], max_length=max_target_length, truncation=True)
    return {
        "input_ids": inputs["input_ids"],
        "attention_mask": inputs["attention_mask"],
        "labels": labels["input_ids"],
        "target_text": batch["target"],
    }
