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


# ---- ctl ----------------------------------------------------------------------------------
# Input: [k, k piece sizes (each + 1), stream of frames]; a frame is
# [json length: u32 BE, data length: u32 BE, json, data].
def ctl_frame(json, data=b""):
    if isinstance(json, str):
        json = json.encode()
    return struct.pack(">II", len(json), len(data)) + json + data


def ctl(pieces, body):
    return bytes([len(pieces)] + [p - 1 for p in pieces]) + body


def record(transport, payload, flags=0, lane=0, direction=0):
    """A binary trace record (node/tap.rs REC_HDR_LEN layout): addresses 10.0.0.1 > 10.0.0.2."""
    h = struct.pack("<IIQBBBB", len(payload), len(payload), 1_700_000_000_000_000_000, direction,
                    lane, transport, flags)
    h += bytes([10, 0, 0, 1]).ljust(16, b"\0") + bytes([10, 0, 0, 2]).ljust(16, b"\0")
    if transport == 1:
        h += bytes([10, 0, 0, 1]).ljust(16, b"\0") + struct.pack("<H", 40001)
        h += bytes([10, 0, 0, 2]).ljust(16, b"\0") + struct.pack("<H", 16385)
    elif transport == 2:
        h += struct.pack("<IIHH", 0x11, 0x22, 1, 2) + bytes(24)
    else:
        h += bytes(36)
    return h + payload


REQUESTS = [
    '{"op":"hello","v":4}', '{"op":"info"}', '{"op":"stats"}', '{"op":"stats_reset"}',
    '{"op":"tunables_get"}', '{"op":"tunable_set","name":"ping_enable","value":0}',
    '{"op":"tunable_default","name":null}', '{"op":"tunable_default","name":"sndbuf"}',
    '{"op":"conn_restart","laddr":"127.0.0.1","faddr":"::1"}',
    '{"op":"conn_kill","laddr":"10.0.0.1","faddr":"10.0.0.2"}',
    '{"op":"sock_open"}', '{"op":"sock_bind","sock":1,"addr":"127.0.0.1:4000","transport":null}',
    '{"op":"sock_set","sock":1,"opt":{"name":"sndbuf","value":65536}}',
    '{"op":"sock_send","sock":1,"dest":"[::1]:5000","dontwait":true}',
    '{"op":"sock_recv","sock":1,"max":65535,"peek":false,"dontwait":false,"timeout_ms":100}',
    '{"op":"sock_close","sock":1}', '{"op":"trace_stop"}', '{"op":"bogus"}',
]
REPLIES = [
    '{"kind":"error","errno":22,"message":"bad"}', '{"kind":"ok"}',
    '{"kind":"hello","v":4,"node":"n","version":"0.1","rds_protocol":"3.1","pid":1,'
    '"owner_uid":0,"addrs":["127.0.0.1","::1"]}',
    '{"kind":"stats","counters":[["conn_reset",1]]}', '{"kind":"dropped","messages":2}',
    '{"kind":"sock","sock":7}', '{"kind":"trace_frames","frames":2}',
]
write("ctl", "empty", b"")
for i, r in enumerate(REQUESTS):
    write("ctl", "request-%02d" % i, ctl([], ctl_frame(r)))
for i, r in enumerate(REPLIES):
    write("ctl", "reply-%02d" % i, ctl([], ctl_frame(r)))
write("ctl", "several", ctl([], ctl_frame(REQUESTS[0]) + ctl_frame(REQUESTS[13], b"hello")
                           + ctl_frame(REQUESTS[1])))
write("ctl", "pieces", ctl([1, 3, 8, 200], ctl_frame(REQUESTS[11]) + ctl_frame(REQUESTS[14])))
write("ctl", "truncated", ctl([], ctl_frame(REQUESTS[5])[:20]))
write("ctl", "half-header", ctl([2], b"\0\0\0"))
write("ctl", "too-large", ctl([], struct.pack(">II", (1 << 20) + 1, 0)))
write("ctl", "data-too-large", ctl([], struct.pack(">II", 2, (1 << 20) + 4097) + b"{}"))
write("ctl", "bare-json", REQUESTS[3].encode())
write("ctl", "trace-records", ctl([], ctl_frame(REPLIES[6], record(1, hdr(seq=1, sport=4000, dport=5000))
                                                + record(2, hdr(seq=2, ln=3) + b"abc", flags=0x10))))
write("ctl", "trace-loopback", ctl([], ctl_frame(REPLIES[6], record(0, hdr(seq=3), lane=5, direction=1))))
write("ctl", "trace-bad-code", ctl([], ctl_frame(REPLIES[6], record(7, b""))))
write("ctl", "trace-truncated", ctl([], ctl_frame(REPLIES[6], record(1, hdr(seq=1))[:100])))


# ---- ib_private ---------------------------------------------------------------------------
# struct rds_ib_connect_private (32 bytes) / rds6_ib_connect_private (56 bytes).
def priv4(major=3, minor=1, mask=0, toss=0, ack=0, credit=0, s=b"\x0a\0\0\x01", d=b"\x0a\0\0\x02"):
    return s + d + struct.pack(">BBHB3xQI4x", major, minor, mask, toss, ack, credit)


def priv6(major=3, minor=1, mask=0, toss=0, ack=0, credit=0, s=None, d=None):
    s = s or b"\xfe\x80" + bytes(13) + b"\x01"
    d = d or b"\xfe\x80" + bytes(13) + b"\x02"
    return s + d + struct.pack(">BBHB3xQI4x", major, minor, mask, toss, ack, credit)


mapped = bytes(10) + b"\xff\xff\x0a\0\0\x01"
write("ib_private", "empty", b"")
write("ib_private", "v4-3.1", priv4())
write("ib_private", "v4-4.1", priv4(4, 1, 0x0003, ack=5, credit=16))
write("ib_private", "v4-4.0-mask1", priv4(4, 0, 0x0001))
write("ib_private", "v4-4-nomask", priv4(4, 2, 0x0004))
write("ib_private", "v4-major0", priv4(0, 0))
write("ib_private", "v4-3.0", priv4(3, 0))
write("ib_private", "v4-short", priv4()[:31])
write("ib_private", "v4-padded", priv4(toss=3) + bytes(24) + b"\xff" * 8)
write("ib_private", "v6-3.1", priv6())
write("ib_private", "v6-4.1", priv6(4, 1, 0xFFFF, ack=0xFFFFFFFFFFFFFFFF, credit=0xFFFFFFFF))
write("ib_private", "v6-mapped", priv6(s=mapped, d=mapped))
write("ib_private", "v6-short", priv6()[:55])
write("ib_private", "reserved-set", priv4()[:13] + b"\xaa\xbb\xcc" + priv4()[16:28] + b"\xdd" * 4)
write("ib_private", "one-byte", b"\x04")


# ---- pcap ---------------------------------------------------------------------------------
def pcap(linktype, packets, nanos=False, snaplen=65535):
    magic = 0xA1B23C4D if nanos else 0xA1B2C3D4
    out = struct.pack("<IHHiIII", magic, 2, 4, 0, 0, snaplen, linktype)
    for i, p in enumerate(packets):
        data, orig = p if isinstance(p, tuple) else (p, len(p))
        out += struct.pack("<IIII", 1_700_000_000 + i, 1000 * i, len(data), orig) + data
    return out


def ipv4(src, dst, payload, proto=6):
    h = struct.pack(">BBHHHBBH4s4s", 0x45, 0, 20 + len(payload), 1, 0x4000, 64, proto, 0,
                    bytes(src), bytes(dst))
    return h + payload


def ipv6(src, dst, payload, nxt=6):
    return struct.pack(">IHBB16s16s", 0x60000000, len(payload), nxt, 64, src, dst) + payload


def tcp(sport, dport, seq, payload=b"", flags=0x18):
    return struct.pack(">HHIIBBHHH", sport, dport, seq, 0, 5 << 4, flags, 65535, 0, 0) + payload


def eth(payload, ethertype=0x0800, tx=True):
    mac_local, mac_peer = b"\x02\x00\0\0\0\x01", b"\x02\x01\0\0\0\x02"
    dst, src = (mac_peer, mac_local) if tx else (mac_local, mac_peer)
    return dst + src + struct.pack(">H", ethertype) + payload


A, B = [10, 0, 0, 1], [10, 0, 0, 2]
m1 = msg(1, 4000, 5000, b"hello")
m2 = msg(2, 4000, 5000, bytes(100))
syn = tcp(40001, 16385, 999, flags=0x02)
write("pcap", "eth-v4", pcap(1, [eth(ipv4(A, B, syn)), eth(ipv4(A, B, tcp(40001, 16385, 1000, m1 + m2))),
                                 eth(ipv4(B, A, tcp(16385, 40001, 5, msg(1, 5000, 4000))), tx=False)]))
write("pcap", "eth-split", pcap(1, [eth(ipv4(A, B, tcp(40002, 16385, 1, m2[:30]))),
                                    eth(ipv4(A, B, tcp(40002, 16385, 31, m2[30:]))),
                                    eth(ipv4(A, B, tcp(40002, 16385, 31, m2[30:]))),
                                    eth(ipv4(A, B, tcp(40002, 16385, 500, m1, flags=0x11)))]))
write("pcap", "eth-vlan", pcap(1, [eth(b"\0\x05\x08\x00" + ipv4(A, B, tcp(40003, 16385, 1, m1)),
                                       ethertype=0x8100)]))
write("pcap", "eth-snapped", pcap(1, [(eth(ipv4(A, B, tcp(40004, 16385, 1, m2)))[:90], 54 + len(m2))],
                                  snaplen=90))
write("pcap", "eth-gap", pcap(1, [eth(ipv4(A, B, tcp(40005, 16385, 1, m2[:60]))),
                                  eth(ipv4(A, B, tcp(40005, 16385, 200, m1)))]))
write("pcap", "eth-bad-len", pcap(1, [eth(ipv4(A, B, tcp(40006, 16385, 1, hdr(seq=1, ln=0x7FFFFFFF))))]))
write("pcap", "eth-rst", pcap(1, [eth(ipv4(A, B, tcp(40007, 16385, 1, m2[:70]))),
                                  eth(ipv4(A, B, tcp(40007, 16385, 71, flags=0x04)))]))
write("pcap", "eth-other", pcap(1, [eth(ipv4(A, B, tcp(80, 8080, 1, b"GET /"))),
                                    eth(ipv4(A, B, b"\0" * 8, proto=17)), eth(b"\0" * 28, 0x0806)]))
write("pcap", "raw-v6", pcap(101, [ipv6(b"\xfe\x80" + bytes(13) + b"\1", bytes(15) + b"\1",
                                        tcp(40001, 16385, 7, m1))], nanos=True))
write("pcap", "ipv4-linktype", pcap(228, [ipv4(A, B, tcp(16385, 40008, 1, m1))]))
write("pcap", "sll", pcap(113, [struct.pack(">HHH8sH", 0, 1, 6, bytes(8), 0x0800)
                                + ipv4(A, B, tcp(40009, 16385, 1, m1))]))
write("pcap", "sll2", pcap(276, [struct.pack(">HHIHBB8s", 0x86DD, 0, 1, 1, 0, 6, bytes(8))
                                 + ipv6(bytes(15) + b"\1", bytes(15) + b"\2", tcp(40010, 16385, 1, m1))]))
write("pcap", "truncated-record", pcap(1, [eth(ipv4(A, B, tcp(40011, 16385, 1, m1)))])[:-10])
write("pcap", "bad-linktype", pcap(147, []))
write("pcap", "header-only", pcap(1, []))


def erf_ib(frag, opcode=0x04, solicited=True, lnh=2, flags=0, pad=0, wlen=None):
    bth = struct.pack(">BBHII", opcode, (0x80 if solicited else 0) | (pad << 4), 0xFFFF, 0x22,
                      0x80000005)
    imm = b"\0\0\0\0" if opcode == 0x05 else b""
    grh = bytes(40) if lnh == 3 else b""
    body = grh + bth + imm + frag + bytes(pad) + b"\0\0\0\0"
    lrh = struct.pack(">BBHHH", 0x00, lnh, 2, (8 + len(body)) // 4, 1)
    pkt = lrh + body + b"\0\0"
    rlen = 16 + len(pkt)
    erf = struct.pack("<Q", 1 << 32) + struct.pack(">BBHHH", 21, flags, rlen, 0,
                                                    wlen if wlen is not None else len(pkt))
    return erf + pkt


write("pcap", "erf-ib", pcap(197, [erf_ib(with_csum(hdr(seq=1, ln=5, sport=4000, dport=5000)) + b"hello"),
                                   erf_ib(with_csum(hdr(ack=1)), opcode=0x05, lnh=3, flags=1),
                                   erf_ib(hdr(seq=2, ln=2) + b"xy", pad=2)]))
write("pcap", "erf-snapped", pcap(197, [(erf_ib(hdr(seq=1, ln=4096) + bytes(4096))[:200], 16 + 8 + 12 + 4144 + 6)]))
write("pcap", "erf-ext", pcap(197, [b"\0" * 8 + bytes([21 | 0x80, 0]) + b"\0" * 6 + b"\x80" + bytes(7)
                                    + b"\x00" + bytes(7) + erf_ib(hdr(seq=1))[16:]]))
