"""The landing directory as the ingest assets and sensor read it: one folder per UTC day, and the
sensor's record of the files it has seen."""

import json
from pathlib import Path

from tally_pipeline.services.landing import LandingPathError, resolve_landing_path

LANDING_SUFFIXES = (".jsonl", ".json", ".ndjson", ".jsonl.gz", ".json.gz", ".ndjson.gz")


def landing_files(landing_dir: Path, day: str) -> list[Path]:
    """The files of one day's folder ``landing_dir/YYYY-MM-DD/``, never anything outside ``landing_dir``."""
    try:
        folder = resolve_landing_path(landing_dir, day)
    except LandingPathError:
        return []
    if not folder.is_dir():
        return []
    files = []
    for path in sorted(folder.iterdir()):
        try:
            real = resolve_landing_path(landing_dir, path)
        except LandingPathError:
            continue  # a symlink out of the landing directory is never read
        if real.is_file() and path.name.endswith(LANDING_SUFFIXES):
            files.append(real)
    return files


def file_signature(path: Path) -> str:
    """What identifies one landing file's content cheaply: inode, size and modification time.

    A copy that keeps its old timestamps (``cp -p``, ``rsync -a``, ``mv``) is still a new path or a
    new inode, so it is seen; rewriting a file in place changes its size or time.
    """
    st = path.stat()
    return f"{st.st_ino}:{st.st_size}:{st.st_mtime_ns}"


def read_landing_cursor(cursor: str | None, landing_dir: Path) -> dict[str, str]:
    """The files seen so far, as ``{"YYYY-MM-DD/name": signature}``."""
    if not cursor:
        return {}
    try:
        seen = json.loads(cursor)
    except ValueError:
        seen = None
    if isinstance(seen, dict):
        return {str(k): str(v) for k, v in seen.items()}
    # The former cursor was the newest modification time seen: take every file at or before it as
    # seen, so an upgrade does not re-ingest the whole landing directory (it would be safe, only slow).
    try:
        since = float(cursor)
    except ValueError:
        return {}
    out = {}
    for folder in sorted(p for p in landing_dir.iterdir() if p.is_dir()):
        for f in landing_files(landing_dir, folder.name):
            if f.stat().st_mtime <= since:
                out[f"{folder.name}/{f.name}"] = file_signature(f)
    return out
