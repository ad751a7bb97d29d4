"""The README's Python example, kept as a file so that the test suite runs it exactly as printed there
(tests/test_readme.py also checks that it prints the table the README shows)."""

from transformers import set_seed

from uat_hf import UATConfig, UATTrainer
from uat_hf.data.corpora import BUNDLED_DIR, corpus_specs_from_directory, load_corpora, load_corpus_split
from uat_hf.data.tokenization import train_joint_tokenizer
from uat_hf.models.presets import build_model

# Four English→German domains of different sizes, bundled with the package (5K to 20K training pairs).
specs = corpus_specs_from_directory(BUNDLED_DIR / "multidomain-en-de", "en", "de")
tokenizer = train_joint_tokenizer([load_corpus_split(s, "train") for s in specs], vocab_size=2000)
data = load_corpora(specs, tokenizer, max_source_length=64, max_target_length=64)  # {split: {corpus: Dataset}}

args = UATConfig(
    output_dir="uat_example",
    strategy="multiuat",      # or proportional / temperature / uniform / fixed / multidds-s
    measure="enteos",         # pretp, exptp, vartp, comev, entsent, enteos
    mc_samples=5,             # K Monte Carlo dropout passes (paper: 30)
    update_every=20,          # S optimizer steps between re-balancing (paper: 1000-2000)
    scorer_lr=2e-4,           # paper: 1e-4; a little larger so that p moves within 40 steps
    max_tokens=1024,          # token budget per batch
    max_steps=40,
    learning_rate=1e-3,
    generation_max_length=32,
    generation_num_beams=1,
    report_to=[],
)
set_seed(args.seed)  # before build_model draws the weights (the Trainer seeds only when it is created)
trainer = UATTrainer(
    build_model("tiny", tokenizer),
    args,
    train_corpora=data["train"],
    dev_corpora={name: ds.select(range(100)) for name, ds in data["dev"].items()},
    eval_corpora={name: ds.select(range(50)) for name, ds in data["test"].items()},
    processing_class=tokenizer,
)
trainer.train()
metrics = trainer.evaluate()  # eval_<corpus>_bleu, eval_<corpus>_chrf, eval_mean_bleu, eval_mean_chrf
p = trainer.corpus_distribution  # p.prior: where p started (∝ corpus size, τ = 1); p.probabilities: p now

print(f"{'corpus':<14}{'pairs':>6}{'p start':>9}{'p end':>7}{'BLEU':>7}{'chrF':>7}")
for name, p_start, p_end in zip(p.names, p.prior, p.probabilities):
    bleu, chrf = metrics[f"eval_{name}_bleu"], metrics[f"eval_{name}_chrf"]
    print(f"{name:<14}{len(data['train'][name]):>6}{p_start:>9.3f}{p_end:>7.3f}{bleu:>7.2f}{chrf:>7.2f}")
print(f"{'mean':<36}{metrics['eval_mean_bleu']:>7.2f}{metrics['eval_mean_chrf']:>7.2f}")
