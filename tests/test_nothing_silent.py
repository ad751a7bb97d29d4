"""Issue 34, "Nothing lost, nothing silent": inputs that used to escape ``output_dir``, train on NaN, stop early
without saying so, or take the last of two values -- each refused before training with one clear line, or
reported where the results are read.

Everything is real: the bundled corpora, tokenizers trained here, tiny models.
"""

from __future__ import annotations

import json
import re

import pytest
from test_cli_inputs import RUN, SPEC, error_of, run_cli

from uat_hf.data.corpora import BUNDLED_DIR, corpus_specs_from_directory
from uat_hf.evaluation.saved_runs import write_hypotheses
from uat_hf.utils.names import check_corpus_name

ESCAPING = "../../escaped_by_name"

# --- 1. corpus names are safe file names -------------------------------------------------------------------


@pytest.mark.parametrize("name", [ESCAPING, "..", ".", "a/b", "a\\b", "", "news corpus", None])
def test_an_unsafe_corpus_name_is_refused_naming_where_and_the_value(name):
    with pytest.raises(ValueError, match="corpus_specs\\[0\\] name: corpus name .* is not a safe file name"):
        check_corpus_name(name, "corpus_specs[0] name")


@pytest.mark.parametrize("name", ["news", "de", "it-parl_2.v1", "ökonomie"])
def test_safe_corpus_names_pass(name):
    assert check_corpus_name(name) == name


def test_write_hypotheses_never_writes_outside_its_folder(tmp_path):
    folder = tmp_path / "run" / "hypotheses"
    with pytest.raises(ValueError, match="escaped_by_name"):
        write_hypotheses(folder, ESCAPING, ["a"])
    assert not list(tmp_path.rglob("*escaped_by_name*"))


def test_a_corpus_spec_named_with_a_path_is_one_error_line_before_anything_is_written(tmp_path, capsys):
    train = tmp_path / "news.tsv"
    train.write_text("a house\tein Haus\n" * 20, encoding="utf-8")
    code, out, err = run_cli(tmp_path, capsys, corpus_specs=[{**SPEC, "name": ESCAPING, "train": str(train),
                                                             "test": str(train)}])
    assert error_of(code, err) == (
        f"corpus_specs[0] name: corpus name {ESCAPING!r} is not a safe file name; corpus names become file names "
        "(e.g. hypotheses/<name>.txt), so use only letters, digits, '.', '_' and '-' (no path separators, not '.' "
        "or '..')."
    )
    assert not (tmp_path / "out").exists()
    assert not list(tmp_path.parent.rglob("escaped_by_name*"))


def test_a_corpus_dir_file_name_that_is_not_a_safe_name_is_refused_naming_the_file(tmp_path):
    source = BUNDLED_DIR / "multilingual-ddtp" / "de.train.jsonl.gz"
    (tmp_path / "de news.train.jsonl.gz").write_bytes(source.read_bytes())
    with pytest.raises(ValueError, match=r"corpus_dir '.*', file 'de news.train.jsonl.gz': corpus name 'de news'"):
        corpus_specs_from_directory(tmp_path, "en", "de")


def test_uat_trainer_refuses_a_corpus_key_that_is_a_path(tmp_path, corpora, tokenizer, tiny_model):
    from uat_hf.training.uat_config import UATConfig
    from uat_hf.training.uat_trainer import UATTrainer

    args = UATConfig(output_dir=str(tmp_path / "out"), max_steps=1, report_to="none", use_cpu=True)
    train = {ESCAPING: corpora["train"]["bible"], "software": corpora["train"]["software"]}
    with pytest.raises(ValueError, match="UATTrainer training corpora: corpus name '../../escaped_by_name'"):
        UATTrainer(tiny_model, args, train_corpora=train, processing_class=tokenizer)


# --- 2. a non-finite loss stops training -------------------------------------------------------------------


def test_a_nan_loss_stops_uat_train_naming_the_step_and_saves_no_model(tmp_path, capsys):
    code, out, err = run_cli(tmp_path, capsys, ["--learning_rate", "1e30", "--max_grad_norm", "0", "--max_steps",
                                                "30", "--logging_steps", "1"])
    assert code == 1, err[-2000:]
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith("uat-train: error: ")]
    assert len(lines) == 1, err[-2000:]
    assert re.fullmatch(r"uat-train: error: Training stopped at step \d+ of 30: the (training loss|gradient norm) "
                        r"is (nan|inf|-inf) \(learning_rate 1e\+30, max_grad_norm 0\); .* allow_nonfinite_loss=True "
                        r"trains on regardless\.", lines[0]), lines[0]
    out_dir = tmp_path / "out"
    assert not (out_dir / "model.safetensors").exists()
    assert not (out_dir / "eval_results.json").exists()


def test_allow_nonfinite_loss_trains_on(tmp_path, capsys):
    code, out, err = run_cli(tmp_path, capsys, ["--learning_rate", "1e30", "--max_grad_norm", "0", "--max_steps",
                                                "4", "--allow_nonfinite_loss"])
    assert code == 0, err[-2000:]
    assert (tmp_path / "out" / "eval_results.json").exists()
    # It trained on through non-finite values (the Trainer's log filters a nan loss out, the weights cannot hide it)
    from transformers import AutoModelForSeq2SeqLM

    model = AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "out")
    assert not all(bool(parameter.isfinite().all()) for parameter in model.parameters())


def test_a_nan_loss_stops_uat_trainer_before_the_update(tmp_path, corpora, tokenizer, tiny_model):
    from uat_hf.training.nonfinite import NonFiniteLossError
    from uat_hf.training.uat_config import UATConfig
    from uat_hf.training.uat_trainer import UATTrainer

    args = UATConfig(output_dir=str(tmp_path / "out"), max_steps=20, learning_rate=1e30, max_grad_norm=0,
                     per_device_train_batch_size=4, report_to="none", use_cpu=True, save_strategy="steps",
                     save_steps=1, disable_tqdm=True)
    trainer = UATTrainer(tiny_model, args, train_corpora={n: corpora["train"][n] for n in ("bible", "software")},
                         processing_class=tokenizer)
    with pytest.raises(NonFiniteLossError, match=r"Training stopped at step (\d+) of 20") as raised:
        trainer.train()
    step = int(re.search(r"step (\d+)", str(raised.value)).group(1))
    assert trainer.state.global_step == step - 1  # the non-finite step's update was never applied
    assert not (tmp_path / "out" / f"checkpoint-{step}").exists()


# --- 3. a run stopped by its time budget says so -----------------------------------------------------------


def test_a_run_stopped_by_its_time_budget_says_so_in_the_table_results_and_model_card(tmp_path, capsys):
    code, out, err = run_cli(tmp_path, capsys, ["--max_train_minutes", "1e-9", "--max_steps", "4"])
    assert code == 0, err[-2000:]
    note = ("STOPPED EARLY: the time budget (max_train_minutes 1e-09) ended training after 1 of 4 steps, so these "
            "scores are of a shorter run than the recipe's, not comparable with a full run's (the README's numbers "
            "for recipes/demo.yaml are of a full run).")
    assert f"test results (per corpus) -- {note}" in out
    results = json.loads((tmp_path / "out" / "eval_results.json").read_text())
    assert (results["stopped_early"], results["steps_done"], results["steps_planned"]) == (True, 1, 4)
    assert f"**{note}**" in (tmp_path / "out" / "README.md").read_text()


def test_a_run_within_its_time_budget_reports_it_finished(tmp_path, capsys):
    code, out, err = run_cli(tmp_path, capsys, ["--max_train_minutes", "30", "--max_steps", "2"])
    assert code == 0, err[-2000:]
    assert "test results (per corpus):" in out and "STOPPED EARLY" not in out
    results = json.loads((tmp_path / "out" / "eval_results.json").read_text())
    assert (results["stopped_early"], results["steps_done"], results["steps_planned"]) == (False, 2, 2)
    assert "STOPPED EARLY" not in (tmp_path / "out" / "README.md").read_text()


# --- 4. recipes: a key given twice, an unknown corpus, a list for one folder ----------------------------------


def test_a_key_given_twice_in_a_recipe_is_refused_naming_the_key_and_the_file(tmp_path, capsys):
    from uat_hf.cli import train as cli

    recipe = tmp_path / "twice.yaml"
    text = "".join(f"{key}: {json.dumps(value)}\n" for key, value in RUN.items())
    recipe.write_text(text + f"output_dir: {json.dumps(str(tmp_path / 'out'))}\nlearning_rate: 1.0e-4\n",
                      encoding="utf-8")
    code = cli.main(["--config", str(recipe)])
    lines = list(RUN).index("learning_rate") + 1, len(RUN) + 2
    assert error_of(code, capsys.readouterr().err) == (
        f"{recipe}: key 'learning_rate' is given twice (lines {lines[0]} and {lines[1]}); YAML would silently keep "
        "the last value. Keep one of them."
    )
    assert not (tmp_path / "out").exists()


def test_a_key_given_twice_inside_a_corpus_spec_is_refused_too():
    from uat_hf.cli.recipe import Recipe

    with pytest.raises(ValueError, match=r"r.yaml: key 'train' is given twice \(lines 2 and 3\)"):
        Recipe.from_yaml("corpus_specs:\n- {name: a, train: x.tsv,\n   train: y.tsv}\n", source="r.yaml")
    merged = Recipe.from_yaml("base: &b {seed: 1}\nrun:\n  <<: *b\n  seed: 2\n")  # an override of a merge is YAML's
    assert merged["run"] == {"seed": 2}


def test_corpus_dir_given_as_a_list_is_one_error_line(tmp_path, capsys):
    code, out, err = run_cli(tmp_path, capsys, corpus_dir=["bundled:multilingual-ddtp", "bundled:multidomain-en-de"])
    assert error_of(code, err) == (
        "corpus_dir must be a single string, got list ['bundled:multilingual-ddtp', 'bundled:multidomain-en-de']. "
        "For several corpus folders, list each corpus in corpus_specs (name, source_lang, target_lang and its "
        "train/dev/test files) instead."
    )


def test_corpus_probabilities_naming_an_unknown_corpus_names_it_and_the_known_ones(tmp_path, capsys):
    code, out, err = run_cli(tmp_path, capsys, ["--strategy", "fixed", "--corpus_probabilities",
                                                '{"de": 0.5, "frr": 0.5}'])
    assert error_of(code, err) == ("corpus_probabilities names corpus 'frr', which is not a training corpus "
                                   "(training corpora: ['de', 'fr']).")


# --- 5. uat-evaluate reads the run it evaluates -------------------------------------------------------------


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A finished 2-step uat-train run (max_eval_examples 2): model, recipe.yaml and hypotheses/."""
    from test_cli_inputs import write_recipe

    from uat_hf.cli import train as cli

    folder = tmp_path_factory.mktemp("run")
    out = folder / "out"
    assert cli.main(["--config", str(write_recipe(folder, {**RUN, "output_dir": str(out)}))]) == 0
    return out


def test_uat_evaluate_run_reads_the_runs_recipe_by_itself(run_dir, tmp_path):
    from uat_hf.cli import evaluate

    evaluate.main([str(run_dir), "--max_eval_examples", "2", "--output_dir", str(tmp_path / "eval"),
                   "--torch_num_threads", "1"])
    results = json.loads((tmp_path / "eval" / "results.json").read_text())
    saved = json.loads((run_dir / "eval_results.json").read_text())
    assert set(results["scores"]) == {"de", "fr"}
    for name, scores in results["scores"].items():  # the run's test sets, tags and generation settings
        assert scores["bleu"] == pytest.approx(saved[f"eval_{name}_bleu"]), name


def test_uat_evaluate_compare_scores_the_sentences_of_the_baselines_hypotheses_and_prints_delta_and_mean(
        run_dir, tmp_path, capsys):
    from uat_hf.cli import evaluate

    for argv in ([str(run_dir)], [str(run_dir), "--config", str(run_dir)]):  # the study's spelling too
        evaluate.main([*argv, "--output_dir", str(tmp_path / "eval"), "--compare", str(run_dir / "hypotheses")])
        results = json.loads((tmp_path / "eval" / "results.json").read_text())
        assert results["sentences"] == {"de": 2, "fr": 2}  # as many as uat-train's hypotheses (max_eval_examples)
        significance = results["significance"]
        assert significance["corpora"]["de"]["bleu"]["delta"] == 0.0
        assert significance["mean"]["bleu"]["delta"] == 0.0
        table = capsys.readouterr().out.split("paired bootstrap test against", 1)[1].splitlines()
        assert table[1].split() == ["corpus", "BLEU", "base", "Δ", "p", "chrF", "base", "Δ", "p"]
        assert table[-1].split()[0] == "mean" and table[-1].split()[3] == "+0.00"


# --- 6. no warnings for what is not wrong -------------------------------------------------------------------


def test_a_causal_model_translates_without_the_max_length_warning_and_no_pin_memory_warning(tmp_path, tokenizer,
                                                                                            capfd):
    import warnings

    from test_causal import causal_model

    from conftest import multidomain_specs
    from uat_hf.data.causal_data import CausalPrompt
    from uat_hf.data.corpora import load_corpora
    from uat_hf.training.uat_config import UATConfig
    from uat_hf.training.uat_trainer import UATTrainer

    data = load_corpora(multidomain_specs(20), tokenizer, splits=("dev",), prompt=CausalPrompt(),
                        max_source_length=24, max_target_length=24)["dev"]
    dev = {name: data[name].select(range(4)) for name in ("bible", "software")}
    model = causal_model(tokenizer)
    args = UATConfig(output_dir=str(tmp_path / "out"), report_to=[], disable_tqdm=True, generation_max_length=6,
                     generation_num_beams=1, per_device_eval_batch_size=2)  # no use_cpu: pin_memory as a user gets it
    trainer = UATTrainer(model, args, eval_corpora=dev, processing_class=tokenizer)
    capfd.readouterr()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.translate(metric_key_prefix="eval")
    assert "Both `max_new_tokens`" not in capfd.readouterr().err
    assert model.generation_config.max_length is None
    assert not [w for w in caught if "pin_memory" in str(w.message)]


def test_a_logged_gradient_norm_that_is_not_finite_stops_training_too(tmp_path):
    from transformers import TrainerControl, TrainerState

    from uat_hf.training.nonfinite import NonFiniteLossCallback, NonFiniteLossError
    from uat_hf.training.uat_config import UATConfig

    args = UATConfig(output_dir=str(tmp_path), max_steps=10, max_grad_norm=1.0, report_to="none", use_cpu=True)
    state = TrainerState(global_step=7)
    callback = NonFiniteLossCallback()
    callback.on_log(args, state, TrainerControl(), logs={"loss": 2.5, "grad_norm": 1.25})  # finite: nothing
    with pytest.raises(NonFiniteLossError, match=r"^Training stopped at step 7 of 10: the gradient norm is inf "):
        callback.on_log(args, state, TrainerControl(), logs={"loss": 2.5, "grad_norm": float("inf")})
