//! Helpers shared by the workspace-level tests (network namespaces, the kernel interop lab,
//! fault-injecting proxies, tshark). Each submodule documents its own contract.

pub mod faultnet;
pub mod ib;
pub mod interop;
pub mod lab;
pub mod manpage;
pub mod peer;
