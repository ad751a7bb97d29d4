"""``uat-train``'s data: corpus specs, tokenizer and tokenized corpora from the arguments, and the checks
that refuse bad input before the first training step (:class:`InputError`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path

from ..data.corpus_specs import CorpusSpec, corpus_specs_from_directory, language_tag, resolve_bundled
from ..data.language_codes import CODE_SCHEMES, CorpusLanguageCodes, corpus_language_codes
from ..data.preprocessing import PreprocessingConfig, corpus_tags
from .arguments import DataArguments, ModelArguments

logger = logging.getLogger(__name__)

__all__ = [
    "InputError",
    "SUBSAMPLE_SEED",
    "build_specs",
    "causal_prompt",
    "evaluation_specs",
    "check_before_training",
    "check_lengths",
    "check_model_lengths",
    "check_tokenizer_codes",
    "keep_fraction",
    "language_codes_for",
    "load_data",
    "size_text",
    "stream_train_splits",
    "streams",
    "tags_for",
]

_SPEC_PATH_FIELDS = ("train", "dev", "test", "path")
#: Seed of train_fraction's subsets: fixed, so that every seed and strategy of a study trains on the same pairs.
SUBSAMPLE_SEED = 0


class InputError(ValueError):
    """Bad recipe / command-line input, reported before training starts."""


def build_specs(data_args: DataArguments, *, required_split: str = "train"
                ) -> tuple[list[CorpusSpec], list[CorpusSpec]]:
    """Training corpus specs and evaluation-only corpus specs (a ``corpus_dir`` NAME counts when it has a
    ``required_split`` file)."""
    if data_args.corpus_dir is not None:
        if not Path(data_args.corpus_dir).is_dir():
            raise InputError(
                f"corpus_dir {data_args.corpus_dir!r} is not a directory (relative paths are relative to the working "
                f"directory {os.getcwd()!r}; 'bundled:multidomain-en-de' names the shipped sample)."
            )
        specs = corpus_specs_from_directory(
            data_args.corpus_dir,
            data_args.source_lang,
            data_args.target_lang,
            corpora=data_args.corpora,
            direction=data_args.direction,
            max_examples=data_args.max_train_examples,
            required_split=required_split,
        )
    else:
        specs = [_spec(mapping, data_args.max_train_examples) for mapping in data_args.corpus_specs]
    eval_specs = [_spec(mapping, None) for mapping in data_args.eval_corpus_specs or []]
    clash = sorted({s.name for s in specs} & {s.name for s in eval_specs})
    if clash:
        raise InputError(f"eval_corpus_specs: names {clash} are already training corpora; give them other names.")
    split = data_args.eval_split
    for spec in eval_specs:
        if spec.split_location(split) is None:
            raise InputError(f"eval_corpus_specs: corpus {spec.name!r} has no {split!r} split (eval_split={split!r}).")
    return specs, eval_specs


def evaluation_specs(data_args: DataArguments) -> tuple[list[CorpusSpec], list[CorpusSpec]]:
    """The test sets of ``data_args``, for ``uat-train``'s final evaluation and ``uat-evaluate`` alike: the
    corpora that have ``eval_split`` (a ``corpus_dir`` NAME needs only that file), then ``eval_corpus_specs``."""
    specs, eval_specs = build_specs(data_args, required_split=data_args.eval_split)
    return [spec for spec in specs if spec.split_location(data_args.eval_split) is not None], eval_specs


def _spec(mapping: dict, max_examples: int | None) -> CorpusSpec:
    values = dict(mapping)
    for key in _SPEC_PATH_FIELDS:
        if isinstance(values.get(key), str):
            values[key] = resolve_bundled(values[key])
    if values.get("max_examples") is None:
        values["max_examples"] = max_examples
    return CorpusSpec(**values)


def tags_for(specs: list[CorpusSpec], eval_specs: list[CorpusSpec], mode: str) -> tuple[dict, dict]:
    tag_of = corpus_tags(specs, None if mode == "none" else mode)
    tagged = any(tag_of.values())
    eval_tag_of = {spec.name: (language_tag(spec.target_lang) if tagged else None) for spec in eval_specs}
    return tag_of, eval_tag_of


def language_codes_for(specs: list[CorpusSpec], data_args, model_args: ModelArguments | None = None
                       ) -> dict[str, CorpusLanguageCodes]:
    """Each corpus's language codes under a language-code scheme (``{}`` for Marian tags), resolved before any
    tokenizer or data is loaded, so that a language without a code stops the run at once. ``data_args``: any
    arguments with ``language_tags`` and ``language_codes`` (``uat-train``'s and ``uat-evaluate``'s)."""
    scheme = data_args.language_tags
    if scheme not in CODE_SCHEMES:
        return {}
    if model_args is not None and model_args.is_preset and model_args.tokenizer_name_or_path is None:
        raise InputError(
            f"language_tags {scheme!r} uses the language-code tokens of a pretrained {scheme} tokenizer, but "
            f"model_name_or_path {model_args.model_name_or_path!r} is a preset that trains a tokenizer of its own: "
            "fine-tune a pretrained model (model_name_or_path: its directory or Hub id), give tokenizer_name_or_path, "
            "or use language_tags: marian."
        )
    try:
        return corpus_language_codes(specs, scheme, data_args.language_codes)
    except ValueError as error:
        raise InputError(str(error)) from None


def check_tokenizer_codes(tokenizer, codes: dict[str, CorpusLanguageCodes], data_args) -> dict:
    """Per-corpus generation kwargs (``forced_bos_token_id``) after checking ``codes`` against ``tokenizer``.

    A tokenizer that places language codes itself (NLLB, M2M100, mBART-50) is refused under a Marian setting:
    it would tokenize every corpus with its default codes (the labels of a German corpus starting with
    ``eng_Latn``) and learn the wrong language silently.
    """
    from ..data.language_codes import check_language_codes, generation_kwargs, places_language_codes

    scheme = data_args.language_tags
    if scheme not in CODE_SCHEMES:
        if places_language_codes(tokenizer):
            raise InputError(
                f"The tokenizer ({type(tokenizer).__name__}) places language codes itself (src_lang/tgt_lang), but "
                f"language_tags is {scheme!r}: set language_tags to the model's scheme, one of {list(CODE_SCHEMES)}."
            )
        return {}
    try:
        check_language_codes(tokenizer, codes)
    except ValueError as error:
        raise InputError(str(error)) from None
    return generation_kwargs(tokenizer, codes)


def causal_prompt(data_args):
    """The :class:`~uat_hf.data.causal_data.CausalPrompt` of ``data_args`` (``prompt_template``, ``chat_template``)."""
    from ..data.causal_data import DEFAULT_TEMPLATE, CausalPrompt

    if data_args.language_tags not in ("auto", "none"):
        raise InputError(f"language_tags={data_args.language_tags!r} with a decoder-only model: its prompt names the "
                         "target language; leave language_tags unset.")
    try:
        return CausalPrompt(template=data_args.prompt_template or DEFAULT_TEMPLATE, chat=data_args.chat_template)
    except ValueError as error:
        raise InputError(f"prompt_template: {error}") from None


def preprocessing_for(data_args: DataArguments) -> PreprocessingConfig:
    """The cleaning of the run's training pairs, from its data fields."""
    return PreprocessingConfig(max_length_ratio=data_args.max_length_ratio,
                               max_source_words=data_args.max_source_words,
                               max_target_words=data_args.max_target_words, dedupe=data_args.dedupe)


def load_data(data_args: DataArguments, specs, eval_specs, tokenizer, tag_of, eval_tag_of, prompt=None,
              cleaned=None):
    """``prompt`` (a :class:`~uat_hf.data.causal_data.CausalPrompt`): prompt + completion examples for a
    decoder-only model, which take no tags. ``cleaned``: pairs already read and cleaned
    (:func:`~uat_hf.data.corpora.clean_corpora`, ``{split: {corpus: Dataset}}``), tokenized as they are."""
    from ..data.corpora import load_corpora

    preprocessing = preprocessing_for(data_args)
    common = dict(
        max_source_length=data_args.max_source_length,
        max_target_length=data_args.max_target_length,
        num_proc=data_args.preprocessing_num_workers,
        cache_dir=data_args.dataset_cache_dir,
        prompt=prompt,
    )
    codes = data_args.language_tags in CODE_SCHEMES
    if prompt is not None:
        tag_of = eval_tag_of = None
    common.update(language_codes=data_args.language_codes)
    streamed = [spec for spec in specs if streams(spec, data_args)]
    data = load_corpora([spec for spec in specs if spec not in streamed], tokenizer, preprocessing,
                        splits=data_args.split_names(), tags=data_args.language_tags if codes else tag_of,
                        cleaned=cleaned, **common)
    if streamed:  # the train split streams, dev and test load as usual
        splits = [split for split in data_args.split_names() if split != "train"]
        rest = load_corpora(streamed, tokenizer, preprocessing, splits=splits,
                            tags=data_args.language_tags if codes else tag_of, **common)
        for split, corpora in rest.items():
            data[split] = {spec.name: {**data[split], **corpora}[spec.name] for spec in specs
                           if spec.name in data[split] or spec.name in corpora}
        data["train"] = stream_train_splits(specs, streamed, data["train"], tokenizer, preprocessing, data_args,
                                            None if codes else tag_of)
    if data_args.train_fraction is not None:
        data["train"] = keep_fraction(data["train"], data_args.train_fraction)
    split = data_args.eval_split
    eval_corpora = dict(data.get(split, {}))  # the final evaluation; in-training evaluation uses dev
    ood = {}
    if eval_specs:
        ood = load_corpora(eval_specs, tokenizer, preprocessing, splits=(split,),
                           tags=data_args.language_tags if codes else eval_tag_of, **common)[split]
        eval_corpora.update(ood)
    if data_args.max_eval_examples is not None:
        limit = data_args.max_eval_examples
        eval_corpora = {n: ds.select(range(min(limit, len(ds)))) for n, ds in eval_corpora.items()}
    return data["train"], data.get("dev", {}), eval_corpora, list(ood)


def evaluation_sources(data_args: DataArguments, specs: list[CorpusSpec]) -> dict[str, list[str]]:
    """The source sentences of each corpus's ``eval_split``, as :func:`load_data` reads that split (cleaned as an
    evaluation split, cut to ``max_eval_examples``): the copy baseline's hypotheses."""
    from ..data.corpora import load_corpus_split
    from ..data.preprocessing import preprocess

    split, sources = data_args.eval_split, {}
    for spec in specs:
        if spec.split_location(split) is None:
            continue
        pairs = preprocess(load_corpus_split(spec, split, cache_dir=data_args.dataset_cache_dir),
                           PreprocessingConfig(), corpus=spec.name, split=split)
        column = pairs.select_columns(["source"]).to_dict()["source"]  # the rows the cleaning kept
        sources[spec.name] = column[:data_args.max_eval_examples] if data_args.max_eval_examples else column
    return sources


def streams(spec: CorpusSpec, data_args: DataArguments) -> bool:
    """Whether ``spec``'s train split is read as a stream: its own ``streaming`` field, else the recipe's."""
    return bool(data_args.streaming if spec.streaming is None else spec.streaming)


def stream_train_splits(specs, streamed, train: Mapping, tokenizer, preprocessing, data_args, tag_of) -> dict:
    """The training corpora, in spec order, ``streamed`` ones as tokenized streams (:mod:`uat_hf.data.streams`);
    what a stream cannot do (a whole-corpus dedupe, carving) is refused naming the corpus."""
    from ..data.streams import check_streamable, load_corpus_stream, prepare_stream, streamed_size

    codes = (corpus_language_codes(streamed, data_args.language_tags, data_args.language_codes)
             if data_args.language_tags in CODE_SCHEMES else {})
    out = dict(train)
    for spec in streamed:
        try:
            check_streamable(spec, preprocessing)
        except ValueError as error:
            raise InputError(str(error)) from None
        pairs = load_corpus_stream(spec, cache_dir=data_args.dataset_cache_dir)
        size = streamed_size(pairs)  # what load_corpus_stream read from the metadata
        logger.info(f"{spec.name}: streaming its training pairs "
                    f"({'size unknown' if size is None else f'{size} pairs'})")
        out[spec.name] = prepare_stream(
            pairs, tokenizer, preprocessing,
            max_source_length=data_args.max_source_length, max_target_length=data_args.max_target_length,
            target_tag=(tag_of or {}).get(spec.name), languages=codes.get(spec.name))
    return {spec.name: out[spec.name] for spec in specs if spec.name in out}


def size_text(dataset) -> str:
    """A corpus's size for ``uat-train``'s summary: its rows, or what a stream's metadata says."""
    from ..data.streams import is_stream, streamed_size

    if not is_stream(dataset):
        return str(len(dataset))
    size = streamed_size(dataset)
    return "streamed" if size is None else f"~{size} streamed"


def keep_fraction(corpora: Mapping, fraction: float, seed: int = SUBSAMPLE_SEED) -> dict:
    """The same random ``fraction`` of every corpus (at least one pair each), rows kept in file order.

    Why not the first N pairs: corpus files are often sorted (by package, by book), so a prefix is a biased
    sample; and one fraction for all corpora keeps their size ratios, hence the priors p starts from. Each
    corpus draws its own permutation from ``seed``, so a smaller fraction keeps a subset of a larger one.
    """
    import numpy as np

    kept = {}
    for name, dataset in corpora.items():
        count = max(1, round(fraction * len(dataset)))
        order = np.random.default_rng(seed).permutation(len(dataset))
        kept[name] = dataset.select(np.sort(order[:count]))
        logger.info(f"train_fraction {fraction:g}: {name} keeps {count} of {len(dataset)} training pairs")
    return kept


def check_before_training(training_args, data_args, model_args, specs, train, dev, eval_corpora) -> None:
    missing_train = [s.name for s in specs if s.name not in train]
    if missing_train:
        raise InputError(f"Training corpora {missing_train} have no train split.")
    if training_args.is_dynamic:
        missing_dev = [name for name in train if name not in dev]
        if missing_dev:
            raise InputError(
                f"strategy {training_args.strategy!r} measures every training corpus on its dev set, but "
                f"{missing_dev} have no dev split; give one (CorpusSpec dev) or use a static strategy."
            )
    if str(training_args.eval_strategy) not in ("no", "IntervalStrategy.NO") and not dev:
        raise InputError(f"eval_strategy={training_args.eval_strategy!r} evaluates on the dev sets during training, "
                         "but no corpus has one.")
    missing_eval = [s.name for s in specs if s.name not in eval_corpora]
    if missing_eval:
        logger.info(f"note: corpora {missing_eval} have no {data_args.eval_split!r} split and are not evaluated")
    if not eval_corpora:
        raise InputError(f"No corpus has a {data_args.eval_split!r} split to evaluate "
                         f"(eval_split={data_args.eval_split!r}).")


def check_model_lengths(model, data_args: DataArguments) -> None:
    check_lengths(getattr(model.config, "max_position_embeddings", None), data_args)


def position_limit(model_args: ModelArguments) -> int | None:
    """The model's ``max_position_embeddings``, read from its config alone (no weights), or ``None`` where the
    config cannot be read yet (``build_model`` then says why)."""
    overrides = model_args.config_overrides()
    if model_args.is_preset:
        from ..models.causal_presets import CAUSAL_PRESETS
        from ..models.presets import MODEL_PRESETS

        preset = {**MODEL_PRESETS, **CAUSAL_PRESETS}[model_args.model_name_or_path]
        return overrides.get("max_position_embeddings", preset["max_position_embeddings"])
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(model_args.model_name_or_path, trust_remote_code=False, **overrides)
    except (OSError, ValueError):
        return None
    return getattr(config, "max_position_embeddings", None)


def check_lengths(limit: int | None, data_args: DataArguments) -> None:
    for name in ("max_source_length", "max_target_length"):
        if limit is not None and getattr(data_args, name) > limit:
            raise InputError(
                f"{name}={getattr(data_args, name)} exceeds the model's max_position_embeddings={limit}; lower it or "
                "set model_overrides: {max_position_embeddings: ...}."
            )
