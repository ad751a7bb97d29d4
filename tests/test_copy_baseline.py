"""The copy baseline (uat_hf.evaluation.copy_baseline) on small hand-made examples."""

from __future__ import annotations

import pytest

from uat_hf.evaluation.copy_baseline import copy_metrics, copy_rate
from uat_hf.evaluation.metrics import format_table, translation_scores


def test_copy_rate_counts_the_words_that_stand_in_the_source():
    sources = ["Open file %s", "GNU Image Manipulation Program"]
    assert copy_rate(["Datei %s öffnen", "GNU Bildbearbeitungsprogramm"], sources) == pytest.approx(2 / 5)
    assert copy_rate(sources, sources) == 1.0
    assert copy_rate(["", ""], sources) == 0.0
    with pytest.raises(ValueError, match="pair up"):
        copy_rate(["a"], sources)


def test_copy_metrics_score_the_source_as_the_hypothesis():
    sources = ["Open file %s now", "Version 2.4.1 of GIMP", "the house is small"]
    references = ["Datei %s jetzt öffnen", "Version 2.4.1 von GIMP", "das Haus ist klein"]
    hypotheses = ["Datei %s öffnen", "Version 2.4.1 of GIMP", "das Haus ist klein"]
    metrics = copy_metrics(sources, references, hypotheses)
    expected, _ = translation_scores(sources, references)
    assert metrics["bleu_copy"] == expected["bleu"] and metrics["chrf_copy"] == expected["chrf"]
    assert metrics["bleu_copy"] > 0  # names, numbers and placeholders earn credit without translating
    assert metrics["reference_copy_rate"] == pytest.approx(4 / 12)  # %s, Version, 2.4.1, GIMP of 12 words
    assert metrics["copy_rate"] == pytest.approx(5 / 11)
    assert "copy_rate" not in copy_metrics(sources, references)


def test_the_results_table_shows_the_copy_baseline_when_every_corpus_has_it():
    row = {"bleu": 5.0, "chrf": 30.0, "bleu_copy": 8.9, "chrf_copy": 29.0, "copy_rate": 0.4,
           "reference_copy_rate": 0.1}
    table = format_table({"software": row, "bible": {**row, "bleu_copy": 0.3}})
    assert "copy BLEU" in table.splitlines()[0]
    assert "8.90" in table and "40%" in table and "10%" in table
    assert table.splitlines()[3].split()[3] == "4.60"  # the mean row's copy BLEU: (8.9 + 0.3) / 2
    plain = format_table({"software": {"bleu": 5.0, "chrf": 30.0}})
    assert "copy" not in plain
