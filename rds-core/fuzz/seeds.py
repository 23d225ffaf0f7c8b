#!/usr/bin/env python3
"""Writes the hand-made seed inputs of the fuzz corpus (rds-core/fuzz/corpus/<target>/seed-*).

Input formats are documented in checks.rs. Headers are built with struct from the layout of
`struct rds_header` (48 bytes, big-endian). Run from anywhere; it rewrites only seed-* files.
"""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def hdr(seq=0, ack=0, ln=0, sport=0, dport=0, flags=0, credit=0, csum=0, ext=b"", pad=b"\0\0\0\0"):
    return struct.pack(">QQIHHBB4sH16s", seq, ack, ln, sport, dport, flags, credit, pad, csum,
                       ext.ljust(16, b"\0"))


def csum(h):
    s = sum(struct.unpack(">24H", h))
    while s > 0xFFFF:
        s = (s & 0xFFFF) + (s >> 16)
    return (~s) & 0xFFFF


def with_csum(h):
    h = h[:30] + b"\0\0" + h[32:]
    return h[:30] + struct.pack(">H", csum(h)) + h[32:]


PROBE_EXT = bytes([5, 0, 8, 6, 0x11, 0x22, 0x33, 0x44, 8, 0])


def write(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "seed-" + name), "wb") as f:
        f.write(data)


# ---- header -------------------------------------------------------------------------------
write("header", "empty", b"")
write("header", "short47", hdr(seq=1)[:47])
write("header", "probe-ping", hdr(seq=1, sport=1, ext=PROBE_EXT))
write("header", "probe-pong", hdr(seq=2, dport=1, ext=PROBE_EXT))
write("header", "all-fields", hdr(seq=0x0102030405060708, ack=0x1112131415161718, ln=1 << 20,
                                  sport=4000, dport=5000, flags=0x06, credit=255, csum=0xBEEF,
                                  pad=b"\xa1\xa2\xa3\xa4",
                                  ext=bytes([3, 0xDE, 0xAD, 0xBE, 0xEF, 0, 0, 0x10, 0,
                                             2, 0xCA, 0xFE, 0xBA, 0xBE])))
write("header", "checksummed", with_csum(hdr(seq=7, ack=3, ln=10, sport=9, dport=10, flags=2)))
write("header", "bad-checksum", hdr(seq=7, csum=0x1234))
write("header", "ack-only", with_csum(hdr(ack=100)))
write("header", "ext-full16", hdr(ext=bytes([3, 0, 0, 0, 1, 0, 0, 0, 2, 1, 0, 0, 3, 1, 8, 0])))
write("header", "ext-overrun", hdr(ext=bytes([5, 0, 1, 5, 0, 2, 5, 0, 3, 5, 0, 4, 6, 1, 2, 3])))
write("header", "ext-unknown", hdr(ext=bytes([7, 9, 15, 5, 0, 4, 16, 5, 0, 3])))
write("header", "ext-rdma-bytes", hdr(ext=bytes([2, 1, 2, 3, 4, 4, 0, 1, 0, 0, 1, 0, 0, 0])))
write("header", "ext-version", hdr(flags=0xFF, ext=bytes([1, 0, 0, 3, 1])))
write("header", "with-payload", hdr(seq=5, ln=3, sport=1, dport=2) + b"abc")
cmap = bytearray(8192)
cmap[625] = 0x08
cmap[0] = 0x01
cmap[8191] = 0x80
write("header", "cong-map-payload", bytes(cmap))


# ---- stream -------------------------------------------------------------------------------
def msg(seq, sport, dport, payload=b"", flags=0, ext=b""):
    return hdr(seq=seq, ln=len(payload), sport=sport, dport=dport, flags=flags, ext=ext) + payload


def stream(sizes, limit, body):
    return bytes([len(sizes)] + [s - 1 for s in sizes] + [limit]) + body


handshake = msg(1, 1, 0, ext=PROBE_EXT) + msg(2, 4000, 5000, b"hello") + msg(3, 0, 1, ext=PROBE_EXT)
write("stream", "one-chunk", stream([], 0, handshake))
write("stream", "odd-chunks", stream([1, 47, 100], 0, handshake + msg(4, 7, 8, bytes(300))))
write("stream", "bytewise", stream([1], 0, msg(1, 9, 10, b"xyz") + msg(2, 9, 10)))
write("stream", "zero-length-run", stream([49], 0, b"".join(msg(i, 0, 9) for i in range(1, 6))))
write("stream", "too-long", stream([30], 1, msg(1, 1, 2, bytes(50)) + hdr(seq=2, ln=101)))
write("stream", "limit-zero", stream([], 2, msg(1, 1, 2) + msg(2, 1, 2, b"x")))
write("stream", "partial-tail", stream([7], 0, msg(1, 1, 2, b"abcd") + hdr(seq=2, ln=9) + b"abc"))
write("stream", "cong-map", stream([255, 255, 3], 3,
                                   hdr(ln=8192, flags=1) + bytes(cmap) + msg(1, 1, 2)))
write("stream", "empty", b"")
write("stream", "header-split", stream([20, 28, 20], 0, msg(1, 1, 2, b"0123456789")))


# ---- frag ---------------------------------------------------------------------------------
FIX, REUSE, SETLEN = 1, 2, 4
def op(flags, data):
    """A fragment: with REUSE, `data` is the payload only (the header is the previous one)."""
    n = len(data) + (48 if flags & REUSE else 0)
    return bytes([flags]) + struct.pack(">H", n) + data


h5000 = hdr(seq=5, ln=5000, sport=1, dport=2)
write("frag", "zero-length", b"\x01" + op(FIX | SETLEN, hdr(seq=1, sport=9, dport=0)))
write("frag", "two-fragments", b"\x01" + op(FIX, h5000 + bytes(range(256)) * 16)
      + op(FIX | REUSE, b"\x07" * 904))
write("frag", "ack-between", b"\x01" + op(FIX, h5000 + bytes(4096)) + op(FIX, hdr(ack=4))
      + op(FIX, h5000 + bytes(904)))
write("frag", "mismatch", b"\x01" + op(FIX, h5000 + bytes(4096))
      + op(FIX, hdr(seq=6, ln=5000, sport=1, dport=2) + bytes(904)))
write("frag", "bad-checksum", b"\x01" + op(0, hdr(seq=1, ln=1, csum=0x1111) + b"x"))
write("frag", "no-checksum", b"\x00" + op(SETLEN, hdr(seq=1, sport=3, dport=4) + b"abc"))
write("frag", "short-frag", b"\x01" + op(FIX, h5000 + bytes(100)))
write("frag", "too-long", b"\x00" + op(FIX, hdr(seq=1, ln=20000, sport=1, dport=1) + bytes(4096)))
write("frag", "cong-map", b"\x01" + op(FIX, hdr(ln=8192, flags=1) + bytes(cmap[:4096]))
      + op(FIX | REUSE, bytes(cmap[4096:])))
write("frag", "truncated", b"\x01" + bytes([FIX]) + struct.pack(">H", 200) + hdr(seq=1)[:40])


# ---- engine -------------------------------------------------------------------------------
# cfg bits: 1 = IB, 2 = we have the smaller address, 4 = ping disabled, 8 = small ack pacing.
def frame(path, h, payload_len, flags=0, payload=None):
    """op 0: a frame; flags 0x40 = fix IB checksums, 0x80 = 8192-byte payload (`payload`)."""
    if flags & 0x80:
        return bytes([flags, path]) + h + b"\0\0" + payload
    return bytes([flags, path]) + h + struct.pack(">H", payload_len) + bytes(payload_len)


DRAIN = bytes([2])
EVENTS_OK = bytes([7, 1])


def send(sock, port_sel, ln, nonblock=1):
    return bytes([3, sock, port_sel]) + struct.pack(">H", ln) + bytes([nonblock])


def recv(sock, maxlen=0xFFFF, peek=0):
    return bytes([4, sock]) + struct.pack(">H", maxlen) + bytes([peek])


def ack(n, idx=0):
    return bytes([5]) + struct.pack(">I", n) + bytes([idx])


def tick(units):
    return bytes([6]) + struct.pack(">H", units)


def cut(idx=0):
    return bytes([8, idx])


def accept(port, waited=0):
    return bytes([9]) + struct.pack(">H", port) + bytes([waited])


probe_ping = hdr(seq=1, sport=1, ext=PROBE_EXT)
probe_pong = hdr(seq=2, dport=1, ext=PROBE_EXT)
to_sock = hdr(seq=3, sport=5000, dport=4000)
to_cong = hdr(seq=4, sport=5000, dport=4003)
cmap_hdr = hdr(flags=1)
write("engine", "tcp-small-handshake", bytes([2, 7]) + DRAIN + frame(0, probe_ping, 0)
      + frame(0, probe_pong, 0) + EVENTS_OK + DRAIN + frame(0, to_sock, 10) + recv(0) + DRAIN)
write("engine", "tcp-large-handshake", bytes([0, 9]) + DRAIN + frame(0, probe_ping, 0) + DRAIN
      + accept(40001) + accept(40002) + frame(1, to_sock, 100) + DRAIN + recv(0, 3))
write("engine", "tcp-congest", bytes([2, 1]) + frame(0, to_cong, 2000) + frame(0, hdr(seq=5, sport=5000, dport=4003), 2000)
      + DRAIN + recv(3) + recv(3) + DRAIN + frame(0, cmap_hdr, 0, 0x80, bytes(cmap)) + send(0, 3, 100) + recv(2))
write("engine", "tcp-resend", bytes([2, 3]) + send(0, 2, 100) + send(1, 3, 200) + DRAIN
      + ack(100) + cut(0) + tick(40) + EVENTS_OK + DRAIN + ack(10000))
write("engine", "tcp-ping", bytes([2, 4]) + frame(0, hdr(seq=1, sport=5000), 0)
      + frame(0, hdr(seq=2), 0) + DRAIN)
write("engine", "tcp-ping-disabled", bytes([6, 4]) + frame(0, hdr(seq=1, sport=5000), 0)
      + frame(0, probe_ping, 0) + frame(0, probe_pong, 0) + DRAIN)
write("engine", "tcp-gen-change", bytes([2, 5]) + frame(0, probe_ping, 0) + frame(0, probe_pong, 0)
      + EVENTS_OK + send(0, 2, 10) + DRAIN + cut(0) + tick(100) + EVENTS_OK
      + frame(0, hdr(seq=1, sport=1, ext=bytes([5, 0, 8, 6, 9, 9, 9, 9, 8, 0])), 0) + DRAIN)
write("engine", "tcp-dup", bytes([2, 6]) + frame(0, to_sock, 4) + frame(0, hdr(seq=3, sport=5000, dport=4000, flags=4), 4)
      + frame(0, hdr(seq=1, sport=5000, dport=4000), 4) + recv(0) + recv(0))
write("engine", "tcp-garbage", bytes([2, 8]) + bytes([1, 0, 0, 60]) + bytes(range(60)) + DRAIN)
write("engine", "ib-small", bytes([3, 2]) + DRAIN + frame(0, with_csum(hdr(seq=1, sport=5000, dport=4000, flags=2)), 10, 0x40)
      + DRAIN + frame(0, hdr(ack=1), 0, 0x40) + send(0, 2, 5000) + DRAIN)
write("engine", "ib-large", bytes([1, 2]) + DRAIN + frame(0, hdr(seq=1, sport=5000, dport=4000), 9000, 0x40)
      + DRAIN + frame(0, cmap_hdr, 0, 0xC0, bytes(cmap)) + send(0, 2, 4097) + DRAIN)
write("engine", "ib-bad-checksum", bytes([3, 2]) + frame(0, hdr(seq=1, sport=5000, dport=4000, csum=0x1234), 10)
      + EVENTS_OK + tick(10) + EVENTS_OK + DRAIN)
write("engine", "ib-pacing", bytes([11, 3]) + b"".join(send(i % 2, 2, 3000) for i in range(6)) + DRAIN
      + frame(0, hdr(ack=5), 0, 0x40) + DRAIN)
write("engine", "stale-epoch", bytes([2, 1]) + bytes([11, 0]) + probe_ping + DRAIN)
write("engine", "backoff", bytes([2, 2]) + cut(0) + bytes([7, 0]) + tick(100) + bytes([7, 0])
      + tick(1000) + bytes([7, 0]) + tick(30000) + EVENTS_OK + DRAIN)
write("engine", "sockets", bytes([2, 2]) + send(0, 2, 10) + bytes([10, 0, 2]) + bytes([10, 65])
      + bytes([10, 130, 0, 10]) + bytes([10, 195, 0, 10]) + send(0, 2, 100) + DRAIN)
