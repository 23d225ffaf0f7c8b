#!/usr/bin/env python3
"""Independent RDS header vectors, built with Python's struct from the layout in the spec
(48 bytes: >QQIHHBB4sH16s) and an RFC 1071 checksum written here. Prints one JSON object per
line: the fields and the expected bytes in hex. The Rust test emits the same fields with
rds_core::wire and compares."""
import json
import random
import struct


def csum(b):
    s = 0
    for i in range(0, len(b), 2):
        s += (b[i] << 8) | b[i + 1]
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return (~s) & 0xFFFF


EXT_LEN = {1: 4, 2: 4, 3: 8, 4: 8, 5: 2, 6: 4, 8: 1}


def ext_bytes(exts):
    out = b""
    for e in exts:
        t = e["type"]
        if t == 1 or t == 6 or t == 2:
            out += struct.pack(">BI", t, e["v"])
        elif t == 3:
            out += struct.pack(">BII", t, e["rkey"], e["offset"])
        elif t == 4:
            out += struct.pack(">BIB3x", t, e["bytes"], e["rflags"])
        elif t == 5:
            out += struct.pack(">BH", t, e["v"])
        elif t == 8:
            out += struct.pack(">BB", t, e["v"])
    return out.ljust(16, b"\0")


def header(seq, ack, ln, sport, dport, flags, credit, exts, with_csum):
    raw = struct.pack(">QQIHHBB4sH16s", seq, ack, ln, sport, dport, flags, credit,
                      b"\0\0\0\0", 0, ext_bytes(exts))
    if with_csum:
        c = csum(raw)
        raw = raw[:30] + struct.pack(">H", c) + raw[32:]
    return raw


rng = random.Random(20261122)
EXT_CHOICES = [
    lambda: {"type": 1, "v": 0x0301},
    lambda: {"type": 2, "v": rng.getrandbits(32)},
    lambda: {"type": 3, "rkey": rng.getrandbits(32), "offset": rng.getrandbits(32)},
    lambda: {"type": 4, "bytes": rng.getrandbits(32), "rflags": rng.choice([1, 2])},
    lambda: {"type": 5, "v": rng.choice([1, 2, 4, 8])},
    lambda: {"type": 6, "v": rng.getrandbits(32)},
    lambda: {"type": 8, "v": 0},
]
for i in range(300):
    exts = []
    used = 0
    for _ in range(rng.randrange(0, 4)):
        e = rng.choice(EXT_CHOICES)()
        n = 1 + EXT_LEN[e["type"]]
        if used + n <= 16:
            exts.append(e)
            used += n
    f = dict(
        seq=rng.getrandbits(64), ack=rng.getrandbits(64), len=rng.getrandbits(20),
        sport=rng.getrandbits(16), dport=rng.getrandbits(16), flags=rng.getrandbits(6),
        credit=rng.getrandbits(8), exts=exts, csum=bool(i % 2),
    )
    raw = header(f["seq"], f["ack"], f["len"], f["sport"], f["dport"], f["flags"],
                 f["credit"], exts, f["csum"])
    f["hex"] = raw.hex()
    print(json.dumps(f))
