"""Strategies by name: the one place that maps a ``strategy`` setting to its class.

As peft's ``register_peft_method``: each strategy module registers its class under its name when imported
(the built-ins are imported on the first lookup). A strategy from outside the package is found three ways,
so that ``uat-train --strategy NAME``, ``UATConfig(strategy=NAME)`` and a resume all reach it:

* registered from Python: ``register_strategy("my-mix", MyMix)`` before the config is built;
* an installed package's entry point in the group ``uat_hf.strategies`` (``my-mix = my_pkg.mix:MyMix``),
  loaded on first use of its name;
* an importable ``module:Class`` spelled as the name itself (``--strategy my_pkg.mix:MyMix``).

A strategy may also take a *variant* spelling ``<name>-<value>`` that sets one of its knobs
(:attr:`~uat_hf.strategies.base.BalancingStrategy.variant_field`; ``multiuat-entsent`` is MultiUAT with measure
``entsent``).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from importlib.metadata import entry_points

import numpy as np

from ..sampling.distribution import CorpusDistribution
from ..sampling.priors import temperature_prior
from .base import BalancingStrategy

__all__ = ["ENTRY_POINT_GROUP", "available_strategies", "build_distribution", "describe_strategy", "get_strategy",
           "register_strategy", "split_variant"]

#: The entry-point group installed packages register their strategies in.
ENTRY_POINT_GROUP = "uat_hf.strategies"
#: The built-in strategy modules, imported (and so registered) on the first lookup, in help order.
_BUILTIN_MODULES = (".static", ".multiuat.strategy", ".multidds_s.strategy", ".mixing_law.strategy")

_REGISTRY: dict[str, type[BalancingStrategy]] = {}
#: Classes named as ``module:Class``, imported once (not listed by :func:`available_strategies`).
_IMPORTED: dict[str, type[BalancingStrategy]] = {}
_builtins_loaded = False


def register_strategy(name: str, cls: type[BalancingStrategy]) -> type[BalancingStrategy]:
    """Make strategy class ``cls`` available as ``strategy=name``; returns ``cls``.

    Registering a name again with another class is refused (two packages would fight over it silently)."""
    _check_class(name, cls)
    if not name or name != name.strip():
        raise ValueError(f"A strategy name must be a non-empty word, got {name!r}.")
    known = _REGISTRY.get(name)
    if known is not None and known is not cls:
        raise ValueError(f"Strategy {name!r} is already registered as {known.__module__}.{known.__qualname__}.")
    _REGISTRY[name] = cls
    if "registered_name" not in vars(cls):
        cls.registered_name = name  # the name its refusals and messages use
    return cls


def _check_class(name: str, cls: object) -> None:
    if not (isinstance(cls, type) and issubclass(cls, BalancingStrategy)):
        raise TypeError(f"Strategy {name!r} must be a subclass of uat_hf.strategies.base.BalancingStrategy, "
                        f"got {cls!r}.")


def _load_builtins() -> None:
    global _builtins_loaded
    if not _builtins_loaded:
        _builtins_loaded = True
        for module in _BUILTIN_MODULES:
            importlib.import_module(module, __package__)


def _entry_points() -> dict[str, object]:
    return {point.name: point for point in entry_points(group=ENTRY_POINT_GROUP)}


def available_strategies() -> tuple[str, ...]:
    """Every strategy name known now: the built-ins, those registered from Python and installed entry points
    (not yet loaded). ``module:Class`` names are not listed: any importable one works."""
    _load_builtins()
    return tuple(dict.fromkeys([*_REGISTRY, *_entry_points()]))


def loaded_strategies() -> tuple[type[BalancingStrategy], ...]:
    """The classes of the strategies loaded now (built-ins and those registered from Python or loaded by name),
    without importing any installed entry point: what a check over every strategy may look at."""
    _load_builtins()
    return tuple(dict.fromkeys([*_REGISTRY.values(), *_IMPORTED.values()]))


def split_variant(name: str) -> tuple[str, str | None]:
    """``(registered name, variant value)`` of a strategy setting: ``("multiuat", "entsent")`` for
    ``multiuat-entsent``; ``(name, None)`` for any other name."""
    _load_builtins()
    if name in _REGISTRY:
        return name, None
    for known, cls in _REGISTRY.items():
        if cls.variant_field and name.startswith(f"{known}-") and len(name) > len(known) + 1:
            return known, name[len(known) + 1:]
    return name, None


def get_strategy(name: str) -> type[BalancingStrategy]:
    """The class of strategy ``name``: registered, an installed entry point, or an importable ``module:Class``."""
    _load_builtins()
    if name in _REGISTRY:
        return _REGISTRY[name]
    point = _entry_points().get(name)
    if point is not None:
        try:
            loaded = point.load()
        except Exception as error:  # a broken plugin breaks the runs that name it, with its name
            raise ValueError(f"Strategy {name!r} is installed as an entry point ({point.value}), but importing it "
                             f"failed: {type(error).__name__}: {error}") from error
        return register_strategy(name, loaded)
    if ":" in name:
        if name not in _IMPORTED:
            module, _, attribute = name.partition(":")
            try:
                cls = getattr(importlib.import_module(module), attribute)
            except (ImportError, AttributeError) as error:
                raise ValueError(f"Strategy {name!r} names no importable class ({error}).") from error
            try:
                _check_class(name, cls)
            except TypeError as error:  # a user's spelling, not a programming error: one line, before any work
                raise ValueError(str(error)) from None
            _IMPORTED[name] = cls
        return _IMPORTED[name]
    raise ValueError(
        f"Unknown strategy {name!r}; choose one of {', '.join(available_strategies())}, or name an importable "
        "class as module:Class (a subclass of uat_hf.strategies.base.BalancingStrategy)."
    )


def describe_strategy(fields: Mapping[str, object]) -> str:
    """The recipe's strategy in a few words (:meth:`~uat_hf.strategies.base.BalancingStrategy.describe`), or its bare
    name when it cannot be found here (a model card written where an outside strategy is not installed)."""
    name = str(fields.get("strategy", "proportional"))
    try:
        return get_strategy(name).describe({**fields, "strategy": name})
    except (ValueError, TypeError):
        return name


def build_distribution(name: str, sizes: Mapping[str, int], *, temperature: float | None = None,
                       probabilities: Sequence[float] | None = None, **knobs) -> CorpusDistribution:
    """The distribution strategy ``name`` starts from over corpora of these ``sizes``: the hand-given
    ``probabilities``, else the τ prior (τ: ``temperature``, else the strategy's own), with the strategy built
    from ``knobs`` (its constructor's keyword arguments). The one builder of a distribution:
    ``UATConfig.corpus_distribution`` calls it with a config's prior and knobs."""
    cls = get_strategy(name)
    names = list(sizes)
    if probabilities is not None:
        prior = np.asarray(probabilities, dtype=np.float64)
    else:
        tau = temperature if temperature is not None else cls.prior_temperature
        if tau is None:
            raise ValueError(f"Strategy {name!r} samples with hand-given probabilities; pass probabilities.")
        prior = temperature_prior(dict(sizes), tau)
    return CorpusDistribution(names, prior, strategy=name, proposer=cls(names, prior, **knobs))
