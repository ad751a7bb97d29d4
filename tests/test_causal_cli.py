"""``uat-train`` / ``uat-evaluate`` with a decoder-only model: detected from its config, same numbers."""

from __future__ import annotations

import json

import pytest
import yaml
from transformers import AutoConfig

from uat_hf.cli import train as cli
from uat_hf.cli.evaluate import main as evaluate_main
from uat_hf.data.causal_data import PROMPT_FILE
from uat_hf.models.causal_presets import is_causal_checkpoint

RECIPE = {
    "strategy": "multiuat", "measure": "enteos", "mc_samples": 2, "update_every": 2, "dev_batch_tokens": 400,
    "corpus_dir": "bundled:multilingual-ddtp", "direction": "many-to-one", "target_lang": "en",
    "corpora": ["fr", "de"], "max_train_examples": 60, "max_eval_examples": 6, "max_source_length": 32,
    "max_target_length": 32, "model_name_or_path": "causal-tiny", "vocab_size": 400, "max_steps": 4,
    "max_tokens": 500, "learning_rate": "3e-3", "logging_steps": 1, "save_strategy": "no", "eval_strategy": "no",
    "generation_num_beams": 1, "generation_max_length": 8, "per_device_eval_batch_size": 4, "use_cpu": True,
    "seed": 0, "report_to": "none", "disable_tqdm": True,
}


def test_uat_train_and_uat_evaluate_run_a_decoder_only_model_with_the_same_numbers(tmp_path):
    out = tmp_path / "out"
    config = tmp_path / "recipe.yaml"
    config.write_text(yaml.safe_dump({**RECIPE, "output_dir": str(out)}))
    assert cli.main(["--config", str(config)]) == 0
    assert AutoConfig.from_pretrained(out).model_type == "llama" and is_causal_checkpoint(str(out))
    assert json.loads((out / PROMPT_FILE).read_text())["template"].startswith("Translate {source_language}")
    trained = json.loads((out / "eval_results.json").read_text())
    history = (out / "balancing_history.jsonl").read_text().splitlines()
    assert len(history) == 2

    evaluate_main([str(out), "--corpus_dir", "bundled:multilingual-ddtp", "--direction", "many-to-one",
                   "--target_lang", "en", "--corpora", "fr", "de", "--max_eval_examples", "6", "--max_new_tokens", "8",
                   "--generation_num_beams", "1", "--per_device_eval_batch_size", "4", "--output_dir",
                   str(tmp_path / "eval")])
    evaluated = json.loads((tmp_path / "eval" / "results.json").read_text())["scores"]
    for name in ("fr", "de"):
        assert evaluated[name]["bleu"] == pytest.approx(trained[f"eval_{name}_bleu"])
        assert evaluated[name]["chrf"] == pytest.approx(trained[f"eval_{name}_chrf"])


def test_a_seq2seq_model_is_not_taken_for_a_causal_one(tmp_path):
    assert is_causal_checkpoint("causal-tiny") and not is_causal_checkpoint("tiny")
    with pytest.raises(ValueError, match="prompt_template"):
        cli.prepare(*cli.parse_arguments(["--config", str(_recipe(tmp_path, prompt_template="no source"))])[:3])


def _recipe(tmp_path, **changes):
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump({**RECIPE, "output_dir": str(tmp_path / "o"), **changes}))
    return path


def test_every_checkpoint_keeps_the_prompt_the_model_was_trained_with(tmp_path):
    """uat-evaluate asks a model with the prompt saved beside it, the default one when there is none: a checkpoint
    of a run with its own prompt_template must carry that template, or it is evaluated with another prompt."""
    from uat_hf.data.causal_data import CausalPrompt

    template = "{source_language} → {target_language}: {source} ="
    config = _recipe(tmp_path, prompt_template=template, save_strategy="steps", save_steps=2)
    assert cli.main(["--config", str(config)]) == 0
    for step in (2, 4):
        assert CausalPrompt.from_pretrained(tmp_path / "o" / f"checkpoint-{step}").template == template
