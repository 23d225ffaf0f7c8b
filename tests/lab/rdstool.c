/*
 * rdstool: a small helper for kernel RDS (AF_RDS) sockets, used inside the
 * interop lab's qemu guests (and usable on any Linux host with the rds module).
 *
 * Built with `gcc -O2 -static` by tests/lab/lab.sh and put into the guest
 * initramfs as /usr/bin/rdstool. The command line is documented in
 * tests/lab/README.md and by `rdstool help`.
 *
 * Exit status: 0 = success, 1 = check failed (mismatch, missing or extra
 * messages, time limit reached before completion), 2 = usage or setup error
 * (bad option, socket/bind failure), 124 = hard time limit (watchdog).
 *
 * Every loop is bounded by a message count and by a deadline.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- constants from include/uapi/linux/rds.h (values are ABI facts) ---- */
#ifndef AF_RDS
#define AF_RDS 21
#endif
#define SOL_RDS_LEVEL 276
#define RDS_CANCEL_SENT_TO 1
#define RDS_CONG_MONITOR 6
#define SO_RDS_TRANSPORT 8
#define RDS_TRANS_IB 0
#define RDS_TRANS_TCP 2
#define RDS_TRANS_LOOP 3
#define RDS_INFO_COUNTERS 10000
#define RDS_INFO_CONNECTIONS 10001
#define RDS_INFO_SEND_MESSAGES 10003
#define RDS_INFO_RETRANS_MESSAGES 10004
#define RDS_INFO_RECV_MESSAGES 10005
#define RDS_INFO_SOCKETS 10006
#define RDS_INFO_TCP_SOCKETS 10007
#define RDS_INFO_IB_CONNECTIONS 10008

#define MAX_MSG (1024 * 1024) /* RDS_MAX_MSG_SIZE */
#define TRANSPORT_AUTO (-1)

static const char *g_cmd = "rdstool";
static int g_quiet;

/* ------------------------------------------------------------------------ */
/* small utilities                                                           */

static void die(int code, const char *fmt, ...) __attribute__((noreturn, format(printf, 2, 3)));
static void die(int code, const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "rdstool %s: ", g_cmd);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	fflush(stdout);
	exit(code);
}

static void note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void note(const char *fmt, ...)
{
	va_list ap;
	if (g_quiet)
		return;
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
}

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void sleep_ms(unsigned ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

/* remaining milliseconds until deadline, clamped to [0, cap] */
static int ms_left(uint64_t deadline, int cap)
{
	uint64_t n = now_ns();
	if (n >= deadline)
		return 0;
	uint64_t ms = (deadline - n) / 1000000ull;
	if (ms > (uint64_t)cap)
		ms = (uint64_t)cap;
	return (int)ms;
}

static const char *errname(int e)
{
	switch (e) {
	case EAGAIN: return "EAGAIN";
	case ENOBUFS: return "ENOBUFS";
	case EINVAL: return "EINVAL";
	case EADDRINUSE: return "EADDRINUSE";
	case EADDRNOTAVAIL: return "EADDRNOTAVAIL";
	case ENOPROTOOPT: return "ENOPROTOOPT";
	case EOPNOTSUPP: return "EOPNOTSUPP";
	case ENOTCONN: return "ENOTCONN";
	case EMSGSIZE: return "EMSGSIZE";
	case ETIMEDOUT: return "ETIMEDOUT";
	case ECONNRESET: return "ECONNRESET";
	case EPIPE: return "EPIPE";
	case ENOSPC: return "ENOSPC";
	case EAFNOSUPPORT: return "EAFNOSUPPORT";
	case ESOCKTNOSUPPORT: return "ESOCKTNOSUPPORT";
	case EPROTOTYPE: return "EPROTOTYPE";
	case EDESTADDRREQ: return "EDESTADDRREQ";
	case ENETUNREACH: return "ENETUNREACH";
	case EINTR: return "EINTR";
	case EPERM: return "EPERM";
	case EACCES: return "EACCES";
	case ENOENT: return "ENOENT";
	case ENODEV: return "ENODEV";
	case EFAULT: return "EFAULT";
	case ENOMEM: return "ENOMEM";
	case EBUSY: return "EBUSY";
	default: return "E?";
	}
}

static int errno_from_name(const char *s)
{
	static const int all[] = { EAGAIN, ENOBUFS, EINVAL, EADDRINUSE, EADDRNOTAVAIL, ENOPROTOOPT,
				   EOPNOTSUPP, ENOTCONN, EMSGSIZE, ETIMEDOUT, ECONNRESET, EPIPE,
				   ENOSPC, EAFNOSUPPORT, ESOCKTNOSUPPORT, EPROTOTYPE, EDESTADDRREQ,
				   ENETUNREACH, EINTR, EPERM, EACCES, ENOENT, ENODEV, EFAULT, ENOMEM,
				   EBUSY };
	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
		if (strcmp(s, errname(all[i])) == 0)
			return all[i];
	char *end;
	long v = strtol(s, &end, 10);
	if (*s && !*end && v > 0)
		return (int)v;
	die(2, "unknown errno name '%s'", s);
}

static uint64_t parse_u64(const char *s, const char *what)
{
	char *end;
	if (!*s || *s == '-')
		die(2, "bad number for %s: '%s'", what, s);
	errno = 0;
	unsigned long long v = strtoull(s, &end, 0);
	uint64_t mul = 1;
	if (end == s || errno)
		die(2, "bad number for %s: '%s'", what, s);
	if (*end) {
		if (strcmp(end, "k") == 0 || strcmp(end, "K") == 0)
			mul = 1024;
		else if (strcmp(end, "m") == 0 || strcmp(end, "M") == 0)
			mul = 1024 * 1024;
		else
			die(2, "bad number for %s: '%s'", what, s);
	}
	return (uint64_t)v * mul;
}

static double elapsed_ms(uint64_t t0) { return (double)(now_ns() - t0) / 1e6; }

/* "A.B.C.D" or "A.B.C.D:PORT"; port_required: 1 = must have, 0 = optional (default 0) */
static void parse_sin(const char *arg, struct sockaddr_in *sin, int port_required, const char *what)
{
	char buf[64];
	if (strlen(arg) >= sizeof(buf))
		die(2, "bad %s address '%s'", what, arg);
	strcpy(buf, arg);
	memset(sin, 0, sizeof(*sin));
	sin->sin_family = AF_INET;
	char *colon = strrchr(buf, ':');
	if (colon) {
		*colon = 0;
		uint64_t p = parse_u64(colon + 1, what);
		if (p > 65535)
			die(2, "bad %s port in '%s'", what, arg);
		sin->sin_port = htons((uint16_t)p);
	} else if (port_required) {
		die(2, "%s needs ADDR:PORT, got '%s'", what, arg);
	}
	if (inet_pton(AF_INET, buf, &sin->sin_addr) != 1)
		die(2, "bad %s address '%s'", what, arg);
}

static const char *sin_str(const struct sockaddr_in *sin, char *buf, size_t len)
{
	char a[INET_ADDRSTRLEN];
	inet_ntop(AF_INET, &sin->sin_addr, a, sizeof(a));
	snprintf(buf, len, "%s:%u", a, ntohs(sin->sin_port));
	return buf;
}

static int parse_transport(const char *s)
{
	if (strcmp(s, "tcp") == 0)
		return RDS_TRANS_TCP;
	if (strcmp(s, "ib") == 0 || strcmp(s, "rdma") == 0)
		return RDS_TRANS_IB;
	if (strcmp(s, "auto") == 0 || strcmp(s, "none") == 0)
		return TRANSPORT_AUTO;
	die(2, "bad transport '%s' (tcp, ib or auto)", s);
}

static const char *transport_name(int t)
{
	switch (t) {
	case RDS_TRANS_IB: return "ib";
	case 1: return "iwarp";
	case RDS_TRANS_TCP: return "tcp";
	case RDS_TRANS_LOOP: return "loopback";
	case -1: return "none";
	default: return "unknown";
	}
}

/* ------------------------------------------------------------------------ */
/* watchdog: a hard limit in case a blocking call never returns             */

static void watchdog_fire(int sig)
{
	(void)sig;
	static const char msg[] = "rdstool: hard time limit reached (watchdog), exiting 124\n";
	ssize_t r = write(2, msg, sizeof(msg) - 1);
	(void)r;
	_exit(124);
}

static void arm_watchdog(unsigned seconds)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = watchdog_fire;
	sigaction(SIGALRM, &sa, NULL);
	alarm(seconds);
}

/* ------------------------------------------------------------------------ */
/* sockets                                                                    */

struct sockopts {
	int transport;     /* TRANSPORT_AUTO or RDS_TRANS_* */
	uint64_t sndbuf;   /* 0 = default */
	uint64_t rcvbuf;   /* 0 = default */
	int nonblock;
};

static void set_buf(int fd, int force_opt, int opt, uint64_t val, const char *name)
{
	int v = (int)(val > INT_MAX ? INT_MAX : val);
	if (setsockopt(fd, SOL_SOCKET, force_opt, &v, sizeof(v)) == 0)
		return;
	if (setsockopt(fd, SOL_SOCKET, opt, &v, sizeof(v)) != 0)
		die(2, "setsockopt(%s=%d): %s", name, v, strerror(errno));
}

static int rds_socket_raw(void)
{
	int fd = socket(AF_RDS, SOCK_SEQPACKET, 0);
	if (fd < 0)
		die(2, "socket(AF_RDS, SOCK_SEQPACKET): %s (is the rds module loaded?)", strerror(errno));
	return fd;
}

/* create, configure and bind an RDS socket; exits on failure */
static int rds_socket(const struct sockaddr_in *bind_addr, const struct sockopts *o)
{
	char b[64];
	int fd = rds_socket_raw();
	if (o->sndbuf)
		set_buf(fd, SO_SNDBUFFORCE, SO_SNDBUF, o->sndbuf, "SO_SNDBUF");
	if (o->rcvbuf)
		set_buf(fd, SO_RCVBUFFORCE, SO_RCVBUF, o->rcvbuf, "SO_RCVBUF");
	if (o->transport != TRANSPORT_AUTO) {
		int t = o->transport;
		if (setsockopt(fd, SOL_RDS_LEVEL, SO_RDS_TRANSPORT, &t, sizeof(t)) != 0)
			die(2, "setsockopt(SO_RDS_TRANSPORT=%s): %s", transport_name(t), strerror(errno));
	}
	if (bind(fd, (const struct sockaddr *)bind_addr, sizeof(*bind_addr)) != 0)
		die(2, "bind(%s): %s (%s)", sin_str(bind_addr, b, sizeof(b)), strerror(errno),
		    errname(errno));
	if (o->nonblock) {
		int fl = fcntl(fd, F_GETFL);
		fcntl(fd, F_SETFL, fl | O_NONBLOCK);
	}
	return fd;
}

static int get_transport(int fd)
{
	int t = -1;
	socklen_t l = sizeof(t);
	if (getsockopt(fd, SOL_RDS_LEVEL, SO_RDS_TRANSPORT, &t, &l) != 0)
		return -2;
	return t;
}

static void set_timeo(int fd, int opt, int ms)
{
	struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };
	if (ms <= 0)
		tv.tv_usec = 1000; /* 0 would mean "forever" */
	setsockopt(fd, SOL_SOCKET, opt, &tv, sizeof(tv));
}

/* ------------------------------------------------------------------------ */
/* RDS_INFO getsockopt with the ENOSPC size-probe protocol                   */

struct info {
	unsigned char *buf;
	size_t len;  /* total bytes */
	size_t each; /* element size, from the return value */
	size_t n;    /* number of elements */
};

/* returns 0 or -errno */
static int rds_info_get(int fd, int opt, struct info *out)
{
	memset(out, 0, sizeof(*out));
	socklen_t len = 0;
	unsigned char *buf = NULL;
	for (int attempt = 0; attempt < 16; attempt++) {
		int r = getsockopt(fd, SOL_RDS_LEVEL, opt, buf, &len);
		if (r >= 0) {
			out->buf = buf;
			out->len = len;
			out->each = (size_t)r;
			out->n = r > 0 ? len / (size_t)r : 0;
			return 0;
		}
		if (errno != ENOSPC) {
			int e = errno;
			free(buf);
			return -e;
		}
		/* len now holds the needed size; leave room for growth */
		len += 4096;
		unsigned char *nb = realloc(buf, len);
		if (!nb)
			die(2, "out of memory");
		buf = nb;
	}
	free(buf);
	return -ENOSPC;
}

static uint64_t rd_u64(const unsigned char *p) { uint64_t v; memcpy(&v, p, 8); return v; }
static uint32_t rd_u32(const unsigned char *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static uint16_t rd_be16(const unsigned char *p) { return (uint16_t)(p[0] << 8 | p[1]); }
static const char *rd_ip(const unsigned char *p, char *buf)
{
	inet_ntop(AF_INET, p, buf, INET_ADDRSTRLEN);
	return buf;
}

/* ------------------------------------------------------------------------ */
/* SHA-256 (FIPS 180-4), written for this tool                               */

struct sha256 {
	uint32_t h[8];
	uint64_t total;
	unsigned char block[64];
	size_t fill;
};

static const uint32_t sha_k[64] = {
	0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
	0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
	0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
	0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
	0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
	0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
	0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
	0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

static uint32_t ror32(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

static void sha256_init(struct sha256 *s)
{
	static const uint32_t iv[8] = { 0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
					0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19 };
	memcpy(s->h, iv, sizeof(iv));
	s->total = 0;
	s->fill = 0;
}

static void sha256_block(struct sha256 *s, const unsigned char *p)
{
	uint32_t w[64];
	for (int i = 0; i < 16; i++)
		w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 |
		       (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
	for (int i = 16; i < 64; i++) {
		uint32_t s0 = ror32(w[i - 15], 7) ^ ror32(w[i - 15], 18) ^ (w[i - 15] >> 3);
		uint32_t s1 = ror32(w[i - 2], 17) ^ ror32(w[i - 2], 19) ^ (w[i - 2] >> 10);
		w[i] = w[i - 16] + s0 + w[i - 7] + s1;
	}
	uint32_t a = s->h[0], b = s->h[1], c = s->h[2], d = s->h[3];
	uint32_t e = s->h[4], f = s->h[5], g = s->h[6], h = s->h[7];
	for (int i = 0; i < 64; i++) {
		uint32_t S1 = ror32(e, 6) ^ ror32(e, 11) ^ ror32(e, 25);
		uint32_t ch = (e & f) ^ (~e & g);
		uint32_t t1 = h + S1 + ch + sha_k[i] + w[i];
		uint32_t S0 = ror32(a, 2) ^ ror32(a, 13) ^ ror32(a, 22);
		uint32_t maj = (a & b) ^ (a & c) ^ (b & c);
		uint32_t t2 = S0 + maj;
		h = g; g = f; f = e; e = d + t1;
		d = c; c = b; b = a; a = t1 + t2;
	}
	s->h[0] += a; s->h[1] += b; s->h[2] += c; s->h[3] += d;
	s->h[4] += e; s->h[5] += f; s->h[6] += g; s->h[7] += h;
}

static void sha256_update(struct sha256 *s, const void *data, size_t len)
{
	const unsigned char *p = data;
	s->total += len;
	while (len) {
		size_t take = 64 - s->fill;
		if (take > len)
			take = len;
		memcpy(s->block + s->fill, p, take);
		s->fill += take;
		p += take;
		len -= take;
		if (s->fill == 64) {
			sha256_block(s, s->block);
			s->fill = 0;
		}
	}
}

/* writes 32 bytes; does not modify *s (works on a copy) */
static void sha256_final(const struct sha256 *in, unsigned char out[32])
{
	struct sha256 s = *in;
	uint64_t bits = s.total * 8;
	unsigned char pad = 0x80;
	sha256_update(&s, &pad, 1);
	pad = 0;
	while (s.fill != 56)
		sha256_update(&s, &pad, 1);
	unsigned char lenb[8];
	for (int i = 0; i < 8; i++)
		lenb[i] = (unsigned char)(bits >> (56 - 8 * i));
	sha256_update(&s, lenb, 8);
	for (int i = 0; i < 8; i++) {
		out[4 * i] = (unsigned char)(s.h[i] >> 24);
		out[4 * i + 1] = (unsigned char)(s.h[i] >> 16);
		out[4 * i + 2] = (unsigned char)(s.h[i] >> 8);
		out[4 * i + 3] = (unsigned char)s.h[i];
	}
}

static void hex_of(const unsigned char *d, size_t n, char *out)
{
	static const char hx[] = "0123456789abcdef";
	for (size_t i = 0; i < n; i++) {
		out[2 * i] = hx[d[i] >> 4];
		out[2 * i + 1] = hx[d[i] & 15];
	}
	out[2 * n] = 0;
}

static void sha256_hex(const struct sha256 *s, char out[65])
{
	unsigned char d[32];
	sha256_final(s, d);
	hex_of(d, 32, out);
}

/* ------------------------------------------------------------------------ */
/* deterministic payload pattern (documented in README.md)                   */

static uint64_t mix64(uint64_t z)
{
	z ^= z >> 30;
	z *= 0xbf58476d1ce4e5b9ull;
	z ^= z >> 27;
	z *= 0x94d049bb133111ebull;
	z ^= z >> 31;
	return z;
}

/*
 * Payload of message `idx` (per source socket, counting from 0) with `size`
 * bytes: the first `size` bytes of
 *   [0..8)  idx as u64 little endian
 *   [8..12) size as u32 little endian
 *   [12..16) "RDSt"
 *   [16..)  for chunk c = (i-16)/8: the 8 bytes (little endian) of
 *           mix64(idx * 0x9E3779B97F4A7C15 + size * 0xD1B54A32D192ED03 + c)
 */
static void fill_payload(unsigned char *buf, uint64_t idx, uint32_t size)
{
	unsigned char hdr[16];
	for (int i = 0; i < 8; i++)
		hdr[i] = (unsigned char)(idx >> (8 * i));
	for (int i = 0; i < 4; i++)
		hdr[8 + i] = (unsigned char)(size >> (8 * i));
	memcpy(hdr + 12, "RDSt", 4);
	memcpy(buf, hdr, size < 16 ? size : 16);
	uint64_t base = idx * 0x9E3779B97F4A7C15ull + (uint64_t)size * 0xD1B54A32D192ED03ull;
	for (uint32_t i = 16, c = 0; i < size; i += 8, c++) {
		uint64_t w = mix64(base + c);
		uint32_t n = size - i < 8 ? size - i : 8;
		for (uint32_t k = 0; k < n; k++)
			buf[i + k] = (unsigned char)(w >> (8 * k));
	}
}

/* size schedule: fixed, list (cycled by global message number) or range */
struct sizes {
	uint32_t list[64];
	int nlist;
	uint32_t lo, hi; /* range mode if nlist == 0 */
};

static void parse_sizes(struct sizes *s, const char *arg)
{
	memset(s, 0, sizeof(*s));
	char buf[1024];
	if (strlen(arg) >= sizeof(buf))
		die(2, "size list too long");
	strcpy(buf, arg);
	char *colon = strchr(buf, ':');
	if (colon) {
		*colon = 0;
		s->lo = (uint32_t)parse_u64(buf, "size range");
		s->hi = (uint32_t)parse_u64(colon + 1, "size range");
		if (s->lo > s->hi)
			die(2, "bad size range '%s'", arg);
		return;
	}
	char *save = NULL;
	for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		if (s->nlist == 64)
			die(2, "at most 64 sizes");
		uint64_t v = parse_u64(tok, "size");
		if (v > 16 * 1024 * 1024)
			die(2, "size %" PRIu64 " too large", v);
		s->list[s->nlist++] = (uint32_t)v;
	}
	if (!s->nlist)
		die(2, "empty size list");
}

static uint32_t size_of(const struct sizes *s, uint64_t n)
{
	if (s->nlist)
		return s->list[n % (uint64_t)s->nlist];
	if (s->lo == s->hi)
		return s->lo;
	return s->lo + (uint32_t)(mix64(n ^ 0x5eedull) % ((uint64_t)(s->hi - s->lo) + 1));
}

static uint32_t max_size(const struct sizes *s)
{
	if (!s->nlist)
		return s->hi;
	uint32_t m = 0;
	for (int i = 0; i < s->nlist; i++)
		if (s->list[i] > m)
			m = s->list[i];
	return m;
}

/* ------------------------------------------------------------------------ */
/* waiting for a socket's messages to leave the kernel send/retransmit queues */

/* count messages in SEND and RETRANS queues with local (addr, port) in ports[] */
static long queued_for(int infofd, const struct sockaddr_in *ports, int nports, int retrans_too)
{
	long count = 0;
	int opts[2] = { RDS_INFO_SEND_MESSAGES, RDS_INFO_RETRANS_MESSAGES };
	for (int o = 0; o < (retrans_too ? 2 : 1); o++) {
		struct info in;
		int r = rds_info_get(infofd, opts[o], &in);
		if (r < 0)
			return -1;
		for (size_t i = 0; i < in.n; i++) {
			const unsigned char *e = in.buf + i * in.each;
			if (in.each < 24)
				break;
			/*
			 * Kernels up to at least 6.1 report laddr/faddr 0.0.0.0 here: the IPv4
			 * variant copies the first 32 bits of the v4-mapped in6_addr. So an
			 * all-zero laddr matches any of our addresses; the port must match.
			 */
			uint32_t zero = 0;
			for (int k = 0; k < nports; k++) {
				if ((memcmp(e + 12, &ports[k].sin_addr, 4) == 0 || memcmp(e + 12, &zero, 4) == 0) &&
				    memcmp(e + 20, &ports[k].sin_port, 2) == 0) {
					count++;
					break;
				}
			}
		}
		free(in.buf);
	}
	return count;
}

/* selftest-peer on IB: how long to keep the socket open for unacknowledged messages */
#define IB_LINGER_MS 15000

/* returns 0 when drained, -1 on deadline */
/*
 * Closing an RDS socket drops its messages that are still queued (rds_send_drop_to).
 * Messages already handed to the transport (on the retransmit list) are on their way. On TCP
 * we also wait for the retransmit list to empty (TCP acknowledged the bytes), which the
 * selftest barriers rely on. On IB the retransmit list only empties when the peer happens to
 * send an RDS ACK (requested roughly every 9th message), so only the send queue counts there.
 * `transport` is the socket's SO_RDS_TRANSPORT value.
 */
static int drain_wait(const struct sockaddr_in *ports, int nports, int transport, uint64_t deadline,
		      double *ms)
{
	int retrans_too = transport == RDS_TRANS_TCP;
	uint64_t t0 = now_ns();
	int infofd = rds_socket_raw();
	int rc = -1;
	for (int iter = 0; iter < 1000000; iter++) {
		long q = queued_for(infofd, ports, nports, retrans_too);
		if (q == 0) {
			rc = 0;
			break;
		}
		if (q < 0) {
			note("rdstool: cannot read RDS_INFO send queues; waiting 200 ms instead\n");
			sleep_ms(200);
			rc = 0;
			break;
		}
		if (now_ns() >= deadline)
			break;
		sleep_ms(5);
	}
	close(infofd);
	*ms = elapsed_ms(t0);
	return rc;
}

/* ------------------------------------------------------------------------ */
/* send                                                                       */

static ssize_t recv_one(int fd, unsigned char *buf, size_t cap, struct sockaddr_in *from, int *trunc);

static void usage_send(void)
{
	puts("rdstool send -b ADDR:PORT -d ADDR:PORT [-n COUNT] [-s SIZES] [-t tcp|ib|auto]\n"
	     "             [--nonblock] [--sockets K] [--sndbuf BYTES] [--timeout SEC] [--no-drain]\n"
	     "             [--linger-ms MS] [--text STRING] [--wait-go]\n"
	     "  SIZES: N | N1,N2,... (cycled) | MIN:MAX (deterministic pseudo-random); k/m suffixes\n"
	     "  --sockets K binds ports PORT..PORT+K-1 and sends round robin; message i uses\n"
	     "  socket i%K and carries per-socket index i/K. Before closing (which makes the kernel\n"
	     "  drop unsent messages) it waits until its messages have left the kernel's send and\n"
	     "  retransmit queues (RDS_INFO_SEND/RETRANS_MESSAGES), unless --no-drain; then it\n"
	     "  keeps the sockets open --linger-ms longer. --text sends STRING as every message\n"
	     "  instead of the pattern. --wait-go: after binding, prints 'send: waiting for go',\n"
	     "  waits for any message on the (first) socket (see recv --go) and only then starts\n"
	     "  (elapsed_ms counts from there).");
}

static int cmd_send(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "bind", 1, 0, 'b' }, { "dst", 1, 0, 'd' }, { "count", 1, 0, 'n' },
		{ "size", 1, 0, 's' }, { "sizes", 1, 0, 's' }, { "transport", 1, 0, 't' },
		{ "nonblock", 0, 0, 'N' }, { "sockets", 1, 0, 'K' }, { "sndbuf", 1, 0, 'S' },
		{ "timeout", 1, 0, 'T' }, { "no-drain", 0, 0, 'D' }, { "quiet", 0, 0, 'q' },
		{ "linger-ms", 1, 0, 'L' }, { "text", 1, 0, 'X' }, { "help", 0, 0, 'h' },
		{ "wait-go", 0, 0, 'G' }, { 0, 0, 0, 0 } };
	struct sockaddr_in bindaddr, dst;
	int have_bind = 0, have_dst = 0, nsock = 1, drain = 1, wait_go = 0, c;
	uint64_t count = 1, timeout_s = 60, linger_ms = 0;
	const char *text = NULL;
	struct sizes sz;
	struct sockopts so = { RDS_TRANS_TCP, 0, 0, 0 };
	parse_sizes(&sz, "64");
	while ((c = getopt_long(argc, argv, "b:d:n:s:t:qh", lo, NULL)) != -1) {
		switch (c) {
		case 'b': parse_sin(optarg, &bindaddr, 1, "--bind"); have_bind = 1; break;
		case 'd': parse_sin(optarg, &dst, 1, "--dst"); have_dst = 1; break;
		case 'n': count = parse_u64(optarg, "--count"); break;
		case 's': parse_sizes(&sz, optarg); break;
		case 't': so.transport = parse_transport(optarg); break;
		case 'N': so.nonblock = 1; break;
		case 'K': nsock = (int)parse_u64(optarg, "--sockets"); break;
		case 'S': so.sndbuf = parse_u64(optarg, "--sndbuf"); break;
		case 'T': timeout_s = parse_u64(optarg, "--timeout"); break;
		case 'D': drain = 0; break;
		case 'L': linger_ms = parse_u64(optarg, "--linger-ms"); break;
		case 'X': text = optarg; break;
		case 'G': wait_go = 1; break;
		case 'q': g_quiet = 1; break;
		case 'h': usage_send(); return 0;
		default: usage_send(); return 2;
		}
	}
	if (!have_bind || !have_dst)
		die(2, "--bind and --dst are required");
	if (nsock < 1 || nsock > 256)
		die(2, "--sockets must be 1..256");
	if (ntohs(bindaddr.sin_port) + nsock - 1 > 65535)
		die(2, "port range overflows");
	if (text) {
		/* fixed content instead of the pattern */
		sz.nlist = 1;
		sz.list[0] = (uint32_t)strlen(text);
	}
	uint32_t maxsz = max_size(&sz);
	if (!so.sndbuf) {
		so.sndbuf = 256 * 1024;
		if (so.sndbuf < 2ull * maxsz + 65536)
			so.sndbuf = 2ull * maxsz + 65536;
	}
	arm_watchdog((unsigned)(timeout_s + linger_ms / 1000 + 15));
	uint64_t t0 = now_ns(), deadline = t0 + timeout_s * 1000000000ull;

	int fds[256];
	struct sockaddr_in ports[256];
	for (int k = 0; k < nsock; k++) {
		ports[k] = bindaddr;
		ports[k].sin_port = htons((uint16_t)(ntohs(bindaddr.sin_port) + k));
		fds[k] = rds_socket(&ports[k], &so);
	}
	if (wait_go) {
		/* external start signal: any message on the first socket (recv --go) */
		char gb[64];
		printf("send: waiting for go on %s\n", sin_str(&ports[0], gb, sizeof(gb)));
		fflush(stdout);
		for (;;) {
			int left = ms_left(deadline, 1 << 30);
			if (left <= 0) {
				printf("send: FAIL sent=0 reason=no go message before the time limit\n");
				return 1;
			}
			set_timeo(fds[0], SO_RCVTIMEO, left < 500 ? left : 500);
			struct sockaddr_in gfrom;
			int gtrunc;
			unsigned char g[64];
			if (recv_one(fds[0], g, sizeof(g), &gfrom, &gtrunc) >= 0)
				break;
			if (errno != EAGAIN && errno != ETIMEDOUT && errno != EINTR)
				die(2, "recvmsg (waiting for go): %s", strerror(errno));
		}
		t0 = now_ns();
	}
	unsigned char *buf = malloc(maxsz ? maxsz : 1);
	if (!buf)
		die(2, "out of memory");
	uint64_t sent = 0, bytes = 0, eagain = 0, enobufs = 0;
	int failed = 0;
	const char *why = "";
	char b1[64], b2[64];
	while (sent < count) {
		int k = (int)(sent % (uint64_t)nsock);
		uint64_t idx = sent / (uint64_t)nsock;
		uint32_t size = size_of(&sz, sent);
		if (text)
			memcpy(buf, text, size);
		else
			fill_payload(buf, idx, size);
		int done = 0;
		for (int attempt = 0; !done; attempt++) {
			if (now_ns() >= deadline) {
				failed = 1;
				why = "time limit reached";
				break;
			}
			if (!so.nonblock)
				set_timeo(fds[k], SO_SNDTIMEO, ms_left(deadline, 1 << 30));
			ssize_t r = sendto(fds[k], buf, size, 0, (struct sockaddr *)&dst, sizeof(dst));
			if (r == (ssize_t)size) {
				done = 1;
				break;
			}
			if (r >= 0) {
				failed = 1;
				why = "short send";
				break;
			}
			int e = errno;
			if (e == EINTR)
				continue;
			if (so.nonblock && e == EAGAIN) {
				eagain++;
				struct pollfd p = { fds[k], POLLOUT, 0 };
				poll(&p, 1, ms_left(deadline, 100));
				continue;
			}
			if (so.nonblock && e == ENOBUFS) {
				enobufs++;
				sleep_ms(attempt < 4 ? 1u << attempt : 16);
				continue;
			}
			if (!so.nonblock && (e == EAGAIN || e == ETIMEDOUT)) {
				failed = 1;
				why = "time limit reached (blocking send)";
				break;
			}
			fprintf(stderr, "rdstool send: sendto(%s -> %s, %u bytes) message %" PRIu64
				": %s (%s)\n", sin_str(&ports[k], b1, sizeof(b1)),
				sin_str(&dst, b2, sizeof(b2)), size, sent, strerror(e), errname(e));
			failed = 1;
			why = errname(e);
			break;
		}
		if (!done)
			break;
		sent++;
		bytes += size;
	}
	double send_ms = elapsed_ms(t0), drain_ms = 0;
	int drained = 1;
	if (drain && sent > 0) {
		drained = drain_wait(ports, nsock, get_transport(fds[0]), deadline, &drain_ms) == 0;
		if (!drained && !failed) {
			failed = 1;
			why = "send queue not drained before the time limit";
		}
	}
	double total_ms = elapsed_ms(t0);
	printf("send: %s sent=%" PRIu64 " bytes=%" PRIu64 " eagain=%" PRIu64 " enobufs=%" PRIu64
	       " sockets=%d elapsed_ms=%.1f drain_ms=%.1f MBps=%.2f%s%s\n",
	       failed ? "FAIL" : "ok", sent, bytes, eagain, enobufs, nsock, send_ms, drain_ms,
	       total_ms > 0 ? (double)bytes / 1e3 / total_ms : 0.0, failed ? " reason=" : "",
	       failed ? why : "");
	(void)drained;
	if (linger_ms)
		sleep_ms((unsigned)(linger_ms > 600000 ? 600000 : linger_ms));
	for (int k = 0; k < nsock; k++)
		close(fds[k]);
	free(buf);
	return failed ? 1 : 0;
}

/* ------------------------------------------------------------------------ */
/* receive side helpers                                                      */

struct source {
	struct sockaddr_in addr;
	uint64_t next; /* next expected per-socket index */
	uint64_t msgs, bytes;
};

#define MAX_SOURCES 1024

struct srctab {
	struct source s[MAX_SOURCES];
	int n;
};

static struct source *src_find(struct srctab *t, const struct sockaddr_in *a)
{
	for (int i = 0; i < t->n; i++)
		if (t->s[i].addr.sin_addr.s_addr == a->sin_addr.s_addr &&
		    t->s[i].addr.sin_port == a->sin_port)
			return &t->s[i];
	if (t->n == MAX_SOURCES)
		return NULL;
	struct source *s = &t->s[t->n++];
	memset(s, 0, sizeof(*s));
	s->addr = *a;
	return s;
}

/*
 * Verify a received payload against the pattern for index `exp`.
 * Returns 0 if it matches; otherwise fills `why`.
 */
static int verify_payload(const unsigned char *data, uint32_t len, uint64_t exp, unsigned char *scratch,
			  char *why, size_t whylen)
{
	fill_payload(scratch, exp, len);
	if (memcmp(scratch, data, len) == 0)
		return 0;
	uint32_t off = 0;
	while (off < len && scratch[off] == data[off])
		off++;
	if (len >= 12) {
		uint64_t got_idx = rd_u64(data);
		uint32_t got_size = rd_u32(data + 8);
		snprintf(why, whylen,
			 "content mismatch: expected index %" PRIu64 " size %u, header says index %" PRIu64
			 " size %u, first bad byte at offset %u", exp, len, got_idx, got_size, off);
	} else {
		snprintf(why, whylen, "content mismatch: expected index %" PRIu64 " size %u, first bad "
			 "byte at offset %u", exp, len, off);
	}
	return -1;
}

static ssize_t recv_one(int fd, unsigned char *buf, size_t cap, struct sockaddr_in *from, int *trunc)
{
	struct iovec iov = { buf, cap };
	struct msghdr mh;
	memset(&mh, 0, sizeof(mh));
	memset(from, 0, sizeof(*from));
	mh.msg_name = from;
	mh.msg_namelen = sizeof(*from);
	mh.msg_iov = &iov;
	mh.msg_iovlen = 1;
	ssize_t r = recvmsg(fd, &mh, 0);
	*trunc = (r >= 0 && (mh.msg_flags & MSG_TRUNC)) ? 1 : 0;
	return r;
}

/* ------------------------------------------------------------------------ */
/* recv                                                                       */

static void usage_recv(void)
{
	puts("rdstool recv -b ADDR:PORT [-n COUNT] [-t tcp|ib|auto] [--rcvbuf BYTES]\n"
	     "             [--pause-after M --pause-ms T] [--timeout SEC] [--extra-ms T]\n"
	     "             [--no-verify] [--print] [--sources S] [--quiet] [--go ADDR:PORT]\n"
	     "  Verifies per (source addr, source port) that messages carry indexes 0,1,2,...\n"
	     "  with the pattern of `send`. --extra-ms waits T ms after COUNT and fails on any\n"
	     "  further message (duplicate detection). --sources S requires exactly S sources.\n"
	     "  --print prints 'msg SRC:PORT LEN HEX32 TEXT32' per message (first 32 bytes).\n"
	     "  --go sends a 1-byte message to ADDR:PORT right after binding (the start signal\n"
	     "  of send --wait-go) and reports go_ms=, the time from it to the last message.");
}

static int cmd_recv(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "bind", 1, 0, 'b' }, { "count", 1, 0, 'n' }, { "transport", 1, 0, 't' },
		{ "rcvbuf", 1, 0, 'R' }, { "pause-after", 1, 0, 'P' }, { "pause-ms", 1, 0, 'M' },
		{ "timeout", 1, 0, 'T' }, { "extra-ms", 1, 0, 'X' }, { "no-verify", 0, 0, 'V' },
		{ "sources", 1, 0, 'S' }, { "quiet", 0, 0, 'q' }, { "help", 0, 0, 'h' },
		{ "print", 0, 0, 'p' }, { "go", 1, 0, 'g' }, { 0, 0, 0, 0 } };
	struct sockaddr_in bindaddr, goaddr;
	int have_bind = 0, verify = 1, print = 0, have_go = 0, c;
	uint64_t count = 1, timeout_s = 60, pause_after = 0, pause_ms = 0, extra_ms = 0;
	long want_sources = -1;
	struct sockopts so = { RDS_TRANS_TCP, 0, 0, 0 };
	while ((c = getopt_long(argc, argv, "b:n:t:qh", lo, NULL)) != -1) {
		switch (c) {
		case 'b': parse_sin(optarg, &bindaddr, 1, "--bind"); have_bind = 1; break;
		case 'n': count = parse_u64(optarg, "--count"); break;
		case 't': so.transport = parse_transport(optarg); break;
		case 'R': so.rcvbuf = parse_u64(optarg, "--rcvbuf"); break;
		case 'P': pause_after = parse_u64(optarg, "--pause-after"); break;
		case 'M': pause_ms = parse_u64(optarg, "--pause-ms"); break;
		case 'T': timeout_s = parse_u64(optarg, "--timeout"); break;
		case 'X': extra_ms = parse_u64(optarg, "--extra-ms"); break;
		case 'V': verify = 0; break;
		case 'p': print = 1; break;
		case 'g': parse_sin(optarg, &goaddr, 1, "--go"); have_go = 1; break;
		case 'S': want_sources = (long)parse_u64(optarg, "--sources"); break;
		case 'q': g_quiet = 1; break;
		case 'h': usage_recv(); return 0;
		default: usage_recv(); return 2;
		}
	}
	if (!have_bind)
		die(2, "--bind is required");
	arm_watchdog((unsigned)(timeout_s + extra_ms / 1000 + 15));
	int fd = rds_socket(&bindaddr, &so);
	/* readiness marker for scripts that start the receiver in the background */
	{
		char bb[64];
		printf("recv: bound %s transport=%s\n", sin_str(&bindaddr, bb, sizeof(bb)),
		       transport_name(get_transport(fd)));
	}
	fflush(stdout);

	uint64_t t0 = now_ns(), deadline = t0 + timeout_s * 1000000000ull;
	uint64_t t_first = 0, t_go = 0;
	if (have_go) {
		t_go = now_ns();
		if (sendto(fd, "g", 1, 0, (struct sockaddr *)&goaddr, sizeof(goaddr)) != 1)
			die(2, "sendto (--go): %s", strerror(errno));
	}
	size_t cap = MAX_MSG + 1;
	unsigned char *buf = malloc(cap), *scratch = malloc(cap);
	struct srctab *tab = calloc(1, sizeof(*tab));
	if (!buf || !scratch || !tab)
		die(2, "out of memory");
	uint64_t got = 0, bytes = 0, errors = 0, extra = 0;
	char first_err[512] = "";
	int paused = 0, timed_out = 0;
	char b[64];
	while (got < count) {
		if (pause_after && !paused && got >= pause_after) {
			paused = 1;
			note("recv: pausing %" PRIu64 " ms after %" PRIu64 " messages\n", pause_ms, got);
			sleep_ms((unsigned)pause_ms);
		}
		int left = ms_left(deadline, 1 << 30);
		if (left <= 0) {
			timed_out = 1;
			break;
		}
		set_timeo(fd, SO_RCVTIMEO, left < 500 ? left : 500);
		struct sockaddr_in from;
		int trunc;
		ssize_t r = recv_one(fd, buf, cap, &from, &trunc);
		if (r < 0) {
			if (errno == EAGAIN || errno == ETIMEDOUT || errno == EINTR)
				continue;
			die(2, "recvmsg: %s", strerror(errno));
		}
		if (!t_first)
			t_first = now_ns();
		if (print) {
			/* msg SRC LEN FIRST-BYTES-HEX PRINTABLE-PREFIX */
			char hx[2 * 32 + 1], txt[33];
			size_t n = (size_t)r < 32 ? (size_t)r : 32;
			hex_of(buf, n, hx);
			for (size_t i = 0; i < n; i++)
				txt[i] = buf[i] >= 32 && buf[i] < 127 ? (char)buf[i] : '.';
			txt[n] = 0;
			printf("msg %s %zd %s %s\n", sin_str(&from, b, sizeof(b)), r, n ? hx : "-", n ? txt : "-");
		}
		got++;
		bytes += (uint64_t)r;
		struct source *s = src_find(tab, &from);
		if (!s)
			die(2, "too many sources");
		char why[400] = "";
		int bad = 0;
		if (trunc) {
			snprintf(why, sizeof(why), "message truncated (more than %zu bytes)", cap);
			bad = 1;
		} else if (verify && verify_payload(buf, (uint32_t)r, s->next, scratch, why, sizeof(why))) {
			bad = 1;
		}
		if (bad) {
			errors++;
			if (!first_err[0])
				snprintf(first_err, sizeof(first_err), "from %s message #%" PRIu64 ": %s",
					 sin_str(&from, b, sizeof(b)), s->msgs, why);
			/* resynchronise on the index in the header when there is one */
			if (r >= 8)
				s->next = rd_u64(buf);
		}
		s->next++;
		s->msgs++;
		s->bytes += (uint64_t)r;
	}
	double ms = elapsed_ms(t0);
	double data_ms = t_first ? (double)(now_ns() - t_first) / 1e6 : 0;
	char gos[48] = "";
	if (have_go)
		snprintf(gos, sizeof(gos), " go_ms=%.3f", (double)(now_ns() - t_go) / 1e6);
	if (!timed_out && extra_ms) {
		uint64_t xdl = now_ns() + extra_ms * 1000000ull;
		for (int iter = 0; iter < 100000; iter++) {
			int left = ms_left(xdl, 1 << 30);
			if (left <= 0)
				break;
			set_timeo(fd, SO_RCVTIMEO, left);
			struct sockaddr_in from;
			int trunc;
			ssize_t r = recv_one(fd, buf, cap, &from, &trunc);
			if (r >= 0) {
				extra++;
				if (!first_err[0])
					snprintf(first_err, sizeof(first_err),
						 "unexpected extra message from %s, %zd bytes, after %" PRIu64,
						 sin_str(&from, b, sizeof(b)), r, count);
			}
		}
	}
	int fail = timed_out || errors || extra ||
		   (want_sources >= 0 && tab->n != want_sources);
	if (!first_err[0] && want_sources >= 0 && tab->n != want_sources)
		snprintf(first_err, sizeof(first_err), "expected %ld sources, saw %d", want_sources, tab->n);
	for (int i = 0; i < tab->n; i++)
		printf("source %s msgs=%" PRIu64 " bytes=%" PRIu64 "\n",
		       sin_str(&tab->s[i].addr, b, sizeof(b)), tab->s[i].msgs, tab->s[i].bytes);
	printf("recv: %s received=%" PRIu64 " bytes=%" PRIu64 " sources=%d errors=%" PRIu64
	       " extra=%" PRIu64 " elapsed_ms=%.1f MBps=%.2f data_ms=%.3f%s%s%s%s\n",
	       fail ? "FAIL" : "ok", got, bytes, tab->n, errors, extra, ms,
	       data_ms > 0 ? (double)bytes / 1e3 / data_ms : 0.0, data_ms, gos,
	       timed_out ? " reason=time-limit" : "", first_err[0] ? " first_error=" : "", first_err);
	close(fd);
	free(buf);
	free(scratch);
	free(tab);
	return fail ? 1 : 0;
}

/* ------------------------------------------------------------------------ */
/* echo                                                                       */

static void usage_echo(void)
{
	puts("rdstool echo -b ADDR:PORT [-n COUNT] [-t tcp|ib|auto] [--timeout SEC] [--sndbuf B]\n"
	     "  Sends every received message back to its source. COUNT=0 (default) echoes until\n"
	     "  the time limit and then exits 0; COUNT>0 exits 0 after COUNT echoes, 1 on timeout.");
}

static int cmd_echo(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "bind", 1, 0, 'b' }, { "count", 1, 0, 'n' }, { "transport", 1, 0, 't' },
		{ "timeout", 1, 0, 'T' }, { "sndbuf", 1, 0, 'S' }, { "rcvbuf", 1, 0, 'R' },
		{ "quiet", 0, 0, 'q' }, { "help", 0, 0, 'h' }, { 0, 0, 0, 0 } };
	struct sockaddr_in bindaddr;
	int have_bind = 0, c;
	uint64_t count = 0, timeout_s = 60;
	struct sockopts so = { RDS_TRANS_TCP, 4 * 1024 * 1024, 0, 0 };
	while ((c = getopt_long(argc, argv, "b:n:t:qh", lo, NULL)) != -1) {
		switch (c) {
		case 'b': parse_sin(optarg, &bindaddr, 1, "--bind"); have_bind = 1; break;
		case 'n': count = parse_u64(optarg, "--count"); break;
		case 't': so.transport = parse_transport(optarg); break;
		case 'T': timeout_s = parse_u64(optarg, "--timeout"); break;
		case 'S': so.sndbuf = parse_u64(optarg, "--sndbuf"); break;
		case 'R': so.rcvbuf = parse_u64(optarg, "--rcvbuf"); break;
		case 'q': g_quiet = 1; break;
		case 'h': usage_echo(); return 0;
		default: usage_echo(); return 2;
		}
	}
	if (!have_bind)
		die(2, "--bind is required");
	arm_watchdog((unsigned)timeout_s + 15);
	int fd = rds_socket(&bindaddr, &so);
	{
		char bb[64];
		printf("echo: bound %s transport=%s\n", sin_str(&bindaddr, bb, sizeof(bb)),
		       transport_name(get_transport(fd)));
	}
	fflush(stdout);
	uint64_t t0 = now_ns(), deadline = t0 + timeout_s * 1000000000ull;
	size_t cap = MAX_MSG + 1;
	unsigned char *buf = malloc(cap);
	if (!buf)
		die(2, "out of memory");
	uint64_t echoed = 0, bytes = 0;
	int fail = 0;
	const char *why = "";
	char b[64];
	while (count == 0 || echoed < count) {
		int left = ms_left(deadline, 1 << 30);
		if (left <= 0) {
			if (count) {
				fail = 1;
				why = "time-limit";
			}
			break;
		}
		set_timeo(fd, SO_RCVTIMEO, left < 500 ? left : 500);
		struct sockaddr_in from;
		int trunc;
		ssize_t r = recv_one(fd, buf, cap, &from, &trunc);
		if (r < 0) {
			if (errno == EAGAIN || errno == ETIMEDOUT || errno == EINTR)
				continue;
			die(2, "recvmsg: %s", strerror(errno));
		}
		set_timeo(fd, SO_SNDTIMEO, ms_left(deadline, 1 << 30));
		ssize_t w = sendto(fd, buf, (size_t)r, 0, (struct sockaddr *)&from, sizeof(from));
		if (w != r) {
			fprintf(stderr, "rdstool echo: sendto(%s, %zd bytes): %s\n",
				sin_str(&from, b, sizeof(b)), r, w < 0 ? strerror(errno) : "short");
			fail = 1;
			why = "send-error";
			break;
		}
		echoed++;
		bytes += (uint64_t)r;
	}
	double dms = 0;
	if (echoed && drain_wait(&bindaddr, 1, get_transport(fd), deadline + 5000000000ull, &dms) != 0 &&
	    !fail) {
		fail = 1;
		why = "not-drained";
	}
	printf("echo: %s echoed=%" PRIu64 " bytes=%" PRIu64 " elapsed_ms=%.1f%s%s\n", fail ? "FAIL" : "ok",
	       echoed, bytes, elapsed_ms(t0), fail ? " reason=" : "", why);
	close(fd);
	free(buf);
	return fail;
}

/* ------------------------------------------------------------------------ */
/* rr: request/response against `echo`, with RTT statistics                  */

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static void usage_rr(void)
{
	puts("rdstool rr -b ADDR:PORT -d ADDR:PORT [-n ROUNDS] [-s SIZES] [-t tcp|ib|auto]\n"
	     "           [--timeout SEC] [--wait-ms MS]\n"
	     "  Sends a patterned request, waits for the identical reply (from `echo`), verifies\n"
	     "  it and records the round-trip time. Exits 0 iff every round succeeded.");
}

static int cmd_rr(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "bind", 1, 0, 'b' }, { "dst", 1, 0, 'd' }, { "count", 1, 0, 'n' },
		{ "size", 1, 0, 's' }, { "sizes", 1, 0, 's' }, { "transport", 1, 0, 't' },
		{ "timeout", 1, 0, 'T' }, { "wait-ms", 1, 0, 'W' }, { "quiet", 0, 0, 'q' },
		{ "help", 0, 0, 'h' }, { 0, 0, 0, 0 } };
	struct sockaddr_in bindaddr, dst;
	int have_bind = 0, have_dst = 0, c;
	uint64_t rounds = 10, timeout_s = 60, wait_ms = 5000;
	struct sizes sz;
	struct sockopts so = { RDS_TRANS_TCP, 0, 0, 0 };
	parse_sizes(&sz, "64");
	while ((c = getopt_long(argc, argv, "b:d:n:s:t:qh", lo, NULL)) != -1) {
		switch (c) {
		case 'b': parse_sin(optarg, &bindaddr, 1, "--bind"); have_bind = 1; break;
		case 'd': parse_sin(optarg, &dst, 1, "--dst"); have_dst = 1; break;
		case 'n': rounds = parse_u64(optarg, "--count"); break;
		case 's': parse_sizes(&sz, optarg); break;
		case 't': so.transport = parse_transport(optarg); break;
		case 'T': timeout_s = parse_u64(optarg, "--timeout"); break;
		case 'W': wait_ms = parse_u64(optarg, "--wait-ms"); break;
		case 'q': g_quiet = 1; break;
		case 'h': usage_rr(); return 0;
		default: usage_rr(); return 2;
		}
	}
	if (!have_bind || !have_dst)
		die(2, "--bind and --dst are required");
	if (rounds == 0 || rounds > 10000000)
		die(2, "bad --count");
	uint32_t maxsz = max_size(&sz);
	so.sndbuf = 2ull * maxsz + 65536 > 256 * 1024 ? 2ull * maxsz + 65536 : 256 * 1024;
	arm_watchdog((unsigned)timeout_s + 15);
	int fd = rds_socket(&bindaddr, &so);
	uint64_t t0 = now_ns(), deadline = t0 + timeout_s * 1000000000ull;
	size_t cap = MAX_MSG + 1;
	unsigned char *req = malloc(cap), *rsp = malloc(cap);
	uint64_t *rtt = calloc(rounds, sizeof(uint64_t));
	if (!req || !rsp || !rtt)
		die(2, "out of memory");
	uint64_t ok = 0;
	int fail = 0;
	char why[300] = "";
	char b[64];
	for (uint64_t i = 0; i < rounds && !fail; i++) {
		uint32_t size = size_of(&sz, i);
		fill_payload(req, i, size);
		uint64_t ts = now_ns();
		set_timeo(fd, SO_SNDTIMEO, ms_left(deadline, 1 << 30));
		ssize_t w = sendto(fd, req, size, 0, (struct sockaddr *)&dst, sizeof(dst));
		if (w != (ssize_t)size) {
			snprintf(why, sizeof(why), "round %" PRIu64 ": sendto: %s", i,
				 w < 0 ? strerror(errno) : "short");
			fail = 1;
			break;
		}
		uint64_t rdl = ts + wait_ms * 1000000ull;
		if (rdl > deadline)
			rdl = deadline;
		for (;;) {
			int left = ms_left(rdl, 1 << 30);
			if (left <= 0) {
				snprintf(why, sizeof(why), "round %" PRIu64 ": no reply within %" PRIu64 " ms",
					 i, wait_ms);
				fail = 1;
				break;
			}
			set_timeo(fd, SO_RCVTIMEO, left);
			struct sockaddr_in from;
			int trunc;
			ssize_t r = recv_one(fd, rsp, cap, &from, &trunc);
			if (r < 0) {
				if (errno == EAGAIN || errno == ETIMEDOUT || errno == EINTR)
					continue;
				die(2, "recvmsg: %s", strerror(errno));
			}
			if (from.sin_addr.s_addr != dst.sin_addr.s_addr || from.sin_port != dst.sin_port) {
				note("rr: ignoring message from %s\n", sin_str(&from, b, sizeof(b)));
				continue;
			}
			if ((uint32_t)r != size || trunc || memcmp(req, rsp, size) != 0) {
				snprintf(why, sizeof(why), "round %" PRIu64 ": reply differs (%zd bytes, expected %u)",
					 i, r, size);
				fail = 1;
				break;
			}
			rtt[ok++] = now_ns() - ts;
			break;
		}
	}
	uint64_t sum = 0;
	for (uint64_t i = 0; i < ok; i++)
		sum += rtt[i];
	qsort(rtt, ok, sizeof(uint64_t), cmp_u64);
	printf("rr: %s rounds=%" PRIu64 " ok=%" PRIu64 " avg_us=%.1f min_us=%.1f p50_us=%.1f p99_us=%.1f "
	       "max_us=%.1f elapsed_ms=%.1f%s%s\n",
	       fail ? "FAIL" : "ok", rounds, ok, ok ? (double)sum / (double)ok / 1e3 : 0.0,
	       ok ? (double)rtt[0] / 1e3 : 0.0, ok ? (double)rtt[ok / 2] / 1e3 : 0.0,
	       ok ? (double)rtt[(ok * 99) / 100 < ok ? (ok * 99) / 100 : ok - 1] / 1e3 : 0.0,
	       ok ? (double)rtt[ok - 1] / 1e3 : 0.0, elapsed_ms(t0), fail ? " reason=" : "", why);
	close(fd);
	free(req);
	free(rsp);
	free(rtt);
	return fail;
}

/* ------------------------------------------------------------------------ */
/* ping: zero-length message to port 0, the kernel answers with a pong       */

static void usage_ping(void)
{
	puts("rdstool ping -b ADDR -d ADDR [-c COUNT] [-i INTERVAL_MS] [-W WAIT_MS] [-t tcp|ib|auto]\n"
	     "  Binds ADDR to a kernel-chosen port, sends zero-length messages to ADDR:0 and waits\n"
	     "  for the zero-length pong from port 0. Exits 0 iff every pong arrived.");
}

static int cmd_ping(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "bind", 1, 0, 'b' }, { "dst", 1, 0, 'd' }, { "count", 1, 0, 'c' },
		{ "interval", 1, 0, 'i' }, { "wait", 1, 0, 'W' }, { "transport", 1, 0, 't' },
		{ "quiet", 0, 0, 'q' }, { "help", 0, 0, 'h' }, { 0, 0, 0, 0 } };
	struct sockaddr_in bindaddr, dst;
	int have_bind = 0, have_dst = 0, c;
	uint64_t count = 5, interval = 100, wait_ms = 3000;
	struct sockopts so = { RDS_TRANS_TCP, 0, 0, 0 };
	while ((c = getopt_long(argc, argv, "b:d:c:n:i:W:t:qh", lo, NULL)) != -1) {
		switch (c) {
		case 'b': parse_sin(optarg, &bindaddr, 0, "--bind"); have_bind = 1; break;
		case 'd': parse_sin(optarg, &dst, 0, "--dst"); have_dst = 1; break;
		case 'c': case 'n': count = parse_u64(optarg, "--count"); break;
		case 'i': interval = parse_u64(optarg, "--interval"); break;
		case 'W': wait_ms = parse_u64(optarg, "--wait"); break;
		case 't': so.transport = parse_transport(optarg); break;
		case 'q': g_quiet = 1; break;
		case 'h': usage_ping(); return 0;
		default: usage_ping(); return 2;
		}
	}
	if (!have_bind || !have_dst)
		die(2, "--bind and --dst are required");
	if (count == 0 || count > 100000)
		die(2, "bad --count");
	bindaddr.sin_port = 0;
	dst.sin_port = 0;
	arm_watchdog((unsigned)((count * (interval + wait_ms)) / 1000 + 20));
	int fd = rds_socket(&bindaddr, &so);
	struct sockaddr_in me;
	socklen_t ml = sizeof(me);
	getsockname(fd, (struct sockaddr *)&me, &ml);
	char b[64];
	printf("ping: from %s to %s port 0\n", sin_str(&me, b, sizeof(b)), inet_ntoa(dst.sin_addr));
	uint64_t replies = 0;
	double mn = 1e18, mx = 0, sum = 0;
	unsigned char buf[2048];
	for (uint64_t i = 0; i < count; i++) {
		if (i)
			sleep_ms((unsigned)interval);
		uint64_t ts = now_ns(), dl = ts + wait_ms * 1000000ull;
		set_timeo(fd, SO_SNDTIMEO, (int)wait_ms);
		if (sendto(fd, buf, 0, 0, (struct sockaddr *)&dst, sizeof(dst)) != 0) {
			printf("seq=%" PRIu64 " send-error=%s\n", i, errname(errno));
			continue;
		}
		int got = 0;
		for (int iter = 0; iter < 100000; iter++) {
			int left = ms_left(dl, 1 << 30);
			if (left <= 0)
				break;
			set_timeo(fd, SO_RCVTIMEO, left);
			struct sockaddr_in from;
			int trunc;
			ssize_t r = recv_one(fd, buf, sizeof(buf), &from, &trunc);
			if (r < 0)
				continue;
			if (r == 0 && from.sin_port == 0 && from.sin_addr.s_addr == dst.sin_addr.s_addr) {
				got = 1;
				break;
			}
			note("ping: ignoring %zd bytes from %s\n", r, sin_str(&from, b, sizeof(b)));
		}
		if (got) {
			double us = (double)(now_ns() - ts) / 1e3;
			replies++;
			sum += us;
			mn = us < mn ? us : mn;
			mx = us > mx ? us : mx;
			printf("seq=%" PRIu64 " rtt_us=%.1f\n", i, us);
		} else {
			printf("seq=%" PRIu64 " timeout\n", i);
		}
		fflush(stdout);
	}
	printf("ping: %s sent=%" PRIu64 " received=%" PRIu64 " min_us=%.1f avg_us=%.1f max_us=%.1f\n",
	       replies == count ? "ok" : "FAIL", count, replies, replies ? mn : 0.0,
	       replies ? sum / (double)replies : 0.0, mx);
	close(fd);
	return replies == count ? 0 : 1;
}

/* ------------------------------------------------------------------------ */
/* info                                                                       */

static void usage_info(void)
{
	puts("rdstool info [counters|conns|tcp|sockets|sendq|retransq|recvq|ib|all]...\n"
	     "rdstool info counter NAME      print one counter's value\n"
	     "rdstool info raw OPTNAME       probe any RDS_INFO optname: 'raw OPT each=E len=L n=N'\n"
	     "Line formats (one record per line, space separated):\n"
	     "  counters: NAME VALUE\n"
	     "  conns:    LADDR FADDR NEXT_TX NEXT_RX TRANSPORT FLAGS TOS   (FLAGS hex: 1 sending,\n"
	     "            2 connecting, 4 connected)\n"
	     "  tcp:      LADDR:LPORT FADDR:FPORT HDR_REM DATA_REM SENT_NXT EXPECTED_UNA SEEN_UNA\n"
	     "  sockets:  BOUND:PORT CONNECTED:PORT SNDBUF RCVBUF INODE\n"
	     "  sendq/retransq/recvq: LADDR:LPORT FADDR:FPORT SEQ LEN FLAGS\n"
	     "  ib:       LADDR FADDR SRC_GID DST_GID MAX_SEND_WR MAX_RECV_WR\n"
	     "`all` prints every section preceded by a '[name]' line; an unavailable section prints\n"
	     "'[name] unavailable ERRNO'.");
}

static int info_section(int fd, const char *what, int header)
{
	struct { const char *name; int opt; } map[] = {
		{ "counters", RDS_INFO_COUNTERS }, { "conns", RDS_INFO_CONNECTIONS },
		{ "tcp", RDS_INFO_TCP_SOCKETS }, { "sockets", RDS_INFO_SOCKETS },
		{ "sendq", RDS_INFO_SEND_MESSAGES }, { "retransq", RDS_INFO_RETRANS_MESSAGES },
		{ "recvq", RDS_INFO_RECV_MESSAGES }, { "ib", RDS_INFO_IB_CONNECTIONS } };
	int opt = -1;
	for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++)
		if (strcmp(map[i].name, what) == 0)
			opt = map[i].opt;
	if (opt < 0)
		die(2, "unknown info section '%s'", what);
	struct info in;
	int r = rds_info_get(fd, opt, &in);
	if (r < 0) {
		if (header) {
			printf("[%s] unavailable %s\n", what, errname(-r));
			return 0;
		}
		fprintf(stderr, "rdstool info: getsockopt(RDS_INFO %d) for %s: %s\n", opt, what, strerror(-r));
		return 1;
	}
	if (header)
		printf("[%s]\n", what);
	char a1[INET_ADDRSTRLEN], a2[INET_ADDRSTRLEN];
	for (size_t i = 0; i < in.n; i++) {
		const unsigned char *e = in.buf + i * in.each;
		unsigned char z[256];
		memset(z, 0, sizeof(z));
		memcpy(z, e, in.each < sizeof(z) ? in.each : sizeof(z));
		switch (opt) {
		case RDS_INFO_COUNTERS: {
			char name[33];
			memcpy(name, z, 32);
			name[32] = 0;
			printf("%s %" PRIu64 "\n", name, rd_u64(z + 32));
			break;
		}
		case RDS_INFO_CONNECTIONS: {
			char tn[17];
			memcpy(tn, z + 24, 16);
			tn[16] = 0;
			printf("%s %s %" PRIu64 " %" PRIu64 " %s 0x%02x %u\n", rd_ip(z + 16, a1),
			       rd_ip(z + 20, a2), rd_u64(z), rd_u64(z + 8), tn[0] ? tn : "?", z[40], z[41]);
			break;
		}
		case RDS_INFO_TCP_SOCKETS:
			printf("%s:%u %s:%u %" PRIu64 " %" PRIu64 " %u %u %u\n", rd_ip(z, a1), rd_be16(z + 4),
			       rd_ip(z + 6, a2), rd_be16(z + 10), rd_u64(z + 12), rd_u64(z + 20),
			       rd_u32(z + 28), rd_u32(z + 32), rd_u32(z + 36));
			break;
		case RDS_INFO_SOCKETS:
			printf("%s:%u %s:%u %u %u %" PRIu64 "\n", rd_ip(z + 4, a1), rd_be16(z + 12),
			       rd_ip(z + 8, a2), rd_be16(z + 14), rd_u32(z), rd_u32(z + 16), rd_u64(z + 20));
			break;
		case RDS_INFO_SEND_MESSAGES:
		case RDS_INFO_RETRANS_MESSAGES:
		case RDS_INFO_RECV_MESSAGES:
			printf("%s:%u %s:%u %" PRIu64 " %u 0x%02x\n", rd_ip(z + 12, a1), rd_be16(z + 20),
			       rd_ip(z + 16, a2), rd_be16(z + 22), rd_u64(z), rd_u32(z + 8), z[24]);
			break;
		case RDS_INFO_IB_CONNECTIONS: {
			char g1[INET6_ADDRSTRLEN], g2[INET6_ADDRSTRLEN];
			inet_ntop(AF_INET6, z + 8, g1, sizeof(g1));
			inet_ntop(AF_INET6, z + 24, g2, sizeof(g2));
			printf("%s %s %s %s %u %u\n", rd_ip(z, a1), rd_ip(z + 4, a2), g1, g2, rd_u32(z + 40),
			       rd_u32(z + 44));
			break;
		}
		}
	}
	free(in.buf);
	return 0;
}

static int cmd_info(int argc, char **argv)
{
	if (argc >= 2 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) {
		usage_info();
		return 0;
	}
	int fd = rds_socket_raw();
	int rc = 0;
	if (argc < 2) {
		rc = info_section(fd, "counters", 0);
	} else if (strcmp(argv[1], "counter") == 0) {
		if (argc != 3)
			die(2, "usage: rdstool info counter NAME");
		struct info in;
		int r = rds_info_get(fd, RDS_INFO_COUNTERS, &in);
		if (r < 0)
			die(2, "RDS_INFO_COUNTERS: %s", strerror(-r));
		rc = 1;
		for (size_t i = 0; i < in.n; i++) {
			const unsigned char *e = in.buf + i * in.each;
			if (in.each >= 40 && strncmp((const char *)e, argv[2], 32) == 0) {
				printf("%" PRIu64 "\n", rd_u64(e + 32));
				rc = 0;
				break;
			}
		}
		if (rc)
			fprintf(stderr, "rdstool info: no counter named '%s'\n", argv[2]);
		free(in.buf);
	} else if (strcmp(argv[1], "raw") == 0) {
		if (argc != 3)
			die(2, "usage: rdstool info raw OPTNAME");
		int opt = (int)parse_u64(argv[2], "optname");
		socklen_t len = 0;
		int r = getsockopt(fd, SOL_RDS_LEVEL, opt, NULL, &len);
		if (r >= 0) {
			printf("raw %d each=%d len=%u n=%u probe=ok\n", opt, r, len, r ? len / (unsigned)r : 0);
		} else if (errno != ENOSPC) {
			printf("raw %d error=%s\n", opt, errname(errno));
		} else {
			struct info in;
			r = rds_info_get(fd, opt, &in);
			if (r < 0)
				printf("raw %d error=%s\n", opt, errname(-r));
			else
				printf("raw %d each=%zu len=%zu n=%zu\n", opt, in.each, in.len, in.n);
			if (r == 0)
				free(in.buf);
		}
	} else {
		for (int i = 1; i < argc; i++) {
			if (strcmp(argv[i], "all") == 0) {
				const char *all[] = { "counters", "conns", "tcp", "sockets", "sendq",
						      "retransq", "recvq", "ib" };
				for (size_t k = 0; k < sizeof(all) / sizeof(all[0]); k++)
					rc |= info_section(fd, all[k], 1);
			} else {
				rc |= info_section(fd, argv[i], argc > 2);
			}
		}
	}
	close(fd);
	return rc ? 2 : 0;
}

/* ------------------------------------------------------------------------ */
/* wait-conn: wait until RDS_INFO_CONNECTIONS shows a connected connection   */

static int cmd_wait_conn(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "laddr", 1, 0, 'l' }, { "faddr", 1, 0, 'f' }, { "transport", 1, 0, 't' },
		{ "timeout", 1, 0, 'T' }, { "help", 0, 0, 'h' }, { 0, 0, 0, 0 } };
	struct sockaddr_in la, fa;
	int hl = 0, hf = 0, c;
	const char *tname = NULL;
	uint64_t timeout_s = 30;
	while ((c = getopt_long(argc, argv, "l:f:t:h", lo, NULL)) != -1) {
		switch (c) {
		case 'l': parse_sin(optarg, &la, 0, "--laddr"); hl = 1; break;
		case 'f': parse_sin(optarg, &fa, 0, "--faddr"); hf = 1; break;
		case 't': tname = optarg; break;
		case 'T': timeout_s = parse_u64(optarg, "--timeout"); break;
		case 'h':
			puts("rdstool wait-conn [-l LADDR] [-f FADDR] [-t TRANSPORT_NAME] [--timeout SEC]\n"
			     "  Waits until RDS_INFO_CONNECTIONS lists a CONNECTED connection matching the\n"
			     "  filters (transport names as the kernel prints them: tcp, loopback,\n"
			     "  infiniband) and prints it in `info conns` format.");
			return 0;
		default: return 2;
		}
	}
	arm_watchdog((unsigned)timeout_s + 15);
	int fd = rds_socket_raw();
	uint64_t deadline = now_ns() + timeout_s * 1000000000ull;
	char a1[INET_ADDRSTRLEN], a2[INET_ADDRSTRLEN];
	for (int iter = 0; iter < 1000000; iter++) {
		struct info in;
		if (rds_info_get(fd, RDS_INFO_CONNECTIONS, &in) == 0) {
			for (size_t i = 0; i < in.n && in.each >= 41; i++) {
				const unsigned char *e = in.buf + i * in.each;
				char tn[17];
				memcpy(tn, e + 24, 16);
				tn[16] = 0;
				if (hl && memcmp(e + 16, &la.sin_addr, 4) != 0)
					continue;
				if (hf && memcmp(e + 20, &fa.sin_addr, 4) != 0)
					continue;
				if (tname && strcmp(tn, tname) != 0)
					continue;
				if (!(e[40] & 0x04))
					continue;
				printf("%s %s %" PRIu64 " %" PRIu64 " %s 0x%02x\n", rd_ip(e + 16, a1),
				       rd_ip(e + 20, a2), rd_u64(e), rd_u64(e + 8), tn, e[40]);
				free(in.buf);
				close(fd);
				return 0;
			}
			free(in.buf);
		}
		if (now_ns() >= deadline)
			break;
		sleep_ms(20);
	}
	fprintf(stderr, "rdstool wait-conn: no matching connected connection within %" PRIu64 " s\n",
		timeout_s);
	close(fd);
	return 1;
}

/* ------------------------------------------------------------------------ */
/* bind: check what bind() does, for socket API comparisons                  */

static int cmd_bind(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "transport", 1, 0, 't' }, { "expect", 1, 0, 'e' }, { "hold-ms", 1, 0, 'H' },
		{ "help", 0, 0, 'h' }, { 0, 0, 0, 0 } };
	int c, transport = TRANSPORT_AUTO, expect = 0, have_expect = 0;
	uint64_t hold = 0;
	while ((c = getopt_long(argc, argv, "t:e:h", lo, NULL)) != -1) {
		switch (c) {
		case 't': transport = parse_transport(optarg); break;
		case 'e':
			have_expect = 1;
			expect = strcmp(optarg, "ok") == 0 ? 0 : errno_from_name(optarg);
			break;
		case 'H': hold = parse_u64(optarg, "--hold-ms"); break;
		case 'h':
			puts("rdstool bind ADDR[:PORT] [-t tcp|ib|auto] [--expect ok|ERRNO] [--hold-ms MS]\n"
			     "  Binds an RDS socket and prints 'bind: ok ADDR:PORT transport=NAME(N)' or\n"
			     "  'bind: error ERRNO'. With --expect, exits 0 iff the outcome matches.\n"
			     "  --hold-ms keeps the socket bound for MS ms before exiting.");
			return 0;
		default: return 2;
		}
	}
	if (optind != argc - 1)
		die(2, "usage: rdstool bind ADDR[:PORT] [options]");
	struct sockaddr_in a;
	parse_sin(argv[optind], &a, 0, "address");
	int fd = rds_socket_raw();
	int err = 0;
	if (transport != TRANSPORT_AUTO &&
	    setsockopt(fd, SOL_RDS_LEVEL, SO_RDS_TRANSPORT, &transport, sizeof(transport)) != 0)
		err = errno;
	if (!err && bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0)
		err = errno;
	char b[64];
	if (err) {
		printf("bind: error %s\n", errname(err));
	} else {
		struct sockaddr_in me;
		socklen_t ml = sizeof(me);
		getsockname(fd, (struct sockaddr *)&me, &ml);
		int t = get_transport(fd);
		printf("bind: ok %s transport=%s(%d)\n", sin_str(&me, b, sizeof(b)), transport_name(t), t);
		fflush(stdout);
		if (hold)
			sleep_ms((unsigned)(hold > 600000 ? 600000 : hold));
	}
	close(fd);
	if (have_expect)
		return err == expect ? 0 : 1;
	return err ? 1 : 0;
}

/* ------------------------------------------------------------------------ */
/* selftest-peer: one endpoint of the kernel selftest (test.py) traffic      */

/* message n: sender n%2, receiver 1-(n%3)%2 */
static int st_sender(uint64_t n) { return (int)(n % 2); }
static int st_receiver(uint64_t n) { return 1 - (int)((n % 3) % 2); }

/* payload: 64 ASCII hex chars of sha256("packet <n>") */
static void st_payload(uint64_t n, char out[65])
{
	char text[48];
	int l = snprintf(text, sizeof(text), "packet %" PRIu64, n);
	struct sha256 s;
	sha256_init(&s);
	sha256_update(&s, text, (size_t)l);
	sha256_hex(&s, out);
}

/* test.py hashes f"<{data}>" of the bytes object, i.e. "<b'HEX'>" */
static void st_hash_msg(struct sha256 *s, const char *data, size_t len)
{
	sha256_update(s, "<b'", 3);
	sha256_update(s, data, len);
	sha256_update(s, "'>", 2);
}


/* next message n' > n (same sender parity) whose receiver is `me` */
static uint64_t st_next_for(uint64_t n, int me, uint64_t total)
{
	do
		n += 2;
	while (n < total && st_receiver(n) != me);
	return n;
}

/* payload -> packet number lookup (open addressing on the first 8 bytes) */
struct st_table {
	char (*payload)[64];
	int64_t *slot;
	uint64_t mask, total;
};

static void st_table_init(struct st_table *t, uint64_t total)
{
	memset(t, 0, sizeof(*t));
	if (total == 0 || total > 4000000)
		return; /* diagnostics only; skip for huge runs */
	uint64_t size = 1;
	while (size < 2 * total)
		size <<= 1;
	t->payload = malloc(total * 64);
	t->slot = malloc(size * sizeof(int64_t));
	if (!t->payload || !t->slot) {
		free(t->payload);
		free(t->slot);
		memset(t, 0, sizeof(*t));
		return;
	}
	t->mask = size - 1;
	t->total = total;
	for (uint64_t i = 0; i < size; i++)
		t->slot[i] = -1;
	for (uint64_t n = 0; n < total; n++) {
		char p[65];
		st_payload(n, p);
		memcpy(t->payload[n], p, 64);
		uint64_t h = mix64(rd_u64((const unsigned char *)p)) & t->mask;
		while (t->slot[h] >= 0)
			h = (h + 1) & t->mask;
		t->slot[h] = (int64_t)n;
	}
}

static int64_t st_lookup(const struct st_table *t, const unsigned char *data)
{
	if (!t->slot)
		return -1;
	uint64_t h = mix64(rd_u64(data)) & t->mask;
	for (uint64_t i = 0; i <= t->mask && t->slot[h] >= 0; i++, h = (h + 1) & t->mask)
		if (memcmp(t->payload[t->slot[h]], data, 64) == 0)
			return t->slot[h];
	return -1;
}

static void usage_selftest_peer(void)
{
	puts("rdstool selftest-peer --me 0|1 --ep0 ADDR:PORT --ep1 ADDR:PORT [-n TOTAL]\n"
	     "       [-t tcp|ib|auto] [--reset-every K [--reset-free]] [--role leader|follower]\n"
	     "       [--reset-values A,B] [--timeout SEC] [--go-file PATH]\n"
	     "  One endpoint of the kernel RDS selftest traffic (test.py): message n (0<=n<TOTAL)\n"
	     "  carries the 64 ASCII hex chars of sha256(\"packet n\") and goes from endpoint n%2\n"
	     "  to endpoint 1-(n%3)%2. This process binds endpoint --me, sends its messages in\n"
	     "  order (non-blocking, retrying on EAGAIN/ENOBUFS) and receives the ones addressed\n"
	     "  to it, checking order and content. Both processes get the same options except\n"
	     "  --me (and --role). See README.md for the control messages ('ctl:...', shorter\n"
	     "  than 64 bytes): a start handshake, and with --reset-every K a barrier after every\n"
	     "  K messages (global numbering) at which the leader (default: the endpoint with\n"
	     "  the larger address) writes the rds_tcp_sndbuf and rds_tcp_rcvbuf sysctls\n"
	     "  (alternating A and B, default 10000,20000), dropping every RDS/TCP connection of\n"
	     "  its netns, while nothing is in flight (as in test.py). --reset-free resets every\n"
	     "  K own sends with no barrier instead (base kernels then lose and duplicate\n"
	     "  messages).\n"
	     "  After bind it prints 'selftest-peer: bound ADDR:PORT ...'; with --go-file it waits\n"
	     "  for PATH to exist (at most 120 s) before starting. Output: 'send S R COUNT SHA256',\n"
	     "  'recv S R COUNT SHA256', 'expect S R COUNT SHA256' (what R must receive from S),\n"
	     "  'diag S R ...' and a final 'selftest-peer: ok|FAIL key=value...' line. The per-pair\n"
	     "  SHA-256 runs over \"<b'HEX'>\" per message, as test.py hashes f\"<{data}>\".");
}

static int write_sysctl(const char *path, long v)
{
	int fd = open(path, O_WRONLY);
	if (fd < 0)
		return -errno;
	char b[32];
	int l = snprintf(b, sizeof(b), "%ld\n", v);
	int rc = write(fd, b, (size_t)l) == l ? 0 : -errno;
	close(fd);
	return rc;
}

enum st_phase { ST_HELLO, ST_RUN, ST_DRAIN, ST_WAIT_READY, ST_WAIT_GO, ST_SETTLE, ST_FINISH };

struct st_ctx {
	int fd, me, leader;
	struct sockaddr_in ep[2];
	uint64_t total;
	/* control messages seen */
	int got_hello, got_hello_ack;
	int64_t got_ready, got_go, got_go_ack; /* highest round number seen, -1 = none */
	int64_t acked_go;                      /* follower: highest go answered */
	uint64_t ctl_sent, ctl_dups, pongs;
};

static int st_send_ctl(struct st_ctx *c, const char *kind, int64_t round)
{
	char m[48];
	int l = round >= 0 ? snprintf(m, sizeof(m), "ctl:%s:%" PRId64, kind, round)
			   : snprintf(m, sizeof(m), "ctl:%s", kind);
	int peer = 1 - c->me;
	ssize_t w = sendto(c->fd, m, (size_t)l, 0, (struct sockaddr *)&c->ep[peer], sizeof(c->ep[peer]));
	if (w == l) {
		c->ctl_sent++;
		return 0;
	}
	return -1;
}

static void st_on_ctl(struct st_ctx *c, const unsigned char *buf, ssize_t r)
{
	char m[64];
	size_t l = (size_t)r < sizeof(m) - 1 ? (size_t)r : sizeof(m) - 1;
	memcpy(m, buf, l);
	m[l] = 0;
	long long v;
	if (strcmp(m, "ctl:hello") == 0) {
		if (c->got_hello)
			c->ctl_dups++;
		c->got_hello = 1;
		st_send_ctl(c, "hello-ack", -1); /* answer every hello */
	} else if (strcmp(m, "ctl:hello-ack") == 0) {
		c->got_hello_ack = 1;
	} else if (sscanf(m, "ctl:ready:%lld", &v) == 1) {
		if (v <= c->got_ready)
			c->ctl_dups++;
		else
			c->got_ready = v;
	} else if (sscanf(m, "ctl:go:%lld", &v) == 1) {
		if (v <= c->got_go) {
			c->ctl_dups++;
			if (v <= c->acked_go)
				st_send_ctl(c, "go-ack", v); /* the first answer may have been lost */
		} else {
			c->got_go = v;
		}
	} else if (sscanf(m, "ctl:go-ack:%lld", &v) == 1) {
		if (v <= c->got_go_ack)
			c->ctl_dups++;
		else
			c->got_go_ack = v;
	}
}

/* zero-length message to the peer's port 0 from the data socket (same lane as the data) */
static void st_ping(struct st_ctx *c)
{
	struct sockaddr_in a = c->ep[1 - c->me];
	a.sin_port = 0;
	char z = 0;
	sendto(c->fd, &z, 0, 0, (struct sockaddr *)&a, sizeof(a));
}

static int cmd_selftest_peer(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "me", 1, 0, 'm' }, { "ep0", 1, 0, '0' }, { "ep1", 1, 0, '1' },
		{ "count", 1, 0, 'n' }, { "transport", 1, 0, 't' }, { "reset-every", 1, 0, 'r' },
		{ "reset-values", 1, 0, 'v' }, { "timeout", 1, 0, 'T' }, { "quiet", 0, 0, 'q' },
		{ "go-file", 1, 0, 'g' }, { "role", 1, 0, 'R' }, { "reset-free", 0, 0, 'F' },
		{ "help", 0, 0, 'h' }, { 0, 0, 0, 0 } };
	int me = -1, have0 = 0, have1 = 0, c, role = -1, reset_free = 0;
	const char *go_file = NULL;
	struct sockaddr_in ep[2];
	uint64_t total = 2000, reset_every = 0, timeout_s = 120;
	long reset_vals[2] = { 10000, 20000 };
	struct sockopts so = { RDS_TRANS_TCP, 0, 0, 1 };
	while ((c = getopt_long(argc, argv, "n:t:qh", lo, NULL)) != -1) {
		switch (c) {
		case 'm': me = (int)parse_u64(optarg, "--me"); break;
		case '0': parse_sin(optarg, &ep[0], 1, "--ep0"); have0 = 1; break;
		case '1': parse_sin(optarg, &ep[1], 1, "--ep1"); have1 = 1; break;
		case 'n': total = parse_u64(optarg, "--count"); break;
		case 't': so.transport = parse_transport(optarg); break;
		case 'r': reset_every = parse_u64(optarg, "--reset-every"); break;
		case 'v':
			if (sscanf(optarg, "%ld,%ld", &reset_vals[0], &reset_vals[1]) != 2)
				die(2, "--reset-values needs A,B");
			break;
		case 'T': timeout_s = parse_u64(optarg, "--timeout"); break;
		case 'g': go_file = optarg; break;
		case 'R':
			if (strcmp(optarg, "leader") == 0)
				role = 1;
			else if (strcmp(optarg, "follower") == 0)
				role = 0;
			else
				die(2, "--role leader|follower");
			break;
		case 'F': reset_free = 1; break;
		case 'q': g_quiet = 1; break;
		case 'h': usage_selftest_peer(); return 0;
		default: usage_selftest_peer(); return 2;
		}
	}
	if ((me != 0 && me != 1) || !have0 || !have1)
		die(2, "--me 0|1, --ep0 and --ep1 are required");
	if (total == 0 || total > 100000000)
		die(2, "bad --count");
	if (ep[0].sin_addr.s_addr == ep[1].sin_addr.s_addr && ep[0].sin_port == ep[1].sin_port)
		die(2, "the two endpoints must differ");
	if (role < 0) {
		/* default leader: the endpoint with the larger address (then port). Base kernels
		 * can fall into a reconnect storm when the smaller-address side resets. */
		uint32_t a0 = ntohl(ep[0].sin_addr.s_addr), a1 = ntohl(ep[1].sin_addr.s_addr);
		int larger = a1 > a0 || (a1 == a0 && ntohs(ep[1].sin_port) > ntohs(ep[0].sin_port));
		role = me == larger;
	}
	const char *sysctl_paths[2] = { "/proc/sys/net/rds/tcp/rds_tcp_sndbuf",
					"/proc/sys/net/rds/tcp/rds_tcp_rcvbuf" };
	int i_reset = reset_every && (role == 1 || reset_free);
	if (i_reset && access(sysctl_paths[0], W_OK) != 0)
		die(2, "--reset-every needs %s (is rds_tcp loaded?)", sysctl_paths[0]);
	uint64_t round_size = reset_every && !reset_free ? reset_every : total;

	struct st_ctx cx;
	memset(&cx, 0, sizeof(cx));
	cx.me = me;
	cx.leader = role;
	cx.ep[0] = ep[0];
	cx.ep[1] = ep[1];
	cx.total = total;
	cx.got_ready = cx.got_go = cx.got_go_ack = cx.acked_go = -1;
	cx.fd = rds_socket(&ep[me], &so);
	int fd = cx.fd;
	char b[64];
	printf("selftest-peer: bound %s transport=%s role=%s\n", sin_str(&ep[me], b, sizeof(b)),
	       transport_name(get_transport(fd)), role ? "leader" : "follower");
	fflush(stdout);
	if (go_file) {
		/* start barrier: wait (at most 120 s) until the go file exists */
		arm_watchdog(150);
		uint64_t gdl = now_ns() + 120000000000ull;
		while (access(go_file, F_OK) != 0) {
			if (now_ns() >= gdl)
				die(1, "go file %s did not appear within 120 s", go_file);
			sleep_ms(10);
		}
	}
	arm_watchdog((unsigned)timeout_s + 30);
	uint64_t t0 = now_ns(), deadline = t0 + timeout_s * 1000000000ull;

	struct sha256 h_send[2], h_recv[2], h_expect[2];
	uint64_t n_send[2] = { 0, 0 }, n_recv[2] = { 0, 0 }, n_expect[2] = { 0, 0 };
	for (int i = 0; i < 2; i++) {
		sha256_init(&h_send[i]);
		sha256_init(&h_recv[i]);
		sha256_init(&h_expect[i]);
	}
	for (uint64_t n = 0; n < total; n++) {
		if (st_receiver(n) != me)
			continue;
		char p[65];
		st_payload(n, p);
		int s = st_sender(n);
		st_hash_msg(&h_expect[s], p, 64);
		n_expect[s]++;
	}
	uint64_t next_send = (uint64_t)me;
	uint64_t exp_next[2];
	for (int s = 0; s < 2; s++) {
		exp_next[s] = (uint64_t)s;
		if (st_receiver(exp_next[s]) != me)
			exp_next[s] = st_next_for(exp_next[s], me, total);
	}
	uint64_t eagain = 0, enobufs = 0, resets = 0, errors = 0, sent_total = 0, recv_total = 0;
	uint64_t dups[2] = { 0, 0 }, gaps[2] = { 0, 0 }, missing[2] = { 0, 0 }, unknown[2] = { 0, 0 };
	uint64_t expect_total = n_expect[0] + n_expect[1];
	struct st_table tab;
	st_table_init(&tab, total);
	char first_err[300] = "";
	int fatal = 0;
	unsigned char rbuf[2048];
	uint64_t round = 0, barrier_ns = 0, t_barrier = 0, hello_next = 0, ping_next = 0;
	uint64_t go_next = 0, settle_pongs = 0;
	int64_t go_pending = -1; /* leader: go message not yet acknowledged */
	enum st_phase phase = ST_HELLO;
	int drained_ok = 1;

	for (uint64_t loop = 0; loop < 1000000000ull && phase != ST_FINISH; loop++) {
		uint64_t now = now_ns();
		if (now >= deadline)
			break;
		uint64_t lo = round * round_size;
		uint64_t hi = lo + round_size < total ? lo + round_size : total;
		int want_out = 0, block = 0;

		/* protocol steps that send */
		if (phase == ST_HELLO) {
			if (cx.leader && cx.got_hello_ack) {
				phase = ST_RUN;
			} else if (!cx.leader && cx.got_hello) {
				phase = ST_RUN; /* the ack went out when the hello arrived */
			} else if (cx.leader && now >= hello_next) {
				st_send_ctl(&cx, "hello", -1); /* repeated until acked */
				hello_next = now + 300000000ull;
			}
		}
		if (phase == ST_RUN) {
			while (next_send < hi) {
				uint64_t n = next_send;
				int r = st_receiver(n);
				char p[65];
				st_payload(n, p);
				ssize_t w = sendto(fd, p, 64, 0, (struct sockaddr *)&ep[r], sizeof(ep[r]));
				if (w == 64) {
					st_hash_msg(&h_send[r], p, 64);
					n_send[r]++;
					sent_total++;
					next_send += 2;
					if (reset_free && reset_every && sent_total % reset_every == 0) {
						long v = reset_vals[resets % 2];
						int e1 = write_sysctl(sysctl_paths[0], v);
						int e2 = write_sysctl(sysctl_paths[1], v);
						if (e1 || e2)
							die(2, "writing rds_tcp sysctls: %s", strerror(-(e1 ? e1 : e2)));
						resets++;
					}
					continue;
				}
				int e = w < 0 ? errno : EIO;
				if (e == EAGAIN || e == ECONNRESET || e == EPIPE || e == EINTR) {
					eagain += e == EAGAIN;
					want_out = 1;
					block = 1;
				} else if (e == ENOBUFS) {
					enobufs++;
					block = 2;
				} else {
					snprintf(first_err, sizeof(first_err), "sendto packet %" PRIu64 ": %s", n,
						 strerror(e));
					fatal = 1;
				}
				break;
			}
			if (fatal)
				break;
			if (next_send >= hi && exp_next[0] >= hi && exp_next[1] >= hi) {
				/* everything of this round sent and received */
				if (hi >= total) {
					/* the leader leaves only once its last go has been acknowledged */
					if (go_pending < 0) {
						phase = ST_FINISH;
						break;
					}
				} else {
					phase = ST_DRAIN;
					t_barrier = now_ns();
				}
			}
		}
		if (phase == ST_DRAIN) {
			/* our messages must be acknowledged before anybody resets */
			double dms;
			if (drain_wait(&ep[me], 1, get_transport(fd), deadline, &dms) != 0) {
				drained_ok = 0;
				break;
			}
			if (cx.leader) {
				phase = ST_WAIT_READY;
			} else {
				if (st_send_ctl(&cx, "ready", (int64_t)round) != 0) {
					phase = ST_DRAIN; /* send room: try again */
					sleep_ms(2);
					continue;
				}
				phase = ST_WAIT_GO;
			}
		}
		if (phase == ST_WAIT_READY && cx.got_ready >= (int64_t)round) {
			/* nothing in flight in either direction: reset here (as test.py does) */
			if (i_reset) {
				long v = reset_vals[resets % 2];
				int e1 = write_sysctl(sysctl_paths[0], v);
				int e2 = write_sysctl(sysctl_paths[1], v);
				if (e1 || e2)
					die(2, "writing rds_tcp sysctls: %s", strerror(-(e1 ? e1 : e2)));
				resets++;
			}
			phase = ST_SETTLE;
			settle_pongs = cx.pongs;
			ping_next = 0;
		}
		if (phase == ST_WAIT_GO && cx.got_go >= (int64_t)round) {
			phase = ST_SETTLE;
			settle_pongs = cx.pongs;
			ping_next = 0;
		}
		if (phase == ST_SETTLE) {
			/*
			 * After a reset, wait until a ping on our lane is answered: data sent while
			 * the connections are re-forming can be lost by base kernels (an accepted
			 * socket that is reset after its bytes were TCP-acknowledged).
			 */
			if (cx.pongs > settle_pongs) {
				if (cx.leader) {
					go_pending = (int64_t)round;
					go_next = 0;
				} else {
					st_send_ctl(&cx, "go-ack", (int64_t)round);
					cx.acked_go = (int64_t)round;
				}
				barrier_ns += now_ns() - t_barrier;
				round++;
				phase = ST_RUN;
				continue;
			}
			if (now >= ping_next) {
				st_ping(&cx);
				ping_next = now + 200000000ull;
			}
		}
		/* leader: repeat the go message until the follower acknowledges it */
		if (go_pending >= 0) {
			if (cx.got_go_ack >= go_pending) {
				go_pending = -1;
			} else if (now >= go_next) {
				st_send_ctl(&cx, "go", go_pending);
				go_next = now + 300000000ull;
			}
		}

		/* wait for input (or send room) */
		struct pollfd pf = { fd, POLLIN, 0 };
		if (want_out)
			pf.events |= POLLOUT;
		int wait = block == 2 ? 5 : (phase == ST_RUN && next_send < hi && !block ? 0 : 50);
		if (phase == ST_HELLO || phase == ST_SETTLE || go_pending >= 0)
			wait = 20;
		poll(&pf, 1, ms_left(deadline, wait));

		for (int k = 0; k < 100000; k++) {
			struct sockaddr_in from;
			int trunc;
			ssize_t r = recv_one(fd, rbuf, sizeof(rbuf), &from, &trunc);
			if (r < 0)
				break;
			int s = -1;
			for (int i = 0; i < 2; i++)
				if (from.sin_addr.s_addr == ep[i].sin_addr.s_addr && from.sin_port == ep[i].sin_port)
					s = i;
			if (r == 0 && from.sin_port == 0 &&
			    from.sin_addr.s_addr == ep[1 - me].sin_addr.s_addr) {
				cx.pongs++; /* the peer kernel's (or stack's) answer to st_ping */
				continue;
			}
			if (s < 0) {
				errors++;
				if (!first_err[0])
					snprintf(first_err, sizeof(first_err), "message from unknown source %s",
						 sin_str(&from, b, sizeof(b)));
				continue;
			}
			if (r < 64 && r >= 4 && memcmp(rbuf, "ctl:", 4) == 0) {
				st_on_ctl(&cx, rbuf, r);
				continue;
			}
			st_hash_msg(&h_recv[s], (const char *)rbuf, (size_t)r);
			n_recv[s]++;
			recv_total++;
			char p[65];
			if (exp_next[s] < total) {
				st_payload(exp_next[s], p);
				if (r == 64 && !trunc && memcmp(p, rbuf, 64) == 0) {
					exp_next[s] = st_next_for(exp_next[s], me, total);
					continue;
				}
			}
			/* out of order, duplicate, lost or foreign: find out which packet it is */
			uint64_t expected = exp_next[s];
			errors++;
			int64_t x = r == 64 ? st_lookup(&tab, rbuf) : -1;
			char what[160];
			if (x < 0) {
				unknown[s]++;
				snprintf(what, sizeof(what), "%zd bytes that are no packet of this test", r);
			} else if (st_sender((uint64_t)x) != s || st_receiver((uint64_t)x) != me) {
				unknown[s]++;
				snprintf(what, sizeof(what), "packet %" PRId64 " (sender %d, receiver %d)", x,
					 st_sender((uint64_t)x), st_receiver((uint64_t)x));
			} else if ((uint64_t)x < exp_next[s]) {
				dups[s]++;
				snprintf(what, sizeof(what), "packet %" PRId64 " again (duplicate or late)", x);
			} else {
				uint64_t miss = 0;
				for (uint64_t n = exp_next[s]; n < (uint64_t)x; n = st_next_for(n, me, total))
					miss++;
				gaps[s]++;
				missing[s] += miss;
				snprintf(what, sizeof(what), "packet %" PRId64 " (%" PRIu64 " skipped)", x, miss);
				exp_next[s] = st_next_for((uint64_t)x, me, total);
			}
			if (!first_err[0])
				snprintf(first_err, sizeof(first_err),
					 "from endpoint %d, its message #%" PRIu64 ": expected packet %" PRIu64
					 ", got %s", s, n_recv[s] - 1, expected, what);
		}
	}
	/* let our last messages leave the send/retransmit queues before closing */
	double dms = 0;
	if (!fatal && drained_ok && sent_total)
		drained_ok = drain_wait(&ep[me], 1, get_transport(fd), deadline + 10000000000ull, &dms) == 0;
	/*
	 * On IB our last messages can sit on the retransmit list unacknowledged (the peer acks
	 * only when asked). If the connection resets now (rxe under netem: retry counter
	 * exceeded), closing the socket would drop them for good; keep it open until the list
	 * empties or IB_LINGER_MS pass, so that a reconnect can resend them.
	 */
	if (!fatal && sent_total && get_transport(fd) == RDS_TRANS_IB) {
		int infofd = rds_socket_raw();
		uint64_t until = now_ns() + IB_LINGER_MS * 1000000ull;
		while (queued_for(infofd, &ep[me], 1, 1) > 0 && now_ns() < until)
			sleep_ms(10);
		close(infofd);
	}
	char hx[65];
	for (int r = 0; r < 2; r++) {
		sha256_hex(&h_send[r], hx);
		printf("send %d %d %" PRIu64 " %s\n", me, r, n_send[r], hx);
	}
	for (int s = 0; s < 2; s++) {
		sha256_hex(&h_recv[s], hx);
		printf("recv %d %d %" PRIu64 " %s\n", s, me, n_recv[s], hx);
	}
	for (int s = 0; s < 2; s++) {
		sha256_hex(&h_expect[s], hx);
		printf("expect %d %d %" PRIu64 " %s\n", s, me, n_expect[s], hx);
	}
	for (int s = 0; s < 2; s++)
		printf("diag %d %d in_order=%s duplicates=%" PRIu64 " gaps=%" PRIu64 " missing=%" PRIu64
		       " foreign=%" PRIu64 "\n", s, me,
		       dups[s] + gaps[s] + unknown[s] == 0 ? "yes" : "no", dups[s], gaps[s], missing[s],
		       unknown[s]);
	int complete = phase == ST_FINISH;
	int digests_ok = 1;
	for (int s = 0; s < 2; s++) {
		unsigned char d1[32], d2[32];
		sha256_final(&h_recv[s], d1);
		sha256_final(&h_expect[s], d2);
		if (n_recv[s] != n_expect[s] || memcmp(d1, d2, 32) != 0)
			digests_ok = 0;
	}
	int ok = !fatal && complete && errors == 0 && digests_ok && drained_ok;
	if (!first_err[0] && !complete) {
		const char *ph = phase == ST_HELLO ? "start handshake" : phase == ST_RUN ? "traffic"
				 : phase == ST_DRAIN ? "drain" : phase == ST_WAIT_READY ? "waiting for ready"
				 : phase == ST_SETTLE ? "settling after reset (no pong)" : "waiting for go";
		snprintf(first_err, sizeof(first_err), "time limit in %s (round %" PRIu64 "): sent %" PRIu64
			 " of %" PRIu64 ", received %" PRIu64 " of %" PRIu64, ph, round, sent_total,
			 (total + 1 - (uint64_t)me) / 2, recv_total, expect_total);
	}
	if (!first_err[0] && !drained_ok)
		snprintf(first_err, sizeof(first_err), "send queue not drained");
	printf("selftest-peer: %s me=%d role=%s total=%" PRIu64 " sent=%" PRIu64 " received=%" PRIu64
	       " expected=%" PRIu64 " errors=%" PRIu64 " resets=%" PRIu64 " rounds=%" PRIu64
	       " eagain=%" PRIu64 " enobufs=%" PRIu64 " ctl_dups=%" PRIu64 " pongs=%" PRIu64
	       " elapsed_ms=%.1f"
	       " barrier_ms=%.1f%s%s\n",
	       ok ? "ok" : "FAIL", me, role ? "leader" : "follower", total, sent_total, recv_total,
	       expect_total, errors, resets, round + (complete ? 1 : 0), eagain, enobufs, cx.ctl_dups,
	       cx.pongs,
	       elapsed_ms(t0), (double)barrier_ns / 1e6, first_err[0] ? " reason=" : "", first_err);
	close(fd);
	free(tab.payload);
	free(tab.slot);
	return ok ? 0 : 1;
}

/* ------------------------------------------------------------------------ */
/* RDMA over kernel RDS/IB: rdma-target and rdma-initiator                   */

/* values from include/uapi/linux/rds.h (ABI facts) */
#define RDS_GET_MR_OPT 2
#define RDS_FREE_MR_OPT 3
#define RDS_CMSG_RDMA_ARGS 1
#define RDS_CMSG_RDMA_DEST 2
#define RDS_CMSG_RDMA_MAP 3
#define RDS_CMSG_RDMA_STATUS 4
#define RDS_RDMA_READWRITE 0x0001
#define RDS_RDMA_USE_ONCE 0x0008
#define RDS_RDMA_NOTIFY_ME 0x0020
#define RDMA_MAX_LEN (16u * 1024 * 1024)

/* the kernel's struct layouts, with fixed-width fields */
struct rt_iovec {
	uint64_t addr;
	uint64_t bytes;
};
struct rt_get_mr_args {
	struct rt_iovec vec;
	uint64_t cookie_addr;
	uint64_t flags;
};
struct rt_free_mr_args {
	uint64_t cookie;
	uint64_t flags;
};
struct rt_rdma_args {
	uint64_t cookie;
	struct rt_iovec remote_vec;
	uint64_t local_vec_addr;
	uint64_t nr_local;
	uint64_t flags;
	uint64_t user_token;
};
struct rt_rdma_notify {
	uint64_t user_token;
	int32_t status;
};

/* pattern(seed)[i] = (i*131 + seed*7 + (i>>8)) & 0xff */
static unsigned char rdma_pat(uint64_t seed, uint64_t i)
{
	return (unsigned char)((i * 131u + seed * 7u + (i >> 8)) & 0xff);
}

static void rdma_fill(unsigned char *buf, size_t len, uint64_t seed)
{
	for (size_t i = 0; i < len; i++)
		buf[i] = rdma_pat(seed, i);
}

/* offset of the first byte that differs from pattern(seed), or -1 if none */
static long rdma_mismatch(const unsigned char *buf, size_t len, uint64_t seed)
{
	for (size_t i = 0; i < len; i++)
		if (buf[i] != rdma_pat(seed, i))
			return (long)i;
	return -1;
}

/* page-aligned, zeroed memory (like an application's buffer handed to the adapter) */
static unsigned char *rdma_alloc(size_t len)
{
	size_t pg = (size_t)sysconf(_SC_PAGESIZE);
	size_t alloc = (len + pg - 1) / pg * pg;
	void *p = NULL;
	if (posix_memalign(&p, pg, alloc) != 0 || !p)
		die(2, "cannot allocate %zu page-aligned bytes", len);
	memset(p, 0, alloc);
	return p;
}

/* sendmsg of a text message with one SOL_RDS cmsg; returns 0 or the errno */
static int rdma_send(int fd, const struct sockaddr_in *to, const char *text, int ctype,
		     const void *cdata, size_t clen, uint64_t deadline)
{
	union {
		struct cmsghdr h;
		unsigned char b[CMSG_SPACE(sizeof(struct rt_rdma_args))];
	} cbuf;
	struct iovec iov = { (void *)text, strlen(text) };
	struct msghdr mh;
	memset(&mh, 0, sizeof(mh));
	memset(&cbuf, 0, sizeof(cbuf));
	mh.msg_name = (void *)to;
	mh.msg_namelen = sizeof(*to);
	mh.msg_iov = &iov;
	mh.msg_iovlen = 1;
	if (ctype) {
		if (clen > sizeof(struct rt_rdma_args))
			die(2, "internal: cmsg too large");
		mh.msg_control = cbuf.b;
		mh.msg_controllen = CMSG_SPACE(clen);
		struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_RDS_LEVEL;
		c->cmsg_type = ctype;
		c->cmsg_len = CMSG_LEN(clen);
		memcpy(CMSG_DATA(c), cdata, clen);
	}
	set_timeo(fd, SO_SNDTIMEO, ms_left(deadline, 1 << 30));
	ssize_t r = sendmsg(fd, &mh, 0);
	if (r < 0)
		return errno;
	if ((size_t)r != iov.iov_len)
		return EMSGSIZE;
	return 0;
}

/* one thing read from the socket: an RDMA notification or a message */
struct rdma_ev {
	int notify;              /* 1: RDS_CMSG_RDMA_STATUS */
	uint64_t token;
	int32_t status;
	struct sockaddr_in from; /* message source */
	int have_dest;           /* message carried RDS_CMSG_RDMA_DEST */
	uint64_t dest;
	size_t len;
	char text[256];          /* the message, NUL-terminated, cut at 255 bytes */
};

/* 0 = got one, -1 = deadline passed; exits 2 on a socket error */
static int rdma_recv(int fd, uint64_t deadline, struct rdma_ev *ev)
{
	for (int iter = 0; iter < 1000000; iter++) {
		int left = ms_left(deadline, 500);
		if (left <= 0)
			return -1;
		union {
			struct cmsghdr h;
			unsigned char b[512];
		} cbuf;
		unsigned char data[256];
		struct iovec iov = { data, sizeof(data) - 1 };
		struct msghdr mh;
		memset(ev, 0, sizeof(*ev));
		memset(&mh, 0, sizeof(mh));
		mh.msg_name = &ev->from;
		mh.msg_namelen = sizeof(ev->from);
		mh.msg_iov = &iov;
		mh.msg_iovlen = 1;
		mh.msg_control = cbuf.b;
		mh.msg_controllen = sizeof(cbuf.b);
		set_timeo(fd, SO_RCVTIMEO, left);
		ssize_t r = recvmsg(fd, &mh, 0);
		if (r < 0) {
			if (errno == EAGAIN || errno == ETIMEDOUT || errno == EINTR)
				continue;
			die(2, "recvmsg: %s (%s)", strerror(errno), errname(errno));
		}
		for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
			if (c->cmsg_level != SOL_RDS_LEVEL)
				continue;
			size_t dl = c->cmsg_len - CMSG_LEN(0);
			if (c->cmsg_type == RDS_CMSG_RDMA_STATUS && dl >= 12) {
				ev->notify = 1;
				memcpy(&ev->token, CMSG_DATA(c), 8);
				memcpy(&ev->status, CMSG_DATA(c) + 8, 4);
			} else if (c->cmsg_type == RDS_CMSG_RDMA_DEST && dl >= 8) {
				ev->have_dest = 1;
				memcpy(&ev->dest, CMSG_DATA(c), 8);
			}
		}
		if (ev->notify)
			return 0;
		ev->len = (size_t)r;
		memcpy(ev->text, data, (size_t)r);
		ev->text[r] = 0;
		return 0;
	}
	return -1;
}

/* pings peer's address (zero-length message to port 0) once a second until the pong (zero
 * length, from port 0) arrives: 0, or -1 at the deadline. With `map`, the first ping carries
 * RDS_CMSG_RDMA_MAP with those arguments. */
static int rdma_ping(int fd, const struct sockaddr_in *peer, const struct rt_get_mr_args *map,
		     uint64_t deadline)
{
	struct sockaddr_in dst = *peer;
	dst.sin_port = 0;
	for (int i = 0; i < 100000; i++) {
		if (ms_left(deadline, 1) <= 0)
			return -1;
		int e = rdma_send(fd, &dst, "", map ? RDS_CMSG_RDMA_MAP : 0, map, map ? sizeof(*map) : 0,
				  deadline);
		if (e && map)
			die(2, "sendmsg(ping with RDS_CMSG_RDMA_MAP): %s (%s)", strerror(e), errname(e));
		if (e)
			sleep_ms(100);
		map = NULL; /* registered once */
		uint64_t until = now_ns() + 1000000000ull;
		if (until > deadline)
			until = deadline;
		struct rdma_ev ev;
		while (rdma_recv(fd, until, &ev) == 0) {
			if (!ev.notify && ev.len == 0 && ev.from.sin_port == 0 &&
			    ev.from.sin_addr.s_addr == dst.sin_addr.s_addr)
				return 0;
			note("rdstool: ignoring %zu bytes while waiting for the pong\n", ev.len);
		}
	}
	return -1;
}

static int same_sin(const struct sockaddr_in *a, const struct sockaddr_in *b)
{
	return a->sin_addr.s_addr == b->sin_addr.s_addr && a->sin_port == b->sin_port;
}

static void usage_rdma_target(void)
{
	puts("rdstool rdma-target -b ADDR:PORT -p PEER:PORT --len N --seed K [-t ib|auto]\n"
	     "                    [--use-once] [--offset O] [-T|--timeout SEC]\n"
	     "  Registers N bytes filled with pattern(K), starting O bytes (default 0) into a\n"
	     "  page-aligned buffer, with RDS_GET_MR (flag USE_ONCE if asked; where the kernel\n"
	     "  refuses RDS_GET_MR, with RDS_CMSG_RDMA_MAP on a ping to the peer), sends\n"
	     "  'OFFER cookie=0x<hex16> len=N seed=K' with an RDS_CMSG_RDMA_DEST cmsg carrying\n"
	     "  the cookie to PEER:PORT (start the initiator first), then expects 'READ' (the\n"
	     "  peer read the region) and\n"
	     "  'WROTE seed=K2' (the region must now hold pattern(K2)), answered with\n"
	     "  'CHECKED ok' or 'CHECKED bad at <offset>'. pattern(s)[i] =\n"
	     "  (i*131 + s*7 + (i>>8)) & 0xff. Exit 0 iff all good, 1 on a failed check or the\n"
	     "  time limit, 2 on setup errors.");
}

static int cmd_rdma_target(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "bind", 1, 0, 'b' }, { "peer", 1, 0, 'p' }, { "transport", 1, 0, 't' },
		{ "len", 1, 0, 'L' }, { "seed", 1, 0, 'K' }, { "use-once", 0, 0, 'U' },
		{ "offset", 1, 0, 'O' },
		{ "timeout", 1, 0, 'T' }, { "quiet", 0, 0, 'q' }, { "help", 0, 0, 'h' },
		{ 0, 0, 0, 0 } };
	struct sockaddr_in bindaddr, peer;
	int have_bind = 0, have_peer = 0, have_len = 0, have_seed = 0, use_once = 0, c;
	uint64_t len = 0, seed = 0, timeout_s = 60, offset = 0;
	struct sockopts so = { RDS_TRANS_IB, 0, 0, 0 };
	while ((c = getopt_long(argc, argv, "b:p:t:T:qh", lo, NULL)) != -1) {
		switch (c) {
		case 'b': parse_sin(optarg, &bindaddr, 1, "--bind"); have_bind = 1; break;
		case 'p': parse_sin(optarg, &peer, 1, "--peer"); have_peer = 1; break;
		case 't': so.transport = parse_transport(optarg); break;
		case 'L': len = parse_u64(optarg, "--len"); have_len = 1; break;
		case 'K': seed = parse_u64(optarg, "--seed"); have_seed = 1; break;
		case 'U': use_once = 1; break;
		case 'O': offset = parse_u64(optarg, "--offset"); break;
		case 'T': timeout_s = parse_u64(optarg, "--timeout"); break;
		case 'q': g_quiet = 1; break;
		case 'h': usage_rdma_target(); return 0;
		default: usage_rdma_target(); return 2;
		}
	}
	if (optind < argc)
		die(2, "unexpected argument '%s'", argv[optind]);
	if (!have_bind || !have_peer || !have_len || !have_seed)
		die(2, "--bind, --peer, --len and --seed are required");
	if (len == 0 || len > RDMA_MAX_LEN)
		die(2, "--len must be 1..%u", RDMA_MAX_LEN);
	if (offset >= 65536)
		die(2, "--offset must be below 65536");
	if (timeout_s == 0 || timeout_s > 86400)
		die(2, "bad --timeout");
	arm_watchdog((unsigned)timeout_s + 15);
	uint64_t t0 = now_ns(), deadline = t0 + timeout_s * 1000000000ull;
	char b[64], pb[64];
	sin_str(&peer, pb, sizeof(pb));
	int fd = rds_socket(&bindaddr, &so);
	printf("rdma-target: bound %s transport=%s\n", sin_str(&bindaddr, b, sizeof(b)),
	       transport_name(get_transport(fd)));

	unsigned char *mem = rdma_alloc((size_t)(offset + len));
	unsigned char *region = mem + offset;
	rdma_fill(region, (size_t)len, seed);
	uint64_t cookie = 0;
	struct rt_get_mr_args mr;
	memset(&mr, 0, sizeof(mr));
	mr.vec.addr = (uint64_t)(uintptr_t)region;
	mr.vec.bytes = len;
	mr.cookie_addr = (uint64_t)(uintptr_t)&cookie;
	mr.flags = use_once ? RDS_RDMA_USE_ONCE : 0;
	char ab[INET_ADDRSTRLEN];
	inet_ntop(AF_INET, &peer.sin_addr, ab, sizeof(ab));
	const char *via = "get_mr";
	int gr = setsockopt(fd, SOL_RDS_LEVEL, RDS_GET_MR_OPT, &mr, sizeof(mr));
	if (gr != 0 && errno == ENODEV) {
		/*
		 * The kernel finds the IB device for an MR by the socket's bound address in the
		 * device's address list, which it fills when an RDS/IB connection from that address
		 * comes up. Before the first connection: ENODEV. Bring one up with a ping.
		 */
		printf("rdma-target: RDS_GET_MR ENODEV (no IB connection from this address yet); ping %s\n",
		       ab);
		if (rdma_ping(fd, &peer, NULL, deadline) != 0) {
			printf("rdma-target: FAIL reason=no-pong-from-peer\n");
			return 1;
		}
		gr = setsockopt(fd, SOL_RDS_LEVEL, RDS_GET_MR_OPT, &mr, sizeof(mr));
	}
	if (gr != 0 && errno == EOPNOTSUPP) {
		/*
		 * On fast-registration (FRMR) devices the kernel registers an MR with a work request
		 * on a connection's queue pair; RDS_GET_MR has no connection and fails. The MR is
		 * registered by RDS_CMSG_RDMA_MAP on a message instead: a ping to the peer (after a
		 * plain ping, so the connection is up when the registration is posted). The MR then
		 * stays in the socket's key table like one from RDS_GET_MR.
		 */
		printf("rdma-target: RDS_GET_MR EOPNOTSUPP; RDS_CMSG_RDMA_MAP on a ping to %s\n", ab);
		if (rdma_ping(fd, &peer, NULL, deadline) != 0 || rdma_ping(fd, &peer, &mr, deadline) != 0) {
			printf("rdma-target: FAIL reason=no-pong-from-peer\n");
			return 1;
		}
		via = "rdma_map";
		gr = 0;
	}
	if (gr != 0)
		die(2, "setsockopt(RDS_GET_MR, %" PRIu64 " bytes): %s (%s)", len, strerror(errno),
		    errname(errno));
	printf("rdma-target: mr cookie=0x%016" PRIx64 " len=%" PRIu64 " seed=%" PRIu64 " use_once=%d via=%s",
	       cookie, len, seed, use_once, via);
	if (offset)
		printf(" offset=%" PRIu64, offset);
	printf("\n");

	char msg[160];
	snprintf(msg, sizeof(msg), "OFFER cookie=0x%016" PRIx64 " len=%" PRIu64 " seed=%" PRIu64, cookie,
		 len, seed);
	int e = rdma_send(fd, &peer, msg, RDS_CMSG_RDMA_DEST, &cookie, sizeof(cookie), deadline);
	if (e)
		die(2, "sendmsg(OFFER with RDS_CMSG_RDMA_DEST to %s): %s (%s)", pb, strerror(e),
		    errname(e));
	printf("rdma-target: sent OFFER cookie=0x%016" PRIx64 " len=%" PRIu64 " seed=%" PRIu64 " to %s\n",
	       cookie, len, seed, pb);

	int got_read = 0, done = 0, fail = 0;
	uint64_t seed2 = 0;
	const char *why = "time-limit";
	while (!done) {
		struct rdma_ev ev;
		if (rdma_recv(fd, deadline, &ev) != 0) {
			fail = 1;
			why = got_read ? "time-limit-waiting-for-WROTE" : "time-limit-waiting-for-READ";
			break;
		}
		if (ev.notify) {
			printf("rdma-target: unexpected notification token=%" PRIu64 " status=%d\n", ev.token,
			       ev.status);
			continue;
		}
		if (!same_sin(&ev.from, &peer)) {
			note("rdma-target: ignoring %zu bytes from %s\n", ev.len,
			     sin_str(&ev.from, b, sizeof(b)));
			continue;
		}
		if (strcmp(ev.text, "READ") == 0 && !got_read) {
			/*
			 * Not checked here: the peer's RDMA write may already have landed by the time
			 * this process runs (the peer writes as soon as its read completed).
			 */
			got_read = 1;
			printf("rdma-target: got READ from %s\n", pb);
			continue;
		}
		if (strncmp(ev.text, "WROTE seed=", 11) == 0 && got_read) {
			char *end;
			errno = 0;
			seed2 = strtoull(ev.text + 11, &end, 10);
			if (errno || end == ev.text + 11 || *end) {
				printf("rdma-target: bad message '%s'\n", ev.text);
				fail = 1;
				why = "bad-WROTE";
				break;
			}
			long bad = rdma_mismatch(region, (size_t)len, seed2);
			if (bad < 0) {
				snprintf(msg, sizeof(msg), "CHECKED ok");
				printf("rdma-target: got WROTE seed=%" PRIu64 " from %s check=ok\n", seed2, pb);
			} else {
				snprintf(msg, sizeof(msg), "CHECKED bad at %ld", bad);
				printf("rdma-target: got WROTE seed=%" PRIu64 " from %s check=bad at %ld "
				       "(got 0x%02x want 0x%02x)\n",
				       seed2, pb, bad, region[bad], rdma_pat(seed2, (uint64_t)bad));
				fail = 1;
				why = "region-mismatch";
			}
			e = rdma_send(fd, &peer, msg, 0, NULL, 0, deadline);
			if (e)
				die(2, "sendmsg(%s to %s): %s (%s)", msg, pb, strerror(e), errname(e));
			printf("rdma-target: sent %s\n", msg);
			done = 1;
			continue;
		}
		printf("rdma-target: unexpected message '%s' from %s\n", ev.text, pb);
		fail = 1;
		why = "unexpected-message";
		break;
	}
	double dms = 0;
	if (done && drain_wait(&bindaddr, 1, get_transport(fd), deadline + 5000000000ull, &dms) != 0 &&
	    !fail) {
		fail = 1;
		why = "not-drained";
	}
	struct rt_free_mr_args fr = { cookie, 0 };
	int fe = setsockopt(fd, SOL_RDS_LEVEL, RDS_FREE_MR_OPT, &fr, sizeof(fr)) == 0 ? 0 : errno;
	printf("rdma-target: %s len=%" PRIu64 " seed=%" PRIu64 " seed2=%" PRIu64 " free_mr=%s elapsed_ms=%.1f%s%s\n",
	       fail ? "FAIL" : "ok", len, seed, seed2, fe ? errname(fe) : "ok", elapsed_ms(t0),
	       fail ? " reason=" : "", fail ? why : "");
	close(fd);
	free(mem);
	return fail ? 1 : 0;
}

static void usage_rdma_initiator(void)
{
	puts("rdstool rdma-initiator -b ADDR:PORT --seed2 K2 [-t ib|auto] [-T|--timeout SEC]\n"
	     "  Waits for an 'OFFER cookie=0x.. len=N seed=K' from rdma-target (checks that its\n"
	     "  RDS_CMSG_RDMA_DEST cookie equals the text's: 'dest-cookie=0x.. match=yes'), RDMA-\n"
	     "  reads the N bytes into a local buffer with the message 'READ' (RDMA_ARGS, flag\n"
	     "  NOTIFY_ME, token 1), expects the notification {1, 0} and pattern(K):\n"
	     "  'rdma read status=0 token=1 ok'; then RDMA-writes pattern(K2) with 'WROTE seed=K2'\n"
	     "  (READWRITE|NOTIFY_ME, token 2): 'rdma write status=0 token=2'; then expects\n"
	     "  'CHECKED ok' from the target. Exit 0 iff all good, 1 on a failed check or the time\n"
	     "  limit, 2 on setup errors.");
}

/* waits for the notification with `token`; prints it; returns its status, or -1000 on the
 * deadline. Messages arriving meanwhile are failures (returned through *stray). */
static int rdma_wait_notify(int fd, uint64_t token, uint64_t deadline, const struct sockaddr_in *peer,
			    int *stray)
{
	char b[64];
	for (int iter = 0; iter < 1000; iter++) {
		struct rdma_ev ev;
		if (rdma_recv(fd, deadline, &ev) != 0)
			return -1000;
		if (ev.notify) {
			if (ev.token != token) {
				printf("rdma-initiator: unexpected notification token=%" PRIu64 " status=%d\n",
				       ev.token, ev.status);
				*stray = 1;
				continue;
			}
			return ev.status;
		}
		printf("rdma-initiator: unexpected message '%s' from %s%s while waiting for token %" PRIu64 "\n",
		       ev.text, sin_str(&ev.from, b, sizeof(b)), same_sin(&ev.from, peer) ? "" : " (not the peer)",
		       token);
		*stray = 1;
	}
	return -1000;
}

static int cmd_rdma_initiator(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "bind", 1, 0, 'b' }, { "transport", 1, 0, 't' }, { "seed2", 1, 0, 'K' },
		{ "timeout", 1, 0, 'T' }, { "quiet", 0, 0, 'q' }, { "help", 0, 0, 'h' },
		{ 0, 0, 0, 0 } };
	struct sockaddr_in bindaddr;
	int have_bind = 0, have_seed2 = 0, c;
	uint64_t seed2 = 0, timeout_s = 60;
	struct sockopts so = { RDS_TRANS_IB, 0, 0, 0 };
	while ((c = getopt_long(argc, argv, "b:t:T:qh", lo, NULL)) != -1) {
		switch (c) {
		case 'b': parse_sin(optarg, &bindaddr, 1, "--bind"); have_bind = 1; break;
		case 't': so.transport = parse_transport(optarg); break;
		case 'K': seed2 = parse_u64(optarg, "--seed2"); have_seed2 = 1; break;
		case 'T': timeout_s = parse_u64(optarg, "--timeout"); break;
		case 'q': g_quiet = 1; break;
		case 'h': usage_rdma_initiator(); return 0;
		default: usage_rdma_initiator(); return 2;
		}
	}
	if (optind < argc)
		die(2, "unexpected argument '%s'", argv[optind]);
	if (!have_bind || !have_seed2)
		die(2, "--bind and --seed2 are required");
	if (timeout_s == 0 || timeout_s > 86400)
		die(2, "bad --timeout");
	arm_watchdog((unsigned)timeout_s + 15);
	uint64_t t0 = now_ns(), deadline = t0 + timeout_s * 1000000000ull;
	char b[64], pb[64];
	int fd = rds_socket(&bindaddr, &so);
	printf("rdma-initiator: bound %s transport=%s\n", sin_str(&bindaddr, b, sizeof(b)),
	       transport_name(get_transport(fd)));

	/* 1. the offer */
	struct rdma_ev ev;
	struct sockaddr_in peer;
	uint64_t cookie = 0, len = 0, seed = 0;
	int fail = 0, stray = 0;
	const char *why = "";
	for (;;) {
		if (rdma_recv(fd, deadline, &ev) != 0) {
			printf("rdma-initiator: FAIL reason=time-limit-waiting-for-OFFER\n");
			return 1;
		}
		if (ev.notify) {
			printf("rdma-initiator: unexpected notification token=%" PRIu64 " status=%d\n", ev.token,
			       ev.status);
			continue;
		}
		char *p = ev.text, *end;
		if (strncmp(p, "OFFER cookie=0x", 15) != 0) {
			printf("rdma-initiator: ignoring '%s' from %s\n", ev.text, sin_str(&ev.from, b, sizeof(b)));
			continue;
		}
		errno = 0;
		cookie = strtoull(p + 15, &end, 16);
		int ok = !errno && end == p + 31;
		if (ok && strncmp(end, " len=", 5) == 0) {
			p = end + 5;
			len = strtoull(p, &end, 10);
			ok = !errno && end != p;
		} else {
			ok = 0;
		}
		if (ok && strncmp(end, " seed=", 6) == 0) {
			p = end + 6;
			seed = strtoull(p, &end, 10);
			ok = !errno && end != p && !*end;
		} else {
			ok = 0;
		}
		if (!ok || len == 0 || len > RDMA_MAX_LEN) {
			printf("rdma-initiator: FAIL reason=bad-offer '%s'\n", ev.text);
			return 1;
		}
		peer = ev.from;
		break;
	}
	sin_str(&peer, pb, sizeof(pb));
	printf("rdma-initiator: got OFFER cookie=0x%016" PRIx64 " len=%" PRIu64 " seed=%" PRIu64 " from %s\n",
	       cookie, len, seed, pb);
	if (!ev.have_dest) {
		printf("dest-cookie=none\n");
		fail = 1;
		why = "no-RDMA_DEST-cmsg";
	} else {
		printf("dest-cookie=0x%016" PRIx64 " match=%s\n", ev.dest, ev.dest == cookie ? "yes" : "no");
		if (ev.dest != cookie) {
			fail = 1;
			why = "RDMA_DEST-cookie-differs";
		}
	}

	/* 2. RDMA READ of the whole region */
	unsigned char *local = rdma_alloc((size_t)len);
	struct rt_iovec lv = { (uint64_t)(uintptr_t)local, len };
	struct rt_rdma_args a;
	memset(&a, 0, sizeof(a));
	a.cookie = cookie;
	a.remote_vec.addr = 0;
	a.remote_vec.bytes = len;
	a.local_vec_addr = (uint64_t)(uintptr_t)&lv;
	a.nr_local = 1;
	a.flags = RDS_RDMA_NOTIFY_ME;
	a.user_token = 1;
	int e = rdma_send(fd, &peer, "READ", RDS_CMSG_RDMA_ARGS, &a, sizeof(a), deadline);
	if (e)
		die(2, "sendmsg(READ with RDS_CMSG_RDMA_ARGS to %s): %s (%s)", pb, strerror(e), errname(e));
	int st = rdma_wait_notify(fd, 1, deadline, &peer, &stray);
	if (st == -1000) {
		printf("rdma read timeout token=1\n");
		printf("rdma-initiator: FAIL reason=time-limit-waiting-for-read-status\n");
		return 1;
	}
	if (st != 0) {
		printf("rdma read status=%d token=1\n", st);
		printf("rdma-initiator: FAIL reason=read-status-%d\n", st);
		return 1;
	}
	long bad = rdma_mismatch(local, (size_t)len, seed);
	if (bad < 0) {
		printf("rdma read status=0 token=1 ok\n");
	} else {
		printf("rdma read status=0 token=1 bad at %ld (got 0x%02x want 0x%02x)\n", bad, local[bad],
		       rdma_pat(seed, (uint64_t)bad));
		fail = 1;
		why = "read-data-mismatch";
	}

	/* 3. RDMA WRITE of pattern(seed2) */
	rdma_fill(local, (size_t)len, seed2);
	a.flags = RDS_RDMA_READWRITE | RDS_RDMA_NOTIFY_ME;
	a.user_token = 2;
	char msg[64];
	snprintf(msg, sizeof(msg), "WROTE seed=%" PRIu64, seed2);
	e = rdma_send(fd, &peer, msg, RDS_CMSG_RDMA_ARGS, &a, sizeof(a), deadline);
	if (e)
		die(2, "sendmsg(%s with RDS_CMSG_RDMA_ARGS to %s): %s (%s)", msg, pb, strerror(e), errname(e));
	st = rdma_wait_notify(fd, 2, deadline, &peer, &stray);
	if (st == -1000) {
		printf("rdma write timeout token=2\n");
		printf("rdma-initiator: FAIL reason=time-limit-waiting-for-write-status\n");
		return 1;
	}
	printf("rdma write status=%d token=2\n", st);
	if (st != 0) {
		printf("rdma-initiator: FAIL reason=write-status-%d\n", st);
		return 1;
	}

	/* 4. the target's verdict */
	int verdict = 0;
	for (int iter = 0; iter < 1000 && !verdict; iter++) {
		if (rdma_recv(fd, deadline, &ev) != 0)
			break;
		if (ev.notify) {
			printf("rdma-initiator: unexpected notification token=%" PRIu64 " status=%d\n", ev.token,
			       ev.status);
			stray = 1;
			continue;
		}
		if (!same_sin(&ev.from, &peer) || strncmp(ev.text, "CHECKED ", 8) != 0) {
			printf("rdma-initiator: unexpected message '%s' from %s\n", ev.text,
			       sin_str(&ev.from, b, sizeof(b)));
			stray = 1;
			continue;
		}
		printf("%s\n", ev.text);
		verdict = strcmp(ev.text, "CHECKED ok") == 0 ? 1 : 2;
	}
	if (!verdict) {
		fail = 1;
		why = "time-limit-waiting-for-CHECKED";
	} else if (verdict == 2 && !fail) {
		fail = 1;
		why = "target-check-failed";
	}
	if (stray && !fail) {
		fail = 1;
		why = "unexpected-events";
	}
	printf("rdma-initiator: %s len=%" PRIu64 " seed=%" PRIu64 " seed2=%" PRIu64 " elapsed_ms=%.1f%s%s\n",
	       fail ? "FAIL" : "ok", len, seed, seed2, elapsed_ms(t0), fail ? " reason=" : "",
	       fail ? why : "");
	close(fd);
	free(local);
	return fail ? 1 : 0;
}

/* ------------------------------------------------------------------------ */
/* sha256: hash stdin or a string (self-check of the SHA-256 code)           */

static int cmd_sha256(int argc, char **argv)
{
	struct sha256 s;
	sha256_init(&s);
	if (argc >= 2) {
		sha256_update(&s, argv[1], strlen(argv[1]));
	} else {
		unsigned char buf[65536];
		ssize_t r;
		while ((r = read(0, buf, sizeof(buf))) > 0)
			sha256_update(&s, buf, (size_t)r);
	}
	char hx[65];
	sha256_hex(&s, hx);
	printf("%s\n", hx);
	return 0;
}

/* pattern: print the payload of (index, size) as hex, for cross-checking implementations */
static int cmd_pattern(int argc, char **argv)
{
	if (argc != 3)
		die(2, "usage: rdstool pattern INDEX SIZE");
	uint64_t idx = parse_u64(argv[1], "index");
	uint64_t size = parse_u64(argv[2], "size");
	if (size > MAX_MSG)
		die(2, "size too large");
	unsigned char *buf = malloc(size ? size : 1);
	char *hx = malloc(2 * size + 1);
	if (!buf || !hx)
		die(2, "out of memory");
	fill_payload(buf, idx, (uint32_t)size);
	hex_of(buf, size, hx);
	printf("%s\n", hx);
	free(buf);
	free(hx);
	return 0;
}

/* ------------------------------------------------------------------------ */
/* agent: the guest side of the lab's 9p job spool                            */

/*
 * Spool protocol (directory DIR, normally /mnt/share/jobs):
 *   host writes ID.job (atomically, via rename); an optional first line
 *   "#lab-timeout=SECONDS" sets the job's time limit (default 600).
 *   agent renames ID.job -> ID.run, sources ID.run in /bin/sh (after
 *   /etc/lab-functions) in a new session with
 *   cwd = parent of DIR, stdin /dev/null, stdout -> ID.out, stderr -> ID.err,
 *   and when the shell exits kills whatever is left in its process group and
 *   writes the exit status to ID.rc (atomically). Killed by signal S: 128+S.
 *   Time limit: the group is killed, rc 124 and a note on ID.err.
 *   host writes ID.kill: the job's group is killed (rc 137).
 */
struct job {
	char id[96];
	pid_t pid;
	uint64_t deadline;
	int timeout_s;
	int killed; /* 1 = timeout, 2 = kill request */
};

#define MAX_JOBS 256

static void agent_path(char *out, size_t len, const char *dir, const char *id, const char *ext)
{
	snprintf(out, len, "%.300s/%.96s%.16s", dir, id, ext);
}

static void agent_write_rc(const char *dir, const char *id, int rc)
{
	char tmp[512], fin[512];
	agent_path(tmp, sizeof(tmp), dir, id, ".rc.tmp");
	agent_path(fin, sizeof(fin), dir, id, ".rc");
	FILE *f = fopen(tmp, "w");
	if (!f) {
		fprintf(stderr, "lab-agent: cannot write %s: %s\n", tmp, strerror(errno));
		return;
	}
	fprintf(f, "%d\n", rc);
	fflush(f);
	fsync(fileno(f));
	fclose(f);
	if (rename(tmp, fin) != 0)
		fprintf(stderr, "lab-agent: rename %s: %s\n", tmp, strerror(errno));
}

static void agent_start(const char *dir, const char *workdir, const char *id, struct job *j)
{
	char job[512], run[512], out[512], err[512];
	agent_path(job, sizeof(job), dir, id, ".job");
	agent_path(run, sizeof(run), dir, id, ".run");
	agent_path(out, sizeof(out), dir, id, ".out");
	agent_path(err, sizeof(err), dir, id, ".err");
	if (rename(job, run) != 0)
		return;
	int timeout_s = 600;
	FILE *f = fopen(run, "r");
	if (f) {
		char line[128];
		if (fgets(line, sizeof(line), f) && strncmp(line, "#lab-timeout=", 13) == 0) {
			int t = atoi(line + 13);
			if (t > 0)
				timeout_s = t;
		}
		fclose(f);
	}
	memset(j, 0, sizeof(*j));
	snprintf(j->id, sizeof(j->id), "%s", id);
	j->timeout_s = timeout_s;
	j->deadline = now_ns() + (uint64_t)timeout_s * 1000000000ull;
	pid_t pid = fork();
	if (pid < 0) {
		agent_write_rc(dir, id, 126);
		j->id[0] = 0;
		return;
	}
	if (pid == 0) {
		setsid();
		signal(SIGALRM, SIG_DFL);
		int in = open("/dev/null", O_RDONLY);
		int o = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		int e = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		if (in < 0 || o < 0 || e < 0)
			_exit(126);
		dup2(in, 0);
		dup2(o, 1);
		dup2(e, 2);
		for (int fd = 3; fd < 1024; fd++)
			close(fd);
		if (chdir(workdir) != 0)
			_exit(126);
		/* /etc/lab-functions makes real binaries win over busybox applets of the same
		 * name (Debian's busybox-static runs its applets first otherwise) */
		execl("/bin/sh", "sh", "-c",
		      "[ -r /etc/lab-functions ] && . /etc/lab-functions; . \"$0\"", run, (char *)NULL);
		_exit(127);
	}
	j->pid = pid;
}

static int ends_with(const char *s, const char *suf)
{
	size_t a = strlen(s), b = strlen(suf);
	return a > b && strcmp(s + a - b, suf) == 0;
}

static int cmd_agent(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "dir", 1, 0, 'd' }, { "poll-ms", 1, 0, 'p' }, { "help", 0, 0, 'h' }, { 0, 0, 0, 0 } };
	const char *dir = "/mnt/share/jobs";
	int poll_ms = 20, c;
	while ((c = getopt_long(argc, argv, "d:p:h", lo, NULL)) != -1) {
		switch (c) {
		case 'd': dir = optarg; break;
		case 'p': poll_ms = (int)parse_u64(optarg, "--poll-ms"); break;
		case 'h':
			puts("rdstool agent [--dir DIR] [--poll-ms MS]   (guest side of the lab job spool)");
			return 0;
		default: return 2;
		}
	}
	char workdir[512];
	snprintf(workdir, sizeof(workdir), "%s", dir);
	char *slash = strrchr(workdir, '/');
	if (slash && slash != workdir)
		*slash = 0;
	mkdir(dir, 0755);
	static struct job jobs[MAX_JOBS];
	fprintf(stderr, "lab-agent: watching %s\n", dir);
	for (;;) {
		DIR *d = opendir(dir);
		if (d) {
			struct dirent *de;
			while ((de = readdir(d)) != NULL) {
				const char *name = de->d_name;
				if (name[0] == '.' || strlen(name) >= 90)
					continue;
				if (ends_with(name, ".job")) {
					char id[96];
					snprintf(id, sizeof(id), "%.*s", (int)(strlen(name) - 4), name);
					int slot = -1;
					for (int i = 0; i < MAX_JOBS; i++)
						if (!jobs[i].id[0]) {
							slot = i;
							break;
						}
					if (slot < 0)
						continue; /* busy: leave it queued */
					agent_start(dir, workdir, id, &jobs[slot]);
				} else if (ends_with(name, ".kill")) {
					char id[96], p[512];
					snprintf(id, sizeof(id), "%.*s", (int)(strlen(name) - 5), name);
					for (int i = 0; i < MAX_JOBS; i++)
						if (jobs[i].id[0] && strcmp(jobs[i].id, id) == 0 && jobs[i].pid > 0) {
							kill(-jobs[i].pid, SIGKILL);
							if (!jobs[i].killed)
								jobs[i].killed = 2;
						}
					agent_path(p, sizeof(p), dir, id, ".kill");
					unlink(p);
				}
			}
			closedir(d);
		}
		/* reap */
		for (int iter = 0; iter < MAX_JOBS; iter++) {
			int st;
			pid_t p = waitpid(-1, &st, WNOHANG);
			if (p <= 0)
				break;
			for (int i = 0; i < MAX_JOBS; i++) {
				if (!jobs[i].id[0] || jobs[i].pid != p)
					continue;
				kill(-p, SIGKILL); /* leftovers of the job */
				int rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
				if (jobs[i].killed == 1) {
					char e[512];
					agent_path(e, sizeof(e), dir, jobs[i].id, ".err");
					FILE *f = fopen(e, "a");
					if (f) {
						fprintf(f, "lab-agent: job timed out after %d s and was killed\n",
							jobs[i].timeout_s);
						fclose(f);
					}
					rc = 124;
				}
				agent_write_rc(dir, jobs[i].id, rc);
				jobs[i].id[0] = 0;
			}
		}
		/* time limits */
		uint64_t n = now_ns();
		for (int i = 0; i < MAX_JOBS; i++)
			if (jobs[i].id[0] && !jobs[i].killed && n > jobs[i].deadline) {
				jobs[i].killed = 1;
				kill(-jobs[i].pid, SIGKILL);
			}
		sleep_ms((unsigned)poll_ms);
	}
	return 0;
}

/* ------------------------------------------------------------------------ */

static void usage(void)
{
	puts("usage: rdstool COMMAND [options]   (rdstool COMMAND --help for details)\n"
	     "commands:\n"
	     "  send           send COUNT patterned messages to ADDR:PORT\n"
	     "  recv           receive and verify COUNT patterned messages\n"
	     "  echo           echo every received message to its source\n"
	     "  rr             request/response round trips against `echo`\n"
	     "  ping           zero-length RDS ping to port 0, wait for the pong\n"
	     "  info           print RDS_INFO tables (counters, conns, tcp, sockets, queues)\n"
	     "  wait-conn      wait until a connection shows up as connected\n"
	     "  bind           check what bind() returns\n"
	     "  selftest-peer  one endpoint of the kernel selftest (test.py) traffic\n"
	     "  rdma-target    register a patterned region, offer it, check the peer's RDMA\n"
	     "  rdma-initiator RDMA-read and -write an offered region, with notifications\n"
	     "  pattern        print the payload for (index, size) as hex\n"
	     "  sha256         SHA-256 of an argument or of stdin\n"
	     "  agent          guest side of the lab job spool");
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		usage();
		return 2;
	}
	const char *c = argv[1];
	g_cmd = c;
	setvbuf(stdout, NULL, _IOLBF, 0);
	argc--;
	argv++;
	if (strcmp(c, "send") == 0) return cmd_send(argc, argv);
	if (strcmp(c, "recv") == 0) return cmd_recv(argc, argv);
	if (strcmp(c, "echo") == 0) return cmd_echo(argc, argv);
	if (strcmp(c, "rr") == 0) return cmd_rr(argc, argv);
	if (strcmp(c, "ping") == 0) return cmd_ping(argc, argv);
	if (strcmp(c, "info") == 0) return cmd_info(argc, argv);
	if (strcmp(c, "wait-conn") == 0) return cmd_wait_conn(argc, argv);
	if (strcmp(c, "bind") == 0) return cmd_bind(argc, argv);
	if (strcmp(c, "selftest-peer") == 0) return cmd_selftest_peer(argc, argv);
	if (strcmp(c, "rdma-target") == 0) return cmd_rdma_target(argc, argv);
	if (strcmp(c, "rdma-initiator") == 0) return cmd_rdma_initiator(argc, argv);
	if (strcmp(c, "pattern") == 0) return cmd_pattern(argc, argv);
	if (strcmp(c, "sha256") == 0) return cmd_sha256(argc, argv);
	if (strcmp(c, "agent") == 0) return cmd_agent(argc, argv);
	if (strcmp(c, "help") == 0 || strcmp(c, "--help") == 0 || strcmp(c, "-h") == 0) {
		usage();
		return 0;
	}
	usage();
	return 2;
}
