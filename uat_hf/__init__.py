"""uat-hf: uncertainty-aware multi-corpus balancing (MultiUAT) for Hugging Face Transformers.

The public API, by layer (imports run one way, top to bottom):

* math — :func:`temperature_prior`, :data:`MEASURES`, :class:`CorpusScorer`
* the corpus distribution p, its one owner — :class:`CorpusDistribution`
* sampling — :class:`CorpusBatchSampler` (reads p)
* rewards — the interface and model helpers (``rewards``), :class:`UncertaintyReward` (MultiUAT, ``uncertainty``),
  :class:`GradientCosineReward` (MultiDDS-S, ``gradient_cosine``)
* callback — :class:`CorpusBalancingCallback`
* trainer — :class:`UATConfig`, :func:`attach_balancing` (a stock ``Seq2SeqTrainer``), :class:`UATTrainer`
"""

from .balancing import attach_balancing
from .callback import CorpusBalancingCallback
from .distribution import CorpusDistribution
from .gradient_cosine import GradientCosineReward
from .measures import MEASURES, RELEASED_CODE_MEASURES
from .priors import temperature_prior
from .sampler import CorpusBatchSampler
from .scorer import CorpusScorer
from .uat_config import UATConfig
from .uat_trainer import UATTrainer, corpus_dataloader
from .uncertainty import UncertaintyReward

__version__ = "0.1.0"

__all__ = [
    "CorpusBalancingCallback",
    "CorpusBatchSampler",
    "CorpusDistribution",
    "CorpusScorer",
    "GradientCosineReward",
    "MEASURES",
    "RELEASED_CODE_MEASURES",
    "UATConfig",
    "UATTrainer",
    "UncertaintyReward",
    "attach_balancing",
    "corpus_dataloader",
    "temperature_prior",
]
