//! The C side, and the only unsafe code of the library: the exported socket calls
//! (`calls`), each passing a descriptor that is not an RDS one to the next definition of the
//! symbol (the C library's, found with `dlsym(RTLD_NEXT)`: `next`), and copying the C
//! arguments of an RDS one in and out of the safe calls in `ops`; the waits on descriptors
//! (`polls`), which only note the RDS descriptors a program polls; plus [`sys`], the raw calls
//! on the readiness pair, and [`user`], the program's memory behind RDMA arguments.
//!
//! The pointers a program passes are trusted as the kernel would not trust them: a bad one
//! faults here where the kernel would return `EFAULT` (null pointers are checked).

#![allow(unsafe_code)]

mod calls;
mod next;
mod polls;
pub mod sys;
pub mod user;
