"""The corpus audit: each training corpus measured against its own trusted dev set, before step 0.

MultiUAT's premise is a small trusted dev set per corpus. The audit uses it as the reference for every signal of
:mod:`.signals`: a corpus is suspect on a signal only when its training pairs fail it clearly more often than its
dev pairs do — by at least :data:`MARGIN` of the pairs and by :data:`Z_THRESHOLD` standard errors of the
difference (a one-sided test at about 3e-5 per corpus and signal, so that 64 corpora × 8 signals keep the chance
of any false alarm per run near 1 %). What the dev set fails too is the corpus's nature (a dictionary's short
entries, software strings that copy names), not noise. The estimated clean share — the pairs beyond the dev
set's rate on the signals that fired, and the repeats when repetition fired — gives the corpus's *effective
size*, which a run may use for its prior (``corpus_audit: reweight``), and the failing pairs of a suspect corpus
can be marked to train without them (``drop``). A signal is evidence, not a verdict on what helps: which action a
run takes by default was decided on the dev sets of the study's noise cells (docs/corpus_audit.md).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field

import datasets
import numpy as np

from . import signals

#: Signal name → what a failing pair is (the table's legend).
SIGNALS = {
    "copy": "target repeats its source",
    "language": "a side in another language than declared",
    "script": "a side uses a character its dev pairs' side never does (another script, mojibake)",
    "swap": "its source reads like the dev targets and its target like the dev sources (character trigrams)",
    "case": "one side written all in capitals, the other not",
    "markup": "its sides carry different markup (tag counts, character entities)",
    "length": "length ratio outside the dev pairs' range",
    "short": "a side shorter than 95 % of the dev pairs' (characters): a fragment",
    "repeat": "normalised pair seen earlier in the corpus",
    "lexical": "its source explains its target less than 95 % of the dev pairs' do (IBM Model 1)",
    "fluency": "target bigram score below the dev pairs' 5th percentile",
    "order": "its word order follows its source's less than 75 % of the dev pairs' do (Kendall's τ of the links)",
}
MARGIN, Z_THRESHOLD = 0.10, 4.0
#: The training pairs sampled per corpus.
SAMPLE = 4000
#: The dev pairs a corpus needs for its rates to mean anything.
MIN_DEV_PAIRS = 50
#: The model-based signals fail a pair below this quantile of the dev pairs' own scores.
DEV_QUANTILE = 0.05
#: ... and the lexical signal at least below this coverage (how much of a target its source explains): where many
#: sound dev pairs explain nothing the model knows (software's strings of names and placeholders), the quantile is
#: 0 and would fail nothing. Unrelated sentences score about 0.001-0.01, translations about 0.4 (bundled software).
LEXICAL_COVERAGE = 0.05
#: The order signal fails a pair below this quantile of the dev pairs' τ: one pair's order is weak evidence (a few
#: links; sound translations reorder too), so the tail is wider than the other model signals', and the share of
#: pairs in random order that fall below it (measured by shuffling the held-out targets) says how many broken pairs
#: the failing share stands for.
ORDER_QUANTILE = 0.25
#: The length band: the dev pairs' median log length ratio ± this many robust standard deviations (1.4826 MAD).
LENGTH_BAND = 4.0
#: The least effective share a corpus keeps, so that every strategy's prior stays positive.
MIN_CLEAN_SHARE = 0.01

Pairs = tuple[Sequence[str], Sequence[str]]


@dataclass
class SignalRate:
    train: float  # share of the training sample failing
    dev: float  # share of the dev set failing
    z: float  # the difference in standard errors
    flagged: bool


@dataclass
class CorpusAudit:
    corpus: str
    pairs: int
    sampled: int
    dev_pairs: int
    signals: dict[str, SignalRate] = field(default_factory=dict)
    clean_share: float = 1.0
    #: The clean share of the pairs ``drop`` keeps: below 1 where a flagged signal lets broken pairs pass (order).
    kept_clean_share: float = 1.0
    #: The share of held-out pairs, their targets shuffled, that the order signal fails (its broken pairs' rate).
    order_null: float | None = None
    not_measurable: str | None = None  # why the rates cannot be judged (no or too small a dev set)
    streamed: bool = False  # audited on the first pairs of a stream (``pairs``: its size from metadata, if known)
    #: Of a suspect corpus, when asked for (``corpus_audit: drop``): each training pair (in the corpus's order)
    #: failing a flagged signal, a repeat being every occurrence after the first.
    failing: np.ndarray | None = field(default=None, repr=False)
    #: What the run did with a suspect corpus's pairs under ``drop`` (dropped, left out, kept whole), for the results.
    action: str | None = None

    @property
    def flagged(self) -> list[str]:
        return [name for name, rate in self.signals.items() if rate.flagged]

    @property
    def none_sound(self) -> bool:
        """Every training pair was marked failing (``drop``'s marks; ``False`` without them)."""
        return self.failing is not None and bool(self.failing.all())

    @property
    def effective_size(self) -> float:
        return self.pairs * self.clean_share

    @property
    def verdict(self) -> str:
        if self.not_measurable:
            return f"not measurable ({self.not_measurable})"
        return f"suspect: {', '.join(self.flagged)}" if self.flagged else "ok"

    def to_dict(self) -> dict:
        fields = {key: value for key, value in asdict(self).items() if key != "failing"}
        failing = {} if self.failing is None else {"failing_pairs": int(self.failing.sum())}
        return {**fields, **failing, "effective_size": round(self.effective_size, 1), "verdict": self.verdict}


@dataclass
class AuditReport:
    corpora: dict[str, CorpusAudit]
    sample: int
    seed: int

    @property
    def suspects(self) -> list[str]:
        return [name for name, audit in self.corpora.items() if audit.flagged]

    def effective_sizes(self, sizes: Mapping[str, int]) -> dict[str, float]:
        """``sizes`` (name → the examples a run trains on) times each suspect corpus's clean share: the sizes
        ``corpus_audit: reweight`` gives the prior (``UATTrainer(corpus_sizes=...)``)."""
        return {name: size * (self.corpora[name].clean_share if name in self.suspects else 1.0)
                for name, size in sizes.items()}

    def to_dict(self) -> dict:
        return {"sample": self.sample, "seed": self.seed, "thresholds": {"margin": MARGIN, "z": Z_THRESHOLD},
                "corpora": {name: audit.to_dict() for name, audit in self.corpora.items()}}

    @classmethod
    def from_dict(cls, data: Mapping) -> AuditReport:
        """The report :meth:`to_dict` wrote, without the failing marks (which JSON does not hold)."""
        corpora = {}
        for name, fields in data["corpora"].items():
            kept = {key: value for key, value in fields.items()
                    if key in CorpusAudit.__dataclass_fields__ and key != "failing"}
            kept["signals"] = {signal: SignalRate(**rate) for signal, rate in kept["signals"].items()}
            corpora[name] = CorpusAudit(**kept)
        return cls(corpora, data["sample"], data["seed"])

    def table(self) -> str:
        """The audit as text: per corpus its pairs, effective size, each signal's training share and, in
        brackets, its dev set's, ``!`` where the signal sets the training pairs apart, and the verdict."""
        names = list(SIGNALS)
        width = max([6] + [len(n) for n in self.corpora])
        lines = [f"{'corpus':<{width}} {'pairs':>8} {'effective':>9} " + " ".join(f"{n:>12}" for n in names)
                 + "  verdict"]
        for name, audit in self.corpora.items():
            cells = []
            for signal in names:
                rate = audit.signals.get(signal)
                cells.append(f"{'–':>12}" if rate is None else
                             f"{100 * rate.train:>5.1f}{'!' if rate.flagged else ' '}({100 * rate.dev:>4.1f})")
            lines.append(f"{name:<{width}} {audit.pairs:>8} {audit.effective_size:>9.0f} " + " ".join(cells)
                         + f"  {audit.verdict}" + (" (streamed: its first pairs)" if audit.streamed else ""))
        lines.append(f"% of {self.sample} sampled training pairs per corpus (of its dev pairs); ! = above the dev "
                     f"set's rate by >= {MARGIN:.0%} of pairs and z >= {Z_THRESHOLD:g}.")
        return "\n".join(lines)


def audit_corpora(train: Mapping[str, Pairs | datasets.Dataset], dev: Mapping[str, Pairs],
                  languages: Mapping[str, tuple[str, str]], *, sample: int = SAMPLE, seed: int = 0,
                  failing: bool = False, keys: Mapping[str, np.ndarray] | None = None) -> AuditReport:
    """Audit every corpus of ``train`` (name → (sources, targets), or a Dataset with ``source`` and ``target``
    columns, after the run's cleaning) against its dev pairs in ``dev``; ``languages``: name → (source language,
    target language), as the corpus specs declare them. A Dataset is read at its sampled pairs only (and at every
    pair of a suspect corpus when ``failing``). ``keys``: name → :func:`~.signals.pair_keys` of every training
    pair, when the caller hashed them already; otherwise they are hashed here. ``failing``: also mark, in every
    pair of each suspect corpus, those failing its flagged signals (:attr:`CorpusAudit.failing`; the thresholds
    are the sample's)."""
    rng = np.random.default_rng(seed)
    picked = {name: rng.permutation(_size(pairs))[:sample] for name, pairs in train.items()}
    halves = {name: (idx[0::2], idx[1::2]) for name, idx in picked.items()}
    sampled = {name: _take(train[name], idx) for name, idx in picked.items()}  # in the order of ``picked``
    fit_s = [source for sources, _ in sampled.values() for source in sources[0::2]]
    fit_t = [target for _, targets in sampled.values() for target in targets[0::2]]
    held_s = [source for sources, _ in sampled.values() for source in sources[1::2]]
    held_t = [target for _, targets in sampled.values() for target in targets[1::2]]
    lexical, fluency = signals.LexicalModel(fit_s, fit_t), signals.FluencyModel(fit_t)
    crossed: list[tuple[signals.LexicalModel, signals.FluencyModel]] = []  # fitted on the other halves, when needed
    report = AuditReport({}, sample, seed)
    for name, pairs in train.items():
        dev_sources, dev_targets = dev.get(name, ((), ()))
        audit = CorpusAudit(name, _size(pairs), len(picked[name]), len(dev_sources))
        report.corpora[name] = audit
        if len(dev_sources) < MIN_DEV_PAIRS:
            audit.not_measurable = f"{len(dev_sources)} dev pairs, fewer than {MIN_DEV_PAIRS}"
            continue
        idx, (s, t) = picked[name], sampled[name]
        fails = _rule_fails(s, t, dev_sources, dev_targets, languages[name])
        repeats = signals.repeated_keys(keys[name] if keys and name in keys else signals.pair_keys(*_every(pairs)))
        fails["repeat"] = (repeats[idx], signals.repeated(dev_sources, dev_targets))
        hs, ht = s[1::2], t[1::2]  # the held-out half, which the two models did not see
        for signal in ("lexical", "fluency"):  # NaN (nothing the model knows) never fails
            dev_scores = _model_scores(signal, lexical, fluency, dev_sources, dev_targets)
            floor = _floor(signal, dev_scores)
            fails[signal] = (_model_scores(signal, lexical, fluency, hs, ht) < floor, dev_scores < floor)
        dev_order, held_order = lexical.order(dev_sources, dev_targets), lexical.order(hs, ht)
        measured = ~np.isnan(held_order), ~np.isnan(dev_order)
        order_floor = marks = None
        if min(measured[0].sum(), measured[1].sum()) >= MIN_DEV_PAIRS:  # NaN (a short pair) never fails
            order_floor = float(np.nanquantile(dev_order, ORDER_QUANTILE))
            fails["order"] = (held_order < order_floor, dev_order < order_floor)
            mark_floor = _floor("order", dev_order)  # what drop marks: the clear cases
            marks = (held_order < mark_floor, dev_order < mark_floor)
            null = lexical.order(hs, signals.shuffled(ht, rng))
            audit.order_null = round(float(np.mean(null[~np.isnan(null)] < order_floor)), 4)
        for signal in SIGNALS:
            if signal in fails:  # the order signal over the pairs it can measure
                audit.signals[signal] = _compare(*(fails[signal] if signal != "order" else
                                                   (fails[signal][0][measured[0]], fails[signal][1][measured[1]])))
        audit.clean_share, audit.kept_clean_share = _clean_shares(audit, fails, picked[name], halves[name][1], marks)
        if failing and audit.flagged:
            sources, targets = _every(pairs)
            rules = [signal for signal in audit.flagged if signal in RULE_SIGNALS]
            every = {signal: fail for signal, (fail, _) in
                     _rule_fails(sources, targets, dev_sources, dev_targets, languages[name], rules).items()}
            every["repeat"] = repeats
            modelled = [signal for signal in audit.flagged if signal in MODEL_SIGNALS]
            if modelled and not crossed:
                crossed.append((signals.LexicalModel(held_s, held_t), signals.FluencyModel(held_t)))
            # Cross-fitted: a pair the models were fitted on is scored by those fitted on the other halves. The
            # models fit what they saw (a misaligned pair in the fitting half gains the links it needs), so scoring
            # a pair with a model that saw it would keep broken pairs the held-out estimate counts as failing.
            seen = np.zeros(len(sources), dtype=bool)
            seen[halves[name][0]] = True
            for signal in modelled:
                every[signal] = np.zeros(len(sources), dtype=bool)
                for models, rows in (((lexical, fluency), np.flatnonzero(~seen)), (crossed[0], np.flatnonzero(seen))):
                    floor = _floor(signal, _model_scores(signal, *models, dev_sources, dev_targets))
                    every[signal][rows] = _model_scores(signal, *models, [sources[i] for i in rows],
                                                        [targets[i] for i in rows]) < floor
            audit.failing = np.logical_or.reduce([every[signal] for signal in audit.flagged])
    return report


#: The signals that are rules on a pair and its dev set (no model fitted on the sample) ...
RULE_SIGNALS = ("copy", "language", "script", "swap", "case", "markup", "length", "short")
#: ... and those of the models fitted on half the sample (what ``drop`` marks on them: below :data:`DEV_QUANTILE`).
MODEL_SIGNALS = ("lexical", "fluency", "order")


def _model_scores(signal: str, lexical: signals.LexicalModel, fluency: signals.FluencyModel,
                  sources: Sequence[str], targets: Sequence[str]) -> np.ndarray:
    if signal == "lexical":
        return lexical.scores(sources, targets)
    return fluency.scores(targets) if signal == "fluency" else lexical.order(sources, targets)


def _floor(signal: str, dev_scores: np.ndarray) -> float:
    """The score below which a pair fails a model signal: the dev pairs' :data:`DEV_QUANTILE`, and for the lexical
    signal at least :data:`LEXICAL_COVERAGE`."""
    floor = float(np.nanquantile(dev_scores, DEV_QUANTILE))
    return max(LEXICAL_COVERAGE, floor) if signal == "lexical" else floor


def _size(pairs) -> int:
    return len(pairs) if isinstance(pairs, datasets.Dataset) else len(pairs[0])


def _take(pairs, idx: np.ndarray) -> tuple[list[str], list[str]]:
    if isinstance(pairs, datasets.Dataset):
        rows = pairs.select(idx).select_columns(["source", "target"]).to_dict()
        return rows["source"], rows["target"]
    return [pairs[0][i] for i in idx], [pairs[1][i] for i in idx]


def _every(pairs) -> Pairs:
    """Every pair, as two lists. Through ``to_dict``, which applies the rows a filter kept: the Arrow table under
    a filtered Dataset still holds all, and indexing a Dataset row by row is far slower."""
    if isinstance(pairs, datasets.Dataset):
        columns = pairs.select_columns(["source", "target"]).to_dict()
        return columns["source"], columns["target"]
    return pairs


def _rule_fails(sources, targets, dev_sources, dev_targets, languages: tuple[str, str],
                wanted: Sequence[str] = RULE_SIGNALS) -> dict:
    source_lang, target_lang = languages
    out = {}
    if "copy" in wanted:
        out["copy"] = (signals.copied(sources, targets), signals.copied(dev_sources, dev_targets))
    if "language" in wanted:
        out["language"] = (
            signals.wrong_language(sources, source_lang) | signals.wrong_language(targets, target_lang),
            signals.wrong_language(dev_sources, source_lang) | signals.wrong_language(dev_targets, target_lang))
    if "script" in wanted:  # each side against the characters of its own dev side
        sides = signals.unseen_characters(sources, dev_sources), signals.unseen_characters(targets, dev_targets)
        out["script"] = (sides[0][0] | sides[1][0], sides[0][1] | sides[1][1])
    if "swap" in wanted:
        out["swap"] = signals.swapped_sides(sources, targets, dev_sources, dev_targets)
    if "case" in wanted:
        out["case"] = (signals.shouting(sources, targets), signals.shouting(dev_sources, dev_targets))
    if "markup" in wanted:
        out["markup"] = (signals.markup_mismatch(sources, targets), signals.markup_mismatch(dev_sources, dev_targets))
    if "length" in wanted:
        dev_ratio = signals.length_log_ratios(dev_sources, dev_targets)
        centre = float(np.median(dev_ratio))
        spread = LENGTH_BAND * max(1.4826 * float(np.median(np.abs(dev_ratio - centre))), 0.05)
        out["length"] = (np.abs(signals.length_log_ratios(sources, targets) - centre) > spread,
                         np.abs(dev_ratio - centre) > spread)
    if "short" in wanted:  # each side against its own dev side's DEV_QUANTILE, so scripts and languages compare
        floors = [np.quantile(signals.characters(side), DEV_QUANTILE) for side in (dev_sources, dev_targets)]
        out["short"] = tuple((signals.characters(a) < floors[0]) | (signals.characters(b) < floors[1])
                             for a, b in ((sources, targets), (dev_sources, dev_targets)))
    return out


def _compare(train_fails: np.ndarray, dev_fails: np.ndarray) -> SignalRate:
    n_t, n_d = len(train_fails), len(dev_fails)
    r_t = float(train_fails.mean()) if n_t else 0.0
    r_d = float(dev_fails.mean()) if n_d else 0.0
    pooled = (r_t * n_t + r_d * n_d) / max(n_t + n_d, 1)
    se = math.sqrt(pooled * (1 - pooled) * (1 / max(n_t, 1) + 1 / max(n_d, 1)))
    z = (r_t - r_d) / se if se > 0 else (math.inf if r_t > r_d else 0.0)
    return SignalRate(round(r_t, 4), round(r_d, 4), round(z, 2) if math.isfinite(z) else 99.0,
                      r_t - r_d >= MARGIN and z >= Z_THRESHOLD)


def _clean_shares(audit: CorpusAudit, fails: dict, picked: np.ndarray, held_out: np.ndarray,
                  order_marks: tuple | None) -> tuple[float, float]:
    """The share of sound pairs, and that of the pairs ``drop`` keeps.

    From the held-out sample pairs failing any flagged signal but repetition and order (f) and the dev pairs failing
    them (d, sound pairs that fail anyway): f = (1 − c) + c·d, so c = (1 − f) / (1 − d); times the share of first
    occurrences when repetition is flagged. That counts every broken pair as failing, and so do the pairs ``drop``
    keeps. The order signal knows how often a broken pair fails it — at its null rate b, the rate of pairs in random
    order — so where it fired it gives the broken share β = (f − d) / (b − d) over the pairs it measures: the corpus
    is no cleaner than 1 − β. ``drop`` marks on order only the clear cases (``order_marks``: below the dev pairs'
    :data:`DEV_QUANTILE`, since its wider quartile fails a quarter of the sound pairs); of the β broken pairs the
    marks catch those beyond the sound pairs' rate, and the rest stay among the kept pairs."""
    on_held_out = np.isin(picked, held_out)

    def failing_any(marked: list[tuple]) -> tuple[float, float]:
        train_any, dev_any = np.zeros(len(held_out), dtype=bool), np.zeros(audit.dev_pairs, dtype=bool)
        for train_fail, dev_fail in marked:
            train_any |= train_fail if len(train_fail) == len(held_out) else train_fail[on_held_out]
            dev_any |= dev_fail
        return float(train_any.mean()), float(dev_any.mean())

    flagged = [fails[s] for s in audit.flagged if s not in ("repeat", "order")]
    f, d = failing_any(flagged)
    share, kept = min(1.0, (1 - f) / max(1 - d, 1e-9)) if flagged else 1.0, 1.0
    if "order" in audit.flagged:
        rate = audit.signals["order"]
        broken = min(1.0, max(0.0, (rate.train - rate.dev) / max(audit.order_null - rate.dev, 1e-9)))
        share = min(share, 1 - broken)
        f, d = failing_any(flagged + [order_marks])
        passed = max(0.0, broken - (f - d * (1 - broken)))  # the broken pairs no mark caught
        kept = min(1.0, max(MIN_CLEAN_SHARE, 1 - passed / max(1 - f, 1e-9)))
    if "repeat" in audit.flagged:
        share *= 1 - audit.signals["repeat"].train
    return max(share, MIN_CLEAN_SHARE), kept
