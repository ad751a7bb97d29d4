"""Run under `accelerate launch --multi_gpu --num_processes 2 ...` on CPU: a short MultiUAT training.

Each rank appends, after every optimizer step, its live probabilities and its sampler state to
OUTDIR/rank<r>.jsonl, and counts the MC-dropout passes it ran, so the test can check that the ranks agree
and that the work was split rather than duplicated.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from transformers import TrainerCallback

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from teardown import finish  # noqa: E402

from conftest import multidomain_specs  # noqa: E402
from uat_hf.corpora import load_corpora, load_corpus_split  # noqa: E402
from uat_hf.presets import build_model  # noqa: E402
from uat_hf.tokenization import train_joint_tokenizer  # noqa: E402
from uat_hf.uat_config import UATConfig  # noqa: E402
from uat_hf.uat_trainer import UATTrainer  # noqa: E402


class Probe(TrainerCallback):
    def __init__(self, trainer, path: Path):
        self.trainer, self.path = trainer, path

    def on_step_end(self, args, state, control, **kwargs):
        sampler = self.trainer.corpus_sampler
        record = {"step": state.global_step, "p": sampler.probabilities.tolist(), "sampler": sampler.state_dict(),
                  "passes": self.trainer.passes_run}
        with self.path.open("a") as f:
            f.write(json.dumps(record) + "\n")


def main(outdir: str) -> None:
    out = Path(outdir)
    raw = [load_corpus_split(spec, "train") for spec in multidomain_specs(600)]
    tokenizer = train_joint_tokenizer(raw, vocab_size=800)
    data = load_corpora(multidomain_specs(200), tokenizer, splits=("train", "dev"), max_source_length=32,
                        max_target_length=32)
    dev = {name: ds.select(range(8)) for name, ds in data["dev"].items()}
    dev["dictionary"] = data["dev"]["dictionary"].select([0])  # fewer dev examples than ranks
    torch.manual_seed(0)
    model = build_model("tiny", tokenizer)
    args = UATConfig(
        output_dir=str(out / "run"), strategy="multiuat", measure="enteos", mc_samples=3, update_every=2,
        scorer_lr=1e-2, scorer_steps=10, max_steps=6, max_tokens=200, report_to=[], save_strategy="no",
        use_cpu=True, seed=3, disable_tqdm=True, logging_steps=100,
    )
    trainer = UATTrainer(model, args, train_corpora=data["train"], dev_corpora=dev, processing_class=tokenizer)
    trainer.passes_run = 0
    reward = trainer.balancing.reward
    measure_passes = reward._pass_sums

    def counting(model, batch, passes, replicate):
        trainer.passes_run += passes
        return measure_passes(model, batch, passes, replicate)

    reward._pass_sums = counting
    rank = trainer.accelerator.process_index
    trainer.add_callback(Probe(trainer, out / f"rank{rank}.jsonl"))
    trainer.train()
    (out / f"done{rank}").write_text(json.dumps({"world": trainer.accelerator.num_processes}))
    finish(trainer.accelerator)


if __name__ == "__main__":
    main(sys.argv[1])
