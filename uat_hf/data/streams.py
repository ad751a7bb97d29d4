"""Streamed training corpora: a corpus read lazily as a ``datasets.IterableDataset``, cleaned and tokenized as it is
read, never loaded whole (``load_dataset(..., streaming=True)``).

Why a second path beside :mod:`uat_hf.data.corpora`: a corpus of tens of millions of pairs takes minutes to convert
to Arrow and the disk to hold it before the first step, while a stream starts at once. What a stream cannot do is
see the whole corpus: a de-duplication across it, carving dev/test pairs out of it and the whole-table TED talks
layout are refused for streamed corpora (:func:`check_streamable`), before anything is read. The cleaning filters
and the tokenization are the map-style ones (:mod:`uat_hf.data.preprocessing`), applied per batch of rows as they
stream by; the row layouts (``translation`` dicts, two named fields, header-less TSV) are read by the same helpers
as :func:`~uat_hf.data.corpora.load_corpus_split`.

A corpus's size is not known without reading it, yet the temperature / proportional priors need it: it is taken
from metadata (:func:`stream_size`: the spec's ``num_examples``, the Hub / dataset-card split sizes, parquet row
counts, or a line count of local text files) and kept in the stream's ``info.splits`` (:func:`streamed_size`), where
a Hub dataset streamed by the user has it too. Dev and test sets stay map-style: they are small.
"""

from __future__ import annotations

import functools
import gzip
from collections.abc import Mapping
from pathlib import Path

import datasets
from transformers import PreTrainedTokenizerBase

from ..utils.columns import REFERENCE_COLUMN
from .corpora import _pair_batch, _pair_fields
from .corpus_files import builder_for, csv_kwargs
from .corpus_formats import _PAIR_FEATURES, _moses_rows, moses_files
from .corpus_specs import DEFAULT_HUB_SPLITS, CorpusSpec
from .language_codes import CorpusLanguageCodes
from .preprocessing import PreprocessingConfig, _keep_batch, _prefix_batch, _strip_batch, _tokenize_batch

__all__ = ["check_streamable", "is_stream", "load_corpus_stream", "prepare_stream", "stream_size", "streamed_size"]

_SPLIT = "train"  # only training corpora stream


def is_stream(dataset: object) -> bool:
    """Whether ``dataset`` is read as a stream (a ``datasets.IterableDataset``)."""
    return isinstance(dataset, datasets.IterableDataset)


def check_streamable(spec: CorpusSpec, preprocessing: PreprocessingConfig | None = None) -> None:
    """Refuse, naming the corpus and the field, what needs the whole corpus and so cannot stream."""
    where = f"Corpus {spec.name!r} is streamed (streaming: true)"
    if spec.format == "ted_talks":
        raise ValueError(
            f"{where}, but format 'ted_talks' reads a whole multi-way table; convert its pairs to JSONL "
            "or leave streaming off for it."
        )
    if spec.carves:
        raise ValueError(
            f"{where}, but carve_dev/carve_test ({spec.carve_dev}/{spec.carve_test}) choose pairs from "
            "the whole train source; give dev/test files, or leave streaming off for it."
        )
    if preprocessing is not None and preprocessing.dedupe:
        raise ValueError(
            f"{where}, but dedupe: true keeps the first of identical pairs across the whole corpus, "
            "which a stream never holds; set dedupe: false (de-duplicate the files beforehand)."
        )


def load_corpus_stream(spec: CorpusSpec, *, cache_dir: str | None = None) -> datasets.IterableDataset:
    """The train split of ``spec`` as a stream of ``source``/``target`` rows (its first ``max_examples`` only), its
    size (:func:`stream_size`) in ``info.splits`` when known."""
    check_streamable(spec)
    location = spec.split_location(_SPLIT)
    if location is None:
        raise ValueError(f"Corpus {spec.name!r} has no 'train' split to stream; set CorpusSpec.train.")
    if spec.format == "moses":
        source, target = spec.source_field or spec.source_lang, spec.target_field or spec.target_lang
        files = moses_files(location, source, target, where=f"Corpus {spec.name!r} split 'train'")
        pairs = datasets.IterableDataset.from_generator(
            _moses_rows,
            features=_PAIR_FEATURES,
            gen_kwargs={"source_file": str(files[0]), "target_file": str(files[1]), "stamps": ()},
        )
    else:
        raw = _load_raw_stream(spec, location, cache_dir)._resolve_features()
        fields = _pair_fields(raw, spec, _SPLIT)  # the map-style layouts, checked on the stream's first rows
        # Row by row: a batched map renames each row after its whole batch, and a second batched map over that
        # (prepare_stream's) would then join a thousand such names per batch, quadratic in the batch size.
        pairs = raw.map(
            _pair_row,
            with_indices=True,
            remove_columns=raw.column_names,
            fn_kwargs={"fields": fields, "corpus": spec.name},
        )
    if spec.max_examples is not None:
        pairs = pairs.take(spec.max_examples)
    size = stream_size(spec)
    if size is not None:
        pairs.info.splits = datasets.SplitDict({_SPLIT: datasets.SplitInfo(_SPLIT, num_examples=size)})
    return pairs


def _pair_row(row: dict, index: int, *, fields: dict, corpus: str) -> dict[str, str]:
    """:func:`~uat_hf.data.corpora._pair_batch` on one row (its checks and messages)."""
    pair = _pair_batch(
        {key: [value] for key, value in row.items()}, [index], fields=fields, corpus=corpus, split=_SPLIT
    )
    return {side: values[0] for side, values in pair.items()}


def _load_raw_stream(spec: CorpusSpec, location: str, cache_dir: str | None) -> datasets.IterableDataset:
    options = {
        key: value
        for key, value in (("revision", spec.revision), ("data_files", spec.data_files))
        if value is not None
    }
    if spec.path is not None:
        return datasets.load_dataset(
            spec.path, spec.hub_config, split=location, streaming=True, cache_dir=cache_dir, **options
        )
    file = Path(location)
    builder = builder_for(file)
    if builder is None:
        if file.is_dir():
            return datasets.load_dataset(
                location, split=DEFAULT_HUB_SPLITS[_SPLIT], streaming=True, cache_dir=cache_dir
            )
        raise ValueError(f"Corpus {spec.name!r} split 'train': cannot tell the format of {location!r} to stream it.")
    if not file.is_file():
        raise FileNotFoundError(f"Corpus {spec.name!r} split 'train': file {location!r} does not exist.")
    kwargs = csv_kwargs(file, spec.source_field, spec.target_field) if builder == "csv" else {}
    empty = (f"Corpus {spec.name!r} split 'train': file {location!r} holds no pairs; give it its training pairs, or "
             "leave the corpus out.")
    if file.stat().st_size == 0:
        raise ValueError(empty)
    try:  # datasets reads the first rows to learn the columns: an empty (or empty compressed) file ends the iterator
        return datasets.load_dataset(builder, data_files=str(file), split="train", streaming=True, **kwargs)
    except StopIteration:
        raise ValueError(empty) from None


# --- sizes ---------------------------------------------------------------------------------------------------


def streamed_size(dataset: datasets.IterableDataset) -> int | None:
    """The examples of a stream as its metadata gives them (``info.splits``), ``None`` when unknown."""
    splits = dataset.info.splits if dataset.info is not None else None
    if not splits:
        return None
    sizes = [info.num_examples for info in splits.values() if info.num_examples]
    return int(sizes[0]) if len(sizes) == 1 else None


def stream_size(spec: CorpusSpec) -> int | None:
    """The training pairs of a streamed corpus from metadata, before cleaning: the spec's ``num_examples``; else the
    split sizes a dataset's card gives; else the row counts of parquet files or the line counts of text files (the
    only reading done: no parsing); capped at ``max_examples``. ``None`` when none of them is known."""
    size = spec.num_examples if spec.num_examples is not None else _metadata_size(spec)
    if size is not None and spec.max_examples is not None:
        size = min(size, spec.max_examples)
    return size


def _metadata_size(spec: CorpusSpec) -> int | None:
    location = spec.split_location(_SPLIT)
    if spec.format == "moses":
        source = spec.source_field or spec.source_lang
        return _rows(moses_files(location, source, spec.target_field or spec.target_lang, where=spec.name)[0], None)
    if spec.path is None and builder_for(Path(location)) is not None:
        return _rows(
            Path(location),
            csv_kwargs(Path(location), spec.source_field, spec.target_field)
            if builder_for(Path(location)) == "csv"
            else None,
        )
    builder = datasets.load_dataset_builder(
        spec.path or location, spec.hub_config, revision=spec.revision, data_files=spec.data_files
    )
    split = location if spec.path is not None else DEFAULT_HUB_SPLITS[_SPLIT]
    known = builder.info.splits.get(split) if builder.info.splits else None
    if known is not None and known.num_examples:
        return int(known.num_examples)
    files = (builder.config.data_files or {}).get(split)
    if not files:
        return None
    counts = [_rows(Path(file), None) for file in files]
    return None if None in counts else sum(counts)


def _rows(file: Path, csv: Mapping | None) -> int | None:
    """Rows of one local file: parquet metadata, or lines (less a header line) of a text file, gzip or not."""
    if file.suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.ParquetFile(file).metadata.num_rows
    if not file.is_file():
        return None
    stat = file.stat()
    lines = _nonblank_lines(str(file.resolve()), stat.st_size, stat.st_mtime_ns)
    header = csv is not None and csv.get("column_names") is None
    return lines - 1 if header else lines


@functools.lru_cache(maxsize=256)
def _nonblank_lines(path: str, size: int, mtime_ns: int) -> int:
    """Non-blank lines of a text file, gzip or not; counted once per process for each version of the file (its size
    and modification time are part of the key), since a run asks for a stream's size more than once and a line
    count of 10M pairs takes seconds."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        return sum(1 for line in f if line.strip())


# --- cleaning and tokenization, lazily ---------------------------------------------------------------------


def prepare_stream(
    pairs: datasets.IterableDataset,
    tokenizer: PreTrainedTokenizerBase,
    preprocessing: PreprocessingConfig | None = None,
    *,
    max_source_length: int,
    max_target_length: int,
    target_tag: str | None = None,
    languages: CorpusLanguageCodes | None = None,
) -> datasets.IterableDataset:
    """Clean (the train filters of ``preprocessing``, without ``dedupe``), tag and tokenize a stream of
    ``source``/``target`` rows as it is read: the rows come out with the model columns ``input_ids``,
    ``attention_mask`` and ``labels``, as :func:`~uat_hf.data.preprocessing.tokenize_corpus` makes them."""
    config = preprocessing or PreprocessingConfig(dedupe=False)
    if config.dedupe:
        raise ValueError("dedupe: true needs the whole corpus; a stream cannot be de-duplicated (set dedupe: false).")
    filters = {
        "drop_empty": config.drop_empty,
        "max_length_ratio": config.max_length_ratio,
        "max_source_words": config.max_source_words,
        "max_target_words": config.max_target_words,
    }
    tokenize = {
        "tokenizer": tokenizer,
        "max_source_length": max_source_length,
        "max_target_length": max_target_length,
        "languages": languages,
    }
    # One batched map for all the steps: each stacked batched map of an IterableDataset renames a row after its
    # batch's rows, so a chain of them costs time quadratic in the batch size (seconds per 10,000 rows).
    tokenized = pairs.map(
        _prepare_batch,
        batched=True,
        remove_columns=["source", "target"],
        fn_kwargs={"filters": filters, "prefix": f"{target_tag} " if target_tag else None, "tokenize": tokenize},
    )
    tokenized.info.splits = pairs.info.splits
    return tokenized


def _prepare_batch(batch: dict, *, filters: dict, prefix: str | None, tokenize: dict) -> dict[str, list]:
    """Strip, filter, tag and tokenize one batch of ``source``/``target`` rows (the map-style steps' functions)."""
    pairs = _strip_batch(batch)
    if any(value not in (None, False) for value in filters.values()):
        keep = _keep_batch(pairs, **filters)
        pairs = {side: [text for text, kept in zip(texts, keep) if kept] for side, texts in pairs.items()}
    if prefix:
        pairs["source"] = _prefix_batch(pairs, prefix=prefix)["source"]
    tokenized = _tokenize_batch(pairs, **tokenize)
    del tokenized[REFERENCE_COLUMN]
    return tokenized
