"""The study's archive: a few compact files in git, a tree of run folders when a tool reads it.

    python study/archive.py unpack        # study/archive/*.tar.gz -> study/archive/unpacked/ (the tools do it too)
    python study/archive.py pack          # study/archive/unpacked/ -> the packs and runs.jsonl

Git holds ``study/archive/<pack>.tar.gz`` (one per group of study cells, ``study-<group>.tar.gz``, plus
``study_checks.tar.gz`` and ``previous.tar.gz``) and ``runs.jsonl``, one line per study run with its scores and
final mix, to read without unpacking. The tools (``run.py``, ``report.py``, ``paired_runs.py``) work on run
folders, so they call :func:`unpacked` first: it extracts a pack only when its bytes changed since the last
extraction. ``run.py`` packs a run's group again as soon as the run is archived. Packs are deterministic
(sorted members, no times, no owners): repacking unchanged runs gives the same bytes, so git sees no change.
One pack per group keeps a new cell's runs from rewriting the packs of cells already finished.
"""

from __future__ import annotations

import argparse
import fcntl
import gzip
import hashlib
import io
import json
import shutil
import tarfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ARCHIVE = Path(__file__).resolve().parent / "archive"
UNPACKED = "unpacked"
STUDY = "study"  # the run folders of the study grid: unpacked/study/<cell>/seed<N>/
SUMMARY = "runs.jsonl"
#: The other top-level folders of the unpacked tree, each packed whole.
WHOLE = ("study_checks", "previous")


def unpacked(archive: Path = ARCHIVE) -> Path:
    """The archive as a tree of run folders (``<root>/study/<cell>/seed<N>/``, ``<root>/study_checks/``,
    ``<root>/previous/``), extracting each pack whose bytes changed since it was last extracted."""
    root = archive / UNPACKED
    stamps = root / ".stamps"
    with _locked(archive):
        for pack in sorted(archive.glob("*.tar.gz")):
            digest = hashlib.sha256(pack.read_bytes()).hexdigest()
            stamp = stamps / f"{pack.name}.sha256"
            if stamp.is_file() and stamp.read_text() == digest:
                continue
            with tarfile.open(pack, "r:gz") as tar:
                members = tar.getmembers()
                for folder in sorted({_run_folder(member.name) for member in members}):
                    shutil.rmtree(root / folder, ignore_errors=True)
                tar.extractall(root, members=members, filter="data")
            stamps.mkdir(parents=True, exist_ok=True)
            stamp.write_text(digest)
    return root


def pack_name(top: str, cell: str | None = None) -> str:
    """``study-<group>.tar.gz`` for a study cell (its group: setup and regime), ``<top>.tar.gz`` otherwise."""
    if top != STUDY:
        return f"{top}.tar.gz"
    setup, regime = cell.split("-")[:2]
    return f"{STUDY}-{setup}-{regime}.tar.gz"


def pack(archive: Path = ARCHIVE, *, cells: list[str] | None = None) -> list[Path]:
    """Write the packs of ``cells`` (default: every pack) from the unpacked tree, and ``runs.jsonl``; returns
    the packs written. A pack's members are the files under its folders, relative to the unpacked root."""
    root = archive / UNPACKED
    groups: dict[str, list[Path]] = {}
    for folder in sorted((root / STUDY).iterdir()) if (root / STUDY).is_dir() else []:
        groups.setdefault(pack_name(STUDY, folder.name), []).append(folder)
    for top in WHOLE:
        if (root / top).is_dir():
            groups[pack_name(top)] = [root / top]
    wanted = None if cells is None else {pack_name(STUDY, cell) for cell in cells}
    written = []
    with _locked(archive):
        for name, folders in sorted(groups.items()):
            if wanted is not None and name not in wanted:
                continue
            data = _tar_bytes(root, folders)
            (archive / name).write_bytes(data)
            (root / ".stamps").mkdir(parents=True, exist_ok=True)
            (root / ".stamps" / f"{name}.sha256").write_text(hashlib.sha256(data).hexdigest())
            written.append(archive / name)
        for name in sorted((wanted or set()) - set(groups)):  # a group whose every run was dropped
            (archive / name).unlink(missing_ok=True)
        (archive / SUMMARY).write_text("".join(json.dumps(line, sort_keys=True) + "\n" for line in summary(root)))
    return written


def summary(root: Path) -> Iterator[dict]:
    """One record per finished study run: what it was, its test scores and the mix it ended with."""
    for marker in sorted((root / STUDY).glob("*/seed*/run.json")):
        folder = marker.parent
        run = json.loads(marker.read_text())
        results = json.loads((folder / "results.json").read_text())
        record = {key: run.get(key) for key in ("cell", "group", "strategy", "seed", "baseline", "finished")}
        record["scores"] = results["scores"]
        record["mean"] = results["mean"]
        history = folder / "balancing_history.jsonl"
        lines = [json.loads(line) for line in history.read_text().splitlines() if line.strip()] \
            if history.is_file() else []
        record["final_p"] = lines[-1].get("probabilities") if lines else None
        yield record


def _run_folder(member: str) -> str:
    """The folder a member replaces on extraction: a study run's ``study/<cell>``, else its top folder."""
    parts = member.split("/")
    return "/".join(parts[:2]) if parts[0] == STUDY else parts[0]


def _tar_bytes(root: Path, folders: list[Path]) -> bytes:
    buffer = io.BytesIO()
    with gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0, filename="") as zipped:
        with tarfile.open(fileobj=zipped, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for path in sorted(p for folder in folders for p in folder.rglob("*") if p.is_file()):
                info = tarfile.TarInfo(path.relative_to(root).as_posix())
                info.size, info.mode, info.mtime = path.stat().st_size, 0o644, 0
                with path.open("rb") as content:
                    tar.addfile(info, content)
    return buffer.getvalue()


@contextmanager
def _locked(archive: Path) -> Iterator[None]:
    """One writer at a time: two study workers may finish runs of the same group together."""
    archive.mkdir(parents=True, exist_ok=True)
    with (archive / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=("unpack", "pack"))
    parser.add_argument("--archive", type=Path, default=ARCHIVE)
    args = parser.parse_args(argv)
    if args.action == "unpack":
        print(unpacked(args.archive))
    else:
        for path in pack(args.archive):
            print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
