"""``resolve_landing_path``: a landing file name never reaches outside the configured ``landing_dir``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tally_pipeline.services.landing import LandingPathError, resolve_landing_path


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """tmp/landing/{2024-05-01/a.jsonl, inside-link -> 2024-05-01/a.jsonl, day-link -> 2024-05-01,
    out-file -> ../secret.txt, out-dir -> .., loop -> loop}; tmp/secret.txt."""
    landing = tmp_path / "landing"
    day = landing / "2024-05-01"
    day.mkdir(parents=True)
    (day / "a.jsonl").write_text("{}\n")
    (tmp_path / "secret.txt").write_text("not yours\n")
    (landing / "inside-link").symlink_to(day / "a.jsonl")
    (landing / "day-link").symlink_to("2024-05-01")
    (landing / "out-file").symlink_to(tmp_path / "secret.txt")
    (landing / "out-dir").symlink_to("..")
    (landing / "loop").symlink_to("loop")
    return landing


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("2024-05-01/a.jsonl", "2024-05-01/a.jsonl"),
        ("./2024-05-01/a.jsonl", "2024-05-01/a.jsonl"),
        ("2024-05-01//a.jsonl", "2024-05-01/a.jsonl"),
        ("inside-link", "2024-05-01/a.jsonl"),  # a symlink that stays inside is followed
        ("day-link/a.jsonl", "2024-05-01/a.jsonl"),
        ("2024-05-01/not-yet-there.jsonl", "2024-05-01/not-yet-there.jsonl"),
    ],
)
def test_names_inside_the_directory_resolve_to_their_real_path(tree: Path, name: str, expected: str) -> None:
    assert resolve_landing_path(tree, name) == (tree / expected).resolve()


def test_an_absolute_path_inside_the_directory_is_accepted(tree: Path) -> None:
    assert resolve_landing_path(tree, tree / "2024-05-01" / "a.jsonl") == (tree / "2024-05-01" / "a.jsonl").resolve()


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("../secret.txt", "'..'"),
        ("2024-05-01/../../secret.txt", "'..'"),
        ("2024-05-01/../2024-05-01/a.jsonl", "'..'"),  # comes back inside, refused all the same
        ("/etc/passwd", "outside the landing directory"),
        ("out-file", "outside the landing directory"),  # the file is a symlink out
        ("out-dir/secret.txt", "outside the landing directory"),  # a folder on the way is a symlink out
        ("loop", "cannot be resolved"),
        ("", "not a landing file name"),
        ("a\x00b.jsonl", "not a landing file name"),
        (".", "the landing directory itself"),
    ],
)
def test_names_that_would_leave_the_directory_are_refused(tree: Path, name: str, why: str) -> None:
    with pytest.raises(LandingPathError, match=why):
        resolve_landing_path(tree, name)


def test_the_directory_may_be_reached_through_a_symlink(tree: Path, tmp_path: Path) -> None:
    alias = tmp_path / "alias"
    alias.symlink_to(tree)
    assert resolve_landing_path(alias, "2024-05-01/a.jsonl") == (tree / "2024-05-01" / "a.jsonl").resolve()
    assert resolve_landing_path(alias, alias / "inside-link") == (tree / "2024-05-01" / "a.jsonl").resolve()
    with pytest.raises(LandingPathError):
        resolve_landing_path(alias, "out-file")


def test_a_sibling_directory_sharing_the_prefix_is_outside(tmp_path: Path) -> None:
    (tmp_path / "landing").mkdir()
    (tmp_path / "landing-evil").mkdir()
    with pytest.raises(LandingPathError, match="outside"):
        resolve_landing_path(tmp_path / "landing", tmp_path / "landing-evil" / "x.jsonl")


def test_path_like_names_are_accepted(tree: Path) -> None:
    name = Path("2024-05-01") / "a.jsonl"
    assert resolve_landing_path(os.fspath(tree), name) == (tree / name).resolve()


def test_the_dagster_landing_asset_reads_only_files_inside_the_landing_directory(tmp_path) -> None:
    from tally_pipeline.defs.ingest.landing_folders import landing_files

    landing, outside = tmp_path / "landing", tmp_path / "outside"
    (landing / "2026-03-01").mkdir(parents=True)
    outside.mkdir()
    (outside / "secret.jsonl").write_text("{}\n")
    (landing / "2026-03-01" / "good.jsonl").write_text("{}\n")
    (landing / "2026-03-01" / "escape.jsonl").symlink_to(outside / "secret.jsonl")
    (landing / "2026-03-02").symlink_to(outside, target_is_directory=True)
    assert [p.name for p in landing_files(landing, "2026-03-01")] == ["good.jsonl"]
    assert landing_files(landing, "2026-03-02") == []
    assert landing_files(landing, "../outside") == []
