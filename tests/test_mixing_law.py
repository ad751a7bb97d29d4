"""Strategy ``mixing-law``: the update math, the law fit, the probe mixes, the trainer wiring and exact resume."""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict, fields

import numpy as np
import pytest
import torch

from uat_hf.cli.parsing import parse_arguments
from uat_hf.evaluation.plotting import plot_run
from uat_hf.models.presets import build_model
from uat_hf.strategies.mixing_law.law import (
    MixingLawSettings,
    aioli_step,
    column_sum_errors,
    fit_law,
    gate_law,
    law_step,
    normalise_law,
    probe_base,
    probe_mixes,
    probe_order,
    smooth_law,
)
from uat_hf.strategies.mixing_law.strategy import MixingLaw
from uat_hf.strategies.registry import build_distribution
from uat_hf.training.uat_config import UATConfig
from uat_hf.training.uat_trainer import UATTrainer
from uat_hf.utils.checkpoints import BALANCING_STATE_FILE, HISTORY_FILE

# ---------------------------------------------------------------------------------------------- the math


def test_update_normalisation_and_smoothing_match_a_hand_computation():
    law = np.array([[0.2, -0.1], [0.4, 0.1]])
    # Aioli: shift by the minimum (-0.1) to [[0.3, 0], [0.5, 0.2]], divide by the sum 1.0
    np.testing.assert_allclose(normalise_law(law), [[0.3, 0.0], [0.5, 0.2]])
    np.testing.assert_array_equal(normalise_law(np.zeros((2, 2))), np.zeros((2, 2)))
    previous = np.array([[0.1, 0.1], [0.1, 0.7]])
    np.testing.assert_allclose(smooth_law(previous, normalise_law(law), 0.5), [[0.2, 0.05], [0.3, 0.45]])
    np.testing.assert_array_equal(smooth_law(None, law, 0.5), law)

    p, prior, smoothed = np.array([0.6, 0.4]), np.array([0.7, 0.3]), np.array([[0.2, 0.05], [0.3, 0.45]])
    # column sums 0.5, 0.5 (equal: no pull from the law); eta 1, anchor 0.25:
    # logits = 0.75·(log p + 0.5) + 0.25·log prior
    logits = 0.75 * (np.log([0.6, 0.4]) + 0.5) + 0.25 * np.log([0.7, 0.3])
    expected = np.exp(logits) / np.exp(logits).sum()
    np.testing.assert_allclose(law_step(p, prior, smoothed, eta=1.0, anchor=0.25), expected, rtol=1e-12)
    # without the anchor it is Aioli's p ∝ p·exp(η Σ_i A_ij)
    gains = np.array([[0.1, 0.3], [0.0, 0.2]]).sum(axis=0)
    hand = np.array([0.6, 0.4]) * np.exp(2.0 * gains)
    np.testing.assert_allclose(law_step(p, prior, np.array([[0.1, 0.3], [0.0, 0.2]]), 2.0, 0.0), hand / hand.sum())


def test_the_anchor_bounds_how_far_a_constant_law_takes_p_from_the_prior():
    prior = np.array([0.5, 0.3, 0.2])
    law = normalise_law(np.array([[0.0, 0.0, 1.0], [0.0, 0.0, 1.0], [0.0, 0.0, 1.0]]))
    p = prior.copy()
    for _ in range(200):
        p = law_step(p, prior, law, eta=1.0, anchor=0.25)
    # fixed point: prior · exp(η (1 − λ)/λ · Σ_i A_ij) = prior · exp(3 · (0, 0, 1)), normalised
    fixed = prior * np.exp(3.0 * law.sum(axis=0))
    np.testing.assert_allclose(p, fixed / fixed.sum(), rtol=1e-9)


def test_probe_mixes_are_distributions_that_average_to_p():
    p = np.array([0.5, 0.3, 0.2])
    mixes = probe_mixes(p, 0.5)  # every p_l >= f/N: the base r is uniform
    np.testing.assert_allclose(mixes[0], [0.5 + 0.5 * (2 / 3), 0.3 - 0.5 / 3, 0.2 - 0.5 / 3])
    np.testing.assert_allclose(mixes.mean(axis=0), p, atol=1e-15)
    np.testing.assert_allclose(mixes.sum(axis=1), 1.0)
    # a corpus below f/N keeps what it has: water-filled base r = (0.45, 0.45, 0.1)
    small = np.array([0.7, 0.25, 0.05])
    np.testing.assert_allclose(probe_base(small, 0.5), [0.45, 0.45, 0.1])
    mixes = probe_mixes(small, 0.5)
    assert (mixes >= 0).all() and mixes[0, 2] == 0.0 and mixes[2, 2] == pytest.approx(0.5)
    np.testing.assert_allclose(mixes.mean(axis=0), small + 0.5 * (np.full(3, 1 / 3) - [0.45, 0.45, 0.1]))


def test_probe_order_is_seeded_and_palindromic():
    order = probe_order(4, 3, np.random.default_rng([1, 2, 3]))
    assert sorted(order[:4]) == [0, 1, 2, 3] and order[4:8] == order[:4][::-1] and order[8:] == order[:4]
    assert order == probe_order(4, 3, np.random.default_rng([1, 2, 3]))


def simulate(true_law, p, factor, order, window_steps, trend=None):
    """Dev losses before and after each window under the linear law (plus a trend in time)."""
    mixes = probe_mixes(p, factor)
    losses = [np.array([5.0, 4.0, 3.0])]
    for m, j in enumerate(order):
        fall = window_steps * true_law @ mixes[j] + (0 if trend is None else trend * m)
        losses.append(losses[-1] - fall)
    return np.array(losses), mixes


def test_the_fit_recovers_a_known_law_and_a_linear_trend_cannot_move_p():
    rng = np.random.default_rng(0)
    true_law = rng.normal(0.01, 0.02, size=(3, 3))
    p = np.array([0.5, 0.3, 0.2])
    order = probe_order(3, 2, rng)
    losses, mixes = simulate(true_law, p, 0.5, order, window_steps=4)
    np.testing.assert_allclose(fit_law(losses, order, mixes, 4), true_law, atol=1e-12)

    # A dev loss that falls faster or slower as the phase goes on: palindromic sweeps give every corpus the same
    # mean window position, so the fit is off by a constant per dev corpus, the same for every column.
    trended, _ = simulate(true_law, p, 0.5, order, window_steps=4, trend=np.array([0.03, -0.02, 0.01]))
    error = fit_law(trended, order, mixes, 4) - true_law
    np.testing.assert_allclose(error - error[:, :1], 0.0, atol=1e-12)
    assert np.abs(error).max() > 1e-3  # the trend is there, and cancels


def test_mixing_law_state_runs_one_phase_and_moves_p_toward_the_corpus_that_helps():
    settings = MixingLawSettings(window_steps=2, sweeps=2, ema=0.0, anchor=0.0)
    distribution = build_distribution("mixing-law", {"a": 5, "b": 3, "c": 2}, probabilities=[0.5, 0.3, 0.2],
                                      settings=settings)
    law = distribution.proposer
    true_law = np.array([[0.01, 0.0, 0.05], [0.0, 0.01, 0.05], [0.0, 0.0, 0.05]])  # corpus 2 helps everyone
    rng = np.random.default_rng(0)
    assert not law.measures_at(3, 5) and law.measures_at(5, 5)
    loss = np.array([5.0, 4.0, 3.0])
    assert distribution.measured(5, loss, rng=rng) is None
    steps = 5
    while True:
        q = distribution.probabilities
        assert q.tolist() in probe_mixes(distribution.p, 0.5).tolist()  # the sampler draws the window's probe mix
        np.testing.assert_array_equal(distribution.p, [0.5, 0.3, 0.2])  # p itself stays until the law is fitted
        steps += settings.window_steps
        assert law.measures_at(steps, 5)
        loss = loss - settings.window_steps * true_law @ q
        result = distribution.measured(steps, loss, rng=rng)
        if result is not None:
            break
    assert steps == 5 + settings.probe_steps(3)
    np.testing.assert_allclose(result["mixing-law"]["law"], true_law, atol=1e-12)
    p = distribution.p
    assert law.phase is None and p[2] > 0.2 and p.sum() == pytest.approx(1)
    np.testing.assert_array_equal(distribution.probabilities, p)
    assert result["probabilities"] == dict(zip("abc", p.tolist()))


def test_distribution_state_round_trips_mid_phase_and_refuses_a_corrupt_p():
    settings = MixingLawSettings(window_steps=1, sweeps=1)
    distribution = build_distribution("mixing-law", {"a": 50, "b": 30, "c": 20}, settings=settings)
    rng = np.random.default_rng(0)
    assert distribution.measured(5, [3.0, 2.0, 1.0], rng=rng) is None
    assert distribution.measured(6, [2.9, 2.0, 1.0], rng=rng) is None
    assert distribution.version == 2 and not np.array_equal(distribution.probabilities, distribution.prior)
    state = json.loads(json.dumps(distribution.state_dict()))
    assert state["probabilities"] == distribution.prior.tolist()  # p, not the probe mix of the window in progress
    restored = build_distribution("mixing-law", {"a": 50, "b": 30, "c": 20}, settings=settings)
    restored.load_state_dict(state)
    assert restored.state_dict() == distribution.state_dict()
    np.testing.assert_array_equal(restored.probabilities, distribution.probabilities)  # the same probe mix
    corrupt = json.loads(json.dumps(state))
    corrupt["strategy_state"]["phase"]["order"] = [0, 0, 1]  # not one sweep over the 3 corpora
    with pytest.raises(ValueError, match="Inconsistent mixing-law state: the probe phase .* corrupt"):
        restored.load_state_dict(corrupt)
    corrupt = dict(state, version=0)  # p never changed, yet the window's probe mix is not p
    with pytest.raises(ValueError, match="Inconsistent corpus distribution state"):
        build_distribution("mixing-law", {"a": 50, "b": 30, "c": 20}, settings=settings).load_state_dict(
            dict(corrupt, probabilities=[0.5, 0.25, 0.25]))
    other = build_distribution("mixing-law", {"a": 50, "b": 30, "c": 20},
                               settings=MixingLawSettings(window_steps=2, sweeps=1))
    with pytest.raises(ValueError, match="same mixing-law settings"):
        other.load_state_dict(json.loads(json.dumps(distribution.state_dict())))


# ---------------------------------------------------------------------------------------------- settings


def test_mixing_law_settings_are_refused_with_other_strategies_and_checked_with_it(tmp_path):
    with pytest.raises(ValueError, match=r"strategy_settings \['eta'\] given, but strategy 'multiuat' has no "):
        UATConfig(output_dir=str(tmp_path), strategy="multiuat", strategy_settings={"eta": 0.3})
    with pytest.raises(ValueError, match=r"--mixing-law.sweeps sets a setting of strategy 'mixing-law', but strategy "
                                         "is 'proportional'"):
        parse_arguments(["--output_dir", str(tmp_path), "--mixing-law.sweeps", "2"])
    with pytest.raises(ValueError, match=r"mixing-law.factor must be in \(0, 1\], got 0.0"):
        UATConfig(output_dir=str(tmp_path), strategy="mixing-law", strategy_settings={"factor": 0.0})
    with pytest.raises(ValueError, match="strategy 'mixing-law' has no setting 'emma'; its settings are window_steps"):
        UATConfig(output_dir=str(tmp_path), strategy="mixing-law", strategy_settings={"emma": 0.1})
    config = UATConfig(output_dir=str(tmp_path), strategy="mixing-law", strategy_settings={"ema": 0.1},
                       scorer_prior_temperature=2)
    assert config.is_dynamic and MixingLaw.strategy_settings(config) == MixingLawSettings(ema=0.1)
    distribution = config.corpus_distribution({"a": 90, "b": 10})
    assert isinstance(distribution.proposer, MixingLaw)
    assert distribution.proposer.settings == MixingLawSettings(ema=0.1)
    np.testing.assert_allclose(distribution.prior, [0.75, 0.25])  # τ = 2: 3:1


def test_the_settings_object_itself_is_accepted_as_peft_takes_its_configs(tmp_path):
    config = UATConfig(output_dir=str(tmp_path), strategy="mixing-law", strategy_settings=MixingLawSettings(sweeps=1))
    assert MixingLaw.strategy_settings(config) == MixingLawSettings(sweeps=1)
    assert config.strategy_settings == asdict(MixingLawSettings(sweeps=1))  # in full, as a recipe can hold it
    with pytest.raises(ValueError, match="strategy_settings is a MixingLawSettings, but strategy 'multidds-s' takes "
                                         "MultiDDSSettings"):
        UATConfig(output_dir=str(tmp_path), strategy="multidds-s", strategy_settings=MixingLawSettings())


def test_a_recipe_or_command_line_with_the_older_flat_names_loads_as_the_settings_with_a_warning(tmp_path):
    """mixing_law_* were UATConfig fields: a saved run's recipe.yaml that names them still loads (and the run's
    recipe is saved in the new spelling)."""
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("corpus_dir: bundled:multidomain-en-de\nsource_lang: en\ntarget_lang: de\n"
                      "strategy: mixing-law\nmixing_law_sweeps: 1\nmixing_law_eta: 0.5\n")
    with pytest.warns(FutureWarning) as warned:
        training, *_, saved = parse_arguments(["--config", str(recipe), "--output_dir", str(tmp_path / "out"),
                                               "--mixing_law_eta=2"])
    assert sorted(str(w.message).split(" is now")[0] for w in warned) == [
        "--mixing_law_eta", f"mixing_law_eta (in recipe {recipe})", f"mixing_law_sweeps (in recipe {recipe})"]
    assert training.strategy_settings == {"sweeps": 1, "eta": 2.0}  # the command line wins, typed
    assert MixingLaw.strategy_settings(training) == MixingLawSettings(sweeps=1, eta=2.0)
    assert saved.to_dict()["strategy_settings"] == {"sweeps": 1, "eta": 2.0}
    assert not any(key.startswith("mixing_law_") for key in saved.to_dict())
    with pytest.warns(FutureWarning, match="--mixing_law_ema is now a setting of its strategy: --mixing-law.ema"), \
            pytest.raises(ValueError, match="strategy is 'multiuat'"):
        parse_arguments(["--output_dir", str(tmp_path / "out"), "--strategy", "multiuat", "--mixing_law_ema", "0.1"])


# ---------------------------------------------------------------------------------------------- training


class RecordingTrainer(UATTrainer):
    """Remembers every batch it trains on."""

    def training_step(self, model, inputs, num_items_in_batch=None):
        self.trained_batches = getattr(self, "trained_batches", [])
        self.trained_batches.append(inputs["input_ids"].tolist())
        return super().training_step(model, inputs, num_items_in_batch)


def run(corpora, tokenizer, output, resume=None, max_steps=19, **overrides):
    torch.manual_seed(0)
    model = build_model("tiny", tokenizer)
    settings = dict(
        output_dir=str(output), strategy="mixing-law", strategy_settings={"window_steps": 2, "sweeps": 1},
        update_every=9, max_steps=max_steps, max_tokens=300, learning_rate=2e-3, warmup_steps=2, dev_batch_tokens=200,
        save_strategy="steps", save_steps=10, report_to=[], use_cpu=True, seed=7, disable_tqdm=True,
        logging_steps=100, mix_corpora=True,
    )
    settings.update(overrides)
    settings["strategy_settings"].update(settings.pop("law", {}))
    trainer = RecordingTrainer(model, UATConfig(**settings), train_corpora=corpora["train"],
                               dev_corpora=corpora["dev"], processing_class=tokenizer)
    trainer.train(resume_from_checkpoint=resume)
    history = [json.loads(line) for line in (output / HISTORY_FILE).read_text().splitlines()]
    return trainer, history


def test_a_run_killed_inside_a_probe_window_resumes_exactly(tmp_path, corpora, tokenizer):
    full, full_history = run(corpora, tokenizer, tmp_path / "full")
    # 4 corpora × 1 sweep × 2 steps: the probe windows measure at 9, 11, 13, 15, 17 and the law updates at 17.
    assert [h["step"] for h in full_history] == [17]
    record = full_history[0]["mixing-law"]
    assert record["probe_start"] == 9 and sorted(record["probe_order"]) == [0, 1, 2, 3]
    assert len(record["probe_losses"]) == 5 and np.array(record["law"]).shape == (4, 4)
    assert record["measure"] == "dev-loss" and set(record["gains"]) == set(full_history[0]["probabilities"])
    record = full_history[0]
    assert record["probabilities"] != dict(zip(full.corpus_distribution.names, full.corpus_distribution.prior))
    saved = json.loads((tmp_path / "full" / "checkpoint-10" / BALANCING_STATE_FILE).read_text())
    phase = saved["distribution"]["strategy_state"]["phase"]
    assert phase["start"] == 9 and len(phase["losses"]) == 1  # step 10: inside the first window (steps 10-11)

    partial_dir = tmp_path / "partial"
    shutil.copytree(tmp_path / "full" / "checkpoint-10", partial_dir / "checkpoint-10")
    # as a checkpoint saved before the settings left UATConfig holds them: flat mixing_law_* fields, None a default
    state_file = partial_dir / "checkpoint-10" / BALANCING_STATE_FILE
    state = json.loads(state_file.read_text())
    assert state["settings"].pop("strategy_settings") == asdict(MixingLawSettings(window_steps=2, sweeps=1))
    state["settings"].update({f"mixing_law_{f.name}": None for f in fields(MixingLawSettings)},
                             mixing_law_window_steps=2, mixing_law_sweeps=1)
    state_file.write_text(json.dumps(state))
    with pytest.raises(ValueError, match=r"with strategy_settings=.*'eta': 1.0.* \(this run gives .*'eta': 0.5"):
        run(corpora, tokenizer, partial_dir, resume=True, law={"eta": 0.5})
    resumed, resumed_history = run(corpora, tokenizer, partial_dir, resume=True)

    assert resumed.trained_batches == full.trained_batches[10:]
    drop = [{k: v for k, v in h.items() if k != "seconds"} for h in full_history]
    assert [{k: v for k, v in h.items() if k != "seconds"} for h in resumed_history] == drop
    assert resumed.corpus_distribution.state_dict() == full.corpus_distribution.state_dict()
    assert [{k: v for k, v in h.items() if k != "seconds"} for h in resumed.corpus_distribution.history] == drop
    assert resumed.corpus_sampler.state_dict() == full.corpus_sampler.state_dict()
    for (name, p), q in zip(full.model.named_parameters(), resumed.model.parameters()):
        torch.testing.assert_close(p, q, rtol=0, atol=0, msg=name)

    written = plot_run(tmp_path / "full")
    assert [path.name for path in written][-1] == "mixing_law.png" and written[-1].stat().st_size > 0


def test_probe_windows_longer_than_update_every_are_refused_before_training(tmp_path, corpora, tokenizer):
    with pytest.raises(ValueError, match=r"probe windows take 8 steps per update .* update_every=8"):
        run(corpora, tokenizer, tmp_path / "x", update_every=8)


def test_a_checkpoint_inside_a_probe_window_after_an_update_resumes_exactly(tmp_path, corpora, tokenizer):
    """Issue 34: a checkpoint inside a later probe window used to hold the window's probe mix as p, which did not match
    the history's last record (p after the update), so every mixing-law run with checkpoints was unresumable."""
    full, full_history = run(corpora, tokenizer, tmp_path / "full", max_steps=27)
    # Phases measure at 9, 11, ..., 17 (update) and 18, 20, ..., 26 (update); checkpoint-20 is inside window 1.
    assert [h["step"] for h in full_history] == [17, 26]
    saved = json.loads((tmp_path / "full" / "checkpoint-20" / BALANCING_STATE_FILE).read_text())
    phase = saved["distribution"]["strategy_state"]["phase"]
    assert phase["start"] == 18 and len(phase["losses"]) == 2
    assert saved["distribution"]["probabilities"] == list(full_history[0]["probabilities"].values())  # p, not a mix

    partial_dir = tmp_path / "partial"
    shutil.copytree(tmp_path / "full" / "checkpoint-20", partial_dir / "checkpoint-20")
    shutil.copy(tmp_path / "full" / HISTORY_FILE, partial_dir / HISTORY_FILE)  # holds the step-26 record too
    resumed, resumed_history = run(corpora, tokenizer, partial_dir, resume=True, max_steps=27)

    assert resumed.trained_batches == full.trained_batches[20:]
    drop = [{k: v for k, v in h.items() if k != "seconds"} for h in full_history]
    assert [{k: v for k, v in h.items() if k != "seconds"} for h in resumed_history] == drop
    assert resumed.corpus_distribution.state_dict() == full.corpus_distribution.state_dict()
    assert resumed.corpus_sampler.state_dict() == full.corpus_sampler.state_dict()
    for (name, p), q in zip(full.model.named_parameters(), resumed.model.parameters()):
        torch.testing.assert_close(p, q, rtol=0, atol=0, msg=name)


def batch_corpora(trained_batches, corpora, tokenizer) -> list[list[str]]:
    """The corpus of every row of every trained batch, found by its (unpadded) input ids."""
    owner = {tuple(ids): name for name, ds in corpora["train"].items() for ids in ds["input_ids"]}
    pad = tokenizer.pad_token_id

    def unpadded(row):
        while row and row[-1] == pad:
            row = row[:-1]
        return tuple(row)

    return [[owner[unpadded(row)] for row in batch] for batch in trained_batches]


@pytest.mark.parametrize("accumulation", [1, 2])
def test_every_batch_of_a_probe_window_comes_from_that_windows_mix(tmp_path, corpora, tokenizer, accumulation):
    """Issue 36: the first batch of each window used to be drawn with the previous window's mix (the prefetch lag).
    With factor 1 a window's mix is its corpus alone, so every batch the trainer trains in window m is from order[m];
    and the law is fitted on the shares the windows really drew."""
    full, history = run(corpora, tokenizer, tmp_path / "run", max_steps=18, law={"factor": 1.0}, mix_corpora=False,
                        save_strategy="no", gradient_accumulation_steps=accumulation)
    record = history[0]["mixing-law"]
    names = full.corpus_distribution.names
    order = [names[j] for j in record["probe_order"]]
    rows = batch_corpora(full.trained_batches, corpora, tokenizer)
    steps = [rows[i:i + accumulation] for i in range(0, len(rows), accumulation)]  # optimizer step s: steps[s - 1]
    for m, name in enumerate(order):  # window m trains steps 10 + 2m and 11 + 2m
        for step in (10 + 2 * m, 11 + 2 * m):
            assert {c for batch in steps[step - 1] for c in batch} == {name}, (m, step)
    realised = np.array(record["realised_mixes"])
    np.testing.assert_array_equal(realised, np.eye(4)[record["probe_order"]])


def test_the_law_is_fitted_on_the_shares_each_window_drew(tmp_path, corpora, tokenizer):
    """One corpus per batch: a 2-step window draws 2 batches, far from its nominal mix; the record's realised shares
    are those of the batches trained in each window, and the law is fitted on them."""
    full, history = run(corpora, tokenizer, tmp_path / "run", max_steps=18, mix_corpora=False, save_strategy="no")
    record = history[0]["mixing-law"]
    names = full.corpus_distribution.names
    rows = batch_corpora(full.trained_batches, corpora, tokenizer)
    realised = np.array(record["realised_mixes"])
    for m in range(4):
        drawn = [c for batch in rows[9 + 2 * m:11 + 2 * m] for c in batch]  # steps 10 + 2m, 11 + 2m
        np.testing.assert_allclose(realised[m], [drawn.count(n) / len(drawn) for n in names], rtol=1e-12)
    mixes = np.array(record["probe_mixes"])
    assert not np.allclose(realised, mixes[record["probe_order"]], atol=0.05)
    np.testing.assert_allclose(record["law"], fit_law(np.array(record["probe_losses"]), record["probe_order"],
                                                      mixes, 2, realised), rtol=1e-10)


# ---------------------------------------------------------------------------------------------- signal and noise

HELPS_EVERYONE = 0.01 * np.eye(4) + np.array([0.0, 0.0, 0.0, 0.05])[None, :]  # corpus 3 lowers every dev loss


def synthetic_run(settings, draws="exact", report=True, updates=10, random_losses=None):
    """The strategy driven as the callback and the sampler drive it, on dev losses that follow ``HELPS_EVERYONE``
    (``random_losses``: i.i.d. losses of that spread instead). ``draws``: "exact" (every step trains on its planned
    mix) or "one" (one corpus per batch, one batch per step, drawn from the planned mix); ``report``: the sampler
    tells the strategy what each step drew. The largest distance of p from the prior at any update, and the last p."""
    prior = np.array([0.4, 0.3, 0.2, 0.1])
    distribution = build_distribution("mixing-law", {"a": 40, "b": 30, "c": 20, "d": 10}, settings=settings)
    strategy = distribution.proposer
    strategy.check_training(100)
    rng = np.random.default_rng(0)
    loss, farthest = np.full(4, 5.0 if random_losses is None else 3.0), 0.0
    for update in range(updates):
        step = 100 * (update + 1)
        distribution.measured(step, loss, rng=rng)
        while strategy.phase is not None:
            for _ in range(settings.window_steps):
                step += 1
                mix = distribution.planned_mix(distribution.p, step)
                counts = 10 * (mix if draws == "exact" else np.eye(4)[rng.choice(4, p=mix)])
                if report:
                    distribution.drawn(step, counts)
                loss = loss - HELPS_EVERYONE @ (counts / counts.sum())
            if random_losses is not None:
                loss = 3.0 + rng.normal(0.0, random_losses, 4)
            distribution.measured(step, loss, rng=rng)
        farthest = max(farthest, float(np.abs(distribution.p - prior).max()))
    return farthest, distribution


def test_pure_noise_leaves_p_at_the_prior_behind_the_evidence_gate():
    gated, distribution = synthetic_run(MixingLawSettings(evidence=3.0), updates=30, random_losses=0.05)
    assert gated <= 0.01
    se = distribution.history[-1]["mixing-law"]["column_sum_se"]
    assert set(se) == set("abcd") and all(v > 0 for v in se.values())
    ungated, _ = synthetic_run(MixingLawSettings(), updates=30, random_losses=0.05)
    assert ungated > 0.03  # without the gate the same noise walks p away (issue 36)


def test_a_real_effect_passes_the_gate_and_reaches_at_least_aiolis_p():
    _, gated = synthetic_run(MixingLawSettings(evidence=3.0))
    _, aioli = synthetic_run(MixingLawSettings(update="aioli"))
    record = gated.history[-1]["mixing-law"]
    assert max(record["column_sum_se"].values()) < 1e-12  # noise-free: nothing to shrink
    assert gated.p[3] >= aioli.p[3] > 0.4 and gated.p.argmax() == 3


def test_one_corpus_per_batch_is_fitted_on_the_shares_drawn_not_the_nominal_mix():
    _, exact = synthetic_run(MixingLawSettings())
    _, realised = synthetic_run(MixingLawSettings(), draws="one")
    _, nominal = synthetic_run(MixingLawSettings(), draws="one", report=False)
    assert realised.p[3] == pytest.approx(exact.p[3], abs=0.01)
    assert nominal.p[3] < exact.p[3] - 0.1  # what fitting the nominal mix cost
    assert realised.history[-1]["mixing-law"]["realised_mixes"] is not None
    assert nominal.history[-1]["mixing-law"]["realised_mixes"] is None


def test_the_residual_errors_ignore_a_linear_trend_and_are_zero_for_an_exact_law():
    rng = np.random.default_rng(1)
    true_law = rng.normal(0.01, 0.02, size=(3, 3))
    order = probe_order(3, 2, rng)
    losses, mixes = simulate(true_law, np.array([0.5, 0.3, 0.2]), 0.5, order, 4, trend=np.array([0.03, -0.02, 0.01]))
    np.testing.assert_allclose(column_sum_errors(losses, mixes[order], 4), 0.0, atol=1e-12)
    assert column_sum_errors(losses[:4], mixes[order[:3]], 4) is None  # one sweep: no residual
    noisy = losses + rng.normal(0, 0.01, losses.shape)
    errors = column_sum_errors(noisy, mixes[order], 4)
    law = fit_law(noisy, order, mixes, 4)
    gated = gate_law(law, errors, 2.0)
    centred = law.sum(axis=0) - law.sum(axis=0).mean()
    shrunk = gated.sum(axis=0) - law.sum(axis=0).mean()  # around the law's common level, which p ignores
    assert (np.abs(shrunk) < np.abs(centred)).all()
    np.testing.assert_allclose(shrunk, np.sign(centred) * np.maximum(np.abs(centred) - 2.0 * errors, 0.0), atol=1e-12)


def test_aioli_update_recomputes_p_from_uniform_and_the_new_knobs_are_checked():
    law = np.array([[0.1, 0.3], [0.0, 0.2]])
    expected = np.exp(2.0 * law.sum(axis=0)) / np.exp(2.0 * law.sum(axis=0)).sum()
    np.testing.assert_allclose(aioli_step(law, 2.0), expected)
    # law_step agrees with it only from a uniform p without anchor (and, over updates, only with ema 0)
    np.testing.assert_allclose(law_step(np.full(2, 0.5), np.full(2, 0.5), law, 2.0, 0.0), expected)
    with pytest.raises(ValueError, match="mixing-law.update must be one of"):
        MixingLawSettings(update="aioly")
    with pytest.raises(ValueError, match="mixing-law.evidence=2.0 needs mixing-law.sweeps >= 2"):
        MixingLawSettings(evidence=2.0, sweeps=1)
    with pytest.raises(ValueError, match="mixing-law.evidence must be >= 0"):
        MixingLawSettings(evidence=-1.0)
    config = UATConfig(output_dir="unused", strategy="mixing-law", strategy_settings={"update": "aioli",
                       "evidence": 3.0}, seed=5, use_cpu=True)
    assert MixingLaw.knobs(config) == {"settings": MixingLawSettings(update="aioli", evidence=3.0), "seed": 5}
    with pytest.raises(ValueError, match="mixing-law.update must be one of"):
        UATConfig(output_dir="unused", strategy="mixing-law", strategy_settings={"update": "aioly"}, use_cpu=True)
