"""larder's wire protocol, version 2 (docs/protocol.md), written from the
document for the tests: frames, the handshake's HMAC-SHA256 proofs with
Python's own hmac module (so the daemon's C is checked against something
it does not share), a client, and a fake owner daemon that records every
byte it receives.

Usage as a program:
  larder_wire.py owner PORT SECRET_FILE RECORD [--impostor | --liar | --stall | --trickle |
                                                 --busy]
      serve as a cluster member on 127.0.0.1:PORT: greet with a proof over
      the secret (a wrong one with --impostor), check the peer's PROVE,
      answer OPEN with an ERROR (so the peer reads the origin), and append
      every byte received to RECORD; RECORD.log gets one line per event.
      With --liar, it opens every index (OPENED) and answers each READ
      with DATA of the length asked, every byte 0x5A: wrong bytes from
      a member that proved the secret (RECORD.log: "read OFFSET LENGTH").
      With --stall, as --liar, but a READ of 1 MiB or more gets its DATA
      frame's header and half its bytes, then nothing more ("stalled"):
      a borrower caught mid-transfer.
      With --trickle, as --liar, but a READ of 1 MiB or more gets its DATA
      frame's header, then one byte every 0.4 s (within any receive
      timeout) until the borrower goes ("trickling", then "closed"): an
      owner holding a borrower's fill lock for as long as it likes.
      With --busy, as --liar, but a READ of 1 MiB or more is answered
      with a PROGRESS frame every 0.4 s ("busy"), for up to 60 s, and then
      its DATA: an owner whose origin is slow (or one pretending).
"""
import hashlib
import hmac
import os
import socket
import struct
import sys
import threading
import time

MAGIC = 0x5244524C
VERSION = 2
HELLO, WELCOME, READ, DATA, ERROR, STAT, STATS, OPEN, OPENED, PROVE = range(1, 11)
PUBLISH, RESOLVE, RESOLVED, ANNOUNCE = range(13, 17)  # docs/protocol.md, "Names"
PROGRESS = 20
EDENIED = -1016


def frame(kind, payload=b"", request=1, version=VERSION):
    return struct.pack("<IBBHIIQ", MAGIC, version, kind, 0, len(payload), 0, request) + payload


def recv_exact(sock, n):
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise EOFError("connection closed after %d of %d bytes" % (len(data), n))
        data += chunk
    return data


def recv_frame(sock):
    """(type, request, payload) of the next frame."""
    header = recv_exact(sock, 24)
    magic, version, kind, flags, length, reserved, request = struct.unpack("<IBBHIIQ", header)
    assert magic == MAGIC and version == VERSION, header
    return kind, request, recv_exact(sock, length)


def proof(secret, label, first, second):
    return hmac.new(secret, label + first + second, hashlib.sha256).digest()


# the ownership chunk a peer (role 2) states in HELLO (docs/protocol.md, "Ownership")
OWNER_CHUNK = 4 << 20


def hello(role, nonce, owner_chunk=None):
    if owner_chunk is None:
        owner_chunk = OWNER_CHUNK if role == 2 else 0
    return frame(HELLO, struct.pack("<II", role, owner_chunk) + nonce)


def parse_welcome(payload):
    auth, = struct.unpack_from("<I", payload, 16)
    nonce, server_proof = payload[20:52], payload[52:84]
    name_length, = struct.unpack_from("<I", payload, 84)
    return auth, nonce, server_proof, payload[88:88 + name_length]


def parse_error(payload):
    code, = struct.unpack_from("<i", payload, 0)
    return code, payload[4:].decode("utf-8", "replace")


class Client:
    """A blocking client: role 1 over a Unix socket path, role 2 over TCP."""

    def __init__(self, address, role, secret=None, source=None, timeout=5):
        if isinstance(address, str):
            self.sock = socket.socket(socket.AF_UNIX)
        else:
            self.sock = socket.socket(socket.AF_INET6 if ":" in address[0] else socket.AF_INET)
            if source:
                self.sock.bind((source, 0))
        self.sock.settimeout(timeout)
        self.sock.connect(address)
        self.role, self.secret = role, secret

    def greet(self):
        """WELCOME's (auth, name) after checking the daemon's proof and sending
        ours; or raises Refused with an ERROR's code and message."""
        nonce = os.urandom(32)
        try:
            self.sock.sendall(hello(self.role, nonce))
        except BrokenPipeError:
            pass  # a daemon that refuses us at accept closes after its ERROR: read it
        kind, _, payload = recv_frame(self.sock)
        if kind == ERROR:
            raise Refused(*parse_error(payload))
        assert kind == WELCOME, kind
        auth, server_nonce, server_proof, name = parse_welcome(payload)
        if auth == 1:
            assert self.secret is not None, "the daemon asks for a secret"
            expected = proof(self.secret, b"larder server", nonce, server_nonce)
            self.daemon_proved = hmac.compare_digest(expected, server_proof)
            self.sock.sendall(frame(PROVE, proof(self.secret, b"larder client", server_nonce, nonce)))
        return auth, name

    def request(self, kind, payload=b"", request=1):
        self.sock.sendall(frame(kind, payload, request))
        kind, request, payload = recv_frame(self.sock)
        if kind == ERROR:
            raise Refused(*parse_error(payload))
        return kind, payload

    def open(self, url):
        kind, payload = self.request(OPEN, url.encode(), 2)
        assert kind == OPENED, kind
        return struct.unpack("<QQI", payload)

    def read(self, id_low, id_high, shard, offset, length):
        kind, payload = self.request(READ, struct.pack("<QQIB3xQQ", id_low, id_high, shard, 0,
                                                       offset, length), 3)
        assert kind == DATA and len(payload) == length, (kind, len(payload))
        return payload


def publish_payload(name, index, origin=b""):
    """PUBLISH: lengths of name, index path and origin, reserved, then the three."""
    return struct.pack("<IIII", len(name), len(index), len(origin), 0) + name + index + origin


def resolve_payload(name, wait_ms=0, flags=0):
    return struct.pack("<II", wait_ms, flags) + name


def publication_payload(name, producer, location, origin=b"", index=b"", id_low=1, id_high=2):
    """ANNOUNCE or RESOLVED: id, flags (1: an origin), five lengths, then the five."""
    flags = 1 if origin else 0
    return (struct.pack("<QQIIIIII", id_low, id_high, flags, len(name), len(producer),
                        len(location), len(origin), len(index)) +
            name + producer + location + origin + index)


def parse_publication(payload):
    """(id_low, id_high, flags, name, producer, location, origin, index) of a RESOLVED."""
    id_low, id_high, flags, *lengths = struct.unpack_from("<QQIIIIII", payload, 0)
    parts, at = [], 40
    for n in lengths:
        parts.append(payload[at:at + n])
        at += n
    assert at == len(payload), (at, len(payload))
    return (id_low, id_high, flags) + tuple(parts)


class Refused(Exception):
    def __init__(self, code, message):
        super().__init__("%d: %s" % (code, message))
        self.code, self.message = code, message


def expect_refused(client, kind, payload, needle, accepted="accepted"):
    """Send a request that must be refused with an ERROR whose message holds
    needle (printed); exits the test with accepted: needle when it is not."""
    try:
        client.request(kind, payload, 7)
    except Refused as e:
        assert needle in e.message, (needle, e.message)
        print("refused: %s" % e.message)
        return
    raise SystemExit("%s: %r" % (accepted, needle))


def serve_owner(port, secret, record, impostor, liar=False, stall=False, trickle=False,
                busy=False):
    listener = socket.socket(socket.AF_INET)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(64)
    lock = threading.Lock()

    def log(line):
        with lock, open(record + ".log", "a") as f:
            f.write(line + "\n")

    def keep(data):
        with lock, open(record, "ab") as f:
            f.write(data)

    def session(conn):
        conn.settimeout(10)
        try:
            header = recv_exact(conn, 24)
            length, = struct.unpack_from("<I", header, 8)
            payload = recv_exact(conn, length)
            keep(header + payload)  # whole frames: sessions run at once
            nonce = payload[8:40]
            server_nonce = os.urandom(32)
            key = secret + b"-not" if impostor else secret
            server_proof = proof(key, b"larder server", nonce, server_nonce)
            name = b"fake-owner"
            conn.sendall(frame(WELCOME, bytes(16) + struct.pack("<I", 1) + server_nonce +
                               server_proof + struct.pack("<I", len(name)) + name))
            log("hello")
            while True:
                header = conn.recv(24)
                if not header:
                    log("closed")
                    return
                header += recv_exact(conn, 24 - len(header))
                kind = header[5]
                length, = struct.unpack_from("<I", header, 8)
                payload = recv_exact(conn, length)
                keep(header + payload)
                request, = struct.unpack_from("<Q", header, 16)
                if kind == PROVE:
                    good = hmac.compare_digest(payload, proof(secret, b"larder client",
                                                              server_nonce, nonce))
                    log("prove " + ("ok" if good else "bad"))
                elif liar and kind == OPEN:
                    log("open")
                    conn.sendall(frame(OPENED, bytes(20), request))
                elif liar and kind == READ and length == 40:
                    offset, count = struct.unpack_from("<QQ", payload, 24)
                    log("read %d %d" % (offset, count))
                    if stall and count >= 1 << 20:
                        conn.sendall(frame(DATA, b"\x5a" * count, request)[:24 + count // 2])
                        log("stalled")
                        conn.settimeout(None)
                        conn.recv(1)  # until the borrower goes
                        log("closed")
                        return
                    if trickle and count >= 1 << 20:
                        conn.sendall(struct.pack("<IBBHIIQ", MAGIC, VERSION, DATA, 0, count, 0,
                                                 request))  # the header of count bytes
                        log("trickling")
                        try:
                            for _ in range(count):
                                time.sleep(0.4)
                                conn.sendall(b"\x5a")
                        except OSError:
                            pass
                        log("closed")
                        return
                    if busy and count >= 1 << 20:
                        log("busy")
                        try:
                            for _ in range(150):
                                conn.sendall(frame(PROGRESS, b"", 0))
                                time.sleep(0.4)
                        except OSError:
                            log("closed")
                            return
                    conn.sendall(frame(DATA, b"\x5a" * count, request))
                else:
                    log("frame %d" % kind)
                    message = b"fake owner serves nothing"
                    conn.sendall(frame(ERROR, struct.pack("<i", -1004) + message,
                                       struct.unpack_from("<Q", header, 16)[0]))
        except (EOFError, OSError) as e:
            log("ended: %s" % e)
        finally:
            conn.close()

    while True:
        conn, _ = listener.accept()
        threading.Thread(target=session, args=(conn,), daemon=True).start()


if __name__ == "__main__":
    if len(sys.argv) >= 5 and sys.argv[1] == "owner":
        with open(sys.argv[3], "rb") as f:
            secret = f.read().rstrip(b"\r\n ")
        stall = "--stall" in sys.argv[5:]
        trickle = "--trickle" in sys.argv[5:]
        busy = "--busy" in sys.argv[5:]
        serve_owner(int(sys.argv[2]), secret, sys.argv[4], "--impostor" in sys.argv[5:],
                    "--liar" in sys.argv[5:] or stall or trickle or busy, stall, trickle, busy)
    else:
        sys.exit(__doc__)
