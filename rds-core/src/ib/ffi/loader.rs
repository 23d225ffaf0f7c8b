//! The run-time loader: opens `libibverbs.so.1` and `librdmacm.so.1` and resolves the
//! functions the transport calls into [`VerbsFns`] and [`CmFns`].
#![allow(unsafe_code)]
#![allow(non_camel_case_types, missing_docs)]

use std::ffi::{c_char, c_int, c_uint, c_void};

use libloading::Library;

use super::cm::*;
use super::verbs::*;
use crate::ib::error::IbUnavailable;

// ---------------------------------------------------------------------------------------------
// The loader
// ---------------------------------------------------------------------------------------------

/// The soname of the verbs library (Debian package `libibverbs1`).
pub const LIBIBVERBS: &str = "libibverbs.so.1";
/// The soname of the connection manager library (Debian package `librdmacm1`).
pub const LIBRDMACM: &str = "librdmacm.so.1";

/// Function pointers resolved from `libibverbs.so.1`.
#[derive(Clone, Copy)]
pub struct VerbsFns {
    pub ibv_get_device_list: unsafe extern "C" fn(num_devices: *mut c_int) -> *mut *mut ibv_device,
    pub ibv_free_device_list: unsafe extern "C" fn(list: *mut *mut ibv_device),
    pub ibv_get_device_name: unsafe extern "C" fn(device: *mut ibv_device) -> *const c_char,
    pub ibv_open_device: unsafe extern "C" fn(device: *mut ibv_device) -> *mut ibv_context,
    pub ibv_close_device: unsafe extern "C" fn(context: *mut ibv_context) -> c_int,
    pub ibv_query_device:
        unsafe extern "C" fn(context: *mut ibv_context, attr: *mut ibv_device_attr) -> c_int,
    /// The exported `ibv_query_port@@IBVERBS_1.1` (fills the compat prefix of the struct).
    pub ibv_query_port: unsafe extern "C" fn(
        context: *mut ibv_context,
        port_num: u8,
        attr: *mut ibv_port_attr,
    ) -> c_int,
    pub ibv_query_gid: unsafe extern "C" fn(
        context: *mut ibv_context,
        port_num: u8,
        index: c_int,
        gid: *mut ibv_gid,
    ) -> c_int,
    pub ibv_alloc_pd: unsafe extern "C" fn(context: *mut ibv_context) -> *mut ibv_pd,
    pub ibv_dealloc_pd: unsafe extern "C" fn(pd: *mut ibv_pd) -> c_int,
    pub ibv_reg_mr: unsafe extern "C" fn(
        pd: *mut ibv_pd,
        addr: *mut c_void,
        length: usize,
        access: c_int,
    ) -> *mut ibv_mr,
    pub ibv_dereg_mr: unsafe extern "C" fn(mr: *mut ibv_mr) -> c_int,
    /// `ibv_reg_mr_iova@@IBVERBS_1.7`: registers memory at `addr` that the adapter addresses
    /// as `iova` (zero-based regions, as the kernel's RDS registers them).
    pub ibv_reg_mr_iova: unsafe extern "C" fn(
        pd: *mut ibv_pd,
        addr: *mut c_void,
        length: usize,
        iova: u64,
        access: c_int,
    ) -> *mut ibv_mr,
    pub ibv_create_comp_channel:
        unsafe extern "C" fn(context: *mut ibv_context) -> *mut ibv_comp_channel,
    pub ibv_destroy_comp_channel: unsafe extern "C" fn(channel: *mut ibv_comp_channel) -> c_int,
    pub ibv_create_cq: unsafe extern "C" fn(
        context: *mut ibv_context,
        cqe: c_int,
        cq_context: *mut c_void,
        channel: *mut ibv_comp_channel,
        comp_vector: c_int,
    ) -> *mut ibv_cq,
    pub ibv_destroy_cq: unsafe extern "C" fn(cq: *mut ibv_cq) -> c_int,
    pub ibv_get_cq_event: unsafe extern "C" fn(
        channel: *mut ibv_comp_channel,
        cq: *mut *mut ibv_cq,
        cq_context: *mut *mut c_void,
    ) -> c_int,
    pub ibv_ack_cq_events: unsafe extern "C" fn(cq: *mut ibv_cq, nevents: c_uint),
    pub ibv_create_qp:
        unsafe extern "C" fn(pd: *mut ibv_pd, attr: *mut ibv_qp_init_attr) -> *mut ibv_qp,
    pub ibv_modify_qp:
        unsafe extern "C" fn(qp: *mut ibv_qp, attr: *mut ibv_qp_attr, mask: c_int) -> c_int,
    pub ibv_destroy_qp: unsafe extern "C" fn(qp: *mut ibv_qp) -> c_int,
    pub ibv_wc_status_str: unsafe extern "C" fn(status: ibv_wc_status) -> *const c_char,
}

/// Function pointers resolved from `librdmacm.so.1`.
#[derive(Clone, Copy)]
pub struct CmFns {
    pub rdma_create_event_channel: unsafe extern "C" fn() -> *mut rdma_event_channel,
    pub rdma_destroy_event_channel: unsafe extern "C" fn(channel: *mut rdma_event_channel),
    pub rdma_create_id: unsafe extern "C" fn(
        channel: *mut rdma_event_channel,
        id: *mut *mut rdma_cm_id,
        context: *mut c_void,
        ps: rdma_port_space,
    ) -> c_int,
    pub rdma_destroy_id: unsafe extern "C" fn(id: *mut rdma_cm_id) -> c_int,
    pub rdma_bind_addr:
        unsafe extern "C" fn(id: *mut rdma_cm_id, addr: *mut libc::sockaddr) -> c_int,
    pub rdma_listen: unsafe extern "C" fn(id: *mut rdma_cm_id, backlog: c_int) -> c_int,
    pub rdma_resolve_addr: unsafe extern "C" fn(
        id: *mut rdma_cm_id,
        src: *mut libc::sockaddr,
        dst: *mut libc::sockaddr,
        timeout_ms: c_int,
    ) -> c_int,
    pub rdma_resolve_route: unsafe extern "C" fn(id: *mut rdma_cm_id, timeout_ms: c_int) -> c_int,
    pub rdma_connect:
        unsafe extern "C" fn(id: *mut rdma_cm_id, param: *mut rdma_conn_param) -> c_int,
    pub rdma_accept:
        unsafe extern "C" fn(id: *mut rdma_cm_id, param: *mut rdma_conn_param) -> c_int,
    pub rdma_reject: unsafe extern "C" fn(
        id: *mut rdma_cm_id,
        private_data: *const c_void,
        private_data_len: u8,
    ) -> c_int,
    pub rdma_disconnect: unsafe extern "C" fn(id: *mut rdma_cm_id) -> c_int,
    pub rdma_get_cm_event: unsafe extern "C" fn(
        channel: *mut rdma_event_channel,
        event: *mut *mut rdma_cm_event,
    ) -> c_int,
    pub rdma_ack_cm_event: unsafe extern "C" fn(event: *mut rdma_cm_event) -> c_int,
    pub rdma_create_qp: unsafe extern "C" fn(
        id: *mut rdma_cm_id,
        pd: *mut ibv_pd,
        attr: *mut ibv_qp_init_attr,
    ) -> c_int,
    pub rdma_destroy_qp: unsafe extern "C" fn(id: *mut rdma_cm_id),
    pub rdma_event_str: unsafe extern "C" fn(event: rdma_cm_event_type) -> *const c_char,
}

/// Both libraries, opened, with every function we call resolved. The libraries stay loaded
/// as long as this value lives (the process-wide instance from [`super::lib`] is never
/// dropped), so the copied function pointers stay valid.
pub struct IbLib {
    /// `libibverbs` functions.
    pub verbs: VerbsFns,
    /// `librdmacm` functions.
    pub cm: CmFns,
    verbs_name: String,
    cm_name: String,
    _verbs_lib: Library,
    _cm_lib: Library,
}

impl std::fmt::Debug for IbLib {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IbLib")
            .field("verbs", &self.verbs_name)
            .field("cm", &self.cm_name)
            .finish_non_exhaustive()
    }
}

fn open(name: &str) -> Result<Library, IbUnavailable> {
    // SAFETY: loading a shared library runs its initialisers. libibverbs and librdmacm (and the
    // libraries they pull in: libnl, the providers) only set up their own state; they have no
    // initialisers that conflict with this process.
    unsafe { Library::new(name) }.map_err(|e| IbUnavailable::LibraryMissing {
        library: name.to_string(),
        package: package_of(name),
        detail: e.to_string(),
    })
}

/// The Debian package that ships a library (for the "install X" hint).
fn package_of(name: &str) -> &'static str {
    if name.contains("rdmacm") {
        "librdmacm1"
    } else {
        "libibverbs1 (and ibverbs-providers)"
    }
}

macro_rules! resolve {
    ($lib:expr, $libname:expr, $ty:ident { $($f:ident),* $(,)? }) => {
        $ty {
            $($f: {
                // SAFETY: the symbol is looked up by its C name, and the field's type is the
                // function's C prototype from rdma-core 44 (checked against the headers by
                // tests/ib_layout.rs where it matters: the structs passed by pointer). The
                // pointer is copied out of the `Symbol`; the `Library` is stored next to it in
                // `IbLib`, so it outlives every use.
                let sym = unsafe { $lib.get(concat!(stringify!($f), "\0").as_bytes()) }
                    .map_err(|e| IbUnavailable::SymbolMissing {
                        library: $libname.to_string(),
                        symbol: stringify!($f),
                        detail: e.to_string(),
                    })?;
                *sym
            },)*
        }
    };
}

impl IbLib {
    /// Opens `libibverbs.so.1` and `librdmacm.so.1` and resolves every function.
    ///
    /// # Errors
    /// [`IbUnavailable::LibraryMissing`] or [`IbUnavailable::SymbolMissing`].
    pub fn open() -> Result<IbLib, IbUnavailable> {
        Self::open_named(LIBIBVERBS, LIBRDMACM)
    }

    /// Like [`IbLib::open`] with other library file names: a test and diagnostics hook (a
    /// missing name shows the error a host without rdma-core gets).
    ///
    /// # Errors
    /// [`IbUnavailable::LibraryMissing`] or [`IbUnavailable::SymbolMissing`].
    pub fn open_named(verbs_name: &str, cm_name: &str) -> Result<IbLib, IbUnavailable> {
        let verbs_lib = open(verbs_name)?;
        let verbs = resolve!(
            verbs_lib,
            verbs_name,
            VerbsFns {
                ibv_get_device_list,
                ibv_free_device_list,
                ibv_get_device_name,
                ibv_open_device,
                ibv_close_device,
                ibv_query_device,
                ibv_query_port,
                ibv_query_gid,
                ibv_alloc_pd,
                ibv_dealloc_pd,
                ibv_reg_mr,
                ibv_dereg_mr,
                ibv_reg_mr_iova,
                ibv_create_comp_channel,
                ibv_destroy_comp_channel,
                ibv_create_cq,
                ibv_destroy_cq,
                ibv_get_cq_event,
                ibv_ack_cq_events,
                ibv_create_qp,
                ibv_modify_qp,
                ibv_destroy_qp,
                ibv_wc_status_str,
            }
        );
        let cm_lib = open(cm_name)?;
        let cm = resolve!(
            cm_lib,
            cm_name,
            CmFns {
                rdma_create_event_channel,
                rdma_destroy_event_channel,
                rdma_create_id,
                rdma_destroy_id,
                rdma_bind_addr,
                rdma_listen,
                rdma_resolve_addr,
                rdma_resolve_route,
                rdma_connect,
                rdma_accept,
                rdma_reject,
                rdma_disconnect,
                rdma_get_cm_event,
                rdma_ack_cm_event,
                rdma_create_qp,
                rdma_destroy_qp,
                rdma_event_str,
            }
        );
        Ok(IbLib {
            verbs,
            cm,
            verbs_name: verbs_name.to_string(),
            cm_name: cm_name.to_string(),
            _verbs_lib: verbs_lib,
            _cm_lib: cm_lib,
        })
    }

    /// The verbs library file name this was opened from.
    pub fn verbs_name(&self) -> &str {
        &self.verbs_name
    }

    /// The connection manager library file name this was opened from.
    pub fn cm_name(&self) -> &str {
        &self.cm_name
    }
}
