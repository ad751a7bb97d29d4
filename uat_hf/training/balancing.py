"""Corpus balancing wired into a Trainer: one function, for ``UATTrainer`` and for a stock ``Seq2SeqTrainer``.

:func:`attach_balancing` is the only place where the pieces meet: the corpus distribution (from the
:class:`~uat_hf.training.uat_config.UATConfig`), the sampler that reads it, the training DataLoader driven by that
sampler, the reward a dynamic strategy measures, and the callback that updates the distribution. With a
stock trainer it takes three lines::

    args = UATConfig(output_dir="out", strategy="multiuat", measure="entsent", max_tokens=4096, ...)
    trainer = Seq2SeqTrainer(model, args, data_collator=DataCollatorForSeq2Seq(tokenizer, model=model),
                             processing_class=tokenizer)
    attach_balancing(trainer, train_corpora={"news": news, "law": law}, dev_corpora={"news": ..., "law": ...})
    trainer.train()

A trainer whose args are not a ``UATConfig`` (TRL's ``SFTTrainer``) takes the balancing fields alone:
``attach_balancing(trainer, train, dev, strategy="multiuat", max_tokens=4096)``.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping
from typing import Any

import torch
from datasets import Dataset, concatenate_datasets
from torch.utils.data import DataLoader
from transformers import DataCollatorForSeq2Seq, DefaultFlowCallback
from transformers.trainer_utils import seed_worker

from ..data.language_codes import language_code_ids
from ..data.streams import is_stream
from ..evaluation.corpus_health import hold_out_pairs, stream_head
from ..models.targets import require_supported_model
from ..sampling.sampler import CorpusBatchSampler
from ..sampling.stream_batches import StreamBatchSampler, StreamedExamples
from ..strategies.registry import get_strategy
from ..strategies.rewards import BalancingReward
from ..utils.columns import IGNORE_INDEX, MODEL_COLUMNS, TOKEN_COLUMNS
from .balancing_arguments import BalancingArguments
from .callback import CorpusBalancingCallback
from .health_callback import CorpusHealthCallback
from .mix_figure import MixFigureCallback
from .resume_check import resume_settings
from .streaming import any_stream, stream_sampler, streamed_run_sizes
from .uat_config import UATConfig

__all__ = ["attach_balancing", "balancing_settings", "check_corpora", "concatenate_corpora", "corpus_dataloader",
           "measuring_collator", "merged_config", "predict_each_corpus"]


def attach_balancing(
    trainer: Any,
    train_corpora: Mapping[str, Dataset],
    dev_corpora: Mapping[str, Dataset] | None = None,
    config: UATConfig | BalancingArguments | None = None,
    *,
    corpus_sizes: Mapping[str, float] | None = None,
    **balancing_fields: Any,
) -> CorpusBalancingCallback:
    """Make ``trainer`` train on named corpora mixed by the balancing settings given; returns the balancing callback.

    The settings are the balancing fields of :class:`~uat_hf.training.balancing_arguments.BalancingArguments`,
    given as keywords (``attach_balancing(trainer, train, dev, strategy="multiuat", max_tokens=4096)``), as
    ``config=BalancingArguments(...)``, or as a whole :class:`~uat_hf.training.uat_config.UATConfig` (default:
    ``trainer.args``, when it is one). Balancing fields given alone are read over the trainer's own arguments
    (seed, max_steps, batch size, ...) without building a second ``TrainingArguments``: building one after the
    trainer resets accelerate's state under it (``'AcceleratorState' object has no attribute
    'distributed_type'`` at ``train()``), which is refused here with that advice.

    The trainer's training data becomes the corpora's concatenation, read through a
    :class:`~uat_hf.sampling.sampler.CorpusBatchSampler` (its ``get_train_dataloader`` is replaced on this instance
    unless it is a ``UATTrainer``, which does so itself; its ``predict`` then also takes a dict of named datasets,
    :func:`predict_each_corpus`). ``dev_corpora`` are the trusted dev sets a
    dynamic strategy measures, one per training corpus. The callback goes right after the Trainer's flow
    callback, so the balancing numbers it adds to a log entry reach every logger.

    A training corpus that is a ``datasets.IterableDataset`` makes every corpus read as a stream, through a
    :class:`~uat_hf.sampling.stream_batches.StreamBatchSampler` (:mod:`uat_hf.training.streaming`: what it refuses).

    The callback saves its state in ``on_save``, after the Trainer's own files, and reads it back from
    ``output_dir/checkpoint-<step>``. To resume from a checkpoint elsewhere, set ``callback.resume_from`` to
    its folder first; to skip folders a killed save left incomplete, resume from
    ``resolve_resume_checkpoint(output_dir, True)`` (:mod:`uat_hf.utils.checkpoints`) rather than ``True``.
    ``UATTrainer``
    does both itself. For per-corpus BLEU and ``eval_mean_bleu`` (``metric_for_best_model="mean_bleu"``) on a
    stock trainer, evaluate with :class:`~uat_hf.evaluation.corpus_evaluation.CorpusEvaluation` (docs/usage.md).
    """
    config = balancing_settings(trainer, config, balancing_fields)
    require_supported_model(trainer.model)
    check_corpora(train_corpora, dev_corpora, config)
    reward = balancing_reward(config, trainer.model, trainer.processing_class, trainer.accelerator)
    seed = config.data_seed if config.data_seed is not None else config.seed
    streaming = any_stream(train_corpora)
    checks = bool(dev_corpora) and config.corpus_health_checks > 0
    if config.corpus_health_action != "warn" and not checks:
        raise ValueError(f"corpus_health_action={config.corpus_health_action} needs the corpus-health checks, which "
                         "need dev corpora; give dev sets, or use corpus_health_action=warn.")
    held_out: dict[str, Dataset] = {}
    stream_sizes = streamed_run_sizes(train_corpora) if streaming else None
    if checks and config.corpus_health_holdout > 0:  # before anything reads the corpora: never trained on
        if not streaming:  # the prior counts the corpora as given (so does a streamed run's: stream_sizes)
            corpus_sizes = prior_sizes(train_corpora, corpus_sizes)
        train_corpora, held_out = hold_out_pairs(  # a sample for each check, where the share allows
            train_corpora, share=config.corpus_health_holdout,
            tokens=config.corpus_health_tokens * config.corpus_health_checks, seed=seed)
    if corpus_sizes is not None and streaming:
        raise ValueError("corpus_sizes with streamed corpora: a stream's prior counts its own size (num_examples); "
                         "give the prior as corpus_probabilities instead.")
    sampler = stream_sampler(trainer, config, train_corpora, reward, seed, stream_sizes) if streaming else (
        CorpusBatchSampler.from_datasets(
            train_corpora,
            config.corpus_distribution(prior_sizes(train_corpora, corpus_sizes)),
            max_tokens=config.max_tokens,
            batch_size=None if config.max_tokens else config.per_device_train_batch_size,
            mix_corpora=config.mix_corpora,
            mix_pool_batches=config.mix_pool_batches,
            seed=seed,
        ))
    callback = CorpusBalancingCallback(
        sampler,
        reward=reward,
        dev_corpora=dev_corpora,
        train_corpora=None if streaming else train_corpora,
        collate_fn=measuring_collator(trainer) if reward is not None else None,
        update_every=config.update_every,
        dev_batch_tokens=config.dev_batch_tokens,
        seed=seed,
        accelerator=trainer.accelerator,
        allow_inexact_resume=config.allow_inexact_resume,
        settings=resume_settings(config),
    )
    trainer.train_dataset = StreamedExamples() if streaming else concatenate_corpora(train_corpora)
    _average_loss_per_batch(trainer)
    if not getattr(trainer, "owns_corpus_sampler", False):
        trainer.get_train_dataloader = functools.partial(corpus_dataloader, trainer, sampler, trainer.train_dataset)
        trainer.predict = functools.partial(predict_each_corpus, trainer.predict)
    callbacks = trainer.callback_handler.callbacks
    flow = next((i for i, c in enumerate(callbacks) if isinstance(c, DefaultFlowCallback)), -1)
    callbacks.insert(flow + 1, callback)
    if reward is not None:  # a learned p, drawn for the trackers with an image API (after their own on_log)
        callbacks.append(MixFigureCallback(callback.distribution, callbacks))
    if checks:
        sampled = {name: stream_head(dataset, config.corpus_health_tokens)  # a stream checked on its first pairs
                   if is_stream(dataset) and name not in held_out else dataset
                   for name, dataset in train_corpora.items()}
        callbacks.insert(flow + 2, CorpusHealthCallback(
            sampled, dev_corpora, measuring_collator(trainer), held_out=held_out,
            checks=config.corpus_health_checks, tokens=config.corpus_health_tokens, seed=seed,
            language_code_ids=language_code_ids(trainer.processing_class),
            balancing=None if config.corpus_health_action == "warn" else callback,
            action=config.corpus_health_action, share=config.corpus_health_share,
            accelerator=trainer.accelerator))
    return callback


def balancing_settings(trainer: Any, config: UATConfig | BalancingArguments | None,
                       balancing_fields: Mapping[str, Any]) -> UATConfig:
    """The ``UATConfig`` :func:`attach_balancing` reads: ``config`` when it is one (default ``trainer.args``), else
    the trainer's arguments with the given balancing fields over them (:func:`merged_config`)."""
    if balancing_fields:
        if config is not None:
            raise TypeError("attach_balancing got both config= and balancing keyword fields "
                            f"({', '.join(balancing_fields)}); give the balancing settings one way.")
        known = {f.name for f in dataclasses.fields(BalancingArguments)}
        unknown = [name for name in balancing_fields if name not in known]
        if unknown:
            trainer_fields = [name for name in unknown if hasattr(trainer.args, name)]
            hint = (f" {trainer_fields} belong to the trainer's own arguments: set them there." if trainer_fields
                    else "")
            raise TypeError(f"attach_balancing got {unknown}, which are not balancing fields "
                            f"(BalancingArguments: {', '.join(sorted(known))}).{hint}")
        config = BalancingArguments(**balancing_fields)
    config = trainer.args if config is None else config
    if isinstance(config, UATConfig):
        if config is not trainer.args and getattr(trainer.accelerator.state, "distributed_type", None) is None:
            raise RuntimeError(
                "The UATConfig given to attach_balancing was built after the trainer, and building it (a "
                "TrainingArguments) reset accelerate's state under the trainer, which would fail at train() with "
                "\"'AcceleratorState' object has no attribute 'distributed_type'\". Pass the balancing fields "
                "alone instead: attach_balancing(trainer, train_corpora, dev_corpora, strategy=..., ...) or "
                "config=BalancingArguments(...); or build the UATConfig before the trainer."
            )
        return config
    if isinstance(config, BalancingArguments):
        return merged_config(trainer.args, config)
    raise TypeError(
        f"attach_balancing needs the balancing settings as a UATConfig (got {type(config).__name__}), a "
        "BalancingArguments, or keyword fields: attach_balancing(trainer, train_corpora, dev_corpora, "
        "strategy=\"multiuat\", ...), or build the trainer's args as UATConfig(...) (a Seq2SeqTrainingArguments)."
    )


def merged_config(trainer_args: Any, balancing: BalancingArguments) -> UATConfig:
    """A ``UATConfig`` holding the Trainer fields of ``trainer_args`` (any ``TrainingArguments``: TRL's
    ``SFTConfig``, ...) and the balancing fields of ``balancing``, checked as ``UATConfig`` checks them.

    Built without ``TrainingArguments.__post_init__``, whose device set-up resets accelerate's state (a
    trainer built before it then fails); the Trainer fields are those already set up, copied as they are, and
    the Seq2Seq fields ``trainer_args`` lacks keep their defaults."""
    config = UATConfig.__new__(UATConfig)
    values = dict(vars(trainer_args))
    for f in dataclasses.fields(UATConfig):
        if f.name not in values:
            if f.default is not dataclasses.MISSING:
                values[f.name] = f.default
            elif f.default_factory is not dataclasses.MISSING:
                values[f.name] = f.default_factory()
    values.update({f.name: getattr(balancing, f.name) for f in dataclasses.fields(BalancingArguments)})
    vars(config).update(values)
    config.check_balancing_fields()
    return config


def predict_each_corpus(predict: Callable[..., Any], test_dataset: Any, ignore_keys: list[str] | None = None,
                        metric_key_prefix: str = "test", **kwargs: Any) -> Any:
    """A stock trainer's ``predict`` (which takes one dataset; a dict fails inside its DataLoader with
    ``KeyError: 0``) that also takes named datasets, as ``evaluate`` does: a dict name → ``PredictionOutput``,
    each with the metrics ``<prefix>_<name>_<key>``, as ``UATTrainer.predict`` gives them."""
    if isinstance(test_dataset, Mapping):
        return {name: predict(dataset, ignore_keys, f"{metric_key_prefix}_{name}", **kwargs)
                for name, dataset in test_dataset.items()}
    return predict(test_dataset, ignore_keys, metric_key_prefix, **kwargs)


def check_corpora(train_corpora: Mapping[str, Dataset], dev_corpora: Mapping[str, Dataset] | None,
                  config: UATConfig) -> None:
    """Refuse corpora the balancing cannot use, naming the corpus: none at all, or not tokenized."""
    if not train_corpora:
        raise ValueError("train_corpora is empty; give at least one named training corpus.")
    _check_model_columns(train_corpora, "Training")
    if config.is_dynamic:
        _check_model_columns(dev_corpora or {}, "Dev")


def balancing_reward(config: UATConfig, model: Any, tokenizer: Any, accelerator: Any = None) -> BalancingReward | None:
    """What the strategy of ``config`` measures on ``model`` (its
    :meth:`~uat_hf.strategies.base.BalancingStrategy.build_reward`): ``None`` for static strategies. A model the
    reward cannot measure (neither seq2seq nor causal LM, no dropout for MultiUAT, sharded by ``accelerator`` for
    MultiDDS-S) is refused here. The language codes of ``tokenizer`` (NLLB, M2M100, mBART-50) that open the
    labels go unscored."""
    return get_strategy(config.strategy).build_reward(config, model, tokenizer, accelerator)


def measuring_collator(trainer: Any) -> Callable[[list[dict]], dict[str, torch.Tensor]]:
    """The collator the rewards' dev (and MultiDDS-S train) batches are built with: labels padded with -100.

    Why: the rewards score every label that is not -100, so a collator padding labels with the pad id would
    make pads count as target tokens. The trainer's ``DataCollatorForSeq2Seq`` is kept with
    ``label_pad_token_id=-100`` (its padding settings unchanged); another collator is replaced, for measuring
    only, by a ``DataCollatorForSeq2Seq`` over the trainer's tokenizer. Training batches keep the trainer's.
    """
    collator = trainer.data_collator
    if isinstance(collator, DataCollatorForSeq2Seq):
        if collator.label_pad_token_id == IGNORE_INDEX:
            return collator
        return dataclasses.replace(collator, label_pad_token_id=IGNORE_INDEX)
    if trainer.processing_class is None:
        name = getattr(collator, "__name__", type(collator).__name__)
        raise ValueError(
            f"The trainer's data collator ({name}) is not a DataCollatorForSeq2Seq and the trainer "
            "has no processing_class, so the dev batches the balancing measures could not be padded with labels "
            "-100 (padded labels would count as target tokens). Pass processing_class=<tokenizer> to the trainer, "
            "or data_collator=DataCollatorForSeq2Seq(tokenizer, model=model)."
        )
    return DataCollatorForSeq2Seq(trainer.processing_class, model=trainer.model, label_pad_token_id=IGNORE_INDEX)


def corpus_dataloader(trainer: Any, sampler: CorpusBatchSampler | StreamBatchSampler,
                      dataset: Dataset | StreamedExamples) -> DataLoader:
    """The training DataLoader of ``trainer`` driven by ``sampler``, prepared by its accelerator."""
    args = trainer.args
    dataloader = DataLoader(
        dataset if isinstance(dataset, StreamedExamples)
        else dataset.select_columns([c for c in dataset.column_names if c in MODEL_COLUMNS]),
        batch_sampler=sampler,
        collate_fn=trainer.data_collator,
        num_workers=args.dataloader_num_workers,
        pin_memory=args.dataloader_pin_memory and torch.cuda.is_available(),
        persistent_workers=args.dataloader_persistent_workers and args.dataloader_num_workers > 0,
        prefetch_factor=args.dataloader_prefetch_factor if args.dataloader_num_workers > 0 else None,
        # A partial of a module-level function, not a lambda: worker processes started with ``spawn`` (macOS,
        # Windows) receive it pickled.
        worker_init_fn=functools.partial(
            seed_worker, num_workers=args.dataloader_num_workers, rank=args.process_index
        ),
    )
    return trainer.accelerator.prepare(dataloader)


def concatenate_corpora(corpora: Mapping[str, Dataset]) -> Dataset:
    """The corpora's model columns concatenated in the dict's order (the sampler's global index space)."""
    _check_model_columns(corpora, "Training")
    parts = [
        dataset.select_columns([c for c in MODEL_COLUMNS if c in dataset.column_names]) for dataset in corpora.values()
    ]
    return concatenate_datasets(parts) if len(parts) > 1 else parts[0]


def _average_loss_per_batch(trainer: Any) -> None:
    """Make the Trainer treat the model's loss as what it is, a mean over one batch's target tokens.

    A model whose ``forward`` takes ``**kwargs`` is taken by the Trainer to normalise its loss by
    ``num_items_in_batch`` (the target tokens of all accumulated batches on all processes), so the Trainer then
    neither divides the loss by the accumulation steps nor undoes DDP's averaging over processes (it multiplies
    by their number). The encoder-decoder models of Transformers (Marian, BART, T5, M2M100, NLLB, ...) take
    ``**kwargs`` but compute a plain per-batch mean: the logged loss and the gradient then come out multiplied
    by the number of processes and by the accumulation steps (16.1 instead of 8.05 at step 1 with 2
    processes). When the loss is the model's own (no label smoother, no ``compute_loss_func``), the Trainer is
    told the model takes no loss kwargs: each micro-batch's mean is divided by the accumulation steps and DDP
    averages over processes, so the logged loss is the mean loss however many processes and steps there are.
    Label smoothing goes through the Trainer's own smoother, which does normalise by ``num_items_in_batch``.
    """
    if getattr(trainer, "label_smoother", None) is None and getattr(trainer, "compute_loss_func", None) is None:
        trainer.model_accepts_loss_kwargs = False


def _check_model_columns(corpora: Mapping[str, Dataset], kind: str) -> None:
    for name, dataset in corpora.items():
        if dataset.column_names is None:  # a stream whose columns show only when read: checked then
            continue
        missing = [c for c in TOKEN_COLUMNS if c not in dataset.column_names]
        if missing:
            raise ValueError(
                f"{kind} corpus {name!r} lacks the column(s) {missing} (has {dataset.column_names}); "
                "tokenize it first (uat_hf.data.corpora.tokenize_corpus)."
            )



def prior_sizes(train_corpora: Mapping[str, Dataset], corpus_sizes: Mapping[str, float] | None) -> dict[str, float]:
    """Each corpus's size for the prior: ``corpus_sizes``'s where given, else its number of examples."""
    sizes = {name: float(len(dataset)) for name, dataset in train_corpora.items()}
    for name, size in (corpus_sizes or {}).items():
        if name not in sizes:
            raise ValueError(f"corpus_sizes names {name!r}, which is not a training corpus ({sorted(sizes)}).")
        if not (isinstance(size, (int, float)) and size > 0):
            raise ValueError(f"corpus_sizes[{name!r}] must be a positive number, got {size!r}.")
        sizes[name] = float(size)
    return sizes
