//! Devices and their contexts: the device list, device and port attributes, GIDs, and the
//! opened device ([`Context`]) every other verbs object is created from.
//!
//! A [`Context`] is cheap to clone; protection domains and completion queues hold one, so the
//! device stays open while anything made from it lives. libibverbs verbs are thread-safe, so
//! the handles are `Send + Sync` and take `&self`.
#![allow(unsafe_code)]

use std::ffi::{c_int, CStr};
use std::fmt;
use std::marker::PhantomData;
use std::net::Ipv6Addr;
use std::ptr::NonNull;
use std::sync::Arc;

use super::error::{c_chars_to_string, c_enum, check, VerbsError};
use super::ffi;
use super::ffi::IbLib;

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

    pub(crate) fn lib(&self) -> &'static IbLib {
        self.inner.lib
    }

    pub(crate) fn raw(&self) -> &ffi::ibv_context {
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
}
