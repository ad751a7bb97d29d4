"""Decoder-only LMs trained with corpus balancing: UATTrainer, TRL's SFTTrainer + attach_balancing, LoRA."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
import trl
from test_causal import causal_model

from conftest import multidomain_specs
from uat_hf.data.causal_data import CausalPrompt
from uat_hf.data.corpora import load_corpora
from uat_hf.training.balancing import attach_balancing
from uat_hf.training.callback import HISTORY_FILE
from uat_hf.training.uat_config import UATConfig
from uat_hf.training.uat_trainer import UATTrainer
from uat_hf.utils.checkpoints import BALANCING_STATE_FILE

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def causal_corpora(tokenizer):
    data = load_corpora(multidomain_specs(80), tokenizer, splits=("train", "dev"), prompt=CausalPrompt(),
                        max_source_length=24, max_target_length=24)
    data["dev"] = {name: ds.select(range(8)) for name, ds in data["dev"].items()}
    return data


def balancing_config(output, **overrides) -> UATConfig:
    settings = dict(output_dir=str(output), strategy="multiuat", measure="enteos", mc_samples=2, update_every=2,
                    max_steps=6, max_tokens=300, dev_batch_tokens=300, logging_steps=1, save_steps=2, report_to=[],
                    use_cpu=True, disable_tqdm=True, seed=3, learning_rate=1e-3)
    return UATConfig(**(settings | overrides))


def test_uat_trainer_trains_a_causal_lm_and_translates_after_the_prompt(tmp_path, tokenizer, causal_corpora):
    model = causal_model(tokenizer, "llama", dropout=0.1)
    args = balancing_config(tmp_path / "out", save_strategy="no", generation_max_length=12, generation_num_beams=1)
    trainer = UATTrainer(model, args, train_corpora=causal_corpora["train"], dev_corpora=causal_corpora["dev"],
                         processing_class=tokenizer)
    trainer.train()
    logged = [e for e in trainer.state.log_history if "balance/p_bible" in e]
    assert len(logged) == 3
    translations = trainer.translate(metric_key_prefix="eval")
    bible = translations["bible"]
    assert len(bible.hypotheses) == 8 and all("\n" not in h for h in bible.hypotheses)
    # only the continuation is kept: at most 12 new tokens, never the prompt's text
    assert bible.output.predictions.shape[1] <= 13
    assert not any(h.startswith("Translate English to German") for h in bible.hypotheses)
    metrics = trainer.evaluate()
    assert metrics["eval_bible_chrf"] == pytest.approx(bible.output.metrics["eval_bible_chrf"])
    assert tokenizer.padding_side == "right"  # left padding only while generating


def sft_run(tokenizer, causal_corpora, output, max_steps, resume=None, lora=False):
    torch.manual_seed(0)
    model = causal_model(tokenizer, "qwen2", dropout=0.1)
    if lora:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, lora_dropout=0.1, target_modules=["q_proj",
                                                                                                        "v_proj"]))
    config = balancing_config(output, max_steps=max_steps)
    sft_args = trl.SFTConfig(output_dir=str(output), max_steps=max_steps, logging_steps=1, save_steps=2,
                             report_to=[], use_cpu=True, disable_tqdm=True, seed=3, learning_rate=1e-3,
                             dataset_kwargs={"skip_prepare_dataset": True}, max_length=None)
    train = causal_corpora["train"]
    trainer = trl.SFTTrainer(model=model, args=sft_args, train_dataset=next(iter(train.values())),
                             processing_class=tokenizer)
    balancing = attach_balancing(trainer, train, causal_corpora["dev"], config=config)
    balancing.resume_from = resume
    trainer.train(resume_from_checkpoint=resume)
    return trainer, balancing


def test_sft_trainer_with_attach_balancing_trains_logs_p_and_resumes_exactly(tmp_path, tokenizer, causal_corpora):
    out = tmp_path / "sft"
    trainer, balancing = sft_run(tokenizer, causal_corpora, out, 6)
    history = [json.loads(line) for line in (out / HISTORY_FILE).read_text().splitlines()]
    assert [h["step"] for h in history] == [2, 4, 6]
    logged = {e["step"]: e for e in trainer.state.log_history if "loss" in e}
    assert logged[2]["balance/p_bible"] == pytest.approx(history[0]["probabilities"]["bible"])
    assert (out / "checkpoint-4" / BALANCING_STATE_FILE).is_file()

    shutil.rmtree(out / "checkpoint-6")
    resumed, resumed_balancing = sft_run(tokenizer, causal_corpora, out, 6, resume=str(out / "checkpoint-4"))
    assert (resumed_balancing.distribution.state_dict()["probabilities"]
            == balancing.distribution.state_dict()["probabilities"])
    for p, q in zip(trainer.model.parameters(), resumed.model.parameters()):
        torch.testing.assert_close(p, q, rtol=0, atol=0)


def test_lora_under_sft_trainer_trains_the_adapters_only(tmp_path, tokenizer, causal_corpora):
    torch.manual_seed(0)
    before = {n: p.detach().clone() for n, p in causal_model(tokenizer, "qwen2", dropout=0.1).named_parameters()}
    trainer, balancing = sft_run(tokenizer, causal_corpora, tmp_path / "lora", 4, lora=True)
    assert len(balancing.distribution.history) == 2
    changed = {n for n, p in trainer.model.named_parameters()
               if "lora_" in n or not torch.equal(p.detach(), before[n.replace("base_model.model.", "")
                                                                           .replace(".base_layer", "")])}
    assert changed and all("lora_" in n for n in changed)
    assert any(not torch.equal(p, torch.zeros_like(p)) for n, p in trainer.model.named_parameters() if "lora_B" in n)
