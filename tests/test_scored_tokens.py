"""Rewards score the right tokens: not the language code that opens the labels, not label padding, and only
on models whose logits they know how to read (seq2seq or causal LM); a code scheme's generation codes are
found and saved without being handed over.

Real parts only: tokenizers trained offline on the bundled text (NLLB, M2M100, mBART-50 layouts from
``test_language_codes``), tiny random models from configs, a stock ``Seq2SeqTrainer``.
"""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest
import torch
from test_language_codes import (
    MULTILINGUAL,
    mbart50_tokenizer,
    nllb_tokenizer,
    one_to_many_specs,
    save_m2m100_tokenizer,
    tiny_model,
)
from transformers import (
    BertConfig,
    BertForMaskedLM,
    DataCollatorForSeq2Seq,
    GPT2Config,
    GPT2LMHeadModel,
    Seq2SeqTrainer,
    Trainer,
)

from uat_hf.data.corpora import corpus_specs_from_directory, load_corpora
from uat_hf.data.language_codes import GENERATION_KWARGS_FILE, language_code_ids
from uat_hf.models.targets import scored_mask
from uat_hf.strategies.multiuat.measures import IGNORE_INDEX, MEASURES
from uat_hf.training.balancing import attach_balancing, balancing_reward
from uat_hf.training.uat_config import UATConfig
from uat_hf.training.uat_trainer import UATTrainer

# ------------------------------------------------------------------------------------------- language codes


@pytest.fixture(scope="module")
def mbart(tmp_path_factory):
    """An mBART-50 tokenizer, en → de/fr/cs corpora tokenized with their codes, and a tiny mBART model."""
    tokenizer = mbart50_tokenizer(tmp_path_factory.mktemp("mbart50"))
    data = load_corpora(one_to_many_specs(20), tokenizer, splits=("train", "dev"), tags="mbart50",
                        max_source_length=24, max_target_length=24)
    return tokenizer, data


def _code_free_twin(batch: dict) -> dict:
    """The same batch with the label at each row's code position set to -100: the same decoder input (the code
    still feeds the next position), no code among the labels."""
    twin = dict(batch)
    twin["labels"] = batch["labels"].clone()
    twin["labels"][:, 0] = IGNORE_INDEX
    return twin


def test_language_code_ids_of_all_three_schemes(tmp_path):
    m2m100 = save_m2m100_tokenizer(tmp_path / "m2m100")
    for tokenizer, codes in ((nllb_tokenizer(), ("deu_Latn", "eng_Latn")), (m2m100, ("__de__", "__en__")),
                             (mbart50_tokenizer(tmp_path / "mbart"), ("de_DE", "en_XX"))):
        ids = language_code_ids(tokenizer)
        assert {tokenizer.convert_tokens_to_ids(code) for code in codes} <= ids, type(tokenizer).__name__
        assert not ids & {tokenizer.eos_token_id, tokenizer.pad_token_id, tokenizer.bos_token_id}
        assert len(ids) >= 52  # mBART-50 has the fewest codes


def test_scored_mask_drops_a_leading_code_only():
    code, pad = 7, IGNORE_INDEX
    labels = torch.tensor([[code, 5, 6, 2], [pad, code, 5, 2], [5, code, 6, 2], [code, 2, pad, pad]])
    mask = scored_mask(labels, {code})
    assert mask.tolist() == [[False, True, True, True], [False, False, True, True],  # left padding: its first real
                             [True, True, True, True], [False, True, False, False]]  # a code inside stays scored
    assert torch.equal(scored_mask(labels), labels != IGNORE_INDEX)


def test_every_reward_ignores_the_target_code(mbart):
    """Rewards on code-prefixed labels equal the rewards on the same labels without the code (all six measures
    and the MultiDDS-S gradient cosine), and differ from what scoring the code gives."""
    tokenizer, data = mbart
    model = tiny_model(tokenizer, "mbart")
    collator = DataCollatorForSeq2Seq(tokenizer, model=model, label_pad_token_id=IGNORE_INDEX)
    def batch(dataset):
        return collator([dataset.select_columns(["input_ids", "attention_mask", "labels"])[i] for i in range(6)])

    dev = [[batch(data["dev"][name])] for name in ("de", "fr")]
    train = [[batch(data["train"][name])] for name in ("de", "fr")]
    assert all(batches[0]["labels"][0, 0].item() in language_code_ids(tokenizer) for batches in dev)
    without_code = [[_code_free_twin(b) for b in batches] for batches in dev]
    code_blind = dict(tokenizer=None)
    for measure in MEASURES:
        config = UATConfig(output_dir="unused", strategy="multiuat", measure=measure, mc_samples=1, report_to=[])
        reward = balancing_reward(config, model, tokenizer)
        with_code = reward.finalize(reward.compute(model, dev, seed=3))[0]
        plain = reward.finalize(reward.compute(model, without_code, seed=3))[0]
        np.testing.assert_allclose(with_code, plain, rtol=1e-6, err_msg=measure)
        # EntEOS reads the EOS position only; PreTP of an untrained model is 1 to float precision either way
        if measure not in ("enteos", "pretp"):
            blind = balancing_reward(config, model, **code_blind)
            scored = blind.finalize(blind.compute(model, dev, seed=3))[0]
            assert not np.allclose(scored, plain, rtol=1e-6, atol=0), measure
    config = UATConfig(output_dir="unused", strategy="multidds-s", report_to=[])
    reward = balancing_reward(config, model, tokenizer)
    with_code = reward.compute(model, dev, train, seed=0)["cosine"]
    plain = reward.compute(model, without_code, [[_code_free_twin(b) for b in bs] for bs in train], seed=0)["cosine"]
    np.testing.assert_allclose(with_code, plain, rtol=1e-5, atol=1e-7)
    scored = balancing_reward(config, model, **code_blind).compute(model, dev, train, seed=0)["cosine"]
    assert not np.allclose(scored, plain, rtol=1e-5, atol=1e-7)


# ------------------------------------------------------------------------------------------- generation codes


def _config(tmp_path, **overrides) -> UATConfig:
    settings = dict(output_dir=str(tmp_path), max_steps=1, per_device_train_batch_size=4, report_to=[],
                    save_strategy="no", use_cpu=True, disable_tqdm=True, generation_max_length=4,
                    generation_num_beams=1)
    return UATConfig(**{**settings, **overrides})


def test_uat_trainer_finds_each_corpus_code_and_saves_them_beside_the_model(mbart, tmp_path):
    tokenizer, data = mbart
    expected = {"de": "de_DE", "fr": "fr_XX", "cs": "cs_CZ"}
    ids = {name: tokenizer.convert_tokens_to_ids(code) for name, code in expected.items()}
    dev = {name: ds.select(range(3)) for name, ds in data["dev"].items()}
    trainer = UATTrainer(tiny_model(tokenizer, "mbart"), _config(tmp_path), train_corpora=data["train"],
                         eval_corpora=dev, processing_class=tokenizer)  # no corpus_generation_kwargs
    assert trainer.corpus_generation_kwargs == {name: {"forced_bos_token_id": i} for name, i in ids.items()}
    firsts = {name: set(t.output.predictions[:, 1].tolist()) for name, t in trainer.translate().items()}
    assert firsts == {name: {i} for name, i in ids.items()}
    assert trainer.model.generation_config.forced_bos_token_id is None  # one-to-many: no single default
    trainer.save_model(str(tmp_path / "model"))
    saved = json.loads((tmp_path / "model" / GENERATION_KWARGS_FILE).read_text())
    assert saved == {name: {"forced_bos_token_id": i} for name, i in ids.items()}


def test_a_code_shared_by_every_corpus_goes_into_the_saved_generation_config(tmp_path):
    from transformers import GenerationConfig

    tokenizer = mbart50_tokenizer(tmp_path / "spm")
    specs = corpus_specs_from_directory(MULTILINGUAL, None, "en", direction="many-to-one", corpora=["de", "fr"],
                                        max_examples=12)
    data = load_corpora(specs, tokenizer, splits=("train",), tags="mbart50", max_source_length=24,
                        max_target_length=24)["train"]
    trainer = UATTrainer(tiny_model(tokenizer, "mbart"), _config(tmp_path), train_corpora=data, eval_corpora=data,
                         processing_class=tokenizer)
    english = tokenizer.convert_tokens_to_ids("en_XX")
    assert trainer.model.generation_config.forced_bos_token_id == english
    trainer.save_model(str(tmp_path / "model"))
    assert GenerationConfig.from_pretrained(tmp_path / "model").forced_bos_token_id == english


def test_a_corpus_whose_labels_show_no_code_is_warned_about(mbart, tmp_path, caplog):
    tokenizer, data = mbart
    dev = {name: ds.select(range(3)) for name, ds in data["dev"].items()}
    corpora = {"de": dev["de"].remove_columns("labels"), "fr": dev["fr"]}
    with caplog.at_level(logging.WARNING, logger="uat_hf.data.language_codes"):
        trainer = UATTrainer(tiny_model(tokenizer, "mbart"), _config(tmp_path), eval_corpora=corpora,
                             processing_class=tokenizer)
    assert "Corpus 'de': MBart50Tokenizer places language codes, but it has no labels" in caplog.text
    assert "corpus_generation_kwargs" in caplog.text
    french = tokenizer.convert_tokens_to_ids("fr_XX")
    assert trainer.corpus_generation_kwargs == {"fr": {"forced_bos_token_id": french}}
    assert trainer.model.generation_config.forced_bos_token_id is None  # fr's code is not de's default


# ------------------------------------------------------------------------------------------- label padding


def test_a_stock_trainer_whose_collator_pads_labels_with_the_pad_id_is_measured_with_minus_100(
        corpora, tokenizer, tiny_model, tmp_path):
    pad_collator = DataCollatorForSeq2Seq(tokenizer, model=tiny_model, label_pad_token_id=tokenizer.pad_token_id)
    args = UATConfig(output_dir=str(tmp_path), strategy="multiuat", measure="exptp", mc_samples=1, update_every=1,
                     max_steps=2, per_device_train_batch_size=4, report_to=[], save_strategy="no", use_cpu=True,
                     disable_tqdm=True)
    trainer = Seq2SeqTrainer(tiny_model, args, data_collator=pad_collator, processing_class=tokenizer)
    dev = {name: ds.select(range(8)) for name, ds in corpora["dev"].items()}
    callback = attach_balancing(trainer, corpora["train"], dev)
    seen = []
    compute = callback.reward.compute
    callback.reward.compute = lambda model, batches, *args, **kwargs: (
        seen.append(batches), compute(model, batches, *args, **kwargs))[1]
    trainer.train()
    assert seen, "no balancing update ran"
    labels = [batch["labels"] for update in seen for batches in update for batch in batches]
    assert any((row == IGNORE_INDEX).any() for row in labels)  # sentences of different lengths were padded
    assert not any((row == tokenizer.pad_token_id).any() for row in labels)
    assert trainer.data_collator is pad_collator  # training batches keep the user's collator


def test_a_custom_collator_without_a_tokenizer_is_refused(corpora, tiny_model, tmp_path):
    from transformers import default_data_collator

    args = UATConfig(output_dir=str(tmp_path), strategy="multiuat", measure="exptp", report_to=[], use_cpu=True)
    trainer = Seq2SeqTrainer(tiny_model, args, data_collator=default_data_collator)
    with pytest.raises(ValueError, match=r"data collator \(default_data_collator\) is not a DataCollatorForSeq2Seq.*"
                                         r"processing_class"):
        attach_balancing(trainer, corpora["train"], corpora["dev"])


# ------------------------------------------------------------------------------------------- unsupported models


def _bert():
    """An encoder-only masked LM: neither sequence-to-sequence nor causal."""
    return BertForMaskedLM(BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                      intermediate_size=32, max_position_embeddings=32))


@pytest.mark.parametrize("strategy", ["multiuat", "multidds-s", "proportional"])
def test_an_encoder_only_model_on_a_stock_trainer_is_refused_naming_its_class(corpora, tmp_path, strategy):
    args = UATConfig(output_dir=str(tmp_path), strategy=strategy, report_to=[], use_cpu=True)
    trainer = Trainer(_bert(), args)
    with pytest.raises(ValueError, match=r"BertForMaskedLM \(model_type 'bert'\) is neither an encoder-decoder model "
                                         r"\(config.is_encoder_decoder\) nor a decoder-only causal LM"):
        attach_balancing(trainer, corpora["train"], corpora["dev"])


def test_an_encoder_only_model_in_uat_trainer_is_refused_before_training(corpora, tokenizer, tmp_path):
    args = UATConfig(output_dir=str(tmp_path), strategy="multiuat", report_to=[], use_cpu=True)
    with pytest.raises(ValueError, match=r"BertForMaskedLM \(model_type 'bert'\) is neither"):
        UATTrainer(_bert(), args, train_corpora=corpora["train"], dev_corpora=corpora["dev"],
                   processing_class=tokenizer)
    with pytest.raises(ValueError, match=r"BertForMaskedLM"):  # an evaluation-only trainer too
        UATTrainer(_bert(), args, eval_corpora=corpora["dev"], processing_class=tokenizer)


def test_a_causal_lm_is_not_refused():
    from uat_hf.models.targets import require_supported_model

    require_supported_model(GPT2LMHeadModel(GPT2Config(vocab_size=64, n_positions=32, n_embd=16, n_layer=1,
                                                       n_head=2)))
