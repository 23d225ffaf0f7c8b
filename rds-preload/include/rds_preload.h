/*
 * rds_preload.h: the RDS socket ABI of librds_preload.so, for programs that link the library
 * directly (cc prog.c -lrds_preload) instead of loading it with LD_PRELOAD.
 *
 * The library exports the socket calls themselves (socket, bind, connect, getsockname,
 * getpeername, sendto, sendmsg, send, write, writev, recvfrom, recvmsg, recv, read, readv,
 * setsockopt, getsockopt, fcntl, ioctl, close, dup, dup2, dup3): linked or preloaded, they
 * take the place of the C library's for AF_RDS sockets and pass every other descriptor on.
 * So a program uses the ordinary prototypes of <sys/socket.h> with the constants and
 * structures of <linux/rds.h>; this header repeats the numbers it needs, for systems without
 * the kernel headers, with the kernel's values. See rds-preload(8).
 */
#ifndef RDS_PRELOAD_H
#define RDS_PRELOAD_H

#include <stdint.h>
#include <sys/socket.h>

#ifndef AF_RDS
#define AF_RDS 21
#endif
#ifndef PF_RDS
#define PF_RDS AF_RDS
#endif
#ifndef SOL_RDS
#define SOL_RDS 276
#endif

#ifndef _LINUX_RDS_H
/* setsockopt/getsockopt(SOL_RDS, ...) */
#define RDS_CANCEL_SENT_TO 1
#define RDS_GET_MR 2
#define RDS_FREE_MR 3
#define RDS_RECVERR 5
#define RDS_CONG_MONITOR 6
#define RDS_GET_MR_FOR_DEST 7
#define SO_RDS_TRANSPORT 8

/* SO_RDS_TRANSPORT values */
#define RDS_TRANS_IB 0
#define RDS_TRANS_GAP 1
#define RDS_TRANS_TCP 2
#define RDS_TRANS_COUNT 3
#define RDS_TRANS_NONE (~0)

/* ioctl, a uint8_t */
#define SIOCRDSSETTOS 0x89E0
#define SIOCRDSGETTOS 0x89E1

/* cmsg_type at SOL_RDS */
#define RDS_CMSG_RDMA_ARGS 1
#define RDS_CMSG_RDMA_DEST 2
#define RDS_CMSG_RDMA_MAP 3
#define RDS_CMSG_RDMA_STATUS 4
#define RDS_CMSG_CONG_UPDATE 5
#define RDS_CMSG_ATOMIC_FADD 6
#define RDS_CMSG_ATOMIC_CSWP 7
#define RDS_CMSG_MASKED_ATOMIC_FADD 8
#define RDS_CMSG_MASKED_ATOMIC_CSWP 9

/* getsockopt(SOL_RDS, RDS_INFO_*): ENOSPC and the needed length in *optlen when the buffer
 * is short; on success the element size, *optlen being the table's length. */
#define RDS_INFO_FIRST 10000
#define RDS_INFO_COUNTERS 10000
#define RDS_INFO_CONNECTIONS 10001
#define RDS_INFO_SEND_MESSAGES 10003
#define RDS_INFO_RETRANS_MESSAGES 10004
#define RDS_INFO_RECV_MESSAGES 10005
#define RDS_INFO_SOCKETS 10006
#define RDS_INFO_TCP_SOCKETS 10007
#define RDS_INFO_IB_CONNECTIONS 10008
#define RDS6_INFO_CONNECTIONS 10011
#define RDS6_INFO_SEND_MESSAGES 10012
#define RDS6_INFO_RETRANS_MESSAGES 10013
#define RDS6_INFO_RECV_MESSAGES 10014
#define RDS6_INFO_SOCKETS 10015
#define RDS6_INFO_TCP_SOCKETS 10016
#define RDS6_INFO_IB_CONNECTIONS 10017
#define RDS_INFO_LAST 10017

#define RDS_INFO_CONNECTION_FLAG_SENDING 0x01
#define RDS_INFO_CONNECTION_FLAG_CONNECTING 0x02
#define RDS_INFO_CONNECTION_FLAG_CONNECTED 0x04

/* The table records, packed as the kernel's. */
struct rds_info_counter {
	uint8_t name[32];
	uint64_t value;
} __attribute__((packed));

struct rds_info_connection {
	uint64_t next_tx_seq;
	uint64_t next_rx_seq;
	uint32_t laddr; /* network order */
	uint32_t faddr; /* network order */
	uint8_t transport[16];
	uint8_t flags;
	uint8_t tos;
} __attribute__((packed));

struct rds_info_message {
	uint64_t seq;
	uint32_t len;
	uint32_t laddr;
	uint32_t faddr;
	uint16_t lport;
	uint16_t fport;
	uint8_t flags;
	uint8_t tos;
} __attribute__((packed));

struct rds_info_socket {
	uint32_t sndbuf;
	uint32_t bound_addr;
	uint32_t connected_addr;
	uint16_t bound_port;
	uint16_t connected_port;
	uint32_t rcvbuf;
	uint64_t inum;
} __attribute__((packed));

struct rds_info_tcp_socket {
	uint32_t local_addr;
	uint16_t local_port;
	uint32_t peer_addr;
	uint16_t peer_port;
	uint64_t hdr_rem;
	uint64_t data_rem;
	uint32_t last_sent_nxt;
	uint32_t last_expected_una;
	uint32_t last_seen_una;
	uint8_t tos;
} __attribute__((packed));

/* RDS_CMSG_RDMA_STATUS data */
struct rds_rdma_notify {
	uint64_t user_token;
	int32_t status;
};

/* RDS_FREE_MR argument */
struct rds_free_mr_args {
	uint64_t cookie;
	uint64_t flags;
};
#endif /* _LINUX_RDS_H */

#endif /* RDS_PRELOAD_H */
