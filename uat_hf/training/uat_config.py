"""Training arguments for multi-corpus balancing.

One dataclass, a subclass of :class:`~transformers.Seq2SeqTrainingArguments`, so that every field is
settable from Python, from YAML and from the command line through ``HfArgumentParser`` exactly like the
Trainer's own arguments (the TRL convention: ``<method>_config.py`` beside ``<method>_trainer.py``).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass

from transformers import Seq2SeqTrainingArguments

from ..sampling.distribution import CorpusDistribution
from ..sampling.priors import check_corpus_probabilities, corpus_probabilities_for
from ..strategies.base import BalancingStrategy
from ..strategies.registry import build_distribution, get_strategy, loaded_strategies, split_variant
from ..strategies.scorer import PRIOR_FITS
from .balancing_arguments import (
    DEFAULT_MEASURE,
    HEALTH_ACTIONS,
    MC_BATCH_MODES,
    MEASURES,
    RELEASED_CODE_MEASURES,
    BalancingArguments,
)


@dataclass(frozen=True)
class NumberRule:
    """The values a numeric field can take: ``low`` (``> low`` when ``strict``) up to ``high`` (exclusive),
    finite, and ``None`` only when ``optional``. Checked once, when the config is built, so that an impossible
    number (``learning_rate: -1``, ``adam_beta2: 1``) is refused by name before any data is read, not met
    later as a bare error of the optimizer or the scheduler, or not at all."""

    name: str
    low: float
    strict: bool = False
    high: float | None = None
    optional: bool = False

    def check(self, value: float | None) -> None:
        if value is None and self.optional:
            return
        above = value is not None and (value > self.low if self.strict else value >= self.low)  # NaN fails
        if above and (self.high is None or value < self.high) and math.isfinite(value):
            return
        bounds = f"{'>' if self.strict else '>='} {self.low}" + ("" if self.high is None else f" and < {self.high}")
        finite = "a finite number " if value is not None and math.isinf(value) else ""
        raise ValueError(f"{self.name} must be {finite}{bounds}{' or unset' if self.optional else ''}, got {value}.")


#: Every numeric training and balancing field with a range (the temperatures, where inf means uniform, are
#: checked with the prior settings).
NUMBER_RULES = (
    NumberRule("learning_rate", 0, strict=True),
    NumberRule("weight_decay", 0),
    NumberRule("adam_beta1", 0, high=1),
    NumberRule("adam_beta2", 0, high=1),
    NumberRule("adam_epsilon", 0),
    NumberRule("max_grad_norm", 0, optional=True),
    NumberRule("label_smoothing_factor", 0, high=1),
    NumberRule("warmup_steps", 0),
    NumberRule("num_train_epochs", 0, strict=True),
    NumberRule("max_steps", -1),
    NumberRule("per_device_train_batch_size", 1),
    NumberRule("per_device_eval_batch_size", 1),
    NumberRule("gradient_accumulation_steps", 1),
    NumberRule("eval_accumulation_steps", 1, optional=True),
    NumberRule("logging_steps", 0, strict=True),
    NumberRule("save_steps", 0, strict=True),
    NumberRule("eval_steps", 0, optional=True),  # 0, like unset, means logging_steps
    NumberRule("dataloader_num_workers", 0),
    NumberRule("seed", 0, high=2**32),
    NumberRule("data_seed", 0, high=2**32, optional=True),
    NumberRule("generation_num_beams", 1, optional=True),
    NumberRule("generation_max_length", 1, optional=True),
    NumberRule("mc_samples", 1),
    NumberRule("mc_tolerance", 0, strict=True, optional=True),
    NumberRule("mc_min_samples", 2),
    NumberRule("update_every", 1),
    NumberRule("scorer_steps", 1),
    NumberRule("scorer_lr", 0),
    NumberRule("dev_batch_tokens", 1),
    NumberRule("mix_pool_batches", 1),
    NumberRule("max_tokens", 1, optional=True),
    NumberRule("corpus_health_checks", 0),
    NumberRule("corpus_health_tokens", 1),
    NumberRule("corpus_health_share", 0, high=1),
    NumberRule("corpus_health_holdout", 0, high=0.5),
)


#: What a corpus found broken gets (``corpus_health_action``).


@dataclass
class UATConfig(BalancingArguments, Seq2SeqTrainingArguments):
    """Seq2Seq training arguments plus the corpus-balancing knobs of MultiUAT and its baselines.

    The balancing fields are declared in :class:`~uat_hf.training.balancing_arguments.BalancingArguments` (no
    torch there,
    so ``uat-train --help`` is quick); they come after the Trainer's, and ``predict_with_generate`` defaults to
    True here.
    """

    _argument_group_name = "training and balancing (uat_hf.UATConfig)"

    # Dict fields that also accept a JSON object string from the command line, as TrainingArguments' own.
    _VALID_DICT_FIELDS = Seq2SeqTrainingArguments._VALID_DICT_FIELDS + ["corpus_probabilities", "strategy_settings"]

    def __post_init__(self):
        self._parse_corpus_probabilities()  # before TrainingArguments would parse it, so that an error names it
        super().__post_init__()
        if self.dataloader_pin_memory and not _accelerator_available():
            # Pinned memory only speeds up copies to an accelerator; without one torch warns at every DataLoader.
            self.dataloader_pin_memory = False
        self.check_balancing_fields()

    def _parse_corpus_probabilities(self) -> None:
        """A JSON object string given for ``corpus_probabilities`` or ``strategy_settings`` (the command line) becomes
        its dict here rather than in TrainingArguments, so that malformed JSON names the field."""
        for name, example in (("corpus_probabilities", '{"a": 0.5, "b": 0.5}'), ("strategy_settings", '{"ema": 0.3}')):
            text = getattr(self, name)
            if not isinstance(text, str):
                continue
            try:
                setattr(self, name, json.loads(text))
            except json.JSONDecodeError as error:
                raise ValueError(f"{name} must be a JSON object such as '{example}', got {text!r} "
                                 f"({error}).") from None

    def check_balancing_fields(self) -> None:
        """The checks of the balancing fields (against the Trainer's, which must be set): ``__post_init__`` runs
        them after the Trainer's own; :func:`~uat_hf.training.balancing.attach_balancing` runs them on the
        balancing fields given over a trainer's arguments, without building a second ``TrainingArguments``."""
        self._parse_corpus_probabilities()
        self._resolve_variant()
        strategy = self.strategy_class  # refuses an unknown strategy
        self._check_prior_settings()
        for rule in NUMBER_RULES:
            rule.check(getattr(self, rule.name))
        self._check_dataloader_settings()
        if self.scorer_prior_fit not in PRIOR_FITS:
            raise ValueError(f"scorer_prior_fit must be one of {', '.join(PRIOR_FITS)}, got "
                             f"{self.scorer_prior_fit!r}.")
        settings = strategy.strategy_settings(self)  # known to the strategy, of the right types
        if settings is not None and self.strategy_settings:  # the given ones, typed (command-line text converted);
            given = self.strategy_settings                   # a settings object, in full
            names = given if isinstance(given, dict) else [f.name for f in dataclasses.fields(settings)]
            self.strategy_settings = {name: getattr(settings, name) for name in names}
        strategy.check_config(self)  # the strategy's own knobs (a static prior's: hand-given probabilities or none)
        from ..evaluation.metrics import check_corpus_metrics  # sacreBLEU: not imported for --help

        self.corpus_metrics = check_corpus_metrics(self.corpus_metrics)
        if self.mc_batch_mode not in MC_BATCH_MODES:
            raise ValueError(f"mc_batch_mode must be one of {', '.join(MC_BATCH_MODES)}, got {self.mc_batch_mode!r}.")
        if self.corpus_health_action not in HEALTH_ACTIONS:
            raise ValueError(f"corpus_health_action must be one of {', '.join(HEALTH_ACTIONS)}, got "
                             f"{self.corpus_health_action!r}.")
        if self.corpus_health_action == "set_aside" and self.corpus_health_checks < 2:
            raise ValueError(
                f"corpus_health_action=set_aside needs corpus_health_checks >= 2 (a corpus is set aside when two "
                f"checks in a row find it suspect), got {self.corpus_health_checks}.")
        if self.is_dynamic and self.max_steps > 0 and self.update_every >= self.max_steps:
            raise ValueError(
                f"update_every={self.update_every} >= max_steps={self.max_steps}: strategy {self.strategy!r} would "
                "never re-balance (the first update comes after update_every steps). Lower update_every or raise "
                "max_steps, or use a static strategy."
            )

    @property
    def strategy_class(self) -> type[BalancingStrategy]:
        """The registered class of ``strategy`` (:func:`~uat_hf.strategies.registry.get_strategy`)."""
        return get_strategy(self.strategy)

    def _check_dataloader_settings(self) -> None:
        """Trainer settings of the training DataLoader that the corpus sampler, which builds every batch, would
        silently ignore: refused, each with what to do instead."""
        if self.train_sampling_strategy != "random":
            raise ValueError(
                f"train_sampling_strategy={self.train_sampling_strategy!r} is not used: the corpus sampler draws "
                "every training batch (its corpus from p, its examples shuffled within the corpus). Batches of a "
                "token budget (max_tokens) are already grouped by length; remove train_sampling_strategy, and set "
                "max_tokens for length-grouped batches."
            )
        if self.dataloader_drop_last:
            raise ValueError(
                "dataloader_drop_last=True is not used: the corpus sampler draws batches from endless per-corpus "
                "streams, so an epoch does not end in an incomplete batch to drop (with per_device_train_batch_size, "
                "the one short batch per pass through a corpus is kept so that every example is trained on). "
                "Remove dataloader_drop_last."
            )
        if self.auto_find_batch_size:
            raise ValueError(
                "auto_find_batch_size=True is not used: the corpus sampler builds its batches (max_tokens, or "
                "per_device_train_batch_size without it) once, when the trainer is built, so the Trainer's smaller "
                "retry batch size would never reach them. Remove auto_find_batch_size and lower max_tokens (or "
                "per_device_train_batch_size) if a batch does not fit in memory."
            )

    def _resolve_variant(self) -> None:
        """``<strategy>-<value>`` → that strategy with its ``variant_field`` set to the value (``multiuat-entsent``:
        strategy ``multiuat``, measure ``entsent``), so that a study can name each variant with one word. A field
        that names another value is refused rather than one of the two silently winning. Then ``measure`` gets its
        default and is checked."""
        name, spelled = split_variant(self.strategy)
        if spelled is not None:
            field_name = get_strategy(name).variant_field
            given = getattr(self, field_name)
            if given is not None and given != spelled:
                raise ValueError(
                    f"strategy {self.strategy!r} names {field_name} {spelled!r}, but {field_name} is {given!r}. Give "
                    f"the {field_name} once: strategy {name!r} with {field_name} {given!r}, or remove {field_name}."
                )
            self.strategy = name
            setattr(self, field_name, spelled)
        if self.measure is None:
            self.measure = DEFAULT_MEASURE
        if self.measure not in MEASURES + RELEASED_CODE_MEASURES:
            source = f" (from strategy '{name}-{spelled}')" if spelled is not None else ""
            raise ValueError(f"Unknown measure {self.measure!r}{source}; choose one of "
                             f"{', '.join(MEASURES + RELEASED_CODE_MEASURES)}.")

    def _check_foreign_knobs(self) -> None:
        """A knob that belongs to one strategy (its ``config_fields``) would silently do nothing under another:
        refused, in that strategy's words (:meth:`~uat_hf.strategies.base.BalancingStrategy.foreign_use`)."""
        chosen = self.strategy_class
        for owner in loaded_strategies():  # never imports an installed plugin the run does not name
            given = {field_name: getattr(self, field_name) for field_name in owner.config_fields
                     if field_name not in chosen.config_fields and getattr(self, field_name, None) is not None}
            if given:
                raise ValueError(owner.foreign_use(self, chosen, given))

    def _check_prior_settings(self) -> None:
        """Each prior knob belongs to one kind of strategy, so that switching ``strategy`` (e.g. on the command
        line over a recipe written for another one) can never silently train a different baseline. A strategy's
        own knobs (``sampling_temperature`` of ``temperature``) are refused elsewhere by
        :meth:`_check_foreign_knobs`, hand-given probabilities by a static prior's ``check_config``."""
        for name in ("sampling_temperature", "scorer_prior_temperature"):
            value = getattr(self, name)
            if value is not None and not value > 0:  # also rejects NaN
                raise ValueError(f"{name} must be > 0 (1 = proportional, 5 = temperature, inf = uniform), got "
                                 f"{value}.")
        self._check_foreign_knobs()
        if self.scorer_prior_temperature is not None and not self.is_dynamic:
            raise ValueError(
                f"scorer_prior_temperature={self.scorer_prior_temperature} sets where the multiuat / multidds-s "
                f"scorer starts, but strategy {self.strategy!r} has no scorer. Remove it, or use sampling_temperature "
                "with strategy 'temperature'."
            )
        if self.corpus_probabilities is None:
            return  # (whether a strategy takes them at all, its check_config says)
        if self.scorer_prior_temperature is not None:
            raise ValueError(
                "Give either scorer_prior_temperature or corpus_probabilities, not both: the hand-given probabilities "
                "replace the τ prior the scorer starts from."
            )
        self.corpus_probabilities = check_corpus_probabilities(
            self.corpus_probabilities,
            positive=self.is_dynamic,
            reason=f" but strategy {self.strategy!r} starts its scorer from these probabilities",
        )

    @property
    def effective_prior_temperature(self) -> float | None:
        """The τ of the prior p starts from: the strategy's own for static strategies (temperature: the given
        sampling_temperature, else 5), scorer_prior_temperature (else 1) for dynamic ones; ``None`` when
        corpus_probabilities gives p by hand."""
        if self.corpus_probabilities is not None:
            return None
        return self.strategy_class.prior_temperature_of(self)

    def corpus_distribution(self, sizes: Mapping[str, int]) -> CorpusDistribution:
        """The distribution these settings start from, over corpora of these ``sizes`` (name → examples), with the
        strategy built from them."""
        given = self.corpus_probabilities  # its values were checked in __post_init__, its names only here
        return build_distribution(
            self.strategy, sizes, temperature=None if given is not None else self.effective_prior_temperature,
            probabilities=None if given is None else corpus_probabilities_for(given, list(sizes)),
            **self.strategy_class.knobs(self))

    @property
    def is_dynamic(self) -> bool:
        return self.strategy_class.learns


def _accelerator_available() -> bool:
    import torch

    accelerator = getattr(torch, "accelerator", None)
    return accelerator.is_available() if accelerator is not None else torch.cuda.is_available()
