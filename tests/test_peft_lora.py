"""LoRA (peft) models: MC dropout samples the adapters' dropout too, the reward passes leave training state alone,
MultiDDS-S compares adapter gradients, and UATTrainer trains (and resumes) only the adapters."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from peft import LoraConfig, get_peft_model
from transformers import DataCollatorForSeq2Seq

from uat_hf import UATConfig, UATTrainer
from uat_hf.models.presets import build_model
from uat_hf.models.targets import target_logits
from uat_hf.strategies.multidds_s.gradient_cosine import GradientCosineReward
from uat_hf.strategies.multiuat.uncertainty import UncertaintyReward, dropout_rates, mc_dropout

TARGETS = ["q_proj", "v_proj", "fc1"]


def lora(model, dropout: float = 0.1, seed: int = 0):
    """A LoRA model whose adapters already act (lora_B is zero at init, which would make them invisible)."""
    model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=TARGETS, lora_dropout=dropout))
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.5)
    return model


@pytest.fixture
def collate(tokenizer):
    return DataCollatorForSeq2Seq(tokenizer, model=build_model("tiny", tokenizer))


def dev_batches(corpora, collate, rows: int = 4) -> list[list[dict]]:
    return [[collate([{k: ds[i][k] for k in ("input_ids", "attention_mask", "labels")} for i in range(rows)])]
            for ds in corpora["dev"].values()]


def test_target_logits_of_a_lora_model_are_its_own_logits(tokenizer, corpora, collate):
    model = lora(build_model("tiny", tokenizer)).eval()
    (batch,), *_ = dev_batches(corpora, collate)
    mask = batch["labels"] != -100
    with torch.no_grad():
        expected = model(**batch).logits[mask]
        torch.testing.assert_close(target_logits(model, batch, mask), expected)
        merged = copy.deepcopy(model)
        merged.base_model.disable_adapter_layers()
        assert not torch.allclose(merged(**batch).logits[mask], expected)  # the adapters do change the logits


def test_mc_dropout_samples_the_lora_dropout_and_restores_every_mode(tokenizer, corpora, collate):
    model = lora(build_model("tiny", tokenizer), dropout=0.3)
    lora_dropouts = {n for n in dropout_rates(model) if ".lora_dropout." in n}
    assert len(lora_dropouts) == 3 * 2 + 2  # q_proj and v_proj of 3 attention blocks, fc1 of 2 layers
    assert all(dropout_rates(model)[n] == 0.3 for n in lora_dropouts)
    model.eval()
    odd = model.get_base_model().model.decoder.layers[0].fc1.lora_dropout["default"]
    odd.train()  # a mixed state, which must come back exactly
    before = {name: module.training for name, module in model.named_modules()}
    seen: dict[str, bool] = {}
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Dropout):
            module.register_forward_pre_hook(lambda m, args, name=name: seen.__setitem__(name, m.training))
    UncertaintyReward("entsent", 2, mode="loop").compute(model, dev_batches(corpora, collate))
    assert {n for n in lora_dropouts if seen.get(n)} == lora_dropouts  # every adapter dropout ran, in train mode
    assert {name: module.training for name, module in model.named_modules()} == before


def test_adapter_dropout_alone_makes_the_mc_passes_differ(tokenizer, corpora, collate):
    base = dict(dropout=0.0, attention_dropout=0.0, activation_dropout=0.0)
    (batch,), *_ = dev_batches(corpora, collate)
    with pytest.raises(ValueError, match="every dropout rate of the model is 0"):
        UncertaintyReward("entsent", 2).check_model(lora(build_model("tiny", tokenizer, **base), dropout=0.0))
    model = lora(build_model("tiny", tokenizer, **base), dropout=0.5)
    reward = UncertaintyReward("entsent", 4)
    reward.check_model(model)  # the adapters' dropout is what MC dropout samples here
    with mc_dropout(model, seed=0):
        passes = reward._pass_sums(model, batch, 4, replicate=False)
    assert len(set(passes.tolist())) == 4


def trained_state(model) -> tuple[torch.optim.Optimizer, dict[str, torch.Tensor | None]]:
    """An optimizer with state after one step, and .grad set on half the adapter parameters (None elsewhere)."""
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=1e-3)
    for p in trainable:
        p.grad = torch.randn_like(p)
    optimizer.step()
    for i, p in enumerate(trainable):
        p.grad = torch.randn_like(p) if i % 2 else None
    return optimizer, {n: p.grad for n, p in model.named_parameters()}


@pytest.mark.parametrize(
    "reward",
    [UncertaintyReward("enteos", 2, eos_token_id=0), GradientCosineReward(), GradientCosineReward(dropout=True)],
    ids=["mc-dropout", "cosine", "cosine-dropout"])
def test_reward_passes_leave_grads_optimizer_and_weights_untouched(tokenizer, corpora, collate, reward):
    model = lora(build_model("tiny", tokenizer))
    optimizer, grads = trained_state(model)
    grad_values = {n: None if g is None else g.clone() for n, g in grads.items()}
    optimizer_state = copy.deepcopy(optimizer.state_dict())
    weights = {n: p.detach().clone() for n, p in model.named_parameters()}
    batches = dev_batches(corpora, collate)
    reward.compute(model, batches, batches if reward.needs_train_batches else None)
    for name, parameter in model.named_parameters():
        assert parameter.grad is grads[name], name  # the same tensor, or None still None
        if grads[name] is not None:
            assert torch.equal(parameter.grad, grad_values[name]), name
        assert torch.equal(parameter, weights[name]), name
    after = optimizer.state_dict()
    assert after["param_groups"] == optimizer_state["param_groups"]
    for key, state in optimizer_state["state"].items():
        assert all(torch.equal(v, after["state"][key][k]) for k, v in state.items())


def test_gradient_cosine_of_a_lora_model_compares_adapter_gradients(tokenizer, corpora, collate):
    model = lora(build_model("tiny", tokenizer))
    trainable = GradientCosineReward.trainable_parameters(model)
    names = {id(p): n for n, p in model.named_parameters()}
    assert trainable and all("lora_" in names[id(p)] for p in trainable)
    assert sum(p.numel() for p in trainable) < model.num_parameters() / 5
    batches = dev_batches(corpora, collate)
    cosine = GradientCosineReward().compute(model, batches, batches)["cosine"]
    assert np.allclose(np.diag(cosine), 1.0) and np.isfinite(cosine).all()  # each batch against itself
    assert not np.allclose(cosine, 1.0)


def lora_trainer(tokenizer, corpora, output_dir, **overrides) -> UATTrainer:
    torch.manual_seed(0)
    model = get_peft_model(build_model("tiny", tokenizer),
                           LoraConfig(r=4, lora_alpha=8, target_modules=TARGETS, lora_dropout=0.1))
    settings = dict(strategy="multiuat", measure="entsent", mc_samples=2, update_every=2, scorer_lr=1e-2,
                    max_steps=4, max_tokens=300, learning_rate=1e-2, report_to=[], use_cpu=True, seed=5,
                    disable_tqdm=True, save_strategy="no", logging_steps=100)
    args = UATConfig(output_dir=str(output_dir), **(settings | overrides))
    dev = {name: ds.select(range(8)) for name, ds in corpora["dev"].items()}
    return UATTrainer(model, args, train_corpora=corpora["train"], dev_corpora=dev, processing_class=tokenizer)


def adapter_weights(trainer) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in trainer.model.named_parameters()}


def test_uat_trainer_multiuat_on_a_lora_model_trains_only_the_adapters(tokenizer, corpora, tmp_path):
    trainer = lora_trainer(tokenizer, corpora, tmp_path / "run")
    before = adapter_weights(trainer)
    trainer.train()
    after = adapter_weights(trainer)
    changed = {n for n in before if not torch.equal(before[n], after[n])}
    assert changed and all("lora_" in n for n in changed)
    assert {n for n in before if "lora_B" in n} <= changed  # every adapter moved (lora_B starts at zero)
    history = trainer.corpus_distribution.history
    assert [record["step"] for record in history] == [2, 4]
    assert not np.allclose(trainer.corpus_distribution.probabilities, trainer.corpus_distribution.prior)


def test_lora_run_resumes_exactly_from_its_checkpoint(tokenizer, corpora, tmp_path):
    full = lora_trainer(tokenizer, corpora, tmp_path, save_strategy="steps", save_steps=2)
    full.train()
    checkpoint = tmp_path / "checkpoint-2"
    assert (checkpoint / "adapter_model.safetensors").is_file()  # the adapters are what a LoRA checkpoint holds
    assert not (checkpoint / "model.safetensors").exists()
    resumed = lora_trainer(tokenizer, corpora, tmp_path, save_strategy="steps", save_steps=2)
    resumed.train(resume_from_checkpoint=str(checkpoint))
    expected, got = adapter_weights(full), adapter_weights(resumed)
    assert all(torch.equal(expected[n], got[n]) for n in expected)
    assert np.array_equal(full.corpus_distribution.probabilities, resumed.corpus_distribution.probabilities)
    assert [r["step"] for r in resumed.corpus_distribution.history] == [2, 4]
