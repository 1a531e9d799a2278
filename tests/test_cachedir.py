"""The cache's folders are published whole: several processes making the same one at once (a
Space's workers, parallel test workers) leave one finished folder and no half-written one."""
from __future__ import annotations

import threading
from pathlib import Path

import pytest

from specviz.files.cachedir import DONE, finished, publish_folder


def _writer(text: str):
    def fill(tmp: Path) -> None:
        (tmp / "weights.bin").write_text(text)
    return fill


def test_a_folder_is_published_finished_and_nothing_else_is_left(tmp_path: Path) -> None:
    folder = tmp_path / "converted"
    publish_folder(folder, _writer("w"), "model.gguf")
    assert finished(folder) and (folder / DONE).read_text() == "model.gguf"
    assert (folder / "weights.bin").read_text() == "w"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["converted"]


def test_an_unfinished_folder_is_replaced(tmp_path: Path) -> None:
    folder = tmp_path / "converted"
    folder.mkdir()
    (folder / "weights.bin").write_text("half")                # an older crash: no DONE
    publish_folder(folder, _writer("whole"), "model.gguf")
    assert finished(folder) and (folder / "weights.bin").read_text() == "whole"


def test_two_makers_at_once_leave_one_finished_folder(tmp_path: Path) -> None:
    """Both fill their copy before either renames it into place: the first is kept, the second
    dropped without an error, and no temporary folder stays behind."""
    folder = tmp_path / "converted"
    both_filled = threading.Barrier(2, timeout=30)
    errors: list[BaseException] = []

    def make(text: str) -> None:
        def fill(tmp: Path) -> None:
            _writer(text)(tmp)
            both_filled.wait()
        try:
            publish_folder(folder, fill, text)
        except BaseException as err:  # noqa: BLE001 - collected for the assertion below
            errors.append(err)

    threads = [threading.Thread(target=make, args=(t,)) for t in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert finished(folder)
    assert (folder / "weights.bin").read_text() == (folder / DONE).read_text()   # one maker's whole copy
    assert sorted(p.name for p in tmp_path.iterdir()) == ["converted"]


def test_a_failing_fill_leaves_nothing(tmp_path: Path) -> None:
    def fill(tmp: Path) -> None:
        (tmp / "weights.bin").write_text("partial")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        publish_folder(tmp_path / "converted", fill, "model.gguf")
    assert list(tmp_path.iterdir()) == []
