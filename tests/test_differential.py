"""Property-based differential tests: the fast paths and the code they stand in for, fed the same random bytes.

- Frames: `FrameReader` (handing over to websockets at its first frame of another kind, as the transport does)
  against websockets' own parser alone: valid and invalid frames of every kind (reserved bits and opcodes,
  unmasked, control frames over 125 bytes, fragments, close frames, lengths in each encoding, minimal or not,
  over the size limit), split at random boundaries. The same frames and the same error must come out.
- HTTP: the default transport's protocol with requests answered at once against the same protocol without
  them (uvicorn's httptools path): random pipelined requests (repeats with changed bodies and lengths, lying,
  doubled and invalid `content-length`, `transfer-encoding`, other paths and methods, `Connection: close`,
  empty and garbage requests), split at random boundaries. The same bytes must be written, and the connection
  closed at the same point.

`ENVKIT_DIFFERENTIAL_EXAMPLES` sets the number of examples per test (10,000 by default).
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from websockets.frames import Frame, Opcode, apply_mask
from websockets.protocol import Protocol, Side

from envkit.core.http_exchange import BodyTooLarge, Exchange, ExchangeEndpoint
from envkit.transport.fast.at_once import AnsweredAtOnce
from envkit.transport.fast.checks import MemoryTransport, connect_protocol, probe_config, run_until_idle
from envkit.transport.uvicorn_protocols import HeadLimits, protocol_classes
from envkit.transport.fast.frames import FrameReader, frame_size_limit

EXAMPLES = int(os.environ.get("ENVKIT_DIFFERENTIAL_EXAMPLES", "10000"))
many = settings(max_examples=EXAMPLES, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# -- frames -------------------------------------------------------------------------------------------------------

MAX_SIZE = 1000
#: Payload sizes around every boundary: the 7-bit lengths, the 16-bit ones, the limit.
SIZES = st.one_of(st.integers(0, 130), st.integers(0, 130),
                  st.sampled_from([MAX_SIZE - 1, MAX_SIZE, MAX_SIZE + 1, 65_535, 65_536]))


@st.composite
def frames(draw: Any) -> bytes:
    """One frame as a client might send it, valid or not."""
    opcode = draw(st.sampled_from([0x1, 0x2, 0x9, 0xA, 0x1, 0x2, 0x0, 0x8, 0x3, 0xB]))
    fin = draw(st.booleans()) if draw(st.integers(0, 3)) == 0 else True
    reserved = draw(st.sampled_from([0, 0, 0, 0, 0x10, 0x20, 0x40]))
    is_masked = draw(st.integers(0, 9)) > 0
    size = draw(SIZES)
    payload = draw(st.binary(min_size=size, max_size=size)) if size <= 130 else bytes(range(256)) * (size // 256) \
        + bytes(size % 256)
    if opcode == 0x8 and draw(st.booleans()):
        payload = draw(st.sampled_from([1000, 1001, 1002, 999, 1005, 4000])).to_bytes(2, "big") + payload[:20]
        size = len(payload)
    encoding = draw(st.sampled_from(["minimal", "minimal", "16", "64"]))
    if encoding == "minimal" and size < 126:
        length = bytes((size,))
    elif encoding != "64" and size < 1 << 16:
        length = bytes((126,)) + size.to_bytes(2, "big")
    else:
        length = bytes((127,)) + size.to_bytes(8, "big")
    first = (0x80 if fin else 0) | reserved | opcode
    head = bytes((first, length[0] | (0x80 if is_masked else 0))) + length[1:]
    if not is_masked:
        return head + payload
    mask = draw(st.binary(min_size=4, max_size=4))
    return head + mask + apply_mask(payload, mask)


@st.composite
def split_stream(draw: Any, parts: Any) -> list[bytes]:
    """The parts joined and cut at random places."""
    stream = b"".join(draw(st.lists(parts, min_size=1, max_size=6)))
    cuts = sorted(set(draw(st.lists(st.integers(0, len(stream)), max_size=5))))
    bounds = [0, *cuts, len(stream)]
    return [stream[start:end] for start, end in zip(bounds, bounds[1:]) if end > start]


def websockets_reads(conn: Protocol) -> tuple[list[Frame], Any]:
    """What websockets made of the bytes it got: its frames, and the error that closed the connection (if any)."""
    error = conn.parser_exc
    sent = conn.close_sent
    return conn.events_received(), (type(error), str(error), sent.code if sent else None)


def read_by_websockets(chunks: list[bytes]) -> tuple[list[Frame], Any]:
    conn = Protocol(Side.SERVER, max_size=MAX_SIZE)
    for chunk in chunks:
        conn.receive_data(chunk)
    return websockets_reads(conn)


def read_by_envkit(chunks: list[bytes]) -> tuple[list[Frame], Any]:
    """`FrameReader` first, websockets from the first frame it hands over, as the fast path `frames` reads them."""
    conn = Protocol(Side.SERVER, max_size=MAX_SIZE)
    read: list[Frame] = []
    handed: list[bool] = []

    def hand_over(rest: bytes) -> None:
        handed.append(True)
        conn.receive_data(rest)

    reader = FrameReader(frame_size_limit(conn), lambda first, data: read.append(Frame(Opcode(first & 0x0F), data))
                         is None, hand_over)
    for chunk in chunks:
        if handed:
            conn.receive_data(chunk)
        else:
            reader.feed(chunk)
    events, error = websockets_reads(conn)
    return read + events, error


@many
@given(split_stream(frames()))
def test_the_frame_reader_reads_what_websockets_reads(chunks: list[bytes]) -> None:
    assert read_by_envkit(chunks) == read_by_websockets(chunks)


def test_the_frame_comparison_sees_a_misread_frame() -> None:
    """The comparison above is not blind: a frame read with another mask is not the frame websockets reads."""
    frame = bytes((0x81, 0x83)) + b"\x01\x02\x03\x04" + bytes(b ^ m for b, m in zip(b"abc", b"\x01\x02\x03"))
    assert read_by_envkit([frame]) == read_by_websockets([frame]) == ([Frame(Opcode.TEXT, b"abc")], (type(None),
                                                                                                      "None", None))
    assert read_by_envkit([frame]) != read_by_websockets([frame[:2] + b"\x00" * 4 + frame[6:]])


# -- requests -----------------------------------------------------------------------------------------------------


class Describe(ExchangeEndpoint):
    """Answers with a description of the request it got (method, path, headers, body)."""

    max_body_bytes = 40

    async def answer(self, exchange: Exchange) -> None:
        try:
            body = await exchange.body(self.max_body_bytes)
        except BodyTooLarge:
            await exchange.respond(413, b"too large", "text/plain")
            return
        headers = b";".join(name + b"=" + value for name, value in exchange.raw_headers)
        await exchange.respond(200, b"%s %s [%s] %s" % (exchange.method.encode(), exchange.path.encode(), headers,
                                                       body), "text/plain")


class DescribingApp:
    """`/a` and `/b` answered by the surface (at once where the fast path takes them); anything through ASGI too."""

    surface = Describe()

    def surface_at_once(self, path: str, headers: Any, local_host: str | None) -> ExchangeEndpoint | None:
        return self.surface if path in ("/a", "/b") else None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            await self.surface(scope, receive, send)


APP = DescribingApp()
CONFIG = probe_config(APP)


@st.composite
def requests(draw: Any) -> list[bytes]:
    """One request, or a run of repeats of one head with changed bodies; well-formed or not."""
    kind = draw(st.sampled_from(["plain"] * 6 + ["lying", "chunked", "empty", "garbage", "doubled", "odd length"]))
    if kind == "empty":
        return [draw(st.sampled_from([b"\r\n\r\n", b"\r\n", b"\n\n"]))]
    if kind == "garbage":
        return [draw(st.binary(max_size=20))]
    method = draw(st.sampled_from([b"POST"] * 4 + [b"GET", b"DELETE", b"PUT", b"PATCH"]))
    path = draw(st.sampled_from([b"/a"] * 4 + [b"/b", b"/other", b"/a?x=1", b"/%61"]))
    version = draw(st.sampled_from([b"1.1"] * 8 + [b"1.0"]))
    extra = draw(st.lists(st.sampled_from([b"x-key: 1", b"x-key: 2", b"connection: close", b"connection: keep-alive",
                                           b"expect: 100-continue", b"Content-Type: text/plain"]),
                          max_size=2, unique=True))
    head = b"%s %s HTTP/%s\r\nhost: 127.0.0.1\r\n%s" % (method, path, version,
                                                        b"".join(line + b"\r\n" for line in extra))
    repeats = draw(st.integers(1, 3))
    out = []
    for _ in range(repeats):
        body = draw(st.binary(max_size=45))
        if kind == "chunked":
            out.append(head + b"transfer-encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n" % (len(body), body))
            continue
        length = {"lying": len(body) + draw(st.sampled_from([-3, -1, 1, 5])), "odd length": None}.get(kind, len(body))
        value = draw(st.sampled_from([b"x", b" 5", b"5 ", b"-1", b"+3"])) if length is None else b"%d" % max(length, 0)
        lengths = b"content-length: %s\r\n" % value
        if kind == "doubled":
            lengths += b"Content-Length: %d\r\n" % draw(st.sampled_from([len(body), len(body) + 1]))
        out.append(head + lengths + b"\r\n" + body)
    return out


@st.composite
def request_reads(draw: Any) -> list[bytes]:
    """Runs of requests as a server reads them: most reads end where a request ends (so that a connection's repeats
    are seen whole, one or more to a read), some are cut anywhere."""
    reads, current = [], b""
    for message in [message for run in draw(st.lists(requests(), min_size=1, max_size=5)) for message in run]:
        current += message
        how = draw(st.sampled_from(["end", "end", "join", "cut"]))
        if how == "end":
            reads.append(current)
            current = b""
        elif how == "cut":
            at = draw(st.integers(0, len(current)))
            reads.append(current[:at])
            current = current[at:]
    return [read for read in (*reads, current) if read]


def settled(loop: asyncio.AbstractEventLoop, transport: MemoryTransport) -> None:
    """Run the loop until the protocol writes nothing more (uvicorn answers pipelined requests a few turns apart)."""
    written = -1
    while written != len(transport.written):
        written = len(transport.written)
        run_until_idle(loop, 4)


def served(chunks: list[bytes], at_once: bool) -> tuple[bytes, int | None]:
    """What the default transport's HTTP protocol writes for `chunks` (fed one read each), and after which read it
    closed the connection (None: open)."""
    loop = asyncio.new_event_loop()
    try:
        http_class = protocol_classes(HeadLimits(), (AnsweredAtOnce,) if at_once else ())[0]
        protocol, transport = connect_protocol(http_class, APP, loop, CONFIG)
        assert hasattr(protocol, "_exchange_at_once") == at_once
        closed_at = None
        for index, chunk in enumerate(chunks):
            protocol.data_received(chunk)
            settled(loop, transport)
            if transport.is_closing():
                closed_at = index
                break
        transport.lose()
        run_until_idle(loop, 2)
        return bytes(transport.written), closed_at
    finally:
        loop.close()


def responses(data: bytes) -> list[bytes]:
    """The responses in `data`, each whole (every response here says its length)."""
    found = []
    while data:
        head_end = data.index(b"\r\n\r\n") + 4
        if data.startswith(b"HTTP/1.1 1"):   # 100 Continue: no body
            found.append(data[:head_end])
            data = data[head_end:]
            continue
        length = int(data[:head_end].split(b"content-length: ")[1].split(b"\r\n")[0])
        found.append(data[:head_end + length])
        data = data[head_end + length:]
    return found


def agree(fast: tuple[bytes, int | None], standard: tuple[bytes, int | None]) -> bool:
    """The same bytes and the same close; or, where one read held requests and then bytes that are no request, the
    same one 400 and close, and the requests before it answered in order. (uvicorn answers a request in a task, and
    writes the 400 from the parser first: the task then writes its answer after the 400, or none at all. Answered at
    once, a request is answered before the parser reads on.)"""
    if fast == standard:
        return True
    (fast_data, fast_closed), (standard_data, standard_closed) = fast, standard
    answered, refused = _refusals(responses(fast_data))
    expected, standard_refused = _refusals(responses(standard_data))
    return (fast_closed == standard_closed and len(refused) == 1 and refused == standard_refused
            and answered[:len(expected)] == expected)


def _refusals(answers: list[bytes]) -> tuple[list[bytes], list[bytes]]:
    """`answers` split into the answered requests and the 400s."""
    refused = [answer for answer in answers if answer.startswith(b"HTTP/1.1 400 ")]
    return [answer for answer in answers if answer not in refused], refused


@many
@given(request_reads())
def test_requests_answered_at_once_are_answered_as_uvicorn_answers_them(chunks: list[bytes]) -> None:
    assert agree(served(chunks, at_once=True), served(chunks, at_once=False))


def test_the_request_comparison_sees_a_changed_answer() -> None:
    request = b"POST /a HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-length: 2\r\n\r\nhi"
    written, closed = served([request, request.replace(b"hi", b"yo")], at_once=True)
    assert written.count(b"HTTP/1.1 200 OK") == 2 and written.endswith(b"] yo") and closed is None, written
    assert not agree(served([request], at_once=True), served([request.replace(b"hi", b"ho")], at_once=False))
