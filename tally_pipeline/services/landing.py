"""Landing files: JSON lines, or one ``{"events": [...]}`` document, optionally gzip-compressed.

Read in constant memory (an event at a time), so a file of millions of events streams through the
ingest core in batches. A line that is not JSON is not an event: it goes to the dead letter with its
line number and the reading carries on. Items are read exactly (numbers as written, duplicate keys
seen: ``core.jsontext``), and each keeps its own text as written for the dead letter.
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

from tally_pipeline.core.errors import TallyError
from tally_pipeline.core.jsontext import BadJson, decode_item, loads_exact

_BATCH_DOC = re.compile(rb'^\s*\{\s*"events"\s*:\s*\[')
_CHUNK = 1 << 16


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


class LandingFileError(TallyError, ValueError):
    pass


class LandingPathError(TallyError, ValueError):
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


def read_items(stream: IO[bytes]) -> Iterator[ReadItem | BadLine]:
    """Yield each event item of a landing file (parsed, with its text), or a ``BadLine``."""
    buffered = stream if isinstance(stream, io.BufferedReader) else io.BufferedReader(stream)  # type: ignore[type-var]
    head = buffered.peek(256)[:256]
    if _BATCH_DOC.match(head):
        yield from _read_document(buffered)
    else:
        yield from _read_lines(buffered)


def _read_lines(stream: IO[bytes]) -> Iterator[ReadItem | BadLine]:
    for number, line in enumerate(stream, start=1):
        if not line.strip():
            continue
        text = line.decode("utf-8", errors="backslashreplace").strip(" \t\r\n").replace("\x00", "\\u0000")
        try:
            yield ReadItem(loads_exact(line.strip(b" \t\r\n")), text)
        except BadJson as exc:
            yield BadLine(number, text, "invalid_json", f"invalid_json: line {number}: {exc}")


def _read_document(stream: IO[bytes]) -> Iterator[ReadItem | BadLine]:
    """Stream the elements of ``{"events": [...]}`` one at a time with a sliding buffer."""
    utf8 = codecs.getincrementaldecoder("utf-8")(errors="surrogateescape")
    text = ""
    pos = 0
    eof = False

    def fill() -> bool:
        # Drop what has been consumed only when refilling, so each element costs no copy.
        nonlocal text, pos, eof
        chunk = stream.read(_CHUNK)
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
        while True:
            try:
                value, end = decode_item(text, pos)
                # A number at the very end of the buffer may continue in the next chunk.
                if end < len(text) or eof:
                    break
                if not fill():
                    continue
            except json.JSONDecodeError as exc:
                if eof or not fill():
                    raise LandingFileError(f"events[{index}] is not valid JSON: {exc.msg}") from None
        yield ReadItem(value, text[pos:end].replace("\x00", "\\u0000"))
        index += 1
        pos = end


@dataclass
class FileSummary:
    path: str
    items: int = 0
    stored: int = 0
    duplicates: int = 0
    rejected: int = 0
    reasons: dict[str, int] = field(default_factory=dict)
    error: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "items": self.items,
            "stored": self.stored,
            "duplicates": self.duplicates,
            "rejected": self.rejected,
            "reasons": dict(sorted(self.reasons.items())),
            "error": self.error,
        }


def ingest_file(
    ingestor: Any,
    path: Path,
    *,
    origin: str | None = None,
    batch_size: int = 1000,
    progress: Any = None,
) -> FileSummary:
    """Stream one landing file through the ingest core, one transaction per batch.

    ``progress(n_bytes)`` is called with the bytes of the (compressed) file read so far.
    Unreadable pieces go to the dead letter; a document that breaks mid-way stops the file with
    ``error`` set, keeping every batch already committed.
    """
    from tally_pipeline.store.base import RejectedRow

    origin = origin or f"file:{path.name}"
    summary = FileSummary(str(path))
    raw_file = path.open("rb")
    try:
        stream: IO[bytes] = raw_file
        if raw_file.read(2) == b"\x1f\x8b":
            raw_file.seek(0)
            stream = gzip.GzipFile(fileobj=raw_file)  # type: ignore[assignment]
        else:
            raw_file.seek(0)
        batch: list[Any] = []
        raws: list[str] = []
        bad: list[RejectedRow] = []

        def flush() -> None:
            if bad:
                ingestor.dead_letter(list(bad))
                summary.rejected += len(bad)
                for row in bad:
                    summary.reasons[row.reason] = summary.reasons.get(row.reason, 0) + 1
                bad.clear()
            if batch:
                outcome = ingestor.ingest(batch, origin=origin, raw_of=list(raws).__getitem__)
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
            for item in read_items(stream):
                summary.items += 1
                if isinstance(item, BadLine):
                    bad.append(RejectedRow(item.reason, item.message, origin, item.raw))
                else:
                    batch.append(item.value)
                    raws.append(item.raw)
                if len(batch) + len(bad) >= batch_size:
                    flush()
        except (LandingFileError, OSError, EOFError) as exc:
            summary.error = str(exc)
        flush()
    finally:
        raw_file.close()
    return summary
