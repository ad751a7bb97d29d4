"""uat-evaluate: a saved tiny model translates bundled test sets; scores, files and paired significance."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
import torch

from conftest import MULTIDOMAIN
from uat_hf.cli.evaluate import main as evaluate_main
from uat_hf.corpora import BUNDLED_DIR
from uat_hf.evaluation import (
    load_eval_sets,
    load_translation_model,
    paired_significance,
    read_hypotheses,
    eval_set_specs,
    translate,
    write_hypotheses,
)
from uat_hf.metrics import macro_average
from uat_hf.presets import build_model

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
    """uat-evaluate with ``argv``; returns the JSON it wrote to --output."""
    evaluate_main([str(a) for a in argv])
    return json.loads(Path(argv[argv.index("--output") + 1]).read_text())


def cli_args(model_dir, output, *extra):
    return [
        str(model_dir), "--corpus-dir", "bundled:multidomain-en-de", "--source-lang", "en", "--target-lang", "de",
        "--corpora", "bible", "software", "--ood-corpora", "dictionary", "--max-sentences", str(SENTENCES),
        "--max-new-tokens", "6", "--num-beams", "1", "--output", str(output), *extra,
    ]


@pytest.fixture(scope="module")
def first_run(model_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("eval") / "results.json"
    return run_cli(*cli_args(model_dir, out)), out


def test_cli_writes_the_table_json_and_hypotheses(first_run, model_dir, tmp_path, capsys):
    _, first_output = first_run
    output = tmp_path / "eval" / "results.json"
    results = run_cli(*cli_args(model_dir, output, "--hypotheses-dir", str(tmp_path / "hyps")))
    printed = capsys.readouterr().out
    assert "mean" in printed and "out-of-domain" in printed and "BLEU: nrefs:1" in printed
    assert list(results["scores"]) == ["bible", "software"] and list(results["ood_scores"]) == ["dictionary"]
    assert results["mean"]["chrf"] == pytest.approx(macro_average(results["scores"], "chrf"))
    assert results["ood_mean"] == results["ood_scores"]["dictionary"]
    assert "tok:13a" in results["signatures"]["bleu"] and "nc:6" in results["signatures"]["chrf"]
    assert results["generation"]["num_beams"] == 1 and results["generation"]["max_new_tokens"] == 6
    assert results["sentences"] == {"bible": SENTENCES, "software": SENTENCES, "dictionary": SENTENCES}
    for name in ("bible", "software", "dictionary"):
        lines = (tmp_path / "hyps" / f"{name}.txt").read_text().splitlines()
        assert len(lines) == SENTENCES
        # Greedy decoding is deterministic: the same model gives the same outputs run after run.
        assert lines == read_hypotheses(first_output.parent / "hypotheses", name)
    assert "significance" not in results


def test_system_against_itself_is_not_significant(first_run, model_dir, tmp_path):
    _, first_output = first_run
    results = run_cli(*cli_args(model_dir, tmp_path / "r.json", "--compare", first_output.parent / "hypotheses",
                                "--significance-samples", "200"))
    significance = results["significance"]
    assert significance["test"] == "bs" and "bs:200|seed:12345" in significance["signatures"]["bleu"]
    for name in ("bible", "software", "dictionary"):
        for metric in ("bleu", "chrf"):
            entry = significance["corpora"][name][metric]
            assert entry["p_value"] == 1.0 and entry["significant"] is False
            assert entry["system"] == entry["baseline"]


@pytest.mark.parametrize("test", ["bs", "ar"])
def test_system_against_the_references_is_significant(first_run, model_dir, tmp_path, test):
    specs = eval_set_specs(MULTIDOMAIN, "test", source_lang="en", target_lang="de", corpora=["bible", "software", "dictionary"])
    for name, eval_set in load_eval_sets(specs, max_sentences=SENTENCES).items():
        write_hypotheses(tmp_path / "refs", name, eval_set.references)
    results = run_cli(*cli_args(model_dir, tmp_path / "r.json", "--compare", tmp_path / "refs",
                                "--significance-test", test, "--significance-samples", "200"))
    for name, metrics in results["significance"]["corpora"].items():
        for metric in ("bleu", "chrf"):
            assert metrics[metric]["baseline"] == pytest.approx(100.0)
            assert metrics[metric]["p_value"] < 0.05 and metrics[metric]["significant"] is True


def test_paired_significance_is_seeded_and_checked():
    references = ["the cat sat on the mat", "a dog ran home quickly", "it is raining today", "we like green apples"] * 4
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


def test_translate_keeps_the_order_of_the_sources(model_dir):
    model, tokenizer = load_translation_model(str(model_dir), device="cpu")
    sources = ["Hello.", "This is a much longer sentence about the software package.", "A short one.", "In the beginning"]
    batched = translate(model, tokenizer, sources, batch_size=3, num_beams=1, max_new_tokens=5)
    one_by_one = [translate(model, tokenizer, [s], batch_size=1, num_beams=1, max_new_tokens=5)[0] for s in sources]
    assert batched == one_by_one


def test_test_set_specs_follow_the_direction_and_need_only_the_split(tmp_path):
    specs = eval_set_specs(BUNDLED_DIR / "multilingual-ddtp", "dev", direction="x2en")
    assert [(s.name, s.source_lang, s.target_lang) for s in specs] == [(n, n, "en") for n in ("cs", "de", "fr", "ko")]
    with gzip.open(tmp_path / "qed.test.jsonl.gz", "wt") as f:
        f.write(json.dumps({"translation": {"en": "Hello there.", "de": "Hallo."}}) + "\n")
    (spec,) = eval_set_specs(tmp_path, source_lang="en", target_lang="de")
    assert spec.name == "qed" and spec.train is None
    assert load_eval_sets([spec])["qed"].references == ["Hallo."]
    with pytest.raises(ValueError, match="no test file"):
        eval_set_specs(tmp_path, source_lang="en", target_lang="de", corpora=["ted"])


def test_errors_tell_the_user_what_to_do(first_run, model_dir, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        evaluate_main(cli_args(tmp_path / "no-such-model", tmp_path / "r.json"))
    assert exit_info.value.code == 2
    assert "neither a model directory" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        evaluate_main([str(model_dir), "--corpus-dir", "bundled:nope", "--source-lang", "en", "--target-lang", "de"])
    assert "available" in capsys.readouterr().err
    (tmp_path / "short").mkdir()
    (tmp_path / "short" / "bible.txt").write_text("only one line\n")
    with pytest.raises(ValueError, match="has 1 lines but the 'bible' test set has 5"):
        read_hypotheses(tmp_path / "short", "bible", expected=5)
    with pytest.raises(SystemExit):
        evaluate_main(cli_args(model_dir, tmp_path / "r.json", "--compare", str(tmp_path / "short")))
    assert "has 1 lines but the 'bible' test set has 5 sentences" in capsys.readouterr().err
    assert not (tmp_path / "hypotheses").exists()  # failed before translating anything
    with pytest.raises(FileNotFoundError, match="software.txt"):
        read_hypotheses(tmp_path / "short", "software")
