"""The study's noise constructions (study/noise.py) on small hand-made pairs: each breaks what it says."""

from __future__ import annotations

import numpy as np

from conftest import load_study

noise = load_study("noise")
SOURCES = ["open the file now", "close all windows", "save", "print the page twice"]
TARGETS = ["öffne die Datei jetzt", "schließe alle Fenster", "speichern", "drucke die Seite zweimal"]


def test_untranslated_misordered_and_short_break_every_pair_as_described():
    rng = np.random.default_rng(0)
    assert noise.untranslated(SOURCES, TARGETS, rng) == (SOURCES, SOURCES)
    _, shuffled = noise.misordered(SOURCES, TARGETS, rng)
    for old, new in zip(TARGETS, shuffled):
        assert sorted(old.split()) == sorted(new.split()) and (new != old or len(old.split()) == 1)
    cut_sources, cut_targets = noise.short_segments(SOURCES, TARGETS, rng)
    assert all(1 <= len(s.split()) <= 2 and 1 <= len(t.split()) <= 2 for s, t in zip(cut_sources, cut_targets))


def test_near_duplicates_survive_exact_dedupe_and_partial_misalignment_breaks_its_share():
    sources, targets = noise.near_duplicates(SOURCES, TARGETS, np.random.default_rng(0))
    assert len(sources) == len(noise.VARIATIONS) * len(SOURCES)
    assert len(set(zip(sources, targets))) > 3 * len(SOURCES)  # most copies differ from each other

    def swap(sources, targets, seed):  # a derangement of the chosen pairs
        return [(k + 1) % len(targets) for k in range(len(targets))]

    _, broken = noise.misalign_share(0.5)(SOURCES, TARGETS, np.random.default_rng(0), derange=swap)
    assert sum(b != t for b, t in zip(broken, TARGETS)) == 2 and sorted(broken) == sorted(TARGETS)
    assert noise.wrong_language(SOURCES, TARGETS, None, other={"save": "salva"}) == (["save"], ["salva"])
