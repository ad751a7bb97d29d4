"""Recipes: YAML round trip through a local directory, the Hub code path, and every shipped recipe parses."""

from __future__ import annotations

import itertools
import math
import shlex
from pathlib import Path

import pytest

from uat_hf.cli import recipe as recipe_module
from uat_hf.cli.arguments import DataArguments, ModelArguments
from uat_hf.cli.parsing import recipe_to_dataclasses
from uat_hf.cli.recipe import MODEL_CARD_FILE, RECIPE_FILE, Recipe
from uat_hf.cli.run_arguments import RunArguments
from uat_hf.cli.train import parse_arguments
from uat_hf.data.corpus_specs import corpus_specs_from_directory, resolve_bundled
from uat_hf.training.uat_config import UATConfig

RECIPES_DIR = Path(__file__).resolve().parents[1] / "recipes"
SHIPPED = sorted(RECIPES_DIR.glob("*.yaml"))

FIELDS = {
    "output_dir": "runs/x",
    "strategy": "multiuat",
    "measure": "comev",
    "mc_samples": 7,
    "learning_rate": "1e-3",  # YAML 1.1 reads this as a string; it must still become a float
    "corpus_dir": "bundled:multidomain-en-de",
    "source_lang": "en",
    "target_lang": "de",
    "corpora": ["bible", "software"],
    "model_name_or_path": "tiny",
    "model_overrides": {"encoder_layers": 2},
}


def test_save_and_load_round_trip_through_a_local_directory(tmp_path):
    recipe = Recipe(FIELDS)
    path = recipe.save_pretrained(tmp_path / "repo", results={"eval_bible_bleu": 3.5, "eval_bible_chrf": 20.0})
    assert path == tmp_path / "repo" / RECIPE_FILE
    card = (tmp_path / "repo" / MODEL_CARD_FILE).read_text()
    assert "multiuat" in card and "| bible | 3.50 | 20.00 |" in card

    from_dir = Recipe.from_pretrained(tmp_path / "repo")
    from_file = Recipe.from_pretrained(str(path))
    assert from_dir == recipe == from_file
    assert list(from_dir) == list(FIELDS)  # order kept

    training, data, model, run = recipe_to_dataclasses(from_dir)
    assert isinstance(training, UATConfig) and training.strategy == "multiuat" and training.mc_samples == 7
    assert training.learning_rate == pytest.approx(1e-3)
    assert data.corpora == ["bible", "software"] and data.corpus_dir.endswith("multidomain-en-de")
    assert model.model_name_or_path == "tiny" and model.config_overrides() == {"encoder_layers": 2}
    assert run.max_train_minutes is None


def test_model_card_carries_the_corpus_health_warnings(tmp_path):
    warning = "Corpus 'software' looks broken: at step 780 ..."
    results = {"eval_software_bleu": 2.0, "eval_software_chrf": 10.0, "corpus_health": {"warnings": [warning]}}
    Recipe(FIELDS).save_pretrained(tmp_path, results=results)
    text = (tmp_path / MODEL_CARD_FILE).read_text()
    assert f"## Results\n\n**{warning}**" in text


def test_model_card_has_hub_metadata_and_the_means_last(tmp_path):
    from huggingface_hub import ModelCard

    results = {"eval_software_bleu": 2.0, "eval_software_chrf": 10.0, "eval_bible_bleu": 3.5, "eval_bible_chrf": 20.0,
               "eval_mean_bleu": 2.75, "eval_mean_chrf": 15.0, "eval_kde4_bleu": 1.0, "eval_kde4_chrf": 5.0,
               "eval_loss": 9.9}
    kde4 = {"name": "kde4", "source_lang": "en", "target_lang": "de", "path": "Helsinki-NLP/kde4",
            "hub_config": "de-en"}
    fields = {**FIELDS, "model_name_or_path": "Helsinki-NLP/opus-mt-en-de", "eval_corpus_specs": [kde4]}
    Recipe(fields).save_pretrained(tmp_path, results=results)
    card = ModelCard.load(tmp_path / MODEL_CARD_FILE)
    data = card.data
    assert data.language == ["en", "de"] and data.metrics == ["bleu", "chrf"]
    assert data.datasets == ["Helsinki-NLP/kde4"] and data.base_model == "Helsinki-NLP/opus-mt-en-de"
    assert data.library_name == "transformers" and data.pipeline_tag == "translation" and "multiuat" in data.tags
    scores = {(r.dataset_name, r.metric_type): r.metric_value for r in data.eval_results}
    assert scores == {("bible", "bleu"): 3.5, ("bible", "chrf"): 20.0, ("kde4", "bleu"): 1.0, ("kde4", "chrf"): 5.0,
                      ("software", "bleu"): 2.0, ("software", "chrf"): 10.0}
    kde4 = next(r for r in data.eval_results if r.dataset_name == "kde4")
    assert (kde4.dataset_type, kde4.dataset_config, kde4.dataset_split) == ("Helsinki-NLP/kde4", "de-en", "test")
    rows = [line.split(" | ")[0].strip("| ") for line in card.text.splitlines() if line.startswith("| ")]
    assert rows == ["corpus", "bible", "kde4", "software", "mean"]
    import torch
    import transformers

    from uat_hf import __version__

    versions = card.text.split("### Framework versions\n\n")[1].split("\n\n")[0].splitlines()
    assert versions[:3] == [f"- uat-hf {__version__}", f"- Transformers {transformers.__version__}",
                            f"- PyTorch {torch.__version__}"]


def test_hub_repo_id_goes_through_hf_hub_download(tmp_path, monkeypatch):
    stored = Recipe(FIELDS).save_pretrained(tmp_path / "cache", model_card=False)
    calls = []

    def fake_download(**kwargs):
        calls.append(kwargs)
        return str(stored)

    monkeypatch.setattr(recipe_module, "hf_hub_download", fake_download)
    recipe = Recipe.from_pretrained("some-org/uat-recipe", revision="v1")
    assert recipe == Recipe(FIELDS)
    assert calls[0]["repo_id"] == "some-org/uat-recipe" and calls[0]["filename"] == RECIPE_FILE
    assert calls[0]["revision"] == "v1"
    assert recipe.source == "some-org/uat-recipe/recipe.yaml@v1"


def test_local_paths_never_reach_the_hub(tmp_path, monkeypatch):
    monkeypatch.setattr(recipe_module, "hf_hub_download", lambda **kw: pytest.fail("no Hub call for local paths"))
    with pytest.raises(FileNotFoundError, match="has no recipe.yaml"):
        Recipe.from_pretrained(tmp_path)
    with pytest.raises(FileNotFoundError, match="not found"):
        Recipe.from_pretrained(str(tmp_path / "missing.yaml"))


@pytest.mark.parametrize(
    "text, message",
    [
        ("- a\n- b\n", "must be a YAML mapping"),
        ("key: [unclosed\n", "not valid YAML"),
        ("x: !!python/object/apply:os.system ['true']\n", "not valid YAML"),  # safe_load only
    ],
)
def test_bad_yaml_is_rejected(text, message):
    with pytest.raises(ValueError, match=message):
        Recipe.from_yaml(text)


def test_unknown_field_is_named_with_a_suggestion():
    with pytest.raises(ValueError, match=r"'learning_rat' \(did you mean 'learning_rate'\?\)"):
        recipe_to_dataclasses(Recipe({"learning_rat": 1e-3, "corpus_dir": "bundled:multidomain-en-de"}))


def test_overrides_apply_on_top_of_the_recipe():
    overrides = ["--strategy", "uniform", "--corpora", "dictionary"]
    training, data, model, _ = recipe_to_dataclasses(Recipe(FIELDS), overrides)
    assert training.strategy == "uniform" and data.corpora == ["dictionary"]
    assert training.mc_samples == 7  # untouched fields keep the recipe's values


@pytest.mark.parametrize("path", SHIPPED, ids=[p.name for p in SHIPPED])
def test_every_shipped_recipe_parses_into_the_dataclasses(path):
    training, data, model, run = recipe_to_dataclasses(Recipe.from_pretrained(path))
    assert isinstance(training, UATConfig) and isinstance(data, DataArguments)
    assert isinstance(model, ModelArguments) and isinstance(run, RunArguments)
    assert (data.corpus_dir is None) != (data.corpus_specs is None)
    assert training.output_dir


def test_the_expected_recipes_are_shipped():
    names = {p.name for p in SHIPPED}
    assert {
        "demo.yaml", "offline_multidomain.yaml", "offline_multilingual_m2o.yaml", "ted8_related_m2o.yaml",
        "ted8_related_o2m.yaml", "ted8_diverse_m2o.yaml", "ted8_diverse_o2m.yaml",
        "multidomain_wmt14_tanzil_emea_kde4.yaml",
    } <= names


def test_paper_recipes_carry_the_paper_hyperparameters():
    for name, lr, interval, preset, dropout in [
        ("ted8_related_m2o.yaml", 5e-4, 2000, "transformer_iwslt_de_en", 0.3),
        ("ted8_diverse_o2m.yaml", 5e-4, 2000, "transformer_iwslt_de_en", 0.3),
        ("multidomain_wmt14_tanzil_emea_kde4.yaml", 7e-4, 1000, "transformer_base", 0.1),
    ]:
        training, data, model, _ = recipe_to_dataclasses(Recipe.from_pretrained(RECIPES_DIR / name))
        assert (training.learning_rate, training.update_every, training.mc_samples) == (lr, interval, 30)
        assert (training.adam_beta1, training.adam_beta2, training.warmup_steps) == (0.9, 0.98, 4000)
        assert str(training.lr_scheduler_type).endswith(("inverse_sqrt", "INVERSE_SQRT"))
        assert training.label_smoothing_factor == 0.1 and training.scorer_lr == 1e-4
        assert (model.model_name_or_path, model.dropout) == (preset, dropout)
    recipe = Recipe.from_pretrained(RECIPES_DIR / "multidomain_wmt14_tanzil_emea_kde4.yaml")
    _, data, _, _ = recipe_to_dataclasses(recipe)
    assert [s["name"] for s in data.corpus_specs] == ["wmt14", "tanzil", "emea", "kde4"]
    assert [s["name"] for s in data.eval_corpus_specs] == ["qed", "ted"]
    assert data.corpus_specs[0]["path"] == "wmt/wmt14" and data.corpus_specs[0]["revision"] == "refs/convert/parquet"


# The prior each strategy means in the paper (τ of q_τ ∝ size^(1/τ)); the dynamic ones start from proportional.
PAPER_PRIOR_TEMPERATURE = {
    "proportional": 1.0, "temperature": 5.0, "uniform": math.inf, "multiuat": 1.0, "multidds-s": 1.0
}


def _documented_commands(path: Path) -> list[list[str]]:
    """The ``uat-train --config <this recipe> ...`` command lines written in a recipe's header, as argv."""
    header = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        header.append(line.lstrip("# ").split("  #")[0].strip())
    text = "\n".join(header).replace("\\\n", " ")  # join shell continuation lines
    commands = []
    for line in text.splitlines():
        line = line.removeprefix("time ")
        if line.startswith("uat-train --config"):
            argv = shlex.split(line)[1:]
            argv[1] = str(RECIPES_DIR / Path(argv[1]).name)
            commands.append(argv)
    return commands


@pytest.mark.parametrize("path", SHIPPED, ids=[p.name for p in SHIPPED])
def test_every_documented_strategy_override_trains_the_papers_prior(path):
    """A recipe written for MultiUAT, switched to a baseline on the command line as its header says, trains that
    baseline's own prior (the temperature baseline at τ = 5, not at the recipe's τ)."""
    commands = _documented_commands(path)
    assert commands, f"{path.name} documents no uat-train command"
    overrides = [[*commands[0], "--strategy", strategy] for strategy in PAPER_PRIOR_TEMPERATURE]
    for argv in commands + overrides:
        training, *_ = parse_arguments(argv)
        assert training.corpus_probabilities is None
        assert training.effective_prior_temperature == PAPER_PRIOR_TEMPERATURE[training.strategy], argv


def test_the_paper_recipes_document_the_temperature_baseline():
    for name in ("multidomain_wmt14_tanzil_emea_kde4.yaml", "ted8_related_m2o.yaml", "ted8_related_o2m.yaml",
                 "ted8_diverse_m2o.yaml", "ted8_diverse_o2m.yaml"):
        commands = _documented_commands(RECIPES_DIR / name)
        strategies = {argv[argv.index("--strategy") + 1] for argv in commands if "--strategy" in argv}
        assert "temperature" in strategies, name


def test_push_to_hub_uploads_the_recipe_that_from_pretrained_reads_back(tmp_path, monkeypatch):
    """The Hub is out of reach here: only HfApi's two network calls are replaced, by a local folder that stands
    for the repository; everything else is the code path a real push takes."""
    from huggingface_hub import HfApi

    repo = tmp_path / "hub" / "org" / "recipe"
    calls = []

    def create_repo(self, repo_id, **kwargs):
        calls.append(("create_repo", repo_id, kwargs))
        repo.mkdir(parents=True, exist_ok=True)

    def upload_file(self, *, path_or_fileobj, path_in_repo, repo_id, **kwargs):
        calls.append(("upload_file", repo_id, path_in_repo))
        (repo / path_in_repo).write_bytes(path_or_fileobj)
        return f"https://huggingface.co/{repo_id}/blob/main/{path_in_repo}"

    monkeypatch.setattr(HfApi, "create_repo", create_repo)
    monkeypatch.setattr(HfApi, "upload_file", upload_file)
    recipe = Recipe(FIELDS, source="local")
    url = recipe.push_to_hub("org/recipe", private=True)
    assert url.endswith(f"org/recipe/blob/main/{RECIPE_FILE}")
    assert calls == [("create_repo", "org/recipe", {"private": True, "repo_type": None, "exist_ok": True}),
                     ("upload_file", "org/recipe", RECIPE_FILE)]
    assert Recipe.from_pretrained(repo) == recipe


def test_dead_helpers_are_gone():
    """Nothing used Recipe.updated, CorpusBatchSampler.corpus_of or the STATE_FILE alias of the callback module."""
    from uat_hf.sampling.sampler import CorpusBatchSampler
    from uat_hf.training import callback

    assert not hasattr(Recipe, "updated")
    assert not hasattr(CorpusBatchSampler, "corpus_of")
    assert not hasattr(callback, "STATE_FILE")


@pytest.mark.parametrize("path", SHIPPED, ids=[p.name for p in SHIPPED])
def test_every_shipped_recipe_names_data_that_exists(path):
    """A recipe's corpus_dir resolves (``bundled:`` included) to every corpus it names, with the dev split and the
    split it is evaluated on. The Qwen LoRA recipe cannot run here (its model is on the Hub): this is what can be
    checked of it offline, so a user fails on nothing but the download."""
    _, data, _, _ = recipe_to_dataclasses(Recipe.from_pretrained(path))
    if data.corpus_dir is None:
        pytest.skip("Hub corpus specs, checked by test_paper_recipes_carry_the_paper_hyperparameters")
    specs = corpus_specs_from_directory(resolve_bundled(data.corpus_dir), data.source_lang, data.target_lang,
                                        corpora=data.corpora, direction=data.direction)
    assert specs and (data.corpora is None or [s.name for s in specs] == list(data.corpora))
    for spec in specs:
        for split in ("train", "dev", data.eval_split):
            assert getattr(spec, split) and Path(getattr(spec, split)).is_file(), (path.name, spec.name, split)


def test_the_qwen_lora_recipe_documents_commands_that_parse():
    """Its header's uat-train and uat-evaluate commands parse, and uat-evaluate reads the model uat-train writes."""
    from uat_hf.cli.evaluate import parse_arguments as parse_evaluate

    path = RECIPES_DIR / "finetune_qwen2.5_0.5b_lora_multilingual.yaml"
    (train_argv,) = _documented_commands(path)
    training, _, model, *_ = parse_arguments(train_argv)
    assert model.model_name_or_path == "Qwen/Qwen2.5-0.5B-Instruct" and model.lora["lora_dropout"] > 0
    lines = itertools.takewhile(lambda line: line.startswith("#"), path.read_text(encoding="utf-8").splitlines())
    header = " ".join(line.lstrip("# ").strip() for line in lines).replace("\\ ", "")
    evaluate_argv = shlex.split(header.split("uat-evaluate", 1)[1])
    data, arguments = parse_evaluate(evaluate_argv)
    assert Path(arguments.model_name_or_path) == Path(training.output_dir)
    assert Path(resolve_bundled(data.corpus_dir)).is_dir() and data.corpora == ["fr", "de", "cs", "ko"]


def test_an_outside_strategys_module_path_is_no_hub_tag(tmp_path):
    from huggingface_hub import ModelCard

    Recipe({**FIELDS, "strategy": "my_package.mix:DevLossShare"}).save_pretrained(tmp_path, results={})
    data = ModelCard.load(tmp_path / MODEL_CARD_FILE).data
    assert data.tags == ["translation", "uat-hf"]
