"""The known-answer corpora and cells of the study (issue 36): ``study/known_answer_data.py`` builds them
from the bundled sample (never ../shared), checked here with the library's own reading and cleaning; the
recipes, the driver's seeds and baseline, and the report's known-answer table. Nothing trains."""

from __future__ import annotations

import json
import statistics
from collections import Counter, defaultdict
from pathlib import Path

import pytest
import yaml

from conftest import load_study
from uat_hf.data.corpora import corpus_specs_from_directory, load_corpus_split
from uat_hf.data.preprocessing import preprocess

known = load_study("known_answer_data")
recipes = load_study("grid")
report = load_study("report")
driver = load_study("run")
SIZES = recipes.MULTIDOMAIN_SIZES


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Both folders, built once for the module (a few seconds)."""
    out = tmp_path_factory.mktemp("known-answer")
    return out, known.build(out, setups=("misaligned", "duplicated"))  # noise kinds: test_noise_cells.py


def _cleaned(folder, *, dedupe: bool, cache) -> dict[str, int]:
    """Training pairs per corpus as uat-train reads the folder (corpus_dir specs, the json loader) and cleans it
    with regime A's filters."""
    config = known.recipe_preprocessing(dedupe=dedupe)
    pairs = {spec.name: load_corpus_split(spec, "train", cache_dir=str(cache))
             for spec in corpus_specs_from_directory(folder, "en", "de")}
    return {name: len(preprocess(raw, config, corpus=name)) for name, raw in pairs.items()}


# ----------------------------------------------------------------------------------- the construction


def test_the_same_seed_writes_byte_identical_files(built, tmp_path):
    out, _ = built
    known.build(tmp_path, setups=("misaligned",))
    first, again = out / "misaligned", tmp_path / "misaligned"
    assert sorted(p.name for p in first.iterdir()) == sorted(p.name for p in again.iterdir())
    for file in first.iterdir():
        assert file.read_bytes() == (again / file.name).read_bytes(), file.name  # construction.json included
    assert not (tmp_path / "misaligned.partial").exists()


def test_dev_test_and_the_other_corpora_are_the_bundled_files(built):
    out, records = built
    for setup, record in records.items():
        for file in sorted(known.BUNDLED.glob("*.jsonl.gz")):
            if file.name != record["changed"]:
                assert (out / setup / file.name).read_bytes() == file.read_bytes(), (setup, file.name)
        assert record["changed"].endswith(".train.jsonl.gz")
        assert set(record["files"]) == {p.name for p in known.BUNDLED.glob("*.jsonl.gz")}


def test_every_misaligned_target_moved_to_another_pair_of_similar_length(built):
    out, record = built[0], built[1]["misaligned"]
    sources, targets = known.read_pairs(out / "misaligned" / "software.train.jsonl.gz", ("en", "de"))
    raw_sources, raw_targets = known.read_pairs(known.BUNDLED / "software.train.jsonl.gz", ("en", "de"))
    rows = known.kept_rows(raw_sources, raw_targets, known.recipe_preprocessing(), "software")
    clean_sources, clean_targets = [raw_sources[k] for k in rows], [raw_targets[k] for k in rows]
    assert sources == clean_sources  # the pairs regime A trains on, in file order
    assert Counter(targets) == Counter(clean_targets)  # the targets only moved
    translations = defaultdict(set)
    for source, target in zip(clean_sources, clean_targets):
        translations[known.normalise(source)].add(known.normalise(target))
    # every pair broken: its target is no translation its source (or a spelling of it) has in the corpus
    assert all(known.normalise(t) not in translations[known.normalise(s)] for s, t in zip(sources, targets))
    old, new = [known.words(t) for t in clean_targets], [known.words(t) for t in targets]
    same = sum(a == b for a, b in zip(old, new))
    assert same / len(old) >= 0.99 and same == record["target_word_count_unchanged"]
    assert all(abs(a - b) <= max(1, 0.6 * a) for a, b in zip(old, new))  # the long tail: sparser lengths
    assert record["broken_pairs"] == len(rows) == 17337 and record["seed"] == known.SEED


def test_the_filters_keep_the_broken_pairs_and_proportional_gives_software_its_share(built, tmp_path):
    out, record = built[0], built[1]["misaligned"]
    sizes = _cleaned(out / "misaligned", dedupe=True, cache=tmp_path)
    assert sizes == record["train_pairs_after_cleaning"] == recipes.KNOWN_ANSWER["misaligned"]["sizes"]
    assert sizes["software"] / record["broken_pairs"] >= 0.95  # 17,336 of 17,337
    assert sizes["software"] / sum(sizes.values()) >= 0.30  # 41.5 %
    assert {c: n for c, n in sizes.items() if c != "software"} == {c: n for c, n in SIZES.items() if c != "software"}


def test_duplicated_gives_the_repeated_corpus_its_share_and_dedupe_would_undo_it(built, tmp_path):
    out, record = built[0], built[1]["duplicated"]
    repeated = _cleaned(out / "duplicated", dedupe=False, cache=tmp_path)
    assert repeated == record["train_pairs_after_cleaning"] == recipes.KNOWN_ANSWER["duplicated"]["sizes"]
    assert repeated["dictionary"] == known.COPIES * SIZES["dictionary"]
    assert repeated["dictionary"] / sum(repeated.values()) >= 0.40  # 42.2 %
    assert _cleaned(out / "duplicated", dedupe=True, cache=tmp_path) == SIZES  # the library's default removes them
    oracle = recipes.fixed_prior("duplicated")
    assert oracle == pytest.approx({c: n / sum(SIZES.values()) for c, n in SIZES.items()}, abs=1e-6)


def test_derange_breaks_pairs_that_share_a_source_or_a_spelling_of_the_target():
    sources = ["Cancel", "_Cancel", "Open", "Open", "Save file", "Close file", "Quit"]
    targets = ["Abbrechen", "_Abbrechen", "Öffnen", "Offen", "Datei speichern", "Datei schließen", "Beenden"]
    donor = known.derange(sources, targets, seed=3)
    assert donor == known.derange(sources, targets, seed=3) and sorted(donor) == list(range(7))
    for k, d in enumerate(donor):
        assert d != k and known.normalise(targets[d]) != known.normalise(targets[k])
        assert not (sources[k] == "Open" and sources[d] == "Open")  # the two translations of Open stay apart


# ----------------------------------------------------------------------------------- recipes and the driver


def test_known_answer_recipes_differ_from_regime_a_only_where_the_cell_needs_it():
    texts = recipes.all_recipes()
    allowed = {"output_dir", "strategy", "corpus_probabilities", "corpus_dir", "dedupe", "eval_split"}
    guard = {"corpus_health_action": "set_aside", "corpus_health_checks": recipes.GUARD_CHECKS}
    for setup, regime, strategy in recipes.known_answer_cells():
        fields = yaml.safe_load(texts[f"{setup}-{regime}-{strategy}.yaml"])
        plain = recipes.base_strategy(strategy)
        twin = plain if plain in recipes.study_strategies() else "proportional"
        base = yaml.safe_load(texts[f"multidomain-A-{twin}.yaml"])
        grid_of = recipes.noise.KINDS[setup][0].base if setup in recipes.noise.KINDS else "multidomain"
        regime_a = recipes.REGIMES["multidomain", "A"]["fields"]  # the multilingual cells: their own grid's fields
        base = {**{key: value for key, value in base.items() if key not in regime_a},
                **recipes.NOISE_BASES[grid_of]["fields"]}
        differing = {key for key in fields.keys() | base.keys() if fields.get(key) != base.get(key)}
        audited = recipes.audit_action(strategy)
        guarded = strategy.removesuffix(f"-{audited}" if audited else "") != plain
        down_weighted = strategy.endswith(recipes.DOWNWEIGHT_SUFFIX)
        extra = (guard.keys() if guarded else set()) | ({"corpus_audit"} if audited else set())
        assert differing <= allowed | extra | ({"corpus_health_holdout"} if down_weighted else set()), (
            setup, regime, strategy, differing)
        expected = ({**guard, "corpus_health_action": "down_weight"} if down_weighted else guard if guarded else
                    {key: None for key in guard})
        assert {key: fields.get(key) for key in guard} == expected, strategy
        # the archive's cells were checked on the pairs they train on; the down-weighted ones on the held-out slice
        assert fields.get("corpus_health_holdout") == (None if down_weighted else 0), strategy
        assert fields.get("corpus_audit") == (audited or "warn"), strategy  # pinned: not uat-train's default
        assert fields["corpus_dir"] == f"runs/known-answer/{setup}"
        assert fields.get("dedupe", True) is (setup != "duplicated")
        assert fields.get("eval_split", "test") == ("dev" if regime == recipes.SWEEP_REGIME else "test")
    oracle = yaml.safe_load(texts["misaligned-A-oracle.yaml"])
    assert oracle["strategy"] == "fixed" and oracle["corpus_probabilities"]["software"] == 0.01
    others = {c: p for c, p in oracle["corpus_probabilities"].items() if c != "software"}
    assert others == pytest.approx({c: 0.99 * n / (sum(SIZES.values()) - SIZES["software"])
                                    for c, n in SIZES.items() if c != "software"}, abs=1e-6)
    shares = {s: yaml.safe_load(texts[f"misaligned-Adev-{s}.yaml"]).get("corpus_probabilities", {}).get("software")
              for s in recipes.SWEEP_STRATEGIES}
    assert shares == {"share0.01": 0.01, "share0.05": 0.05, "share0.15": 0.15, "proportional": None}


def test_the_fixed_point_cell_is_the_regular_multiuat_cell_started_from_the_duplicated_cells_prior():
    texts = recipes.all_recipes()
    setup, regime, strategy = recipes.FIXED_POINT_CELL
    started = yaml.safe_load(texts[f"{setup}-{regime}-{strategy}.yaml"])
    regular = yaml.safe_load(texts[f"{setup}-{regime}-{recipes.base_strategy(strategy)}.yaml"])
    differing = {key for key in started.keys() | regular.keys() if started.get(key) != regular.get(key)}
    assert differing == {"output_dir", "corpus_probabilities"} and started["strategy"] == "multiuat-enteos"
    duplicated = {**SIZES, "dictionary": 6 * SIZES["dictionary"]}
    assert started["corpus_probabilities"] == pytest.approx(
        {c: n / sum(duplicated.values()) for c, n in duplicated.items()}, abs=2e-6)  # the largest takes the rounding
    assert started["corpus_probabilities"]["dictionary"] == pytest.approx(0.4218, abs=1e-4)


def test_each_cell_runs_its_own_seeds_unless_told_and_known_answer_groups_compare_with_proportional(tmp_path,
                                                                                                  monkeypatch):
    cells = ["misaligned-A-proportional", "misaligned-A-uniform", "misaligned-Adev-share0.05", "multidomain-A-uniform"]
    seeds = {cell: sorted(r.seed for r in driver.select(cells, only=[cell])) for cell in cells}
    assert seeds == {"misaligned-A-proportional": [1, 2, 3, 4, 5], "misaligned-A-uniform": [1, 2, 3],
                     "misaligned-Adev-share0.05": [11], "multidomain-A-uniform": [1, 2, 3]}
    assert {r.seed for r in driver.select(cells, seeds=(7,))} == {7}
    assert 11 not in {s for cell in recipes.all_recipes() for s in recipes.default_seeds(cell[:-5])
                      if "-Adev-" not in cell}

    folder = tmp_path / "recipes"
    folder.mkdir()
    for cell in ("misaligned-A-proportional", "misaligned-A-uniform", "misaligned-A-oracle"):
        (folder / f"{cell}.yaml").write_text(recipes.recipe_text(*cell.split("-", 2)))
    study = driver.Study(folder, tmp_path / "runs", tmp_path / "archive")
    for cell, bleu in (("misaligned-A-proportional", 5.0), ("misaligned-A-uniform", 9.0)):
        run = study.run_dir(driver.Run(cell, 1))
        run.mkdir(parents=True)
        (run / "recipe.yaml").write_text("strategy: x\n")
        (run / "eval_results.json").write_text(json.dumps({"eval_mean_bleu": bleu}))
    assert study.baseline("misaligned-A") == ("misaligned-A-proportional", [1])  # not uniform, the best here
    monkeypatch.chdir(tmp_path)  # corpus_dir is relative to the working directory, as uat-train reads it
    assert study.missing_corpora(driver.select(study.cells())) == [Path("runs/known-answer/misaligned")]
    (tmp_path / "runs" / "known-answer" / "misaligned").mkdir(parents=True)
    (tmp_path / "runs" / "known-answer" / "misaligned" / known.MARKER).write_text("{}")
    assert study.missing_corpora(driver.select(study.cells())) == []


def test_the_sweep_is_scored_on_the_dev_sets_through_uat_evaluate(tmp_path):
    from uat_hf.cli import evaluate

    study = driver.Study(tmp_path / "recipes", tmp_path / "runs", tmp_path / "archive")
    run = driver.Run("misaligned-Adev-share0.05", 11)
    study.run_dir(run).mkdir(parents=True)  # what uat-train leaves: the effective recipe
    (study.run_dir(run) / "recipe.yaml").write_text(recipes.all_recipes()["misaligned-Adev-share0.05.yaml"])
    data, _ = evaluate.parse_arguments(study.score_command(run, driver.Run("misaligned-Adev-proportional", 11))[1:])
    assert data.eval_split == "dev" and data.corpus_dir == "runs/known-answer/misaligned"


# ----------------------------------------------------------------------------------- the report


def _run(tmp_path, strategy: str, seed: int, bleu: dict, recipe: dict, group: str = "misaligned-A"):
    folder = tmp_path / f"{group}-{strategy}" / f"seed{seed}"
    folder.mkdir(parents=True)
    scores = {c: {"bleu": b, "chrf": 3 * b} for c, b in bleu.items()}
    return report.ArchivedRun(folder, f"{group}-{strategy}", group, strategy, seed, "proportional", recipe,
                              {"scores": scores, "mean": {m: statistics.mean(s[m] for s in scores.values())
                                                          for m in ("bleu", "chrf")}, "split": "test"},
                              train_sizes=dict(recipes.KNOWN_ANSWER["misaligned"]["sizes"]))


def test_report_scores_the_intact_corpora_against_proportional_and_names_the_oracle(tmp_path):
    runs = []
    for seed, gain in ((1, 0.9), (2, 1.0), (3, 1.1)):
        base = {"bible": 5.0 + seed, "descriptions": 6.0, "dictionary": 2.0, "software": 9.0}
        runs.append(_run(tmp_path, "proportional", seed, base, {"strategy": "proportional"}))
        oracle = {**base, "bible": base["bible"] + 3 * gain, "software": 3.0}  # intact mean +gain, software -6
        runs.append(_run(tmp_path, "oracle", seed, oracle,
                         {"strategy": "fixed", "corpus_probabilities": recipes.fixed_prior("misaligned")}))
        learned = {**base, "bible": base["bible"] + 1.5 * gain}  # intact mean +gain / 2
        runs.append(_run(tmp_path, "multiuat-enteos", seed, learned, {"strategy": "multiuat", "max_steps": 1950}))
        records = [{"step": 600, "prior": _proportional(), "probabilities": {**_proportional(), "software": 0.5}},
                   {"step": 650, "probabilities": {**_proportional(), "software": 0.1}},
                   {"step": 1300, "probabilities": {**_proportional(), "software": 0.05}}]
        runs[-1].history.write_text("".join(json.dumps(r) + "\n" for r in records))
        guarded = _run(tmp_path, "proportional-setaside", seed, base,
                       {"strategy": "proportional", "max_steps": 1950})
        aside = {**_proportional(), "software": 0.01}  # the health check's cap at step 600: not an update
        key = "cap" if seed % 2 else "set_aside"  # what the record is called, and was before the caps were named
        guarded.history.write_text(json.dumps({"step": 0, "prior": _proportional(), "probabilities": _proportional()})
                                   + "\n" + json.dumps({"step": 600, "probabilities": aside, key: {}}) + "\n")
        runs.append(guarded)
    strategies = ["proportional", "oracle", "multiuat-enteos", "proportional-setaside"]
    lines = "\n".join(report.known_answer_lines("misaligned-A", runs, "proportional", strategies))
    assert "Intact corpora: bible, descriptions, dictionary." in lines and "software 0.01" in lines
    # proportional: all four (22 + seed) / 4 = 6.00 ± 0.25, intact (13 + seed) / 3 = 5.00 ± 0.33; the oracle gains
    # 0.9, 1.0, 1.1 on the intact mean (sd 0.1: t 17.3 on 2 df, p 0.0033, tripled by Holm over the table's three
    # tests against proportional; found with 80 % power from (4.303 + 1.061) · 0.1 / √3 = 0.31) and loses 6 on software
    assert "| proportional | 3 | 6.00 ± 0.25 | 5.00 ± 0.33 | 18.00 ± 0.75 | 15.00 ± 1.00 | – | – | – | (baseline) | " \
           "– | -1.00 | 0.010 | 0.31 | below |" in lines
    assert "| oracle | 3 | 5.25 ± 0.33 | 6.00 ± 0.43 |" in lines
    assert "| +1.00 | 0.010 | 0.31 | above | – | – | – | – | – |" in lines
    # half the oracle's gain, so half of it short of the oracle (Δ -0.45, -0.5, -0.55: detectable 0.15)
    assert "| +0.50 | 0.010 | 0.15 | above | 50% | -0.50 | 0.010 | 0.15 | below |" in lines
    # the guarded run equals proportional on every seed: no difference, p 1
    assert "| +0.00 | 1.000 | 0.00 | not detectable | 0% | -1.00 | 0.010 | 0.31 | below |" in lines
    # where p went: proportional and the oracle stay at their priors; MultiUAT's first update (step 600) gives
    # software 0.5, the record in force after a third of the 1,950 steps is step 650's, at half too, at the end 1,300's
    tv = sum(abs(p - recipes.fixed_prior("misaligned")[c]) for c, p in _proportional().items()) / 2
    assert f"| proportional | 3 | 0.415 | – | 0.415 | 0.415 | 0.415 | 0.000 | {tv:.3f} |" in lines and tv > 0.4
    assert "| oracle | 3 | 0.010 | – | 0.010 | 0.010 | 0.010 | 0.000 | 0.000 |" in lines
    moved = abs(0.05 - _proportional()["software"]) / 2  # TV: half the summed change, here software's alone
    assert f"| multiuat-enteos | 3 | 0.415 | 0.500 | 0.100 | 0.100 | 0.050 | {moved:.3f} | " in lines
    aside_tv = abs(0.01 - _proportional()["software"]) / 2
    assert f"| proportional-setaside | 3 | 0.415 | – | 0.010 | 0.010 | 0.010 | {aside_tv:.3f} | " in lines
    assert "Highest mean BLEU over the intact corpora: oracle (6.00)." in lines


def test_the_view_tables_give_the_oracles_share_over_the_intact_corpora_and_over_all_of_them(tmp_path):
    copy_view = load_study("copy_view")
    runs, scored = [], {}
    for seed in (1, 2):
        for strategy, (intact, software) in {"proportional": (4.0, 4.0), "oracle": (6.0, 0.0),
                                             "proportional-drop": (5.0, 8.0)}.items():
            run = _run(tmp_path, strategy, seed, {"bible": 0.0}, {"strategy": "proportional"}, group="partial50-A")
            scored[id(run)] = {c: {"bleu": intact + seed, "chrf": 2 * intact + seed, "copy_rate": 0.1}
                               for c in ("bible", "descriptions", "dictionary")}
            scored[id(run)]["software"] = {"bleu": software, "chrf": 2 * software, "copy_rate": 0.3}
            runs.append(run)
    strategies = ["proportional", "oracle", "proportional-drop"]
    intact = "\n".join(copy_view._view_table(runs, scored, ["bible", "descriptions", "dictionary"], "proportional",
                                             strategies))
    # intact: the oracle gains 2, drop 1 (half of it) in BLEU; in chrF 4 and 2
    assert "Macro over bible, descriptions, dictionary, in the view;" in intact
    assert "| proportional-drop | 2 | 6.50 ± 0.71 | 11.50 ± 0.71 | +1.00 | 0.000 | 0.00 | 50% | +2.00 | 0.000 | " \
           "0.00 | 50% | 10% |" in intact
    everything = "\n".join(copy_view._view_table(runs, scored, ["bible", "descriptions", "dictionary", "software"],
                                                 "proportional", strategies))
    # all four: the oracle's BLEU gain (3 · 2 - 4) / 4 = +0.5, drop's (3 · 1 + 4) / 4 = +1.75: 350 % of it
    assert "| oracle | 2 | 5.62 ± 0.53 | 10.12 ± 0.53 | +0.50 | 0.000 | 0.00 | – | +1.00 | 0.000 | 0.00 | – |" \
        in everything
    assert "| +1.75 | 0.000 | 0.00 | 350% | +3.50 | 0.000 | 0.00 | 350% | 15% |" in everything


def _proportional() -> dict[str, float]:
    sizes = recipes.KNOWN_ANSWER["misaligned"]["sizes"]
    return {c: n / sum(sizes.values()) for c, n in sizes.items()}
