/*
 * An AF_RDS test program for the preload library (tests/tests/preload.rs compiles it with cc).
 * It uses only the kernel's API (linux/rds.h), so the same program runs against the kernel's
 * RDS in the lab guest: the transcript of the `calls` mode is deterministic (no ports chosen
 * by the stack, no times) so that two runs can be diffed line by line.
 *
 * Modes:
 *   calls A B [NOWHERE]  every socket call, one line each: "name: ok VALUE" or "name: -1 ERRNO";
 *                    NOWHERE (default 127.21.1.50) is an address no RDS node answers on and that
 *                    is not local (the kernel serves a local one with its loopback transport)
 *   mix A B          one epoll set and one poll() call mixing RDS and ordinary descriptors
 *   fork A B SELF    fork+exec, and a forked child using an inherited RDS socket
 *   exec-child FD    (run by `fork`) reports what the inherited descriptor is after exec
 *   many A N         N sockets in one process, each sending to the next
 *   serve A PORT N   receives N messages and echoes each to its sender
 *   client A PORT PEER PEERPORT N   sends N messages to PEER and waits for each echo
 *   congest A B      blocking sends to a congested destination: one a signal interrupts, one
 *                    SO_SNDTIMEO ends, and one that returns once another thread reads; prints
 *                    how many attempts met congestion (the node's cong_send_error)
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/rds.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <signal.h>
#include <sys/select.h>
#include <sys/time.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <pthread.h>
#include <unistd.h>

#ifndef AF_RDS
#define AF_RDS 21
#endif
#ifndef SOL_RDS
#define SOL_RDS 276
#endif

static const char *ename(int e)
{
	switch (e) {
	case EAGAIN: return "EAGAIN";
	case EINVAL: return "EINVAL";
	case ENOTCONN: return "ENOTCONN";
	case EOPNOTSUPP: return "EOPNOTSUPP";
	case EMSGSIZE: return "EMSGSIZE";
	case EADDRINUSE: return "EADDRINUSE";
	case EADDRNOTAVAIL: return "EADDRNOTAVAIL";
	case EAFNOSUPPORT: return "EAFNOSUPPORT";
	case ESOCKTNOSUPPORT: return "ESOCKTNOSUPPORT";
	case ENOPROTOOPT: return "ENOPROTOOPT";
	case ENOSPC: return "ENOSPC";
	case ENOBUFS: return "ENOBUFS";
	case ETIMEDOUT: return "ETIMEDOUT";
	case EDESTADDRREQ: return "EDESTADDRREQ";
	case EBADF: return "EBADF";
	case EBADFD: return "EBADFD";
	case ENOTTY: return "ENOTTY";
	case EFAULT: return "EFAULT";
	case EINTR: return "EINTR";
	case ENODEV: return "ENODEV";
	default: {
		static char num[16];
		snprintf(num, sizeof(num), "E%d", e);
		return num;
	}
	}
}

/* One transcript line: the value on success, the errno name on failure. */
static long show(const char *name, long r)
{
	if (r < 0)
		printf("%s: -1 %s\n", name, ename(errno));
	else
		printf("%s: ok %ld\n", name, r);
	fflush(stdout);
	return r;
}

static void line(const char *name, const char *text)
{
	printf("%s: %s\n", name, text);
	fflush(stdout);
}

static void die(const char *what)
{
	fprintf(stderr, "rds_calls: %s: %s\n", what, strerror(errno));
	exit(2);
}

static struct sockaddr_in sin4(const char *ip, int port)
{
	struct sockaddr_in a;
	memset(&a, 0, sizeof(a));
	a.sin_family = AF_INET;
	a.sin_port = htons(port);
	if (inet_pton(AF_INET, ip, &a.sin_addr) != 1) {
		fprintf(stderr, "rds_calls: bad address %s\n", ip);
		exit(2);
	}
	return a;
}

static const char *addr_str(const struct sockaddr_in *a, char *buf, size_t n)
{
	char ip[INET_ADDRSTRLEN];
	inet_ntop(AF_INET, &a->sin_addr, ip, sizeof(ip));
	snprintf(buf, n, "%s:%d", ip, ntohs(a->sin_port));
	return buf;
}

static int rds_socket(void)
{
	int s = socket(AF_RDS, SOCK_SEQPACKET, 0);
	if (s < 0)
		die("socket(AF_RDS)");
	return s;
}

static int bound(const char *ip, int port)
{
	int s = rds_socket();
	struct sockaddr_in a = sin4(ip, port);
	if (bind(s, (struct sockaddr *)&a, sizeof(a)) < 0)
		die("bind");
	return s;
}

/* Whether fd polls for `ev` within ms milliseconds. */
static int polls(int fd, short ev, int ms)
{
	struct pollfd p = { .fd = fd, .events = ev };
	int r = poll(&p, 1, ms);
	return r == 1 && (p.revents & ev);
}

static void on_alarm(int sig)
{
	(void)sig;
}

static int mode_calls(const char *A, const char *B, const char *N)
{
	char buf[256], big[4096], txt[64];
	struct sockaddr_in a = sin4(A, 4000), b = sin4(B, 4001), from;
	socklen_t len;
	int v;

	show("socket(SOCK_STREAM)", socket(AF_RDS, SOCK_STREAM, 0));
	show("socket(protocol 1)", socket(AF_RDS, SOCK_SEQPACKET, 1));
	int s = rds_socket();
	line("socket(AF_RDS, SOCK_SEQPACKET, 0)", "ok");

	len = sizeof(from);
	memset(&from, 0xa5, sizeof(from));
	show("getsockname(unbound)", getsockname(s, (struct sockaddr *)&from, &len));
	printf("getsockname(unbound) addr: %s len %u\n", addr_str(&from, txt, sizeof(txt)), len);
	len = sizeof(from);
	show("getpeername(unconnected)", getpeername(s, (struct sockaddr *)&from, &len));
	show("sendto(unbound)", sendto(s, "x", 1, 0, (struct sockaddr *)&b, sizeof(b)));
	show("recv(unbound, MSG_DONTWAIT)", recv(s, buf, sizeof(buf), MSG_DONTWAIT));
	v = 5;
	show("setsockopt(SO_RDS_TRANSPORT, 5)", setsockopt(s, SOL_RDS, SO_RDS_TRANSPORT, &v, sizeof(v)));
	show("setsockopt(SO_RDS_TRANSPORT, len 2)", setsockopt(s, SOL_RDS, SO_RDS_TRANSPORT, &v, 2));
	len = sizeof(v);
	show("getsockopt(SO_RDS_TRANSPORT, unbound)", getsockopt(s, SOL_RDS, SO_RDS_TRANSPORT, &v, &len));
	printf("getsockopt(SO_RDS_TRANSPORT, unbound) value: %d\n", v);

	show("bind(short length)", bind(s, (struct sockaddr *)&a, 8));
	struct sockaddr_in any = sin4("0.0.0.0", 4000);
	show("bind(INADDR_ANY)", bind(s, (struct sockaddr *)&any, sizeof(any)));
	struct sockaddr_in p1 = sin4(A, 1);
	show("bind(port 1)", bind(s, (struct sockaddr *)&p1, sizeof(p1)));
	show("bind(A:4000)", bind(s, (struct sockaddr *)&a, sizeof(a)));
	show("bind(again)", bind(s, (struct sockaddr *)&a, sizeof(a)));
	len = sizeof(from);
	show("getsockname(bound)", getsockname(s, (struct sockaddr *)&from, &len));
	printf("getsockname(bound) addr: %s len %u\n", addr_str(&from, txt, sizeof(txt)), len);
	v = 2;
	show("setsockopt(SO_RDS_TRANSPORT, bound)", setsockopt(s, SOL_RDS, SO_RDS_TRANSPORT, &v, sizeof(v)));

	int t = rds_socket();
	show("bind(A:4000, second socket)", bind(t, (struct sockaddr *)&a, sizeof(a)));
	close(t);
	t = bound(B, 4001);
	line("bind(B:4001)", "ok");

	len = sizeof(v);
	show("getsockopt(SO_TYPE)", getsockopt(s, SOL_SOCKET, SO_TYPE, &v, &len));
	printf("getsockopt(SO_TYPE) value: %d (SOCK_SEQPACKET %d)\n", v, SOCK_SEQPACKET);
	len = sizeof(v);
	show("getsockopt(SO_DOMAIN)", getsockopt(s, SOL_SOCKET, SO_DOMAIN, &v, &len));
	printf("getsockopt(SO_DOMAIN) value: %d\n", v);

	printf("poll(bound, empty): POLLIN %d POLLOUT %d\n", polls(t, POLLIN, 0), polls(t, POLLOUT, 0));
	show("sendto(B, 5 bytes)", sendto(s, "hello", 5, 0, (struct sockaddr *)&b, sizeof(b)));
	printf("poll(after send): POLLIN %d\n", polls(t, POLLIN, 10000));
	fd_set rs;
	FD_ZERO(&rs);
	FD_SET(t, &rs);
	struct timeval tv = { 5, 0 };
	show("select(readable)", select(t + 1, &rs, NULL, NULL, &tv));
	v = -1;
	show("ioctl(FIONREAD)", ioctl(t, FIONREAD, &v));
	printf("ioctl(FIONREAD) value: %d\n", v);

	struct iovec iov = { buf, sizeof(buf) };
	struct msghdr m;
	memset(&m, 0, sizeof(m));
	m.msg_name = &from;
	m.msg_namelen = sizeof(from);
	m.msg_iov = &iov;
	m.msg_iovlen = 1;
	show("recvmsg(MSG_PEEK)", recvmsg(t, &m, MSG_PEEK));
	m.msg_namelen = sizeof(from);
	memset(buf, 0, sizeof(buf));
	show("recvmsg", recvmsg(t, &m, 0));
	printf("recvmsg from: %s namelen %u data \"%s\" flags %#x\n", addr_str(&from, txt, sizeof(txt)),
	       m.msg_namelen, buf, m.msg_flags);
	printf("poll(after recv): POLLIN %d\n", polls(t, POLLIN, 0));

	memset(big, 'z', sizeof(big));
	show("sendto(100 bytes)", sendto(s, big, 100, 0, (struct sockaddr *)&b, sizeof(b)));
	polls(t, POLLIN, 10000);
	m.msg_namelen = sizeof(from);
	iov.iov_len = 10;
	show("recvmsg(10-byte buffer)", recvmsg(t, &m, 0));
	printf("recvmsg(10-byte buffer) flags: MSG_TRUNC %d\n", !!(m.msg_flags & MSG_TRUNC));
	show("sendto(100 bytes)", sendto(s, big, 100, 0, (struct sockaddr *)&b, sizeof(b)));
	polls(t, POLLIN, 10000);
	show("recv(10 bytes, MSG_TRUNC)", recv(t, buf, 10, MSG_TRUNC));
	iov.iov_len = sizeof(buf);

	show("sendto(0 bytes)", sendto(s, "", 0, 0, (struct sockaddr *)&b, sizeof(b)));
	polls(t, POLLIN, 10000);
	len = sizeof(from);
	show("recvfrom(0-byte message)", recvfrom(t, buf, sizeof(buf), 0, (struct sockaddr *)&from, &len));
	printf("recvfrom from: %s\n", addr_str(&from, txt, sizeof(txt)));

	show("recv(empty, MSG_DONTWAIT)", recv(t, buf, sizeof(buf), MSG_DONTWAIT));
	int fl = fcntl(t, F_GETFL);
	show("fcntl(F_SETFL, O_NONBLOCK)", fcntl(t, F_SETFL, fl | O_NONBLOCK));
	printf("fcntl(F_GETFL) O_NONBLOCK: %d\n", !!(fcntl(t, F_GETFL) & O_NONBLOCK));
	show("read(empty, O_NONBLOCK)", read(t, buf, sizeof(buf)));
	fcntl(t, F_SETFL, fl);
	show("fcntl(F_SETFD, FD_CLOEXEC)", fcntl(t, F_SETFD, FD_CLOEXEC));
	printf("fcntl(F_GETFD) FD_CLOEXEC: %d\n", !!(fcntl(t, F_GETFD) & FD_CLOEXEC));

	show("send(unconnected)", send(s, "x", 1, 0));
	struct sockaddr_in zero = sin4("0.0.0.0", 0);
	show("connect(INADDR_ANY)", connect(s, (struct sockaddr *)&zero, sizeof(zero)));
	show("connect(B:4001)", connect(s, (struct sockaddr *)&b, sizeof(b)));
	len = sizeof(from);
	show("getpeername(connected)", getpeername(s, (struct sockaddr *)&from, &len));
	printf("getpeername addr: %s\n", addr_str(&from, txt, sizeof(txt)));
	show("send(connected)", send(s, "abc", 3, 0));
	/* The kernel refuses write/writev (they add MSG_EOR): send the same bytes then, so the
	 * reads below see the same messages on every stack. */
	if (show("write(connected)", write(s, "defg", 4)) < 0)
		send(s, "defg", 4, 0);
	struct iovec wv[2] = { { "hi", 2 }, { "there", 5 } };
	if (show("writev(2 iovecs)", writev(s, wv, 2)) < 0)
		send(s, "hithere", 7, 0);
	polls(t, POLLIN, 10000);
	show("read", read(t, buf, sizeof(buf)));
	polls(t, POLLIN, 10000);
	show("recv", recv(t, buf, sizeof(buf), 0));
	polls(t, POLLIN, 10000);
	char r1[3], r2[16];
	struct iovec rv[2] = { { r1, 3 }, { r2, sizeof(r2) } };
	memset(r2, 0, sizeof(r2));
	show("readv(2 iovecs)", readv(t, rv, 2));
	printf("readv data: %.3s|%.4s\n", r1, r2);

	show("sendto(MSG_OOB)", sendto(s, "x", 1, MSG_OOB, (struct sockaddr *)&b, sizeof(b)));
	show("sendto(MSG_NOSIGNAL)", sendto(s, "x", 1, MSG_NOSIGNAL, (struct sockaddr *)&b, sizeof(b)));
	struct sockaddr_in bc = sin4("255.255.255.255", 4001);
	show("sendto(broadcast)", sendto(s, "x", 1, 0, (struct sockaddr *)&bc, sizeof(bc)));
	show("sendto(short address)", sendto(s, "x", 1, 0, (struct sockaddr *)&b, 8));
	/* In .bss, not from malloc: huge + MAX_RW_COUNT (what the kernel checks of a SIZE_MAX
	 * length) must stay inside the user address space, which a mapping near the top of the
	 * mmap area (where malloc puts 1 MiB) does not always. */
	static char huge_buf[(1 << 20) + 1];
	char *huge = huge_buf;
	show("sendto(1 MiB + 1)", sendto(s, huge, (1 << 20) + 1, 0, (struct sockaddr *)&b, sizeof(b)));
	/* Lengths no buffer has: checked before any memory is touched. */
	show("send(SIZE_MAX bytes)", send(s, huge, (size_t)-1, 0));
	show("send(kernel address)", send(s, (void *)(uintptr_t)-4096, 10, 0));
	struct iovec bad_iov[2] = { { huge, 1 }, { huge, (size_t)-1 } };
	show("writev(iov_len SIZE_MAX)", writev(s, bad_iov, 2));
	struct iovec big_iov[2] = { { huge, 1 << 20 }, { huge, 1 << 20 } };
	show("writev(2 x 1 MiB)", writev(s, big_iov, 2));
	show("recv(SIZE_MAX / 2 bytes, MSG_DONTWAIT)", recv(t, huge, (size_t)-1 >> 1, MSG_DONTWAIT));
	show("recv(kernel address, MSG_DONTWAIT)", recv(t, (void *)(uintptr_t)-4096, 10, MSG_DONTWAIT));
	/* Past the user address space but below the sign bit: refused, never touched. */
	void *high = (void *)((uintptr_t)1 << 47);
	show("send(above user space)", send(s, high, 10, 0));
	show("recv(above user space, MSG_DONTWAIT)", recv(t, high, 10, MSG_DONTWAIT));
	/* The kernel's order: the buffer's import (EFAULT, EINVAL) first, then rds_sendmsg's
	 * flags, destination and connection, and only then the size. */
	show("send(kernel address, MSG_OOB)", send(s, (void *)(uintptr_t)-4096, 10, MSG_OOB));
	show("send(SIZE_MAX bytes, MSG_OOB)", send(s, huge, (size_t)-1, MSG_OOB));
	show("send(1 MiB + 1, unconnected)", send(t, huge, (1 << 20) + 1, 0));
	show("sendto(1 MiB + 1, broadcast)", sendto(s, huge, (1 << 20) + 1, 0, (struct sockaddr *)&bc, sizeof(bc)));
	struct msghdr bm;
	memset(&bm, 0, sizeof(bm));
	bm.msg_iov = big_iov;
	bm.msg_iovlen = 2;
	show("sendmsg(2 x 1 MiB)", sendmsg(s, &bm, 0));
	show("sendmsg(2 x 1 MiB, MSG_OOB)", sendmsg(s, &bm, MSG_OOB));
	show("sendmsg(2 x 1 MiB, unconnected)", sendmsg(t, &bm, 0));
	bm.msg_name = &bc;
	bm.msg_namelen = sizeof(bc);
	show("sendmsg(2 x 1 MiB, broadcast)", sendmsg(s, &bm, 0));
	/* More iovecs than UIO_MAXIOV: EINVAL from readv/writev, EMSGSIZE from a msghdr. */
	static struct iovec many[1025];
	for (int i = 0; i < 1025; i++) {
		many[i].iov_base = huge;
		many[i].iov_len = 1;
	}
	show("writev(1025 iovecs)", writev(s, many, 1025));
	show("readv(1025 iovecs)", readv(t, many, 1025));
	memset(&bm, 0, sizeof(bm));
	bm.msg_iov = many;
	bm.msg_iovlen = 1025;
	show("sendmsg(1025 iovecs)", sendmsg(s, &bm, 0));
	show("recvmsg(1025 iovecs, MSG_DONTWAIT)", recvmsg(t, &bm, MSG_DONTWAIT));

	union {
		struct cmsghdr h;
		char b[CMSG_SPACE(sizeof(struct rds_atomic_args))];
	} ctl;
	memset(&ctl, 0, sizeof(ctl));
	struct iovec siov = { "x", 1 };
	struct msghdr sm;
	memset(&sm, 0, sizeof(sm));
	sm.msg_name = &b;
	sm.msg_namelen = sizeof(b);
	sm.msg_iov = &siov;
	sm.msg_iovlen = 1;
	sm.msg_control = ctl.b;
	sm.msg_controllen = CMSG_SPACE(sizeof(struct rds_rdma_args));
	struct cmsghdr *c = CMSG_FIRSTHDR(&sm);
	c->cmsg_level = SOL_RDS;
	c->cmsg_type = RDS_CMSG_RDMA_ARGS;
	c->cmsg_len = CMSG_LEN(sizeof(struct rds_rdma_args));
	show("sendmsg(RDS_CMSG_RDMA_ARGS, nr_local 0)", sendmsg(s, &sm, 0));
	/* Valid arguments: one local iovec over `big`. */
	static uint64_t word[2];
	struct rds_iovec lv = { (uintptr_t)big, 64 };
	struct rds_rdma_args ra;
	memset(&ra, 0, sizeof(ra));
	ra.cookie = 0x100000001ULL;
	ra.remote_vec.bytes = 64;
	ra.local_vec_addr = (uintptr_t)&lv;
	ra.nr_local = 1;
	memcpy(CMSG_DATA(c), &ra, sizeof(ra));
	show("sendmsg(RDS_CMSG_RDMA_ARGS, tcp)", sendmsg(s, &sm, 0));
	c->cmsg_type = RDS_CMSG_ATOMIC_FADD;
	show("sendmsg(RDS_CMSG_ATOMIC_FADD, short)", sendmsg(s, &sm, 0));
	struct rds_atomic_args aa;
	memset(&aa, 0, sizeof(aa));
	aa.cookie = 0x100000001ULL;
	aa.local_addr = (uintptr_t)word;
	aa.fadd.add = 1;
	memcpy(CMSG_DATA(c), &aa, sizeof(aa));
	c->cmsg_len = CMSG_LEN(sizeof(aa));
	sm.msg_controllen = CMSG_SPACE(sizeof(aa));
	show("sendmsg(RDS_CMSG_ATOMIC_FADD, tcp)", sendmsg(s, &sm, 0));
	c->cmsg_type = 99;
	show("sendmsg(unknown SOL_RDS cmsg)", sendmsg(s, &sm, 0));
	sm.msg_control = NULL;
	sm.msg_controllen = 0;
	show("sendmsg(no cmsg)", sendmsg(s, &sm, 0));
	polls(t, POLLIN, 10000);
	show("recv", recv(t, buf, sizeof(buf), 0));

	v = 1;
	show("setsockopt(SO_TIMESTAMP)", setsockopt(t, SOL_SOCKET, SO_TIMESTAMP, &v, sizeof(v)));
	show("sendto(timestamped)", sendto(s, "ts", 2, 0, (struct sockaddr *)&b, sizeof(b)));
	polls(t, POLLIN, 10000);
	union {
		struct cmsghdr h;
		char b[256];
	} rc;
	m.msg_control = rc.b;
	m.msg_controllen = sizeof(rc.b);
	m.msg_namelen = sizeof(from);
	show("recvmsg(timestamp)", recvmsg(t, &m, 0));
	int ts = 0;
	for (c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c))
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_TIMESTAMP &&
		    c->cmsg_len == CMSG_LEN(sizeof(struct timeval)))
			ts = 1;
	printf("recvmsg(timestamp) SCM_TIMESTAMP cmsg: %d\n", ts);
	v = 0;
	setsockopt(t, SOL_SOCKET, SO_TIMESTAMP, &v, sizeof(v));
	m.msg_control = NULL;
	m.msg_controllen = 0;

	v = 65536;
	show("setsockopt(SO_SNDBUF, 65536)", setsockopt(t, SOL_SOCKET, SO_SNDBUF, &v, sizeof(v)));
	len = sizeof(v);
	show("getsockopt(SO_SNDBUF)", getsockopt(t, SOL_SOCKET, SO_SNDBUF, &v, &len));
	printf("getsockopt(SO_SNDBUF) value: %d\n", v);
	v = 131072;
	show("setsockopt(SO_RCVBUF, 131072)", setsockopt(t, SOL_SOCKET, SO_RCVBUF, &v, sizeof(v)));
	len = sizeof(v);
	show("getsockopt(SO_RCVBUF)", getsockopt(t, SOL_SOCKET, SO_RCVBUF, &v, &len));
	printf("getsockopt(SO_RCVBUF) value: %d\n", v);
	struct timeval rto = { 0, 200000 };
	show("setsockopt(SO_RCVTIMEO, 0.2 s)", setsockopt(t, SOL_SOCKET, SO_RCVTIMEO, &rto, sizeof(rto)));
	show("recv(empty, SO_RCVTIMEO)", recv(t, buf, sizeof(buf), 0));
	rto.tv_usec = 0;
	setsockopt(t, SOL_SOCKET, SO_RCVTIMEO, &rto, sizeof(rto));

	/* A signal whose handler has no SA_RESTART ends a blocking receive with EINTR. */
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_alarm;
	sigaction(SIGALRM, &sa, NULL);
	struct itimerval it = { { 0, 0 }, { 0, 100000 } };
	setitimer(ITIMER_REAL, &it, NULL);
	show("recv(empty, blocking, SIGALRM)", recv(t, buf, sizeof(buf), 0));
	/* Also right after a send (the waiting thread then reads the transport itself); another
	 * socket, since one that sent keeps its TOS. */
	int w = rds_socket();
	struct sockaddr_in wa = sin4(A, 4098), nobody = sin4(A, 4099);
	bind(w, (struct sockaddr *)&wa, sizeof(wa));
	show("sendto(unbound port)", sendto(w, "?", 1, 0, (struct sockaddr *)&nobody, sizeof(nobody)));
	setitimer(ITIMER_REAL, &it, NULL);
	show("recv(empty, after a send, blocking, SIGALRM)", recv(w, buf, sizeof(buf), 0));
	close(w);
	signal(SIGALRM, SIG_DFL);

	v = 1;
	show("setsockopt(RDS_CONG_MONITOR)", setsockopt(t, SOL_RDS, RDS_CONG_MONITOR, &v, sizeof(v)));
	v = 0;
	setsockopt(t, SOL_RDS, RDS_CONG_MONITOR, &v, sizeof(v));
	v = 1;
	show("setsockopt(RDS_RECVERR)", setsockopt(t, SOL_RDS, RDS_RECVERR, &v, sizeof(v)));
	show("setsockopt(RDS_RECVERR, len 2)", setsockopt(t, SOL_RDS, RDS_RECVERR, &v, 2));
	v = 0;
	len = sizeof(v);
	show("getsockopt(RDS_RECVERR)", getsockopt(t, SOL_RDS, RDS_RECVERR, &v, &len));
	printf("getsockopt(RDS_RECVERR) value: %d\n", v);
	len = 2;
	show("getsockopt(RDS_RECVERR, len 2)", getsockopt(t, SOL_RDS, RDS_RECVERR, &v, &len));
	show("setsockopt(RDS_CANCEL_SENT_TO, len 8)", setsockopt(s, SOL_RDS, RDS_CANCEL_SENT_TO, &b, 8));
	show("setsockopt(RDS_CANCEL_SENT_TO)", setsockopt(s, SOL_RDS, RDS_CANCEL_SENT_TO, &b, sizeof(b)));
	struct rds_get_mr_args mr;
	memset(&mr, 0, sizeof(mr));
	mr.vec.addr = (uintptr_t)big;
	mr.vec.bytes = sizeof(big);
	show("setsockopt(RDS_GET_MR, tcp)", setsockopt(s, SOL_RDS, RDS_GET_MR, &mr, sizeof(mr)));
	struct rds_free_mr_args fr;
	memset(&fr, 0, sizeof(fr));
	show("setsockopt(RDS_FREE_MR, tcp)", setsockopt(s, SOL_RDS, RDS_FREE_MR, &fr, sizeof(fr)));
	show("setsockopt(SOL_RDS 99)", setsockopt(s, SOL_RDS, 99, &v, sizeof(v)));
	len = sizeof(v);
	show("getsockopt(SOL_RDS 99)", getsockopt(s, SOL_RDS, 99, &v, &len));
	len = sizeof(v);
	show("getsockopt(SO_RDS_TRANSPORT, bound)", getsockopt(s, SOL_RDS, SO_RDS_TRANSPORT, &v, &len));
	printf("getsockopt(SO_RDS_TRANSPORT, bound) value: %d\n", v);

	/* RDS_INFO_*: ENOSPC and the needed length, then the table. */
	len = 0;
	show("getsockopt(RDS_INFO_COUNTERS, len 0)", getsockopt(s, SOL_RDS, RDS_INFO_COUNTERS, NULL, &len));
	printf("RDS_INFO_COUNTERS needed: multiple of 40 %d, nonzero %d\n", len % 40 == 0, len > 0);
	char *info = malloc(len + 4096);
	socklen_t need = len;
	len = need + 4096;
	int each = show("getsockopt(RDS_INFO_COUNTERS)", getsockopt(s, SOL_RDS, RDS_INFO_COUNTERS, info, &len));
	int found = 0;
	for (socklen_t off = 0; each == 40 && off + 40 <= len; off += 40)
		if (!strcmp(info + off, "recv_delivered"))
			found = 1;
	printf("RDS_INFO_COUNTERS: optlen = needed %d, recv_delivered listed %d\n", len == need, found);
	len = 0;
	getsockopt(s, SOL_RDS, RDS_INFO_SOCKETS, NULL, &len);
	need = len;
	len = need + 4096;
	each = show("getsockopt(RDS_INFO_SOCKETS)", getsockopt(s, SOL_RDS, RDS_INFO_SOCKETS, info, &len));
	int mine = 0;
	for (socklen_t off = 0; each == (int)sizeof(struct rds_info_socket) && off + each <= len; off += each) {
		struct rds_info_socket *k = (struct rds_info_socket *)(info + off);
		if (k->bound_addr == a.sin_addr.s_addr && k->bound_port == a.sin_port &&
		    k->connected_addr == b.sin_addr.s_addr && k->connected_port == b.sin_port)
			mine = 1;
	}
	printf("RDS_INFO_SOCKETS: A:4000 connected to B:4001 listed %d\n", mine);
	len = sizeof(struct rds_info_connection) - 1;
	getsockopt(s, SOL_RDS, RDS_INFO_CONNECTIONS, info, &len);
	printf("RDS_INFO_CONNECTIONS(short buffer): %s, optlen multiple of %zu %d\n", ename(errno),
	       sizeof(struct rds_info_connection), len % sizeof(struct rds_info_connection) == 0);
	len = 4096;
	show("getsockopt(RDS_INFO_CONNECTIONS)", getsockopt(s, SOL_RDS, RDS_INFO_CONNECTIONS, info, &len));
	len = 4096;
	show("getsockopt(RDS_INFO_SEND_MESSAGES)", getsockopt(s, SOL_RDS, RDS_INFO_SEND_MESSAGES, info, &len));
	len = 4096;
	show("getsockopt(RDS_INFO_RECV_MESSAGES)", getsockopt(s, SOL_RDS, RDS_INFO_RECV_MESSAGES, info, &len));
	len = 4096;
	show("getsockopt(RDS_INFO_TCP_SOCKETS)", getsockopt(s, SOL_RDS, RDS_INFO_TCP_SOCKETS, info, &len));
	len = 4096;
	show("getsockopt(RDS_INFO 10002)", getsockopt(s, SOL_RDS, 10002, info, &len));
	free(info);

	unsigned char tos = 3;
	int u = rds_socket();
	show("ioctl(SIOCRDSSETTOS, unbound)", ioctl(u, SIOCRDSSETTOS, &tos));
	close(u);
	/* t has received but never sent: no connection of its own yet. */
	show("ioctl(SIOCRDSSETTOS, 3)", ioctl(t, SIOCRDSSETTOS, &tos));
	tos = 4;
	show("ioctl(SIOCRDSSETTOS, again)", ioctl(t, SIOCRDSSETTOS, &tos));
	tos = 9;
	show("ioctl(SIOCRDSGETTOS)", ioctl(t, SIOCRDSGETTOS, &tos));
	printf("ioctl(SIOCRDSGETTOS) value: %d (tcp maps every tos to 0)\n", tos);
	tos = 5;
	show("ioctl(SIOCRDSSETTOS, after sending)", ioctl(s, SIOCRDSSETTOS, &tos));
	/* A device ioctl (SIOCDEVPRIVATE + 15) names an interface: "" is none. */
	char ifr[64];
	memset(ifr, 0, sizeof(ifr));
	show("ioctl(unknown socket ioctl)", ioctl(t, 0x89ff, ifr));
	show("ioctl(unknown)", ioctl(t, 0x5401, ifr));

	/* A full send buffer: messages to an address with no node stay queued. */
	int f = bound(A, 4002);
	struct sockaddr_in nowhere = sin4(N, 4000);
	v = 4096;
	setsockopt(f, SOL_SOCKET, SO_SNDBUF, &v, sizeof(v));
	long sent = 0, r;
	for (int i = 0; i < 1000; i++) {
		r = sendto(f, big, 1024, MSG_DONTWAIT, (struct sockaddr *)&nowhere, sizeof(nowhere));
		if (r < 0)
			break;
		sent++;
	}
	printf("sendto(until full, MSG_DONTWAIT): -1 %s after more than 1 message %d\n", ename(errno), sent > 1);
	printf("poll(send buffer full): POLLOUT %d\n", polls(f, POLLOUT, 0));
	show("setsockopt(RDS_CANCEL_SENT_TO, nowhere)",
	     setsockopt(f, SOL_RDS, RDS_CANCEL_SENT_TO, &nowhere, sizeof(nowhere)));
	printf("poll(after cancel): POLLOUT %d\n", polls(f, POLLOUT, 5000));
	close(f);

	/* dup, dup2, close. */
	int d = dup(s);
	show("dup", d >= 0 ? 0 : -1);
	show("send(dup)", send(d, "dup", 3, 0));
	polls(t, POLLIN, 10000);
	show("recv(from dup)", recv(t, buf, sizeof(buf), 0));
	show("close(original)", close(s));
	show("send(dup after close of original)", send(d, "dup2", 4, 0));
	polls(t, POLLIN, 10000);
	show("recv", recv(t, buf, sizeof(buf), 0));
	int other = socket(AF_INET, SOCK_DGRAM, 0);
	show("dup2(rds, udp socket)", dup2(d, other) == other ? 0 : -1);
	show("send(dup2 target)", send(other, "d2", 2, 0));
	polls(t, POLLIN, 10000);
	show("recv", recv(t, buf, sizeof(buf), 0));
	int udp = socket(AF_INET, SOCK_DGRAM, 0);
	show("dup2(udp socket, rds)", dup2(udp, other) == other ? 0 : -1);
	len = sizeof(v);
	getsockopt(other, SOL_SOCKET, SO_TYPE, &v, &len);
	printf("dup2 over rds: SO_TYPE is SOCK_DGRAM %d\n", v == SOCK_DGRAM);
	close(udp);
	close(other);
	show("send(last descriptor)", send(d, "last", 4, 0));
	show("close(last descriptor)", close(d));
	show("send(closed)", send(d, "x", 1, 0));
	close(t);
	line("done", "ok");
	return 0;
}

/* One epoll set and one poll() call holding RDS sockets and a UDP socket together. */
static int mode_mix(const char *A, const char *B)
{
	int r1 = bound(A, 5000), r2 = bound(B, 5001);
	int u1 = socket(AF_INET, SOCK_DGRAM, 0), u2 = socket(AF_INET, SOCK_DGRAM, 0);
	struct sockaddr_in ua = sin4("127.0.0.1", 0);
	socklen_t len = sizeof(ua);
	if (bind(u2, (struct sockaddr *)&ua, sizeof(ua)) < 0 || getsockname(u2, (struct sockaddr *)&ua, &len) < 0)
		die("udp");
	struct sockaddr_in b = sin4(B, 5001);
	char buf[64];

	int ep = epoll_create1(0);
	struct epoll_event ev = { .events = EPOLLIN };
	ev.data.fd = r2;
	epoll_ctl(ep, EPOLL_CTL_ADD, r2, &ev);
	ev.data.fd = u2;
	epoll_ctl(ep, EPOLL_CTL_ADD, u2, &ev);
	ev.events = EPOLLOUT;
	ev.data.fd = r1;
	epoll_ctl(ep, EPOLL_CTL_ADD, r1, &ev);
	struct epoll_event out[8];
	int n = epoll_wait(ep, out, 8, 0);
	printf("epoll(idle): %d ready, rds writable %d\n", n, n == 1 && out[0].data.fd == r1);
	ev.events = 0;
	ev.data.fd = r1;
	epoll_ctl(ep, EPOLL_CTL_MOD, r1, &ev);

	sendto(u1, "u", 1, 0, (struct sockaddr *)&ua, sizeof(ua));
	sendto(r1, "r", 1, 0, (struct sockaddr *)&b, sizeof(b));
	int seen_r = 0, seen_u = 0;
	for (int i = 0; i < 50 && !(seen_r && seen_u); i++) {
		n = epoll_wait(ep, out, 8, 200);
		for (int k = 0; k < n; k++) {
			if (out[k].data.fd == r2)
				seen_r = 1;
			if (out[k].data.fd == u2 && !seen_u) {
				/* Level-triggered: stop watching it until the RDS socket is seen too. */
				seen_u = 1;
				ev.events = 0;
				ev.data.fd = u2;
				epoll_ctl(ep, EPOLL_CTL_MOD, u2, &ev);
			}
		}
	}
	ev.events = EPOLLIN;
	ev.data.fd = u2;
	epoll_ctl(ep, EPOLL_CTL_MOD, u2, &ev);
	printf("epoll(after sends): rds readable %d, udp readable %d\n", seen_r, seen_u);

	struct pollfd p[3] = { { r2, POLLIN, 0 }, { u2, POLLIN, 0 }, { r1, POLLOUT, 0 } };
	n = poll(p, 3, 1000);
	printf("poll(mixed): %d ready: rds POLLIN %d, udp POLLIN %d, rds POLLOUT %d\n", n,
	       !!(p[0].revents & POLLIN), !!(p[1].revents & POLLIN), !!(p[2].revents & POLLOUT));
	recv(r2, buf, sizeof(buf), 0);
	recv(u2, buf, sizeof(buf), 0);
	n = epoll_wait(ep, out, 8, 0);
	printf("epoll(after receiving both): %d ready\n", n);
	p[0].revents = p[1].revents = 0;
	n = poll(p, 2, 0);
	printf("poll(after receiving both): %d ready\n", n);
	close(ep);
	line("done", "ok");
	return 0;
}

static int mode_fork(const char *A, const char *B, const char *self)
{
	int s = bound(A, 6000), t = bound(B, 6001);
	struct sockaddr_in b = sin4(B, 6001);
	char buf[64], fdtxt[16];

	snprintf(fdtxt, sizeof(fdtxt), "%d", s);
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		execl(self, self, "exec-child", fdtxt, (char *)NULL);
		_exit(127);
	}
	int st;
	waitpid(pid, &st, 0);
	printf("fork+exec child: exit %d\n", WIFEXITED(st) ? WEXITSTATUS(st) : -1);

	fflush(stdout);
	pid = fork();
	if (pid == 0) {
		show("child: sendto(inherited)", sendto(s, "c", 1, 0, (struct sockaddr *)&b, sizeof(b)));
		show("child: recv(inherited)", recv(t, buf, sizeof(buf), MSG_DONTWAIT));
		show("child: dup(inherited)", dup(s));
		show("child: socket(AF_RDS)", socket(AF_RDS, SOCK_SEQPACKET, 0));
		show("child: close(inherited)", close(s));
		_exit(0);
	}
	waitpid(pid, &st, 0);
	printf("fork child: exit %d\n", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
	show("parent: sendto after fork", sendto(s, "p", 1, 0, (struct sockaddr *)&b, sizeof(b)));
	printf("parent: POLLIN %d\n", polls(t, POLLIN, 10000));
	show("parent: recv", recv(t, buf, sizeof(buf), 0));
	line("done", "ok");
	return 0;
}

static int mode_exec_child(const char *fdtxt)
{
	int fd = atoi(fdtxt), v = 0;
	socklen_t len = sizeof(v);
	int r = getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &v, &len);
	printf("exec child: inherited descriptor open %d, AF_RDS %d\n", r == 0, v == AF_RDS);
	int s = socket(AF_RDS, SOCK_SEQPACKET, 0);
	printf("exec child: socket(AF_RDS) works %d\n", s >= 0);
	fflush(stdout);
	return 0;
}

static int mode_many(const char *A, int n)
{
	int *s = calloc(n, sizeof(int));
	char buf[64], msg[64];
	for (int i = 0; i < n; i++)
		s[i] = bound(A, 7000 + i);
	for (int i = 0; i < n; i++) {
		struct sockaddr_in to = sin4(A, 7000 + (i + 1) % n);
		int k = snprintf(msg, sizeof(msg), "from %d", i);
		if (sendto(s[i], msg, k, 0, (struct sockaddr *)&to, sizeof(to)) != k)
			die("sendto");
	}
	int ok = 0;
	for (int i = 0; i < n; i++) {
		if (!polls(s[i], POLLIN, 10000))
			continue;
		struct sockaddr_in from;
		socklen_t len = sizeof(from);
		ssize_t r = recvfrom(s[i], buf, sizeof(buf) - 1, 0, (struct sockaddr *)&from, &len);
		if (r < 0)
			continue;
		buf[r] = 0;
		int want = (i + n - 1) % n;
		snprintf(msg, sizeof(msg), "from %d", want);
		if (!strcmp(buf, msg) && ntohs(from.sin_port) == 7000 + want)
			ok++;
	}
	printf("many: %d sockets, %d received the right message\n", n, ok);
	for (int i = 0; i < n; i++)
		close(s[i]);
	free(s);
	return ok == n ? 0 : 1;
}

static int mode_serve(const char *A, int port, int n)
{
	int s = bound(A, port);
	char buf[2048];
	printf("serving\n");
	fflush(stdout);
	for (int i = 0; i < n; i++) {
		struct sockaddr_in from;
		socklen_t len = sizeof(from);
		ssize_t r = recvfrom(s, buf, sizeof(buf), 0, (struct sockaddr *)&from, &len);
		if (r < 0)
			die("recvfrom");
		if (sendto(s, buf, r, 0, (struct sockaddr *)&from, len) != r)
			die("sendto");
	}
	printf("served %d\n", n);
	return 0;
}

static int mode_client(const char *A, int port, const char *peer, int pport, int n)
{
	int s = bound(A, port);
	struct sockaddr_in to = sin4(peer, pport);
	char msg[64], buf[64];
	int ok = 0;
	for (int i = 0; i < n; i++) {
		int k = snprintf(msg, sizeof(msg), "echo %d", i);
		if (sendto(s, msg, k, 0, (struct sockaddr *)&to, sizeof(to)) != k)
			die("sendto");
		if (!polls(s, POLLIN, 10000))
			break;
		ssize_t r = recv(s, buf, sizeof(buf), 0);
		if (r == k && !memcmp(buf, msg, k))
			ok++;
	}
	printf("client: %d of %d echoed\n", ok, n);
	return ok == n ? 0 : 1;
}

/* The value of counter `name` (RDS_INFO_COUNTERS on `s`); exits when it is missing. */
static unsigned long long counter(int s, const char *name)
{
	static char info[64 * 1024];
	socklen_t len = sizeof(info);
	if (getsockopt(s, SOL_RDS, RDS_INFO_COUNTERS, info, &len) < 0)
		die("getsockopt(RDS_INFO_COUNTERS)");
	for (socklen_t off = 0; off + 40 <= len; off += 40)
		if (!strcmp(info + off, name)) {
			unsigned long long v;
			memcpy(&v, info + off + 32, sizeof(v));
			return v;
		}
	fprintf(stderr, "rds_calls: no counter %s\n", name);
	exit(2);
}

struct drain {
	int rx, messages, started;
};

/* Waits a moment (the sender blocks meanwhile), then reads `messages` messages. */
static void *drain_thread(void *arg)
{
	struct drain *d = arg;
	char buf[8192];
	usleep(300 * 1000);
	__atomic_store_n(&d->started, 1, __ATOMIC_SEQ_CST);
	for (int i = 0; i < d->messages; i++)
		if (recv(d->rx, buf, sizeof(buf), 0) < 0)
			die("recv(drain)");
	return NULL;
}

static int mode_congest(const char *A, const char *B)
{
	int s = bound(A, 8000);
	int r = rds_socket();
	int small = 16 * 1024;
	if (setsockopt(r, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small)) < 0)
		die("setsockopt(SO_RCVBUF)");
	struct sockaddr_in b = sin4(B, 8001);
	if (bind(r, (struct sockaddr *)&b, sizeof(b)) < 0)
		die("bind");
	struct timeval long_wait = { .tv_sec = 20 };
	setsockopt(r, SOL_SOCKET, SO_RCVTIMEO, &long_wait, sizeof(long_wait));
	static char msg[4096];
	memset(msg, 'c', sizeof(msg));
	int queued = 0;
	for (int tries = 0; tries < 100000; tries++) {
		ssize_t k = sendto(s, msg, sizeof(msg), MSG_DONTWAIT, (struct sockaddr *)&b, sizeof(b));
		if (k < 0 && errno == ENOBUFS)
			break;
		if (k < 0 && errno == EAGAIN) {
			polls(s, POLLOUT, 1000);
			continue;
		}
		if (k != (ssize_t)sizeof(msg))
			die("sendto(MSG_DONTWAIT)");
		queued++;
	}
	printf("congested after 4 or more messages: %d\n", queued >= 4);

	/* A signal handler without SA_RESTART interrupts a congested blocking send. */
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_alarm;
	sigaction(SIGALRM, &sa, NULL);
	struct itimerval it = { .it_value = { .tv_usec = 100 * 1000 } };
	setitimer(ITIMER_REAL, &it, NULL);
	show("sendto(congested, SIGALRM)", sendto(s, msg, sizeof(msg), 0, (struct sockaddr *)&b, sizeof(b)));
	/* SO_SNDTIMEO ends it. */
	struct timeval tmo = { .tv_usec = 100 * 1000 };
	setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tmo, sizeof(tmo));
	show("sendto(congested, SO_SNDTIMEO)", sendto(s, msg, sizeof(msg), 0, (struct sockaddr *)&b, sizeof(b)));
	struct timeval none = { 0 };
	setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &none, sizeof(none));

	/* Blocks until the other thread reads; then the congestion map's update wakes it. */
	unsigned long long before = counter(s, "cong_send_error");
	struct drain d = { .rx = r, .messages = queued + 1 };
	pthread_t t;
	if (pthread_create(&t, NULL, drain_thread, &d))
		die("pthread_create");
	show("sendto(congested, blocking)", sendto(s, msg, sizeof(msg), 0, (struct sockaddr *)&b, sizeof(b)));
	printf("returned after the receiver started reading: %d\n", __atomic_load_n(&d.started, __ATOMIC_SEQ_CST));
	pthread_join(t, NULL);
	printf("congested attempts: %llu\n", counter(s, "cong_send_error") - before);
	line("done", "ok");
	return 0;
}

/* POLLIN of `fd` by the raw system call, which the library does not see (-1 on error). */
static int raw_pollin(int fd, int ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000 };
	long n = syscall(SYS_ppoll, &p, 1, &ts, NULL, 0);
	return n < 0 ? -1 : (n == 1 && (p.revents & POLLIN) ? 1 : 0);
}

/* The descriptor is kept in step with its socket only from the first poll the library sees:
 * before it, a raw poll finds a queued message not readable; after it, readable, and it
 * follows new messages by itself. */
static int mode_lazy(const char *A, const char *B)
{
	int r1 = bound(A, 5000), r2 = bound(B, 5001);
	struct sockaddr_in b = sin4(B, 5001);
	char buf[64], t[96];
	show("send(first)", (int)sendto(r1, "first", 5, 0, (struct sockaddr *)&b, sizeof(b)));
	int queued = 0;
	for (int i = 0; i < 1000 && !queued; i++) {
		queued = recv(r2, buf, sizeof(buf), MSG_PEEK | MSG_DONTWAIT) == 5;
		if (!queued)
			usleep(1000);
	}
	printf("peek: queued %d\n", queued);
	printf("raw poll before any poll: readable %d\n", raw_pollin(r2, 200));
	struct pollfd p = { .fd = r2, .events = POLLIN };
	int n = poll(&p, 1, 1000);
	printf("poll: %d ready, POLLIN %d\n", n, !!(p.revents & POLLIN));
	printf("raw poll after it: readable %d\n", raw_pollin(r2, 0));
	ssize_t got = recv(r2, buf, sizeof(buf), 0);
	snprintf(t, sizeof(t), "%zd", got);
	line("recv", t);
	printf("raw poll after recv: readable %d\n", raw_pollin(r2, 0));
	show("send(second)", (int)sendto(r1, "second", 6, 0, (struct sockaddr *)&b, sizeof(b)));
	printf("raw poll after the second send: readable %d\n", raw_pollin(r2, 5000));
	close(r1);
	close(r2);
	line("done", "ok");
	return 0;
}

int main(int argc, char **argv)
{
	if (argc >= 4 && !strcmp(argv[1], "calls"))
		return mode_calls(argv[2], argv[3], argc >= 5 ? argv[4] : "127.21.1.50");
	if (argc >= 4 && !strcmp(argv[1], "mix"))
		return mode_mix(argv[2], argv[3]);
	if (argc >= 5 && !strcmp(argv[1], "fork"))
		return mode_fork(argv[2], argv[3], argv[4]);
	if (argc >= 3 && !strcmp(argv[1], "exec-child"))
		return mode_exec_child(argv[2]);
	if (argc >= 4 && !strcmp(argv[1], "many"))
		return mode_many(argv[2], atoi(argv[3]));
	if (argc >= 5 && !strcmp(argv[1], "serve"))
		return mode_serve(argv[2], atoi(argv[3]), atoi(argv[4]));
	if (argc >= 7 && !strcmp(argv[1], "client"))
		return mode_client(argv[2], atoi(argv[3]), argv[4], atoi(argv[5]), atoi(argv[6]));
	if (argc >= 4 && !strcmp(argv[1], "congest"))
		return mode_congest(argv[2], argv[3]);
	if (argc >= 4 && !strcmp(argv[1], "lazy"))
		return mode_lazy(argv[2], argv[3]);
	fprintf(stderr, "usage: rds_calls calls|mix|fork|exec-child|many|serve|client|congest|lazy ...\n");
	return 2;
}
