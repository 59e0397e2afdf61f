"""The docs' first API call, run as written, and every token the docs show held to the rule ``tally serve`` applies.

The section «Your first API call» of docs/api.md is read from the page: its ``bash`` blocks are run in
order by one real bash (so ``tally serve`` is started by the page's own command), its ``json event.json``
block is written where the page says to save it, and each ``json answer`` block must equal what the
command before it printed. Only the port is changed (8080 may be taken on a shared machine).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tally_pipeline.api.auth import _PLACEHOLDER_DIGESTS, token_weakness
from tally_pipeline.bench.common import free_port

pytestmark = pytest.mark.slow  # a real tally serve started by the page's own commands

ROOT = Path(__file__).resolve().parents[2]
API_MD = ROOT / "docs" / "api.md"
FENCE = re.compile(r"^```([^\n]*)\n(.*?)^```$", re.MULTILINE | re.DOTALL)
MARK = "@@doc-block-{}@@"


def first_call_blocks() -> list[tuple[str, str]]:
    """The fenced blocks of the section, as (info string, body), in page order."""
    text = API_MD.read_text(encoding="utf-8")
    start = text.index("\n## Your first API call\n")
    end = text.index("\n## ", start + 1)
    return [(m.group(1).strip(), m.group(2)) for m in FENCE.finditer(text[start:end])]


def script_of(blocks: list[tuple[str, str]], port: int) -> tuple[str, dict[int, str]]:
    """One bash script of the section's commands (each bash block preceded by a marker line), and the
    expected answer of each bash block that has one, by block number."""
    lines = ["set -euo pipefail"]
    answers: dict[int, str] = {}
    last_bash = -1
    for number, (info, body) in enumerate(blocks):
        body = body.replace("8080", str(port))
        if info == "bash":
            lines += [f"echo; echo '{MARK.format(number)}'", body]
            last_bash = number
        elif info.startswith("json") and info.split()[1:] == ["answer"]:
            assert last_bash >= 0 and last_bash not in answers, "an answer block follows one command block"
            answers[last_bash] = body
        elif info.startswith("json") and len(info.split()) == 2:
            name = info.split()[1]
            lines.append(f"cat > {name} <<'@@END@@'\n{body}@@END@@")
        else:
            raise AssertionError(f"a block the test does not know how to run: {info!r}")
    return "\n".join(lines) + "\n", answers


def test_the_first_api_call_runs_as_written(tmp_path: Path) -> None:
    blocks = first_call_blocks()
    assert [info for info, _ in blocks].count("bash") >= 4
    script, answers = script_of(blocks, free_port())
    assert len(answers) == 3  # stored, duplicate, the inventory
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    env.pop("TALLY_CONFIG", None)
    env.pop("TALLY_DATABASE", None)
    proc = subprocess.Popen(["bash", "-c", script], cwd=tmp_path, env=env, start_new_session=True,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=240)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # the page's server too, if a step failed before its kill
        except ProcessLookupError:
            pass
    serve_log = tmp_path / "first-call" / "serve.log"
    context = f"stderr: {err}\nserve.log: {serve_log.read_text() if serve_log.exists() else '(none)'}"
    assert proc.returncode == 0, context
    printed: dict[int, str] = {}
    parts = re.split(r"^@@doc-block-(\d+)@@\n", out, flags=re.MULTILINE)
    for number, text in zip(parts[1::2], parts[2::2], strict=True):
        printed[int(number)] = text
    for number, answer in answers.items():
        assert json.loads(printed[number]) == json.loads(answer), f"block {number} printed {printed[number]!r}"
    assert (tmp_path / "first-call" / "tally.duckdb").exists()


def doc_pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


#: An entry of a tokens file as the pages write one: ``- {name: …, token: "…", …}`` or ``- token: …``.
TOKEN_ENTRY = re.compile(r"^\s*-\s.*?\btoken:\s*\"?([^\s\",}]+)", re.MULTILINE)
DIGEST_ENTRY = re.compile(r"^\s*-\s.*?\btoken_sha256:\s*\"?([0-9a-fA-F]{64})", re.MULTILINE)


def test_every_token_the_docs_show_passes_the_rule() -> None:
    tokens = [(page.name, t) for page in doc_pages() for t in TOKEN_ENTRY.findall(page.read_text(encoding="utf-8"))]
    assert len(tokens) >= 2  # the tokens file of docs/api.md
    refused = {(page, token): token_weakness(token) for page, token in tokens if token_weakness(token) is not None}
    assert refused == {}
    digests = [d.lower() for page in doc_pages() for d in DIGEST_ENTRY.findall(page.read_text(encoding="utf-8"))]
    assert digests and not set(digests) & _PLACEHOLDER_DIGESTS


@pytest.mark.parametrize(("token", "rule"), [("another-secret", "14 characters, at least 16"),
                                             ("abcabcabcabcabcabc", "3 distinct characters, at least 10"),
                                             ("my-Example-token-1234567890", "placeholder")])
def test_the_rule_the_page_states(token: str, rule: str) -> None:
    weakness = token_weakness(token)
    assert weakness is not None and rule in weakness
    assert "at least **16 characters**, of which at least **10 distinct**" in API_MD.read_text(encoding="utf-8")
