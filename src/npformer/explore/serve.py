"""``npformer explore RUN_DIR --serve``: the explorer page on 127.0.0.1, rerunning the model per input.

    GET  /?token=HEX     the page with the first inputs' payload and payload["serve"] (the form's fields)
    POST /api/explore    {"inputs": [{"text": ...}, ...]} -> a new payload, or {"error": "one line"}

The server binds the loopback address only. Like Jupyter's, it takes requests only from the browser
that opened the URL it printed, whatever the page of some other site tries:
- a Host other than ``127.0.0.1:PORT`` or ``localhost:PORT`` gets 403, so a name that a DNS
  rebinding attack points at 127.0.0.1 reaches nothing;
- every request needs the server's random token (``secrets``), in the ``token`` query parameter or
  an ``Authorization: token HEX`` header, compared in constant time (403 without it); the printed
  URL carries it and the page's script sends it back;
- the model runs only for a POST whose Content-Type is ``application/json`` (415 otherwise, so no
  plain HTML form can post) and whose Origin is absent or the server's own (403 otherwise).
Bodies over ``MAX_BODY`` bytes are refused (413) before they are read, a missing Content-Length gets
411 and an unreadable one 400; the JSON is parsed with limits (nesting depth, no NaN or Infinity)
and checked field by field before the model sees it. Bad input gets 400 and a one-line error the
page shows; any other failure of the model gets 500 with its first line. Every answer, http.server's
own refusals included, is JSON (or the page) with ``X-Content-Type-Options: nosniff`` and a
Content-Security-Policy.

Each connection has its own thread and a socket timeout (``TIMEOUT``), so an idle or slow client
never holds up the others; the model runs one request at a time under a lock, and the array pool
(``ops.workspace``) is released whenever no request is left in flight. The contract is
docs/EXPLORE_FORMAT.md, "Serve".
"""
from __future__ import annotations

import hmac
import json
import re
import secrets
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import numpy as np

from ..ops import workspace
from .payload import MAX_CHARS, Explorer

HOST = "127.0.0.1"
API = "/api/explore"
MAX_BODY = 64 * 1024                    # bytes of one POST body
MAX_DEPTH = 8                           # nesting of [ and { in it; a request needs 3
MAX_INT = 2**63 - 1                     # an "int" field's magnitude (indices and seeds are far smaller)
TIMEOUT = 10.0                          # seconds a connection may stay silent while it is read or written
# the page's own policy (page/explore.html's meta tag), plus what only a header can say: no framing
CSP = ("default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:; "
       "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
HEADERS = (("X-Content-Type-Options", "nosniff"), ("Content-Security-Policy", CSP),
           ("Referrer-Policy", "no-referrer"), ("Cache-Control", "no-store"))   # on every answer
_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"')
_DIGITS = re.compile(r"[0-9]+")
_INT_TEXT = re.compile(r"-?[0-9]{1,19}")


def serve_info(ex: Explorer) -> dict:
    """What the page's form needs: payload["serve"]."""
    return {"api": API, "max_input_chars": MAX_CHARS, "max_inputs": ex.max_inputs, "fields": ex.fields}


def json_depth(body: bytes) -> int:
    """How deep ``[`` and ``{`` nest in a JSON text (its strings left out), read before it is parsed,
    so a deep body never reaches the parser's recursion. Never less than the parser's own depth."""
    codes = np.frombuffer(_JSON_STRING.sub(b"", body), dtype=np.uint8)             # (n,)
    steps = np.isin(codes, (ord("["), ord("{"))).astype(np.int64) - np.isin(codes, (ord("]"), ord("}")))
    return int(np.cumsum(steps).max(initial=0))


class _Refused(ValueError):
    """NaN or Infinity in a request body: refused with its own message, not "not JSON"."""


def _no_constant(name: str):
    raise _Refused(f"the request body has {name}, which JSON does not allow")


def _field_value(i: int, field: dict, v):
    """One input's value of ``field``, checked against its kind ("text": a string of at most MAX_CHARS;
    "int": an integer, or its decimal digits as a string)."""
    name = field["name"]
    if field["kind"] == "int":
        if isinstance(v, str) and _INT_TEXT.fullmatch(v.strip()):
            v = int(v.strip())
        if not isinstance(v, int) or isinstance(v, bool) or abs(v) > MAX_INT:
            raise ValueError(f"input {i + 1}: {name} must be an integer below 2**63, got {_kind(v)}")
        return v
    if not isinstance(v, str):
        raise ValueError(f"input {i + 1}: {name} must be a string, got {_kind(v)}")
    if len(v) > MAX_CHARS:
        raise ValueError(f"input {i + 1}: {name} has {len(v)} characters, more than the limit of {MAX_CHARS}")
    return v


def _kind(v) -> str:
    """A JSON value named by its type (never echoed: it may be long)."""
    if isinstance(v, bool) or v is None:
        return json.dumps(v)
    if isinstance(v, int):
        return f"an integer of {len(str(abs(v)))} digits"
    return {str: "a string", float: "a number with a fraction or exponent", list: "a list",
            dict: "an object"}[type(v)]


def request_inputs(ex: Explorer, body: bytes) -> list[dict]:
    """A POST body -> input dicts (ValueError with a one-line reason when it is not what the contract says)."""
    depth = json_depth(body)
    if depth > MAX_DEPTH:
        raise ValueError(f"the request body nests {depth} deep, more than the limit of {MAX_DEPTH}")
    try:
        data = json.loads(body.decode("utf-8"), parse_constant=_no_constant)
    except _Refused:
        raise
    except ValueError:                  # not UTF-8, not JSON, or an integer of more digits than Python reads
        raise ValueError("the request body is not JSON") from None
    if not isinstance(data, dict) or not isinstance(data.get("inputs"), list) or not data["inputs"]:
        raise ValueError('the request needs "inputs": a non-empty list')
    if set(data) != {"inputs"}:
        raise ValueError('the request takes one key, "inputs", and no other')
    inputs = data["inputs"]
    if len(inputs) > ex.max_inputs:
        raise ValueError(f"at most {ex.max_inputs} inputs at once, got {len(inputs)}")
    fields = {f["name"]: f for f in ex.fields}
    out = []
    for i, item in enumerate(inputs):
        if isinstance(item, (str, int)) and not isinstance(item, bool):
            item = {ex.fields[0]["name"]: item}
        if not isinstance(item, dict) or not set(item) <= set(fields):
            raise ValueError(f"input {i + 1} must be an object with the fields {', '.join(sorted(fields))}")
        out.append({k: _field_value(i, fields[k], v) for k, v in item.items()})
    return out


class ExploreServer(ThreadingHTTPServer):
    """One explorer and the page of its first inputs; ``url`` (with the token) opens the page."""

    allow_reuse_address = False         # a port in use is an error, never shared

    def __init__(self, ex: Explorer, inputs: list[dict], port: int, timeout: float = TIMEOUT) -> None:
        from .render import render_html

        self.explorer = ex
        self.conn_timeout = timeout
        self.token = secrets.token_hex(24)                           # 192 bits, as Jupyter's
        self._model_lock = threading.Lock()                          # the explorer runs one input set at a time
        self._count_lock = threading.Lock()
        self._in_flight = 0                                          # requests waiting for or running the model
        payload = self.run_model(inputs)                             # bad first inputs fail before binding
        payload["serve"] = serve_info(ex)
        self.page = render_html(payload).encode("utf-8")
        super().__init__((HOST, port), _Handler)
        hosts = (f"{HOST}:{self.server_port}", f"localhost:{self.server_port}")   # (the port bound, if 0 was asked)
        self.hosts = frozenset(hosts)
        self.origins = frozenset(f"http://{h}" for h in hosts)

    @property
    def origin(self) -> str:
        return f"http://{HOST}:{self.server_port}"

    @property
    def url(self) -> str:
        return f"{self.origin}/?token={self.token}"

    def token_ok(self, candidates: list[str]) -> bool:
        """Whether one of ``candidates`` is the token, compared in constant time."""
        want = self.token.encode("ascii")
        return any(hmac.compare_digest(c.encode("utf-8"), want) for c in candidates)

    def run_model(self, inputs: list[dict]) -> dict:
        """The explorer's payload for ``inputs``, one request at a time; the array pool is released
        once no other request waits for the model."""
        with self._count_lock:
            self._in_flight += 1
        try:
            with self._model_lock:
                return self.explorer.payload(inputs)
        finally:
            with self._count_lock:
                self._in_flight -= 1
                if self._in_flight == 0:
                    workspace.clear()

    def answer(self, body: bytes) -> tuple[int, bytes]:
        """(HTTP status, JSON body) for one POST body."""
        try:
            inputs = request_inputs(self.explorer, body)
            payload = self.run_model(inputs)
            payload["serve"] = serve_info(self.explorer)
            return 200, _json_bytes(payload)
        except (ValueError, TypeError, KeyError) as e:
            return 400, _json_bytes({"error": _first_line(e)})
        except Exception as e:  # the model failed: say so on the page, keep serving
            return 500, _json_bytes({"error": f"the model failed: {_first_line(e)}"})

    def handle_error(self, request, client_address) -> None:
        # a client that hung up or went silent is no news; anything else is one line, never a traceback
        e = sys.exc_info()[1]
        if not isinstance(e, OSError):
            print(f"npformer explore: a request failed: {type(e).__name__}: {_first_line(e)}", file=sys.stderr)


def _json_bytes(obj: dict) -> bytes:
    return json.dumps(obj, separators=(",", ":"), allow_nan=False).encode("utf-8")


def _first_line(e: BaseException | None) -> str:
    msg = str(e).strip()
    return msg.splitlines()[0] if msg else type(e).__name__


class _Handler(BaseHTTPRequestHandler):
    server: ExploreServer

    @property
    def timeout(self) -> float:  # type: ignore[override]  # read-only here, from the server; StreamRequestHandler.setup puts it on the connection's socket
        return self.server.conn_timeout

    def end_headers(self) -> None:
        for name, value in HEADERS:
            self.send_header(name, value)
        super().end_headers()

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _error(self, status: int, message: str) -> None:
        self.close_connection = True                                  # whatever body the request has is never read
        self._send(status, _json_bytes({"error": message}), "application/json")

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        # http.server's own refusals (a malformed request line or headers, an unknown method): JSON as ours
        self._error(code, message or self.responses.get(code, ("refused",))[0])

    def _admitted(self) -> str | None:
        """The request's path when its Host and token pass; otherwise None, the 403 sent."""
        hosts = self.headers.get_all("Host") or []
        if len(hosts) != 1 or hosts[0].strip().lower() not in self.server.hosts:
            port = self.server.server_port
            self._error(403, f"the Host header must be {HOST}:{port} or localhost:{port}")
            return None
        target = urlsplit(self.path)
        tokens = parse_qs(target.query).get("token", [])
        scheme, _, credential = (self.headers.get("Authorization") or "").strip().partition(" ")
        if scheme.lower() == "token":
            tokens.append(credential.strip())
        if not self.server.token_ok(tokens):
            self._error(403, "this server needs its token: open the URL that npformer explore --serve printed")
            return None
        return "" if target.scheme or target.netloc else target.path   # an absolute URL names no route here

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        path = self._admitted()
        if path is None:
            return
        if path in ("/", "/index.html"):
            self._send(200, self.server.page, "text/html; charset=utf-8")
        else:
            self._error(404, "not found")

    def do_POST(self) -> None:  # noqa: N802
        path = self._admitted()
        if path is None:
            return
        if path != API:
            self._error(404, "not found")
            return
        origins = self.headers.get_all("Origin")
        if origins is not None and (len(origins) != 1 or origins[0] not in self.server.origins):
            self._error(403, f"requests come only from this server's own page ({self.server.origin})")
            return
        if self.headers.get_content_type() != "application/json":
            self._error(415, "the request body must be JSON, sent as Content-Type: application/json")
            return
        length = self._content_length()
        if length is None:
            return
        body = self.rfile.read(length)
        if len(body) < length:
            self._error(400, f"the request body ended after {len(body)} of its {length} bytes")
            return
        status, data = self.server.answer(body)
        self._send(status, data, "application/json")

    def _content_length(self) -> int | None:
        """The body's length in bytes, or None with 411 (none given), 400 (unreadable) or 413 (too large)."""
        values = self.headers.get_all("Content-Length")
        if not values or self.headers.get("Transfer-Encoding"):
            self._error(411, "the request needs a Content-Length (and no Transfer-Encoding)")
            return None
        if len(values) != 1 or not _DIGITS.fullmatch(values[0].strip()):
            self._error(400, "the request's Content-Length is not one decimal number")
            return None
        text = values[0].strip()
        if len(text) > 18 or int(text) > MAX_BODY:                # (int() reads at most 4300 digits)
            size = text if len(text) <= 18 else "over 10**18"
            self._error(413, f"the request body of {size} bytes is over the limit of {MAX_BODY}")
            return None
        return int(text)

    def log_message(self, format, *args) -> None:  # noqa: A002 (http.server's name)
        pass                                                          # quiet: the command prints its own lines
