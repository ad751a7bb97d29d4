"""Shared fixtures: real tokenizers trained on the bundled text, tiny real Marian models, real datasets."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from uat_hf.data.corpora import BUNDLED_DIR, corpus_specs_from_directory, load_corpora, load_corpus_split  # noqa: E402
from uat_hf.data.tokenization import train_joint_tokenizer  # noqa: E402
from uat_hf.models.presets import build_model  # noqa: E402

MULTIDOMAIN = BUNDLED_DIR / "multidomain-en-de"


def multidomain_specs(max_examples: int = 400):
    specs = corpus_specs_from_directory(MULTIDOMAIN, "en", "de")
    for spec in specs:
        spec.max_examples = max_examples
    return specs


@pytest.fixture(autouse=True)
def uat_records_reach_caplog():
    """uat-hf's logger does not propagate to the root logger (as Transformers' does not); caplog listens there."""
    from uat_hf.utils.logging import enable_propagation, set_verbosity

    enable_propagation(True)
    yield
    enable_propagation(False)
    set_verbosity(None)  # a command-line test sets uat-hf's own level: the next test follows Transformers again


@pytest.fixture(autouse=True)
def own_preparation_cache(tmp_path_factory, monkeypatch):
    """Each test gets its own preparation cache (uat-train's prepared data, kept by default in HF_DATASETS_CACHE), so
    that no test reads data another test or an earlier session prepared, and none fills the user's cache."""
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path_factory.mktemp("hf_datasets_cache")))


@pytest.fixture(scope="session")
def tokenizer():
    """A joint BPE tokenizer trained on a slice of the bundled English–German sample."""
    raw = [load_corpus_split(spec, "train") for spec in multidomain_specs(1000)]
    return train_joint_tokenizer(raw, vocab_size=1200)


@pytest.fixture(scope="session")
def corpora(tokenizer):
    """{split: {domain: tokenized Dataset}} for the 4 bundled domains (400 train pairs each)."""
    data = load_corpora(multidomain_specs(400), tokenizer, max_source_length=48, max_target_length=48)
    # Small dev/test sets keep generation-based evaluation fast.
    for split in ("dev", "test"):
        data[split] = {name: ds.select(range(24)) for name, ds in data[split].items()}
    return data


@pytest.fixture(scope="module")
def one_torch_thread():
    """Tiny models run ~10x faster on one thread than on contended ones: a module that trains many of them asks
    for this with ``pytestmark = pytest.mark.usefixtures("one_torch_thread")``."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def tiny_model(tokenizer):
    import torch

    torch.manual_seed(0)
    return build_model("tiny", tokenizer)


def save_marian_tokenizer(texts, folder, vocab_size: int):
    """A real MarianTokenizer (one sentencepiece model for source and target, vocab.json), trained on ``texts``
    and saved to ``folder`` with save_pretrained: the opus-mt tokenizer layout, built offline."""
    import io
    import json

    import sentencepiece as spm
    from transformers import MarianTokenizer

    folder.mkdir(parents=True, exist_ok=True)
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(texts), model_writer=model, vocab_size=vocab_size,
                                   model_type="unigram", minloglevel=2)
    spm_file = folder / "joint.spm"
    spm_file.write_bytes(model.getvalue())
    processor = spm.SentencePieceProcessor(model_file=str(spm_file))
    size = processor.get_piece_size()
    vocab = {processor.id_to_piece(i): i for i in range(size)} | {"<pad>": size}
    (folder / "vocab-in.json").write_text(json.dumps(vocab), encoding="utf-8")
    vocab_file = str(folder / "vocab-in.json")
    tokenizer = MarianTokenizer(source_spm=str(spm_file), target_spm=str(spm_file), vocab=vocab_file)
    tokenizer.save_pretrained(folder)
    return tokenizer


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch_two_ranks(script: Path, outdir: Path, *script_args: str, timeout: int = 300) -> str:
    """``accelerate launch`` ``script`` on 2 CPU ranks (gloo); returns its output. On timeout the whole process
    group is killed and the test fails with the output so far, so a hang fails fast and says where."""
    command = [
        sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
        "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
        "--main_process_port", str(free_port()), str(script), str(outdir), *script_args,
    ]
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                               start_new_session=True)
    try:
        output, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        pytest.fail(f"2-process run of {script.name} hung for {timeout} s:\n{output[-3000:]}")
    assert process.returncode == 0, output[-3000:]
    return output


def launch_two_machines(script: Path, outdir: Path, *script_args: str, timeout: int = 300) -> list[str]:
    """``accelerate launch`` ``script`` as two machines of one process each, both on this host (machine ranks 0 and
    1, rendezvous at 127.0.0.1 on a free port, gloo): the multi-node launch, with the network left out. Returns each
    machine's output; on a timeout both process groups are killed and the test fails with their output so far."""
    port = str(free_port())
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    processes = []
    for rank in (0, 1):
        command = [
            sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_machines", "2",
            "--machine_rank", str(rank), "--num_processes", "2", "--main_process_ip", "127.0.0.1",
            "--main_process_port", port, "--mixed_precision", "no", "--dynamo_backend", "no", str(script),
            str(outdir), *script_args,
        ]
        processes.append(subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                          env=env, start_new_session=True))
    outputs = []
    try:
        for process in processes:
            outputs.append(process.communicate(timeout=timeout)[0])
    except subprocess.TimeoutExpired:
        for process in processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
        outputs = [process.communicate()[0] for process in processes]
        pytest.fail(f"2-machine run of {script.name} hung for {timeout} s:\n"
                    + "\n".join(f"machine {r}:\n{o[-2000:]}" for r, o in enumerate(outputs)))
    for rank, (process, output) in enumerate(zip(processes, outputs)):
        assert process.returncode == 0, f"machine {rank}:\n{output[-3000:]}"
    return outputs


def corpus_of(sampler, index: int) -> str:
    """Name of the corpus a global example index of ``sampler`` belongs to."""
    import numpy as np

    return sampler.names[int(np.searchsorted(sampler.offsets, index, side="right")) - 1]


REPOSITORY = Path(__file__).resolve().parent.parent


def _load_script(folder: Path, name: str, prefix: str):
    """A script of ``folder`` (not a package) as a module; the folder is on sys.path while it loads, as when the
    script runs, so that it can import its siblings (profile_update imports training_overhead)."""
    import importlib.util

    sys.path.insert(0, str(folder))
    try:
        spec = importlib.util.spec_from_file_location(f"{prefix}_{name}", folder / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses look their module up there
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(folder))
    return module


def load_benchmark(name: str):
    """A script of benchmarks/ as a module."""
    return _load_script(REPOSITORY / "benchmarks", name, "benchmark")


def load_study(name: str):
    """A script of study/ (the study beside the package) as a module."""
    return _load_script(REPOSITORY / "study", name, "study")
