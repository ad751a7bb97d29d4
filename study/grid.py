"""Writes ``study/recipes/<setup>-<regime>-<strategy>.yaml``, one recipe per cell of the study (issue 19).

    python study/grid.py            # rewrite study/recipes/ (tests/test_study.py checks it is current)

The recipes are generated so that the cells of one setup and regime differ only where the strategy needs it:
one table of shared settings per setup and regime, plus the balancing fields of the dynamic strategies.
Each dynamic recipe states its scorer drift ratio in a comment: ψ can travel at most ``updates ×
scorer_steps × scorer_lr`` over a run (Adam moves each logit by about ``scorer_lr`` per step), which should be
comparable to the log-size spread ``ln(largest/smallest)`` of the corpora, so that p drifts from the prior
over the whole run instead of jumping in one update. Updates are counted before the last step (an update at
the last step changes no batch).

The known-answer cells (issue 36; study/study.md, "Known-answer cells") are regime A's recipes on the corpora that
``study/known_answer_data.py`` derives from the bundled sample: ``misaligned-A-<strategy>`` and
``duplicated-A-<strategy>`` (:data:`KNOWN_STRATEGIES`, the oracle a fixed prior), and the oracle share sweep
``misaligned-Adev-<prior>``, scored on the dev sets with seed :data:`SWEEP_SEED`. They differ from
multidomain-A's recipes only in ``corpus_dir``, ``dedupe``, ``eval_split`` (the sweep) and the strategy.
"""

from __future__ import annotations

import math
import sys
import textwrap
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))  # noise, when imported from elsewhere
import noise  # noqa: E402

RECIPES = Path(__file__).resolve().parent / "recipes"
#: The MultiUAT measures the study compares (one cell each, spelled multiuat-<measure>).
MULTIUAT_MEASURES = ("enteos", "exptp", "entsent")
SCORER_STEPS = 200  # UATConfig's default, the released code's 200 Adam steps per update

# Training pairs after cleaning (uat-train's "data:" line; the multilingual counts are ../shared/corpora/README.md's,
# which that setup does not filter).
MULTIDOMAIN_SIZES = {"software": 17337, "descriptions": 11025, "bible": 8867, "dictionary": 4527}
MULTILINGUAL_SIZES = {"it": 137104, "fr": 53133, "de": 38340, "ja": 13638, "ko": 11477, "ru": 10086, "cs": 6136,
                      "zh_CN": 1616}
#: mixing-law's probe phase is at most this share of each update interval (its update_every is raised to fit).
PROBE_SHARE = 0.25
#: mixing-law's dev-loss forwards, estimated as a share of the training compute, at most this (issue 26's 3 %
#: target); a grid whose default measurement would cost more uses :data:`CHEAP_MEASUREMENT` instead.
MEASURING_SHARE = 0.03
#: One sweep of windows (4N + 1 -> N + 1 measurements) on half the dev tokens: screened on the dev sets of
#: regime A with seed 11 against the default and two other cheap settings (docs/mixing_law.md, "Screening").
CHEAP_MEASUREMENT = {"strategy_settings": {"sweeps": 1}, "dev_batch_tokens": 256}

DEMO_DATA = {  # recipes/demo.yaml
    "corpus_dir": "bundled:multidomain-en-de", "direction": "multi-domain", "source_lang": "en",
    "target_lang": "de", "max_source_length": 64, "max_target_length": 64,
}
DEMO_MODEL = {
    "model_name_or_path": "small",
    "model_overrides": {"d_model": 192, "encoder_layers": 2, "decoder_layers": 2, "encoder_ffn_dim": 768,
                        "decoder_ffn_dim": 768},
    "vocab_size": 3000, "generation_overrides": {"no_repeat_ngram_size": 3, "repetition_penalty": 1.2},
}
DEMO_OPTIMISATION = {
    "mix_corpora": True, "max_tokens": 1000, "learning_rate": 2.0e-3, "warmup_steps": 265,
    "lr_scheduler_type": "linear", "adam_beta1": 0.9, "adam_beta2": 0.98, "weight_decay": 0.0,
    "label_smoothing_factor": 0.0,
}
DEMO_OUTPUT = {
    "generation_num_beams": 4, "generation_max_length": 64, "per_device_eval_batch_size": 100, "logging_steps": 50,
    "save_total_limit": 1, "use_cpu": True, "report_to": "none", "disable_tqdm": True,
}
MULTILINGUAL_DATA = {
    "corpus_dir": "../shared/corpora/multilingual-ddtp", "direction": "many-to-one", "target_lang": "en",
    "corpora": list(MULTILINGUAL_SIZES),
    # The length-ratio filter counts whitespace words: Japanese and Chinese sources have almost none.
    "max_length_ratio": None, "max_source_length": 96, "max_target_length": 96,
}


def _evaluate_on_dev(steps: int, first_quarter: int = 2) -> dict:
    """Dev-set evaluation every quarter of training from ``first_quarter`` on (50 %, 75 %, 100 % by default):
    the largest corpus's dev loss over the last quarter says whether the run converged. A later start saves
    the decoding of large dev sets (eval_delay skips the evaluations before it)."""
    return {"eval_strategy": "steps", "eval_steps": steps // 4, "eval_delay": steps * first_quarter // 4}


#: (setup, regime) → what the regime is, the shared fields, and the balancing schedule of the dynamic strategies.
REGIMES: dict[tuple[str, str], dict] = {
    ("multidomain", "A"): {
        "about": "regime A (short): recipes/demo.yaml's run, 1,950 steps of mixed batches of <= 1,000 tokens "
                 "(~1.7 epochs of the bundled sample), 2.75M parameters; only the strategy changes. The demo's "
                 "max_train_minutes guard is left out, so every run trains all its steps.",
        "fields": {**DEMO_DATA, **DEMO_MODEL, **DEMO_OPTIMISATION, "max_steps": 1950, "eval_strategy": "no",
                   "save_strategy": "steps", "save_steps": 390, **DEMO_OUTPUT},
        "update_every": 150, "scorer_lr": 5.5e-4,
    },
    ("multidomain", "B"): {
        "about": "regime B (longer): the regime A model on a quarter of every bundled domain (train_fraction "
                 "0.25: 10.4K pairs, size ratios kept; same test sets as regime A), in batches of <= 4,000 "
                 "tokens for 2,000 steps (8M tokens, ~4x regime A's and 1.3x the 6,000 x 1,000-token CPU "
                 "design screened in study/study.md), aiming at a flat dev loss of the largest domain (it still "
                 "fell 1.8-3.4 % over the last quarter: study/study.md). Shaped for one GPU shared by the whole "
                 "grid (python study/run.py --device cuda --jobs 21); the same recipe runs on a CPU, slowly.",
        "fields": {**DEMO_DATA, "train_fraction": 0.25, **DEMO_MODEL, **DEMO_OPTIMISATION, "max_tokens": 4000,
                   "max_steps": 2000, **_evaluate_on_dev(2000), "save_strategy": "steps", "save_steps": 500,
                   **DEMO_OUTPUT},
        "update_every": 100, "scorer_lr": 3.5e-4,
    },
    ("multilingual", "B"): {
        "about": "regime B (longer): 8 languages into English, it 137K down to zh_CN 1.6K pairs, 5 % of "
                 "each (train_fraction 0.05: 13.6K pairs, ratios kept), the regime A model with an 8K "
                 "vocabulary for 8 scripts (3.71M parameters), in batches of <= 4,000 tokens for 2,000 steps (8M "
                 "tokens, ~17 epochs), shaped like multi-domain B for one shared GPU; greedy decoding, and dev "
                 "evaluations at 75 % and 100 % only, keep the 4,000-sentence dev and test sets affordable.",
        "fields": {**MULTILINGUAL_DATA, "train_fraction": 0.05, **DEMO_MODEL, "vocab_size": 8000,
                   **DEMO_OPTIMISATION, "max_tokens": 4000, "max_steps": 2000,
                   **_evaluate_on_dev(2000, first_quarter=3), "save_strategy": "steps", "save_steps": 500,
                   **DEMO_OUTPUT, "generation_num_beams": 1, "generation_max_length": 96},
        "update_every": 100, "scorer_lr": 1.2e-3,
    },
    ("multilingual", "B2"): {
        "about": "regime B2: multilingual B reshaped so that every language keeps >= 1,000 training pairs (issue "
                 "26): zh_CN (1.6K pairs) is dropped, and 20 % of the other 7 languages are kept (train_fraction "
                 "0.2: it 27.4K down to cs 1.2K, 54K pairs, ratios kept). Keeping zh_CN would need train_fraction "
                 ">= 0.62, 168K pairs, under 1.5 epochs of the 8M-token budget: far from the many epochs regime B "
                 "aims at. Otherwise multilingual B: the same model, batches, steps, decoding and dev evaluations.",
        "fields": {**MULTILINGUAL_DATA, "corpora": [c for c in MULTILINGUAL_SIZES if c != "zh_CN"],
                   "train_fraction": 0.2, **DEMO_MODEL, "vocab_size": 8000, **DEMO_OPTIMISATION, "max_tokens": 4000,
                   "max_steps": 2000, **_evaluate_on_dev(2000, first_quarter=3), "save_strategy": "steps",
                   "save_steps": 500, **DEMO_OUTPUT, "generation_num_beams": 1, "generation_max_length": 96},
        "update_every": 100, "scorer_lr": 8.2e-4,
    },
}

#: Balancing fields beyond the schedule: the demo's cheap measurement (K = 5 passes on 512 dev tokens per corpus).
DEV_BATCH = {"dev_batch_tokens": 512}
MC_SAMPLES = {"mc_samples": 5}

# ----------------------------------------------------------------------------------- known-answer cells (issue 36)

#: Where study/known_answer_data.py writes the known-answer corpora (relative to the repository root).
KNOWN_ANSWER_DIR = "runs/known-answer"
#: The corpus each known-answer setup breaks: trained on with misaligned targets, or repeated.
BROKEN_CORPUS = {"misaligned": "software", "duplicated": "dictionary"}
#: Per setup: what it is, the fields that differ from regime A's, and the training pairs after the cell's own
#: cleaning (known_answer_data's construction.json; a test checks them).
KNOWN_ANSWER: dict[str, dict] = {
    "misaligned": {
        "about": "known-answer cell (issue 36), misaligned: the bundled sample with software's training targets "
                 "exchanged between pairs of the same word lengths (study/known_answer_data.py, seed 36: all "
                 "17,337 pairs broken, 17,336 survive the length filters, 41.5 % of the examples under "
                 "proportional sampling). Dev and test sets are the bundled ones. Known answer: software's "
                 "training data can only hurt, so the right mix gives it almost nothing; the oracle is software "
                 "at 0.01 and the other three proportional to their sizes.",
        "fields": {"corpus_dir": f"{KNOWN_ANSWER_DIR}/misaligned"},
        "sizes": {**MULTIDOMAIN_SIZES, "software": 17336},
    },
    "duplicated": {
        "about": "known-answer cell (issue 36), duplicated: the bundled sample with dictionary's training file "
                 "repeated 6 times (study/known_answer_data.py), 42.2 % of the examples under proportional "
                 "sampling. dedupe is off: uat-train would otherwise drop the copies, and a user whose corpus "
                 "reached them twice (several files, several releases) and who turned dedupe off, or whose copies "
                 "differ in whitespace or punctuation, trains on them. Known answer: the proportional prior without "
                 "the copies (the oracle).",
        "fields": {"corpus_dir": f"{KNOWN_ANSWER_DIR}/duplicated", "dedupe": False},
        "sizes": {**MULTIDOMAIN_SIZES, "dictionary": 6 * MULTIDOMAIN_SIZES["dictionary"]},
    },
}
#: The product's decoder-only recipe, whose fields (all but the balancing ones) are the decoder-only noise cells'.
CAUSAL_RECIPE = Path(__file__).resolve().parent.parent / "recipes" / "offline_causal_multilingual.yaml"
_BALANCING_FIELDS = ("output_dir", "seed", "eval_split", "strategy", "measure", "mc_samples", "update_every",
                     "scorer_lr", "dev_batch_tokens")
BUNDLED_MULTILINGUAL = {"corpus_dir": "bundled:multilingual-ddtp", "direction": "many-to-one", "target_lang": "en",
                        "corpora": ["fr", "de", "cs", "ko"], "max_source_length": 96, "max_target_length": 96,
                        "max_length_ratio": 1.5}
#: The regime A grids a noise kind breaks a corpus of (noise.NoiseKind.base): what each is and its fields.
NOISE_BASES: dict[str, dict] = {
    "multidomain": REGIMES["multidomain", "A"],
    "multilingual": {
        "about": "regime A on the bundled multilingual sample (Debian package descriptions, fr, de, cs, ko → en: "
                 "4,000 / 3,000 / 1,500 / 1,000 training pairs, 100 dev and 100 test pairs each): the regime A model "
                 "and schedule (1,950 steps of mixed batches of <= 1,000 tokens) with an 8K vocabulary for three "
                 "scripts, lengths up to 96 tokens.",
        "fields": {**BUNDLED_MULTILINGUAL, **DEMO_MODEL, "vocab_size": 8000, **DEMO_OPTIMISATION, "max_steps": 1950,
                   "eval_strategy": "no", "save_strategy": "steps", "save_steps": 390, **DEMO_OUTPUT,
                   "generation_max_length": 96},
    },
    "causal": {
        "about": "the decoder-only recipe (recipes/offline_causal_multilingual.yaml: a 1.15M-parameter Llama-style "
                 "causal LM, the bundled multilingual sample fr, de, cs, ko → en as prompts and completions, 2,000 "
                 "steps of <= 2,000 tokens, greedy decoding), its fields but the balancing ones.",
        "fields": {key: value for key, value in yaml.safe_load(CAUSAL_RECIPE.read_text(encoding="utf-8")).items()
                   if key not in _BALANCING_FIELDS},
    },
}
#: The noise cells (issue 45): one corpus broken by a common kind of noise (study/noise.py). Training pairs after
#: each cell's cleaning (construction.json; a test checks them).
NOISE_SIZES: dict[str, dict[str, int]] = {
    "control": MULTIDOMAIN_SIZES,
    "misordered": {"bible": 8867, "descriptions": 11025, "dictionary": 4527, "software": 17337},
    "neardup": {"bible": 8867, "descriptions": 11025, "dictionary": 23495, "software": 17337},
    "partial20": {"bible": 8867, "descriptions": 11025, "dictionary": 4527, "software": 17335},
    "partial50": {"bible": 8867, "descriptions": 11025, "dictionary": 4527, "software": 17333},
    "short": {"bible": 8867, "descriptions": 11025, "dictionary": 4527, "software": 13544},
    "untranslated": {"bible": 8867, "descriptions": 11025, "dictionary": 4527, "software": 17220},
    "wronglang": {"bible": 8867, "descriptions": 9196, "dictionary": 4527, "software": 17337},
    "mluntranslated": {"cs": 1393, "de": 2745, "fr": 3570, "ko": 901},
    "causalpartial50": {"cs": 1393, "de": 2745, "fr": 3571, "ko": 901},
}
for _setup, (_kind, _transform) in noise.KINDS.items():
    BROKEN_CORPUS[_setup] = _kind.corpus
    _sample = "bundled sample" if _kind.base == "multidomain" else "bundled multilingual sample"
    KNOWN_ANSWER[_setup] = {
        "about": f"noise cell (issue 45), {_setup}: the {_sample} in which {_kind.corpus}: {_kind.about} "
                 f"(study/noise.py, seed 36). Dev and test sets are the bundled ones. The answer (the best static "
                 f"share of {_kind.corpus}) is found by the share sweep on the dev sets.",
        "fields": {"corpus_dir": f"{KNOWN_ANSWER_DIR}/{_setup}", **({} if _kind.dedupe else {"dedupe": False})},
        "sizes": NOISE_SIZES.get(_setup, MULTIDOMAIN_SIZES),
    }
#: The oracle of a noise cell: the share of its broken corpus that won the share sweep on the dev sets (None:
#: proportional won, the corpus is kept as it is). A cell has no oracle before its sweep has run.
NOISE_ORACLE_SHARES: dict[str, float | None] = {
    # untranslated-Adev, seed 11, macro over the intact corpora: proportional (0.414) BLEU 4.64 / chrF 25.43,
    # share 0.01 5.25 / 27.89, 0.05 5.13 / 27.15, 0.15 5.25 / 27.33: 0.01 (BLEU tied with 0.15, chrF ahead).
    "untranslated": 0.01,
    # partial50-Adev, seed 11, macro over the intact corpora: proportional (0.415) 2.53 / 21.60, share 0.01
    # 5.35 / 27.74, 0.05 5.22 / 27.61, 0.15 4.86 / 26.79: 0.01 (ahead in both).
    "partial50": 0.01,
    # short-Adev, seed 11, macro over the intact corpora: proportional (0.357) 4.25 / 24.50, share 0.01
    # 5.15 / 27.45, 0.05 5.49 / 27.48, 0.15 4.93 / 26.54: 0.05 (ahead in both).
    "short": 0.05,
    # wronglang-Adev, seed 11, macro over the intact corpora: proportional (0.230) 5.87 / 22.43, share 0.01
    # 6.80 / 24.34, 0.05 6.34 / 24.19, 0.15 6.28 / 23.82: 0.01 (ahead in both).
    "wronglang": 0.01,
    # neardup-Adev, seed 11, macro over all four corpora (dictionary's repeated pairs are sound, so its dev set
    # counts): proportional (0.387) 5.65 / 24.40, share 0.01 6.51 / 26.87, 0.05 6.35 / 26.22, 0.15 6.27 / 25.95:
    # 0.01 (ahead in both; dictionary's own dev set falls from 2.32 to 0.72 BLEU there). The deduplicated
    # proportional share (0.108, reweight's run) gives 6.53 / 26.65: every share from 0.01 to 0.15 is within one
    # run's noise (about 0.5 BLEU) of it.
    "neardup": 0.01,
    # misordered-Adev, seed 11, macro over the intact corpora in the needs-translation view: proportional (0.415)
    # 3.86 / 24.47, share 0.01 5.25 / 27.51, 0.05 5.14 / 27.44, 0.15 4.92 / 26.45: 0.01 (ahead in both). Over all
    # four corpora in the view 0.15 leads in BLEU (4.61 against 4.16 at 0.01; shuffled targets still teach
    # software's words) and 0.01 in chrF (25.41).
    "misordered": 0.01,
    # partial20-Adev, seed 11, macro over the intact corpora in the needs-translation view: share 0.01 +2.38 BLEU /
    # +5.26 chrF over proportional (0.359), 0.05 +2.19 / +5.16, 0.15 +1.42 / +3.47: 0.01 (ahead in both). Over all
    # four corpora 0.05 is the best share (+1.28 BLEU): four fifths of software are sound and teach its dev set.
    "partial20": 0.01,
    # causalpartial50-Adev (decoder-only), seed 11, macro over the intact corpora in the needs-translation view:
    # share 0.05 +1.34 / +2.22 over proportional (0.415), 0.01 +1.18 / +1.16, 0.15 +0.61 / +1.66: 0.05 (ahead in both).
    "causalpartial50": 0.05,
}
#: Test-set strategies of a noise cell: proportional unaudited, and with each audit action (drop is the product's
#: default for map-style corpora, docs/corpus_audit.md).
NOISE_STRATEGIES = ("proportional", "proportional-reweight", "proportional-drop")
KNOWN_STRATEGIES = ("proportional", "temperature", "uniform", "oracle", "multiuat-enteos", "multidds-s",
                    "mixing-law")
#: The oracle's share of the misaligned corpus: small, not 0, so that the prior stays a valid scorer start too.
ORACLE_SHARE = 0.01
#: Seeds of the known-answer cells: 5 where the comparison is made (proportional, the oracle, the learned
#: strategies), 3 for the other static priors.
KNOWN_SEEDS, FEWER_SEEDS = (1, 2, 3, 4, 5), (1, 2, 3)
#: The oracle share sweep: fixed priors of the misaligned setup, software at these shares (and proportional,
#: ~0.415), scored on the DEV sets (regime "Adev": regime A with eval_split dev) with a seed no cell uses.
SWEEP_REGIME, SWEEP_SEED, SWEEP_SHARES = "Adev", 11, (0.01, 0.05, 0.15)
SWEEP_STRATEGIES = tuple(f"share{share:g}" for share in SWEEP_SHARES) + ("proportional",)
#: Guarded cells of the misaligned setup: the strategy with corpus_health_action=set_aside (a corpus the health
#: checks find broken keeps at most corpus_health_share of p). Cell misaligned-A-<strategy>-setaside; the checks
#: per run chosen on the dev sets of seed 11 (study/study.md, "Known-answer cells").
GUARD_SUFFIX, GUARD_CHECKS = "-setaside", 12
GUARDED_STRATEGIES = ("proportional", "multiuat-enteos", "mixing-law", "multidds-s")
#: ... and with the continuous down-weight (corpus_health_action=down_weight, issue 45 item 3), as a user gets it:
#: checked on the held-out slice (corpus_health_holdout's default), the audit only warning. misaligned-A-<strategy>-
#: downweight; on the dev sets (its screening), misaligned-Adev- and control-Adev-proportional-downweight.
DOWNWEIGHT_SUFFIX = "-downweight"
DOWNWEIGHTED_STRATEGIES = ("proportional", "multiuat-enteos")
#: The fixed-point cell (issue 45, item 5): MultiUAT-EntEOS on the regular multidomain corpora, its scorer started
#: from the duplicated cell's proportional prior (dictionary six times over, 0.42) instead of the regular one
#: (0.10). If it ends where the regular cell's MultiUAT ends, the duplicated cell's move toward the deduplicated
#: shares is MultiUAT's own fixed point, not a reaction to the copies.
START_SUFFIX = "-dupstart"
FIXED_POINT_CELL = ("multidomain", "A", "multiuat-enteos" + START_SUFFIX)


#: Cells whose run acts on the corpus audit: the prior from the effective sizes (corpus_audit: reweight), or the
#: failing pairs of a suspect corpus dropped (corpus_audit: drop). The default action is chosen on these cells' dev
#: scores (docs/corpus_audit.md).
AUDIT_ACTIONS = {"-reweight": "reweight", "-drop": "drop"}


def audit_action(strategy: str) -> str | None:
    """The ``corpus_audit`` a cell's strategy name asks for (``proportional-drop`` → ``drop``), else ``None``."""
    return next((action for suffix, action in AUDIT_ACTIONS.items() if strategy.endswith(suffix)), None)


def base_strategy(strategy: str) -> str:
    """The strategy of a cell without its guard and audit suffixes (``mixing-law-setaside`` → ``mixing-law``)."""
    for suffix in AUDIT_ACTIONS:
        strategy = strategy.removesuffix(suffix)
    return strategy.removesuffix(GUARD_SUFFIX).removesuffix(DOWNWEIGHT_SUFFIX).removesuffix(START_SUFFIX)


def known_answer_cells() -> list[tuple[str, str, str]]:
    """(setup, regime, strategy) of every known-answer cell and of the share sweep."""
    first = [setup for setup in KNOWN_ANSWER if setup not in noise.KINDS]
    return ([(setup, "A", strategy) for setup in first for strategy in KNOWN_STRATEGIES]
            + [("misaligned", "A", strategy + GUARD_SUFFIX) for strategy in GUARDED_STRATEGIES]
            + [("misaligned", "A", strategy + DOWNWEIGHT_SUFFIX) for strategy in DOWNWEIGHTED_STRATEGIES]
            + [("misaligned", "A", "proportional-drop")]  # the product's default, as in every noise cell
            + [(setup, SWEEP_REGIME, "proportional" + DOWNWEIGHT_SUFFIX) for setup in ("misaligned", "control")]
            + [("misaligned", SWEEP_REGIME, strategy) for strategy in SWEEP_STRATEGIES]
            + [(setup, "A", strategy) for setup in noise.KINDS
               for strategy in NOISE_STRATEGIES + (("oracle",) if setup in NOISE_ORACLE_SHARES else ())]
            + [(setup, SWEEP_REGIME, strategy) for setup in noise.KINDS
               for strategy in SWEEP_STRATEGIES + tuple("proportional" + suffix for suffix in AUDIT_ACTIONS)])


def settings(setup: str, regime: str) -> dict:
    """The table of a grid: :data:`REGIMES`'s, or for a known-answer setup regime A's with its corpora (and, in
    the sweep, the dev sets as the evaluation split)."""
    if (setup, regime) in REGIMES:
        return REGIMES[setup, regime]
    base = NOISE_BASES[noise.KINDS[setup][0].base] if setup in noise.KINDS else REGIMES["multidomain", "A"]
    known = KNOWN_ANSWER[setup]
    fields, about = {**base["fields"], **known["fields"]}, f"{known['about']} Otherwise {base['about']}"
    if regime == SWEEP_REGIME:
        fields["eval_split"] = "dev"
        about = (f"Oracle share sweep (issue 36): a fixed prior scored on the DEV sets (eval_split: dev; never "
                 f"test) with seed {SWEEP_SEED}, which no cell uses, to show which static prior is best. {about}")
    return {**base, "about": about, "fields": fields}


def fixed_prior(setup: str, share: float | None = None) -> dict[str, float]:
    """The oracle (``share`` None) or a sweep prior: misaligned, the broken corpus at ``share`` (default
    :data:`ORACLE_SHARE`) and the others proportional to their sizes; duplicated, proportional over the sizes
    without the copies. Rounded to 6 decimals, summing to 1."""
    broken = BROKEN_CORPUS[setup]
    if setup == "duplicated":
        weights = {corpus: float(size) for corpus, size in MULTIDOMAIN_SIZES.items()}
    elif setup in noise.KINDS and share is None and NOISE_ORACLE_SHARES[setup] is None:
        weights = {corpus: float(size) for corpus, size in KNOWN_ANSWER[setup]["sizes"].items()}
    else:
        share = (NOISE_ORACLE_SHARES[setup] if setup in noise.KINDS else ORACLE_SHARE) if share is None else share
        others = {corpus: size for corpus, size in KNOWN_ANSWER[setup]["sizes"].items() if corpus != broken}
        weights = {**{c: (1 - share) * n / sum(others.values()) for c, n in others.items()}, broken: share}
    return _rounded(weights, keep=broken)


def duplicated_start_prior() -> dict[str, float]:
    """The fixed-point cell's start: proportional over the duplicated cell's training sizes (dictionary 6x)."""
    return _rounded({corpus: float(size) for corpus, size in KNOWN_ANSWER["duplicated"]["sizes"].items()})


def _rounded(weights: dict[str, float], keep: str | None = None) -> dict[str, float]:
    """``weights`` normalised and rounded to 6 decimals, summing to 1: the largest corpus other than ``keep`` takes
    the rounding."""
    total = sum(weights.values())
    sink = max((corpus for corpus in weights if corpus != keep), key=weights.get)
    prior = {corpus: round(weights[corpus] / total, 6) for corpus in sorted(weights) if corpus != sink}
    prior[sink] = round(1 - sum(prior.values()), 6)
    return dict(sorted(prior.items()))


def default_seeds(cell: str) -> tuple[int, ...]:
    """The seeds ``study/run.py`` runs a cell with when ``--seeds`` is not given: 1, 2, 3, except the
    known-answer cells (:data:`KNOWN_SEEDS`, :data:`FEWER_SEEDS` for temperature and uniform) and the sweep."""
    setup, regime, strategy = cell.split("-", 2)
    if setup not in KNOWN_ANSWER:
        return (1, 2, 3)
    if regime == SWEEP_REGIME:
        return (SWEEP_SEED,)
    if setup in noise.KINDS:
        return FEWER_SEEDS
    return FEWER_SEEDS if strategy in ("temperature", "uniform") else KNOWN_SEEDS


def baseline_strategy(group: str) -> str | None:
    """The strategy a group's runs are compared with when it is fixed by design: proportional in the known-answer
    groups (the question is whether a strategy moves away from it, toward the oracle); ``None`` elsewhere, where
    the driver picks the best static prior."""
    return "proportional" if group.split("-")[0] in KNOWN_ANSWER else None


def corpus_sizes(setup: str, regime: str) -> dict[str, int]:
    """Training pairs of each corpus of a grid before ``train_fraction`` (which keeps their ratios)."""
    if setup == "multidomain":
        return MULTIDOMAIN_SIZES
    if setup in KNOWN_ANSWER:
        return KNOWN_ANSWER[setup]["sizes"]
    return {corpus: MULTILINGUAL_SIZES[corpus] for corpus in REGIMES[setup, regime]["fields"]["corpora"]}


def drift(setup: str, regime: str) -> dict[str, float]:
    """The scorer's possible travel over a run and in one update, against the corpora's log-size spread."""
    table = settings(setup, regime)
    updates = (table["fields"]["max_steps"] - 1) // table["update_every"]
    per_update = SCORER_STEPS * table["scorer_lr"]
    sizes = corpus_sizes(setup, regime)
    largest, smallest = max(sizes.values()), min(sizes.values())
    spread = math.log(largest / smallest)
    return {"updates": updates, "travel": updates * per_update, "per_update": per_update, "spread": spread,
            "ratio": updates * per_update / spread}


def _mixing_law_cost(setup: str, regime: str, measurement: dict) -> dict:
    """One measurement's schedule in a grid: ``update_every`` (the regime's, raised in hundreds until the probe
    windows take at most :data:`PROBE_SHARE` of it), the probe steps, the dev batches per update, and the dev
    tokens run forward per update as a share of the tokens trained forward and backward (about 3 forwards'
    worth) in the interval."""
    from uat_hf.strategies.mixing_law.law import MixingLawSettings

    table, n = settings(setup, regime), len(corpus_sizes(setup, regime))
    law = MixingLawSettings(**measurement.get("strategy_settings", {}))
    probe = law.probe_steps(n)
    update_every = table["update_every"]
    while probe > PROBE_SHARE * update_every:
        update_every = (update_every // 100 + 1) * 100
    batches = (law.windows(n) + 1) * n
    cost = batches * measurement["dev_batch_tokens"] / (3 * update_every * table["fields"]["max_tokens"])
    return {"fields": {**measurement, "update_every": update_every}, "probe_steps": probe, "dev_batches": batches,
            "cost": cost}


def mixing_law_schedule(setup: str, regime: str) -> dict:
    """mixing-law's settings in a grid and their cost: the defaults' (:data:`DEV_BATCH`), or
    :data:`CHEAP_MEASUREMENT`'s where the defaults' would exceed :data:`MEASURING_SHARE` (then with
    ``default_cost``)."""
    default = _mixing_law_cost(setup, regime, DEV_BATCH)
    if default["cost"] <= MEASURING_SHARE:
        return default
    return {**_mixing_law_cost(setup, regime, CHEAP_MEASUREMENT), "default_cost": default["cost"]}


def recipe_text(setup: str, regime: str, strategy: str) -> str:
    """The YAML of one cell: a comment that says what it is and how it is run, then the fields."""
    settings_ = settings(setup, regime)
    cell = f"{setup}-{regime}-{strategy}"
    audited = audit_action(strategy)
    guarded = strategy.removesuffix(f"-{audited}" if audited else "").endswith(GUARD_SUFFIX)
    down_weighted = strategy.endswith(DOWNWEIGHT_SUFFIX)
    started = strategy.endswith(START_SUFFIX)
    strategy = base_strategy(strategy)
    prior = _fixed_prior_of(setup, strategy)
    start = duplicated_start_prior() if started else None
    fields = {"output_dir": f"runs/study/{cell}/seed1", "strategy": "fixed" if prior else strategy,
              **({"corpus_probabilities": prior or start} if prior or start else {}), "seed": 1}
    notes = [f"Study cell {cell} (study/study.md). Generated by study/grid.py: edit that, not this.",
             settings_["about"]]
    if start:
        notes.append("Fixed-point cell: the scorer starts from the duplicated cell's proportional prior "
                     f"({', '.join(f'{c} {p:g}' for c, p in start.items())}) instead of this cell's; otherwise "
                     f"{setup}-{regime}-{strategy}.")
    if prior:
        what = ("the oracle" if strategy == "oracle" else f"a sweep prior, {BROKEN_CORPUS[setup]} at "
                f"{prior[BROKEN_CORPUS[setup]]:g}")
        notes.append(f"strategy fixed: {what} ({', '.join(f'{c} {p:g}' for c, p in prior.items())}).")
    if setup in KNOWN_ANSWER:
        seeds = default_seeds(cell)
        notes.append(f"Seeds: {', '.join(map(str, seeds))} (python study/run.py --cells {cell} runs them; "
                     "study/run.py builds the corpora first when they are missing).")
    if guarded:
        notes.append(f"Guarded: corpus_health_action set_aside, {GUARD_CHECKS} corpus-health checks per run (a corpus "
                     "suspect at two checks in a row keeps at most 0.01 of p from then on; docs/usage.md, 'Corpus "
                     "health'); otherwise the cell without the guard.")
        fields.update(corpus_health_action="set_aside", corpus_health_checks=GUARD_CHECKS)
    if audited:
        what = ("the prior counts each corpus the audit finds suspect at its effective (clean) size"
                if audited == "reweight" else "the pairs failing the flagged signals of each corpus the audit finds "
                "suspect are dropped before training")
        notes.append(f"Audited: corpus_audit {audited}, {what} (docs/corpus_audit.md); otherwise the cell without it.")
        fields.update(corpus_audit=audited)
    else:  # the action the study's proportional and learned cells were run with, whatever uat-train's default
        fields.update(corpus_audit="warn")
    if down_weighted:
        notes.append(f"Down-weighted: corpus_health_action down_weight, {GUARD_CHECKS} corpus-health checks per run "
                     "on the held-out slice (a corpus found damaged with confidence at a check keeps at most its "
                     "share of p times the ratio of source uses, at least 0.01, until a check no longer finds it; "
                     "docs/usage.md, 'Corpus health'); otherwise the cell without it.")
        fields.update(corpus_health_action="down_weight", corpus_health_checks=GUARD_CHECKS)
    else:  # the archive's runs were checked on pairs they trained on (before corpus_health_holdout): pinned, so
        # that they rerun as they ran
        fields.update(corpus_health_holdout=0)
    if strategy == "temperature":
        notes.append("temperature: τ = 5, the strategy's default (the paper's).")
    if strategy.startswith(("multiuat", "multidds")):
        d, sizes = drift(setup, regime), corpus_sizes(setup, regime).values()
        notes.append(
            f"Scorer drift: {d['updates']} updates before the last step x {SCORER_STEPS} scorer steps x "
            f"scorer_lr {settings_['scorer_lr']:g} = {d['travel']:.2f} of possible travel of psi, against "
            f"ln(largest/smallest) = ln({max(sizes)}/{min(sizes)}) = {d['spread']:.2f}: ratio "
            f"{d['ratio']:.2f}; one update moves psi by at most {d['per_update']:.2f}.")
        fields.update(MC_SAMPLES if strategy.startswith("multiuat") else {}, **DEV_BATCH,
                      update_every=settings_["update_every"], scorer_lr=settings_["scorer_lr"])
    if strategy == "mixing-law":
        m = mixing_law_schedule(setup, regime)
        every, tokens = m["fields"]["update_every"], m["fields"]["dev_batch_tokens"]
        sweeps = m["fields"].get("strategy_settings", {}).get("sweeps")
        settings_note = ("default settings" if "default_cost" not in m else
                         f"the cheap measurement ({sweeps} sweep, {tokens} dev tokens per "
                         f"corpus), as the defaults' would cost about {100 * m['default_cost']:.1f} %, above "
                         f"{MEASURING_SHARE:.0%}")
        notes.append(
            f"mixing-law (docs/mixing_law.md), {settings_note}: every {every} steps {m['probe_steps']} probe steps "
            f"({100 * m['probe_steps'] / every:.0f} %, ordinary training steps) and {m['dev_batches']} dev-loss "
            f"forwards of {tokens} tokens: about {100 * m['cost']:.1f} % of the training compute. update_every is "
            f"the regime's unless the probe windows would take more than {PROBE_SHARE:.0%} of it.")
        fields.update(m["fields"])
    fields.update(settings_["fields"])
    lines = [line for note in notes for line in textwrap.wrap(note, 117, initial_indent="# ", subsequent_indent="# ")]
    lines += [f"#   uat-train --config study/recipes/{cell}.yaml --seed N --output_dir runs/study/{cell}/seedN",
              "#   (python study/run.py runs the grid: one thread per run, resume, scoring, archive)"]
    body = yaml.safe_dump(fields, sort_keys=False, allow_unicode=True, default_flow_style=None, width=119)
    return "\n".join(lines) + "\n" + body


def _fixed_prior_of(setup: str, strategy: str) -> dict[str, float] | None:
    """The corpus_probabilities of a fixed-prior cell (the oracle, a sweep share), ``None`` for the others."""
    if strategy == "oracle":
        return fixed_prior(setup)
    if strategy.startswith("share"):
        return fixed_prior(setup, float(strategy[len("share"):]))
    return None


def study_strategies() -> list[str]:
    """The study's strategies, from uat_hf's registry: every built-in one but ``fixed`` (it needs hand-given
    probabilities), a strategy with variants once per variant (MultiUAT: :data:`MULTIUAT_MEASURES`)."""
    from uat_hf.strategies.registry import available_strategies, get_strategy

    names = []
    for name in available_strategies():
        cls = get_strategy(name)
        if not cls.__module__.startswith("uat_hf.") or (not cls.learns and cls.prior_temperature is None):
            continue
        names += [f"{name}-{m}" for m in MULTIUAT_MEASURES] if cls.variant_field else [name]
    return names


def all_recipes() -> dict[str, str]:
    """File name → text, for every (setup, regime) and strategy, and every known-answer cell."""
    cells = [(setup, regime, strategy) for setup, regime in REGIMES for strategy in study_strategies()]
    return {f"{setup}-{regime}-{strategy}.yaml": recipe_text(setup, regime, strategy)
            for setup, regime, strategy in cells + known_answer_cells() + [FIXED_POINT_CELL]}


def main() -> int:
    RECIPES.mkdir(parents=True, exist_ok=True)
    recipes = all_recipes()
    for stale in set(p.name for p in RECIPES.glob("*.yaml")) - set(recipes):
        (RECIPES / stale).unlink()
    for name, text in recipes.items():
        (RECIPES / name).write_text(text, encoding="utf-8")
    print(f"wrote {len(recipes)} recipes to {RECIPES}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
