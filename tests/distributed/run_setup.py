"""What the 2-process training scripts share: data, a tiny model, a short CPU run's settings, per-step records.

Each script trains on the bundled multi-domain sample with a joint tokenizer trained on it (or, m2m100_o2m_run,
on corpora of its own), a tiny model seeded alike on every rank, and ``UATConfig`` settings that only differ in
what the script tests. Importing this module puts the tests folder on ``sys.path`` (for conftest's builders;
conftest also sets the offline environment), so a script imports it before the project's other modules.
How a script ends is :mod:`teardown`'s job, not this one's.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the tests folder, for conftest's builders

import torch  # noqa: E402
from transformers import TrainerCallback  # noqa: E402

from conftest import multidomain_specs  # noqa: E402
from uat_hf.data.corpora import load_corpora, load_corpus_split  # noqa: E402
from uat_hf.data.tokenization import train_joint_tokenizer  # noqa: E402
from uat_hf.models.presets import build_model  # noqa: E402
from uat_hf.training.uat_config import UATConfig  # noqa: E402

#: The settings of every short CPU run; a script overrides what it tests.
SHORT_RUN = {"report_to": [], "save_strategy": "no", "use_cpu": True, "seed": 3, "disable_tqdm": True,
             "logging_steps": 100}


def multidomain_data(train_examples: int, *, max_length: int, tokenizer_examples: int = 600, vocab_size: int = 800,
                     **load_kwargs: Any):
    """A joint tokenizer trained on the first ``tokenizer_examples`` training pairs of each bundled domain, and
    ``load_corpora`` of the first ``train_examples`` (sources and targets cut at ``max_length`` tokens)."""
    raw = [load_corpus_split(spec, "train") for spec in multidomain_specs(tokenizer_examples)]
    tokenizer = train_joint_tokenizer(raw, vocab_size=vocab_size)
    data = load_corpora(multidomain_specs(train_examples), tokenizer, max_source_length=max_length,
                        max_target_length=max_length, **load_kwargs)
    return tokenizer, data


def first_examples(corpora: Mapping[str, Any], count: int) -> dict[str, Any]:
    """The first ``count`` examples of every corpus: small dev or test sets keep the runs short."""
    return {name: dataset.select(range(count)) for name, dataset in corpora.items()}


def seeded_model(preset: str, tokenizer, **overrides: Any):
    """A preset model, initialised from seed 0 so that every rank builds the same weights."""
    torch.manual_seed(0)
    return build_model(preset, tokenizer, **overrides)


def short_run_config(out: Path, **settings: Any) -> UATConfig:
    """``UATConfig`` writing to ``out/run`` with :data:`SHORT_RUN` and the script's own ``settings`` over it."""
    return UATConfig(output_dir=str(out / "run"), **{**SHORT_RUN, **settings})


def record_sub_batches(trainer) -> list[list[int]]:
    """Wraps the balancing reward so that each measurement appends how many sub-batches each corpus's dev batch
    was split into; returns that (growing) list."""
    shapes: list[list[int]] = []
    reward = trainer.balancing.reward
    compute = reward.compute

    def recording(model, dev_batches, *args, **kwargs):
        shapes.append([len(batches) for batches in dev_batches])
        return compute(model, dev_batches, *args, **kwargs)

    reward.compute = recording
    return shapes


class RecordSteps(TrainerCallback):
    """After every optimizer step (and so after the balancing callback's update), appends ``record(step)`` to
    ``path`` as one JSON line, the rank's trace that the test compares with the other rank's; a step for which
    ``record`` returns ``None`` is skipped."""

    def __init__(self, path: Path, record: Callable[[int], Mapping[str, Any] | None]) -> None:
        self.path, self.record = path, record

    def on_step_end(self, args, state, control, **kwargs):
        record = self.record(state.global_step)
        if record is not None:
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(json.dumps({"step": state.global_step, **record}) + "\n")


def write_done(out: Path, trainer) -> None:
    """``out/done<rank>``: this rank finished training, in a world of how many processes."""
    (out / f"done{trainer.accelerator.process_index}").write_text(
        json.dumps({"world": trainer.accelerator.num_processes}))
