"""The tokenizer a ``uat-train`` run uses: the one it names (language tags added where the model lacks them), the
one saved in the checkpoint it resumes, or one trained on its training corpora (a seeded sample of them, the first
pairs of a stream)."""

from __future__ import annotations

import logging
import os
import time

from ..data.corpus_specs import CorpusSpec
from .arguments import DataArguments, ModelArguments
from .train_data import streams

__all__ = ["build_tokenizer"]

logger = logging.getLogger(__name__)


def build_tokenizer(model_args: ModelArguments, specs: list[CorpusSpec], tags: list[str], data_args: DataArguments,
                    resume_from: str | None = None):
    """The run's tokenizer: the one named, or one trained on the training corpora; resumed from checkpoint folder
    ``resume_from``, the tokenizer saved in it (the model's vocabulary), never a newly trained one."""
    from ..data.corpora import load_corpus_split
    from ..data.tokenization import check_tags_in_vocab, load_tokenizer, tokenizer_sample, train_joint_tokenizer

    name = model_args.tokenizer_name_or_path or (None if model_args.is_preset else model_args.model_name_or_path)
    if name is None and resume_from and os.path.isfile(os.path.join(resume_from, "tokenizer.json")):
        name = resume_from
    if name is not None:
        tokenizer = load_tokenizer(name)
        missing = []
        for tag in tags:
            try:
                check_tags_in_vocab(tokenizer, [tag])
            except ValueError:
                missing.append(tag)
        if missing:
            logger.info(f"adding language tags {missing} to the tokenizer of {name} as special tokens")
            # transformers 5 calls them extra_special_tokens; keep the ones the tokenizer has. A pretrained model's
            # embeddings grow to len(tokenizer) in presets.build_model.
            tokenizer.add_special_tokens({"extra_special_tokens": missing}, replace_extra_special_tokens=False)
            check_tags_in_vocab(tokenizer, missing)
        return tokenizer
    texts, streamed = [], []
    first = model_args.tokenizer_max_sentences or model_args.tokenizer_train_examples
    for spec in specs:
        if streams(spec, data_args):  # the first pairs of the stream, not the whole corpus
            from itertools import islice

            import datasets

            from ..data.streams import load_corpus_stream

            texts.append(datasets.Dataset.from_list(list(islice(load_corpus_stream(spec), first))))
            streamed.append(spec.name)
            continue
        raw = load_corpus_split(spec, "train", cache_dir=data_args.dataset_cache_dir)
        if model_args.tokenizer_max_sentences is not None and len(raw) > model_args.tokenizer_max_sentences:
            raw = raw.select(range(model_args.tokenizer_max_sentences))
        texts.append(raw)
    sample = tokenizer_sample(texts, model_args.tokenizer_train_examples)
    used, total = sum(map(len, sample)), sum(map(len, texts))
    read = (f"all {total} training pairs" if used == total else
            f"a seeded sample of {used} of the {total} training pairs (tokenizer_train_examples)")
    if streamed:  # a stream's total is unknown: what was read of it is its first pairs
        read = (f"{used} training pairs: the first {first} of each streamed corpus ({', '.join(streamed)})"
                + ("" if used == total else f", then a seeded sample of {used} of the {total} read "
                   "(tokenizer_train_examples)"))
    logger.info(f"training a {model_args.vocab_size}-token {model_args.tokenizer_model} tokenizer on {read}")
    start = time.monotonic()
    tokenizer = train_joint_tokenizer(
        sample,
        vocab_size=model_args.vocab_size,
        model=model_args.tokenizer_model,
        special_tokens=tags,
        lowercase=model_args.lowercase,
        min_frequency=model_args.tokenizer_min_frequency,
        model_max_length=max(data_args.max_source_length, data_args.max_target_length),
    )
    logger.info(f"tokenizer trained in {time.monotonic() - start:.0f}s")
    return tokenizer
