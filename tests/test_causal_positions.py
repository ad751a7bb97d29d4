"""Rewards of a causal LM with absolute position embeddings (GPT-2) on left-padded dev batches: each row is scored
at its own positions, so a padded batch gives what each sentence gives alone."""

from __future__ import annotations

import contextlib

import pytest
import torch
from transformers import DataCollatorForSeq2Seq, GPT2Config, GPT2LMHeadModel

from conftest import multidomain_specs
from uat_hf.data.causal_data import CausalPrompt
from uat_hf.data.corpora import load_corpora
from uat_hf.models.causal_lm import mask_position_ids
from uat_hf.strategies.mixing_law.dev_loss import dev_loss_sums
from uat_hf.strategies.multiuat.measures import MEASURES
from uat_hf.strategies.multiuat.uncertainty import batch_sentence_uncertainty

pytestmark = pytest.mark.usefixtures("one_torch_thread")
COLUMNS = ("input_ids", "attention_mask", "labels")


def gpt2_model(tokenizer):
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=len(tokenizer), n_embd=32, n_layer=2, n_head=2, n_positions=256,
                        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
                        bos_token_id=tokenizer.eos_token_id)
    return GPT2LMHeadModel(config).eval()


@pytest.fixture(scope="module")
def rows(tokenizer):
    data = load_corpora(multidomain_specs(40), tokenizer, splits=("dev",), prompt=CausalPrompt(),
                        max_source_length=24, max_target_length=24)
    dev = data["dev"]["software"]
    rows = [{k: dev[i][k] for k in COLUMNS} for i in range(8)]
    assert len({len(row["input_ids"]) for row in rows}) > 3  # rows of many lengths: a padded batch pads most
    return rows


@contextlib.contextmanager
def padding_side(tokenizer, side):
    before = tokenizer.padding_side
    tokenizer.padding_side = side
    try:
        yield DataCollatorForSeq2Seq(tokenizer, label_pad_token_id=-100)
    finally:
        tokenizer.padding_side = before


@pytest.mark.parametrize(("side", "lora"), [("left", False), ("right", False), ("left", True)])
def test_gpt2_measures_and_dev_loss_of_a_padded_batch_equal_each_sentence_alone(tokenizer, rows, side, lora):
    model = gpt2_model(tokenizer)
    if lora:  # a peft model passes the positions on to the model it wraps
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=4, target_modules=["c_attn"], fan_in_fan_out=True)).eval()
    with padding_side(tokenizer, side) as collate, torch.no_grad():
        batch = collate(rows)
        assert bool((batch["attention_mask"] == 0).any())
        first = 0 if side == "left" else -1
        assert bool((batch["attention_mask"][:, first] == 0).any())  # padded on that side
        alone = [collate([row]) for row in rows]
        eos = tokenizer.eos_token_id
        for measure in MEASURES:
            together = batch_sentence_uncertainty(model, batch, measure, eos)
            each = torch.cat([batch_sentence_uncertainty(model, one, measure, eos) for one in alone])
            torch.testing.assert_close(together, each, rtol=1e-5, atol=1e-5, msg=measure)
        loss, tokens = dev_loss_sums(model, batch)
        sums = [dev_loss_sums(model, one) for one in alone]
        assert tokens == sum(count for _, count in sums)
        assert loss / tokens == pytest.approx(sum(value for value, _ in sums) / tokens, rel=1e-5)


def test_mask_position_ids_count_the_real_tokens_as_generate_does():
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    assert mask_position_ids(mask).tolist() == [[0, 0, 0, 1, 2], [0, 1, 2, 2, 2], [0, 1, 2, 3, 4]]
