"""The rejected log's text of a bus message: every context field that may hold a credential masked, at any
depth, inside the oslo.messaging envelope too; who and which request kept; a body that is not JSON cut
before its first such field; what needs no masking kept byte for byte."""

from __future__ import annotations

import json

import pytest

from tally_pipeline.collector.intake import EXCERPT_BYTES, raw_text

SECRET = "gAAAAAB-secret-7f3a9"


def envelope(notification: dict[str, object]) -> bytes:
    return json.dumps({"oslo.version": "2.0", "oslo.message": json.dumps(notification)}).encode()


@pytest.mark.parametrize("field,value", [
    ("_context_auth_token", SECRET),
    ("_context_service_token", SECRET),
    ("_context_auth_token_info", {"token": {"methods": ["password"], "id": SECRET}}),
    ("_context_password", SECRET),
    ("_context_trust_id", SECRET),  # a field the allow-list does not know is masked all the same
    ("_context_transport_url", f"rabbit://nova:{SECRET}@rabbit:5672/"),
])
def test_a_context_credential_is_masked_in_the_envelope_and_without_it(field: str, value: object) -> None:
    notification = {"message_id": "m1", "event_type": "x.y", "_context_user_id": "u1",
                    "_context_request_id": "req-1", field: value, "payload": {"n": 1e308, "big": 2**70}}
    for body in (envelope(notification), json.dumps(notification).encode()):
        text = raw_text(body)
        assert SECRET not in text
        outer = json.loads(text)
        kept = json.loads(outer["oslo.message"]) if "oslo.message" in outer else outer
        assert kept[field] == "***"
        assert (kept["_context_user_id"], kept["_context_request_id"]) == ("u1", "req-1")
        assert kept["payload"] == {"n": 1e308, "big": 2**70}


def test_an_escaped_key_and_numbers_no_float_holds_are_read_as_written() -> None:
    body = ('{"\\u005fcontext_auth_token": "' + SECRET + '", "payload": {"n": 1e400, '
            '"i": 123456789012345678901234567890, "s": "\\ud800"}}').encode()
    text = raw_text(body)
    assert SECRET not in text
    assert '"n": 1e400' in text and "123456789012345678901234567890" in text and '"\\ud800"' in text


@pytest.mark.parametrize("body", [
    b'{"_context_user_id": "u1", "_context_auth_token": "%s", ' % SECRET.encode(),
    b'{"_context_user\\u005fauth_token": "%s", ' % SECRET.encode(),  # a safe name's prefix, then an escape
    b'{"oslo.version": "2.0", "oslo.message": "{\\"_context_auth_token\\": \\"%s\\", broken' % SECRET.encode(),
    b'\xff\xfe not json "_context_service_token": "%s"' % SECRET.encode(),
])
def test_a_body_that_is_not_json_is_cut_before_its_first_credential_field(body: bytes) -> None:
    text = raw_text(body)
    assert SECRET not in text and "withheld" in text


def test_a_message_without_credentials_is_kept_as_received() -> None:
    body = b'{"oslo.version": "2.0", "oslo.message": "{\\"_context_user_id\\":\\"u1\\",  \\"payload\\": {}}"}'
    assert raw_text(body) == body.decode()
    assert raw_text(b"not json {") == "not json {"


def test_a_huge_body_is_masked_then_cut() -> None:
    body = json.dumps({"_context_auth_token": SECRET, "payload": {"blob": "x" * (2 * EXCERPT_BYTES)}}).encode()
    text = raw_text(body)
    assert SECRET not in text and text.startswith('{"_context_auth_token": "***"')
    assert text.endswith("bytes of its text kept]") and len(text) < EXCERPT_BYTES + 100
