"""Secrets kept out of log lines, error messages and the dead letter.

Two kinds of secret reach text we print or store: a password inside a database URL (the start-up
line, a store or configuration error, a driver's message) and a bearer token (an ``Authorization``
header that a client's overstated ``Content-Length`` made part of a body). Both are found by shape,
so an unknown secret is caught too, and the passwords of the configured database are also replaced
wherever they appear verbatim (a driver may quote one without its URL around it).
"""

from __future__ import annotations

import logging
import re
import threading
from urllib.parse import unquote, urlsplit

MASK = "***"
MAX_MASKS = 1000  # credentials masked in one text; past them the rest of the text is withheld
MAX_LOG_CHARS = 16 * 1024  # a longer log message is cut (and then redacted)

# scheme://user:SECRET@host: the secret runs to the last "@" of the word, so a password holding an
# unencoded "@" or "/" is masked whole (at worst the host is masked with it). The pattern starts at
# the literal "://" and every repetition is bounded and possessive, so no input makes it backtrack;
# a password over 256 characters is masked only verbatim (``remember_url_password``).
_URL_PASSWORD = re.compile(r"(://[^\s/@:'\"<>]{0,128}+:)(?:[^\s'\"<>@]{0,256}+@)++")
# password=SECRET in a libpq key=value string or a URL's query string.
_KEY_PASSWORD = re.compile(r"(?i)(password[ \t]{0,8}+=[ \t]{0,8}+)(?:'(?:[^'\\]|\\.){0,256}+'|[^\s&'\"]{1,256}+)")
# A whole Authorization header line, or any bearer credential: searched case-sensitively in an
# ASCII-lowered copy of the bytes (same length, so the spans carry over), because a case-insensitive
# pattern over a 5 MiB body costs seconds and this runs on every refused body.
_CREDENTIAL = re.compile(rb"(?:authorization[ \t]{0,8}:[ \t]{0,8}([^\r\n]+))|(?:bearer[ \t]{1,8}([^\s'\",\\]+))")

_known_lock = threading.Lock()
_known: frozenset[str] = frozenset()


def remember_url_password(url: str) -> None:
    """Mask this URL's password (as written and percent-decoded) wherever it appears from now on."""
    try:
        password = urlsplit(url).password
    except ValueError:
        return
    if password:
        remember_secret(password)


def remember_secret(secret: str) -> None:
    """Mask ``secret`` (as written and percent-decoded) wherever it appears from now on: a password that
    no URL shape gives away, e.g. one host's in a broker URL listing several."""
    global _known
    if not secret:
        return
    with _known_lock:
        _known = _known | {secret, unquote(secret)}


def redact(text: str) -> str:
    """``text`` (a message or a log line) with every database password and credential replaced by ``***``."""
    if "://" in text:
        text = _URL_PASSWORD.sub(rf"\1{MASK}@", text)
    text = _KEY_PASSWORD.sub(rf"\1{MASK}", text)
    return mask_credentials(text)


def mask_credentials(text: str) -> str:
    """``text`` (up to a whole request body) with ``Authorization:`` values, ``Bearer`` credentials and
    the configured database passwords replaced by ``***``; linear in its length."""
    for secret in _known:
        if secret in text:
            text = text.replace(secret, MASK)
    data = text.encode("utf-8", "surrogatepass")
    lowered = data.lower()
    if b"authorization" not in lowered and b"bearer" not in lowered:
        return text
    pieces: list[bytes] = []
    last = 0
    for count, match in enumerate(_CREDENTIAL.finditer(lowered)):
        if count == MAX_MASKS:  # each mask costs microseconds: a body made of them is cut here
            rest = len(data) - match.start()
            pieces += [data[last:match.start()], f"[{rest} more bytes withheld: over {MAX_MASKS} credentials]".encode()]
            return b"".join(pieces).decode("utf-8", "surrogatepass")
        start, end = match.span(1) if match.group(1) is not None else match.span(2)
        pieces += [data[last:start], MASK.encode()]
        last = end
    if not pieces:
        return text
    pieces.append(data[last:])
    return b"".join(pieces).decode("utf-8", "surrogatepass")


class RedactingFilter(logging.Filter):
    """A handler filter that redacts each record's message and traceback before it is formatted."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if len(message) > MAX_LOG_CHARS:
            message = message[:MAX_LOG_CHARS] + f"… [{len(message) - MAX_LOG_CHARS} more characters]"
            record.msg, record.args = message, ()
        clean = redact(message)
        if clean != message:
            record.msg, record.args = clean, ()
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        return True


def redact_unconfigured_logging() -> None:
    """Filter Python's last-resort handler too: with no logging configured (every command but ``tally
    serve``), it prints libraries' warnings as they are, and the pool's connection errors quote the URL."""
    handler = logging.lastResort
    if handler is not None and not any(isinstance(f, RedactingFilter) for f in handler.filters):
        handler.addFilter(RedactingFilter())


def yaml_error_text(exc: Exception) -> str:
    """A YAML parse error without the excerpt of the file PyYAML quotes: that line may hold a database
    password or a token, cut anywhere (so not recognisable by shape). The position is kept."""
    problem = getattr(exc, "problem", None)
    mark = getattr(exc, "problem_mark", None)
    if problem is None or mark is None:
        return redact(str(exc).split("\n", 1)[0])
    context = getattr(exc, "context", None)
    where = f"line {mark.line + 1}, column {mark.column + 1}"
    return redact(f"{problem} at {where}" + (f" ({context})" if context else ""))
