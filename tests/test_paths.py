from __future__ import annotations

import multiprocessing as mp
import os
import shutil
import tempfile
import time
from pathlib import Path

from ap_gym.paths import publish_dir


def _complete(path: Path) -> bool:
    return (path / "a").exists() and (path / "b").exists()


def _write(root: Path, tag: str) -> Path:
    tmp = Path(tempfile.mkdtemp(dir=root, prefix=".tmp-"))
    (tmp / "a").write_text(tag)
    (tmp / "b").write_text(tag)
    return tmp


def test_a_complete_entry_is_kept_and_ours_discarded(tmp_path):
    final = tmp_path / "entry"
    publish_dir(_write(tmp_path, "first"), final, _complete)
    inode = (final / "a").stat().st_ino
    publish_dir(_write(tmp_path, "second"), final, _complete)
    assert (final / "a").read_text() == "first" and (final / "a").stat().st_ino == inode
    assert [p.name for p in tmp_path.iterdir()] == ["entry"]  # no temporary left behind


def test_an_incomplete_entry_is_replaced(tmp_path):
    final = tmp_path / "entry"
    final.mkdir()
    (final / "a").write_text("half")
    publish_dir(_write(tmp_path, "whole"), final, _complete)
    assert (final / "b").read_text() == "whole"
    assert [p.name for p in tmp_path.iterdir()] == ["entry"]


def _rmtree_then_rename(tmp: Path, final: Path, complete) -> Path:
    """What the model cache did before publish_dir: clear the place, then rename."""
    shutil.rmtree(final, ignore_errors=True)
    try:
        tmp.rename(final)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def _builder(root: str, n: int, old: bool = False) -> None:
    root_p = Path(root)
    if _complete(root_p / "entry"):  # callers check first, then build (seconds for a model or a game)
        return
    time.sleep(0.2 + 0.1 * (n % 4))
    (_rmtree_then_rename if old else publish_dir)(_write(root_p, f"builder {n}"), root_p / "entry", _complete)
    assert (root_p / "entry" / "b").read_text().startswith("builder")


def _reader(root: str, seconds: float, errors: mp.Queue) -> None:
    final = Path(root) / "entry"
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if _complete(final):
            try:
                (final / "a").read_text(), (final / "b").read_text()
            except OSError as e:  # a complete entry vanished under a reader
                errors.put(repr(e))
                return


def test_builders_racing_on_an_empty_cache_never_pull_an_entry_from_under_a_reader(tmp_path):
    """The first run on a fresh machine: the driver and its workers build the same cache
    entry at once (the packaged model, a game) while others already read it."""
    ctx = mp.get_context("spawn")
    errors = ctx.Queue()
    readers = [ctx.Process(target=_reader, args=(str(tmp_path), 3.0, errors)) for _ in range(2)]
    old = bool(os.environ.get("AP_GYM_TEST_OLD_PUBLISH"))  # shows this test failing on the old code
    builders = [ctx.Process(target=_builder, args=(str(tmp_path), n, old)) for n in range(8)]
    for p in readers + builders:
        p.start()
    for p in builders + readers:
        p.join(60)
    assert all(p.exitcode == 0 for p in builders)
    assert errors.empty(), errors.get()
    assert sorted(os.listdir(tmp_path)) == ["entry"]


def test_files_written_atomically_are_as_readable_as_the_umask_allows(tmp_path):
    """mkstemp makes files owner-only; run files (config.json, summary.json) were 0600
    whatever the umask (issue 43)."""
    import os
    import stat

    from ap_gym.paths import atomic_write_json, umask_mode

    old = os.umask(0o022)
    try:
        assert umask_mode() == 0o644
        atomic_write_json(tmp_path / "config.json", {"a": 1})
        assert stat.S_IMODE((tmp_path / "config.json").stat().st_mode) == 0o644
        os.umask(0o077)
        atomic_write_json(tmp_path / "private.json", {"a": 1})
        assert stat.S_IMODE((tmp_path / "private.json").stat().st_mode) == 0o600
    finally:
        os.umask(old)
