"""uat-evaluate: a saved tiny model translates bundled test sets; scores, files and paired significance."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
import torch
import yaml

from conftest import MULTIDOMAIN
from uat_hf.cli.evaluate import main as evaluate_main
from uat_hf.data.corpora import BUNDLED_DIR, load_corpora, load_corpus_split
from uat_hf.evaluation.copy_baseline import copy_metrics
from uat_hf.evaluation.metrics import macro_average
from uat_hf.evaluation.saved_runs import (
    eval_set_specs,
    load_translation_model,
    paired_significance,
    read_hypotheses,
    source_length_limit,
    write_hypotheses,
)
from uat_hf.models.presets import build_model
from uat_hf.training.uat_config import UATConfig
from uat_hf.training.uat_trainer import UATTrainer

SENTENCES = 5


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, tokenizer):
    """A tiny random Marian model and its tokenizer saved the way trainer.save_model saves them."""
    folder = tmp_path_factory.mktemp("model")
    torch.manual_seed(0)
    build_model("tiny", tokenizer).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def run_cli(*argv):
    """uat-evaluate with ``argv``; returns the JSON it wrote to OUTPUT_DIR/results.json."""
    evaluate_main([str(a) for a in argv])
    return json.loads((Path(argv[argv.index("--output_dir") + 1]) / "results.json").read_text())


def cli_args(model_dir, output_dir, *extra):
    return [
        str(model_dir), "--corpus_dir", "bundled:multidomain-en-de", "--source_lang", "en", "--target_lang", "de",
        "--corpora", "bible", "software", "--ood_corpora", "dictionary", "--max_eval_examples", str(SENTENCES),
        "--max_new_tokens", "6", "--generation_num_beams", "1", "--output_dir", str(output_dir), *extra,
    ]


@pytest.fixture(scope="module")
def first_run(model_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("eval")
    return run_cli(*cli_args(model_dir, out)), out


def test_cli_writes_the_table_json_and_hypotheses(first_run, model_dir, tmp_path, capsys):
    _, first_output = first_run
    output = tmp_path / "eval"
    # The dashed spellings of the same names work too, as with HfArgumentParser everywhere.
    results = run_cli(*cli_args(model_dir, output, "--hypotheses-dir", str(tmp_path / "hyps")))
    printed = capsys.readouterr().out
    assert "mean" in printed and "out-of-domain" in printed and "BLEU: nrefs:1" in printed
    assert list(results["scores"]) == ["bible", "software"] and list(results["ood_scores"]) == ["dictionary"]
    assert results["mean"]["chrf"] == pytest.approx(macro_average(results["scores"], "chrf"))
    assert results["ood_mean"] == {key: results["ood_scores"]["dictionary"][key] for key in ("bleu", "chrf")}
    assert {"bleu_copy", "chrf_copy", "copy_rate", "reference_copy_rate"} <= set(results["scores"]["bible"])
    assert "tok:13a" in results["signatures"]["bleu"] and "nc:6" in results["signatures"]["chrf"]
    assert results["generation"]["num_beams"] == 1 and results["generation"]["max_new_tokens"] == 6
    assert results["sentences"] == {"bible": SENTENCES, "software": SENTENCES, "dictionary": SENTENCES}
    for name in ("bible", "software", "dictionary"):
        lines = (tmp_path / "hyps" / f"{name}.txt").read_text().splitlines()
        assert len(lines) == SENTENCES
        # Greedy decoding is deterministic: the same model gives the same outputs run after run.
        assert lines == read_hypotheses(first_output / "hypotheses", name)
    assert "significance" not in results


def test_system_against_itself_is_not_significant(first_run, model_dir, tmp_path):
    _, first_output = first_run
    results = run_cli(*cli_args(model_dir, tmp_path / "r", "--compare", first_output / "hypotheses",
                                "--significance_samples", "200"))
    significance = results["significance"]
    assert significance["test"] == "bs" and "bs:200|seed:12345" in significance["signatures"]["bleu"]
    for name in ("bible", "software", "dictionary"):
        for metric in ("bleu", "chrf"):
            entry = significance["corpora"][name][metric]
            assert entry["p_value"] == 1.0 and entry["significant"] is False
            assert entry["system"] == entry["baseline"]


@pytest.mark.parametrize("test", ["bs", "ar"])
def test_system_against_the_references_is_significant(first_run, model_dir, tmp_path, tokenizer, test):
    specs = eval_set_specs(MULTIDOMAIN, "test", source_lang="en", target_lang="de",
                           corpora=["bible", "software", "dictionary"])
    for name, test_set in load_corpora(specs, tokenizer, splits=("test",))["test"].items():
        write_hypotheses(tmp_path / "refs", name, test_set["target_text"][:SENTENCES])
    results = run_cli(*cli_args(model_dir, tmp_path / "r", "--compare", tmp_path / "refs",
                                "--significance_test", test, "--significance_samples", "200"))
    for metrics in results["significance"]["corpora"].values():
        for metric in ("bleu", "chrf"):
            assert metrics[metric]["baseline"] == pytest.approx(100.0)
            assert metrics[metric]["p_value"] < 0.05 and metrics[metric]["significant"] is True


def test_paired_significance_is_seeded_and_checked():
    references = ["the cat sat on the mat", "a dog ran home quickly", "it is raining today",
                  "we like green apples"] * 4
    system = ["the cat sat on a mat", "a dog ran home", "it rains today", "we like green apples"] * 4
    baseline = ["a cat sat on the mat", "the dog ran home quickly", "it is raining", "we like apples"] * 4
    first, signatures = paired_significance(system, baseline, references, n_samples=300, seed=7)
    again, _ = paired_significance(system, baseline, references, n_samples=300, seed=7)
    assert first == again and "seed:7" in signatures["bleu"]
    assert 0.0 < first["bleu"]["p_value"] <= 1.0
    ar, ar_signatures = paired_significance(system, baseline, references, test="ar", n_samples=300, seed=7)
    assert ar == paired_significance(system, baseline, references, test="ar", n_samples=300, seed=7)[0]
    assert "ar:300" in ar_signatures["chrf"]
    with pytest.raises(ValueError, match="positive"):
        paired_significance(system, baseline, references, seed=0)
    with pytest.raises(ValueError, match="one hypothesis per reference"):
        paired_significance(system[:-1], baseline, references)
    with pytest.raises(ValueError, match="Unknown significance test"):
        paired_significance(system, baseline, references, test="t")


def test_uat_evaluate_scores_what_the_trainers_evaluation_scores(first_run, model_dir, tmp_path):
    """One evaluation path: uat-evaluate's numbers and hypotheses are those of UATTrainer.evaluate on the same
    model, test sets and generation settings (the trainer reads the sets the way uat-train does)."""
    results, out = first_run
    model, tokenizer = load_translation_model(str(model_dir))
    specs = eval_set_specs(MULTIDOMAIN, "test", source_lang="en", target_lang="de",
                           corpora=["bible", "software", "dictionary"])
    limit = source_length_limit(model, tokenizer, None)
    test_sets = load_corpora(specs, tokenizer, splits=("test",), max_source_length=limit, max_target_length=limit)
    test_sets = {name: ds.select(range(SENTENCES)) for name, ds in test_sets["test"].items()}
    args = UATConfig(output_dir=str(tmp_path / "trainer"), generation_num_beams=1, per_device_eval_batch_size=2,
                     use_cpu=True, report_to="none")
    trainer = UATTrainer(model, args, eval_corpora=test_sets, processing_class=tokenizer)
    metrics = trainer.evaluate(max_new_tokens=6)
    scores = {**results["scores"], **results["ood_scores"]}
    for name in test_sets:
        assert metrics[f"eval_{name}_bleu"] == pytest.approx(scores[name]["bleu"])
        assert metrics[f"eval_{name}_chrf"] == pytest.approx(scores[name]["chrf"])
        assert read_hypotheses(out / "hypotheses", name) == trainer.translate(name, max_new_tokens=6)[name].hypotheses
        # ... and the copy baseline beside them: the test set's own sources scored as the translation
        translation = trainer.translate(name, max_new_tokens=6)[name]
        spec = next(spec for spec in specs if spec.name == name)
        sources = [source.strip() for source in load_corpus_split(spec, "test")["source"]][:SENTENCES]
        expected = copy_metrics(sources, translation.references, translation.hypotheses)
        assert {key: scores[name][key] for key in expected} == pytest.approx(expected)


def test_test_set_specs_follow_the_direction_and_need_only_the_split(tmp_path, tokenizer):
    specs = eval_set_specs(BUNDLED_DIR / "multilingual-ddtp", "dev", direction="x2en")
    assert [(s.name, s.source_lang, s.target_lang) for s in specs] == [(n, n, "en") for n in ("cs", "de", "fr", "ko")]
    with gzip.open(tmp_path / "qed.test.jsonl.gz", "wt") as f:
        f.write(json.dumps({"translation": {"en": "Hello there.", "de": "Hallo."}}) + "\n")
    (spec,) = eval_set_specs(tmp_path, source_lang="en", target_lang="de")
    assert spec.name == "qed" and spec.train is None
    assert load_corpora([spec], tokenizer, splits=("test",))["test"]["qed"]["target_text"] == ["Hallo."]
    with pytest.raises(ValueError, match="no test file"):
        eval_set_specs(tmp_path, source_lang="en", target_lang="de", corpora=["ted"])


def test_errors_tell_the_user_what_to_do(first_run, model_dir, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        evaluate_main(cli_args(tmp_path / "no-such-model", tmp_path / "r"))
    assert exit_info.value.code == 2
    assert "neither a model directory" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        evaluate_main([str(model_dir), "--corpus_dir", "bundled:nope", "--source_lang", "en", "--target_lang", "de"])
    assert "available" in capsys.readouterr().err
    (tmp_path / "short").mkdir()
    (tmp_path / "short" / "bible.txt").write_text("only one line\n")
    with pytest.raises(ValueError, match="has 1 lines but the 'bible' test set has 5"):
        read_hypotheses(tmp_path / "short", "bible", expected=5)
    with pytest.raises(SystemExit):
        evaluate_main(cli_args(model_dir, tmp_path / "r", "--compare", str(tmp_path / "short")))
    assert "has 1 lines but the 'bible' test set has 5 sentences" in capsys.readouterr().err
    assert not (tmp_path / "r" / "hypotheses").exists()  # failed before translating anything
    with pytest.raises(FileNotFoundError, match="software.txt"):
        read_hypotheses(tmp_path / "short", "software")


@pytest.mark.parametrize(
    "argv, message",
    [
        # The argparse version's renamed flags are gone (a clean break), abbreviations are not guessed.
        (["--max-sentences", "5"], "unrecognized arguments: --max-sentences 5"),
        (["--num-beams", "2"], "unrecognized arguments: --num-beams 2"),
        (["--split", "dev"], "unrecognized arguments: --split dev"),
        (["--output", "x.json"], "unrecognized arguments: --output x.json"),
        (["--eval_split", "train"], "eval_split must be one of ['dev', 'test'], got 'train'"),  # as uat-train
        (["--generation_num_beams", "two"], "argument --generation_num_beams/--generation-num-beams: invalid int"),
        (["--max_eval_examples", "0"], "max_eval_examples must be a positive integer"),
        (["--alpha", "1.5"], "alpha must be in (0, 1)"),
        (["--model_name_or_path", "other"], "model_name_or_path given twice: 'MODEL' first"),
    ],
)
def test_bad_arguments_exit_2_naming_the_field(tmp_path, capsys, argv, message):
    with pytest.raises(SystemExit) as exit_info:
        evaluate_main(["MODEL", "--corpus_dir", str(tmp_path), "--source_lang", "en", "--target_lang", "de", *argv])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "uat-evaluate: error: " in err and message in err


def test_missing_model_or_corpus_dir_says_how_to_give_it(tmp_path, capsys):
    for argv, message in ((["--corpus_dir", str(tmp_path)], "model_name_or_path is missing"),
                          (["MODEL"], "corpus_dir or corpus_specs is missing")):  # uat-train's DataArguments
        with pytest.raises(SystemExit) as exit_info:
            evaluate_main(argv)
        assert exit_info.value.code == 2 and f"uat-evaluate: error: {message}" in capsys.readouterr().err


def test_a_uat_train_recipe_gives_the_test_sets_and_generation(model_dir, tmp_path):
    """--config takes corpus_dir, languages, corpora, generation settings ... of a uat-train recipe; the
    command line wins, and the recipe's training fields, model and output_dir are not used."""
    recipe = {
        "corpus_dir": "bundled:multidomain-en-de", "source_lang": "en", "target_lang": "de",
        "corpora": ["bible", "dictionary"], "generation_max_length": 5, "generation_num_beams": 1,
        "max_eval_examples": 2, "strategy": "multiuat", "learning_rate": "1e-3", "model_name_or_path": "small",
        "output_dir": str(tmp_path / "train-run"),
    }
    (tmp_path / "recipe.yaml").write_text(yaml.safe_dump(recipe))
    results = run_cli(model_dir, "--config", tmp_path / "recipe.yaml", "--corpora", "software",
                      "--max_eval_examples", str(SENTENCES), "--output_dir", tmp_path / "eval")
    assert results["model"] == str(model_dir) and list(results["scores"]) == ["software"]
    assert results["sentences"] == {"software": SENTENCES}
    assert results["generation"]["max_length"] == 5 and results["generation"]["num_beams"] == 1
    assert not (tmp_path / "train-run").exists()
    for name in ("software",):
        assert all(len(line.split()) <= 5 for line in read_hypotheses(tmp_path / "eval" / "hypotheses", name))
