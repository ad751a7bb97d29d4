"""The options of benchmarks/training_overhead.py and benchmarks/profile_update.py (scripts, not a package)."""

from __future__ import annotations

import json

import datasets
import pytest
import torch

from conftest import load_benchmark
from uat_hf.models.presets import build_model

overhead = load_benchmark("training_overhead")


def _four_domains() -> dict:
    """{split: {domain: Dataset}} with 100 train rows and 7 dev rows per domain, each row naming its origin."""
    def rows(domain: str, split: str, count: int) -> datasets.Dataset:
        return datasets.Dataset.from_dict({"origin": [f"{domain}/{split}/{i}" for i in range(count)]})

    domains = ["bible", "descriptions", "dictionary", "software"]
    return {"train": {d: rows(d, "train", 100) for d in domains}, "dev": {d: rows(d, "dev", 7) for d in domains}}


def test_corpora_16_cuts_every_domain_into_disjoint_slices_of_varied_sizes():
    data = overhead.named_corpora(_four_domains(), 16)
    assert len(data["train"]) == len(data["dev"]) == 16
    assert list(data["train"])[:5] == ["bible-0", "descriptions-0", "dictionary-0", "software-0", "bible-1"]
    for domain in ("bible", "software"):
        slices = [list(data["train"][f"{domain}-{j}"]["origin"]) for j in range(4)]
        # consecutive, disjoint, covering the domain's 100 rows, sized 1 : 2 : 3 : 4
        assert sum(slices, []) == [f"{domain}/train/{i}" for i in range(100)]
        assert [len(s) for s in slices] == [10, 20, 30, 40]
        # every slice measures on the domain's whole dev set
        assert all(list(data["dev"][f"{domain}-{j}"]["origin"]) == [f"{domain}/dev/{i}" for i in range(7)]
                   for j in range(4))


def test_corpora_up_to_the_bundled_count_keeps_them_and_too_many_is_refused():
    assert list(overhead.named_corpora(_four_domains(), 2)["dev"]) == ["bible", "descriptions"]
    assert overhead.named_corpora(_four_domains(), 4)["train"]["software"]["origin"][-1] == "software/train/99"
    with pytest.raises(ValueError, match="'bible' has too few training pairs .* raise --examples"):
        overhead.named_corpora(_four_domains(), 4 * 20)  # slices 1:...:20 of 100 rows: the 1-share is < half a row


def test_repeats_interleave_the_strategies():
    assert overhead.interleaved(["proportional", "multiuat", "multidds-s"], 3) == [
        "proportional", "multiuat", "multidds-s"] * 3


def test_summary_gives_medians_spreads_and_the_time_outside_updates():
    runs = [overhead.Run("proportional", s, 0.0, 0, t) for s, t in ((10.0, 900), (14.0, 1000), (11.0, 950))]
    runs += [overhead.Run("multiuat", s, u, 2) for s, u in ((12.0, 1.0), (11.5, 0.5), (30.0, 1.5))]
    runs.append(overhead.Run("multiuat", float("nan"), 0.0, 0, error="out of memory"))  # left out
    table = overhead.summarize(runs)
    assert table["proportional"] == pytest.approx({
        "e2e_median": 11.0, "e2e_min": 10.0, "e2e_max": 14.0, "updates_median": 0.0, "updates_min": 0.0,
        "updates_max": 0.0, "outside_median": 11.0, "outside_min": 10.0, "outside_max": 14.0,
        "train_tokens_median": 950})
    assert table["multiuat"]["e2e_median"] == 12.0  # a slow outlier moves the median, not the fastest, rows
    assert table["multiuat"]["updates_median"] == 1.0
    assert table["multiuat"]["outside_median"] == 11.0 and table["multiuat"]["outside_max"] == 28.5


def test_profile_parts_are_read_from_a_real_cprofile_run():
    import cProfile
    import pstats

    profile_update = load_benchmark("profile_update")
    model = torch.nn.Linear(4, 4)
    profiler = cProfile.Profile()
    profiler.enable()
    model(torch.ones(2, 4)).to(torch.float64).sum().item()
    profiler.disable()
    parts = profile_update.part_seconds(pstats.Stats(profiler))
    assert parts["model forward passes"] > 0 and parts["host->device copies (Tensor.to)"] > 0
    assert parts["host syncs (.item/.cpu/.tolist)"] > 0 and parts["whole update"] == 0.0


def test_nllb_600m_config_preset_is_an_m2m100_of_the_published_size(tokenizer):
    with torch.device("meta"):  # shapes only: 615M parameters would take seconds to initialise
        model = build_model("nllb-600m-config", tokenizer)
    config = model.config
    assert type(model).__name__ == "M2M100ForConditionalGeneration"
    assert (config.vocab_size, config.d_model, config.encoder_layers, config.decoder_layers) == (256206, 1024, 12, 12)
    assert (config.encoder_ffn_dim, config.encoder_attention_heads) == (4096, 16)
    assert 600e6 < model.num_parameters() < 630e6  # facebook/nllb-200-distilled-600M: 615M
    assert (config.pad_token_id, config.eos_token_id) == (tokenizer.pad_token_id, tokenizer.eos_token_id)
    assert config.decoder_start_token_id == tokenizer.eos_token_id


def test_nllb_600m_config_preset_refuses_a_tokenizer_larger_than_its_vocabulary(tokenizer):
    with pytest.raises(ValueError, match="'nllb-600m-config' has 100 vocabulary entries, fewer than the tokenizer's"):
        with torch.device("meta"):
            build_model("nllb-600m-config", tokenizer, vocab_size=100)


@pytest.mark.slow
def test_training_overhead_end_to_end_interleaves_repeats_over_n_corpora(tmp_path):
    """Two repeats of two strategies over 8 corpora, tiny model, 4 steps (~1 minute on 2 loaded cores)."""
    out = tmp_path / "result.json"
    result = overhead.main(["--preset", "tiny", "--examples", "300", "--vocab", "1000", "--corpora", "8",
                            "--max-tokens", "256", "--dev-batch-tokens", "128", "--mc-samples", "2", "--steps", "4",
                            "--update-every", "2", "--repeats", "2", "--strategies", "proportional", "multiuat",
                            "--json", str(out)])
    assert [r["strategy"] for r in result["runs"]] == ["proportional", "multiuat"] * 2
    assert [r["updates"] for r in result["runs"]] == [0, 2, 0, 2]
    assert len(result["corpora"]) == 8
    assert json.loads(out.read_text())["table"]["multiuat"]["updates_median"] > 0


def test_paired_overheads_compare_each_strategy_with_the_static_run_of_its_own_round():
    seconds = {"proportional": (100.0, 120.0, 90.0), "multiuat": (102.0, 121.2, 99.0),
               "multidds-s": (110.0, 132.0, 99.0)}
    runs = [overhead.Run(strategy, seconds[strategy][r], 0.0, 0)
            for r in range(3) for strategy in ("proportional", "multiuat", "multidds-s")]
    paired = overhead.paired_overheads(runs)
    # a slow round (120 s static) does not show as overhead: each ratio is taken within its round
    assert paired["multiuat"] == pytest.approx([0.02, 0.01, 0.10])
    assert paired["multidds-s"] == pytest.approx([0.10, 0.10, 0.10])
    assert "proportional" not in paired
    failed = runs[:3] + [overhead.Run("proportional", 50.0, 0.0, 0),
                         overhead.Run("multiuat", 1.0, 0.0, 0, error="oom")]
    assert overhead.paired_overheads(failed)["multiuat"] == pytest.approx([0.02])


def test_mixing_law_sweeps_set_the_probe_phase_that_must_fit_the_update_interval(capsys):
    """Two default sweeps probe 12 steps at N = 2, too many for an update every 7 steps; one sweep probes 6."""
    setup = ["--preset", "tiny", "--examples", "200", "--vocab", "800", "--corpora", "2", "--max-tokens", "256",
             "--dev-batch-tokens", "128", "--steps", "14", "--update-every", "7", "--repeats", "1",
             "--strategies", "proportional", "mixing-law", "--no-analytic"]
    with pytest.raises(SystemExit):
        overhead.main(setup)
    assert "mixing-law probes 12 steps per update at N=2 with --mixing-law-sweeps 2" in capsys.readouterr().err
    result = overhead.main([*setup, "--mixing-law-sweeps", "1"])
    assert [(r["strategy"], r["updates"]) for r in result["runs"]] == [("proportional", 0), ("mixing-law", 1)]
