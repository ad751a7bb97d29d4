"""Balancing over streamed training corpora: the checks and the sampler that
:func:`~uat_hf.training.balancing.attach_balancing` uses when a training corpus is a ``datasets.IterableDataset``.

Everything else is the map-style path's: the same :class:`~uat_hf.sampling.distribution.CorpusDistribution`, strategy,
callback, history and logs. What a stream cannot give is refused here, before training starts, naming the corpus
or the setting: a temperature / proportional prior over a corpus of unknown size, instance-level mixing, and the
strategies that need to index the training corpora (MultiDDS-S's train batches) or the examples every rank drew
(mixing-law's planned mixes). Map-style corpora given beside streamed ones are read as streams too
(``Dataset.to_iterable_dataset``), so one sampler draws them all.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..data.streams import is_stream, streamed_size
from ..sampling.distribution import CorpusDistribution
from ..sampling.stream_batches import StreamBatchSampler
from ..utils.columns import MODEL_COLUMNS
from .uat_config import UATConfig

__all__ = ["any_stream", "stream_sampler"]


def any_stream(corpora: Mapping[str, Any]) -> bool:
    """Whether any of ``corpora`` is streamed."""
    return any(is_stream(dataset) for dataset in corpora.values())


def streamed_run_sizes(corpora: Mapping[str, Any]) -> dict[str, int | None]:
    """Each corpus's size for a streamed run's prior: a stream's from its metadata (``None``: unknown), a map-style
    corpus's number of examples."""
    return {n: streamed_size(d) if is_stream(d) else len(d) for n, d in corpora.items()}


def stream_sampler(
    trainer: Any, config: UATConfig, train_corpora: Mapping[str, Any], reward: Any, seed: int,
    sizes: Mapping[str, int | None] | None = None,
) -> StreamBatchSampler:
    """The :class:`~uat_hf.sampling.stream_batches.StreamBatchSampler` of ``trainer`` over ``train_corpora``, after
    the checks a stream needs. ``sizes``: the corpora's sizes for the prior as the user gave them
    (:func:`streamed_run_sizes`, taken before the corpus-health checks held pairs out); default: read from
    ``train_corpora``."""
    if config.mix_corpora:
        raise ValueError(
            f"mix_corpora draws every example's corpus, but training corpora {_streamed(train_corpora)} "
            "are streamed: leave mix_corpora off (each batch comes from one corpus, drawn from p)."
        )
    if trainer.args.max_steps <= 0:
        raise ValueError(
            f"Training corpora {_streamed(train_corpora)} are streamed: a stream has no epochs to count "
            "(num_train_epochs), so set max_steps to the optimizer steps to train."
        )
    sizes = dict(sizes) if sizes is not None else streamed_run_sizes(train_corpora)
    unknown = [n for n, size in sizes.items() if size is None]
    if unknown and config.corpus_probabilities is None:
        raise ValueError(
            f"Strategy {config.strategy!r} starts from a temperature prior (τ={config.effective_prior_temperature}), "
            f"which needs each corpus's size, but the size of streamed corpus {unknown[0]!r} is unknown"
            + (f" (nor of {unknown[1:]})" if len(unknown) > 1 else "")
            + ": give it num_examples in its corpus spec (or info.splits of the IterableDataset), or hand the prior "
            "as corpus_probabilities."
        )
    distribution: CorpusDistribution = config.corpus_distribution(
        {n: size or 1 for n, size in sizes.items()}
    )  # sizes unused when corpus_probabilities gives the prior
    if distribution.plans_step_mixes:
        raise ValueError(
            f"Strategy {config.strategy!r} plans each step's mix from the examples every process drew, "
            "which a streamed run does not share between processes; use it with map-style corpora."
        )
    if reward is not None and reward.needs_train_batches:
        raise ValueError(
            f"Strategy {config.strategy!r} measures on random batches of each training corpus, which "
            f"streamed corpora {_streamed(train_corpora)} cannot give; use it with map-style corpora."
        )
    if trainer.args.ignore_data_skip:
        raise ValueError(
            "ignore_data_skip=True with streamed corpora: a resumed stream continues at its saved "
            "position and passes the Trainer the batches already trained as empty ones to skip; leave "
            "ignore_data_skip off."
        )
    streams = {
        n: d
        if is_stream(d)
        else d.select_columns([c for c in MODEL_COLUMNS if c in d.column_names]).to_iterable_dataset()
        for n, d in train_corpora.items()
    }
    return StreamBatchSampler(
        streams,
        distribution,
        max_tokens=config.max_tokens,
        batch_size=None if config.max_tokens else config.per_device_train_batch_size,
        buffer_examples=config.stream_buffer_examples,
        seed=seed,
        process_index=trainer.args.process_index,
        num_processes=trainer.args.world_size,
    )


def _streamed(corpora: Mapping[str, Any]) -> list[str]:
    return [n for n, d in corpora.items() if is_stream(d)]
