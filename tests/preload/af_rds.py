#!/usr/bin/env python3
"""Python's standard socket.AF_RDS over the preload library (tests/tests/preload.rs runs it
with LD_PRELOAD): datagrams, recvmsg with ancillary data, select readiness, timeouts and the
SOL_RDS options. Prints one deterministic line per check; usage: af_rds.py ADDR_A ADDR_B."""

import select
import socket
import struct
import sys

A, B = sys.argv[1], sys.argv[2]

# Linux values, for Pythons built without linux/rds.h.
SO_TIMESTAMP = getattr(socket, "SO_TIMESTAMP", 29)
SCM_TIMESTAMP = getattr(socket, "SCM_TIMESTAMP", SO_TIMESTAMP)
RDS_CANCEL_SENT_TO = getattr(socket, "RDS_CANCEL_SENT_TO", 1)
RDS_GET_MR = getattr(socket, "RDS_GET_MR", 2)
RDS_RECVERR = getattr(socket, "RDS_RECVERR", 5)
RDS_CONG_MONITOR = getattr(socket, "RDS_CONG_MONITOR", 6)

s = socket.socket(socket.AF_RDS, socket.SOCK_SEQPACKET, 0)
t = socket.socket(socket.AF_RDS, socket.SOCK_SEQPACKET, 0)
s.bind((A, 4000))
t.bind((B, 4001))
print("getsockname:", s.getsockname(), t.getsockname())
print("family/type:", s.family == socket.AF_RDS, s.type == socket.SOCK_SEQPACKET)

r, w, _ = select.select([t], [s], [], 0)
print("select before send: readable", len(r), "writable", len(w))

s.sendto(b"hello", (B, 4001))
r, _, _ = select.select([t], [], [], 10)
print("select after send: readable", r == [t])
data, addr = t.recvfrom(100)
print("recvfrom:", data, addr)
r, _, _ = select.select([t], [], [], 0)
print("select after recv: readable", len(r))

# recvmsg: truncation, the sender, and a timestamp as ancillary data.
t.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMP, 1)
s.sendto(b"x" * 50, (B, 4001))
select.select([t], [], [], 10)
data, anc, flags, addr = t.recvmsg(10, 1024)
trunc = "MSG_TRUNC" if flags & socket.MSG_TRUNC else "no MSG_TRUNC"
kinds = [(lvl == socket.SOL_SOCKET, typ == SCM_TIMESTAMP, len(d)) for lvl, typ, d in anc]
print("recvmsg:", len(data), trunc, addr, "ancillary (SOL_SOCKET, SCM_TIMESTAMP, len):", kinds)
secs, usecs = struct.unpack("qq", anc[0][2])
print("timestamp plausible:", secs > 1_600_000_000 and 0 <= usecs < 1_000_000)
t.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMP, 0)

# recvmsg_into with MSG_PEEK leaves the message queued.
s.sendto(b"peek me", (B, 4001))
select.select([t], [], [], 10)
buf = bytearray(32)
n, anc, flags, addr = t.recvmsg_into([buf], 0, socket.MSG_PEEK)
print("recvmsg_into(MSG_PEEK):", n, bytes(buf[:n]))
print("recv after peek:", t.recv(32))

# Non-blocking and timeouts (Python waits with poll() on the descriptor).
t.setblocking(False)
try:
    t.recv(10)
    print("recv empty non-blocking: returned")
except BlockingIOError:
    print("recv empty non-blocking: EAGAIN")
t.settimeout(0.3)
try:
    t.recv(10)
    print("recv empty with timeout: returned")
except socket.timeout:
    print("recv empty with timeout: timeout")
s.sendto(b"in time", (B, 4001))
print("recv with timeout:", t.recv(10))
t.settimeout(None)

# connect() sets the default destination for send().
s.connect((B, 4001))
print("getpeername:", s.getpeername())
s.send(b"connected")
print("recv:", t.recv(32))

# SOL_RDS options.
t.setsockopt(socket.SOL_RDS, RDS_RECVERR, 1)
print("RDS_RECVERR:", t.getsockopt(socket.SOL_RDS, RDS_RECVERR))
t.setsockopt(socket.SOL_RDS, RDS_CONG_MONITOR, 1)
print("RDS_CONG_MONITOR set: ok")
try:
    t.setsockopt(socket.SOL_RDS, RDS_GET_MR, b"\0" * 32)
except OSError as e:
    print("RDS_GET_MR on tcp:", e.errno == 95)
sin = struct.pack("=HH4s8x", socket.AF_INET, socket.htons(4001), socket.inet_aton(B))
s.setsockopt(socket.SOL_RDS, RDS_CANCEL_SENT_TO, sin)
print("RDS_CANCEL_SENT_TO: ok")
try:
    s.sendto(b"", ("0.0.0.0", 1))
except OSError as e:
    print("sendto INADDR_ANY:", e.errno == 22)
try:
    socket.socket(socket.AF_RDS, socket.SOCK_STREAM, 0)
except OSError as e:
    print("SOCK_STREAM:", e.errno == 94)

s.close()
t.close()
print("done")
