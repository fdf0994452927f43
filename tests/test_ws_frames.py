"""An open connection's everyday frames read and written by `envkit.transport.fast.frames` on the default transport, and
every other frame handed to websockets from exactly its first byte."""

from __future__ import annotations

import gc
import json
import random
import socket
from typing import Any

import pytest
import raw_ws
from conftest import needs_fast_path
from websockets.frames import Frame, Opcode
from websockets.server import ServerProtocol
from websockets.streams import StreamReader

from envkit import create_app
from envkit.app.targets import resolve_target
from envkit.testing import running_server
from envkit.transport.fast.frames import BINARY, PING, PONG, TEXT, FrameReader, between_frames, server_frame

MAX_SIZE = 100_000
SIZES = (0, 1, 125, 126, 127, 65_535, 65_536, 70_000)


def read_in_pieces(stream: bytes, seed: int, *, max_size: int | None = MAX_SIZE,
                   refuse: int | None = None) -> tuple[list[tuple[int, bytes]], bytes | None]:
    """Feed `stream` to a `FrameReader` in random pieces: the frames it read, and what it handed over (None: nothing).
    `refuse`: the number of the frame `on_frame` answers False to."""
    frames: list[tuple[int, bytes]] = []
    handed: list[bytes] = []

    def on_frame(first_byte: int, payload: bytes) -> bool:
        assert not handed, "a frame was read after the reader handed over"
        frames.append((first_byte, payload))
        return len(frames) != refuse

    reader = FrameReader(max_size, on_frame, handed.append)
    rng, start = random.Random(seed), 0
    while start < len(stream):
        end = start + rng.choice((1, 2, 3, 7, 100, 5000, 70_000))
        if handed:
            handed[0] += stream[start:end]   # once handed over, every later byte is the new reader's
        else:
            reader.feed(stream[start:end])
        start = end
    return frames, handed[0] if handed else None


def everyday_frames(seed: int) -> list[tuple[int, bytes]]:
    rng = random.Random(seed)
    frames = []
    for _ in range(40):
        kind = rng.choice((TEXT, BINARY, PING, PONG))
        size = rng.randrange(126) if kind in (PING, PONG) else rng.choice(SIZES)
        frames.append((kind, rng.randbytes(size)))
    return frames


def client_bytes(frames: list[tuple[int, bytes]]) -> bytes:
    return b"".join(raw_ws.frame(payload, first_byte & 0x0F) for first_byte, payload in frames)


@pytest.mark.parametrize("seed", range(5))
def test_frames_split_anywhere_are_read_whole_and_in_order(seed: int) -> None:
    frames = everyday_frames(seed)
    assert read_in_pieces(client_bytes(frames), seed) == (frames, None)


ODD_FRAMES = {
    "close": raw_ws.frame(b"\x03\xe8bye", 0x8),
    "first fragment": raw_ws.frame(b"part", 0x1, fin=False),
    "continuation": raw_ws.frame(b"part", 0x0),
    "reserved bit": bytes([0xC1]) + raw_ws.frame(b"x")[1:],
    "reserved opcode": raw_ws.frame(b"x", 0x3),
    "unmasked": raw_ws.frame(b"x", mask=False),
    "over the size limit": raw_ws.frame(b"x" * (MAX_SIZE + 1)),
    "control frame over 125 bytes": raw_ws.frame(b"p" * 126, 0x9),
}


@pytest.mark.parametrize("kind", ODD_FRAMES)
def test_any_other_frame_is_handed_over_from_its_first_byte(kind: str) -> None:
    before, after = everyday_frames(1)[:10], everyday_frames(2)[:5]
    odd = ODD_FRAMES[kind]
    for seed in range(10):
        read, handed = read_in_pieces(client_bytes(before) + odd + client_bytes(after), seed)
        assert read == before
        assert handed is not None and handed.startswith(odd) and len(handed) > len(odd)


def test_a_frame_refused_by_its_reader_hands_over_the_bytes_after_it() -> None:
    frames = everyday_frames(3)
    stream = client_bytes(frames)
    for seed in range(10):
        read, handed = read_in_pieces(stream, seed, refuse=4)
        assert read == frames[:4]
        assert handed is not None and read_in_pieces(handed, seed) == (frames[4:], None)


@pytest.mark.parametrize("size", SIZES)
def test_server_frames_are_read_by_websockets_as_written(size: int) -> None:
    payload = random.Random(size).randbytes(size)
    reader = StreamReader()
    reader.feed_data(server_frame(TEXT, payload))
    parsing = Frame.parse(reader.read_exact, mask=False)
    with pytest.raises(StopIteration) as parsed:
        next(parsing)
    frame = parsed.value.value
    assert (frame.opcode, frame.fin, frame.data) == (Opcode.TEXT, True, payload)


def test_websockets_is_between_frames_only_at_a_frame_boundary() -> None:
    """The check `answer_inline` relies on, against websockets' parser itself."""
    conn = ServerProtocol()
    conn.receive_data(raw_ws.handshake_request())
    conn.send_response(conn.accept(conn.events_received()[0]))
    assert between_frames(conn)
    step = raw_ws.frame(b'{"type": "reset"}')
    conn.receive_data(step[:2])
    assert not between_frames(conn)   # half a head in its buffer
    conn.receive_data(step[2:6])
    assert not between_frames(conn)   # the head read, waiting for the payload, nothing buffered
    conn.receive_data(step[6:])
    assert [event.data for event in conn.events_received()] == [b'{"type": "reset"}']
    assert between_frames(conn)


# -- on the default transport ----------------------------------------------------------------------


def echo_app() -> Any:
    target = resolve_target("echo")
    return create_app(target.env_class, target.action_cls, target.observation_cls, max_concurrent_envs=8)


def ask(sock: socket.socket, message: dict[str, Any], *, piecewise: bool = False) -> dict[str, Any]:
    frame = raw_ws.frame(json.dumps(message).encode())
    for piece in ([frame[index:index + 1] for index in range(len(frame))] if piecewise else [frame]):
        sock.sendall(piece)
    first, payload = raw_ws.read_frame(sock)
    assert first == TEXT
    return json.loads(payload)


def direct_readers() -> list[Any]:
    """The frame readers of the in-process server's open WebSocket connections."""
    return [obj.frame_reader for obj in gc.get_objects()   # no `frame_reader` where the fast paths are off
            if type(obj).__name__ == "QuietWebSocketsSansIOProtocol" and getattr(obj, "frame_reader", None) is not None
            and not obj.transport.is_closing()]


def test_an_open_connection_is_read_directly_byte_by_byte_with_pings_answered() -> None:
    needs_fast_path("frames")
    with running_server(echo_app()) as url, raw_ws.open_websocket(url) as sock:
        assert ask(sock, {"type": "reset"}, piecewise=True)["type"] == "observation"
        assert direct_readers(), "the connection's frames are not read by envkit.transport.fast.frames"
        sock.sendall(raw_ws.frame(b"are you there", 0x9))
        assert raw_ws.read_frame(sock) == (PONG, b"are you there")
        reply = ask(sock, {"type": "step", "data": {"message": "bytewise"}}, piecewise=True)
        assert reply["data"]["observation"]["echoed_message"] == "bytewise"


def test_after_a_fragmented_message_websockets_reads_on_and_the_session_carries_on() -> None:
    with running_server(echo_app()) as url, raw_ws.open_websocket(url) as sock:
        ask(sock, {"type": "reset"})
        message = json.dumps({"type": "step", "data": {"message": "in pieces"}}).encode()
        sock.sendall(raw_ws.frame(message[:10], 0x1, fin=False) + raw_ws.frame(message[10:], 0x0))
        assert json.loads(raw_ws.read_frame(sock)[1])["data"]["observation"]["echoed_message"] == "in pieces"
        assert not direct_readers()
        sock.sendall(raw_ws.frame(b"still there?", 0x9))
        assert raw_ws.read_frame(sock) == (PONG, b"still there?")
        reply = ask(sock, {"type": "step", "data": {"message": "after"}})
        assert reply["data"]["observation"]["echoed_message"] == "after"


def test_invalid_utf8_read_directly_closes_1007_and_the_server_carries_on() -> None:
    with running_server(echo_app()) as url:
        with raw_ws.open_websocket(url) as sock:
            ask(sock, {"type": "reset"})
            sock.sendall(raw_ws.frame(b"\xff\xfe not UTF-8"))
            first, payload = raw_ws.read_frame(sock)
            assert first == 0x88 and int.from_bytes(payload[:2], "big") == 1007
        with raw_ws.open_websocket(url) as other:
            assert ask(other, {"type": "reset"})["type"] == "observation"


async def test_with_compression_negotiated_websockets_reads_every_frame() -> None:
    from websockets.asyncio.client import connect

    with running_server(echo_app(), compression=True) as url:
        async with connect(url.replace("http", "ws") + "/ws", compression="deflate") as ws:
            assert ws.protocol.extensions
            await ws.send(json.dumps({"type": "reset"}))
            assert json.loads(await ws.recv())["type"] == "observation"
            await ws.send(json.dumps({"type": "step", "data": {"message": "squeezed " * 50}}))
            assert json.loads(await ws.recv())["data"]["observation"]["echoed_message"] == "squeezed " * 50
            assert not direct_readers()
