//! Safe wrappers over the verbs: the device list, device contexts, protection domains, memory
//! regions, completion queues (with their completion channel for epoll) and queue pairs.
//!
//! Contract:
//! - Every wrapper releases its object on drop, and holds a reference-counted handle to what it
//!   was created from, so destruction always runs children first: a [`Qp`] keeps its [`Pd`] and
//!   [`Cq`]s alive, an [`Mr`] its [`Pd`], a [`Pd`] / [`Cq`] its [`Context`].
//! - libibverbs verbs are thread-safe, so the handles are `Send + Sync` and take `&self`.
//! - An [`Mr`] owns its memory (page-aligned, page-rounded, zeroed). Dropping it deregisters the
//!   region *before* freeing the memory; once `ibv_dereg_mr` has returned the adapter can no
//!   longer touch it (work requests still naming it complete with an error). If deregistration
//!   fails the memory is leaked rather than freed. The adapter may write registered memory at
//!   any time (receives, RDMA writes and reads), so the bytes are only reachable through copies
//!   ([`Mr::read_at`], [`Mr::write_at`]), never through Rust references.
//! - A [`Sge`] can only be made from an [`Mr`] and a range inside it, and borrows the `Mr`.
//! - `post_send`, `post_recv`, `poll_cq` and `req_notify_cq` call the provider through
//!   `context->ops`, as the inline functions of `verbs.h` do.
//! - A completion queue created with a channel owns that channel (one channel per queue); its
//!   fd is non-blocking, for epoll. Every event taken from it is acknowledged at once, so
//!   destroying the queue never waits for unacknowledged events.
#![allow(unsafe_code)]

use std::alloc::Layout;
use std::ffi::{c_int, c_void, CStr};
use std::fmt;
use std::io;
use std::marker::PhantomData;
use std::net::Ipv6Addr;
use std::os::fd::RawFd;
use std::ptr::{self, NonNull};
use std::sync::Arc;

use super::ffi;
use super::mem::DmaMem;
use super::IbLib;

/// A failed verbs call.
#[derive(Debug, thiserror::Error)]
#[error("{op}: {source}")]
pub struct VerbsError {
    /// The C function that failed (`ibv_create_cq`, `post_send`, ...).
    pub op: &'static str,
    /// The errno it reported.
    #[source]
    pub source: io::Error,
}

impl VerbsError {
    pub(crate) fn new(op: &'static str, source: io::Error) -> Self {
        VerbsError { op, source }
    }

    /// From `errno` after a call that returned NULL or -1.
    pub(crate) fn errno(op: &'static str) -> Self {
        let e = io::Error::last_os_error();
        let source = if e.raw_os_error() == Some(0) {
            io::Error::other("failed without an errno")
        } else {
            e
        };
        VerbsError { op, source }
    }

    /// From a return code that is an errno value (positive), or -1 with `errno` set, or a
    /// negative errno.
    pub(crate) fn rc(op: &'static str, rc: c_int) -> Self {
        if rc > 0 {
            return VerbsError::new(op, io::Error::from_raw_os_error(rc));
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(n) if n != 0 && rc == -1 => VerbsError::new(op, e),
            _ if rc < -1 => VerbsError::new(op, io::Error::from_raw_os_error(-rc)),
            _ => VerbsError::new(op, io::Error::other(format!("failed with {rc}"))),
        }
    }

    /// An argument problem found before calling the library.
    pub(crate) fn invalid(op: &'static str, what: impl Into<String>) -> Self {
        VerbsError::new(op, io::Error::new(io::ErrorKind::InvalidInput, what.into()))
    }
}

fn check(op: &'static str, rc: c_int) -> Result<(), VerbsError> {
    if rc == 0 {
        Ok(())
    } else {
        Err(VerbsError::rc(op, rc))
    }
}

pub(crate) fn set_nonblocking(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl on an fd this module owns (a channel fd); F_GETFL has no pointer argument.
    let fl = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if fl < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above; F_SETFL takes an int.
    if unsafe { libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn c_chars_to_string(chars: &[std::ffi::c_char]) -> String {
    let bytes: Vec<u8> = chars
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

macro_rules! c_enum {
    ($(#[$m:meta])* $name:ident : $raw:ty { $($(#[$vm:meta])* $v:ident = $c:path),* $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$vm])* $v,)*
            /// A value this binding does not know.
            Unknown($raw),
        }
        impl From<$raw> for $name {
            fn from(raw: $raw) -> Self {
                match raw {
                    $(x if x == $c => $name::$v,)*
                    other => $name::Unknown(other),
                }
            }
        }
        impl From<$name> for $raw {
            fn from(v: $name) -> $raw {
                match v {
                    $($name::$v => $c,)*
                    $name::Unknown(other) => other,
                }
            }
        }
    };
}

c_enum!(
    /// `enum ibv_node_type`.
    NodeType: i32 {
        /// Channel adapter (InfiniBand HCA, RoCE NIC, rxe).
        Ca = ffi::IBV_NODE_CA,
        /// Switch.
        Switch = ffi::IBV_NODE_SWITCH,
        /// Router.
        Router = ffi::IBV_NODE_ROUTER,
        /// iWARP NIC.
        Rnic = ffi::IBV_NODE_RNIC,
        /// usNIC.
        Usnic = ffi::IBV_NODE_USNIC,
        /// usNIC UDP.
        UsnicUdp = ffi::IBV_NODE_USNIC_UDP,
        /// Unspecified.
        Unspecified = ffi::IBV_NODE_UNSPECIFIED,
    }
);

c_enum!(
    /// `enum ibv_transport_type`.
    Transport: i32 {
        /// InfiniBand transport (InfiniBand and RoCE).
        Ib = ffi::IBV_TRANSPORT_IB,
        /// iWARP.
        Iwarp = ffi::IBV_TRANSPORT_IWARP,
        /// usNIC.
        Usnic = ffi::IBV_TRANSPORT_USNIC,
        /// usNIC UDP.
        UsnicUdp = ffi::IBV_TRANSPORT_USNIC_UDP,
        /// Unspecified.
        Unspecified = ffi::IBV_TRANSPORT_UNSPECIFIED,
    }
);

c_enum!(
    /// `enum ibv_port_state`.
    PortState: u32 {
        /// No state change.
        Nop = ffi::IBV_PORT_NOP,
        /// Down.
        Down = ffi::IBV_PORT_DOWN,
        /// Initializing.
        Init = ffi::IBV_PORT_INIT,
        /// Armed.
        Armed = ffi::IBV_PORT_ARMED,
        /// Active: usable.
        Active = ffi::IBV_PORT_ACTIVE,
        /// Active, deferred.
        ActiveDefer = ffi::IBV_PORT_ACTIVE_DEFER,
    }
);

c_enum!(
    /// `IBV_LINK_LAYER_*`.
    LinkLayer: u8 {
        /// Not reported.
        Unspecified = ffi::IBV_LINK_LAYER_UNSPECIFIED,
        /// InfiniBand.
        InfiniBand = ffi::IBV_LINK_LAYER_INFINIBAND,
        /// Ethernet (RoCE, rxe).
        Ethernet = ffi::IBV_LINK_LAYER_ETHERNET,
    }
);

c_enum!(
    /// `enum ibv_wc_status`.
    WcStatus: u32 {
        /// Success.
        Success = ffi::IBV_WC_SUCCESS,
        /// Local length error.
        LocLenErr = ffi::IBV_WC_LOC_LEN_ERR,
        /// Local QP operation error.
        LocQpOpErr = ffi::IBV_WC_LOC_QP_OP_ERR,
        /// Local EE context operation error.
        LocEecOpErr = ffi::IBV_WC_LOC_EEC_OP_ERR,
        /// Local protection error.
        LocProtErr = ffi::IBV_WC_LOC_PROT_ERR,
        /// Flushed (the QP went to the error state).
        WrFlushErr = ffi::IBV_WC_WR_FLUSH_ERR,
        /// Memory window bind error.
        MwBindErr = ffi::IBV_WC_MW_BIND_ERR,
        /// Bad response.
        BadRespErr = ffi::IBV_WC_BAD_RESP_ERR,
        /// Local access error.
        LocAccessErr = ffi::IBV_WC_LOC_ACCESS_ERR,
        /// Remote invalid request.
        RemInvReqErr = ffi::IBV_WC_REM_INV_REQ_ERR,
        /// Remote access error.
        RemAccessErr = ffi::IBV_WC_REM_ACCESS_ERR,
        /// Remote operation error.
        RemOpErr = ffi::IBV_WC_REM_OP_ERR,
        /// Transport retry counter exceeded.
        RetryExcErr = ffi::IBV_WC_RETRY_EXC_ERR,
        /// RNR retry counter exceeded.
        RnrRetryExcErr = ffi::IBV_WC_RNR_RETRY_EXC_ERR,
        /// Local RDD violation.
        LocRddViolErr = ffi::IBV_WC_LOC_RDD_VIOL_ERR,
        /// Remote invalid RD request.
        RemInvRdReqErr = ffi::IBV_WC_REM_INV_RD_REQ_ERR,
        /// Remote aborted.
        RemAbortErr = ffi::IBV_WC_REM_ABORT_ERR,
        /// Invalid EE context number.
        InvEecnErr = ffi::IBV_WC_INV_EECN_ERR,
        /// Invalid EE context state.
        InvEecStateErr = ffi::IBV_WC_INV_EEC_STATE_ERR,
        /// Fatal error.
        FatalErr = ffi::IBV_WC_FATAL_ERR,
        /// Response timeout.
        RespTimeoutErr = ffi::IBV_WC_RESP_TIMEOUT_ERR,
        /// General error.
        GeneralErr = ffi::IBV_WC_GENERAL_ERR,
        /// Tag matching error.
        TmErr = ffi::IBV_WC_TM_ERR,
        /// Tag matching rendezvous incomplete.
        TmRndvIncomplete = ffi::IBV_WC_TM_RNDV_INCOMPLETE,
    }
);

c_enum!(
    /// `enum ibv_wc_opcode`.
    WcOpcode: u32 {
        /// A send completed.
        Send = ffi::IBV_WC_SEND,
        /// An RDMA write completed.
        RdmaWrite = ffi::IBV_WC_RDMA_WRITE,
        /// An RDMA read completed.
        RdmaRead = ffi::IBV_WC_RDMA_READ,
        /// A compare-and-swap completed.
        CompSwap = ffi::IBV_WC_COMP_SWAP,
        /// A fetch-and-add completed.
        FetchAdd = ffi::IBV_WC_FETCH_ADD,
        /// A memory window bind completed.
        BindMw = ffi::IBV_WC_BIND_MW,
        /// A local invalidate completed.
        LocalInv = ffi::IBV_WC_LOCAL_INV,
        /// A receive completed.
        Recv = ffi::IBV_WC_RECV,
        /// An RDMA write with immediate was received.
        RecvRdmaWithImm = ffi::IBV_WC_RECV_RDMA_WITH_IMM,
    }
);

impl fmt::Display for WcStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WcStatus::Unknown(n) => write!(f, "status {n}"),
            other => fmt::Debug::fmt(other, f),
        }
    }
}

/// A GID (16 bytes, network order). RoCE GIDs are IPv6 or IPv4-mapped addresses.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Gid(pub [u8; 16]);

impl Gid {
    /// All zero (an unused GID table entry).
    pub fn is_zero(&self) -> bool {
        self.0 == [0; 16]
    }

    /// The GID as an IPv6 address (RoCE GIDs are addresses; IPv4 ones are v4-mapped).
    pub fn to_ipv6(&self) -> Ipv6Addr {
        Ipv6Addr::from(self.0)
    }
}

impl fmt::Debug for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for Gid {
    /// The `ibv_devinfo` form: eight groups of four hex digits.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, pair) in self.0.chunks(2).enumerate() {
            if i > 0 {
                f.write_str(":")?;
            }
            write!(f, "{:02x}{:02x}", pair[0], pair[1])?;
        }
        Ok(())
    }
}

fn mtu_bytes(mtu: ffi::ibv_mtu) -> u32 {
    match mtu {
        ffi::IBV_MTU_256 => 256,
        ffi::IBV_MTU_512 => 512,
        ffi::IBV_MTU_1024 => 1024,
        ffi::IBV_MTU_2048 => 2048,
        ffi::IBV_MTU_4096 => 4096,
        _ => 0,
    }
}

/// The device attributes RDS cares about (`struct ibv_device_attr`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceAttr {
    /// Firmware version.
    pub fw_ver: String,
    /// Node GUID (host order).
    pub node_guid: u64,
    /// Largest memory region.
    pub max_mr_size: u64,
    /// Queue pairs.
    pub max_qp: i32,
    /// Work requests per queue.
    pub max_qp_wr: i32,
    /// Scatter/gather elements per work request.
    pub max_sge: i32,
    /// Completion queues.
    pub max_cq: i32,
    /// Entries per completion queue.
    pub max_cqe: i32,
    /// Memory regions.
    pub max_mr: i32,
    /// Outstanding RDMA reads/atomics as target, per QP.
    pub max_qp_rd_atom: i32,
    /// Outstanding RDMA reads/atomics as initiator, per QP.
    pub max_qp_init_rd_atom: i32,
    /// Atomic support (`enum ibv_atomic_cap`).
    pub atomic_cap: u32,
    /// Number of ports.
    pub phys_port_cnt: u8,
}

/// Port attributes (`struct ibv_port_attr`, as far as `ibv_query_port` fills it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortAttr {
    /// Logical state.
    pub state: PortState,
    /// Largest MTU in bytes.
    pub max_mtu: u32,
    /// Active MTU in bytes.
    pub active_mtu: u32,
    /// GID table length.
    pub gid_tbl_len: i32,
    /// Base LID (InfiniBand only).
    pub lid: u16,
    /// InfiniBand or Ethernet.
    pub link_layer: LinkLayer,
    /// `IBV_PORT_*` capability flags.
    pub port_cap_flags: u32,
}

// ---------------------------------------------------------------------------------------------
// Device list
// ---------------------------------------------------------------------------------------------

/// The RDMA devices of this host (`ibv_get_device_list`), freed on drop.
pub struct DeviceList {
    lib: &'static IbLib,
    /// `None` when the kernel has no verbs support (the list is then empty).
    list: Option<NonNull<*mut ffi::ibv_device>>,
    len: usize,
}

impl DeviceList {
    /// Lists the devices. A kernel without verbs support (`ibv_get_device_list` fails with
    /// `ENOSYS`: no `/sys/class/infiniband_verbs`, `ib_uverbs` not loaded) gives an empty list
    /// with [`DeviceList::kernel_support`] false.
    ///
    /// # Errors
    /// `ibv_get_device_list` failed otherwise.
    pub fn new(lib: &'static IbLib) -> Result<DeviceList, VerbsError> {
        let mut n: c_int = 0;
        // SAFETY: `n` is a valid out pointer; the call returns a NULL-terminated array or NULL.
        let list = unsafe { (lib.verbs.ibv_get_device_list)(&mut n) };
        let Some(list) = NonNull::new(list) else {
            let e = VerbsError::errno("ibv_get_device_list");
            if e.source.raw_os_error() == Some(libc::ENOSYS) {
                return Ok(DeviceList {
                    lib,
                    list: None,
                    len: 0,
                });
            }
            return Err(e);
        };
        Ok(DeviceList {
            lib,
            list: Some(list),
            len: usize::try_from(n).unwrap_or(0),
        })
    }

    /// Whether the kernel has RDMA verbs support at all.
    pub fn kernel_support(&self) -> bool {
        self.list.is_some()
    }

    /// Number of devices.
    pub fn len(&self) -> usize {
        self.len
    }

    /// No devices.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The devices, in the library's order.
    pub fn iter(&self) -> impl Iterator<Item = Device<'_>> + '_ {
        let list = self.list;
        (0..self.len).filter_map(move |i| {
            let list = list?;
            // SAFETY: the array has `len` entries (plus a NULL terminator) and lives as long as
            // `self`.
            let p = unsafe { *list.as_ptr().add(i) };
            NonNull::new(p).map(|ptr| Device {
                lib: self.lib,
                ptr,
                _list: PhantomData,
            })
        })
    }
}

impl Drop for DeviceList {
    fn drop(&mut self) {
        if let Some(list) = self.list {
            // SAFETY: the array came from ibv_get_device_list and is freed once. Contexts
            // opened from its devices stay valid (libibverbs reference-counts devices).
            unsafe { (self.lib.verbs.ibv_free_device_list)(list.as_ptr()) }
        }
    }
}

/// One entry of a [`DeviceList`].
pub struct Device<'a> {
    lib: &'static IbLib,
    ptr: NonNull<ffi::ibv_device>,
    _list: PhantomData<&'a DeviceList>,
}

impl Device<'_> {
    fn raw(&self) -> &ffi::ibv_device {
        // SAFETY: the device lives as long as the list this borrows.
        unsafe { self.ptr.as_ref() }
    }

    /// Kernel device name (`rxe0`).
    pub fn name(&self) -> String {
        // SAFETY: the device is valid; the function returns a pointer to its NUL-terminated
        // name (or NULL).
        let p = unsafe { (self.lib.verbs.ibv_get_device_name)(self.ptr.as_ptr()) };
        if p.is_null() {
            return c_chars_to_string(&self.raw().name);
        }
        // SAFETY: non-NULL, NUL-terminated, owned by the device.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }

    /// Node type.
    pub fn node_type(&self) -> NodeType {
        NodeType::from(self.raw().node_type)
    }

    /// Transport type.
    pub fn transport(&self) -> Transport {
        Transport::from(self.raw().transport_type)
    }

    /// Opens the device.
    ///
    /// # Errors
    /// `ibv_open_device` failed (permissions on `/dev/infiniband/uverbs*`, no provider).
    pub fn open(&self) -> Result<Context, VerbsError> {
        // SAFETY: a valid device from the list.
        let ctx = unsafe { (self.lib.verbs.ibv_open_device)(self.ptr.as_ptr()) };
        let ptr = NonNull::new(ctx).ok_or_else(|| VerbsError::errno("ibv_open_device"))?;
        Ok(Context {
            inner: Arc::new(ContextInner {
                lib: self.lib,
                ptr,
                owned: true,
            }),
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Context
// ---------------------------------------------------------------------------------------------

struct ContextInner {
    lib: &'static IbLib,
    ptr: NonNull<ffi::ibv_context>,
    /// Opened by us (closed on drop) or owned by librdmacm (never closed here).
    owned: bool,
}

// SAFETY: libibverbs verbs are thread-safe; the context pointer is only passed to them.
unsafe impl Send for ContextInner {}
// SAFETY: as above.
unsafe impl Sync for ContextInner {}

impl Drop for ContextInner {
    fn drop(&mut self) {
        if self.owned {
            // SAFETY: opened by ibv_open_device, closed once; every child object holds a
            // reference to this inner value, so none is left.
            unsafe { (self.lib.verbs.ibv_close_device)(self.ptr.as_ptr()) };
        }
    }
}

/// An open device (`struct ibv_context`). Cheap to clone.
#[derive(Clone)]
pub struct Context {
    inner: Arc<ContextInner>,
}

impl fmt::Debug for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Context")
            .field("device", &self.device_name())
            .finish()
    }
}

impl Context {
    /// A context owned by librdmacm (an `rdma_cm_id`'s `verbs`): never closed by us. librdmacm
    /// keeps its device contexts open while the library is loaded, and ours never unloads.
    pub(crate) fn borrowed(lib: &'static IbLib, ptr: NonNull<ffi::ibv_context>) -> Context {
        Context {
            inner: Arc::new(ContextInner {
                lib,
                ptr,
                owned: false,
            }),
        }
    }

    pub(crate) fn as_ptr(&self) -> *mut ffi::ibv_context {
        self.inner.ptr.as_ptr()
    }

    fn lib(&self) -> &'static IbLib {
        self.inner.lib
    }

    fn raw(&self) -> &ffi::ibv_context {
        // SAFETY: the context is open while `self.inner` lives.
        unsafe { self.inner.ptr.as_ref() }
    }

    /// The device's kernel name.
    pub fn device_name(&self) -> String {
        let dev = self.raw().device;
        if dev.is_null() {
            return String::new();
        }
        // SAFETY: an open context's device pointer stays valid while the context is open.
        c_chars_to_string(unsafe { &(*dev).name })
    }

    /// Number of completion vectors.
    pub fn num_comp_vectors(&self) -> i32 {
        self.raw().num_comp_vectors
    }

    /// `ibv_query_device`.
    ///
    /// # Errors
    /// The query failed.
    pub fn query_device(&self) -> Result<DeviceAttr, VerbsError> {
        let mut a = std::mem::MaybeUninit::<ffi::ibv_device_attr>::zeroed();
        // SAFETY: `a` is a writable ibv_device_attr of the size the library expects.
        let rc = unsafe { (self.lib().verbs.ibv_query_device)(self.as_ptr(), a.as_mut_ptr()) };
        check("ibv_query_device", rc)?;
        // SAFETY: zero-initialised plain old data, filled by the library.
        let a = unsafe { a.assume_init() };
        Ok(DeviceAttr {
            fw_ver: c_chars_to_string(&a.fw_ver),
            node_guid: u64::from_be(a.node_guid),
            max_mr_size: a.max_mr_size,
            max_qp: a.max_qp,
            max_qp_wr: a.max_qp_wr,
            max_sge: a.max_sge,
            max_cq: a.max_cq,
            max_cqe: a.max_cqe,
            max_mr: a.max_mr,
            max_qp_rd_atom: a.max_qp_rd_atom,
            max_qp_init_rd_atom: a.max_qp_init_rd_atom,
            atomic_cap: a.atomic_cap,
            phys_port_cnt: a.phys_port_cnt,
        })
    }

    /// `ibv_query_port` (ports are 1-based).
    ///
    /// # Errors
    /// The query failed (no such port).
    pub fn query_port(&self, port: u8) -> Result<PortAttr, VerbsError> {
        let mut a = ffi::ibv_port_attr::default();
        // SAFETY: `a` is a full ibv_port_attr; the exported symbol writes only its compat
        // prefix (see ffi's module doc).
        let rc = unsafe { (self.lib().verbs.ibv_query_port)(self.as_ptr(), port, &mut a) };
        check("ibv_query_port", rc)?;
        Ok(PortAttr {
            state: PortState::from(a.state),
            max_mtu: mtu_bytes(a.max_mtu),
            active_mtu: mtu_bytes(a.active_mtu),
            gid_tbl_len: a.gid_tbl_len,
            lid: a.lid,
            link_layer: LinkLayer::from(a.link_layer),
            port_cap_flags: a.port_cap_flags,
        })
    }

    /// `ibv_query_gid`.
    ///
    /// # Errors
    /// The query failed (no such port or index).
    pub fn query_gid(&self, port: u8, index: i32) -> Result<Gid, VerbsError> {
        let mut g = ffi::ibv_gid { raw: [0; 16] };
        // SAFETY: `g` is a writable ibv_gid.
        let rc = unsafe { (self.lib().verbs.ibv_query_gid)(self.as_ptr(), port, index, &mut g) };
        check("ibv_query_gid", rc)?;
        // SAFETY: every bit pattern is a valid `raw` array.
        Ok(Gid(unsafe { g.raw }))
    }

    /// `ibv_alloc_pd`.
    ///
    /// # Errors
    /// The allocation failed.
    pub fn alloc_pd(&self) -> Result<Pd, VerbsError> {
        // SAFETY: an open context.
        let pd = unsafe { (self.lib().verbs.ibv_alloc_pd)(self.as_ptr()) };
        let ptr = NonNull::new(pd).ok_or_else(|| VerbsError::errno("ibv_alloc_pd"))?;
        Ok(Pd {
            inner: Arc::new(PdInner {
                ctx: self.clone(),
                ptr,
            }),
        })
    }

    /// `ibv_create_cq` with at least `cqe` entries; with `channel`, also a completion channel
    /// of its own whose fd ([`Cq::fd`]) is non-blocking and becomes readable after
    /// [`Cq::req_notify`] once a completion arrives.
    ///
    /// # Errors
    /// Creating the channel or the queue failed, or `cqe` is not positive.
    pub fn create_cq(&self, cqe: u32, channel: bool, comp_vector: i32) -> Result<Cq, VerbsError> {
        let cqe = c_int::try_from(cqe)
            .ok()
            .filter(|&n| n > 0)
            .ok_or_else(|| VerbsError::invalid("ibv_create_cq", "cqe must be 1..=i32::MAX"))?;
        let lib = self.lib();
        let mut chan: Option<NonNull<ffi::ibv_comp_channel>> = None;
        if channel {
            // SAFETY: an open context.
            let c = unsafe { (lib.verbs.ibv_create_comp_channel)(self.as_ptr()) };
            let c = NonNull::new(c).ok_or_else(|| VerbsError::errno("ibv_create_comp_channel"))?;
            // SAFETY: a channel just created; its fd field is initialised.
            let fd = unsafe { c.as_ref().fd };
            if let Err(e) = set_nonblocking(fd) {
                // SAFETY: the channel has no CQ yet; destroyed once.
                unsafe { (lib.verbs.ibv_destroy_comp_channel)(c.as_ptr()) };
                return Err(VerbsError::new("fcntl(O_NONBLOCK)", e));
            }
            chan = Some(c);
        }
        let chan_ptr = chan.map_or(ptr::null_mut(), NonNull::as_ptr);
        // SAFETY: an open context; `chan_ptr` is NULL or a channel of this context.
        let cq = unsafe {
            (lib.verbs.ibv_create_cq)(self.as_ptr(), cqe, ptr::null_mut(), chan_ptr, comp_vector)
        };
        let Some(ptr) = NonNull::new(cq) else {
            let err = VerbsError::errno("ibv_create_cq");
            if let Some(c) = chan {
                // SAFETY: the channel has no CQ; destroyed once.
                unsafe { (lib.verbs.ibv_destroy_comp_channel)(c.as_ptr()) };
            }
            return Err(err);
        };
        Ok(Cq {
            inner: Arc::new(CqInner {
                ctx: self.clone(),
                ptr,
                channel: chan,
            }),
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Protection domain and memory regions
// ---------------------------------------------------------------------------------------------

struct PdInner {
    ctx: Context,
    ptr: NonNull<ffi::ibv_pd>,
}

// SAFETY: verbs are thread-safe; the pointer is only passed to them.
unsafe impl Send for PdInner {}
// SAFETY: as above.
unsafe impl Sync for PdInner {}

impl Drop for PdInner {
    fn drop(&mut self) {
        // SAFETY: allocated by ibv_alloc_pd, freed once; MRs and QPs hold this inner value, so
        // none is left.
        unsafe { (self.ctx.lib().verbs.ibv_dealloc_pd)(self.ptr.as_ptr()) };
    }
}

/// A protection domain. Cheap to clone.
#[derive(Clone)]
pub struct Pd {
    inner: Arc<PdInner>,
}

/// Memory region access rights (`IBV_ACCESS_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Access(pub i32);

impl Access {
    /// The adapter may write (needed for receives and RDMA reads into the region).
    pub const LOCAL_WRITE: Access = Access(ffi::IBV_ACCESS_LOCAL_WRITE);
    /// Peers may RDMA-write into the region.
    pub const REMOTE_WRITE: Access = Access(ffi::IBV_ACCESS_REMOTE_WRITE);
    /// Peers may RDMA-read the region.
    pub const REMOTE_READ: Access = Access(ffi::IBV_ACCESS_REMOTE_READ);
    /// Peers may run atomics on the region.
    pub const REMOTE_ATOMIC: Access = Access(ffi::IBV_ACCESS_REMOTE_ATOMIC);
}

impl std::ops::BitOr for Access {
    type Output = Access;
    fn bitor(self, rhs: Access) -> Access {
        Access(self.0 | rhs.0)
    }
}

impl Pd {
    /// The context this domain belongs to.
    pub fn context(&self) -> &Context {
        &self.inner.ctx
    }

    pub(crate) fn as_ptr(&self) -> *mut ffi::ibv_pd {
        self.inner.ptr.as_ptr()
    }

    /// Allocates `len` zeroed bytes (page-aligned, rounded up to whole pages) and registers
    /// them with `access`.
    ///
    /// # Errors
    /// `len` is 0, the allocation failed, or `ibv_reg_mr` failed (often the locked-memory
    /// limit, `ulimit -l`).
    pub fn reg_mr(&self, len: usize, access: Access) -> Result<Mr, VerbsError> {
        const PAGE: usize = 4096;
        if len == 0 {
            return Err(VerbsError::invalid("ibv_reg_mr", "empty region"));
        }
        let alloc_len = len
            .checked_add(PAGE - 1)
            .map(|n| n & !(PAGE - 1))
            .ok_or_else(|| VerbsError::invalid("ibv_reg_mr", "region too large"))?;
        let layout = Layout::from_size_align(alloc_len, PAGE)
            .map_err(|_| VerbsError::invalid("ibv_reg_mr", "region too large"))?;
        // SAFETY: the layout has a non-zero size.
        let buf = unsafe { std::alloc::alloc_zeroed(layout) };
        let buf = NonNull::new(buf)
            .ok_or_else(|| VerbsError::new("alloc", io::Error::from(io::ErrorKind::OutOfMemory)))?;
        // SAFETY: a valid PD; `buf` is `len` (<= alloc_len) writable bytes that outlive the MR
        // (freed only after a successful ibv_dereg_mr in Mr::drop).
        let mr = unsafe {
            (self.inner.ctx.lib().verbs.ibv_reg_mr)(
                self.as_ptr(),
                buf.as_ptr().cast::<c_void>(),
                len,
                access.0,
            )
        };
        let Some(ptr) = NonNull::new(mr) else {
            let err = VerbsError::errno("ibv_reg_mr");
            // SAFETY: allocated above with `layout`, never registered.
            unsafe { std::alloc::dealloc(buf.as_ptr(), layout) };
            return Err(err);
        };
        Ok(Mr {
            pd: self.clone(),
            ptr,
            buf,
            len,
            layout,
        })
    }

    /// `ibv_create_qp` (a queue pair not managed by the connection manager; see
    /// [`super::cm::CmId::create_qp`] for the RDS way).
    ///
    /// # Errors
    /// The queues belong to another device, or the creation failed.
    pub fn create_qp(&self, init: &QpInit<'_>) -> Result<Qp, VerbsError> {
        let mut attr = init.to_raw(self, "ibv_create_qp")?;
        // SAFETY: a valid PD and a fully initialised init attribute whose CQs are alive
        // (borrowed by `init`, then kept by the Qp).
        let qp = unsafe { (self.inner.ctx.lib().verbs.ibv_create_qp)(self.as_ptr(), &mut attr) };
        let ptr = NonNull::new(qp).ok_or_else(|| VerbsError::errno("ibv_create_qp"))?;
        Ok(Qp::new(ptr, self, init, attr.cap, QpOwner::Verbs))
    }
}

/// A registration of (part of) a shared [`DmaMem`] buffer, which it keeps alive.
///
/// The adapter addresses byte `k` of the registered range as `iova + k`: either the virtual
/// address (for local scatter/gather use) or a zero-based address (the kernel RDS convention
/// for regions peers target: the page offset of the range's first byte).
pub struct MemMr {
    pd: Pd,
    ptr: NonNull<ffi::ibv_mr>,
    mem: Arc<DmaMem>,
    off: usize,
    len: usize,
    iova: u64,
}

// SAFETY: verbs are thread-safe; the memory is only touched through `DmaMem`'s copies.
unsafe impl Send for MemMr {}
// SAFETY: as above.
unsafe impl Sync for MemMr {}

impl Pd {
    /// Registers `[off, off+len)` of `mem` with `access`. With `zero_based` the adapter
    /// addresses the range from its page offset (`(address of byte off) & 4095`); otherwise
    /// from its virtual address.
    ///
    /// # Errors
    /// The range is empty or outside `mem`, or `ibv_reg_mr_iova` failed.
    pub fn reg_mem(
        &self,
        mem: &Arc<DmaMem>,
        off: usize,
        len: usize,
        access: Access,
        zero_based: bool,
    ) -> Result<MemMr, VerbsError> {
        if len == 0 || mem.check(off, len).is_err() {
            return Err(VerbsError::invalid("ibv_reg_mr_iova", "bad range"));
        }
        let start = mem.addr() + off as u64;
        let iova = if zero_based { start & 4095 } else { start };
        // SAFETY: a valid PD; the range is inside `mem`'s allocation, which the returned MemMr
        // keeps alive (and leaks if deregistration fails).
        let mr = unsafe {
            (self.inner.ctx.lib().verbs.ibv_reg_mr_iova)(
                self.as_ptr(),
                mem.as_ptr().add(off).cast::<c_void>(),
                len,
                iova,
                access.0,
            )
        };
        let ptr = NonNull::new(mr).ok_or_else(|| VerbsError::errno("ibv_reg_mr_iova"))?;
        Ok(MemMr {
            pd: self.clone(),
            ptr,
            mem: mem.clone(),
            off,
            len,
            iova,
        })
    }
}

impl MemMr {
    fn raw(&self) -> &ffi::ibv_mr {
        // SAFETY: registered while `self` lives.
        unsafe { self.ptr.as_ref() }
    }

    /// Local key.
    pub fn lkey(&self) -> u32 {
        self.raw().lkey
    }

    /// Remote key.
    pub fn rkey(&self) -> u32 {
        self.raw().rkey
    }

    /// The adapter address of the range's first byte.
    pub fn iova(&self) -> u64 {
        self.iova
    }

    /// The registered range of the buffer: (offset, length).
    pub fn range(&self) -> (usize, usize) {
        (self.off, self.len)
    }

    /// The buffer.
    pub fn mem(&self) -> &Arc<DmaMem> {
        &self.mem
    }

    /// The protection domain.
    pub fn pd(&self) -> &Pd {
        &self.pd
    }

    /// A scatter/gather element for `len` bytes at buffer offset `off` (inside the range).
    ///
    /// # Errors
    /// The bytes are not inside the registered range, or `len` exceeds `u32::MAX`.
    pub fn sge(&self, off: usize, len: usize) -> Result<Sge<'_>, OutOfRange> {
        let bad = OutOfRange {
            offset: off,
            len,
            size: self.len,
        };
        let end = off.checked_add(len).ok_or(bad)?;
        if off < self.off || end > self.off + self.len {
            return Err(bad);
        }
        let length = u32::try_from(len).map_err(|_| bad)?;
        Ok(Sge {
            raw: ffi::ibv_sge {
                addr: self.iova + (off - self.off) as u64,
                length,
                lkey: self.lkey(),
            },
            _mr: PhantomData,
        })
    }
}

impl Drop for MemMr {
    fn drop(&mut self) {
        // SAFETY: registered by ibv_reg_mr_iova, deregistered once.
        let rc = unsafe { (self.pd.inner.ctx.lib().verbs.ibv_dereg_mr)(self.ptr.as_ptr()) };
        if rc != 0 {
            // The adapter might still access the memory: never free it.
            std::mem::forget(self.mem.clone());
        }
    }
}

impl fmt::Debug for MemMr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemMr")
            .field("iova", &format_args!("{:#x}", self.iova))
            .field("len", &self.len)
            .field("rkey", &format_args!("{:#x}", self.rkey()))
            .finish()
    }
}

/// A registered memory region that owns its memory.
pub struct Mr {
    pd: Pd,
    ptr: NonNull<ffi::ibv_mr>,
    buf: NonNull<u8>,
    len: usize,
    layout: Layout,
}

// SAFETY: verbs are thread-safe; the buffer is only accessed by copies through `read_at`
// (`&self`) and `write_at` (`&mut self`), so Rust-side accesses never race each other.
unsafe impl Send for Mr {}
// SAFETY: as above.
unsafe impl Sync for Mr {}

/// A byte range outside a memory region.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("range {offset}+{len} is outside the {size}-byte memory region")]
pub struct OutOfRange {
    /// Start of the requested range.
    pub offset: usize,
    /// Its length.
    pub len: usize,
    /// The region's size.
    pub size: usize,
}

impl Mr {
    fn raw(&self) -> &ffi::ibv_mr {
        // SAFETY: registered while `self` lives.
        unsafe { self.ptr.as_ref() }
    }

    fn range(&self, offset: usize, len: usize) -> Result<(), OutOfRange> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(OutOfRange {
                offset,
                len,
                size: self.len,
            }),
        }
    }

    /// The registered length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never true (empty regions are refused), for clippy's `len_without_is_empty`.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Local key (for scatter/gather elements).
    pub fn lkey(&self) -> u32 {
        self.raw().lkey
    }

    /// Remote key (what a peer needs for RDMA on this region).
    pub fn rkey(&self) -> u32 {
        self.raw().rkey
    }

    /// The region's start address as the adapter sees it (what a peer needs for RDMA).
    pub fn addr(&self) -> u64 {
        self.buf.as_ptr() as u64
    }

    /// The protection domain.
    pub fn pd(&self) -> &Pd {
        &self.pd
    }

    /// A scatter/gather element for `len` bytes at `offset`.
    ///
    /// # Errors
    /// The range is not inside the region or longer than `u32::MAX`.
    pub fn sge(&self, offset: usize, len: usize) -> Result<Sge<'_>, OutOfRange> {
        self.range(offset, len)?;
        let length = u32::try_from(len).map_err(|_| OutOfRange {
            offset,
            len,
            size: self.len,
        })?;
        Ok(Sge {
            raw: ffi::ibv_sge {
                addr: self.addr() + offset as u64,
                length,
                lkey: self.lkey(),
            },
            _mr: PhantomData,
        })
    }

    /// Copies `out.len()` bytes at `offset` out of the region.
    ///
    /// # Errors
    /// The range is not inside the region.
    pub fn read_at(&self, offset: usize, out: &mut [u8]) -> Result<(), OutOfRange> {
        self.range(offset, out.len())?;
        // SAFETY: the range is inside the allocation; `out` is a distinct Rust buffer. The
        // adapter may be writing the region concurrently (that is the caller's protocol to
        // avoid: read after the completion); no Rust reference to the region exists.
        unsafe {
            ptr::copy_nonoverlapping(self.buf.as_ptr().add(offset), out.as_mut_ptr(), out.len())
        };
        Ok(())
    }

    /// Copies `data` into the region at `offset`.
    ///
    /// # Errors
    /// The range is not inside the region.
    pub fn write_at(&mut self, offset: usize, data: &[u8]) -> Result<(), OutOfRange> {
        self.range(offset, data.len())?;
        // SAFETY: the range is inside the allocation, `&mut self` excludes other Rust
        // accesses, and `data` is a distinct buffer.
        unsafe {
            ptr::copy_nonoverlapping(data.as_ptr(), self.buf.as_ptr().add(offset), data.len())
        };
        Ok(())
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        // SAFETY: registered by ibv_reg_mr, deregistered once.
        let rc = unsafe { (self.pd.inner.ctx.lib().verbs.ibv_dereg_mr)(self.ptr.as_ptr()) };
        if rc == 0 {
            // SAFETY: the adapter can no longer access the memory; allocated with `layout`.
            unsafe { std::alloc::dealloc(self.buf.as_ptr(), self.layout) };
        }
        // else: leak the memory, the adapter might still write it.
    }
}

impl fmt::Debug for Mr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mr")
            .field("addr", &format_args!("{:#x}", self.addr()))
            .field("len", &self.len)
            .field("lkey", &self.lkey())
            .field("rkey", &self.rkey())
            .finish()
    }
}

/// A scatter/gather element inside an [`Mr`] (`struct ibv_sge`), borrowing the region.
#[repr(transparent)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sge<'a> {
    raw: ffi::ibv_sge,
    _mr: PhantomData<&'a Mr>,
}

impl Sge<'_> {
    /// Adapter address.
    pub fn addr(&self) -> u64 {
        self.raw.addr
    }

    /// Length in bytes.
    pub fn length(&self) -> u32 {
        self.raw.length
    }

    /// Local key.
    pub fn lkey(&self) -> u32 {
        self.raw.lkey
    }
}

// ---------------------------------------------------------------------------------------------
// Completion queue
// ---------------------------------------------------------------------------------------------

struct CqInner {
    ctx: Context,
    ptr: NonNull<ffi::ibv_cq>,
    channel: Option<NonNull<ffi::ibv_comp_channel>>,
}

// SAFETY: verbs (poll, notify, events) are thread-safe; pointers only go to them.
unsafe impl Send for CqInner {}
// SAFETY: as above.
unsafe impl Sync for CqInner {}

impl Drop for CqInner {
    fn drop(&mut self) {
        let v = &self.ctx.lib().verbs;
        // SAFETY: created by ibv_create_cq, destroyed once; QPs using it hold this inner value,
        // so none is left; every channel event was acknowledged when taken.
        unsafe { (v.ibv_destroy_cq)(self.ptr.as_ptr()) };
        if let Some(c) = self.channel {
            // SAFETY: the only CQ on this channel is gone; destroyed once.
            unsafe { (v.ibv_destroy_comp_channel)(c.as_ptr()) };
        }
    }
}

/// A completion queue, optionally with its own completion channel. Cheap to clone.
#[derive(Clone)]
pub struct Cq {
    inner: Arc<CqInner>,
}

/// One work completion (`struct ibv_wc`).
#[repr(transparent)]
#[derive(Clone, Copy, Debug, Default)]
pub struct WorkCompletion {
    raw: ffi::ibv_wc,
}

impl WorkCompletion {
    /// The work request id given when posting.
    pub fn wr_id(&self) -> u64 {
        self.raw.wr_id
    }

    /// Status.
    pub fn status(&self) -> WcStatus {
        WcStatus::from(self.raw.status)
    }

    /// Whether the work request succeeded.
    pub fn is_success(&self) -> bool {
        self.raw.status == ffi::IBV_WC_SUCCESS
    }

    /// What completed (only meaningful on success, except for the receive bit).
    pub fn opcode(&self) -> WcOpcode {
        WcOpcode::from(self.raw.opcode)
    }

    /// A receive completion.
    pub fn is_recv(&self) -> bool {
        self.raw.opcode & ffi::IBV_WC_RECV != 0
    }

    /// Bytes received (receives) or transferred (RDMA read, atomics).
    pub fn byte_len(&self) -> u32 {
        self.raw.byte_len
    }

    /// The immediate data (host order), if the completion carries some.
    pub fn imm_data(&self) -> Option<u32> {
        (self.raw.wc_flags & ffi::IBV_WC_WITH_IMM != 0).then(|| u32::from_be(self.raw.imm_data))
    }

    /// The local queue pair number.
    pub fn qp_num(&self) -> u32 {
        self.raw.qp_num
    }

    /// The vendor's error code.
    pub fn vendor_err(&self) -> u32 {
        self.raw.vendor_err
    }
}

impl Cq {
    fn lib(&self) -> &'static IbLib {
        self.inner.ctx.lib()
    }

    pub(crate) fn as_ptr(&self) -> *mut ffi::ibv_cq {
        self.inner.ptr.as_ptr()
    }

    /// The context.
    pub fn context(&self) -> &Context {
        &self.inner.ctx
    }

    /// The number of entries the provider actually allocated.
    pub fn capacity(&self) -> i32 {
        // SAFETY: alive while `self` lives; `cqe` is set at creation.
        unsafe { self.inner.ptr.as_ref().cqe }
    }

    /// The completion channel's fd (non-blocking), if the queue has a channel: register it
    /// with epoll for readability, then call [`Cq::get_event`].
    pub fn fd(&self) -> Option<RawFd> {
        // SAFETY: the channel lives as long as the queue.
        self.inner.channel.map(|c| unsafe { c.as_ref().fd })
    }

    /// `ibv_poll_cq` through `context->ops.poll_cq`: fills the front of `wcs`, returns how many.
    ///
    /// # Errors
    /// The provider reported an error (the queue is broken).
    pub fn poll(&self, wcs: &mut [WorkCompletion]) -> Result<usize, VerbsError> {
        let n = c_int::try_from(wcs.len()).unwrap_or(c_int::MAX);
        let f = self
            .inner
            .ctx
            .raw()
            .ops
            .poll_cq
            .ok_or_else(|| VerbsError::invalid("poll_cq", "provider has no poll_cq"))?;
        // SAFETY: the CQ belongs to this context; `wcs` is `n` writable ibv_wc (transparent
        // wrapper).
        let rc = unsafe { f(self.as_ptr(), n, wcs.as_mut_ptr().cast::<ffi::ibv_wc>()) };
        if rc < 0 {
            return Err(VerbsError::rc("poll_cq", rc));
        }
        Ok(rc as usize)
    }

    /// `ibv_req_notify_cq` through `context->ops.req_notify_cq`: the next completion (the next
    /// solicited or error one if `solicited_only`) makes the channel readable once.
    ///
    /// # Errors
    /// The provider refused.
    pub fn req_notify(&self, solicited_only: bool) -> Result<(), VerbsError> {
        let f =
            self.inner.ctx.raw().ops.req_notify_cq.ok_or_else(|| {
                VerbsError::invalid("req_notify_cq", "provider has no req_notify_cq")
            })?;
        // SAFETY: the CQ belongs to this context.
        let rc = unsafe { f(self.as_ptr(), c_int::from(solicited_only)) };
        check("req_notify_cq", rc)
    }

    /// Takes one event from the completion channel (`ibv_get_cq_event`) and acknowledges it.
    /// Returns `false` when there is none (the fd is non-blocking). After an event, re-arm with
    /// [`Cq::req_notify`] and poll until empty.
    ///
    /// # Errors
    /// The queue has no channel, or reading the channel failed.
    pub fn get_event(&self) -> Result<bool, VerbsError> {
        let Some(chan) = self.inner.channel else {
            return Err(VerbsError::invalid(
                "ibv_get_cq_event",
                "the CQ has no channel",
            ));
        };
        let mut cq: *mut ffi::ibv_cq = ptr::null_mut();
        let mut cq_ctx: *mut c_void = ptr::null_mut();
        // SAFETY: a valid channel and two out pointers.
        let rc =
            unsafe { (self.lib().verbs.ibv_get_cq_event)(chan.as_ptr(), &mut cq, &mut cq_ctx) };
        if rc != 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::WouldBlock {
                return Ok(false);
            }
            return Err(VerbsError::new("ibv_get_cq_event", e));
        }
        // The channel serves this queue only, so the event is ours.
        debug_assert_eq!(cq, self.as_ptr());
        // SAFETY: one event was taken for this CQ; acknowledged once.
        unsafe { (self.lib().verbs.ibv_ack_cq_events)(self.as_ptr(), 1) };
        Ok(true)
    }
}

// ---------------------------------------------------------------------------------------------
// Queue pair
// ---------------------------------------------------------------------------------------------

/// Queue pair capacities (`struct ibv_qp_cap`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QpCap {
    /// Send queue depth.
    pub max_send_wr: u32,
    /// Receive queue depth.
    pub max_recv_wr: u32,
    /// Scatter/gather elements per send.
    pub max_send_sge: u32,
    /// Scatter/gather elements per receive.
    pub max_recv_sge: u32,
    /// Inline data bytes.
    pub max_inline_data: u32,
}

impl From<QpCap> for ffi::ibv_qp_cap {
    fn from(c: QpCap) -> Self {
        ffi::ibv_qp_cap {
            max_send_wr: c.max_send_wr,
            max_recv_wr: c.max_recv_wr,
            max_send_sge: c.max_send_sge,
            max_recv_sge: c.max_recv_sge,
            max_inline_data: c.max_inline_data,
        }
    }
}

impl From<ffi::ibv_qp_cap> for QpCap {
    fn from(c: ffi::ibv_qp_cap) -> Self {
        QpCap {
            max_send_wr: c.max_send_wr,
            max_recv_wr: c.max_recv_wr,
            max_send_sge: c.max_send_sge,
            max_recv_sge: c.max_recv_sge,
            max_inline_data: c.max_inline_data,
        }
    }
}

/// What to create a reliable-connected queue pair with.
#[derive(Clone, Copy)]
pub struct QpInit<'a> {
    /// Send completions go here.
    pub send_cq: &'a Cq,
    /// Receive completions go here.
    pub recv_cq: &'a Cq,
    /// Requested capacities (the provider may round up; see [`Qp::cap`]).
    pub cap: QpCap,
    /// Signal every send (otherwise only those posted with `signaled`).
    pub sq_sig_all: bool,
}

impl QpInit<'_> {
    pub(crate) fn to_raw(
        self,
        pd: &Pd,
        op: &'static str,
    ) -> Result<ffi::ibv_qp_init_attr, VerbsError> {
        let ctx = pd.context().as_ptr();
        if self.send_cq.context().as_ptr() != ctx || self.recv_cq.context().as_ptr() != ctx {
            return Err(VerbsError::invalid(
                op,
                "completion queues and protection domain are on different devices",
            ));
        }
        Ok(ffi::ibv_qp_init_attr {
            qp_context: ptr::null_mut(),
            send_cq: self.send_cq.as_ptr(),
            recv_cq: self.recv_cq.as_ptr(),
            srq: ptr::null_mut(),
            cap: self.cap.into(),
            qp_type: ffi::IBV_QPT_RC,
            sq_sig_all: c_int::from(self.sq_sig_all),
        })
    }
}

/// Who destroys a queue pair.
pub(crate) enum QpOwner {
    /// `ibv_destroy_qp`.
    Verbs,
    /// `rdma_destroy_qp` on this id (kept alive until then).
    Cm(Arc<super::cm::CmIdInner>),
}

/// A reliable-connected queue pair.
pub struct Qp {
    ptr: NonNull<ffi::ibv_qp>,
    owner: QpOwner,
    cap: QpCap,
    pd: Pd,
    _send_cq: Cq,
    _recv_cq: Cq,
}

// SAFETY: posting and modifying are thread-safe verbs; the pointer only goes to them.
unsafe impl Send for Qp {}
// SAFETY: as above.
unsafe impl Sync for Qp {}

impl Drop for Qp {
    fn drop(&mut self) {
        match &self.owner {
            // SAFETY: created by ibv_create_qp, destroyed once, before its PD and CQs (held by
            // this struct and dropped after this body).
            QpOwner::Verbs => unsafe {
                (self.pd.context().lib().verbs.ibv_destroy_qp)(self.ptr.as_ptr());
            },
            // SAFETY: created by rdma_create_qp on this id, which is alive (held by `owner`);
            // rdma_destroy_qp destroys id->qp once.
            QpOwner::Cm(id) => unsafe { (id.lib.cm.rdma_destroy_qp)(id.ptr.as_ptr()) },
        }
    }
}

/// The operation of a [`SendWr`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendOp {
    /// `IBV_WR_SEND`.
    Send,
    /// `IBV_WR_SEND_WITH_IMM` (immediate in host order).
    SendWithImm(u32),
    /// `IBV_WR_RDMA_WRITE` to a peer's region.
    RdmaWrite {
        /// Peer address.
        remote_addr: u64,
        /// Peer's remote key.
        rkey: u32,
    },
    /// `IBV_WR_RDMA_READ` from a peer's region into the local elements.
    RdmaRead {
        /// Peer address.
        remote_addr: u64,
        /// Peer's remote key.
        rkey: u32,
    },
    /// `IBV_WR_ATOMIC_CMP_AND_SWP` on a peer's 8 bytes (old value lands in the element).
    AtomicCmpSwap {
        /// Peer address (8-byte aligned).
        remote_addr: u64,
        /// Peer's remote key.
        rkey: u32,
        /// Expected value.
        compare: u64,
        /// New value.
        swap: u64,
    },
    /// `IBV_WR_ATOMIC_FETCH_AND_ADD` on a peer's 8 bytes (old value lands in the element).
    AtomicFetchAdd {
        /// Peer address (8-byte aligned).
        remote_addr: u64,
        /// Peer's remote key.
        rkey: u32,
        /// Addend.
        add: u64,
    },
}

/// A send-queue work request.
#[derive(Debug, Clone, Copy)]
pub struct SendWr<'a> {
    /// Returned in the completion.
    pub wr_id: u64,
    /// What to do.
    pub op: SendOp,
    /// Local memory (gathered for sends and writes, scattered into for reads and atomics).
    pub sges: &'a [Sge<'a>],
    /// `IBV_SEND_SIGNALED`: produce a completion.
    pub signaled: bool,
    /// `IBV_SEND_SOLICITED`: wake a peer waiting for solicited events.
    pub solicited: bool,
    /// `IBV_SEND_FENCE`: wait for earlier RDMA reads and atomics first.
    pub fence: bool,
}

impl<'a> SendWr<'a> {
    /// A plain signaled send of `sges`.
    pub fn send(wr_id: u64, sges: &'a [Sge<'a>]) -> Self {
        SendWr {
            wr_id,
            op: SendOp::Send,
            sges,
            signaled: true,
            solicited: false,
            fence: false,
        }
    }

    fn to_raw(self) -> Result<ffi::ibv_send_wr, VerbsError> {
        let num_sge = c_int::try_from(self.sges.len())
            .map_err(|_| VerbsError::invalid("post_send", "too many elements"))?;
        let mut flags = 0;
        if self.signaled {
            flags |= ffi::IBV_SEND_SIGNALED;
        }
        if self.solicited {
            flags |= ffi::IBV_SEND_SOLICITED;
        }
        if self.fence {
            flags |= ffi::IBV_SEND_FENCE;
        }
        let rdma = |remote_addr, rkey| ffi::ibv_send_wr_wr {
            rdma: ffi::ibv_send_wr_rdma { remote_addr, rkey },
        };
        let (opcode, imm, wr) = match self.op {
            SendOp::Send => (ffi::IBV_WR_SEND, 0, rdma(0, 0)),
            SendOp::SendWithImm(imm) => (ffi::IBV_WR_SEND_WITH_IMM, imm.to_be(), rdma(0, 0)),
            SendOp::RdmaWrite { remote_addr, rkey } => {
                (ffi::IBV_WR_RDMA_WRITE, 0, rdma(remote_addr, rkey))
            }
            SendOp::RdmaRead { remote_addr, rkey } => {
                (ffi::IBV_WR_RDMA_READ, 0, rdma(remote_addr, rkey))
            }
            SendOp::AtomicCmpSwap {
                remote_addr,
                rkey,
                compare,
                swap,
            } => (
                ffi::IBV_WR_ATOMIC_CMP_AND_SWP,
                0,
                ffi::ibv_send_wr_wr {
                    atomic: ffi::ibv_send_wr_atomic {
                        remote_addr,
                        compare_add: compare,
                        swap,
                        rkey,
                    },
                },
            ),
            SendOp::AtomicFetchAdd {
                remote_addr,
                rkey,
                add,
            } => (
                ffi::IBV_WR_ATOMIC_FETCH_AND_ADD,
                0,
                ffi::ibv_send_wr_wr {
                    atomic: ffi::ibv_send_wr_atomic {
                        remote_addr,
                        compare_add: add,
                        swap: 0,
                        rkey,
                    },
                },
            ),
        };
        Ok(ffi::ibv_send_wr {
            wr_id: self.wr_id,
            next: ptr::null_mut(),
            // The provider only reads the elements while posting.
            sg_list: self.sges.as_ptr().cast::<ffi::ibv_sge>().cast_mut(),
            num_sge,
            opcode,
            send_flags: flags,
            imm_data: imm,
            wr,
            qp_type: ffi::ibv_send_wr_qp_type::default(),
            ext: ffi::ibv_send_wr_ext {
                tso: ffi::ibv_send_wr_tso {
                    hdr: ptr::null_mut(),
                    hdr_sz: 0,
                    mss: 0,
                },
            },
        })
    }
}

/// A receive-queue work request.
#[derive(Debug, Clone, Copy)]
pub struct RecvWr<'a> {
    /// Returned in the completion.
    pub wr_id: u64,
    /// Where the incoming message is scattered.
    pub sges: &'a [Sge<'a>],
}

/// A post that failed at one work request; those before it were posted.
#[derive(Debug, thiserror::Error)]
#[error("work request {index} of the batch: {source}")]
pub struct PostError {
    /// Index (in the slice given) of the first request not posted.
    pub index: usize,
    /// Why.
    #[source]
    pub source: VerbsError,
}

/// Work requests chained per provider call.
const POST_CHUNK: usize = 16;

impl Qp {
    pub(crate) fn new(
        ptr: NonNull<ffi::ibv_qp>,
        pd: &Pd,
        init: &QpInit<'_>,
        cap: ffi::ibv_qp_cap,
        owner: QpOwner,
    ) -> Qp {
        Qp {
            ptr,
            owner,
            cap: cap.into(),
            pd: pd.clone(),
            _send_cq: init.send_cq.clone(),
            _recv_cq: init.recv_cq.clone(),
        }
    }

    fn ops(&self) -> &ffi::ibv_context_ops {
        &self.pd.context().raw().ops
    }

    /// The queue pair number.
    pub fn qp_num(&self) -> u32 {
        // SAFETY: alive while `self` lives; set at creation.
        unsafe { self.ptr.as_ref().qp_num }
    }

    /// The capacities actually granted.
    pub fn cap(&self) -> QpCap {
        self.cap
    }

    /// The protection domain.
    pub fn pd(&self) -> &Pd {
        &self.pd
    }

    /// `ibv_post_send` through `context->ops.post_send`.
    ///
    /// # Errors
    /// The first request the provider refused (queue full, too many elements, bad opcode).
    pub fn post_send(&self, wrs: &[SendWr<'_>]) -> Result<(), PostError> {
        let f = self.ops().post_send.ok_or(PostError {
            index: 0,
            source: VerbsError::invalid("post_send", "provider has no post_send"),
        })?;
        for (chunk_no, chunk) in wrs.chunks(POST_CHUNK).enumerate() {
            let base = chunk_no * POST_CHUNK;
            let mut raw = Vec::with_capacity(chunk.len());
            for (i, wr) in chunk.iter().enumerate() {
                raw.push(wr.to_raw().map_err(|source| PostError {
                    index: base + i,
                    source,
                })?);
            }
            let head = link_send(&mut raw);
            let mut bad: *mut ffi::ibv_send_wr = ptr::null_mut();
            // SAFETY: a live QP of this context; `head` is a NULL-terminated chain in `raw`,
            // whose elements point to Sge arrays borrowed for this call.
            let rc = unsafe { f(self.ptr.as_ptr(), head, &mut bad) };
            if rc != 0 {
                let index = base + index_in(&raw, bad);
                return Err(PostError {
                    index,
                    source: VerbsError::rc("post_send", rc),
                });
            }
        }
        Ok(())
    }

    /// `ibv_post_recv` through `context->ops.post_recv`.
    ///
    /// # Errors
    /// The first request the provider refused (queue full, too many elements).
    pub fn post_recv(&self, wrs: &[RecvWr<'_>]) -> Result<(), PostError> {
        let f = self.ops().post_recv.ok_or(PostError {
            index: 0,
            source: VerbsError::invalid("post_recv", "provider has no post_recv"),
        })?;
        for (chunk_no, chunk) in wrs.chunks(POST_CHUNK).enumerate() {
            let base = chunk_no * POST_CHUNK;
            let mut raw = Vec::with_capacity(chunk.len());
            for (i, wr) in chunk.iter().enumerate() {
                let num_sge = c_int::try_from(wr.sges.len()).map_err(|_| PostError {
                    index: base + i,
                    source: VerbsError::invalid("post_recv", "too many elements"),
                })?;
                raw.push(ffi::ibv_recv_wr {
                    wr_id: wr.wr_id,
                    next: ptr::null_mut(),
                    sg_list: wr.sges.as_ptr().cast::<ffi::ibv_sge>().cast_mut(),
                    num_sge,
                });
            }
            let n = raw.len();
            let base_ptr = raw.as_mut_ptr();
            for i in 0..n.saturating_sub(1) {
                // SAFETY: `i + 1 < n`, inside `raw`, which is not resized below.
                unsafe { (*base_ptr.add(i)).next = base_ptr.add(i + 1) };
            }
            let mut bad: *mut ffi::ibv_recv_wr = ptr::null_mut();
            // SAFETY: a live QP of this context; a NULL-terminated chain in `raw` pointing to
            // Sge arrays borrowed for this call.
            let rc = unsafe { f(self.ptr.as_ptr(), base_ptr, &mut bad) };
            if rc != 0 {
                let off = if bad.is_null() {
                    0
                } else {
                    (bad as usize).saturating_sub(base_ptr as usize)
                        / std::mem::size_of::<ffi::ibv_recv_wr>()
                };
                return Err(PostError {
                    index: base + off.min(n),
                    source: VerbsError::rc("post_recv", rc),
                });
            }
        }
        Ok(())
    }

    /// Moves the queue pair to the error state (`ibv_modify_qp`, `IBV_QPS_ERR`): outstanding
    /// work requests complete with [`WcStatus::WrFlushErr`].
    ///
    /// # Errors
    /// The transition was refused.
    pub fn set_error_state(&self) -> Result<(), VerbsError> {
        // SAFETY: ibv_qp_attr is plain old data; zero is valid for every field.
        let mut attr: ffi::ibv_qp_attr = unsafe { std::mem::zeroed() };
        attr.qp_state = ffi::IBV_QPS_ERR;
        // SAFETY: a live QP and an attribute with the fields named by the mask set.
        let rc = unsafe {
            (self.pd.context().lib().verbs.ibv_modify_qp)(
                self.ptr.as_ptr(),
                &mut attr,
                ffi::IBV_QP_STATE,
            )
        };
        check("ibv_modify_qp", rc)
    }
}

fn link_send(raw: &mut [ffi::ibv_send_wr]) -> *mut ffi::ibv_send_wr {
    let n = raw.len();
    let base = raw.as_mut_ptr();
    for i in 0..n.saturating_sub(1) {
        // SAFETY: `i + 1 < n`: both inside `raw`.
        unsafe { (*base.add(i)).next = base.add(i + 1) };
    }
    base
}

fn index_in(raw: &[ffi::ibv_send_wr], bad: *mut ffi::ibv_send_wr) -> usize {
    if bad.is_null() {
        return 0;
    }
    let off = (bad as usize).saturating_sub(raw.as_ptr() as usize)
        / std::mem::size_of::<ffi::ibv_send_wr>();
    off.min(raw.len())
}

impl fmt::Debug for Qp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Qp")
            .field("qp_num", &self.qp_num())
            .field("cap", &self.cap)
            .finish()
    }
}
