"""Checkpoints that are what they say: published whole, with a manifest of checksums.

A model directory is only as trustworthy as the process that wrote it: a kill inside
``save_pretrained`` leaves ``config.json`` beside missing or cut weights, which
transformers may load without a word or fail on much later. So a checkpoint here is
written into a temporary directory beside its final place, its files are fsynced and
listed with their SHA-256 and size in ``ap-gym-checkpoint.json`` (the manifest, written
last), and the directory is then renamed into place: a reader sees a complete checkpoint
or none. :func:`verify_checkpoint` checks the manifest against the files before a
checkpoint is trusted (a trainer resuming, a run loading it).

A model is identified by its weights, not by its path: :func:`weights_checksum` is the
SHA-256 over the weight files (the manifest's, or computed for a plain Hugging Face
directory), so a directory retrained in place is a different model. Trainers and runs
record it and refuse to resume on other weights.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ap_gym.errors import APGymError

__all__ = ["MANIFEST", "Checkpoint", "CheckpointError", "publish_checkpoint", "verify_checkpoint",
           "weights_checksum"]

MANIFEST = "ap-gym-checkpoint.json"
FORMAT = "ap-gym-checkpoint/1"
#: Files that hold a model's weights (their checksum is the model's identity).
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".gguf")


class CheckpointError(APGymError):
    """A checkpoint that is incomplete, damaged or not one (the message says what to do)."""


@dataclass(frozen=True)
class Checkpoint:
    """A verified checkpoint.

    Attributes:
        path: its directory.
        weights_sha256: the model's identity (SHA-256 over its weight files, in name order).
        meta: what the writer recorded (stage, update, config digest, ...).
        files: each file's SHA-256 and size.
    """

    path: Path
    weights_sha256: str
    meta: Mapping[str, Any] = field(default_factory=dict)
    files: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def _weights_digest(files: Mapping[str, Mapping[str, Any]]) -> str:
    """One SHA-256 over the weight files' own checksums, in name order."""
    digest = hashlib.sha256()
    for name in sorted(files):
        if name.endswith(WEIGHT_SUFFIXES) and "/" not in name and not name.startswith("trainer"):
            digest.update(f"{name}:{files[name]['sha256']}\n".encode())
    return digest.hexdigest()


def _listing(directory: Path) -> dict[str, dict[str, Any]]:
    out = {}
    for path in sorted(directory.rglob("*")):
        if path.is_file() and path.name != MANIFEST:
            out[path.relative_to(directory).as_posix()] = {"sha256": _sha256(path), "bytes": path.stat().st_size}
    return out


def publish_checkpoint(final: str | Path, write: Callable[[Path], object], meta: Mapping[str, Any] | None = None,
                       *, replace: bool = False) -> Checkpoint:
    """Write a checkpoint with ``write(tmp_dir)`` and publish it at ``final`` atomically.

    Args:
        final: where the checkpoint will be.
        write: writes the checkpoint's files into the directory it is given (e.g.
            ``backbone.save``).
        meta: recorded in the manifest (JSON).
        replace: an existing checkpoint at ``final`` is replaced (it is renamed aside
            first, then removed); otherwise an existing complete one is kept and returned.

    Returns:
        The published :class:`Checkpoint`.
    """
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    if final.exists() and not replace:
        with contextlib.suppress(CheckpointError):
            return verify_checkpoint(final)
    tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".tmp-{final.name}-"))
    try:
        write(tmp)
        files = _listing(tmp)
        if not any(name.endswith(WEIGHT_SUFFIXES) for name in files):
            raise CheckpointError(f"the checkpoint written for {final} holds no weight file "
                                  f"({', '.join(files) or 'nothing'})")
        for name in files:
            _fsync(tmp / name)
        manifest = {"format": FORMAT, "files": files, "weights_sha256": _weights_digest(files),
                    "meta": dict(meta or {}), "created": time.time()}
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True, default=str))
        _fsync(tmp / MANIFEST)
        if final.exists():
            aside = final.with_name(f".old-{final.name}-{os.getpid()}")
            os.rename(final, aside)
            os.rename(tmp, final)
            shutil.rmtree(aside, ignore_errors=True)
        else:
            os.rename(tmp, final)
        _fsync(final.parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return Checkpoint(final, str(manifest["weights_sha256"]), dict(meta or {}), files)


def _fsync(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def verify_checkpoint(path: str | Path, *, hashes: bool = True) -> Checkpoint:
    """The checkpoint at ``path``, after checking every file its manifest lists (size, and
    SHA-256 unless ``hashes`` is False); a :class:`CheckpointError` says what is wrong."""
    path = Path(path)
    manifest_file = path / MANIFEST
    if not path.is_dir():
        raise CheckpointError(f"{path} is not a checkpoint directory")
    if not manifest_file.is_file():
        raise CheckpointError(f"{path} has no {MANIFEST}: it was not published by ap-gym, or its writer was "
                              "killed before it finished (a half-saved checkpoint is never used); train again "
                              "(the trainer resumes from its last complete checkpoint)")
    try:
        manifest = json.loads(manifest_file.read_text())
        files = manifest["files"]
        if manifest.get("format") != FORMAT or not isinstance(files, dict):
            raise ValueError(f"format {manifest.get('format')!r}")
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise CheckpointError(f"{manifest_file} is damaged ({e}); train again") from None
    for name, entry in files.items():
        file = path / name
        if not file.is_file():
            raise CheckpointError(f"{path}: {name} is missing (its manifest lists it); the checkpoint is "
                                  "incomplete: train again")
        if file.stat().st_size != entry.get("bytes"):
            raise CheckpointError(f"{path}: {name} holds {file.stat().st_size} bytes, its manifest "
                                  f"{entry.get('bytes')}: the file was cut or changed; train again")
        if hashes and _sha256(file) != entry.get("sha256"):
            raise CheckpointError(f"{path}: {name} does not match its checksum: the file was changed after the "
                                  "checkpoint was published; train again")
    return Checkpoint(path, str(manifest.get("weights_sha256") or _weights_digest(files)),
                      dict(manifest.get("meta") or {}), files)


def weights_checksum(path: str | Path) -> str:
    """A model directory's identity: its manifest's weights checksum (verified), or for a
    plain Hugging Face directory the SHA-256 over its weight files. A single file (a GGUF)
    is hashed itself."""
    path = Path(path)
    if path.is_file():
        return _sha256(path)
    if (path / MANIFEST).exists():
        return verify_checkpoint(path).weights_sha256
    files = {p.name: {"sha256": _sha256(p)} for p in sorted(path.iterdir())
             if p.is_file() and p.name.endswith(WEIGHT_SUFFIXES)}
    if not files:
        raise CheckpointError(f"{path} holds no weight file (*.safetensors, *.bin): not a model directory")
    return _weights_digest(files)
