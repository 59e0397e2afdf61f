"""Landing files: JSON lines, or one ``{"events": [...]}`` document, optionally gzip-compressed.

Read in bounded memory (an event at a time), so a file of millions of events streams through the
ingest core in batches. A line that is not JSON is not an event: it goes to the dead letter with its
line number and the reading carries on. Items are read exactly (numbers as written, duplicate keys
seen: ``core.jsontext``), and each keeps its own text as written for the dead letter.

Every file is bounded (``LandingLimits``, from the ``landing:`` settings): a line or a document's
element over ``max_item_bytes`` is refused (``item_too_large``, its first ``excerpt_bytes`` kept in the
dead letter); a file that decompresses past ``max_file_bytes`` or ``max_ratio`` times its size on disk
stops there, as does a symlink unless ``follow_symlinks``: the file's ``error`` says why.
"""

from __future__ import annotations

import codecs
import gzip
import io
import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from tally_pipeline.core.errors import InputError
from tally_pipeline.core.jsontext import BadJson, decode_item, loads_exact, value_end
from tally_pipeline.core.landing import DEFAULT_LIMITS, TOO_MANY_REJECTIONS, rejection_summary
from tally_pipeline.core.landing import LandingLimits as LandingLimits

_BATCH_DOC = re.compile(rb'^\s*\{\s*"events"\s*:\s*\[')
_CHUNK = 1 << 16


def _excerpt(data: bytes, limits: LandingLimits) -> str:
    return data[: limits.excerpt_bytes].decode("utf-8", errors="backslashreplace").replace("\x00", "\\u0000")


class _Capped(io.RawIOBase):
    """A byte stream that stops with ``LandingFileError`` once more than ``limit`` bytes come out of it."""

    def __init__(self, inner: IO[bytes], limit: int, why: str):
        self._inner = inner
        self._limit = limit
        self._why = why
        self._total = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self._inner.read(len(buffer))
        n = len(data)
        buffer[:n] = data
        self._total += n
        if self._total > self._limit:
            raise LandingFileError(self._why)
        return n


@dataclass(frozen=True, slots=True)
class ReadItem:
    """One item of a landing file: its parsed value and its text exactly as written."""

    value: Any
    raw: str


@dataclass(frozen=True)
class BadLine:
    """A piece of a landing file that could not be read as an item."""

    line: int
    raw: str
    reason: str
    message: str


class LandingFileError(InputError, ValueError):
    pass


class LandingPathError(InputError, ValueError):
    """A landing file name that would reach outside the configured ``landing_dir``."""


def resolve_landing_path(landing_dir: str | os.PathLike[str], name: str | os.PathLike[str]) -> Path:
    """The real path of the landing file ``name``: relative to ``landing_dir``, or absolute inside it.

    Raises ``LandingPathError`` for an empty name or one holding NUL, any ``..`` component (even one
    that would come back inside), an absolute path outside the directory, the directory itself, and a
    path that leaves it through a symlink (of the file or of a folder on the way). Symlinks that stay
    inside are followed. ``landing_dir`` itself may be a symlink: containment is decided on real paths.
    """
    text = os.fspath(name)
    if not text or "\x00" in text:
        raise LandingPathError(f"{text!r} is not a landing file name")
    root = Path(landing_dir).resolve()
    candidate = Path(text)
    if ".." in candidate.parts:
        raise LandingPathError(f"{text!r}: '..' is not allowed in a landing file path")
    try:
        real = (candidate if candidate.is_absolute() else root / candidate).resolve()
    except (OSError, RuntimeError) as exc:  # a symlink loop
        raise LandingPathError(f"{text!r} cannot be resolved: {exc}") from None
    if not real.is_relative_to(root):
        raise LandingPathError(f"{text!r} resolves to {str(real)!r}, outside the landing directory {str(root)!r}")
    if real == root:
        raise LandingPathError(f"{text!r} names the landing directory itself, not a file in it")
    return real


def read_items(stream: IO[bytes], limits: LandingLimits = DEFAULT_LIMITS) -> Iterator[ReadItem | BadLine]:
    """Yield each event item of a landing file (parsed, with its text), or a ``BadLine``."""
    buffered = stream if isinstance(stream, io.BufferedReader) else io.BufferedReader(stream)  # type: ignore[type-var]
    head = buffered.peek(256)[:256]
    if _BATCH_DOC.match(head):
        yield from _read_document(buffered, limits)
    else:
        yield from _read_lines(buffered, limits)


def _read_lines(stream: IO[bytes], limits: LandingLimits) -> Iterator[ReadItem | BadLine]:
    number = 0
    while line := stream.readline(limits.max_item_bytes + 1):
        number += 1
        if len(line) > limits.max_item_bytes and not line.endswith(b"\n"):
            rest = line
            while rest and not rest.endswith(b"\n"):  # the rest of the line, read and dropped in chunks
                rest = stream.readline(_CHUNK)
            yield BadLine(number, _excerpt(line, limits), "item_too_large",
                          f"item_too_large: line {number} is longer than {limits.max_item_bytes} bytes "
                          f"(landing.max_item_bytes); its first {limits.excerpt_bytes} bytes are kept")
            continue
        if not line.strip():
            number += _skip_blank(stream)
            continue
        text = line.decode("utf-8", errors="backslashreplace").strip(" \t\r\n").replace("\x00", "\\u0000")
        try:
            yield ReadItem(loads_exact(line.strip(b" \t\r\n")), text)
        except BadJson as exc:
            yield BadLine(number, text, "invalid_json", f"invalid_json: line {number}: {exc}")


def _skip_blank(stream: IO[bytes]) -> int:
    """Skip the blank lines that follow, a buffer at a time (a file of newlines is not a loop per line);
    return how many lines were skipped."""
    skipped = 0
    while True:
        ahead = stream.peek(_CHUNK)  # type: ignore[attr-defined]
        blank = len(ahead) - len(ahead.lstrip(b" \t\r\n"))
        if blank == 0:
            return skipped
        cut = ahead.rfind(b"\n", 0, blank) + 1  # up to the last whole blank line: a line's indent stays
        if cut == 0:
            return skipped
        skipped += ahead.count(b"\n", 0, cut)
        stream.read(cut)


def _read_document(stream: IO[bytes], limits: LandingLimits) -> Iterator[ReadItem | BadLine]:
    """Stream the elements of ``{"events": [...]}`` one at a time with a sliding buffer.

    An element longer than the buffer is parsed again once the buffer holds twice as much of it:
    each element is parsed a bounded number of times over, so reading stays linear in its size.
    """
    utf8 = codecs.getincrementaldecoder("utf-8")(errors="surrogateescape")
    text = ""
    pos = 0
    eof = False

    def fill(size: int = _CHUNK) -> bool:
        # Drop what has been consumed only when refilling, so each element costs no copy.
        nonlocal text, pos, eof
        chunk = stream.read(max(size, _CHUNK))
        if not chunk:
            eof = True
            text = text[pos:] + utf8.decode(b"", final=True)
            pos = 0
            return False
        text = text[pos:] + utf8.decode(chunk)
        pos = 0
        return True

    while len(text) < 256 and fill():
        pass
    start = re.match(r'^\s*\{\s*"events"\s*:\s*\[', text)
    if start is None:
        raise LandingFileError('expected a document starting with {"events": [')
    pos = start.end()
    index = 0
    while True:
        while True:  # skip whitespace and the comma between elements
            while pos < len(text) and text[pos] in " \t\r\n,":
                pos += 1
            if pos < len(text) or eof or not fill():
                break
        if pos >= len(text):
            raise LandingFileError(f"file ends inside the events array (after {index} items)")
        if text[pos] == "]":
            return
        unreadable: str | None = None
        while True:
            try:
                value, end = decode_item(text, pos)
                # A number at the very end of the buffer may continue in the next chunk.
                if end < len(text) or eof:
                    break
                if not fill():
                    continue
            except json.JSONDecodeError as exc:
                if eof or value_end(text, pos) is not None:  # the whole element is here: it is not JSON
                    raise LandingFileError(f"events[{index}] is not valid JSON: {exc.msg}") from None
                held = len(text) - pos
                if held > limits.max_item_bytes:
                    yield _too_large(index, text[pos:], limits)
                    raise LandingFileError(f"events[{index}] is larger than {limits.max_item_bytes} bytes "
                                           "(landing.max_item_bytes)") from None
                if not fill(held):  # twice what the element has so far: linear, not quadratic
                    raise LandingFileError(f"events[{index}] is not valid JSON: {exc.msg}") from None
            except (ValueError, RecursionError) as exc:  # JSON no reader here takes: refused alone
                found = value_end(text, pos)
                if found is None:
                    if eof or len(text) - pos > limits.max_item_bytes or not fill(len(text) - pos):
                        raise LandingFileError(f"events[{index}] is not JSON this server reads") from None
                    continue
                end = found
                unreadable = "nested deeper than about 1,000 levels" if isinstance(exc, RecursionError) else str(exc)[:200]
                break
        raw = text[pos:end].replace("\x00", "\\u0000")
        if unreadable is not None:
            yield BadLine(index, raw[: limits.excerpt_bytes], "invalid_item",
                          f"invalid_item: events[{index}] is not JSON this server reads: {unreadable}")
        elif len(raw) > limits.max_item_bytes:
            yield _too_large(index, raw, limits)
        else:
            yield ReadItem(value, raw)
        index += 1
        pos = end


def _too_large(index: int, text: str, limits: LandingLimits) -> BadLine:
    return BadLine(index, _excerpt(text[: limits.excerpt_bytes].encode("utf-8", "surrogateescape"), limits),
                   "item_too_large", f"item_too_large: events[{index}] is larger than {limits.max_item_bytes} "
                   f"bytes (landing.max_item_bytes); its first {limits.excerpt_bytes} bytes are kept")


@dataclass
class FileSummary:
    path: str
    items: int = 0
    stored: int = 0
    duplicates: int = 0
    rejected: int = 0
    reasons: dict[str, int] = field(default_factory=dict)
    error: str | None = None
    #: refused items beyond the file's dead-letter bounds: counted in one summary row, not kept one by one
    not_kept: int = 0

    def as_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "items": self.items,
            "stored": self.stored,
            "duplicates": self.duplicates,
            "rejected": self.rejected,
            "reasons": dict(sorted(self.reasons.items())),
            "not_kept": self.not_kept,
            "error": self.error,
        }


class _DeadLetterBudget:
    """How much of one file's refusals the dead letter keeps row by row (``max_rejected_rows``/``_bytes``)."""

    def __init__(self, limits: LandingLimits):
        self.rows_left = limits.max_rejected_rows
        self.bytes_left = limits.max_rejected_bytes
        self.not_kept: dict[str, int] = {}

    def keep(self, row: Any) -> bool:
        size = len((row.raw or "").encode("utf-8", "surrogatepass")) + len(row.message.encode("utf-8", "surrogatepass"))
        if self.rows_left > 0 and size <= self.bytes_left:
            self.rows_left -= 1
            self.bytes_left -= size
            return True
        self.rows_left = 0  # once one is not kept, none after it is: the rows kept are the file's first
        self.not_kept[row.reason] = self.not_kept.get(row.reason, 0) + 1
        return False


def _open_file(path: Path, limits: LandingLimits) -> IO[bytes]:
    """The file opened for reading; a symlink is refused unless ``follow_symlinks`` (O_NOFOLLOW: no race)."""
    flags = os.O_RDONLY | (0 if limits.follow_symlinks else getattr(os, "O_NOFOLLOW", 0))
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if not limits.follow_symlinks and path.is_symlink():
            raise LandingFileError(f"{path} is a symlink: refused (set landing.follow_symlinks to read it)") from None
        raise LandingFileError(f"cannot open {path}: {exc.strerror}") from None
    return os.fdopen(fd, "rb")


def _bounded_stream(raw_file: IO[bytes], limits: LandingLimits) -> IO[bytes]:
    """What the file holds, decompressed if gzip, stopping at the size and ratio limits."""
    on_disk = os.fstat(raw_file.fileno()).st_size
    if raw_file.read(2) == b"\x1f\x8b":
        raw_file.seek(0)
        cap = min(limits.max_file_bytes, limits.max_ratio * max(on_disk, _CHUNK))
        why = (f"decompresses to more than {cap} bytes (landing.max_file_bytes {limits.max_file_bytes}, "
               f"landing.max_ratio {limits.max_ratio} times its {on_disk} bytes)")
        inner: IO[bytes] = gzip.GzipFile(fileobj=raw_file)  # type: ignore[assignment]
    else:
        raw_file.seek(0)
        cap = limits.max_file_bytes
        why = f"holds more than {cap} bytes (landing.max_file_bytes)"
        inner = raw_file
    return io.BufferedReader(_Capped(inner, cap, why), buffer_size=_CHUNK)


def ingest_file(
    ingestor: Any,
    path: Path,
    *,
    origin: str | None = None,
    batch_size: int = 1000,
    progress: Any = None,
    limits: LandingLimits = DEFAULT_LIMITS,
) -> FileSummary:
    """Stream one landing file through the ingest core, one transaction per batch.

    ``progress(n_bytes)`` is called with the bytes of the (compressed) file read so far.
    Unreadable pieces go to the dead letter; a document that breaks mid-way, a truncated gzip, a file
    over its limits or a refused symlink stops the file with ``error`` set, keeping every batch
    already committed.
    """
    from tally_pipeline.store.base import RejectedRow

    origin = origin or f"file:{path.name}"
    summary = FileSummary(str(path))
    try:
        raw_file = _open_file(path, limits)
    except LandingFileError as exc:
        summary.error = str(exc)
        return summary
    try:
        stream = _bounded_stream(raw_file, limits)
        batch: list[Any] = []
        raws: list[str] = []
        bad: list[RejectedRow] = []
        budget = _DeadLetterBudget(limits)

        def flush() -> None:
            if bad:
                ingestor.dead_letter([row for row in bad if budget.keep(row)])
                summary.rejected += len(bad)
                for row in bad:
                    summary.reasons[row.reason] = summary.reasons.get(row.reason, 0) + 1
                bad.clear()
            if batch:
                outcome = ingestor.ingest(batch, origin=origin, raw_of=list(raws).__getitem__, keep=budget.keep)
                summary.stored += outcome.stored
                summary.duplicates += outcome.duplicates
                summary.rejected += outcome.rejected
                for result in outcome.results:
                    if result.reason:
                        summary.reasons[result.reason] = summary.reasons.get(result.reason, 0) + 1
                batch.clear()
                raws.clear()
            if progress is not None:
                progress(raw_file.tell())

        try:
            for item in read_items(stream, limits):
                summary.items += 1
                if isinstance(item, BadLine):
                    bad.append(RejectedRow(item.reason, item.message, origin, item.raw))
                else:
                    batch.append(item.value)
                    raws.append(item.raw)
                if len(batch) + len(bad) >= batch_size:
                    flush()
        except (LandingFileError, OSError, EOFError, gzip.BadGzipFile) as exc:
            summary.error = str(exc) or type(exc).__name__
        flush()
        if budget.not_kept:
            summary.not_kept = sum(budget.not_kept.values())
            ingestor.dead_letter([RejectedRow(TOO_MANY_REJECTIONS, rejection_summary(path.name, budget.not_kept, limits),
                                              origin, None)])
    finally:
        raw_file.close()
    return summary
