"""Checking the files a user names, before any work is done.

Inputs (a context file) must be regular files below a size limit, checked with stat() before a
byte is read: /dev/zero, a FIFO or a 100 MB file are refused at once, not after minutes of
reading or tokenising. Outputs (a trace file, a bench or index folder) must be places this
process can write, probed by creating and removing a temporary file or folder there, so a bad
path fails before a model is loaded rather than after the run. Every refusal is a UsageError-like
`FileCheckError` whose message starts with the option it is about.
"""
from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from .errors import SpecvizError

CONTEXT_LIMIT_BYTES = 1_000_000        # a context (file, upload or API text): ~250k tokens, more than any context window


class FileCheckError(SpecvizError):
    """A named file cannot be used (missing, not a regular file, too big, not writable...)."""


def _mb(n: int) -> str:
    return f"{n / 1e6:g} MB"


def check_text_size(text: str, what: str, limit: int = CONTEXT_LIMIT_BYTES) -> None:
    """Refuse text over `limit` bytes (UTF-8) before it is tokenised."""
    if len(text) > limit or len(text.encode("utf-8", "surrogatepass")) > limit:
        raise FileCheckError(f"{what}: the text is over {_mb(limit)}, the limit; give a shorter text")


def read_text_file(path: str, what: str, limit: int = CONTEXT_LIMIT_BYTES) -> str:
    """The UTF-8 text of a regular file of at most `limit` bytes, or FileCheckError saying why not."""
    file = Path(path).expanduser()
    try:
        info = file.stat()
    except FileNotFoundError:
        raise FileCheckError(f"{what}: no such file {path!r}") from None
    except OSError as err:
        raise FileCheckError(f"{what}: cannot read {path!r} ({err.strerror or err})") from None
    if stat.S_ISDIR(info.st_mode):
        raise FileCheckError(f"{what}: {path!r} is a directory; give a UTF-8 text file")
    if not stat.S_ISREG(info.st_mode):
        raise FileCheckError(f"{what}: {path!r} is not a regular file (a device, FIFO or socket); "
                             "give a UTF-8 text file")
    if info.st_size > limit:
        raise FileCheckError(f"{what}: {path!r} is {_mb(info.st_size)}; the limit is {_mb(limit)}")
    try:
        with open(file, "rb") as fh:
            data = fh.read(limit + 1)       # the file may have grown since stat()
    except OSError as err:
        raise FileCheckError(f"{what}: cannot read {path!r} ({err.strerror or err})") from None
    if len(data) > limit:
        raise FileCheckError(f"{what}: {path!r} is over {_mb(limit)}, the limit")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise FileCheckError(f"{what}: {path!r} is not UTF-8 text (undecodable byte at "
                             f"offset {err.start}); give a UTF-8 text file") from None
    if "\x00" in text:
        raise FileCheckError(f"{what}: {path!r} looks binary (it contains NUL bytes); give a UTF-8 text file")
    return text


def _check_writable_folder(folder: Path, what: str, not_a_folder: str) -> None:
    """FileCheckError `what: not_a_folder` unless `folder` is a directory, or saying why this
    process cannot write in it (probed by creating and removing a temporary file there)."""
    if not folder.is_dir():
        raise FileCheckError(f"{what}: {not_a_folder}")
    try:
        fd, name = tempfile.mkstemp(dir=folder, prefix=".specviz-write-check-")
        os.close(fd)
        os.unlink(name)
    except OSError as err:
        raise FileCheckError(f"{what}: cannot write in {str(folder)!r} ({err.strerror or err})") from None


def _named(path: str | None, what: str, empty: str) -> Path:
    """The path a user gave (~ expanded); FileCheckError `what: empty` when it is empty."""
    if path is None or not str(path).strip():
        raise FileCheckError(f"{what}: {empty}")
    return Path(path).expanduser()


def check_output_file(path: str | None, what: str) -> Path:
    """A file path that can be written: not empty, not a folder, in an existing writable folder."""
    file = _named(path, what, "empty file name; give a path such as trace.json")
    if file.is_dir():
        raise FileCheckError(f"{what}: {path!r} is a directory; give a file name such as trace.json")
    if file.exists() and not file.is_file():
        raise FileCheckError(f"{what}: {path!r} is not a regular file")
    _check_writable_folder(file.parent, what, f"the folder {str(file.parent)!r} does not exist")
    return file


def check_output_dir(path: str | None, what: str) -> Path:
    """A folder that exists and is writable, or can be created (its nearest existing parent is a
    writable folder). Nothing is created here."""
    folder = _named(path, what, "empty folder name")
    if folder.exists():
        _check_writable_folder(folder, what, f"{path!r} exists and is not a folder")
        return folder
    ancestor = folder.absolute().parent
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise FileCheckError(f"{what}: cannot create {path!r} ({str(ancestor)!r} is not a folder)")
    try:
        probe = tempfile.mkdtemp(dir=ancestor, prefix=".specviz-write-check-")
        os.rmdir(probe)
    except OSError as err:
        raise FileCheckError(f"{what}: cannot create {path!r} in {str(ancestor)!r} ({err.strerror or err})") from None
    return folder
