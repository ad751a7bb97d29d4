"""Joint subword tokenizers: train one on the corpora at hand, or load an existing one.

No pretrained tokenizer can be downloaded offline, so tests, demos and the bundled recipes train a joint
(source + target, all corpora) subword vocabulary with the Hugging Face ``tokenizers`` library, the way
the paper trains joint BPE. The result is an ordinary ``PreTrainedTokenizerFast`` that follows Marian's
conventions — a sentencepiece-style ``▁`` word-boundary marker so ``decode`` restores the detokenized
text, ``</s>`` appended to every sequence (labels end with EOS), ``<pad>`` as the decoder start token —
so that a model trained with it and a ``Helsinki-NLP/opus-mt-*`` checkpoint are used the same way.

Language tags (``>>de<<``) are registered as special tokens at training time: a tag split into several
subwords would cost the model an extra job (recognising the tag) and is rejected by
:func:`check_tags_in_vocab`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Literal

import datasets
import numpy as np
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import AutoTokenizer, PreTrainedTokenizerBase, PreTrainedTokenizerFast

from ..utils.hub_errors import HubUnavailableError, hub_unavailable_message, is_hub_unreachable

PAD_TOKEN = "<pad>"
EOS_TOKEN = "</s>"
UNK_TOKEN = "<unk>"
#: Fixed ids: pad 0, eos 1, unk 2 (extra special tokens such as language tags follow).
BASE_SPECIAL_TOKENS: tuple[str, ...] = (PAD_TOKEN, EOS_TOKEN, UNK_TOKEN)
_WORD_BOUNDARY = "▁"
#: Text columns read from a ``datasets.Dataset`` given to :func:`train_joint_tokenizer`.
_TEXT_COLUMNS = ("source", "target")

#: Seed of :func:`tokenizer_sample`: fixed, so that every run of a recipe (any seed, any rank) gets one tokenizer.
TOKENIZER_SAMPLE_SEED = 0

TextSource = Iterable[str] | datasets.Dataset | Sequence[datasets.Dataset] | Mapping[str, datasets.Dataset]


def train_joint_tokenizer(
    texts_or_datasets: TextSource,
    *,
    vocab_size: int = 8000,
    model: Literal["bpe", "unigram"] = "bpe",
    special_tokens: Sequence[str] = (),
    lowercase: bool = False,
    min_frequency: int = 2,
    model_max_length: int = 1024,
) -> PreTrainedTokenizerFast:
    """Train one subword vocabulary shared by every language and corpus.

    Args:
        texts_or_datasets: an iterable of strings, or a ``datasets.Dataset`` with ``source``/``target``
            columns (as returned by :func:`uat_hf.data.corpora.load_corpus_split`), or a list or dict of them.
            Both sides of every dataset are used (a joint vocabulary).
        vocab_size: size of the final vocabulary, special tokens included (the paper used 32K BPE merges;
            the default is smaller so that small CPU models stay small).
        model: ``"bpe"`` (as in the paper) or ``"unigram"`` (sentencepiece's default).
        special_tokens: extra special tokens, typically language tags such as ``">>de<<"``; each becomes
            one token that is never split and is dropped by ``decode(..., skip_special_tokens=True)``.
        lowercase: lowercase all text before segmentation (decode then returns lowercased text).
        min_frequency: BPE only: a merge must occur at least this often.
        model_max_length: default truncation length recorded in the tokenizer.

    Returns:
        A ``PreTrainedTokenizerFast`` with ``<pad>`` = 0, ``</s>`` = 1, ``<unk>`` = 2 that appends ``</s>``
        to every encoded sequence and survives ``save_pretrained`` / ``AutoTokenizer.from_pretrained``.
    """
    specials = _special_token_list(special_tokens)
    if vocab_size <= len(specials):
        raise ValueError(f"vocab_size={vocab_size} leaves no room for subwords after {len(specials)} special tokens.")
    tokenizer = Tokenizer(_subword_model(model))
    tokenizer.normalizer = _normalizer(lowercase)
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement=_WORD_BOUNDARY, prepend_scheme="always", split=True)
    tokenizer.decoder = decoders.Metaspace(replacement=_WORD_BOUNDARY, prepend_scheme="always", split=True)
    trainer = _trainer(model, vocab_size, specials, min_frequency)
    tokenizer.train_from_iterator(_iter_texts(texts_or_datasets), trainer=trainer)
    eos_id = tokenizer.token_to_id(EOS_TOKEN)
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"$A {EOS_TOKEN}", pair=f"$A $B {EOS_TOKEN}", special_tokens=[(EOS_TOKEN, eos_id)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        pad_token=PAD_TOKEN,
        eos_token=EOS_TOKEN,
        unk_token=UNK_TOKEN,
        extra_special_tokens=list(specials[len(BASE_SPECIAL_TOKENS):]),
        # Cleaning up spaces would turn "a ." into "a." and break the round trip to the original text.
        clean_up_tokenization_spaces=False,
        model_max_length=model_max_length,
    )


def tokenizer_sample(corpora: Sequence[datasets.Dataset], limit: int, seed: int = TOKENIZER_SAMPLE_SEED
                     ) -> list[datasets.Dataset]:
    """At most ``limit`` pairs of ``corpora`` to train a joint tokenizer on: all of them when they hold no more,
    else a seeded random sample that gives every corpus its share of ``limit`` (at least one pair), rows kept in
    file order.

    Why a sample: counting words and learning merges grow with the text; a few hundred thousand pairs already give
    a vocabulary's frequent subwords, and the training text of a web-scale corpus (tens of millions of pairs) would
    take many minutes. Why seeded and random rather than the first pairs: files are often sorted (by source, by
    length), and the same recipe must get the same tokenizer on every run and every rank.
    """
    total = sum(len(corpus) for corpus in corpora)
    if total <= limit:
        return list(corpora)
    sample = []
    for index, corpus in enumerate(corpora):
        count = max(1, round(limit * len(corpus) / total))
        order = np.random.default_rng([seed, index]).permutation(len(corpus))
        sample.append(corpus.select(np.sort(order[:count])))
    return sample


def load_tokenizer(name_or_path: str, **kwargs) -> PreTrainedTokenizerBase:
    """Load a tokenizer saved with ``save_pretrained`` (local directory) or from the Hub (``org/name``).

    Works for the tokenizers trained by :func:`train_joint_tokenizer` and for ``MarianTokenizer``
    directories such as ``Helsinki-NLP/opus-mt-en-de``. Remote code is never executed. A Hub id that is
    neither reachable (offline, no network) nor cached raises :class:`~uat_hf.utils.hub_errors.HubUnavailableError`.
    """
    if kwargs.pop("trust_remote_code", False):
        raise ValueError("load_tokenizer never runs remote code; use a tokenizer that transformers supports natively.")
    try:
        return AutoTokenizer.from_pretrained(name_or_path, trust_remote_code=False, **kwargs)
    except OSError as error:  # transformers: OSError("We couldn't connect to 'https://huggingface.co' ...")
        if Path(name_or_path).exists() or not is_hub_unreachable(error):
            raise
        from huggingface_hub import constants

        message = hub_unavailable_message("tokenizer", name_or_path, kwargs.get("cache_dir") or constants.HF_HUB_CACHE)
        raise HubUnavailableError(message) from error


def check_tags_in_vocab(tokenizer: PreTrainedTokenizerBase, tags: Iterable[str]) -> None:
    """Raise ``ValueError`` naming the first tag the tokenizer cannot encode as one known token."""
    for tag in tags:
        ids = tokenizer(tag, add_special_tokens=False)["input_ids"]
        if len(ids) != 1 or ids[0] == tokenizer.unk_token_id:
            pieces = tokenizer.convert_ids_to_tokens(ids)
            raise ValueError(
                f"Language tag {tag!r} is not a single token of this tokenizer (it encodes as {pieces}). "
                f"Train the tokenizer with train_joint_tokenizer(..., special_tokens=[{tag!r}, ...]) or add it with "
                f"tokenizer.add_special_tokens({{'extra_special_tokens': [{tag!r}]}}) and resize the model's "
                "embeddings."
            )


def _special_token_list(extra: Sequence[str]) -> list[str]:
    if isinstance(extra, str):
        raise TypeError(f"special_tokens must be a sequence of strings, got the single string {extra!r}.")
    specials = list(BASE_SPECIAL_TOKENS)
    for token in extra:
        if not token or any(ch.isspace() for ch in token):
            raise ValueError(f"Special token {token!r} must be non-empty and contain no whitespace.")
        if token not in specials:
            specials.append(token)
    return specials


def _subword_model(model: str) -> models.Model:
    if model == "bpe":
        return models.BPE(unk_token=UNK_TOKEN)
    if model == "unigram":
        return models.Unigram()
    raise ValueError(f"Unknown tokenizer model {model!r}; choose 'bpe' or 'unigram'.")


def _trainer(model: str, vocab_size: int, specials: list[str], min_frequency: int) -> trainers.Trainer:
    if model == "bpe":
        return trainers.BpeTrainer(
            vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=specials, show_progress=False
        )
    return trainers.UnigramTrainer(vocab_size=vocab_size, special_tokens=specials, unk_token=UNK_TOKEN,
                                   show_progress=False)


def _normalizer(lowercase: bool) -> normalizers.Normalizer:
    # NFKC, as sentencepiece does by default: visually identical strings get identical segmentations.
    steps = [normalizers.NFKC()] + ([normalizers.Lowercase()] if lowercase else [])
    return normalizers.Sequence(steps)


def _iter_texts(source: TextSource) -> Iterator[str]:
    if isinstance(source, str):
        raise TypeError("train_joint_tokenizer needs an iterable of sentences or datasets, not a single string.")
    if isinstance(source, Mapping):
        source = list(source.values())
    if isinstance(source, datasets.Dataset):
        source = [source]
    for item in source:
        if isinstance(item, datasets.Dataset):
            yield from _dataset_texts(item)
        elif isinstance(item, str):
            yield item
        else:
            raise TypeError(f"train_joint_tokenizer got a {type(item).__name__}; give strings or datasets.Dataset "
                            "objects.")


def _dataset_texts(dataset: datasets.Dataset) -> Iterator[str]:
    columns = [c for c in _TEXT_COLUMNS if c in dataset.column_names]
    if not columns:
        raise ValueError(
            f"Dataset has columns {dataset.column_names} but train_joint_tokenizer reads {list(_TEXT_COLUMNS)}; "
            "load it with uat_hf.data.corpora.load_corpus_split or pass the sentences directly."
        )
    for batch in dataset.select_columns(columns).iter(batch_size=1000):
        for column in columns:
            yield from (text for text in batch[column] if text)
