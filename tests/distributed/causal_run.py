"""Run under `accelerate launch --multi_gpu --num_processes 2 ...` on CPU: a short MultiUAT training of a tiny
decoder-only model (causal-tiny preset) on prompt + completion corpora.

Each rank appends, after every optimizer step, its live probabilities and the rewards of the last update to
OUTDIR/rank<r>.jsonl, so the test can check that the ranks agree.
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
from uat_hf.causal_data import CausalPrompt  # noqa: E402
from uat_hf.corpora import load_corpora, load_corpus_split  # noqa: E402
from uat_hf.presets import build_model  # noqa: E402
from uat_hf.tokenization import train_joint_tokenizer  # noqa: E402
from uat_hf.uat_config import UATConfig  # noqa: E402
from uat_hf.uat_trainer import UATTrainer  # noqa: E402


class Probe(TrainerCallback):
    def __init__(self, trainer, path: Path):
        self.trainer, self.path = trainer, path

    def on_step_end(self, args, state, control, **kwargs):
        history = self.trainer.corpus_distribution.history
        record = {"step": state.global_step, "p": self.trainer.corpus_sampler.probabilities.tolist(),
                  "rewards": history[-1]["rewards"] if history else None}
        with self.path.open("a") as f:
            f.write(json.dumps(record) + "\n")


def main(outdir: str) -> None:
    out = Path(outdir)
    raw = [load_corpus_split(spec, "train") for spec in multidomain_specs(600)]
    tokenizer = train_joint_tokenizer(raw, vocab_size=800)
    data = load_corpora(multidomain_specs(120), tokenizer, splits=("train", "dev"), max_source_length=24,
                        max_target_length=24, prompt=CausalPrompt())
    dev = {name: ds.select(range(6)) for name, ds in data["dev"].items()}
    torch.manual_seed(0)
    model = build_model("causal-tiny", tokenizer)
    args = UATConfig(
        output_dir=str(out / "run"), strategy="multiuat", measure="enteos", mc_samples=3, update_every=2,
        scorer_lr=1e-1, scorer_steps=10, max_steps=6, max_tokens=300, report_to=[], save_strategy="no",
        use_cpu=True, seed=3, disable_tqdm=True, logging_steps=100,
    )
    trainer = UATTrainer(model, args, train_corpora=data["train"], dev_corpora=dev, processing_class=tokenizer)
    rank = trainer.accelerator.process_index
    trainer.add_callback(Probe(trainer, out / f"rank{rank}.jsonl"))
    trainer.train()
    (out / f"done{rank}").write_text(json.dumps({"world": trainer.accelerator.num_processes}))
    finish(trainer.accelerator)


if __name__ == "__main__":
    main(sys.argv[1])
