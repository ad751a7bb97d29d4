"""uat-hf: uncertainty-aware multi-corpus balancing (MultiUAT) for Hugging Face Transformers.

The public API, by layer (imports run one way, top to bottom):

* math — :func:`temperature_prior`, :data:`MEASURES`, :class:`CorpusScorer`
* the corpus distribution p, its one owner — :class:`CorpusDistribution`
* sampling — :class:`CorpusBatchSampler` (reads p)
* rewards — the interface and model helpers (``rewards``), :class:`UncertaintyReward` (MultiUAT, ``uncertainty``),
  :class:`GradientCosineReward` (MultiDDS-S, ``gradient_cosine``)
* callback — :class:`CorpusBalancingCallback`
* trainer — :class:`UATConfig`, :func:`attach_balancing` and :class:`CorpusEvaluation` (a stock
  ``Seq2SeqTrainer``), :class:`UATTrainer`

The names are imported on first use (PEP 562), so that ``import uat_hf.plotting`` (or any light module)
does not load torch and Transformers' trainer; ``from uat_hf import UATTrainer`` works as usual.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

#: Public name → the module that defines it.
_EXPORTS = {
    "CorpusBalancingCallback": ".callback",
    "CorpusBatchSampler": ".sampler",
    "CorpusDistribution": ".distribution",
    "CorpusEvaluation": ".corpus_evaluation",
    "CorpusScorer": ".scorer",
    "GradientCosineReward": ".gradient_cosine",
    "MEASURES": ".measures",
    "RELEASED_CODE_MEASURES": ".measures",
    "UATConfig": ".uat_config",
    "UATTrainer": ".uat_trainer",
    "UncertaintyReward": ".uncertainty",
    "attach_balancing": ".balancing",
    "corpus_dataloader": ".balancing",
    "temperature_prior": ".priors",
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:
    from .balancing import attach_balancing, corpus_dataloader
    from .callback import CorpusBalancingCallback
    from .corpus_evaluation import CorpusEvaluation
    from .distribution import CorpusDistribution
    from .gradient_cosine import GradientCosineReward
    from .measures import MEASURES, RELEASED_CODE_MEASURES
    from .priors import temperature_prior
    from .sampler import CorpusBatchSampler
    from .scorer import CorpusScorer
    from .uat_config import UATConfig
    from .uat_trainer import UATTrainer
    from .uncertainty import UncertaintyReward


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
