"""The common kinds of corpus noise, as seeded transformations of a corpus's training pairs.

After Khayrallah and Koehn ("On the Impact of Various Types of Noise on Neural Machine Translation", 2018):
misaligned sentences, misordered words, wrong language, untranslated sentences (target = source) and short
segments; plus near-duplicates (copies that exact dedupe keeps) and partial corruption (a share of a corpus
misaligned); and the control, in which nothing is broken. Each kind names the corpus it breaks, the regime A grid
it breaks it in (the bundled English→German sample, or the bundled multilingual sample under an encoder-decoder or a
decoder-only model) and the function that breaks it; ``known_answer_data.py`` writes the corpora and ``grid.py``
the cells. Every function takes and returns parallel lists of sources and targets and draws only from the ``numpy``
generator it is given.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

Pairs = tuple[list[str], list[str]]


@dataclass(frozen=True)
class NoiseKind:
    corpus: str  # the corpus of the bundled sample it breaks
    about: str  # one sentence: what a training pair of that corpus becomes
    dedupe: bool = True  # the cells' dedupe setting (False where the noise is exact repetition)
    base: str = "multidomain"  # the regime A grid whose corpora it breaks (grid.NOISE_BASES)


def unchanged(sources: list[str], targets: list[str], rng: np.random.Generator) -> Pairs:
    """Every pair as it is: the control cell, in which the share sweep shows what starving a sound corpus does to
    the others, so that a noise cell's oracle can be told apart from that."""
    return list(sources), list(targets)


def untranslated(sources: list[str], targets: list[str], rng: np.random.Generator) -> Pairs:
    """Every target replaced by its own source: the pair a crawler keeps when a page was never translated."""
    return list(sources), list(sources)


def misordered(sources: list[str], targets: list[str], rng: np.random.Generator) -> Pairs:
    """Each target's words in a random order (a target of one word, or of repeated words, stays as it is)."""
    shuffled = []
    for target in targets:
        words = target.split()
        order = rng.permutation(len(words))
        if len(words) > 1 and np.array_equal(order, np.arange(len(words))):
            order = np.roll(order, 1)
        shuffled.append(" ".join(words[i] for i in order))
    return list(sources), shuffled


def short_segments(sources: list[str], targets: list[str], rng: np.random.Generator) -> Pairs:
    """Each pair cut to its first one or two words on both sides: fragments that a bad sentence splitter or a
    subtitle aligner leaves."""
    cut_sources, cut_targets = [], []
    for source, target in zip(sources, targets):
        keep = int(rng.integers(1, 3))
        cut_sources.append(" ".join(source.split()[:keep]))
        cut_targets.append(" ".join(target.split()[:keep]))
    return cut_sources, cut_targets


#: How each copy of a near-duplicated corpus differs from the original: the variations that survive exact dedupe.
VARIATIONS: tuple[Callable[[str], str], ...] = (
    lambda text: text,
    lambda text: text.lower(),
    lambda text: text[:-1] if text.endswith((".", "!", "?", ":")) else text + ".",
    lambda text: text.upper() if len(text) < 20 else text[:1].swapcase() + text[1:],
    lambda text: re.sub(r" ", "  ", text, count=1) + " ",
    lambda text: text.replace(",", "").replace("'", "’"),
)


def near_duplicates(sources: list[str], targets: list[str], rng: np.random.Generator) -> Pairs:
    """The corpus repeated once per :data:`VARIATIONS`, each copy changed in case, end punctuation, spacing or
    quotes on both sides (the same change for a pair's two sides): what several releases of one corpus give."""
    out_sources, out_targets = [], []
    for vary in VARIATIONS:
        out_sources += [vary(s) for s in sources]
        out_targets += [vary(t) for t in targets]
    return out_sources, out_targets


def misalign_share(share: float) -> Callable[..., Pairs]:
    """A transformation that gives a random ``share`` of the pairs each other's targets, exchanged among pairs of
    the same word lengths (``derange``, as the fully misaligned cell does), and leaves the others intact."""

    def partly_misaligned(sources: list[str], targets: list[str], rng: np.random.Generator, *,
                          derange: Callable[[list[str], list[str], int], list[int]]) -> Pairs:
        chosen = np.sort(rng.choice(len(targets), size=round(share * len(targets)), replace=False))
        donor = derange([sources[i] for i in chosen], [targets[i] for i in chosen], int(rng.integers(2**31)))
        broken = list(targets)
        for k, i in enumerate(chosen):
            broken[i] = targets[chosen[donor[k]]]
        return list(sources), broken

    partly_misaligned.share = share
    return partly_misaligned


def wrong_language(sources: list[str], targets: list[str], rng: np.random.Generator, *,
                   other: dict[str, str]) -> Pairs:
    """Each target replaced by a translation of its source into another language (``other``: source → that
    translation); pairs whose source has none are dropped, so every pair left is in the wrong language."""
    kept = [(source, other[source]) for source in sources if source in other]
    return [s for s, _ in kept], [t for _, t in kept]


#: setup name → (kind, transformation). Names carry no "-": a cell is <setup>-<regime>-<strategy>.
KINDS: dict[str, tuple[NoiseKind, Callable[..., Pairs]]] = {
    "control": (NoiseKind("software", "every training pair is kept as it is (the control: nothing is broken)"),
                unchanged),
    "untranslated": (NoiseKind("software", "every training target is a copy of its source (untranslated)"),
                     untranslated),
    "misordered": (NoiseKind("software", "every training target's words are shuffled"), misordered),
    "short": (NoiseKind("software", "every training pair is cut to its first one or two words on both sides"),
              short_segments),
    "wronglang": (NoiseKind("descriptions", "every training target is the Italian translation of its source "
                                            "(multi-way parallel Debian descriptions), not the German one"),
                  wrong_language),
    "neardup": (NoiseKind("dictionary", f"the training file repeated {len(VARIATIONS)} times, each copy varied in "
                                        "case, end punctuation, spacing or quotes, so exact dedupe keeps them"),
                near_duplicates),
    "partial20": (NoiseKind("software", "a random 20 % of the training pairs misaligned, the rest intact"),
                  misalign_share(0.20)),
    "partial50": (NoiseKind("software", "a random 50 % of the training pairs misaligned, the rest intact"),
                  misalign_share(0.50)),
    # The multilingual cells (issue 45): French → English, the largest of the four bundled languages, broken under
    # the regime A encoder-decoder and under the decoder-only recipe.
    "mluntranslated": (NoiseKind("fr", "every training target is a copy of its French source (untranslated)",
                                 base="multilingual"), untranslated),
    "causalpartial50": (NoiseKind("fr", "a random 50 % of the training pairs misaligned, the rest intact",
                                  base="causal"), misalign_share(0.50)),
}
