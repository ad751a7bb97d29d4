"""The balancing fields of :class:`~uat_hf.training.uat_config.UATConfig`, declared without torch.

``UATConfig`` is a ``Seq2SeqTrainingArguments``, whose module imports torch (seconds, ~15 s on a busy
machine). Its own fields live here, in a pure-Python dataclass that ``UATConfig`` inherits, so that
``uat-train --help`` can list them (and a recipe be checked against their types) without importing torch.
The checks stay in ``UATConfig.__post_init__``, where the Trainer's fields are known too.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..strategies.multiuat.measure_names import MEASURES, RELEASED_CODE_MEASURES
from ..strategies.registry import available_strategies

__all__ = [
    "DEFAULT_MEASURE",
    "HEALTH_ACTIONS",
    "MC_BATCH_MODES",
    "MEASURES",
    "RELEASED_CODE_MEASURES",
    "MOVED_SETTINGS",
    "BalancingArguments",
]

MC_BATCH_MODES = ("auto", "loop", "replicate")
#: What a corpus the corpus-health checks find broken gets (corpus_health_action): a warning only, or also a cap on
#: its share of p (uat_hf.training.health_callback).
HEALTH_ACTIONS = ("warn", "set_aside", "down_weight")
DEFAULT_MEASURE = "enteos"
#: Fields that were ``UATConfig``'s and are now a strategy's own settings: old name → (strategy, setting). A recipe
#: or command line that still names one is read as that setting, with a warning (a saved run's recipe.yaml stays
#: loadable); ``UATConfig(...)`` no longer takes them.
MOVED_SETTINGS: dict[str, tuple[str, str]] = {
    **{f"mixing_law_{name}": ("mixing-law", name)
       for name in ("window_steps", "sweeps", "factor", "eta", "ema", "anchor", "update", "evidence")},
    **{f"dds_{name}": ("multidds-s", name) for name in ("train_batch_tokens", "dropout", "per_pair_train_batches")},
}


@dataclass
class BalancingArguments:
    """The corpus-balancing knobs of MultiUAT and its baselines (``UATConfig``'s own fields)."""

    _argument_group_name = "balancing (uat_hf.UATConfig)"

    strategy: str = field(
        default="proportional",
        metadata={
            "help": f"How corpora are mixed: one of {', '.join(available_strategies())}, or an outside strategy's "
            "module:Class (docs/strategies.md). 'multiuat-<measure>' (e.g. multiuat-entsent) is short for strategy "
            "multiuat with that measure."
        },
    )
    sampling_temperature: float | None = field(
        default=None,
        metadata={
            "help": "τ of strategy 'temperature' (q_τ ∝ size^(1/τ); default 5, as in the paper). Only that strategy "
            "reads it: 'proportional' is τ = 1 and 'uniform' τ = ∞ by definition."
        },
    )
    scorer_prior_temperature: float | None = field(
        default=None,
        metadata={
            "help": "multiuat / multidds-s / mixing-law: τ of the prior p starts from (default 1: proportional, as "
            "in the paper). Static strategies refuse it."
        },
    )
    corpus_probabilities: dict | str | None = field(
        default=None,
        metadata={
            "help": "Hand-given probabilities, one per training corpus, as a mapping or a JSON object string "
            "(e.g. '{\"wmt\": 0.7, \"emea\": 0.3}'); they must sum to 1. Strategy 'fixed' samples with them "
            "throughout; multiuat / multidds-s start their scorer from them (every value must then be > 0)."
        },
    )
    strategy_settings: dict | str | None = field(
        default=None,
        metadata={
            "help": "The strategy's own settings (a mapping or JSON); also --<strategy>.<setting> VALUE, e.g. "
            "--mixing-law.eta 0.5, --multidds-s.dropout true (docs/mixing_law.md, docs/multidds.md)."
        },
    )
    max_tokens: int | None = field(
        default=None,
        metadata={
            "help": "Token budget per batch (padding counted, max of source and target length), fairseq style. "
            "When unset, batches hold per_device_train_batch_size examples."
        },
    )
    mix_corpora: bool = field(
        default=False,
        metadata={"help": "Instance-level mixing: draw the corpus per example instead of per batch."},
    )
    mix_pool_batches: int = field(
        default=1,
        metadata={
            "help": "With mix_corpora: draw this many batches at a time and re-batch their examples sorted by length "
            "(HF group_by_length style): less padding, more alike batches. 1: no grouping."
        },
    )
    stream_buffer_examples: int = field(
        default=10_000,
        metadata={
            "help": "Streamed corpora: examples each corpus reads ahead into its buffer, sorted by length there and "
            "packed into batches (the memory a stream holds; larger: less padding)."
        },
    )
    measure: str | None = field(
        default=None,
        metadata={
            "help": f"MultiUAT uncertainty measure: one of {', '.join(MEASURES + RELEASED_CODE_MEASURES)} (default "
            f"{DEFAULT_MEASURE}, or the one a 'multiuat-<measure>' strategy names)."
        },
    )
    mc_samples: int = field(default=30, metadata={"help": "K, Monte Carlo dropout passes per dev batch."})
    mc_tolerance: float | None = field(
        default=None,
        metadata={
            "help": "multiuat: adaptive K. The MC passes run in blocks of mc_min_samples, each block only for the "
            "corpora whose reward's standard error is above this fraction of the rewards' spread, until none is; "
            "never more than mc_samples. Unset (default): always mc_samples passes, as in the paper."
        },
    )
    mc_min_samples: int = field(
        default=5, metadata={"help": "multiuat with mc_tolerance: the fewest MC passes, and the block size (>= 2)."}
    )
    update_every: int = field(default=1000, metadata={"help": "S, optimizer steps between two balancing updates."})
    scorer_lr: float = field(default=1e-4, metadata={"help": "Adam learning rate of the corpus scorer ψ."})
    scorer_steps: int = field(default=200, metadata={"help": "Adam steps on the scorer per balancing update."})
    scorer_prior_fit: str = field(
        default="released",
        metadata={
            "help": "How ψ starts: 'released' fits it to the prior from uniform with the scorer's own Adam, which "
            "then serves every update (the authors' code: its early updates move p several times farther); 'exact' "
            "starts at ψ = log q with a fresh Adam."
        },
    )
    dev_batch_tokens: int = field(
        default=1024,
        metadata={"help": "Tokens of the dev batch drawn per corpus at each update (an example counts max(source, "
                  "target) tokens, as in the authors' code)."},
    )
    mc_batch_mode: str = field(
        default="auto",
        metadata={
            "help": "How the K MC-dropout passes run: 'loop' (K forward passes), 'replicate' (the batch repeated "
            "K times along the batch axis, in memory-bounded chunks) or 'auto' (replicate on GPU, loop on CPU)."
        },
    )
    corpus_health_checks: int = field(
        default=3,
        metadata={"help": "Checks per run of how much the model relies on the sources of each corpus's training pairs "
                  "against its dev pairs; a corpus whose training pairs look broken (misaligned, noise) at two checks "
                  "in a row gets a warning naming it (docs/usage.md, 'Corpus health'). 0: no checks. Needs dev "
                  "corpora."},
    )
    corpus_health_tokens: int = field(
        default=4096,
        metadata={"help": "Tokens of each corpus's training sample and of its dev sample in the corpus-health "
                  "checks (each read in two halves, the second only where the first cannot clear the corpus)."},
    )
    corpus_health_holdout: float = field(
        default=0.02,
        metadata={"help": "Share of each training corpus's pairs kept out of training as the checks' training-side "
                  "samples (corpus_health_tokens for each check, a fresh sample each time, at most this share; a "
                  "corpus that cannot spare 16 pairs is checked on pairs it trains on): a model that has memorised "
                  "broken pairs uses their sources as if they were sound, so only pairs it never trained on show "
                  "them. 0: the checks sample pairs the model trains on."},
    )
    corpus_health_action: str = field(
        default="warn",
        metadata={"help": "What a corpus found broken by the corpus-health checks gets: 'warn' (a warning, training "
                  "unchanged), 'set_aside' (suspect at two checks in a row: it also keeps at most corpus_health_share "
                  "of p from then on, whatever the strategy; the others share the rest in the strategy's ratio) or "
                  "'down_weight' (from the first check that finds it damaged with confidence, it keeps at most its "
                  "share of the strategy's p times the measured ratio of source uses, at least corpus_health_share; "
                  "the cap follows each check and is lifted when a check no longer finds the damage).",
                  "choices": list(HEALTH_ACTIONS)},
    )
    corpus_health_share: float = field(
        default=0.01,
        metadata={"help": "corpus_health_action=set_aside: the share of p a corpus set aside keeps at most; "
                  "down_weight: the least share of p a down-weighted corpus keeps."},
    )
    allow_inexact_resume: bool = field(
        default=False,
        metadata={
            "help": "Resume from a checkpoint without uat_balancing_state.json (the sampler restarts its epoch and "
            "the scorer its prior, so the run does not continue the same sequence). Refused by default."
        },
    )
    allow_nonfinite_loss: bool = field(
        default=False,
        metadata={
            "help": "Train on when the training loss (or the gradient norm) is nan or inf. By default training stops "
            "at that step with an error naming it, and no model of non-finite weights is saved."
        },
    )
    bleu_tokenize: str = field(
        default="13a", metadata={"help": "sacreBLEU tokenizer (13a; 'zh', 'ja-mecab', 'char', ... for CJK targets)."}
    )
    corpus_metrics: list[str] = field(
        default_factory=lambda: ["bleu", "chrf"],
        metadata={"help": "Per-corpus sacreBLEU metrics and means: bleu, chrf (always), chrfpp, ter."},
    )
    predict_with_generate: bool = field(
        default=True, metadata={"help": "Evaluate by generation (needed for BLEU/chrF)."}
    )
