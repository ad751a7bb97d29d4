"""Decoder-only LMs trained with corpus balancing: UATTrainer, TRL's SFTTrainer + attach_balancing, LoRA."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import torch
import trl
from test_causal import causal_model

from conftest import multidomain_specs
from uat_hf.data.causal_data import CausalPrompt
from uat_hf.data.corpora import load_corpora
from uat_hf.training.balancing import attach_balancing
from uat_hf.training.balancing_arguments import BalancingArguments
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


# --- docs/decoder_only.md's SFTTrainer example, run as written ----------------------------------------------

DOC = Path(__file__).resolve().parents[1] / "docs" / "decoder_only.md"
#: The doc's sizes → a tiny run's (each must appear in the example, so that the doc cannot drift from the test).
#: use_cpu is the doc's own: SFTConfig trains in bf16 by default, which a CPU without bf16 refuses without it.
TINY_RUN = {"max_steps=1000": "max_steps=4", "save_steps=200": "save_steps=2", "update_every=100": "update_every=2",
            "max_tokens=4096": "max_tokens=300", '"causal-small"': '"causal-tiny"',
            "vocab_size=4000": "vocab_size=600",
            'direction="many-to-one")': 'direction="many-to-one", max_examples=40)',
            "prompt=CausalPrompt())": "prompt=CausalPrompt(), max_source_length=24, max_target_length=24)"}


def sft_doc_example() -> str:
    text = DOC.read_text(encoding="utf-8")
    blocks = [b for b in re.findall(r"```python\n(.*?)```", text, re.S) if "SFTTrainer(" in b]
    assert len(blocks) == 1, "expected one ```python block with SFTTrainer( in docs/decoder_only.md"
    code = blocks[0]
    for doc_value, tiny_value in TINY_RUN.items():
        assert doc_value in code, doc_value
        code = code.replace(doc_value, tiny_value)
    return code


def test_the_sft_trainer_example_of_the_docs_runs_as_written(tmp_path, monkeypatch):
    """The doc's example, set-up included, on a CPU as written (it once needed use_cpu=True added, and once built a
    UATConfig inline after SFTTrainer(...), which reset accelerate's state under the trainer); only its sizes are
    made tiny. The trainer's seed, steps and logging come from its SFTConfig."""
    monkeypatch.chdir(tmp_path)  # the example writes to "out"
    namespace: dict = {}
    exec(compile(sft_doc_example(), str(DOC), "exec"), namespace)
    trainer, balancing = namespace["trainer"], namespace["balancing"]
    assert trainer.state.global_step == 4 and len(balancing.distribution.history) == 2
    assert set(balancing.sampler.names) == {"cs", "de", "fr", "ko"}
    assert trainer.args.use_cpu == (not torch.cuda.is_available())
    history = [json.loads(line) for line in (tmp_path / "out" / HISTORY_FILE).read_text().splitlines()]
    assert [h["step"] for h in history] == [2, 4]
    assert (tmp_path / "out" / "checkpoint-2" / BALANCING_STATE_FILE).is_file()


def test_attach_balancing_takes_balancing_arguments_over_the_trainer_args(tmp_path, tokenizer, causal_corpora):
    """config=BalancingArguments(...) and keyword fields give the same settings, read over the SFTConfig's own
    fields; a UATConfig built after the trainer, the doc's old form, is refused with what to do instead."""
    def sft_trainer():
        args = trl.SFTConfig(output_dir=str(tmp_path / "sft"), max_steps=6, seed=7, report_to=[], use_cpu=True,
                             dataset_kwargs={"skip_prepare_dataset": True}, max_length=None)
        return trl.SFTTrainer(model=causal_model(tokenizer, "qwen2", dropout=0.1), args=args,
                              train_dataset=causal_corpora["train"]["bible"], processing_class=tokenizer)

    fields = dict(strategy="multiuat-entsent", mc_samples=2, update_every=3, max_tokens=300)
    by_keywords = attach_balancing(sft_trainer(), causal_corpora["train"], causal_corpora["dev"], **fields)
    by_arguments = attach_balancing(sft_trainer(), causal_corpora["train"], causal_corpora["dev"],
                                    config=BalancingArguments(**fields))
    for callback in (by_keywords, by_arguments):
        assert callback.reward.measure == "entsent" and callback.update_every == 3
        assert callback.sampler.max_tokens == 300 and callback.seed == 7  # the SFTConfig's seed
    with pytest.raises(TypeError, match=r"\['max_steps'\] belong to the trainer's own arguments"):
        attach_balancing(sft_trainer(), causal_corpora["train"], causal_corpora["dev"], strategy="uniform",
                         max_steps=3)
    with pytest.raises(ValueError, match="update_every=6 >= max_steps=6"):  # checked against the SFTConfig's
        attach_balancing(sft_trainer(), causal_corpora["train"], causal_corpora["dev"], strategy="multiuat",
                         update_every=6)
    trainer = sft_trainer()
    late = UATConfig(output_dir=str(tmp_path / "late"), strategy="multiuat", report_to=[], use_cpu=True)
    with pytest.raises(RuntimeError, match="reset accelerate's state under the trainer"):
        attach_balancing(trainer, causal_corpora["train"], causal_corpora["dev"], config=late)


def test_the_health_checks_see_a_misaligned_corpus_of_a_causal_lm(tmp_path, tokenizer, caplog):
    """A decoder-only model is checked too, its completions after another sentence's prompt: a tiny llama that has
    learned 8 pairs of each corpus finds bible's misaligned pairs suspect, the others as sound as their dev pairs."""
    import logging

    from datasets import Dataset
    from transformers import DataCollatorForSeq2Seq

    from uat_hf.data.causal_data import tokenize_causal_corpus
    from uat_hf.data.corpora import load_corpus_split
    from uat_hf.evaluation.corpus_health import draw_health_sample
    from uat_hf.training.health_callback import CorpusHealthCallback

    def tokenized(spec, pairs):
        return tokenize_causal_corpus(pairs, tokenizer, spec, CausalPrompt(), max_source_length=24,
                                      max_target_length=24).select_columns(["input_ids", "attention_mask", "labels"])

    aligned, misaligned = {}, None
    for spec in multidomain_specs(8):
        raw = load_corpus_split(spec, "train")
        aligned[spec.name] = tokenized(spec, raw)
        if spec.name == "bible":
            misaligned = tokenized(spec, Dataset.from_dict({"source": raw["source"][:],
                                                            "target": raw["target"][1:] + raw["target"][:1]}))
    # The mismatched version of an example: the neighbour's prompt, then its own completion and labels.
    collate = DataCollatorForSeq2Seq(tokenizer, label_pad_token_id=-100)
    sample = draw_health_sample(aligned["bible"], aligned["bible"], lambda rows: rows, tokens=10_000,
                                sub_batch_tokens=10_000, seed=0, causal=True)
    assert len(sample.train) == 2
    for (rows,), (swapped,) in sample.train:  # each half: its rows and their mismatched versions
        for row, other, mixed in zip(rows, rows[-1:] + rows[:-1], swapped):
            own, theirs = (next(i for i, label in enumerate(r["labels"]) if label != -100) for r in (row, other))
            assert mixed["input_ids"] == other["input_ids"][:theirs] + row["input_ids"][own:]
            assert mixed["labels"] == [-100] * theirs + row["labels"][own:]

    model = causal_model(tokenizer, "llama")
    warmup = balancing_config(tmp_path / "warmup", strategy="proportional", max_steps=400, learning_rate=5e-3,
                              save_strategy="no", corpus_health_checks=0, logging_steps=1000)
    UATTrainer(model, warmup, train_corpora=aligned, processing_class=tokenizer, data_collator=collate).train()
    args = balancing_config(tmp_path / "out", strategy="proportional", max_steps=4, learning_rate=1e-6,
                            save_strategy="no", corpus_health_checks=2, corpus_health_tokens=100_000)
    trainer = UATTrainer(model, args, train_corpora=dict(aligned, bible=misaligned), dev_corpora=aligned,
                         processing_class=tokenizer, data_collator=collate)
    health = next(c for c in trainer.callback_handler.callbacks if isinstance(c, CorpusHealthCallback))
    with caplog.at_level(logging.WARNING, logger="uat_hf.training.health_callback"):
        trainer.train()
    shares = dict(zip(health.last.names, health.last.share))
    assert health.last.suspects() == ["bible"] and shares["bible"] < 0.2, shares
    assert all(abs(s - 1.0) < 1e-6 for n, s in shares.items() if n != "bible"), shares  # train sample == dev
    assert any("'bible'" in r.getMessage() for r in caplog.records)
