//! Raw C declarations for the part of rdma-core an RDS-over-verbs transport uses, and the
//! run-time loader for `libibverbs.so.1` and `librdmacm.so.1`. By job: `verbs.rs`
//! (`<infiniband/verbs.h>`), `cm.rs` (`<rdma/rdma_cma.h>`) and `loader.rs` (opening the two
//! libraries and resolving their symbols); everything is re-exported here as `ffi::X`.
//!
//! Contract:
//! - Every `#[repr(C)]` type of this folder has the size, alignment and field offsets of the C type of the
//!   same name in rdma-core 44 (Debian bookworm) `<infiniband/verbs.h>` and `<rdma/rdma_cma.h>`
//!   on the build target. `rds-core/tests/ib_layout.rs` compiles a C program against the
//!   installed headers and checks every bound field and every constant against these
//!   definitions.
//! - Only what the transport reads or writes is bound field by field. Where a C type is larger
//!   than what we use (a union arm, a tail), the rest is still declared so that sizes match and
//!   arrays and embedded structs are laid out exactly as in C.
//! - C anonymous unions become named fields (`ibv_wc::imm_data`, `ibv_send_wr::imm_data`,
//!   `rdma_addr::src_storage`): for unions whose arms all have the same size and alignment a
//!   single arm is bound.
//! - Enums are plain integer constants (`c_int` / `u32`): a value the library returns that this
//!   file does not know must never be undefined behaviour.
//! - The inline verbs of `verbs.h` (`ibv_post_send`, `ibv_post_recv`, `ibv_poll_cq`,
//!   `ibv_req_notify_cq`) are not library symbols: they call through `context->ops`, and so do
//!   the wrappers in [`super::qp`] and [`super::cq`].
//! - `ibv_query_port` in `verbs.h` is a macro around an inline function that prefers the
//!   extended `verbs_context` op; the exported `ibv_query_port@@IBVERBS_1.1` takes the
//!   "compat" attribute struct, which is the prefix of [`ibv_port_attr`] up to and including
//!   `flags` (it fills that prefix only; `port_cap_flags2` stays zero). `ibv_reg_mr` is a macro
//!   that calls the exported `ibv_reg_mr@@IBVERBS_1.1` unless `IBV_ACCESS_OPTIONAL_RANGE` flags
//!   are used, which we never do. `dlsym` of an unversioned name returns the default (`@@`)
//!   version, which is the one matching these layouts (the `@IBVERBS_1.0` compat symbols use
//!   older structs).
//!
//! Everything here is `unsafe` to use; the other files of [`super`] are the safe layer.
#![allow(unsafe_code)]
#![allow(non_camel_case_types, missing_docs)]

mod cm;
mod loader;
mod verbs;

pub use cm::*;
pub use loader::*;
pub use verbs::*;
