"""uat-hf: uncertainty-aware multi-corpus balancing (MultiUAT) for Hugging Face Transformers.

The public API, by layer (imports run one way, top to bottom):

* math — :func:`temperature_prior`, :data:`MEASURES`, :class:`CorpusScorer`
* sampling — :class:`CorpusBatchSampler`
* rewards — :class:`UncertaintyReward` (MultiUAT), :class:`GradientCosineReward` (MultiDDS-S)
* callback — :class:`CorpusBalancingCallback`
* trainer — :class:`UATConfig`, :class:`UATTrainer`
"""

from .callback import CorpusBalancingCallback
from .gradient_cosine import GradientCosineReward
from .measures import MEASURES, RELEASED_CODE_MEASURES
from .priors import temperature_prior
from .rewards import UncertaintyReward
from .sampler import CorpusBatchSampler
from .scorer import CorpusScorer
from .uat_config import UATConfig
from .uat_trainer import UATTrainer, corpus_dataloader

__version__ = "0.1.0"

__all__ = [
    "CorpusBalancingCallback",
    "CorpusBatchSampler",
    "CorpusScorer",
    "GradientCosineReward",
    "MEASURES",
    "RELEASED_CODE_MEASURES",
    "UATConfig",
    "UATTrainer",
    "UncertaintyReward",
    "corpus_dataloader",
    "temperature_prior",
]
