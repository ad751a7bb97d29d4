"""What a balancing strategy is: the interface every strategy, built-in or outside, implements.

A strategy answers five questions and nothing else (the peft convention: one small class per method, found
by name in a registry, :mod:`uat_hf.strategies.registry`):

* **What it measures**: :meth:`BalancingStrategy.build_reward` returns the
  :class:`~uat_hf.strategies.rewards.BalancingReward` run on the dev (and train) batches, split over the ranks
  by the callback (``None``: a static strategy measures nothing); :meth:`BalancingStrategy.measures_at` says at
  which optimizer steps.
* **How a measurement becomes p**: :meth:`BalancingStrategy.propose` turns one :class:`Measurement` into a
  :class:`Proposal`. The :class:`~uat_hf.sampling.distribution.CorpusDistribution` owns p: it accepts the
  proposal, counts the update and writes the one history record. A strategy never holds p itself; it reads
  it from the measurement. :meth:`BalancingStrategy.sampling_mix` may let the sampler draw with another mix
  for a while (mixing-law's probe windows), derived from p and the strategy's own state.
* **Its checkpoint state**: :meth:`BalancingStrategy.state_dict` / :meth:`BalancingStrategy.load_state_dict`
  (JSON), saved inside the distribution's.
* **Its history fields**: ``Proposal.fields`` go under the strategy's name in the update's record;
  :meth:`BalancingStrategy.log_fields` picks the numbers logged with the Trainer's next log entry.
* **Its config knobs**: :attr:`BalancingStrategy.config_fields` are the ``UATConfig`` fields it owns (another
  strategy refuses them when set), :meth:`BalancingStrategy.check_config` validates them, and
  :meth:`BalancingStrategy.knobs` turns the config into the constructor's keyword arguments.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from ..sampling.proposal import Measurement, Proposal

__all__ = ["BalancingStrategy", "Measurement", "Proposal"]


class BalancingStrategy:
    """Base class of a balancing strategy; register a subclass with
    :func:`~uat_hf.strategies.registry.register_strategy` (docs/strategies.md).

    Args:
        names: the corpus names, in the order of every probability vector.
        prior: the distribution p starts from (the distribution's; given here for a strategy that builds state
            from it, as the scorer's ψ).
        **knobs: the strategy's settings, from :meth:`knobs`.
    """

    #: Whether p is learned during training (a dynamic strategy, which needs dev sets and a reward).
    learns: ClassVar[bool] = True
    #: τ of the prior p starts from, unless the config gives one (``scorer_prior_temperature``) or
    #: ``corpus_probabilities``; ``None``: the strategy samples with ``corpus_probabilities`` only.
    prior_temperature: ClassVar[float | None] = 1.0
    #: ``UATConfig`` fields (default ``None`` there) this strategy owns: another strategy refuses them when set.
    config_fields: ClassVar[tuple[str, ...]] = ()
    #: What p follows, in the refusal of :meth:`~uat_hf.sampling.distribution.CorpusDistribution.set_probabilities`.
    learned_by: ClassVar[str] = "its strategy"
    #: Whether :meth:`planned_mix` plans each step's mix from the examples drawn for it (every process must draw
    #: the same batches: not with streamed corpora).
    plans_step_mixes: ClassVar[bool] = False
    #: The setting that sizes one update's step (named when an update moves p far in one go); ``None``: none.
    step_setting: ClassVar[str | None] = None
    #: The name the class was registered under (set by ``register_strategy``), for its messages.
    registered_name: ClassVar[str] = ""
    #: The strategy's own settings, a dataclass (as peft's method configs): a run gives them as
    #: ``strategy_settings`` (a recipe's mapping, ``UATConfig(strategy_settings=...)``) or ``--<strategy>.<field>``
    #: on uat-train's command line; they reach the constructor as keywords (:meth:`knobs`). ``None``: none.
    settings_class: ClassVar[type | None] = None
    #: A ``UATConfig`` field that the spelling ``<name>-<value>`` sets (MultiUAT: ``measure``); ``None``: no variants.
    variant_field: ClassVar[str | None] = None

    def __init__(self, names: Sequence[str], prior: Sequence[float], **knobs: Any) -> None:
        if knobs:
            raise TypeError(f"{type(self).__name__} takes no settings, got {sorted(knobs)}.")
        self.names = [str(n) for n in names]

    # ------------------------------------------------------------------ configuration
    @classmethod
    def knobs(cls, config: Any) -> dict[str, Any]:
        """The constructor's keyword arguments from a ``UATConfig``: the fields of its :attr:`settings_class`."""
        settings = cls.strategy_settings(config)
        return {} if settings is None else {f.name: getattr(settings, f.name) for f in dataclasses.fields(settings)}

    @classmethod
    def strategy_settings(cls, config: Any) -> Any:
        """The :attr:`settings_class` instance ``config.strategy_settings`` gives: that instance itself, or from a
        mapping (defaults for what it leaves out; command-line strings converted to the fields' types); an unknown
        setting is refused, naming the known."""
        raw = getattr(config, "strategy_settings", None)
        owner = cls.registered_name or getattr(config, "strategy", None) or cls.__name__
        if dataclasses.is_dataclass(raw) and not isinstance(raw, type):  # the settings object itself (as peft's)
            if cls.settings_class is None or not isinstance(raw, cls.settings_class):
                takes = cls.settings_class.__name__ if cls.settings_class else "no settings"
                raise ValueError(f"strategy_settings is a {type(raw).__name__}, but strategy {owner!r} takes {takes}.")
            return raw
        given = dict(raw or {})
        if cls.settings_class is None:
            if given:
                raise ValueError(f"strategy_settings {sorted(given)} given, but strategy {owner!r} has no settings of "
                                 "its own (no settings_class): remove them.")
            return None
        known = {f.name: f for f in dataclasses.fields(cls.settings_class) if f.init}
        unknown = sorted(set(given) - set(known))
        if unknown:
            raise ValueError(f"strategy {owner!r} has no setting {unknown[0]!r}; its settings are "
                             f"{', '.join(known) or 'none'}.")
        return cls.settings_class(**{name: _typed_setting(owner, known[name], value) for name, value in given.items()})

    @classmethod
    def check_config(cls, config: Any) -> None:
        """Refuse settings of ``config`` this strategy cannot run with (its own knobs), naming them."""

    @classmethod
    def foreign_use(cls, config: Any, chosen: type[BalancingStrategy], given: dict[str, Any]) -> str:
        """The refusal of this strategy's knobs ``given`` (name → value) under another strategy, ``chosen``: set
        there, they would silently do nothing."""
        owner = cls.registered_name or cls.__name__
        return (f"{', '.join(f'{k}={v}' for k, v in given.items())} set(s) strategy {owner!r}, but strategy is "
                f"{config.strategy!r}. Remove it, or use strategy {owner!r}.")

    @classmethod
    def describe(cls, fields: Mapping[str, Any]) -> str:
        """The strategy and its main settings in a few words, for the model card; ``fields``: the run's recipe."""
        return str(fields.get("strategy"))

    @classmethod
    def prior_temperature_of(cls, config: Any) -> float | None:
        """τ of the prior under ``config`` (not called when ``corpus_probabilities`` gives p by hand)."""
        if cls.learns and getattr(config, "scorer_prior_temperature", None) is not None:
            return float(config.scorer_prior_temperature)
        return cls.prior_temperature

    @classmethod
    def build_reward(cls, config: Any, model: Any, tokenizer: Any = None, accelerator: Any = None) -> Any:
        """The :class:`~uat_hf.strategies.rewards.BalancingReward` this strategy measures with (``None`` for a static
        strategy); refuses a model it cannot measure."""
        return None

    def check_training(self, update_every: int) -> None:
        """Refuse a training schedule this strategy cannot follow (called when the callback is built)."""

    # ------------------------------------------------------------------ updates
    def measures_at(self, step: int, update_every: int) -> bool:
        """Whether to measure after optimizer step ``step``: every ``update_every`` steps by default."""
        return self.learns and step > 0 and step % update_every == 0

    def propose(self, measurement: Measurement) -> Proposal | None:
        """A new p from one measurement; ``None`` while the strategy has not finished an update (no record)."""
        raise NotImplementedError(f"{type(self).__name__} keeps p fixed; it proposes no update.")

    def sampling_mix(self, p: np.ndarray) -> np.ndarray | None:
        """The mix the sampler should draw with now instead of ``p`` (``None``: p itself)."""
        return None

    def planned_mix(self, p: np.ndarray, step: int) -> np.ndarray | None:
        """The mix the batches of optimizer step ``step`` should be drawn with, known before the step (the sampler
        draws ahead of training); ``None``: p, or :meth:`sampling_mix` where the trainer does not tell steps."""
        return None

    def drawn(self, step: int, counts: np.ndarray) -> None:
        """The examples per corpus the sampler drew for optimizer step ``step`` (none of a strategy's business by
        default)."""

    def log_fields(self, fields: Mapping[str, Any]) -> dict[str, float]:
        """Numbers of a record's strategy fields to log, keyed below ``balance/`` (none by default)."""
        return {}

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any] | None:
        """JSON-serialisable state for a checkpoint (``None``: nothing beyond p)."""
        return None

    def load_state_dict(self, state: Mapping[str, Any] | None, p: np.ndarray, updated: bool) -> None:
        """Restore :meth:`state_dict`; ``p`` is the checkpoint's (``updated``: whether an update moved it)."""


def _typed_setting(owner: str, field: dataclasses.Field, value: Any) -> Any:
    """A setting given as text (the command line) in its field's type: bool, int, float; other values as given."""
    kind = field.type if isinstance(field.type, type) else {"bool": bool, "int": int, "float": float}.get(
        str(field.type))
    if not isinstance(value, str) or kind not in (bool, int, float):
        return value
    try:
        if kind is bool:
            return {"true": True, "false": False, "1": True, "0": False}[value.lower()]
        return kind(value)
    except (KeyError, ValueError):
        raise ValueError(f"strategy {owner!r}: setting {field.name} takes a {kind.__name__}, got {value!r}.") from None
