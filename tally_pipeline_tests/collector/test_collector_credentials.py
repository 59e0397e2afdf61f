"""No credential a bus message carries is kept or printed: a real ``tally collect openstack`` between the
machine's RabbitMQ and a real ``tally serve`` on Postgres, fed notifications whose request context holds
a user's Keystone token, a service token, the token's body, a password and a transport URL with its
password (as oslo.messaging packs a context: ``_context_*`` fields; releases before it asked the
context for a redacted copy sent the tokens as they were), mapped ones and poison alike.

Every file in the buffer directory, the collector's log, what ``tally collector rejected`` and
``tally collector status`` print, and the API's tables are searched for each secret.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner

from tally_pipeline.bench.collector_process import CollectorProcess
from tally_pipeline.bench.oslo_bus import ServicePublishers
from tally_pipeline.bench.serve_process import ServeProcess
from tally_pipeline.cli import main
from tally_pipeline_tests.faults import TOKEN, migrate, tokens_file, wait_until
from tally_pipeline_tests.providers.openstack.notification_samples import sample
from tally_pipeline_tests.rabbit import SERVICES, VHost

CLOUD = "region-one"
USER_TOKEN = "gAAAAABuser-keystone-token-5f1e9"
SERVICE_TOKEN = "gAAAAABservice-token-77aa1"
TOKEN_BODY = "token-body-catalog-c0de4"
CONTEXT_PASSWORD = "context-password-4e4e2"
TRANSPORT_PASSWORD = "transport-pw-93c1x"
PAYLOAD_PASSWORD = "payload-url-pw-11b7"
SECRETS = (USER_TOKEN, SERVICE_TOKEN, TOKEN_BODY, CONTEXT_PASSWORD, TRANSPORT_PASSWORD, PAYLOAD_PASSWORD)

CONTEXT = {
    "user_id": "user-visible-1", "project_id": "project-visible-1", "request_id": "req-visible-1",
    "auth_token": USER_TOKEN, "service_token": SERVICE_TOKEN,
    "auth_token_info": {"token": {"catalog": [{"id": TOKEN_BODY}]}},
    "password": CONTEXT_PASSWORD,
    "transport_url": f"rabbit://nova:{TRANSPORT_PASSWORD}@rabbit.example:5672/",
}


class UnredactedContext:
    """A request context as oslo.messaging packed it before it asked contexts for a redacted copy (and as
    a service whose context class keeps its credentials still sends it): every field, tokens included."""

    def __init__(self, fields: dict[str, Any]):
        self.fields = fields

    def redacted_copy(self) -> UnredactedContext:
        return self

    def to_dict(self) -> dict[str, Any]:
        return dict(self.fields)


def _rejected_output(buffer_dir: Path, *args: str) -> str:
    shown = CliRunner().invoke(main, ["collector", "rejected", "--buffer-dir", str(buffer_dir), *args])
    assert shown.exit_code == 0, shown.output
    return shown.output


def _database_text(url: str) -> str:
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT e::text FROM events e UNION ALL SELECT r::text FROM rejected_events r").fetchall()
    return "\n".join(r[0] for r in rows)


@pytest.mark.slow
def test_no_context_credential_is_stored_or_printed(vhost: VHost, tmp_path: Path, pg_url: str) -> None:
    url = migrate(pg_url)
    token = tmp_path / "collector.token"
    token.write_text(TOKEN + "\n")
    buffer_dir = tmp_path / "buffer"
    config = tmp_path / "collector.yaml"
    config.write_text(json.dumps({"collector": {"batch_timeout": 0.05, "drain_timeout": 10}}))
    stored_volume = sample("cinder/volume.create.end.json")
    broken = sample("cinder/volume.create.end.json")
    broken["payload"]["size"] = "big"
    unknown = {"event_type": "telemetry.polling", "priority": "INFO",
               "payload": {"endpoint": f"rabbit://nova:{PAYLOAD_PASSWORD}@rabbit.example/"}}
    # Not JSON (cut short): its context cannot be walked, so it is cut before the first credential.
    cut_short = (f'{{"oslo.version": "2.0", "oslo.message": "{{\\"_context_request_id\\": \\"req-visible-2\\", '
                 f'\\"_context_auth_token\\": \\"{USER_TOKEN}\\", \\"payload\\": {{').encode()
    # The old driver's form (no envelope), its key written with an escape.
    escaped = json.dumps({"\\u005fcontext_auth_token": "X", "event_type": "telemetry.sample", "payload": {},
                          "message_id": "m-escaped"}).replace("\\\\u005f", "\\u005f").replace('"X"',
                                                                                            f'"{SERVICE_TOKEN}"')
    vhost.declare_exchanges()
    with ServeProcess(url, tokens_file=tokens_file(tmp_path), log_path=tmp_path / "serve.log") as api:
        api.start()
        with CollectorProcess(cloud=CLOUD, transport_url=vhost.transport_url(), api_url=api.url,
                              buffer_dir=buffer_dir, token_file=token, config=config,
                              log_path=tmp_path / "collector.log") as c:
            c.start(bound=len(SERVICES))
            publishers = ServicePublishers(vhost.transport_url())
            try:
                for message in (stored_volume, broken, unknown):
                    publishers.publish("openstack", "notifications", message, UnredactedContext(CONTEXT))
            finally:
                publishers.close()
            vhost.publish_raw("nova", "notifications.info", cut_short)
            vhost.publish_raw("nova", "notifications.info", escaped.encode())
            wait_until(lambda: c.metric("tally_collector_received_total") == 5, "the five messages read")
            wait_until(lambda: c.metric("tally_collector_sent_total", outcome="stored") == 1, "the volume stored")
            status = CliRunner().invoke(main, ["collector", "status", "--buffer-dir", str(buffer_dir)]).output
            plain = _rejected_output(buffer_dir)
            shown = _rejected_output(buffer_dir, "--json")
            assert c.stop() == 0
            log = c.log_text()
    rejected = json.loads(shown)
    assert sorted(r["reason"] for r in rejected) == ["invalid", "unknown_type", "unknown_type", "unparseable"]
    assert all("***" in r["raw"] or "withheld" in r["raw"] for r in rejected), [r["raw"] for r in rejected]
    # Who and which request stay, for the operator to follow the message back.
    invalid = json.loads(json.loads(next(r for r in rejected if r["reason"] == "invalid")["raw"])["oslo.message"])
    assert (invalid["_context_user_id"], invalid["_context_request_id"]) == ("user-visible-1", "req-visible-1")
    assert invalid["_context_auth_token"] == invalid["_context_auth_token_info"] == "***"
    assert invalid["payload"]["size"] == "big"
    assert "req-visible-2" in next(r["raw"] for r in rejected if r["reason"] == "unparseable")
    files = [p for p in buffer_dir.rglob("*") if p.is_file()]
    assert any(p.name == "buffer.sqlite3" for p in files), files
    texts = {str(p): p.read_bytes().decode("utf-8", "replace") for p in files}
    texts |= {"log": log, "status": status, "rejected": plain, "rejected --json": shown,
              "database": _database_text(url)}
    assert "user-visible-1" in texts["rejected --json"] and "volume.create.end" in texts["database"]
    for where, text in texts.items():
        for secret in SECRETS:
            assert secret not in text, f"{secret} found in {where}"
