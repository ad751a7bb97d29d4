"""A real 2-process `accelerate launch` on CPU (gloo): rank-identical balancing, work split across ranks."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import launch_two_machines, launch_two_ranks

HERE = Path(__file__).parent


def json_lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def rank_traces(folder: Path) -> list[list[dict]]:
    """Both ranks' per-step records (``rank<r>.jsonl``), after checking that both finished in a world of 2."""
    assert all(json.loads((folder / f"done{r}").read_text())["world"] == 2 for r in (0, 1))
    return [json_lines(folder / f"rank{r}.jsonl") for r in (0, 1)]


@pytest.mark.distributed
def test_multiuat_two_ranks_agree_and_split_the_passes(tmp_path):
    launch_two_ranks(HERE / "distributed" / "multiuat_run.py", tmp_path)
    ranks = rank_traces(tmp_path)
    assert [r["step"] for r in ranks[0]] == [1, 2, 3, 4, 5, 6] == [r["step"] for r in ranks[1]]
    for a, b in zip(*ranks):
        assert a["p"] == b["p"]  # bit-identical probabilities after every step (and update)
        assert a["sampler"] == b["sampler"]  # same epoch, schedule and positions: same corpus draws
    assert ranks[0][0]["p"] != ranks[0][-1]["p"]  # the updates did move p
    history = json_lines(tmp_path / "run" / "balancing_history.jsonl")
    assert [h["step"] for h in history] == [2, 4, 6]  # written once, by the main process
    # K·N passes per update split across the ranks, not duplicated: pass k of corpus n (item n·K + k) runs on rank
    # (n·K + k) mod 2, over every sub-batch of that corpus's dev batch (3 updates × 4 corpora × 3 passes).
    shapes = ranks[0][-1]["sub_batches"]
    assert len(shapes) == 3 and shapes == ranks[1][-1]["sub_batches"]
    items = [[n for n in range(4) for k in range(3) if (n * 3 + k) % 2 == r] for r in (0, 1)]
    expected = [sum(shape[n] for shape in shapes for n in items[r]) for r in (0, 1)]
    assert [ranks[r][-1]["passes"] for r in (0, 1)] == expected
    assert sum(expected) == 3 * sum(map(sum, shapes))  # every pass over every sub-batch ran exactly once


@pytest.mark.distributed
def test_a_causal_lm_on_two_ranks_gets_identical_rewards_and_p(tmp_path):
    """Decoder-only model, prompt + completion corpora: the shifted rewards and p agree bit for bit on both ranks."""
    launch_two_ranks(HERE / "distributed" / "causal_run.py", tmp_path)
    ranks = rank_traces(tmp_path)
    assert [r["step"] for r in ranks[0]] == [1, 2, 3, 4, 5, 6] == [r["step"] for r in ranks[1]]
    for a, b in zip(*ranks):
        assert a["p"] == b["p"] and a["rewards"] == b["rewards"]
    assert ranks[0][-1]["rewards"] is not None and ranks[0][0]["p"] != ranks[0][-1]["p"]


@pytest.mark.distributed
def test_two_ranks_whose_health_checks_disagree_follow_the_main_process_caps(tmp_path):
    """corpus_health_action=down_weight: rank 0's checks find bible damaged at steps 2 and 4 (ratios 0.3, 0.2) and
    sound at 6, rank 1's the reverse (sound, sound, 0.5); both ranks cap, move and lift as rank 0 says."""
    launch_two_ranks(HERE / "distributed" / "health_run.py", tmp_path)
    ranks = rank_traces(tmp_path)
    assert [r["step"] for r in ranks[0]] == [1, 2, 3, 4, 5, 6] == [r["step"] for r in ranks[1]]
    for a, b in zip(*ranks):
        assert a["p"] == b["p"] and a["caps"] == b["caps"] and a["sampler"] == b["sampler"]
    history = json_lines(tmp_path / "run" / "balancing_history.jsonl")
    caps = [(r["step"], r["cap"]["bible"]["share"]) for r in history if "cap" in r]
    proportional = history[0]["probabilities"]["bible"]
    assert [step for step, _ in caps] == [2, 4, 6] and caps[2][1] is None
    assert [share for _, share in caps[:2]] == pytest.approx([0.3 * proportional, 0.2 * proportional], rel=1e-5)
    assert [r["caps"] for r in ranks[1]] == [{}, {"bible": caps[0][1]}, {"bible": caps[0][1]},
                                             {"bible": caps[1][1]}, {"bible": caps[1][1]}, {}]


@pytest.mark.distributed
def test_logged_loss_is_the_mean_loss_with_one_or_two_processes(tmp_path):
    """Transformers' encoder-decoders take **kwargs but ignore num_items_in_batch; the Trainer then multiplied
    their loss by the processes (16.1 instead of 8.05) and by the accumulation steps. Two processes with one batch
    each, and one process accumulating the same two batches, must both log the mean of the two batches' losses."""
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    result = subprocess.run([sys.executable, str(HERE / "distributed" / "loss_run.py"), str(one), "2"],
                            capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    launch_two_ranks(HERE / "distributed" / "loss_run.py", two, "1")
    runs = [json.loads((folder / "loss.json").read_text()) for folder in (one, two)]
    assert [run["world"] for run in runs] == [1, 2]
    assert runs[0]["reference"] == pytest.approx(runs[1]["reference"], rel=1e-6)  # the same two batches
    for run in runs:
        assert run["logged"] == pytest.approx(run["reference"], rel=1e-4)
        # The true throughput counts the examples of both batches, not per_device_train_batch_size (8) per batch.
        metrics = run["metrics"]
        assert metrics["train_samples_per_second"] * metrics["train_runtime"] == pytest.approx(run["examples"],
                                                                                               rel=1e-2)


@pytest.mark.distributed
def test_mixing_law_two_ranks_agree_inside_and_after_the_probe_windows(tmp_path):
    launch_two_ranks(HERE / "distributed" / "mixing_law_run.py", tmp_path)
    ranks = rank_traces(tmp_path)
    assert [r["step"] for r in ranks[0]] == list(range(1, 11)) == [r["step"] for r in ranks[1]]
    for a, b in zip(*ranks):
        assert a["p"] == b["p"]  # bit-identical probe mixes and p after every step
        assert a["sampler"] == b["sampler"]  # same corpus draws
        assert a["law"] == b["law"]  # same window order, dev losses, fitted law
    assert len({json.dumps(r["p"]) for r in ranks[0][4:9]}) == 5  # steps 5-8: four probe mixes, then p
    assert ranks[0][8]["p"] != ranks[0][0]["p"]  # the update at step 9 moved p
    history = json_lines(tmp_path / "run" / "balancing_history.jsonl")
    assert [h["step"] for h in history] == [9]  # written once, by the main process
    # 6 measurements (before and after each of the 4 windows, and the start of the next phase at step 10), each
    # over all sub-batches of the 4 dev batches: sub-batch k of a measurement on rank k mod 2, none twice.
    shapes = ranks[0][-1]["sub_batches"]
    assert len(shapes) == 6 and shapes == ranks[1][-1]["sub_batches"]
    expected = [sum(len(range(r, sum(shape), 2)) for shape in shapes) for r in (0, 1)]
    assert [ranks[r][-1]["forwards"] for r in (0, 1)] == expected
    assert sum(expected) == sum(map(sum, shapes))


@pytest.mark.distributed
def test_mixing_law_on_two_ranks_resumes_exactly_from_inside_a_probe_window(tmp_path):
    """On two processes: checkpoint-11 falls inside window 1 of the second probe phase (measurements at 5-9,
    the update at 9, then 10-14, the update at 14), after an update; resumed there, both ranks end as the
    uninterrupted run."""
    script = HERE / "distributed" / "mixing_law_run.py"
    launch_two_ranks(script, tmp_path / "full", "15", "11")
    shutil.copytree(tmp_path / "full" / "run" / "checkpoint-11", tmp_path / "resumed" / "run" / "checkpoint-11")
    shutil.copy(tmp_path / "full" / "run" / "balancing_history.jsonl", tmp_path / "resumed" / "run")
    saved = json.loads((tmp_path / "full" / "run" / "checkpoint-11" / "uat_balancing_state.json").read_text())
    assert saved["distribution"]["strategy_state"]["phase"]["start"] == 10  # inside the phase, after the update
    launch_two_ranks(script, tmp_path / "resumed", "15", "11", "resume")
    full, resumed = rank_traces(tmp_path / "full"), rank_traces(tmp_path / "resumed")
    for r in (0, 1):
        assert [step["step"] for step in resumed[r]] == [12, 13, 14, 15]
        for a, b in zip(full[r][-4:], resumed[r]):
            assert (a["p"], a["sampler"], a["law"]) == (b["p"], b["sampler"], b["law"])
        assert (tmp_path / "full" / f"weights{r}").read_text() == (tmp_path / "resumed" / f"weights{r}").read_text()
    drop = [{k: v for k, v in h.items() if k != "seconds"} for h in json_lines(tmp_path / "full" / "run" /
                                                                                "balancing_history.jsonl")]
    assert [h["step"] for h in drop] == [9, 14]
    assert [{k: v for k, v in h.items() if k != "seconds"}
            for h in json_lines(tmp_path / "resumed" / "run" / "balancing_history.jsonl")] == drop


@pytest.mark.distributed
def test_two_machines_agree_at_every_step_and_resume_exactly(tmp_path):
    """`accelerate launch --num_machines 2` with one process per machine, both machines on this host: p and the
    corpus draws are bit-identical on the two machines, and the run resumed from its step-3 checkpoint retraces the
    uninterrupted one's steps 4-6 and ends with the same weights."""
    launch_two_machines(HERE / "distributed" / "two_machines_run.py", tmp_path)
    full = rank_traces(tmp_path)
    resumed = [json_lines(tmp_path / f"rank-resumed-{r}.jsonl") for r in (0, 1)]
    assert [r["step"] for r in full[0]] == [1, 2, 3, 4, 5, 6] == [r["step"] for r in full[1]]
    assert [r["step"] for r in resumed[0]] == [4, 5, 6] == [r["step"] for r in resumed[1]]
    for trace in (full, resumed):
        for a, b in zip(*trace):
            assert a["p"] == b["p"] and a["sampler"] == b["sampler"]  # the two machines agree bit for bit
    assert resumed[0] == full[0][3:]  # the resumed run retraces the uninterrupted one
    assert full[0][0]["p"] != full[0][-1]["p"]  # the updates at steps 2, 4, 6 moved p
    weights = [json.loads((tmp_path / f"weights{r}.json").read_text()) for r in (0, 1)]
    assert weights[0] == weights[1] and weights[0]["full"] == weights[0]["resumed"]
