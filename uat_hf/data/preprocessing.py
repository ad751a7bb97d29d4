"""Raw ``source``/``target`` pairs → cleaned, tagged, tokenized pairs.

1. :func:`preprocess` — the paper's cleaning (Moses ``clean-corpus-n`` style length-ratio filter,
   length limit, de-duplication) on the TRAIN split only; dev and test sets are the yardstick for rewards
   and BLEU, so they lose nothing but rows with an empty side (which have no meaningful score).
2. :func:`add_language_tags` — Marian-style ``>>de<<`` prefix on the source side, so a one-to-many
   model knows which language to produce (:func:`corpus_tags` decides the tag of each corpus).
3. :func:`tokenize_corpus` — ``input_ids``/``attention_mask``/``labels`` plus the reference text; for NLLB,
   M2M100 and mBART-50 tokenizers with the corpus's language codes (:mod:`uat_hf.data.language_codes`).

Every step is a cached ``datasets`` operation on memory-mapped Arrow data. :func:`uat_hf.data.corpora.load_corpora`
chains them after reading each split.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import datasets
from transformers import PreTrainedTokenizerBase

from ..utils.columns import REFERENCE_COLUMN
from .corpus_specs import CorpusSpec, check_split, language_tag
from .language_codes import CODE_SCHEMES, CorpusLanguageCodes, tokenizer_languages

__all__ = [
    "FILTER_WARNING_SHARE",
    "PreprocessingConfig",
    "add_language_tags",
    "corpus_tags",
    "preprocess",
    "tokenize_corpus",
]

logger = logging.getLogger(__name__)


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
    dataset: datasets.Dataset, config: PreprocessingConfig, *, corpus: str, split: str = "train",
    num_proc: int | None = None,
) -> datasets.Dataset:
    """Strip whitespace and clean a ``source``/``target`` Dataset.

    On ``split="train"`` every filter of ``config`` applies. On ``dev``/``test`` only rows with an empty
    side are removed (if ``config.drop_empty``): evaluation sets stay comparable across runs and papers.
    The number of rows removed is logged with the corpus name. ``num_proc``: processes of the strip and filter
    steps (``datasets`` joins their shards in order, so the result is the one of a single process);
    de-duplication runs in this process, as it must see every pair.
    """
    check_split(split)
    before = len(dataset)
    dataset = dataset.map(_strip_batch, batched=True, num_proc=_processes(num_proc, dataset),
                          desc=f"{corpus}/{split}: strip")
    is_train = split == "train"
    filter_kwargs = {
        "drop_empty": config.drop_empty,
        "max_length_ratio": config.max_length_ratio if is_train else None,
        "max_source_words": config.max_source_words if is_train else None,
        "max_target_words": config.max_target_words if is_train else None,
    }
    if any(value not in (None, False) for value in filter_kwargs.values()):
        unfiltered = len(dataset)
        dataset = dataset.filter(_keep_batch, batched=True, fn_kwargs=filter_kwargs,
                                 num_proc=_processes(num_proc, dataset), desc=f"{corpus}/{split}: filter")
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


def corpus_tags(
    specs: Sequence[CorpusSpec], tags: str | Mapping[str, str | None] | None = "auto"
) -> dict[str, str | None]:
    """Target-language tag for each corpus (``None``: untagged).

    ``tags``: ``"auto"`` (or ``"marian"``) tags only when the corpora have more than one target language
    (one-to-many); ``"target"`` always tags with the target language; ``None``/``"none"`` never tags; a
    mapping gives the tag per corpus name explicitly. A language-code scheme (``"nllb"``, ``"m2m100"``,
    ``"mbart50"``) puts no tag in the text: the tokenizer places the codes. Use the values to train the
    tokenizer with these special tokens.
    """
    if tags is None or tags == "none" or tags in CODE_SCHEMES:
        return {spec.name: None for spec in specs}
    if isinstance(tags, Mapping):
        return {spec.name: tags.get(spec.name) for spec in specs}
    if tags not in ("auto", "marian", "target"):
        raise ValueError(f"tags must be 'auto', 'marian', 'target', 'none', one of {list(CODE_SCHEMES)}, None or a "
                         f"mapping corpus -> tag; got {tags!r}.")
    one_to_many = len({spec.target_lang for spec in specs}) > 1
    if tags in ("auto", "marian") and not one_to_many:
        return {spec.name: None for spec in specs}
    return {spec.name: language_tag(spec.target_lang) for spec in specs}


def tokenize_corpus(
    dataset: datasets.Dataset,
    tokenizer: PreTrainedTokenizerBase,
    *,
    max_source_length: int,
    max_target_length: int,
    num_proc: int | None = None,
    languages: CorpusLanguageCodes | None = None,
) -> datasets.Dataset:
    """Tokenize a ``source``/``target`` Dataset for a seq2seq model.

    Output columns: ``input_ids``, ``attention_mask``, ``labels`` (target ids, ending with EOS for Marian
    style tokenizers; truncation keeps the EOS) and ``target_text`` (the raw reference, for BLEU). Drop
    ``target_text`` before collating (the Trainer does so itself with ``remove_unused_columns=True``).
    ``languages``: the corpus's codes for a tokenizer that places them (``src_lang``/``tgt_lang``: NLLB,
    M2M100, mBART-50), so that the inputs carry the source code and the labels start with the target code;
    they are arguments of the cached map, so a cached tokenization with other codes is never reused.
    """
    missing = {"source", "target"} - set(dataset.column_names)
    if missing:
        raise ValueError(f"tokenize_corpus needs 'source' and 'target' columns; missing {sorted(missing)}.")
    return dataset.map(
        _tokenize_batch,
        batched=True,
        num_proc=_processes(num_proc, dataset),
        remove_columns=dataset.column_names,
        fn_kwargs={
            "tokenizer": tokenizer, "max_source_length": max_source_length, "max_target_length": max_target_length,
            "languages": languages,
        },
        desc="tokenize",
    )


#: Below this many rows a split is prepared in one process: starting workers would cost more than they save.
MIN_ROWS_PER_PROCESS = 10_000


def _processes(num_proc: int | None, dataset: datasets.Dataset) -> int | None:
    """``num_proc`` for a ``datasets`` call on ``dataset``: ``None`` (this process) for 1 worker or a small split."""
    if num_proc is None or num_proc <= 1:
        return None
    return min(num_proc, len(dataset) // MIN_ROWS_PER_PROCESS) if len(dataset) >= 2 * MIN_ROWS_PER_PROCESS else None


# --- batch functions of the datasets.map / filter calls -------------------------------------------------


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
    batch: dict, *, tokenizer: PreTrainedTokenizerBase, max_source_length: int, max_target_length: int,
    languages: CorpusLanguageCodes | None,
) -> dict[str, list]:
    with tokenizer_languages(tokenizer, languages):
        inputs = tokenizer(batch["source"], max_length=max_source_length, truncation=True)
        # The labels' attention mask is never used; not building it makes tokenization about 1.5x as fast.
        labels = tokenizer(text_target=batch["target"], max_length=max_target_length, truncation=True,
                           return_attention_mask=False)
    return {
        "input_ids": inputs["input_ids"],
        "attention_mask": inputs["attention_mask"],
        "labels": labels["input_ids"],
        REFERENCE_COLUMN: batch["target"],
    }
