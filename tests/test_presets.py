"""Model presets and model construction (uat_hf.models.presets)."""

from __future__ import annotations

import copy

import pytest
import torch
from transformers import MarianMTModel

from uat_hf.data.tokenization import train_joint_tokenizer
from uat_hf.models.presets import MODEL_PRESETS, build_model

# preset: (layers per side, heads, d_model, ffn, dropout)
PAPER_SIZES = {
    "transformer_iwslt_de_en": (6, 4, 512, 1024, 0.3),
    "transformer_base": (6, 8, 512, 2048, 0.1),
    "small": (3, 4, 256, 1024, 0.1),
    "tiny": (1, 2, 32, 64, 0.1),
}


@pytest.fixture(scope="module")
def toy_tokenizer():
    sentences = ["the cat sat on the mat", "die Katze saß auf der Matte", "a dog", "ein Hund"] * 5
    return train_joint_tokenizer(sentences, vocab_size=120, special_tokens=[">>de<<"])


def expected_parameters(preset: dict, vocab_size: int) -> int:
    """Shared embeddings + post-norm layers + two (frozen) sinusoidal position tables."""
    d, ffn = preset["d_model"], preset["encoder_ffn_dim"]
    attention = 4 * (d * d + d)
    feed_forward = d * ffn + ffn + ffn * d + d
    layer_norm = 2 * d
    encoder_layer = attention + feed_forward + 2 * layer_norm
    decoder_layer = 2 * attention + feed_forward + 3 * layer_norm
    positions = 2 * preset["max_position_embeddings"] * d
    layers = preset["encoder_layers"] * encoder_layer + preset["decoder_layers"] * decoder_layer
    return vocab_size * d + layers + positions


@pytest.mark.parametrize("name", sorted(PAPER_SIZES))
def test_preset_sizes_and_parameter_counts(name, toy_tokenizer):
    layers, heads, d_model, ffn, dropout = PAPER_SIZES[name]
    with torch.device("meta"):  # shapes only: the 6-layer presets would take seconds to initialise
        model = build_model(name, toy_tokenizer)
    config = model.config
    assert (config.encoder_layers, config.decoder_layers) == (layers, layers)
    assert (config.encoder_attention_heads, config.decoder_attention_heads) == (heads, heads)
    assert (config.d_model, config.encoder_ffn_dim, config.decoder_ffn_dim) == (d_model, ffn, ffn)
    assert config.dropout == dropout
    assert config.share_encoder_decoder_embeddings and config.scale_embedding
    assert model.num_parameters() == expected_parameters(MODEL_PRESETS[name], len(toy_tokenizer))
    frozen_positions = 2 * config.max_position_embeddings * d_model
    assert model.num_parameters(only_trainable=True) == model.num_parameters() - frozen_positions


def test_paper_scale_parameter_counts_with_a_32k_vocabulary():
    """With the paper's 32K joint vocabulary the sizes match fairseq's well-known totals (~48M / ~61M)."""
    assert 46e6 < expected_parameters(MODEL_PRESETS["transformer_iwslt_de_en"], 32_000) < 50e6
    assert 60e6 < expected_parameters(MODEL_PRESETS["transformer_base"], 32_000) < 63e6


def test_tiny_model_uses_tokenizer_ids_and_trains(toy_tokenizer):
    model = build_model("tiny", toy_tokenizer)
    assert isinstance(model, MarianMTModel)
    config = model.config
    assert config.vocab_size == len(toy_tokenizer) == model.get_input_embeddings().num_embeddings
    assert (config.pad_token_id, config.eos_token_id, config.decoder_start_token_id) == (0, 1, 0)
    assert model.get_output_embeddings().weight is model.get_input_embeddings().weight
    generation = model.generation_config
    assert (generation.num_beams, generation.max_length, generation.eos_token_id) == (4, 128, 1)
    batch = toy_tokenizer(["the cat sat"], text_target=["die Katze saß"], return_tensors="pt")
    loss = model(**batch).loss
    loss.backward()
    assert torch.isfinite(loss)
    output = model.generate(batch["input_ids"], num_beams=1, max_new_tokens=4)
    assert output[0, 0].item() == toy_tokenizer.pad_token_id


def test_overrides_and_generation_settings(toy_tokenizer):
    model = build_model("tiny", toy_tokenizer, dropout=0.25, attention_dropout=0.1, num_beams=2, max_length=40)
    assert (model.config.dropout, model.config.attention_dropout) == (0.25, 0.1)
    assert (model.generation_config.num_beams, model.generation_config.max_length) == (2, 40)
    with pytest.raises(ValueError, match=r"Unknown MarianConfig fields \['n_layers'\]"):
        build_model("tiny", toy_tokenizer, n_layers=2)


def test_build_model_from_a_saved_directory(toy_tokenizer, tmp_path):
    model = build_model("tiny", toy_tokenizer)
    model.save_pretrained(tmp_path)
    loaded = build_model(str(tmp_path), toy_tokenizer)
    assert isinstance(loaded, MarianMTModel)
    assert loaded.state_dict().keys() == model.state_dict().keys()
    assert all(torch.equal(a, loaded.state_dict()[k]) for k, a in model.state_dict().items())
    assert loaded.generation_config.num_beams == 4
    assert build_model(str(tmp_path), toy_tokenizer, dropout=0.3, num_beams=1).config.dropout == 0.3


def test_pretrained_model_is_resized_for_added_tokens(toy_tokenizer, tmp_path):
    build_model("tiny", toy_tokenizer).save_pretrained(tmp_path)
    bigger = copy.deepcopy(toy_tokenizer)
    bigger.add_special_tokens({"extra_special_tokens": [">>fr<<", ">>cs<<"]}, replace_extra_special_tokens=False)
    loaded = build_model(str(tmp_path), bigger)
    assert loaded.get_input_embeddings().num_embeddings >= len(bigger) > len(toy_tokenizer)


def test_unknown_preset_lists_presets(toy_tokenizer):
    with pytest.raises(ValueError, match=r"Unknown model 'huge'.*\['small', 'tiny', 'transformer_base'"):
        build_model("huge", toy_tokenizer)
    with pytest.raises(ValueError, match="not a local model directory"):
        build_model("./runs/missing/model", toy_tokenizer)
