"""The sockets of the collective bandwidth test: a TCP ring between the preflights of one attempt, the link
rate of each ring link, and the ring all-reduce (the schedule and arithmetic are in collective.py).

Node r listens on the attempt's port and connects to node r+1; it accepts exactly one connection, from node
r-1. The port is the attempt's MASTER_PORT (render/env.py: it changes with every attempt), and each
connection opens with a handshake naming the attempt's rendezvous id and the sender's rank: a pod of an
older attempt that knocks anyway is turned away, never joins. Every blocking call has the test's deadline
as its timeout, so a peer that never connects or stops mid-way fails the test; it cannot hang it.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from multinode.preflight import collective
from multinode.preflight.collective import ring_next, ring_prev

MAGIC = b"MNRING1\n"
ACCEPTED = b"OK"
_RANK = struct.Struct("!I")
_FRAME = struct.Struct("!I")
# What each node shares after the link rates: its rank, inbound rate (Gbit/s) and input CRC-32.
_RECORD = struct.Struct("!IdI")
# Link frames: about 10 ms of the rate seen so far, so the sender stops close to its deadline on a slow link
# and does not make a million small sends on a fast one.
MIN_FRAME, MAX_FRAME = 16 * 2**10, 4 * 2**20
# A connection that says nothing for this long is not a peer (a port scan, a half-open stale pod).
HANDSHAKE_SECONDS = 5.0
CONNECT_RETRY_SECONDS = 0.1


class PeerError(Exception):
    """A ring neighbour that did not connect in time, or broke off: the test could not run."""


@dataclass
class Ring:
    rank: int
    size: int  # nodes
    to_next: socket.socket
    from_prev: socket.socket
    deadline: float  # time.monotonic()
    names: Sequence[str]

    def remaining(self, what: str) -> float:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise PeerError(f"{what}: the test's time ran out")
        return left

    def close(self) -> None:
        for sock in (self.to_next, self.from_prev):
            sock.close()

    def peer(self, rank: int) -> str:
        return f"node {rank} ({self.names[rank]})"


def _recv_exact(sock: socket.socket, view: memoryview, ring: Ring, what: str) -> None:
    got = 0
    while got < len(view):
        sock.settimeout(ring.remaining(what))
        try:
            n = sock.recv_into(view[got:])
        except TimeoutError:
            raise PeerError(f"{what}: nothing more within the test's time") from None
        except OSError as e:
            raise PeerError(f"{what}: {e.strerror or e}") from None
        if n == 0:
            raise PeerError(f"{what}: the connection was closed")
        got += n


def _recv(sock: socket.socket, length: int, ring: Ring, what: str) -> bytearray:
    buf = bytearray(length)
    _recv_exact(sock, memoryview(buf), ring, what)
    return buf


def _send(sock: socket.socket, data: bytes | memoryview, ring: Ring, what: str) -> None:
    sock.settimeout(ring.remaining(what))
    try:
        sock.sendall(data)
    except TimeoutError:
        raise PeerError(f"{what}: could not send within the test's time") from None
    except OSError as e:
        raise PeerError(f"{what}: {e.strerror or e}") from None


def _hello(ring_id: bytes, rank: int) -> bytes:
    """What a node sends the next one first: the attempt's ring id and its own rank."""
    return MAGIC + _RANK.pack(len(ring_id)) + ring_id + _RANK.pack(rank)


def _handshake_ok(conn: socket.socket, ring_id: bytes, expected_rank: int) -> bool:
    conn.settimeout(HANDSHAKE_SECONDS)
    hello = _hello(ring_id, expected_rank)
    want = len(hello)
    data = b""
    try:
        while len(data) < want:
            more = conn.recv(want - len(data))
            if not more:
                return False
            data += more
    except OSError:
        return False
    return data == hello


def _accept_prev(listener: socket.socket, ring_id: bytes, prev: int, deadline: float,
                 found: list[socket.socket], stop: threading.Event) -> None:
    while not stop.is_set() and time.monotonic() < deadline:
        listener.settimeout(min(0.5, max(0.01, deadline - time.monotonic())))
        try:
            conn, _ = listener.accept()
        except TimeoutError:
            continue
        except OSError:
            return
        if _handshake_ok(conn, ring_id, prev):
            conn.sendall(ACCEPTED)
            found.append(conn)
            return
        conn.close()  # another attempt's pod, or not a peer at all


def _connect_next(address: tuple[str, int], ring_id: bytes, rank: int,
                  deadline: float) -> tuple[socket.socket | None, str]:
    """Connect to the next node and pass its handshake; retry until the deadline (its listener may not be up
    yet, or the one answering is a stale pod's). Returns the socket, or None and the last error."""
    last = "no answer"
    hello = _hello(ring_id, rank)
    while time.monotonic() < deadline:
        try:
            wait = max(0.1, min(HANDSHAKE_SECONDS, deadline - time.monotonic()))
            sock = socket.create_connection(address, timeout=wait)
        except OSError as e:
            last = e.strerror or str(e)
            time.sleep(CONNECT_RETRY_SECONDS)  # a retry interval: the peer's listener is not up yet
            continue
        try:
            sock.sendall(hello)
            if sock.recv(len(ACCEPTED)) == ACCEPTED:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                return sock, ""
            last = "the listener turned the handshake down (not this attempt's node)"
        except OSError as e:
            last = e.strerror or str(e)
        sock.close()
        time.sleep(CONNECT_RETRY_SECONDS)
    return None, last


def open_ring(rank: int, names: Sequence[str], port: int, ring_id: str, deadline: float,
              bind_host: str = "") -> Ring:
    """Listen on `port`, connect to the next node, accept the previous one. `names[i]` is node i's address."""
    n = len(names)
    listener = socket.create_server((bind_host, port), reuse_port=False)
    found: list[socket.socket] = []
    stop = threading.Event()
    accepting = threading.Thread(target=_accept_prev, daemon=True,
                                 args=(listener, ring_id.encode(), ring_prev(rank, n), deadline, found, stop))
    accepting.start()
    try:
        to_next, error = _connect_next((names[ring_next(rank, n)], port), ring_id.encode(), rank, deadline)
        accepting.join(max(0.0, deadline - time.monotonic()) + 1.0)
    finally:
        stop.set()
        accepting.join()
        listener.close()
    if to_next is None:
        for sock in found:
            sock.close()
        nxt = ring_next(rank, n)
        raise PeerError(f"could not connect to node {nxt} ({names[nxt]}:{port}) in the test's time: {error}")
    if not found:
        to_next.close()
        prev = ring_prev(rank, n)
        raise PeerError(f"node {prev} ({names[prev]}) never connected to this node's port {port} "
                        "in the test's time")
    return Ring(rank, n, to_next, found[0], deadline, names)


def _concurrently(send: Callable[[], None], receive: Callable[[], None]) -> None:
    """Send to the next node while receiving from the previous one: every node sends first, so sending and
    then receiving would deadlock as soon as a chunk outgrows the socket buffers."""
    errors: list[BaseException] = []

    def sending() -> None:
        try:
            send()
        except BaseException as e:  # noqa: BLE001 - handed to the caller below
            errors.append(e)

    sender = threading.Thread(target=sending, daemon=True)
    sender.start()
    try:
        receive()
    finally:
        sender.join()
    if errors:
        raise errors[0]


def measure_inbound(ring: Ring, size: int, link_deadline: float) -> float:
    """Every node streams `size` bytes (or until `link_deadline`) to the next while it times what arrives from
    the previous one; the links run at once and independently, unlike in the all-reduce where the slowest link
    paces them all. Returns the inbound link's rate in Gbit/s, timed from its first frame to its end."""
    payload = memoryview(bytes(MAX_FRAME))
    prev = ring.peer(ring_prev(ring.rank, ring.size))
    nxt = ring.peer(ring_next(ring.rank, ring.size))
    measured: list[float] = []

    def send() -> None:
        sent, started, frame = 0, time.monotonic(), MIN_FRAME
        while sent < size and time.monotonic() < link_deadline:
            frame = min(frame, size - sent)
            _send(ring.to_next, _FRAME.pack(frame), ring, f"link rate to {nxt}")
            _send(ring.to_next, payload[:frame], ring, f"link rate to {nxt}")
            sent += frame
            rate = sent / max(time.monotonic() - started, 1e-6)  # bytes/s so far
            frame = int(min(MAX_FRAME, max(MIN_FRAME, rate / 100)))
        _send(ring.to_next, _FRAME.pack(0), ring, f"link rate to {nxt}")

    def receive() -> None:
        received, first = 0, None
        sink = memoryview(bytearray(MAX_FRAME))
        while True:
            (frame,) = _FRAME.unpack(_recv(ring.from_prev, _FRAME.size, ring, f"link rate from {prev}"))
            if first is None:
                first = time.monotonic()
            if frame == 0:
                break
            if frame > MAX_FRAME:
                raise PeerError(f"link rate from {prev}: a frame of {frame} bytes, more than any peer sends")
            _recv_exact(ring.from_prev, sink[:frame], ring, f"link rate from {prev}")
            received += frame
        measured.append(collective.gbps(received, time.monotonic() - (first or time.monotonic())))

    _concurrently(send, receive)
    return measured[0]


@dataclass(frozen=True)
class NodeRecord:
    inbound_gbps: float
    input_checksum: int


def all_gather_records(ring: Ring, own: NodeRecord) -> list[NodeRecord]:
    """Every node's record, on every node: n-1 steps passing 16-byte records around the ring."""
    records: list[NodeRecord | None] = [None] * ring.size
    records[ring.rank] = own
    packed = _RECORD.pack(ring.rank, own.inbound_gbps, own.input_checksum)
    for _ in range(ring.size - 1):
        _send(ring.to_next, packed, ring, "sharing link rates")  # 16 bytes: never blocks on a buffer
        packed = bytes(_recv(ring.from_prev, _RECORD.size, ring, "sharing link rates"))
        rank, rate, crc = _RECORD.unpack(packed)
        if rank >= ring.size:
            raise PeerError(f"sharing link rates: a record for node {rank} of {ring.size}")
        records[rank] = NodeRecord(rate, crc)
    found = [record for record in records if record is not None]
    if len(found) != ring.size:
        raise PeerError("sharing link rates: some nodes' records never arrived")
    return found


def all_reduce(ring: Ring, data: bytes) -> bytearray:
    """The XOR ring all-reduce of `data` (the same length on every node); returns the reduced buffer."""
    result = bytearray(data)
    view = memoryview(result)
    bounds = collective.chunk_bounds(len(data), ring.size)
    prev = ring.peer(ring_prev(ring.rank, ring.size))
    nxt = ring.peer(ring_next(ring.rank, ring.size))
    for step in collective.ring_schedule(ring.rank, ring.size):
        start, end = bounds[step.send_chunk]
        outgoing = bytes(view[start:end])  # a copy: the receive below may write into the buffer
        recv_start, recv_end = bounds[step.recv_chunk]
        incoming = bytearray(recv_end - recv_start)

        def send(chunk: bytes = outgoing, phase: str = step.phase) -> None:
            _send(ring.to_next, chunk, ring, f"{phase} to {nxt}")

        def receive(buf: bytearray = incoming, phase: str = step.phase) -> None:
            _recv_exact(ring.from_prev, memoryview(buf), ring, f"{phase} from {prev}")

        _concurrently(send, receive)
        if step.phase == collective.Phase.REDUCE_SCATTER:
            view[recv_start:recv_end] = collective.xor_bytes(view[recv_start:recv_end], incoming)
        else:
            view[recv_start:recv_end] = incoming
    return result
