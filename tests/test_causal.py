"""Decoder-only (causal) LMs: prompt + completion corpora and rewards on the completion only, shifted by one."""

from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn.functional as F
from transformers import DataCollatorForSeq2Seq, LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

from conftest import multidomain_specs
from uat_hf.data.causal_data import CausalPrompt
from uat_hf.data.corpora import load_corpora
from uat_hf.evaluation.causal_eval import prompt_lengths
from uat_hf.models.causal_lm import is_causal_lm
from uat_hf.strategies.multidds_s.gradient_cosine import GradientCosineReward, _token_loss_sum
from uat_hf.strategies.multiuat.measures import MEASURES
from uat_hf.strategies.multiuat.uncertainty import batch_sentence_uncertainty

COLUMNS = ("input_ids", "attention_mask", "labels")


def causal_model(tokenizer, kind: str = "llama", dropout: float = 0.0):
    torch.manual_seed(0)
    common = dict(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                  pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id, bos_token_id=None,
                  attention_dropout=dropout, tie_word_embeddings=True)
    if kind == "llama":
        return LlamaForCausalLM(LlamaConfig(**common))
    return Qwen2ForCausalLM(Qwen2Config(**common))


@pytest.fixture(scope="module")
def causal_corpora(tokenizer):
    data = load_corpora(multidomain_specs(60), tokenizer, splits=("train", "dev"), prompt=CausalPrompt(),
                        max_source_length=24, max_target_length=24)
    return data


def batch(tokenizer, dataset, count=6):
    collate = DataCollatorForSeq2Seq(tokenizer, label_pad_token_id=-100)
    return collate([{k: dataset[i][k] for k in COLUMNS} for i in range(count)])


# --- corpora ---------------------------------------------------------------------------------------------


def test_pairs_become_prompt_plus_completion_with_labels_on_the_completion_only(tokenizer, causal_corpora):
    dataset = causal_corpora["dev"]["bible"]
    row = dataset[0]
    assert set(dataset.column_names) == {"input_ids", "attention_mask", "labels", "target_text"}
    assert len(row["input_ids"]) == len(row["labels"]) == len(row["attention_mask"])
    start = prompt_lengths([row["labels"]])[0]
    prompt = tokenizer.decode(row["input_ids"][:start])
    assert prompt.startswith("Translate English to German")
    assert row["labels"][:start] == [-100] * start
    assert row["labels"][start:] == row["input_ids"][start:]
    assert row["labels"][-1] == tokenizer.eos_token_id
    completion = tokenizer.decode(row["labels"][start:], skip_special_tokens=True).strip()
    assert row["target_text"].startswith(completion) and len(completion) > 10  # cut at max_target_length


def test_template_per_corpus_and_errors(tokenizer):
    specs = multidomain_specs(5)
    prompt = CausalPrompt(template={"bible": "{source_language}->{target_language}: {source} =>"})
    data = load_corpora(specs, tokenizer, splits=("dev",), prompt=prompt, max_source_length=8, max_target_length=8)
    bible, software = data["dev"]["bible"][0], data["dev"]["software"][0]
    assert tokenizer.decode(bible["input_ids"][: prompt_lengths([bible["labels"]])[0]]).startswith("English->German")
    assert tokenizer.decode(software["input_ids"]).startswith("Translate English to German")
    # max_source_length cuts the source inside the prompt; max_target_length keeps EOS last
    assert all(len([t for t in row if t != -100]) <= 8 for row in data["dev"]["bible"]["labels"])
    with pytest.raises(ValueError, match="no {source} field"):
        CausalPrompt(template="Translate:")
    with pytest.raises(ValueError, match="unknown field"):
        CausalPrompt(template="{source} {lang}")
    with pytest.raises(ValueError, match="chat template"):
        load_corpora(specs, tokenizer, splits=("dev",), prompt=CausalPrompt(chat=True))
    with pytest.raises(ValueError, match="prompt names the target language"):
        load_corpora(specs, tokenizer, splits=("dev",), prompt=CausalPrompt(), tags="target")


def test_chat_template_wraps_the_prompt_as_a_user_turn(tokenizer):
    chat = copy.deepcopy(tokenizer)  # a copy with a chat template, the session one untouched
    chat.chat_template = ("{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }} {% endfor %}"
                          "{% if add_generation_prompt %}<|assistant|> {% endif %}")
    data = load_corpora(multidomain_specs(5), chat, splits=("dev",), prompt=CausalPrompt(chat=True))
    row = data["dev"]["bible"][0]
    prompt = chat.decode(row["input_ids"][: prompt_lengths([row["labels"]])[0]])
    assert "user" in prompt and "Translate English to German" in prompt and "assistant" in prompt


# --- rewards ---------------------------------------------------------------------------------------------


def hand_uncertainty(model, inputs, measure):
    """Each measure from the full logits, written out: label t is predicted by the logits at t - 1."""
    with torch.no_grad():
        logits = model(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"]).logits.double()
    values = []
    for row in range(len(inputs["labels"])):
        labels = inputs["labels"][row].tolist()
        positions = [t for t, label in enumerate(labels) if label != -100]
        probs = [F.softmax(logits[row, t - 1], dim=-1) for t in positions]
        m = [float(p.max()) for p in probs]
        h = [float(-(p * p.log()).sum()) for p in probs]
        mean = sum(m) / len(m)
        var = sum((x - mean) ** 2 for x in m) / len(m)
        eos = next(i for i, t in enumerate(positions) if labels[t] == 1)
        values.append({"pretp": 1 - math.prod(m), "exptp": 1 - mean, "vartp": var, "comev": var / mean,
                       "entsent": sum(h) / len(h), "enteos": h[eos]}[measure])
    return torch.tensor(values, dtype=torch.float64)


@pytest.mark.parametrize("kind", ["llama", "qwen2"])
def test_each_measure_equals_the_hand_computed_shifted_value(tokenizer, causal_corpora, kind):
    model = causal_model(tokenizer, kind).eval()
    assert is_causal_lm(model)
    inputs = batch(tokenizer, causal_corpora["dev"]["bible"])
    for measure in MEASURES:
        got = batch_sentence_uncertainty(model, inputs, measure, tokenizer.eos_token_id).double()
        torch.testing.assert_close(got, hand_uncertainty(model, inputs, measure), rtol=1e-5, atol=1e-6)


def test_prompt_positions_are_never_scored(tokenizer, causal_corpora):
    """Scrambling the hidden states at every prompt position but the last (whose logits predict the first
    completion token) leaves every measure unchanged; scrambling that last one changes it."""
    model = causal_model(tokenizer).eval()
    inputs = batch(tokenizer, causal_corpora["dev"]["bible"])
    starts = prompt_lengths(inputs["labels"].tolist())
    before = {m: batch_sentence_uncertainty(model, inputs, m, 1) for m in MEASURES}

    def scramble(last: bool):
        def hook(module, args, output):
            output = output.clone()
            for row, start in enumerate(starts):
                if last:
                    output[row, start - 1] = torch.randn_like(output[row, start - 1]) * 5
                else:
                    output[row, : start - 1] = torch.randn_like(output[row, : start - 1]) * 5
            return output
        return model.model.norm.register_forward_hook(hook)

    handle = scramble(last=False)
    for measure in MEASURES:
        torch.testing.assert_close(batch_sentence_uncertainty(model, inputs, measure, 1), before[measure])
    handle.remove()
    handle = scramble(last=True)
    assert not torch.allclose(batch_sentence_uncertainty(model, inputs, "entsent", 1), before["entsent"])
    handle.remove()


def test_gradient_cosine_loss_is_the_shifted_completion_loss(tokenizer, causal_corpora):
    model = causal_model(tokenizer, "qwen2").eval()
    inputs = batch(tokenizer, causal_corpora["dev"]["software"])
    with torch.no_grad():
        own = model(**inputs).loss  # transformers' own causal-LM loss: shifted, -100 ignored
        summed = _token_loss_sum(model, inputs)
    tokens = int((inputs["labels"][:, 1:] != -100).sum())
    torch.testing.assert_close(summed / tokens, own)
    collate = DataCollatorForSeq2Seq(tokenizer, label_pad_token_id=-100)
    dev = [[collate([{k: ds[i][k] for k in COLUMNS} for i in range(4)])] for ds in causal_corpora["dev"].values()]
    result = GradientCosineReward().compute(model, dev, dev)
    rewards, _ = GradientCosineReward().finalize(result)
    assert result["cosine"].diagonal() == pytest.approx(1.0)
    assert rewards.shape == (4,)


def test_a_llama_without_dropout_is_refused_with_the_field_its_config_has(tokenizer):
    """Llama's only dropout field is attention_dropout: the advice names it, not a `dropout` it does not have."""
    from uat_hf.strategies.multiuat.uncertainty import UncertaintyReward

    with pytest.raises(ValueError, match=r"\(config: attention_dropout=0\.0\)\. Set a dropout rate of its config "
                                         r"before building it \(attention_dropout=0\.1; uat-train: model_overrides: "
                                         r"\{attention_dropout: 0\.1\}\), train a LoRA adapter with lora_dropout > 0"):
        UncertaintyReward("entsent", 2).check_model(causal_model(tokenizer))
    UncertaintyReward("entsent", 2).check_model(causal_model(tokenizer, dropout=0.1))  # with a rate: accepted
