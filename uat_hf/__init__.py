"""uat-hf: uncertainty-aware multi-corpus balancing (MultiUAT) for Hugging Face Transformers.

The public API, by subpackage (imports run one way: utils → data → models → sampling → strategies →
evaluation → training → cli):

* ``sampling`` — :class:`CorpusDistribution` (the one owner of p), :func:`temperature_prior`,
  :class:`CorpusBatchSampler` (reads p)
* ``strategies`` — :func:`register_strategy` (a strategy of your own, docs/strategies.md); :class:`CorpusScorer`;
  :data:`MEASURES` and :class:`UncertaintyReward` (MultiUAT), :class:`GradientCosineReward` (MultiDDS-S)
* ``evaluation`` — :class:`CorpusEvaluation` (per-corpus BLEU/chrF for a stock ``Seq2SeqTrainer``)
* ``training`` — :class:`UATConfig` (:class:`BalancingArguments`, its balancing fields alone), :class:`UATTrainer`,
  :func:`attach_balancing`, :class:`CorpusBalancingCallback`

The names are imported on first use (PEP 562), so that ``import uat_hf.evaluation.plotting`` (or any light module)
does not load torch and Transformers' trainer; ``from uat_hf import UATTrainer`` works as usual.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .utils.logging import configure_library_logger
from .utils.version import __version__

configure_library_logger()  # uat-hf's messages follow Transformers' verbosity (uat_hf.utils.logging)

#: Public name → the module that defines it.
_EXPORTS = {
    "BalancingArguments": ".training.balancing_arguments",
    "CorpusBalancingCallback": ".training.callback",
    "CorpusBatchSampler": ".sampling.sampler",
    "CorpusDistribution": ".sampling.distribution",
    "CorpusEvaluation": ".evaluation.corpus_evaluation",
    "CorpusScorer": ".strategies.scorer",
    "GradientCosineReward": ".strategies.multidds_s.gradient_cosine",
    "MEASURES": ".strategies.multiuat.measures",
    "RELEASED_CODE_MEASURES": ".strategies.multiuat.measures",
    "UATConfig": ".training.uat_config",
    "UATTrainer": ".training.uat_trainer",
    "UncertaintyReward": ".strategies.multiuat.uncertainty",
    "attach_balancing": ".training.balancing",
    "corpus_dataloader": ".training.balancing",
    "register_strategy": ".strategies.registry",
    "temperature_prior": ".sampling.priors",
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:
    from .evaluation.corpus_evaluation import CorpusEvaluation
    from .sampling.distribution import CorpusDistribution
    from .sampling.priors import temperature_prior
    from .sampling.sampler import CorpusBatchSampler
    from .strategies.multidds_s.gradient_cosine import GradientCosineReward
    from .strategies.multiuat.measures import MEASURES, RELEASED_CODE_MEASURES
    from .strategies.multiuat.uncertainty import UncertaintyReward
    from .strategies.registry import register_strategy
    from .strategies.scorer import CorpusScorer
    from .training.balancing import attach_balancing, corpus_dataloader
    from .training.balancing_arguments import BalancingArguments
    from .training.callback import CorpusBalancingCallback
    from .training.uat_config import UATConfig
    from .training.uat_trainer import UATTrainer


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
