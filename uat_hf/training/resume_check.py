"""Whether a resume would continue the same run, decided before any file of the run changes.

A resume reads a checkpoint's balancing state, cuts ``balancing_history.jsonl`` back to the checkpoint's
records and goes on. Everything that can refuse it is checked here first, reading only: the state file (its
format and keys), the strategy and corpora it was trained with, the settings that decide what the resumed run
computes (:data:`FIXED_ON_RESUME`, saved in the state by the balancing callback), the prior (where the
distribution is built) and the history's record count. A refusal is one ``ValueError`` naming what differs, and
the run folder is left as it was. ``uat-train`` calls :func:`check_resume` as soon as it knows the corpora, before
it writes the tokenizer; ``UATTrainer.train`` and the balancing callback (under a stock Trainer) call it again
before they touch the history.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, fields
from typing import Any

from ..sampling.distribution import CorpusDistribution
from ..strategies.registry import get_strategy
from ..utils.checkpoints import BALANCING_STATE_FILE, HISTORY_FILE, HistoryFile
from .balancing_arguments import MOVED_SETTINGS, BalancingArguments

# 2: the distribution saved in one piece; 3: without its history (balancing_history.jsonl has it); 4: the
# distribution's p is the strategy's (not a probe mix), the strategy's own state beside it (and, since 4 too,
# optionally the settings of FIXED_ON_RESUME)
STATE_FORMAT = 4

#: Balancing fields that may change on resume: they change what is logged, checked or allowed, not what the
#: resumed run computes. The Trainer's own fields (max_steps, save/eval/logging settings, output_dir) may too.
CHANGEABLE_ON_RESUME = ("allow_inexact_resume", "allow_nonfinite_loss", "bleu_tokenize", "corpus_metrics",
                        "predict_with_generate", "corpus_health_checks", "corpus_health_tokens",
                        "corpus_health_holdout")
#: The fields a resume must keep: every other balancing field, and the seeds (they seed the dev batches, the
#: sampler and the dropout of each update).
FIXED_ON_RESUME = tuple(f.name for f in fields(BalancingArguments) if f.name not in CHANGEABLE_ON_RESUME) + (
    "seed", "data_seed")


def resume_settings(config: Any) -> dict[str, Any]:
    """The :data:`FIXED_ON_RESUME` values of ``config`` (a ``UATConfig``), as JSON would hold them; the
    corpus-health checks' settings too when they act on p or hold pairs out of training (a sample per check), and
    the share they hold out (0 when there are no checks: then nothing is held out). The strategy's own settings
    count in full (defaults included), so that a setting given at its default and one left out are the same run."""
    names = FIXED_ON_RESUME
    checks = getattr(config, "corpus_health_checks", 0) > 0
    holdout = float(getattr(config, "corpus_health_holdout", 0.0)) if checks else 0.0
    if getattr(config, "corpus_health_action", "warn") != "warn" or holdout:
        names += ("corpus_health_checks", "corpus_health_tokens")
    settings = {name: _plain(getattr(config, name, None)) for name in names}
    settings["corpus_health_holdout"] = holdout
    strategy = getattr(config, "strategy_class", None)
    if strategy is not None and strategy.settings_class is not None:
        settings["strategy_settings"] = _plain(asdict(strategy.strategy_settings(config)))
    return settings


def _saved_settings(saved: Mapping[str, Any], strategy: str) -> dict[str, Any]:
    """The settings a checkpoint saved, in today's form: one saved before ``corpus_health_holdout`` existed held
    nothing out (0), and one saved before its strategy's own settings left ``UATConfig`` has them as flat fields
    (:func:`_moved_into_strategy_settings`)."""
    if not saved:
        return {}
    return _moved_into_strategy_settings({"corpus_health_holdout": 0.0, **saved}, strategy)


def _moved_into_strategy_settings(saved: Mapping[str, Any], strategy: str) -> dict[str, Any]:
    """The settings a checkpoint saved before its strategy's own settings left ``UATConfig``
    (:data:`MOVED_SETTINGS`: flat fields, ``None`` for a default), in today's form: ``strategy_settings`` in full."""
    cls = get_strategy(strategy)
    if cls.settings_class is None or not any(name in saved for name in MOVED_SETTINGS):
        return dict(saved)
    given = {setting: saved[old] for old, (owner, setting) in MOVED_SETTINGS.items()
             if owner == strategy and saved.get(old) is not None}
    settings = {name: value for name, value in saved.items() if name not in MOVED_SETTINGS}
    settings["strategy_settings"] = _plain(asdict(cls.settings_class(**given)))
    return settings


def read_state(folder: str) -> dict[str, Any]:
    """The balancing state of checkpoint ``folder``, its format and keys checked (``ValueError`` otherwise)."""
    path = os.path.join(folder, BALANCING_STATE_FILE)
    with open(path, encoding="utf-8") as f:
        state = json.load(f)
    if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
        found = state.get("format") if isinstance(state, dict) else type(state).__name__
        raise ValueError(
            f"The balancing state {path!r} has format {found!r}, this version of uat_hf reads {STATE_FORMAT} (an "
            "older checkpoint kept the history, or p in the sampler and scorer, inside the state, or a mixing-law "
            "probe mix as p); resume it with the uat_hf that wrote it, or start a new run."
        )
    distribution = state.get("distribution")
    missing = [key for key in ("distribution", "sampler") if not isinstance(state.get(key), dict)]
    missing += [f"distribution.{key}" for key in ("format", "strategy", "names", "prior", "probabilities",
                                                 "update_count", "version")
                if isinstance(distribution, dict) and key not in distribution]
    if missing:
        raise ValueError(f"The balancing state {path!r} lacks {', '.join(missing)}: it is torn or was not written by "
                         "uat_hf. Resume from another checkpoint, or start a new run.")
    return state


def check_resume(folder: str, *, strategy: str, names: Sequence[str], settings: Mapping[str, Any],
                 distribution: Any = None) -> dict[str, Any]:
    """Refuse (``ValueError``) a resume from checkpoint ``folder`` that would not continue the same run; returns
    its balancing state. ``distribution``: the run's :class:`~uat_hf.sampling.distribution.CorpusDistribution`,
    to check the prior and the strategy's state too (``uat-train`` checks before it has built one)."""
    state = read_state(folder)
    saved = state["distribution"]
    if saved["strategy"] != strategy:
        raise ValueError(f"The checkpoint {folder!r} was trained with strategy {saved['strategy']!r}, this run uses "
                         f"{strategy!r}; resume with the same strategy or start a new run in another output_dir.")
    if list(saved["names"]) != list(names):
        raise ValueError(f"The checkpoint {folder!r} was trained on corpora {list(saved['names'])}, this run gives "
                         f"{list(names)}; resume with the same corpora in the same order, or start a new run in "
                         "another output_dir.")
    differ = [f"{name}={value!r} (this run gives {settings.get(name)!r})"
              for name, value in _saved_settings(state.get("settings") or {}, strategy).items()
              if name in settings and not _same(value, settings[name])]
    if differ:
        raise ValueError(f"The checkpoint {folder!r} was trained with {'; '.join(differ)}: the resumed run would "
                         "compute something else. Resume with the checkpoint's settings, or start a new run in "
                         "another output_dir.")
    if distribution is not None:
        distribution.check_state(saved)
    count = CorpusDistribution.records_in(saved)
    history = os.path.join(os.path.dirname(os.path.abspath(folder)), HISTORY_FILE)
    records = HistoryFile(history, writes=False).records(count)
    last = records[-1].get("probabilities") if records else None
    if last is not None and last != dict(zip(names, saved["probabilities"])):
        raise ValueError(f"The last history record of {history!r} (step {records[-1].get('step')}) has p = {last}, "
                         f"the checkpoint {folder!r} p = {saved['probabilities']}: the history is another run's.")
    return state


def check_trainer_resume(trainer: Any, folder: str | None) -> None:
    """:func:`check_resume` for a trainer whose balancing callback is ``trainer.balancing``, when ``folder`` (a
    resolved checkpoint) holds a balancing state (without one, ``allow_inexact_resume`` accepted it). The checked
    state is handed to the callback (``checked_resume``), which restores from it without reading it again; a folder
    checked already is not checked twice."""
    callback = trainer.balancing
    checked = callback.checked_resume
    if folder and os.path.isfile(os.path.join(folder, BALANCING_STATE_FILE)) and (checked or ("",))[0] != folder:
        state = check_resume(folder, strategy=callback.strategy, names=callback.sampler.names,
                             settings=callback.settings, distribution=callback.distribution)
        callback.checked_resume = (folder, state)


def _plain(value: Any) -> Any:
    """``value`` as JSON gives it back (tuples as lists, enums as their value)."""
    value = getattr(value, "value", value)
    return json.loads(json.dumps(value, default=str))


def _same(saved: Any, given: Any) -> bool:
    if isinstance(saved, float) and isinstance(given, float) and math.isnan(saved) and math.isnan(given):
        return True
    return saved == _plain(given)
