"""The corpus audit (uat_hf.data.audit): real text of the bundled sample, broken the ways corpora break."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import yaml

from conftest import BUNDLED_DIR, MULTIDOMAIN
from uat_hf.data.audit import audit_corpora, signals
from uat_hf.data.corpora import corpus_specs_from_directory, load_corpus_split

MULTILINGUAL = BUNDLED_DIR / "multilingual-ddtp"

LANGS = ("en", "de")


def _pairs(split: str, limit: int | None = None) -> dict[str, tuple[list[str], list[str]]]:
    out = {}
    for spec in corpus_specs_from_directory(MULTIDOMAIN, *LANGS):
        data = load_corpus_split(spec, split)
        sources, targets = data.data.column("source").to_pylist(), data.data.column("target").to_pylist()
        out[spec.name] = (sources[:limit], targets[:limit])
    return out


@pytest.fixture(scope="module")
def bundled():
    return _pairs("train", 3000), _pairs("dev")


def _audit(train, dev, sample=1200):
    return audit_corpora(train, dev, {name: LANGS for name in train}, sample=sample, seed=1)


def test_sound_corpora_pass_every_signal(bundled):
    train, dev = bundled
    report = _audit(train, dev)
    assert report.suspects == [], report.table()
    for audit in report.corpora.values():
        assert audit.clean_share == 1.0 and audit.verdict == "ok"
        assert set(audit.signals) == {"copy", "language", "script", "swap", "case", "markup", "length", "short",
                                      "repeat", "lexical", "fluency", "order"}


def test_untranslated_copies_are_seen_and_count_for_almost_nothing(bundled):
    train, dev = bundled
    sources, _ = train["descriptions"]
    report = _audit({**train, "descriptions": (sources, list(sources))}, dev)
    audit = report.corpora["descriptions"]
    assert report.suspects == ["descriptions"], report.table()
    assert {"copy", "language"} <= set(audit.flagged)
    assert audit.signals["copy"].train > 0.95 and audit.clean_share < 0.05
    assert report.effective_sizes({"descriptions": 3000, "bible": 3000}) == {
        "descriptions": pytest.approx(3000 * audit.clean_share), "bible": 3000}


def test_a_target_side_in_the_wrong_language_is_seen(bundled):
    train, dev = bundled
    sources, _ = train["bible"]
    english = train["descriptions"][0][: len(sources)]  # English sentences where German ones belong
    report = _audit({**train, "bible": (sources, english)}, dev)
    assert "language" in report.corpora["bible"].flagged, report.table()
    assert report.suspects == ["bible"]


def test_mojibake_is_seen_by_the_characters_its_dev_set_never_uses_and_only_its_broken_pairs_are_marked(bundled):
    """UTF-8 read as Latin-1 (``ü`` → ``Ã¼``), a web crawl's common accident: the words and their order stay, so
    neither the language nor the lexical signal sees it; a pair of plain ASCII is not changed by it at all."""
    train, dev = bundled
    sources, targets = train["software"]
    garbled = [target.encode("utf-8").decode("latin-1") for target in targets]
    report = audit_corpora({**train, "software": (sources, garbled)}, dev, {name: LANGS for name in train},
                           sample=1200, seed=1, failing=True)
    audit = report.corpora["software"]
    assert report.suspects == ["software"] and audit.flagged == ["script"], report.table()
    changed = np.array([g != t for g, t in zip(garbled, targets)])
    assert audit.clean_share == pytest.approx(1 - changed.mean(), abs=0.06)  # the unchanged pairs are sound
    assert (audit.failing == changed).mean() > 0.97  # drop leaves out the garbled pairs, nearly only those


def test_unseen_characters_leave_each_dev_text_out_of_the_inventory_it_is_checked_against():
    train, dev = signals.unseen_characters(["abc", "abz", "a b", "Ã¼"], ["ab", "bc", "ca", "cd", "d!"])
    assert train.tolist() == [False, True, False, True]  # z, Ã and ¼ are in no dev text; spaces never count
    assert dev.tolist() == [False, False, False, False, True]  # "!" is in no other dev text


def test_short_strings_read_the_wrong_way_round_are_seen_where_language_identification_gives_no_verdict(bundled):
    """Software's short strings (under 20 letters a side, where py3langid gives no verdict: 30 % of its pairs) with
    source and target swapped, the rest sound: the dev sides' character trigrams tell English from German on any
    length, and drop marks most swapped strings (not those, such as names, that read alike in both languages)
    and no sound pair."""
    train, dev = bundled
    sources, targets = train["software"]
    swapped = np.array([max(sum(c.isalpha() for c in text) for text in pair) < signals.MIN_LANGUAGE_LETTERS
                        for pair in zip(sources, targets)])
    pairs = [(t, s) if flip else (s, t) for s, t, flip in zip(sources, targets, swapped)]
    report = audit_corpora({**train, "software": ([s for s, _ in pairs], [t for _, t in pairs])}, dev,
                           {name: LANGS for name in train}, sample=1200, seed=1, failing=True)
    audit = report.corpora["software"]
    assert report.suspects == ["software"] and audit.flagged == ["swap"], report.table()
    assert audit.clean_share == pytest.approx(1 - swapped.mean(), abs=0.08)
    assert audit.failing[swapped].mean() > 0.75 and not audit.failing[~swapped].any()


def test_swapped_sides_never_fails_a_copy_and_scores_each_dev_pair_by_the_other_dev_pairs(bundled):
    dev_sources, dev_targets = bundled[1]["software"]
    train, on_dev = signals.swapped_sides(["Datei öffnen", "Open file", "Firefox", "Save"],
                                          ["Open file", "Datei öffnen", "Firefox", "Speichern"],
                                          dev_sources, dev_targets)
    assert train.tolist() == [True, False, False, False] and not on_dev.any()
    # the dev pair is judged exactly as a new pair by the dev set without it
    flipped = (list(dev_targets[:40]) + list(dev_sources[40:]), list(dev_sources[:40]) + list(dev_targets[40:]))
    on_dev = signals.swapped_sides([], [], *flipped)[1]
    assert on_dev.tolist() == [signals.swapped_sides([s], [t], [*flipped[0][:k], *flipped[0][k + 1:]],
                                                     [*flipped[1][:k], *flipped[1][k + 1:]])[0][0]
                               for k, (s, t) in enumerate(zip(*flipped))]
    assert on_dev[:40].mean() > 0.9 and on_dev[40:].mean() < 0.02


def test_targets_written_all_in_capitals_are_seen_though_the_models_read_lower_case_and_only_they_are_marked(bundled):
    """A third of software's targets upper-cased, as a crawl or a converter leaves them: the words, their order and
    their script stay, and the lexical and fluency models read lower case."""
    train, dev = bundled
    sources, targets = train["software"]
    upper = np.random.default_rng(7).random(len(targets)) < 0.3
    report = audit_corpora({**train, "software": (sources, [t.upper() if u else t for t, u in zip(targets, upper)])},
                           dev, {name: LANGS for name in train}, sample=1200, seed=1, failing=True)
    audit = report.corpora["software"]
    assert report.suspects == ["software"] and audit.flagged == ["case"], report.table()
    changed = upper & signals.shouting(sources, [t.upper() for t in targets])  # a target of digits stays as it is
    assert audit.clean_share == pytest.approx(1 - changed.mean(), abs=0.05)
    assert (audit.failing == changed).all()


def test_shouting_needs_one_side_all_in_capitals_and_the_other_in_lower_case():
    sources = ["Open the file", "URL", "Save as PDF", "OK", "保存する", "HTTP MODULES", "HTML 문서"]
    targets = ["DATEI ÖFFNEN", "URL", "Als PDF speichern", "OK", "SPEICHERN", "HTTP-MODULE", "HTML document"]
    assert signals.shouting(sources, targets).tolist() == [True] + [False] * 6  # Hangul is not upper case
    assert signals.shouting(targets, sources).tolist() == [True] + [False] * 6


def test_targets_left_in_the_pages_markup_are_seen_and_only_they_are_marked(bundled):
    """A third of software's targets still wrapped in the HTML they were crawled from: their words and their order
    stay, and software's own placeholders (``<prefix>``, translated as ``<Präfix>``) must not count."""
    train, dev = bundled
    sources, targets = train["software"]
    wrapped = np.random.default_rng(5).random(len(targets)) < 0.3
    report = audit_corpora(
        {**train, "software": (sources, [f'<p class="msg">{t}</p>' if w else t for t, w in zip(targets, wrapped)])},
        dev, {name: LANGS for name in train}, sample=1200, seed=1, failing=True)
    audit = report.corpora["software"]
    assert report.suspects == ["software"] and audit.flagged == ["markup"], report.table()
    assert audit.clean_share == pytest.approx(1 - wrapped.mean(), abs=0.05)
    sound_mismatch = signals.markup_mismatch(sources, targets)  # software's own, as often as on its dev set
    assert sound_mismatch.mean() < 0.02
    assert (audit.failing == (wrapped | sound_mismatch)).all()


def test_markup_mismatch_counts_tags_and_reads_entities():
    sources = ["Open <b>file</b>", "use <sfx> instead", "x <y and y> z", "Tom &amp; Jerry", "Tom &amp; Jerry",
               "Save", "Ä"]
    targets = ["<b>Datei</b> öffnen", "<Dateiendung> statt", "x <y und y> z", "Tom &amp; Jerry", "Tom & Jerry",
               '<p class="t">Speichern</p>', "&#196;"]
    assert signals.markup_mismatch(sources, targets).tolist() == [False] * 4 + [True] * 3
    assert signals.markup_mismatch(targets, sources).tolist() == [False] * 4 + [True] * 3


def test_fragments_shorter_than_the_dev_sets_sentences_are_seen_and_marked(bundled):
    """Khayrallah and Koehn's short segments, built another way than the study's cell: 40 % of bible's pairs cut to
    the first third of their words on both sides, a length ratio like a sound pair's. Only the short signal sees
    them: the marks catch most fragments (not those of long verses, as long as a short verse: 87 % here) and few
    whole verses."""
    train, dev = bundled
    sources, targets = train["bible"]
    rng = np.random.default_rng(3)
    cut = np.zeros(len(sources), dtype=bool)
    cut[rng.choice(len(sources), size=int(0.4 * len(sources)), replace=False)] = True

    def third(text: str) -> str:
        words = text.split()
        return " ".join(words[:max(1, len(words) // 3)])

    broken = ([third(s) if c else s for s, c in zip(sources, cut)],
              [third(t) if c else t for t, c in zip(targets, cut)])
    report = audit_corpora({**train, "bible": broken}, dev, {name: LANGS for name in train}, sample=1200, seed=1,
                           failing=True)
    audit = report.corpora["bible"]
    assert report.suspects == ["bible"] and "short" in audit.flagged, report.table()
    assert audit.failing[cut].mean() > 0.8 and audit.failing[~cut].mean() < 0.15, report.table()
    assert 0.45 <= audit.clean_share <= 0.75  # 60 % sound

@pytest.mark.parametrize("share", [0.2, 0.5])
def test_a_partly_misaligned_corpus_is_seen_and_its_clean_share_estimated(bundled, share):
    train, dev = bundled
    sources, targets = train["bible"]
    rng = np.random.default_rng(0)
    broken = rng.choice(len(targets), size=int(share * len(targets)), replace=False)
    moved = list(targets)
    for k, i in enumerate(broken):  # each broken pair gets the target of the next broken one
        moved[i] = targets[broken[(k + 1) % len(broken)]]
    audit = _audit({**train, "bible": (sources, moved)}, dev).corpora["bible"]
    # verses of other lengths; a misaligned target follows its source's order no more than a shuffled one does
    assert "lexical" in audit.flagged and set(audit.flagged) <= {"lexical", "length", "order"}, audit
    assert 1 - share - 0.1 <= audit.clean_share <= 1 - share / 2  # sees at least half of the broken pairs


def _shuffled(targets: list[str], rows, seed: int = 0) -> list[str]:
    """``targets`` with the words of the targets at ``rows`` in a random order (Khayrallah and Koehn's misordered
    noise)."""
    rng, out = np.random.default_rng(seed), list(targets)
    for i in rows:
        tokens = out[i].split()
        out[i] = " ".join(tokens[k] for k in rng.permutation(len(tokens)))
    return out


@pytest.mark.parametrize("share", [1.0, 0.5])
def test_targets_in_shuffled_word_order_are_seen_and_their_share_estimated(bundled, share):
    """Shuffled targets keep every word, so copy, language, length, lexical adequacy and (on short strings) the
    bigram score pass them; the order of their links to the source does not. The pairs in random order fail the
    order signal only at its null rate, which the audit measures, so the clean share still comes out right."""
    train, dev = bundled
    sources, targets = train["bible"]
    rows = np.random.default_rng(1).choice(len(targets), size=int(share * len(targets)), replace=False)
    report = audit_corpora({**train, "bible": (sources, _shuffled(targets, rows))}, dev,
                           {name: LANGS for name in train}, sample=1200, seed=1, failing=True)
    audit = report.corpora["bible"]
    assert report.suspects == ["bible"] and "order" in audit.flagged, report.table()
    assert 0.5 < audit.order_null < 1 and audit.signals["order"].dev < 0.3  # the dev pairs: 25 % by the quantile
    assert abs(audit.clean_share - max(1 - share, 0.01)) < 0.12  # truth: 0 (at least 1 %) and 0.5
    # drop keeps the pairs in random order that passed, and the prior counts what it keeps at its clean share
    is_shuffled = np.isin(np.arange(len(targets)), rows)
    kept_broken = (~audit.failing & is_shuffled).sum() / (~audit.failing).sum()
    assert audit.failing[is_shuffled].mean() > 0.6 and kept_broken > 0.03
    assert abs(audit.kept_clean_share - max(1 - kept_broken, 0.01)) < 0.15
    from uat_hf.cli.arguments import DataArguments
    from uat_hf.cli.audit import audited_sizes

    data_args = DataArguments(corpus_dir="bundled:multidomain-en-de", source_lang="en", target_lang="de")
    kept = {name: list(range(3000 if name != "bible" else int((~audit.failing).sum()))) for name in train}
    assert audited_sizes(report, data_args, kept) == {**{name: 3000 for name in train if name != "bible"},
                                                      "bible": pytest.approx(len(kept["bible"])
                                                                             * audit.kept_clean_share)}


def test_near_duplicates_that_exact_dedupe_keeps_count_once(bundled):
    train, dev = bundled
    sources, targets = (side[:1000] for side in train["dictionary"])
    copies = ([s for s in sources] + [s.lower() for s in sources] + [s + " " for s in sources],
              [t for t in targets] + [t.lower() for t in targets] + [t + " ." for t in targets])
    assert len(set(zip(*copies))) > 2.5 * len(sources)  # exact dedupe would keep them
    audit = _audit({**train, "dictionary": copies}, dev).corpora["dictionary"]
    assert audit.flagged == ["repeat"]
    assert audit.effective_size == pytest.approx(len(set(zip(sources, targets))), rel=0.05)


def test_a_pair_key_ignores_case_punctuation_and_spacing_in_any_script_and_nothing_else(bundled):
    train, _ = bundled
    texts = [text for sources, targets in train.values() for text in sources[:300] + targets[:300]] + [
        "Hello, World!", "snake_case\tid-42", "ÄRGER über „Größe“", "İstanbul — 2½ km", "e\u0301te\u0301", "«Ça va?»",
        "ＡＢＣ１２３", "日本語、テキスト。", "~!@#$%^&*()", ""]
    assert any(text.isascii() for text in texts) and any(not text.isascii() for text in texts)
    # the ASCII fast path and the regular expression give the words of the text, joined
    assert [signals.normalised(text) for text in texts] == ["".join(signals.words(text)) for text in texts]
    keys = signals.pair_keys(["Hello, World!", "hello world", "Hello World", "Hello, Word!"],
                             ["Hallo, Welt!", "HALLO WELT", "hallo  welt .", "Hallo, Welt!"])
    assert keys.dtype == np.int64 and keys[0] == keys[1] == keys[2] != keys[3]
    assert signals.repeated_keys(keys).tolist() == [False, True, True, False]
    # the same key in any process and run (hashed in the preparation's workers, kept in the cache)
    assert int(signals.pair_keys(["a"], ["b"])[0]) == -5396678125053331263


def test_no_false_alarm_over_many_exchangeable_corpora():
    """64 disjoint corpora whose training and dev pairs are drawn from one shuffled pool of the bundled sample:
    nothing sets the training pairs apart, so no signal may fire (the per-corpus test is sized for about 1 %
    false alarms per run of 64 corpora)."""
    pool = [pair for sources, targets in _pairs("train").values() for pair in zip(sources, targets)]
    order = np.random.default_rng(3).permutation(len(pool))
    fake_train, fake_dev = {}, {}
    for k in range(64):
        chunk = [pool[i] for i in order[k * 550:(k + 1) * 550]]
        fake_train[f"c{k}"] = ([s for s, _ in chunk[:400]], [t for _, t in chunk[:400]])
        fake_dev[f"c{k}"] = ([s for s, _ in chunk[400:]], [t for _, t in chunk[400:]])
    report = _audit(fake_train, fake_dev, sample=400)
    assert report.suspects == [], [report.corpora[n] for n in report.suspects]


def test_a_corpus_without_enough_dev_pairs_is_reported_not_judged(bundled):
    train, dev = bundled
    report = _audit(train, {**dev, "software": (dev["software"][0][:10], dev["software"][1][:10])})
    audit = report.corpora["software"]
    assert audit.signals == {} and audit.verdict.startswith("not measurable") and audit.clean_share == 1.0
    assert "not measurable" in report.table() and json.dumps(report.to_dict())


def test_uat_audit_prints_the_table_and_writes_the_report(tmp_path, capsys):
    from uat_hf.cli.audit import main

    out = tmp_path / "audit.json"
    assert main(["--corpus_dir", "bundled:multidomain-en-de", "--source_lang", "en", "--target_lang", "de",
                 "--output_dir", str(tmp_path / "run"), "--max_train_examples", "800",
                 "--output_json", str(out), "--strict"]) == 0
    printed = capsys.readouterr().out  # the table is the command's output
    assert printed.startswith("corpus ") and "verdict" in printed
    report = json.loads(out.read_text())
    assert set(report["corpora"]) == {"bible", "descriptions", "dictionary", "software"}
    assert all(c["verdict"] == "ok" for c in report["corpora"].values())
    assert not (tmp_path / "run").exists()  # an audit writes nothing of a run


def test_uat_audit_help_describes_uat_audit_and_its_own_flags(capsys):
    from uat_hf.cli.audit import main

    with pytest.raises(SystemExit) as exited:
        main(["--help"])
    printed = capsys.readouterr().out
    assert exited.value.code == 0 and printed.startswith("usage: uat-audit [--config RECIPE]")
    assert "--output_json PATH" in printed and "--strict" in printed and "uat-train --help" in printed
    assert main(["--corpus_dir", "no/such/folder", "--source_lang", "en", "--target_lang", "de"]) == 2


def test_audit_specs_measures_the_pairs_the_cleaning_keeps():
    """The audit reads each corpus as the run cleans it (a filtered Dataset's Arrow table still holds every row)."""
    import datasets

    from uat_hf.data.audit import audit_specs
    from uat_hf.data.preprocessing import PreprocessingConfig, preprocess

    datasets.disable_progress_bars()
    specs = corpus_specs_from_directory(MULTIDOMAIN, *LANGS)
    cleaning = PreprocessingConfig(max_length_ratio=1.5, dedupe=True)
    report = audit_specs(specs, cleaning, sample=300)
    kept = {spec.name: len(preprocess(load_corpus_split(spec, "train"), cleaning, corpus=spec.name)) for spec in specs}
    assert {name: audit.pairs for name, audit in report.corpora.items()} == kept
    assert kept["software"] < len(load_corpus_split(specs[-1], "train"))  # the cleaning did remove pairs here


def test_audit_specs_hashes_no_pair_of_a_corpus_it_cannot_judge(tmp_path, monkeypatch):
    """Hashing every pair is the audit's cost that grows with the corpus: a corpus without dev pairs to judge it
    against is reported as not measurable, and none of its pairs is hashed."""
    import shutil

    import uat_hf.data.audit as audit_package
    from uat_hf.data.preprocessing import PreprocessingConfig

    for name, splits in (("bible", ("train", "dev")), ("descriptions", ("train",))):
        for split in splits:
            shutil.copy(MULTIDOMAIN / f"{name}.{split}.jsonl.gz", tmp_path / f"{name}.{split}.jsonl.gz")
    hashed, hash_keys = [], audit_package._pair_keys
    monkeypatch.setattr(audit_package, "_pair_keys", lambda pairs, corpus, num_proc: hashed.append(corpus) or
                        hash_keys(pairs, corpus, num_proc))
    report = audit_package.audit_specs(corpus_specs_from_directory(tmp_path, *LANGS), PreprocessingConfig(),
                                       sample=300)
    assert hashed == ["bible"]
    assert report.corpora["descriptions"].verdict.startswith("not measurable")
    assert report.corpora["bible"].verdict == "ok"


def test_a_streamed_corpus_is_audited_on_its_first_pairs(tmp_path):
    """A stream has no random access: the audit reads its first pairs, as the run will stream them, and judges them
    against the dev set like any corpus; its size is the one its metadata gives."""
    import gzip
    import shutil

    from uat_hf.data.audit import audit_specs
    from uat_hf.data.preprocessing import PreprocessingConfig

    for name in ("bible", "descriptions"):
        for split in ("train", "dev"):
            shutil.copy(MULTIDOMAIN / f"{name}.{split}.jsonl.gz", tmp_path / f"{name}.{split}.jsonl.gz")
    rows = [json.loads(line) for line in gzip.open(MULTIDOMAIN / "descriptions.train.jsonl.gz", "rt")]
    with gzip.open(tmp_path / "descriptions.train.jsonl.gz", "wt") as out:  # untranslated: target = source
        for row in rows:
            out.write(json.dumps({"translation": {"en": row["translation"]["en"], "de": row["translation"]["en"]}})
                      + "\n")
    specs = corpus_specs_from_directory(tmp_path, *LANGS)
    report = audit_specs(specs, PreprocessingConfig(), sample=500, streamed={"bible", "descriptions"})
    bible, descriptions = report.corpora["bible"], report.corpora["descriptions"]
    assert bible.streamed and descriptions.streamed and report.suspects == ["descriptions"], report.table()
    assert {"copy", "language"} <= set(descriptions.flagged) and bible.verdict == "ok"
    assert 450 < bible.sampled <= 500  # its first 500 pairs, after the cleaning
    assert bible.pairs == len(load_corpus_split(specs[0], "train"))  # its size: the line count of its file
    assert "(streamed: its first pairs)" in report.table()


def test_the_failing_pairs_of_a_suspect_corpus_are_marked_for_dropping(bundled):
    """corpus_audit: drop trains without the pairs that fail a flagged signal: most misaligned pairs, few sound ones;
    a sound corpus is never marked."""
    train, dev = bundled
    sources, targets = train["bible"]
    rng = np.random.default_rng(0)
    broken = rng.choice(len(targets), size=len(targets) // 2, replace=False)
    moved = list(targets)
    for k, i in enumerate(broken):
        moved[i] = targets[broken[(k + 1) % len(broken)]]
    report = audit_corpora({**train, "bible": (sources, moved)}, dev, {name: LANGS for name in train}, sample=1200,
                           seed=1, failing=True)
    failing = report.corpora["bible"].failing
    assert len(failing) == len(sources) and report.corpora["dictionary"].failing is None  # a sound corpus: none
    is_broken = np.zeros(len(sources), dtype=bool)
    is_broken[broken] = True
    assert failing[is_broken].mean() > 0.6  # most broken pairs go ...
    assert failing[~is_broken].mean() < 0.15  # ... few sound ones
    assert report.corpora["bible"].to_dict()["failing_pairs"] == int(failing.sum())
    copies = audit_corpora({**train, "descriptions": (train["descriptions"][0], list(train["descriptions"][0]))}, dev,
                           {name: LANGS for name in train}, sample=1200, seed=1, failing=True)
    assert copies.corpora["descriptions"].failing.mean() > 0.95


def test_pairs_the_models_were_fitted_on_are_marked_as_the_held_out_ones_are(bundled):
    """A corpus no larger than the sample is all sampled, and the lexical and bigram models are fitted on half of it.
    A model that saw a misaligned pair learned the links it needs, so marking it with that model keeps it; the
    marks come from the models fitted on the other halves there (cross-fitting). Software's short strings show it
    most: about 72 % of the broken pairs were marked before, 94 % now (the held-out half's rate)."""
    train, dev = bundled
    sources, targets = train["software"][0][:1000], train["software"][1][:1000]
    broken = np.random.default_rng(0).choice(1000, size=500, replace=False)
    moved = list(targets)
    for k, i in enumerate(broken):
        moved[i] = targets[broken[(k + 1) % len(broken)]]
    report = audit_corpora({**train, "software": (sources, moved)}, dev, {name: LANGS for name in train},
                           sample=1200, seed=1, failing=True)
    audit = report.corpora["software"]
    assert audit.sampled == 1000 and "lexical" in audit.flagged, report.table()
    is_broken = np.isin(np.arange(1000), broken)
    assert audit.failing[is_broken].mean() > 0.85


def test_a_dataset_is_audited_as_its_pairs_are_and_the_report_round_trips_with_its_marks(bundled, tmp_path):
    """A cleaned Dataset (read at its sampled pairs only) gives the report its pairs as lists give, failing marks
    included; the report kept beside prepared data reads back equal, marks and all."""
    import datasets

    from uat_hf.data.audit.report_file import load_report, report_name, save_report

    train, dev = bundled
    sources, targets = train["bible"]
    moved = targets[1:] + targets[:1]  # every pair misaligned
    lists = {**train, "bible": (sources, moved)}
    as_datasets = {name: datasets.Dataset.from_dict({"source": s, "target": t}).filter(lambda row: True)
                   for name, (s, t) in lists.items()}
    expected = audit_corpora(lists, dev, {name: LANGS for name in lists}, sample=600, seed=3, failing=True)
    report = audit_corpora(as_datasets, dev, {name: LANGS for name in lists}, sample=600, seed=3, failing=True)
    assert report.to_dict() == expected.to_dict() and report.suspects == ["bible"]
    assert np.array_equal(report.corpora["bible"].failing, expected.corpora["bible"].failing)
    name = report_name(3, 600, failing=True)
    save_report(tmp_path, name, report)
    kept = load_report(tmp_path, name)
    assert kept.to_dict() == report.to_dict() and kept.table() == report.table()
    assert np.array_equal(kept.corpora["bible"].failing, report.corpora["bible"].failing)
    assert kept.corpora["dictionary"].failing is None and load_report(tmp_path, report_name(4, 600, True)) is None
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"{name}.json", f"{name}.npz"]  # no temporary left


def _corpus_folder(tmp_path, bundled, names, broken: str, rewrite):
    """``tmp_path/corpora`` with the splits of ``names`` from the bundled folder ``bundled``, and the training
    file of ``broken`` its first 400 pairs, each rewritten by ``rewrite(row, translation)``."""
    import gzip
    import shutil

    corpora = tmp_path / "corpora"
    corpora.mkdir(exist_ok=True)
    for name in names:
        for split in ("train", "dev", "test"):
            shutil.copy(bundled / f"{name}.{split}.jsonl.gz", corpora / f"{name}.{split}.jsonl.gz")
    rows = [json.loads(line)["translation"] for line in gzip.open(bundled / f"{broken}.train.jsonl.gz", "rt")]
    with gzip.open(corpora / f"{broken}.train.jsonl.gz", "wt") as out:
        for i, pair in enumerate(rows[:400]):
            out.write(json.dumps({"translation": rewrite(i, pair)}) + "\n")
    return corpora

def test_uat_train_drops_the_failing_pairs_of_a_suspect_corpus(tmp_path, capsys):
    """corpus_audit: drop end to end: dictionary with half its targets replaced by their sources trains on the
    others only; the report counts them; a corpus with no sound pair left is left out of training, and still
    evaluated."""
    from test_cli import TINY

    from uat_hf.cli import train as cli

    corpora = _corpus_folder(tmp_path, MULTIDOMAIN, ("bible", "dictionary"), "dictionary",
                             lambda i, pair: {"en": pair["en"], "de": pair["en"] if i % 2 else pair["de"]})
    recipe = {**TINY, "strategy": "proportional", "corpus_dir": str(corpora), "eval_corpus_specs": None,
              "corpus_audit": "drop", "max_train_examples": 400, "max_steps": 2, "output_dir": str(tmp_path / "out")}
    (tmp_path / "recipe.yaml").write_text(yaml.safe_dump(recipe))
    assert cli.main(["--config", str(tmp_path / "recipe.yaml")]) == 0
    printed = capsys.readouterr().err
    report = json.loads((tmp_path / "out" / "eval_results.json").read_text())["corpus_audit"]["corpora"]
    dropped = report["dictionary"]["failing_pairs"]
    assert 150 <= dropped <= 260 and "failing_pairs" not in report["bible"], report["dictionary"]
    assert f"corpus 'dictionary': dropped {dropped} of {report['dictionary']['pairs']} training pairs" in printed
    assert report["dictionary"]["action"] == f"{dropped} failing pairs dropped" and report["bible"]["action"] is None
    kept = re.search(r"dictionary (\d+) train", printed)
    assert kept and int(kept.group(1)) == report["dictionary"]["pairs"] - dropped

    _corpus_folder(tmp_path, MULTIDOMAIN, (), "dictionary",  # every target a copy: nothing would remain
                   lambda i, pair: {"en": pair["en"], "de": pair["en"]})
    assert cli.main(["--config", str(tmp_path / "recipe.yaml"), "--output_dir", str(tmp_path / "none")]) == 0
    assert "corpus 'dictionary' is left out of training: every one of its" in capsys.readouterr().err
    final_mix = json.loads((tmp_path / "none" / "final_mix.json").read_text())
    results = json.loads((tmp_path / "none" / "eval_results.json").read_text())
    assert final_mix["corpora"] == ["bible"] and "eval_dictionary_bleu" in results  # not trained on, evaluated
    assert results["corpus_audit"]["corpora"]["dictionary"]["action"] == "left out of training"


def test_drop_keeps_a_language_pairs_only_corpus_whole_when_none_of_its_pairs_is_sound(tmp_path, capsys):
    """Many-to-English with fr's targets all copies of their sources: every fr pair fails, but no other corpus is
    fr→en, so drop keeps fr whole (leaving it out would leave fr untrained; copying beats a small model on fr's dev
    set in the study's multilingual copy cell) and says so; de is untouched."""
    from test_cli import TINY

    from uat_hf.cli import train as cli

    corpora = _corpus_folder(tmp_path, MULTILINGUAL, ("fr", "de"), "fr",
                             lambda i, pair: {"fr": pair["fr"], "en": pair["fr"]})
    recipe = {**TINY, "strategy": "proportional", "corpus_dir": str(corpora), "direction": "many-to-one",
              "source_lang": None, "target_lang": "en", "corpora": ["fr", "de"], "eval_corpus_specs": None,
              "corpus_audit": "drop", "max_train_examples": 400, "max_steps": 2, "output_dir": str(tmp_path / "out")}
    (tmp_path / "recipe.yaml").write_text(yaml.safe_dump(recipe))
    assert cli.main(["--config", str(tmp_path / "recipe.yaml")]) == 0
    printed = capsys.readouterr().err
    report = json.loads((tmp_path / "out" / "eval_results.json").read_text())["corpus_audit"]["corpora"]
    assert report["fr"]["failing_pairs"] == report["fr"]["pairs"] and "failing_pairs" not in report["de"], report
    assert "drop keeps it whole, since no other training corpus is fr→en" in printed
    assert "left out of training" not in printed and re.search(r"fr (\d+) train", printed).group(1) == str(
        report["fr"]["pairs"])
    final_mix = json.loads((tmp_path / "out" / "final_mix.json").read_text())
    assert sorted(final_mix["corpora"]) == ["de", "fr"]
    assert report["fr"]["action"] == "kept whole: the only fr→en training corpus"
    assert "| fr | 400 | 4 | suspect: copy, language, script (kept whole: the only fr→en training corpus) |" in (
        tmp_path / "out" / "README.md").read_text()

def test_the_default_action_drops_where_a_run_can_and_reweights_where_it_cannot():
    """auto (the default, chosen on the dev sets of the study's noise cells): drop for map-style corpora; a stream
    or a train_fraction cannot drop by index, so they reweight."""
    from uat_hf.cli.arguments import DataArguments

    base = {"corpus_dir": "bundled:multidomain-en-de", "source_lang": "en", "target_lang": "de"}
    assert DataArguments(**base).corpus_audit == "drop"
    assert DataArguments(**base, streaming=True, dedupe=False).corpus_audit == "reweight"
    assert DataArguments(**base, train_fraction=0.5).corpus_audit == "reweight"
    assert DataArguments(**base, corpus_audit="warn").corpus_audit == "warn"
    with pytest.raises(ValueError, match="corpus_audit: drop removes the failing pairs .* not with streaming"):
        DataArguments(**base, streaming=True, dedupe=False, corpus_audit="drop")
