"""Checking the files a user names, before any work is done.

Inputs (a context file) must be regular files below a size limit, checked with stat() before a
byte is read: /dev/zero, a FIFO or a 100 MB file are refused at once, not after minutes of
reading or tokenising. Outputs (a trace file, a bench or index folder) must be places this
process can write, probed by creating and removing a temporary file or folder there, so a bad
path fails before a model is loaded rather than after the run (never under /proc, /sys or /dev,
whose files are the kernel's, not the user's), and are written whole or not at all
(`write_text_atomic`: a temporary file in the same folder, then os.replace). JSON a user hands
over (a results.json, a corpus index manifest, a trace) is read by `loads_json`, which refuses
nesting deeper than MAX_JSON_DEPTH with a message before the parser could hit Python's recursion
limit, numbers beyond any field's range (an integer of more than 20 digits, a decimal that
overflows to inf) and a key given twice. Every refusal is a UsageError-like `FileCheckError`
whose message starts with the option it is about.
"""
from __future__ import annotations

import json
import math
import os
import re
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from ..errors import SpecvizError, not_unicode
from .user_values import MAX_DIGITS

CONTEXT_LIMIT_BYTES = 1_000_000        # a context (file, upload or API text): ~250k tokens, more than any context window
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")   # the escape of a UTF-16 surrogate, high or low
MAX_JSON_DEPTH = 64                    # a trace, results.json or manifest is under 10 levels deep
PSEUDO_FILESYSTEMS = (Path("/proc"), Path("/sys"), Path("/dev"))   # the kernel's files, never an output


class FileCheckError(SpecvizError):
    """A named file cannot be used (missing, not a regular file, too big, not writable...)."""


def _mb(n: int) -> str:
    return f"{n / 1e6:g} MB"


def check_text_size(text: str, what: str, limit: int = CONTEXT_LIMIT_BYTES) -> None:
    """Refuse text over `limit` bytes (UTF-8) before it is tokenised."""
    if len(text) > limit or len(text.encode("utf-8", "surrogatepass")) > limit:
        raise FileCheckError(f"{what}: the text is over {_mb(limit)}, the limit; give a shorter text")


def check_regular_file(path: str, what: str, error: type[SpecvizError] = FileCheckError,
                       missing: str = "") -> os.stat_result:
    """stat() of a regular file, or `error` saying why `path` is not one (missing, a folder, a
    device, FIFO or socket, unreadable); `missing`: what to give instead, added in brackets to
    the message for a path that does not exist. Nothing is read."""
    try:
        info = Path(path).expanduser().stat()
    except FileNotFoundError:
        raise error(f"{what}: no such file {path!r}" + (f" ({missing})" if missing else "")) from None
    except OSError as err:
        raise error(f"{what}: cannot read {path!r} ({err.strerror or err})") from None
    if stat.S_ISDIR(info.st_mode):
        raise error(f"{what}: {path!r} is a directory; give a UTF-8 text file")
    if not stat.S_ISREG(info.st_mode):
        raise error(f"{what}: {path!r} is not a regular file (a device, FIFO or socket); "
                    "give a UTF-8 text file")
    return info


def read_text_file(path: str, what: str, limit: int = CONTEXT_LIMIT_BYTES,
                   error: type[SpecvizError] = FileCheckError, missing: str = "") -> str:
    """The UTF-8 text of a regular file of at most `limit` bytes, or `error` (FileCheckError by
    default; a reader's own error class) saying why not; `missing`: what to give instead, added
    in brackets to the message for a path that does not exist."""
    file = Path(path).expanduser()
    info = check_regular_file(path, what, error, missing)
    if info.st_size > limit:
        raise error(f"{what}: {path!r} is {_mb(info.st_size)}; the limit is {_mb(limit)}")
    try:
        with open(file, "rb") as fh:
            data = fh.read(limit + 1)       # the file may have grown since stat()
    except OSError as err:
        raise error(f"{what}: cannot read {path!r} ({err.strerror or err})") from None
    if len(data) > limit:
        raise error(f"{what}: {path!r} is over {_mb(limit)}, the limit")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise error(f"{what}: {path!r} is not UTF-8 text (undecodable byte at "
                             f"offset {err.start}); give a UTF-8 text file") from None
    if "\x00" in text:
        raise error(f"{what}: {path!r} looks binary (it contains NUL bytes); give a UTF-8 text file")
    return text


def _check_writable_folder(folder: Path, what: str, not_a_folder: str) -> None:
    """FileCheckError `what: not_a_folder` unless `folder` is a directory, or saying why this
    process cannot write in it (probed by creating and removing a temporary file there)."""
    if folder.exists() and not folder.is_dir():
        raise FileCheckError(f"{what}: {str(folder)!r} is a file, not a folder")
    if not folder.is_dir():
        raise FileCheckError(f"{what}: {not_a_folder}")
    try:
        fd, name = tempfile.mkstemp(dir=folder, prefix=".specviz-write-check-")
        os.close(fd)
        os.unlink(name)
    except OSError as err:
        raise FileCheckError(f"{what}: cannot write in {str(folder)!r} ({err.strerror or err})") from None


def _check_not_pseudo(target: Path, path: str, what: str) -> None:
    """FileCheckError for a path under /proc, /sys or /dev (resolved: a symlink into them too)."""
    try:
        real = target.expanduser().absolute().resolve()
    except (OSError, RuntimeError):
        real = target.expanduser().absolute()
    for root in PSEUDO_FILESYSTEMS:
        if real == root or real.is_relative_to(root):
            raise FileCheckError(f"{what}: {path!r} is under {root}, the kernel's files; give a path in a "
                                 "folder of your own")


def _named(path: str | None, what: str, empty: str) -> Path:
    """The path a user gave (~ expanded); FileCheckError `what: empty` when it is empty."""
    if path is None or not str(path).strip():
        raise FileCheckError(f"{what}: {empty}")
    return Path(path).expanduser()


def check_output_file(path: str | None, what: str, create_folder: bool = False,
                      example: str = "trace.json") -> Path:
    """A file path that can be written: not empty, not a folder (nor a name ending in a slash,
    which names one), not '-' (standard output: specviz writes its files by name), in an existing
    writable folder (with `create_folder`: or in one that can be created, as a checkpoint's is)."""
    file = _named(path, what, f"empty file name; give a path such as {example}")
    text = str(path).strip()
    if text == "-":
        raise FileCheckError(f"{what}: '-' (standard output) is not taken here; give a file name such as {example}")
    if text.endswith(("/", os.sep)):
        raise FileCheckError(f"{what}: {path!r} ends in '{text[-1]}', so it names a folder; give a file name "
                             f"such as {text}{example}")
    _check_not_pseudo(file, str(path), what)
    if file.is_dir():
        raise FileCheckError(f"{what}: {path!r} is a directory; give a file name such as {example}")
    if file.exists() and not file.is_file():
        raise FileCheckError(f"{what}: {path!r} is not a regular file")
    if create_folder and not file.parent.exists():
        check_output_dir(str(file.parent), what)
    else:
        _check_writable_folder(file.parent, what, f"the folder {str(file.parent)!r} does not exist")
    return file


def check_output_dir(path: str | None, what: str) -> Path:
    """A folder that exists and is writable, or can be created (its nearest existing parent is a
    writable folder). Nothing is created here."""
    folder = _named(path, what, "empty folder name")
    _check_not_pseudo(folder, str(path), what)
    if folder.exists():
        _check_writable_folder(folder, what, f"{path!r} exists and is not a folder")
        return folder
    ancestor = folder.absolute().parent
    while not ancestor.exists() and not ancestor.is_symlink():
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise FileCheckError(f"{what}: cannot create {path!r} ({str(ancestor)!r} is not a folder)")
    try:
        probe = tempfile.mkdtemp(dir=ancestor, prefix=".specviz-write-check-")
        os.rmdir(probe)
    except OSError as err:
        raise FileCheckError(f"{what}: cannot create {path!r} in {str(ancestor)!r} ({err.strerror or err})") from None
    return folder


@dataclass(frozen=True)
class _Place:
    """A path a run names, as the file system sees it: resolved (links followed), and its
    (device, inode) when it exists (a hard link is the same file under another name)."""
    flag: str
    given: str
    real: Path
    inode: tuple[int, int] | None

    @classmethod
    def of(cls, flag: str, given: str) -> "_Place":
        path = Path(given).expanduser()
        try:
            real = path.resolve()
        except (OSError, RuntimeError):
            real = path.absolute()
        try:
            info = path.stat()
            inode: tuple[int, int] | None = (info.st_dev, info.st_ino)
        except (OSError, ValueError):
            inode = None
        return cls(flag, given, real, inode)

    def exists(self) -> bool:
        return self.inode is not None


def check_outputs_apart(outputs: Sequence[tuple[str, str]], inputs: Sequence[tuple[str, str]]) -> None:
    """FileCheckError `--out-flag: ...` when an output would replace one of the run's inputs:
    the same file (links resolved, a hard link by its inode), an output folder holding an input,
    or an existing output inside an input folder (two outputs on one path are each command's own
    check: it knows which may share). `outputs` and
    `inputs` are (flag, path) pairs; an input that does not exist is no input (its own check
    says so later). Nothing is created or read."""
    outs = [_Place.of(flag, path) for flag, path in outputs if str(path).strip()]
    ins = [_Place.of(flag, path) for flag, path in inputs if str(path).strip()]
    for out in outs:
        for given in ins:
            if not given.exists():
                continue
            if out.inode is not None and out.inode == given.inode or out.real == given.real:
                how = "the same file as"
            elif given.real.is_relative_to(out.real):
                how = "a folder holding"
            elif out.real.is_relative_to(given.real) and out.exists():
                how = "an existing path inside"
            else:
                continue
            raise FileCheckError(f"{out.flag}: {out.given!r} is {how} the run's input {given.flag} ({given.given!r}); "
                                 "writing it would replace what the run reads: give the output another path")


def _mode_for(file: Path) -> int:
    """The mode a replaced file keeps, or what open() would give a new one (0666 less the umask,
    read from /proc where it can be: os.umask() would change it for every thread meanwhile)."""
    try:
        return file.stat().st_mode & 0o777
    except OSError:
        pass
    umask = 0o022
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                umask = int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    return 0o666 & ~umask


def write_text_atomic(path: Path | str, text: str, what: str) -> Path:
    """Write `text` to `path` whole or not at all: a temporary file beside it, flushed, then
    os.replace (a kill or a full disk leaves the old file, never half a new one). FileCheckError
    `what: ...` when it cannot be written."""
    file = Path(path).expanduser()
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(dir=file.parent, prefix=f".{file.name}.", suffix=".tmp")
        os.chmod(tmp, _mode_for(file))         # mkstemp makes 0600: give the file a plain file's mode
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, file)
        tmp = None
    except OSError as err:
        raise FileCheckError(f"{what}: cannot write {str(file)!r} ({err.strerror or err})") from None
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
    return file


_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')


_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")


def json_depth(text: str) -> int:
    """The deepest nesting of [ and { in JSON text (brackets inside strings not counted); one
    pass in C (a 50 MB trace in well under a second)."""
    import numpy as np

    brackets = _JSON_STRING.sub("", text).encode("utf-8", "surrogatepass").translate(None, _NOT_BRACKETS)
    codes = np.frombuffer(brackets, dtype=np.uint8)                             # [n]
    steps = np.where((codes == ord("[")) | (codes == ord("{")), 1, -1).astype(np.int64)  # [n]
    return int(np.cumsum(steps).max()) if len(steps) else 0


class _TooLong(Exception):
    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_DIGITS:
        raise _TooLong(text)
    return int(text)


def _bounded_float(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):        # 1e400: inf, which no count, rate or size is
        raise _TooLong(text)
    return number


# a run of digits longer than any integer read here, or an exponent of 3 digits: only a text with
# one is parsed with the (slower, per number) bounded hooks
_BIG_NUMBER = re.compile(r"[0-9]{%d}|[eE][+-]?[0-9]{3}" % (MAX_DIGITS + 1))


class _RepeatedKey(Exception):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _once_each(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object as a dict, each key given once: json.loads would keep the last of a repeated
    key unsaid (a contradicted setting, silently dropped)."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _RepeatedKey(key)
            seen.add(key)
    return obj


def loads_json(text: str, what: str, max_depth: int = MAX_JSON_DEPTH,
               error: type[SpecvizError] = FileCheckError, hint: str = "give the file specviz wrote") -> Any:
    """JSON a user handed over, parsed: `error` (FileCheckError by default; a reader's own error
    class) `what: ...; hint` when it is not JSON or is nested deeper than `max_depth` (checked before
    parsing, so no RecursionError is ever reached) or gives a key twice in one object. Every reader of JSON that a user hands over (a
    results.json, a manifest, a trace, a device map, a JSON line of questions, training data or
    metrics) goes through it; tests/test_bad_input.py checks that nothing else calls json.loads."""
    opened = text.count("[") + text.count("{")              # an upper bound of the depth: most files stop here
    if opened > max_depth and json_depth(text) > max_depth:
        raise error(f"{what}: the JSON is nested deeper than {max_depth} levels (nested too deeply for what "
                    f"it should hold); {hint}")
    hooks: dict[str, Any] = {"parse_int": _bounded_int, "parse_float": _bounded_float} \
        if _BIG_NUMBER.search(text) else {}
    try:
        data = json.loads(text, object_pairs_hook=_once_each, **hooks)
    except json.JSONDecodeError as err:
        raise error(f"{what}: not valid JSON ({err}); {hint}") from None
    except _TooLong as err:
        shown = err.text if len(err.text) <= 24 else f"{err.text[:12]}...{err.text[-6:]} ({len(err.text)} characters)"
        raise error(f"{what}: the JSON holds the number {shown}, beyond what any field holds (integers of at "
                    f"most {MAX_DIGITS} digits, finite decimals); {hint}") from None
    except ValueError as err:                    # Python's own limit on int digits, as a guard
        raise error(f"{what}: not readable JSON ({str(err)[:120]}); {hint}") from None
    except _RepeatedKey as err:
        raise error(f"{what}: the key {err.key[:60]!r}{'...' if len(err.key) > 60 else ''} is given twice in one JSON object (which of the two "
                    f"is meant?); give it once") from None
    except RecursionError:                       # unreachable after the depth check; kept as a guard
        raise error(f"{what}: the JSON is nested too deeply; {hint}") from None
    # a "\ud800" escape with no partner parses into a string no page, file or tokenizer can take;
    # only a text with such an escape is serialised again to look (emoji are escaped in pairs)
    if _SURROGATE_ESCAPE.search(text) and not_unicode(json.dumps(data, ensure_ascii=False)) is not None:
        raise error(f"{what}: the JSON holds a string that is not valid Unicode (a lone surrogate "
                    f"escape such as \\ud800); {hint}")
    return data


def read_json_file(path: Path | str, what: str, limit: int | None = None,
                   error: type[SpecvizError] = FileCheckError) -> Any:
    """A user's JSON file (a regular UTF-8 file under `limit` bytes, default 50 MB), parsed with
    loads_json; `error` (FileCheckError by default) `what: ...` saying why not."""
    return loads_json(read_text_file(str(path), what, limit or JSON_LIMIT_BYTES, error), what, error=error)


JSON_LIMIT_BYTES = 50_000_000          # a results.json or trace: the web upload limit


def folder_given_for_file(path: Path, what: str, pattern: str) -> str | None:
    """The message for a folder named where a file belongs (`--set checkpoint=DIR`), naming the
    files matching `pattern` in it that could be meant; None when `path` is not a folder."""
    if not path.is_dir():
        return None
    try:
        found = sorted(str(p) for p in path.glob(pattern) if p.is_file())[:3]
    except OSError:
        found = []
    hint = f" (it holds {', '.join(repr(f) for f in found)})" if found else f" (it holds no {pattern})"
    return f"{what}: {str(path)!r} is a folder; give the file itself{hint}"


def checkpoint_file_problem(path: Path, missing: str) -> str | None:
    """What is wrong with `path` as a checkpoint file, in one line: a folder named where the file
    belongs (naming the *.pt files in it), a device or FIFO, or `missing` (what to train, what to
    pass) when there is no such file; None when it is a file."""
    folder = folder_given_for_file(path, "checkpoint", "*.pt")
    if folder:
        return folder
    if path.exists() and not path.is_file():
        return f"checkpoint: {str(path)!r} is not a regular file (a device, FIFO or socket); give a checkpoint file"
    return None if path.is_file() else missing
