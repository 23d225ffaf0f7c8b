/*
 * RDS RDMA through the kernel's API, as an unmodified program uses it: one side (target)
 * registers a buffer with RDS_CMSG_RDMA_MAP and sends its cookie; the other (initiator)
 * receives the cookie as RDS_CMSG_RDMA_DEST, RDMA-writes the first half of the region and
 * RDMA-reads the second (RDS_CMSG_RDMA_ARGS with RDS_RDMA_NOTIFY_ME), and reports the
 * RDS_CMSG_RDMA_STATUS notifications; the target checks what the write put into its memory.
 * Each side prints one line per step, the same against the kernel's RDS and over
 * librds_preload.so.
 *
 *   rds_rdma initiator LADDR PEER PORT    (start first: it prints "bound")
 *   rds_rdma target    LADDR PEER PORT
 *   rds_rdma target-getmr LADDR PEER PORT (registers with RDS_GET_MR and hands the cookie
 *                                          over with RDS_CMSG_RDMA_DEST; frees it at the end)
 *
 * Exit 0 when every step worked, 1 otherwise (with the failing call and errno).
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <unistd.h>

#define AF_RDS_ 21
#define SOL_RDS_ 276
#define RDS_GET_MR_ 2
#define RDS_FREE_MR_ 3
#define RDS_CMSG_RDMA_ARGS_ 1
#define RDS_CMSG_RDMA_DEST_ 2
#define RDS_CMSG_RDMA_MAP_ 3
#define RDS_CMSG_RDMA_STATUS_ 4
#define RDS_RDMA_READWRITE_ 0x1
#define RDS_RDMA_FENCE_ 0x2
#define RDS_RDMA_NOTIFY_ME_ 0x20

#define HALF 8192

struct iov_ { uint64_t addr, bytes; };
struct get_mr_args_ { struct iov_ vec; uint64_t cookie_addr, flags; };
struct rdma_args_ {
	uint64_t cookie;
	struct iov_ remote_vec;
	uint64_t local_vec_addr, nr_local, flags, user_token;
};
struct notify_ { uint64_t user_token; int32_t status; };

static int fd;
static struct sockaddr_in peer;

static void die(const char *what)
{
	printf("%s: -1 errno %d (%s)\n", what, errno, strerror(errno));
	exit(1);
}

static unsigned char wpat(size_t i) { return (unsigned char)(i * 13 + 1); }
static unsigned char rpat(size_t i) { return (unsigned char)(i * 7 + 3); }

static struct sockaddr_in addr(const char *ip, int port)
{
	struct sockaddr_in a;
	memset(&a, 0, sizeof(a));
	a.sin_family = AF_INET;
	a.sin_port = htons(port);
	if (inet_pton(AF_INET, ip, &a.sin_addr) != 1) {
		printf("bad address %s\n", ip);
		exit(2);
	}
	return a;
}

/* Sends `text` to the peer with one SOL_RDS control message. */
static void send_ctl(const char *text, int type, const void *data, size_t len)
{
	char ctl[CMSG_SPACE(sizeof(struct rdma_args_))];
	struct iovec iov = { (void *)text, strlen(text) };
	struct msghdr mh;
	struct cmsghdr *c;
	int tries;

	memset(ctl, 0, sizeof(ctl));
	memset(&mh, 0, sizeof(mh));
	mh.msg_name = &peer;
	mh.msg_namelen = sizeof(peer);
	mh.msg_iov = &iov;
	mh.msg_iovlen = 1;
	mh.msg_control = ctl;
	mh.msg_controllen = CMSG_SPACE(len);
	c = CMSG_FIRSTHDR(&mh);
	c->cmsg_level = SOL_RDS_;
	c->cmsg_type = type;
	c->cmsg_len = CMSG_LEN(len);
	memcpy(CMSG_DATA(c), data, len);
	/* The kernel's RDS/IB answers EAGAIN while the connection a registration needs comes up
	 * (and starts connecting): retry for up to 10 s. */
	for (tries = 0; sendmsg(fd, &mh, 0) < 0; tries++) {
		if (errno != EAGAIN || tries == 200)
			die("sendmsg");
		usleep(50000);
	}
}

/* Receives one item: a message (its text in `buf`, a RDMA_DEST cookie in *cookie) or a
 * notification (*token, *status). Returns the message length, or -1 for a notification. */
static int recv_one(char *buf, size_t cap, uint64_t *cookie, uint64_t *token, int32_t *status)
{
	char ctl[256];
	struct iovec iov = { buf, cap - 1 };
	struct msghdr mh;
	struct cmsghdr *c;
	ssize_t n;
	int notified = 0;

	memset(&mh, 0, sizeof(mh));
	mh.msg_iov = &iov;
	mh.msg_iovlen = 1;
	mh.msg_control = ctl;
	mh.msg_controllen = sizeof(ctl);
	n = recvmsg(fd, &mh, 0);
	if (n < 0)
		die("recvmsg");
	buf[n] = 0;
	for (c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
		if (c->cmsg_level != SOL_RDS_)
			continue;
		if (c->cmsg_type == RDS_CMSG_RDMA_DEST_ && cookie)
			memcpy(cookie, CMSG_DATA(c), 8);
		if (c->cmsg_type == RDS_CMSG_RDMA_STATUS_) {
			struct notify_ nt;
			memcpy(&nt, CMSG_DATA(c), sizeof(nt));
			*token = nt.user_token;
			*status = nt.status;
			notified = 1;
		}
	}
	return notified ? -1 : (int)n;
}

static void rdma(uint64_t cookie, uint64_t remote, void *local, uint64_t flags,
		 uint64_t token, const char *text)
{
	struct iov_ v = { (uintptr_t)local, HALF };
	struct rdma_args_ a = { cookie, { remote, HALF }, (uintptr_t)&v, 1, flags, token };
	char buf[64];
	uint64_t got = 0;
	int32_t status = -1;

	send_ctl(text, RDS_CMSG_RDMA_ARGS_, &a, sizeof(a));
	while (recv_one(buf, sizeof(buf), NULL, &got, &status) >= 0)
		;
	printf("initiator: RDMA %s notified: token 0x%llx status %d\n",
	       flags & RDS_RDMA_READWRITE_ ? "write" : "read", (unsigned long long)got, status);
}

static void initiator(void)
{
	unsigned char *w = aligned_alloc(4096, HALF), *r = aligned_alloc(4096, HALF);
	char buf[64];
	uint64_t cookie = 0, tok;
	int32_t st;
	size_t i;

	printf("initiator: bound\n");
	fflush(stdout);
	if (recv_one(buf, sizeof(buf), &cookie, &tok, &st) < 0 || strcmp(buf, "map") || !cookie) {
		printf("initiator: expected \"map\" with a cookie, got \"%s\" cookie %d\n", buf,
		       cookie != 0);
		exit(1);
	}
	printf("initiator: \"map\" came with a cookie (RDS_CMSG_RDMA_DEST), offset %u\n",
	       (unsigned)(cookie >> 32));
	for (i = 0; i < HALF; i++)
		w[i] = wpat(i);
	memset(r, 0, HALF);
	rdma(cookie, 0, w, RDS_RDMA_READWRITE_ | RDS_RDMA_NOTIFY_ME_, 0x1111, "wrote");
	rdma(cookie, HALF, r, RDS_RDMA_FENCE_ | RDS_RDMA_NOTIFY_ME_, 0x2222, "read");
	for (i = 0; i < HALF && r[i] == rpat(i); i++)
		;
	if (i < HALF) {
		printf("initiator: the RDMA read brought a wrong byte at %zu\n", i);
		exit(1);
	}
	printf("initiator: the RDMA read brought the target's %d bytes\n", HALF);
}

static void target(int getmr)
{
	unsigned char *b = aligned_alloc(4096, 2 * HALF);
	struct get_mr_args_ m;
	uint64_t cookie = 0, tok;
	int32_t st;
	char buf[64];
	size_t i;

	memset(b, 0, HALF);
	for (i = 0; i < HALF; i++)
		b[HALF + i] = rpat(i);
	m.vec.addr = (uintptr_t)b;
	m.vec.bytes = 2 * HALF;
	m.cookie_addr = (uintptr_t)&cookie;
	m.flags = 0;
	if (getmr) {
		if (setsockopt(fd, SOL_RDS_, RDS_GET_MR_, &m, sizeof(m)) < 0)
			die("setsockopt(RDS_GET_MR)");
		printf("target: registered %d bytes (RDS_GET_MR), cookie written: %s, offset %u\n",
		       2 * HALF, cookie ? "yes" : "no", (unsigned)(cookie >> 32));
		send_ctl("map", RDS_CMSG_RDMA_DEST_, &cookie, sizeof(cookie));
	} else {
		send_ctl("map", RDS_CMSG_RDMA_MAP_, &m, sizeof(m));
		printf("target: mapped %d bytes (RDS_CMSG_RDMA_MAP), cookie written: %s, offset %u\n",
		       2 * HALF, cookie ? "yes" : "no", (unsigned)(cookie >> 32));
	}
	if (recv_one(buf, sizeof(buf), NULL, &tok, &st) < 0 || strcmp(buf, "wrote")) {
		printf("target: expected \"wrote\", got \"%s\"\n", buf);
		exit(1);
	}
	for (i = 0; i < HALF && b[i] == wpat(i); i++)
		;
	if (i < HALF) {
		printf("target: the RDMA write left a wrong byte at %zu\n", i);
		exit(1);
	}
	printf("target: \"wrote\" arrived after the RDMA write put %d bytes in place\n", HALF);
	if (recv_one(buf, sizeof(buf), NULL, &tok, &st) < 0 || strcmp(buf, "read")) {
		printf("target: expected \"read\", got \"%s\"\n", buf);
		exit(1);
	}
	printf("target: \"read\" arrived\n");
	if (getmr) {
		struct { uint64_t cookie, flags; } f = { cookie, 0 };
		if (setsockopt(fd, SOL_RDS_, RDS_FREE_MR_, &f, sizeof(f)) < 0)
			die("setsockopt(RDS_FREE_MR)");
		printf("target: RDS_FREE_MR released the region\n");
		if (setsockopt(fd, SOL_RDS_, RDS_FREE_MR_, &f, sizeof(f)) == 0 || errno != EINVAL)
			die("a second RDS_FREE_MR (want EINVAL)");
		printf("target: a second RDS_FREE_MR: EINVAL\n");
	}
}

int main(int argc, char **argv)
{
	struct sockaddr_in me;
	struct timeval tv = { 30, 0 };

	if (argc != 5 || (strcmp(argv[1], "initiator") && strcmp(argv[1], "target") &&
			  strcmp(argv[1], "target-getmr"))) {
		fprintf(stderr, "usage: %s initiator|target|target-getmr LADDR PEER PORT\n",
			argv[0]);
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	me = addr(argv[2], atoi(argv[4]));
	peer = addr(argv[3], atoi(argv[4]));
	fd = socket(AF_RDS_, SOCK_SEQPACKET, 0);
	if (fd < 0)
		die("socket");
	if (bind(fd, (struct sockaddr *)&me, sizeof(me)) < 0)
		die("bind");
	if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) < 0)
		die("setsockopt(SO_RCVTIMEO)");
	if (!strcmp(argv[1], "initiator"))
		initiator();
	else
		target(!strcmp(argv[1], "target-getmr"));
	return 0;
}
