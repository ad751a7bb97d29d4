"""Run under ``accelerate launch`` (2 CPU processes): UATTrainer with MultiDDS-S for a few steps.

Usage: ``accelerate launch ... multidds_run.py OUTDIR [DEV_SHARING]``. Every rank appends its live corpus
probabilities after each balancing update to ``OUTDIR/rank{r}.jsonl`` and writes ``OUTDIR/rank{r}.done``
when training has finished; the test compares the ranks.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the tests folder, for conftest's builders

import torch  # noqa: E402
from teardown import finish  # noqa: E402
from transformers import TrainerCallback  # noqa: E402

from conftest import multidomain_specs  # noqa: E402
from uat_hf.corpora import load_corpora, load_corpus_split  # noqa: E402
from uat_hf.gradient_cosine import GradientCosineReward  # noqa: E402
from uat_hf.presets import build_model  # noqa: E402
from uat_hf.tokenization import train_joint_tokenizer  # noqa: E402
from uat_hf.uat_config import UATConfig  # noqa: E402
from uat_hf.uat_trainer import UATTrainer  # noqa: E402

UPDATE_EVERY = 2
MAX_STEPS = 6


class RecordProbabilities(TrainerCallback):
    """Appends this rank's sampler probabilities after each balancing update (runs after the balancing callback)."""

    def __init__(self, trainer: UATTrainer, path: Path) -> None:
        self.trainer = trainer
        self.path = path

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step % UPDATE_EVERY == 0:
            balancing = self.trainer.balancing
            record = {
                "step": state.global_step,
                "updates": balancing.update_count,
                "p": self.trainer.corpus_sampler.probabilities.tolist(),
                "psi": (balancing.distribution.scorer.state_dict()
                        if balancing.distribution.scorer is not None else None),
            }
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(json.dumps(record) + "\n")


def main() -> None:
    out = Path(sys.argv[1])
    dev_sharing = sys.argv[2] if len(sys.argv) > 2 else "auto"
    torch.set_num_threads(1)
    raw = [load_corpus_split(spec, "train") for spec in multidomain_specs(1000)]
    tokenizer = train_joint_tokenizer(raw, vocab_size=1200)
    data = load_corpora(multidomain_specs(400), tokenizer, max_source_length=48, max_target_length=48)
    dev = {name: ds.select(range(24)) for name, ds in data["dev"].items()}
    torch.manual_seed(0)
    model = build_model("tiny", tokenizer)
    args = UATConfig(
        output_dir=str(out / "run"), strategy="multidds-s", max_steps=MAX_STEPS, update_every=UPDATE_EVERY,
        max_tokens=300, learning_rate=3e-3, dev_batch_tokens=200, dds_train_batch_tokens=200, scorer_lr=0.05,
        scorer_steps=20, use_cpu=True, report_to=[], save_strategy="no", eval_strategy="no", logging_steps=100, seed=0,
        disable_tqdm=True,
    )
    trainer = UATTrainer(model, args, train_corpora=data["train"], dev_corpora=dev, processing_class=tokenizer)
    trainer.balancing.reward = GradientCosineReward(dev_sharing=dev_sharing)
    rank = trainer.accelerator.process_index
    trainer.add_callback(RecordProbabilities(trainer, out / f"rank{rank}.jsonl"))
    result = trainer.train()
    num_processes = trainer.accelerator.num_processes
    (out / f"rank{rank}.done").write_text(json.dumps({
        "global_step": result.global_step, "num_processes": num_processes,
        "distributed": torch.distributed.is_initialized(),
        "broadcast": trainer.balancing.reward._use_broadcast(num_processes, rank),
    }))
    finish(trainer.accelerator)


if __name__ == "__main__":
    main()
