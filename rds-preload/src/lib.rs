//! AF_RDS for unmodified programs: with `LD_PRELOAD=librds_preload.so`, a program's
//! `socket(AF_RDS, SOCK_SEQPACKET, 0)` returns a real descriptor served by this project's
//! userspace stack (`rds_core::Socket`), and every socket call on it behaves as on the kernel's
//! RDS, with the kernel's structures, constants and errno values. Every other descriptor passes
//! through to the C library untouched.
//!
//! Layers, top down:
//! - `ffi`: the only unsafe code. `ffi::calls`, the exported C symbols (`socket`, `bind`,
//!   `sendmsg`, `recvmsg`, `setsockopt`, `fcntl`, `close`, `dup2`, ...), each forwarding
//!   descriptors that are not ours to the next definition (`ffi::next`, `dlsym(RTLD_NEXT)`)
//!   and copying C structures to and from Rust values; `ffi::sys`, the raw system calls on
//!   the readiness socket pair (used by the layers below `calls`).
//! - `ops`: the socket calls on Rust values (addresses, byte slices, option values), returning
//!   the kernel's errno on failure.
//! - `info`: the `RDS_INFO_*` getsockopt tables in the `linux/rds.h` layouts.
//! - `sock`: one RDS descriptor (`Entry`: the `rds_core::Socket` and its readiness pair), the
//!   descriptor table and the thread that keeps readiness in step.
//! - `abi`: the `sys/socket.h` constants this library speaks that `libc` lacks; the
//!   `linux/rds.h` ones are `rds_core::abi`.
//! - `logger`: the logger behind the `log` facade, for this library's messages and
//!   `rds-core`'s (`RDS_LOG`; `RDS_PRELOAD_LOG=1` is `RDS_LOG=debug`, each call a line).
//!
//! Readiness: the descriptor handed to the program is one end of a `socketpair(AF_UNIX,
//! SOCK_STREAM)`. It is readable (POLLIN) exactly while a receive would return something (one
//! byte waits on it) and writable (POLLOUT) exactly while the send buffer has room (when not,
//! its own send buffer is filled), so `poll`, `select`, `epoll` and any event loop work on it
//! unchanged, in sets mixed with any other descriptors.
//!
//! Fork: a child that execs is unaffected (the inherited descriptor is an ordinary socket the
//! new program does not use). A forked child that does not exec cannot use an RDS socket of its
//! parent (the stack's threads live in the parent): every call on an inherited RDS descriptor
//! fails with `EBADFD`, `close` works, and `socket(AF_RDS)` fails with `EAFNOSUPPORT` when the
//! parent had used RDS (a child of a parent that never did has the full stack).

#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod abi;
mod ffi;
mod info_opts;
mod logger;
mod ops;
mod rdma_cmsg;
mod sock;
