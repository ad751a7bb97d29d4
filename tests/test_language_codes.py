"""Language codes per corpus (NLLB, M2M100, mBART-50): tokenization, rewards and per-corpus generation.

Every tokenizer here is built offline from a sentencepiece / BPE model trained on the bundled multilingual
sample, in the layout the Hub's checkpoints use, so the code placement under test is the tokenizer classes' own.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import torch
from transformers import (
    DataCollatorForSeq2Seq,
    M2M100Config,
    M2M100ForConditionalGeneration,
    MBartConfig,
    MBartForConditionalGeneration,
)

from uat_hf.data.corpora import BUNDLED_DIR, CorpusSpec, corpus_specs_from_directory, load_corpora, load_corpus_split
from uat_hf.data.language_codes import (
    CorpusLanguageCodes,
    check_language_codes,
    corpus_language_codes,
    generation_kwargs,
)
from uat_hf.training.uat_config import UATConfig
from uat_hf.training.uat_trainer import UATTrainer

HERE = Path(__file__).parent
MULTILINGUAL = BUNDLED_DIR / "multilingual-ddtp"
TARGETS = ["de", "fr", "cs"]


def one_to_many_specs(max_examples: int = 60) -> list[CorpusSpec]:
    """en → de, fr, cs: every corpus decodes into another language."""
    specs = corpus_specs_from_directory(MULTILINGUAL, "en", None, direction="one-to-many", corpora=TARGETS)
    for spec in specs:
        spec.max_examples = max_examples
    return specs


def _texts() -> list[str]:
    texts = []
    for spec in one_to_many_specs(300):
        pairs = load_corpus_split(spec, "train")
        texts += list(pairs["source"]) + list(pairs["target"])
    return texts


def _sentencepiece(texts: list[str], folder: Path):
    import sentencepiece as spm

    folder.mkdir(parents=True, exist_ok=True)
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(texts), model_writer=model, vocab_size=700,
                                   model_type="unigram", minloglevel=2)
    (folder / "sp.model").write_bytes(model.getvalue())
    return spm.SentencePieceProcessor(model_file=str(folder / "sp.model"))


def save_m2m100_tokenizer(folder: Path):
    """An M2M100Tokenizer (sentencepiece model + vocab.json; its 100 ``__xx__`` codes follow the vocabulary)."""
    from transformers import M2M100Tokenizer

    processor = _sentencepiece(_texts(), folder / "spm")
    vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
    for i in range(processor.get_piece_size()):
        vocab.setdefault(processor.id_to_piece(i), len(vocab))
    (folder / "spm" / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    tokenizer = M2M100Tokenizer(vocab_file=str(folder / "spm" / "vocab.json"),
                                spm_file=str(folder / "spm" / "sp.model"), src_lang="en", tgt_lang="de")
    tokenizer.save_pretrained(folder)
    return tokenizer


def mbart50_tokenizer(folder: Path):
    """An MBart50Tokenizer over a unigram vocabulary (its 52 ``xx_YY`` codes follow the vocabulary)."""
    from transformers import MBart50Tokenizer

    processor = _sentencepiece(_texts(), folder)
    pieces = [(processor.id_to_piece(i), processor.get_score(i)) for i in range(processor.get_piece_size())]
    return MBart50Tokenizer(vocab=pieces, src_lang="en_XX", tgt_lang="de_DE")


def nllb_tokenizer(legacy_behaviour: bool = False):
    """An NllbTokenizer over a BPE vocabulary (its 202 FLORES codes follow the vocabulary)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import NllbTokenizer

    bpe = Tokenizer(models.BPE(unk_token="<unk>"))
    bpe.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    specials = ["<s>", "<pad>", "</s>", "<unk>"]
    bpe.train_from_iterator(_texts(), trainers.BpeTrainer(vocab_size=600, special_tokens=specials,
                                                          show_progress=False))
    model = json.loads(bpe.to_str())["model"]
    return NllbTokenizer(vocab=model["vocab"], merges=[tuple(m) for m in model["merges"]],
                         legacy_behaviour=legacy_behaviour)


def tiny_model(tokenizer, family: str = "m2m100"):
    """A 1-layer M2M100 (the NLLB architecture too) or mBART model whose embeddings cover every code id."""
    torch.manual_seed(0)
    # M2M100Tokenizer keeps its language tokens outside get_vocab()
    vocab_size = max([*tokenizer.get_vocab().values(), *getattr(tokenizer, "lang_token_to_id", {}).values()]) + 1
    sizes = dict(vocab_size=vocab_size, d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
                 decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=128,
                 dropout=0.1, pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
                 bos_token_id=0, decoder_start_token_id=tokenizer.eos_token_id)
    if family == "mbart":
        return MBartForConditionalGeneration(MBartConfig(**sizes))
    return M2M100ForConditionalGeneration(M2M100Config(**sizes))


@pytest.fixture(scope="module")
def m2m100_tokenizer(tmp_path_factory):
    return save_m2m100_tokenizer(tmp_path_factory.mktemp("m2m100"))


def code_id(tokenizer, token: str) -> int:
    return tokenizer.convert_tokens_to_ids(token)


# ------------------------------------------------------------------------------------------- code resolution


def test_codes_come_from_the_table_a_code_given_directly_or_an_override():
    specs = [CorpusSpec("de", "en", "de"), CorpusSpec("pt", "en", "pt-br"), CorpusSpec("x", "eng_Latn", "bos_Latn")]
    nllb = corpus_language_codes(specs, "nllb")
    assert nllb == {"de": CorpusLanguageCodes("eng_Latn", "deu_Latn"),
                    "pt": CorpusLanguageCodes("eng_Latn", "por_Latn"),  # a region variant: its language's code
                    "x": CorpusLanguageCodes("eng_Latn", "bos_Latn")}
    assert corpus_language_codes(specs[:2], "m2m100")["pt"] == CorpusLanguageCodes("__en__", "__pt__")
    assert corpus_language_codes(specs[:2], "mbart50")["de"] == CorpusLanguageCodes("en_XX", "de_DE")
    assert corpus_language_codes(specs[:1], "nllb", {"de": "gsw_Latn"})["de"].target == "gsw_Latn"


def test_a_language_without_a_code_is_refused_naming_the_corpus_and_the_language():
    with pytest.raises(ValueError, match=r"Corpus 'bos': target_lang 'bs' has no mbart50 language code"):
        corpus_language_codes([CorpusSpec("bos", "en", "bs")], "mbart50")
    with pytest.raises(ValueError, match=r"language_codes: 'de': 'German' is not a nllb code"):
        corpus_language_codes([CorpusSpec("de", "en", "de")], "nllb", {"de": "German"})


def test_m2m100_codes_that_are_not_tokens_are_refused_before_any_data_is_read(m2m100_tokenizer):
    codes = corpus_language_codes([CorpusSpec("tlh", "en", "tlh")], "m2m100")  # Klingon: no __tlh__ token
    with pytest.raises(ValueError, match=r"Corpus 'tlh': target language code '__tlh__' is not a single token"):
        check_language_codes(m2m100_tokenizer, codes)


def test_nllb_tokenizer_places_the_codes_and_legacy_behaviour_is_refused():
    codes = corpus_language_codes(one_to_many_specs(), "nllb")
    tokenizer = nllb_tokenizer()
    check_language_codes(tokenizer, codes)  # prefix layout: [src code] X </s>, labels [tgt code] Y </s>
    legacy = nllb_tokenizer(legacy_behaviour=True)
    with pytest.raises(ValueError, match=r"Corpus 'de'.*does not put the code first in the labels.*legacy_behaviour"):
        check_language_codes(legacy, codes)


def test_a_tokenizer_without_src_lang_is_refused_for_a_code_scheme(tokenizer):
    with pytest.raises(ValueError, match=r"TokenizersBackend has none.*language_tags: marian"):
        check_language_codes(tokenizer, {"de": CorpusLanguageCodes("eng_Latn", "deu_Latn")})


# ------------------------------------------------------------------------------------------- training and rewards


def _record_mc_dropout_batches(trainer) -> list:
    """Wraps the MultiUAT reward so that every dev batch of every MC-dropout update is recorded, per corpus."""
    seen = []
    compute = trainer.balancing.reward.compute

    def recording(model, dev_batches, *args, **kwargs):
        seen.append([[{k: batch[k].clone() for k in ("input_ids", "labels")} for batch in batches]
                     for batches in dev_batches])
        return compute(model, dev_batches, *args, **kwargs)

    trainer.balancing.reward.compute = recording
    return seen


def _record_training_batches(trainer) -> list:
    seen = []
    compute_loss = trainer.compute_loss

    def recording(model, inputs, *args, **kwargs):
        seen.append((inputs["input_ids"][:, 0].tolist(), inputs["labels"][:, 0].tolist()))
        return compute_loss(model, inputs, *args, **kwargs)

    trainer.compute_loss = recording
    return seen


def test_m2m100_one_to_many_training_rewards_and_generation_see_each_corpus_code(m2m100_tokenizer, tmp_path):
    tokenizer = m2m100_tokenizer
    specs = one_to_many_specs()
    data = load_corpora(specs, tokenizer, tags="m2m100", max_source_length=32, max_target_length=32)
    source_id = code_id(tokenizer, "__en__")
    target_ids = {name: code_id(tokenizer, f"__{name}__") for name in TARGETS}
    assert len(set(target_ids.values())) == 3
    for split in ("train", "dev", "test"):
        for name, dataset in data[split].items():
            assert {row[0] for row in dataset["input_ids"]} == {source_id}
            assert {row[0] for row in dataset["labels"]} == {target_ids[name]}, (split, name)
    assert (tokenizer.src_lang, tokenizer.tgt_lang) == ("en", "de")  # tokenizing left the tokenizer as it was

    codes = corpus_language_codes(specs, "m2m100")
    dev = {name: ds.select(range(6)) for name, ds in data["dev"].items()}
    test = {name: ds.select(range(4)) for name, ds in data["test"].items()}
    args = UATConfig(output_dir=str(tmp_path), strategy="multiuat", measure="enteos", mc_samples=2, update_every=2,
                     scorer_lr=1e-2, scorer_steps=5, max_steps=4, per_device_train_batch_size=4, report_to=[],
                     save_strategy="no", use_cpu=True, disable_tqdm=True, generation_max_length=6,
                     generation_num_beams=1)
    trainer = UATTrainer(tiny_model(tokenizer), args, train_corpora=data["train"], dev_corpora=dev, eval_corpora=test,
                         processing_class=tokenizer, corpus_generation_kwargs=generation_kwargs(tokenizer, codes))
    training_batches = _record_training_batches(trainer)
    mc_batches = _record_mc_dropout_batches(trainer)
    trainer.train()

    assert len(training_batches) == 4
    for sources, targets in training_batches:  # one corpus per batch: its code first in every row
        assert set(sources) == {source_id} and len(set(targets)) == 1 and targets[0] in target_ids.values()
    assert mc_batches, "no MC-dropout update ran"
    for update in mc_batches:
        names = trainer.corpus_distribution.names
        for name, batches in zip(names, update):
            for batch in batches:
                assert set(batch["input_ids"][:, 0].tolist()) == {source_id}
                assert set(batch["labels"][:, 0].tolist()) == {target_ids[name]}

    translations = trainer.translate()
    for name, translation in translations.items():
        generated = translation.output.predictions
        # decoder start (</s>), then the forced target code: every row of the corpus, in its own language
        assert set(generated[:, 0].tolist()) == {tokenizer.eos_token_id}
        assert set(generated[:, 1].tolist()) == {target_ids[name]}, name
    assert trainer.corpus_generation_kwargs == {name: {"forced_bos_token_id": target_ids[name]} for name in TARGETS}
    # a keyword given to the call wins over the corpus's own
    forced = trainer.translate({"fr": test["fr"]}, forced_bos_token_id=target_ids["cs"])
    assert set(forced["fr"].output.predictions[:, 1].tolist()) == {target_ids["cs"]}


def test_mbart50_codes_in_inputs_labels_and_per_corpus_generation(tmp_path):
    tokenizer = mbart50_tokenizer(tmp_path / "spm")
    specs = one_to_many_specs(20)
    data = load_corpora(specs, tokenizer, splits=("train", "test"), tags="mbart50", max_source_length=32,
                        max_target_length=32)
    expected = {"de": "de_DE", "fr": "fr_XX", "cs": "cs_CZ"}
    for name, dataset in data["train"].items():
        assert {row[0] for row in dataset["input_ids"]} == {code_id(tokenizer, "en_XX")}
        assert {row[0] for row in dataset["labels"]} == {code_id(tokenizer, expected[name])}
    codes = corpus_language_codes(specs, "mbart50")
    args = UATConfig(output_dir=str(tmp_path / "run"), max_steps=2, per_device_train_batch_size=4, report_to=[],
                     save_strategy="no", use_cpu=True, disable_tqdm=True, generation_max_length=5,
                     generation_num_beams=1)
    test = {name: ds.select(range(3)) for name, ds in data["test"].items()}
    trainer = UATTrainer(tiny_model(tokenizer, "mbart"), args, train_corpora=data["train"], eval_corpora=test,
                         processing_class=tokenizer, corpus_generation_kwargs=generation_kwargs(tokenizer, codes))
    trainer.train()
    firsts = {name: set(t.output.predictions[:, 1].tolist()) for name, t in trainer.translate().items()}
    assert firsts == {name: {code_id(tokenizer, code)} for name, code in expected.items()}


def test_mixing_law_dev_loss_does_not_score_the_target_language_code(m2m100_tokenizer):
    """Strategy mixing-law's DevLoss skips the leading target code, as the other rewards do: it is fixed by the
    corpus, so scoring it adds a spurious "training on j helps j and hurts the others" term to the law."""
    import torch.nn.functional as F

    from uat_hf.strategies.mixing_law.dev_loss import DevLoss
    from uat_hf.strategies.mixing_law.strategy import MixingLaw

    tokenizer = m2m100_tokenizer
    model = tiny_model(tokenizer)
    data = load_corpora(one_to_many_specs(8), tokenizer, splits=("dev",), tags="m2m100", max_source_length=16,
                        max_target_length=16)["dev"]
    collator = DataCollatorForSeq2Seq(tokenizer, model=model)
    batches = [[collator([{k: ds[i][k] for k in ("input_ids", "attention_mask", "labels")} for i in range(4)])]
               for ds in data.values()]
    reward = MixingLaw.build_reward(UATConfig(output_dir="unused", strategy="mixing-law", use_cpu=True), model,
                                    tokenizer)
    assert reward.language_code_ids >= {code_id(tokenizer, f"__{name}__") for name in TARGETS}
    masked = reward.finalize(reward.compute(model, batches))[0]
    unmasked = DevLoss().finalize(DevLoss().compute(model, batches))[0]
    model.eval()
    with torch.no_grad():
        for loss, plain, (batch,) in zip(masked, unmasked, batches):
            labels = batch["labels"]
            logits = model(**batch).logits
            scored = labels != -100
            scored[:, 0] = False  # every row opens with the corpus's code
            by_hand = F.cross_entropy(logits[scored], labels[scored]).item()
            assert loss == pytest.approx(by_hand, rel=1e-5)
            assert plain == pytest.approx(F.cross_entropy(logits[labels != -100], labels[labels != -100]).item(),
                                          rel=1e-5)
            assert abs(loss - plain) > 1e-4


@pytest.mark.distributed
def test_m2m100_one_to_many_multiuat_on_two_processes(m2m100_tokenizer, tmp_path):
    """2 ranks (accelerate launch, gloo): every rank trains, measures and generates with each corpus's codes."""
    from conftest import launch_two_ranks

    m2m100_tokenizer.save_pretrained(tmp_path / "tokenizer")
    launch_two_ranks(HERE / "distributed" / "m2m100_o2m_run.py", tmp_path)
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    source_id = code_id(m2m100_tokenizer, "__en__")
    target_ids = {name: code_id(m2m100_tokenizer, f"__{name}__") for name in TARGETS}
    assert [r["world"] for r in ranks] == [2, 2]
    assert ranks[0]["p"] == ranks[1]["p"]
    for record in ranks:
        assert len(record["train"]) == 4
        for sources, targets in record["train"]:
            assert set(sources) == {source_id} and len(set(targets)) == 1 and targets[0] in target_ids.values()
        assert record["dev"]  # MultiUAT updated (every 2 steps)
        for update in record["dev"]:
            for name, batches in update.items():
                for sources, targets in batches:
                    assert set(sources) == {source_id} and set(targets) == {target_ids[name]}
        assert record["generated"] == {name: [target_ids[name]] * 3 for name in TARGETS}
