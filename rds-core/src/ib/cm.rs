//! Safe wrappers over the RDMA connection manager (librdmacm): event channels, ids, events.
//!
//! Contract:
//! - An [`EventChannel`] fd is non-blocking (for epoll); [`EventChannel::get_event`] returns
//!   `None` when nothing is pending.
//! - Events are copied into an owned [`CmEvent`] (type, status, private data, connection
//!   parameters, which ids) and acknowledged before `get_event` returns, so destroying an id
//!   never waits for an unacknowledged event of ours.
//! - A `CONNECT_REQUEST` carries the new id librdmacm created for the incoming connection as
//!   [`CmEvent::new_id`]: the receiver owns it (accept or reject it, then drop it).
//! - Ids are told apart by [`IdHandle`], stable for the id's life: events name the id they
//!   concern (and the listener for connection requests) by handle.
//! - A [`CmId`] keeps its channel alive; a queue pair made by [`CmId::create_qp`] keeps the id
//!   alive, and is destroyed (`rdma_destroy_qp`) before the id (`rdma_destroy_id`).
//! - Ids and their channel are meant to be driven from one thread (the one that reads the
//!   channel): librdmacm updates an id's route and device while it processes events.
#![allow(unsafe_code)]

use std::ffi::{c_int, c_void, CStr};
use std::fmt;
use std::io;
use std::mem::size_of;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::RawFd;
use std::ptr::{self, NonNull};
use std::sync::Arc;
use std::time::Duration;

use super::device::Context;
use super::error::{set_nonblocking, VerbsError};
use super::ffi;
use super::ffi::IbLib;
use super::handle::{ChannelInner, CmIdInner};
use super::pd::Pd;
use super::qp::{Qp, QpInit, QpOwner};

/// An RDMA CM event channel. Cheap to clone.
#[derive(Clone)]
pub struct EventChannel {
    inner: Arc<ChannelInner>,
}

impl fmt::Debug for EventChannel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EventChannel")
            .field("fd", &self.fd())
            .finish()
    }
}

/// `enum rdma_cm_event_type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CmEventType {
    /// `rdma_resolve_addr` done.
    AddrResolved,
    /// `rdma_resolve_addr` failed.
    AddrError,
    /// `rdma_resolve_route` done.
    RouteResolved,
    /// `rdma_resolve_route` failed.
    RouteError,
    /// A peer wants to connect (passive side; see [`CmEvent::new_id`]).
    ConnectRequest,
    /// Reply to a connect on an id without a QP.
    ConnectResponse,
    /// Connection setup failed.
    ConnectError,
    /// The peer is unreachable.
    Unreachable,
    /// The peer rejected (status is the reject reason; private data the peer's).
    Rejected,
    /// Connected.
    Established,
    /// Disconnected.
    Disconnected,
    /// The device went away.
    DeviceRemoval,
    /// Multicast join done.
    MulticastJoin,
    /// Multicast error.
    MulticastError,
    /// The id's address changed.
    AddrChange,
    /// Time wait ended: the QP can be reused.
    TimewaitExit,
    /// A value this binding does not know.
    Unknown(u32),
}

impl From<u32> for CmEventType {
    fn from(v: u32) -> Self {
        use CmEventType::*;
        match v {
            ffi::RDMA_CM_EVENT_ADDR_RESOLVED => AddrResolved,
            ffi::RDMA_CM_EVENT_ADDR_ERROR => AddrError,
            ffi::RDMA_CM_EVENT_ROUTE_RESOLVED => RouteResolved,
            ffi::RDMA_CM_EVENT_ROUTE_ERROR => RouteError,
            ffi::RDMA_CM_EVENT_CONNECT_REQUEST => ConnectRequest,
            ffi::RDMA_CM_EVENT_CONNECT_RESPONSE => ConnectResponse,
            ffi::RDMA_CM_EVENT_CONNECT_ERROR => ConnectError,
            ffi::RDMA_CM_EVENT_UNREACHABLE => Unreachable,
            ffi::RDMA_CM_EVENT_REJECTED => Rejected,
            ffi::RDMA_CM_EVENT_ESTABLISHED => Established,
            ffi::RDMA_CM_EVENT_DISCONNECTED => Disconnected,
            ffi::RDMA_CM_EVENT_DEVICE_REMOVAL => DeviceRemoval,
            ffi::RDMA_CM_EVENT_MULTICAST_JOIN => MulticastJoin,
            ffi::RDMA_CM_EVENT_MULTICAST_ERROR => MulticastError,
            ffi::RDMA_CM_EVENT_ADDR_CHANGE => AddrChange,
            ffi::RDMA_CM_EVENT_TIMEWAIT_EXIT => TimewaitExit,
            other => Unknown(other),
        }
    }
}

/// Identifies a [`CmId`] in events (stable while the id lives; may be reused after).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IdHandle(usize);

/// Connection parameters a peer sent (`struct rdma_conn_param` of an event).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PeerConnParam {
    /// Responder resources (RDMA reads the peer accepts).
    pub responder_resources: u8,
    /// Initiator depth (RDMA reads the peer issues).
    pub initiator_depth: u8,
    /// Hardware flow control.
    pub flow_control: u8,
    /// Transport retries.
    pub retry_count: u8,
    /// RNR retries (7 = infinite).
    pub rnr_retry_count: u8,
    /// The peer uses an SRQ.
    pub srq: u8,
    /// The peer's QP number.
    pub qp_num: u32,
}

/// One connection manager event, copied and already acknowledged.
pub struct CmEvent {
    /// What happened.
    pub kind: CmEventType,
    /// Status (0, a negative errno, or for `Rejected` the reject reason).
    pub status: i32,
    /// The id it concerns (for `ConnectRequest`: the new id, see [`CmEvent::new_id`]).
    pub id: IdHandle,
    /// For `ConnectRequest`: the listening id.
    pub listen_id: Option<IdHandle>,
    /// The peer's private data (connect request, accept, reject), as delivered.
    pub private_data: Vec<u8>,
    /// The peer's connection parameters (connect request, established).
    pub conn: PeerConnParam,
    /// For `ConnectRequest`: the new id, now owned by the receiver of the event.
    pub new_id: Option<CmId>,
}

impl fmt::Debug for CmEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CmEvent")
            .field("kind", &self.kind)
            .field("status", &self.status)
            .field("id", &self.id)
            .field("listen_id", &self.listen_id)
            .field("private_data_len", &self.private_data.len())
            .field("conn", &self.conn)
            .finish()
    }
}

impl EventChannel {
    /// `rdma_create_event_channel`, made non-blocking.
    ///
    /// # Errors
    /// The channel could not be created (no `/dev/infiniband/rdma_cm`: `rdma_ucm` not loaded,
    /// or no permission).
    pub fn new(lib: &'static IbLib) -> Result<EventChannel, VerbsError> {
        // SAFETY: no arguments; returns a channel or NULL with errno.
        let ch = unsafe { (lib.cm.rdma_create_event_channel)() };
        let ptr = NonNull::new(ch).ok_or_else(|| VerbsError::errno("rdma_create_event_channel"))?;
        let inner = Arc::new(ChannelInner { lib, ptr });
        // SAFETY: the channel was just created; `fd` is initialised.
        let fd = unsafe { ptr.as_ref().fd };
        set_nonblocking(fd).map_err(|e| VerbsError::new("fcntl(O_NONBLOCK)", e))?;
        Ok(EventChannel { inner })
    }

    /// The channel's fd (non-blocking): readable when an event is pending.
    pub fn fd(&self) -> RawFd {
        // SAFETY: the channel lives as long as `self`.
        unsafe { self.inner.ptr.as_ref().fd }
    }

    /// `rdma_create_id` in `RDMA_PS_TCP` (the port space RDS uses), reliable connected.
    ///
    /// # Errors
    /// The id could not be created.
    pub fn create_id(&self) -> Result<CmId, VerbsError> {
        let mut id: *mut ffi::rdma_cm_id = ptr::null_mut();
        // SAFETY: a valid channel and out pointer; no user context.
        let rc = unsafe {
            (self.inner.lib.cm.rdma_create_id)(
                self.inner.ptr.as_ptr(),
                &mut id,
                ptr::null_mut(),
                ffi::RDMA_PS_TCP,
            )
        };
        if rc != 0 {
            return Err(VerbsError::rc("rdma_create_id", rc));
        }
        let ptr = NonNull::new(id).ok_or_else(|| VerbsError::errno("rdma_create_id"))?;
        Ok(CmId::adopt(self.clone(), ptr))
    }

    /// Takes the next event, if any (`rdma_get_cm_event`), copies it and acknowledges it.
    ///
    /// # Errors
    /// Reading the channel failed.
    pub fn get_event(&self) -> Result<Option<CmEvent>, VerbsError> {
        let cm = &self.inner.lib.cm;
        let mut ev: *mut ffi::rdma_cm_event = ptr::null_mut();
        // SAFETY: a valid channel and out pointer.
        let rc = unsafe { (cm.rdma_get_cm_event)(self.inner.ptr.as_ptr(), &mut ev) };
        if rc != 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::WouldBlock {
                return Ok(None);
            }
            return Err(VerbsError::new("rdma_get_cm_event", e));
        }
        let Some(evp) = NonNull::new(ev) else {
            return Err(VerbsError::errno("rdma_get_cm_event"));
        };
        // SAFETY: a valid event until acknowledged below.
        let e = unsafe { evp.as_ref() };
        let kind = CmEventType::from(e.event);
        // SAFETY: the `conn` arm is the one librdmacm fills for reliable-connected ids (the only
        // kind we create); reading it is reading plain integers and a pointer.
        let conn = unsafe { e.param.conn };
        let private_data = if conn.private_data.is_null() || conn.private_data_len == 0 {
            Vec::new()
        } else {
            // SAFETY: librdmacm gives `private_data_len` readable bytes, valid until the ack.
            unsafe {
                std::slice::from_raw_parts(
                    conn.private_data.cast::<u8>(),
                    usize::from(conn.private_data_len),
                )
            }
            .to_vec()
        };
        let id_ptr = e.id;
        let listen = NonNull::new(e.listen_id).map(|p| IdHandle(p.as_ptr() as usize));
        let out = CmEvent {
            kind,
            status: e.status,
            id: IdHandle(id_ptr as usize),
            listen_id: listen,
            private_data,
            conn: PeerConnParam {
                responder_resources: conn.responder_resources,
                initiator_depth: conn.initiator_depth,
                flow_control: conn.flow_control,
                retry_count: conn.retry_count,
                rnr_retry_count: conn.rnr_retry_count,
                srq: conn.srq,
                qp_num: conn.qp_num,
            },
            new_id: None,
        };
        // SAFETY: acknowledged once; nothing of the event is used afterwards.
        unsafe { (cm.rdma_ack_cm_event)(evp.as_ptr()) };
        let mut out = out;
        if kind == CmEventType::ConnectRequest {
            // librdmacm created this id for the request, on this channel; it is now ours.
            out.new_id = NonNull::new(id_ptr).map(|p| CmId::adopt(self.clone(), p));
        }
        Ok(Some(out))
    }
}

/// An RDMA connection manager id (`struct rdma_cm_id`): a listener or one connection.
pub struct CmId {
    inner: Arc<CmIdInner>,
}

impl fmt::Debug for CmId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CmId")
            .field("handle", &self.handle())
            .field("local", &self.local_addr())
            .field("peer", &self.peer_addr())
            .finish()
    }
}

/// What to connect or accept with (`struct rdma_conn_param`).
#[derive(Debug, Clone, Copy)]
pub struct ConnParam<'a> {
    /// Private data for the peer (RDS: the 56-byte connection private data). At most 255
    /// bytes; the CM limits it further (56 bytes in a REQ, 196 in a REP, minus 36 for the IP
    /// header librdmacm adds in `RDMA_PS_TCP`).
    pub private_data: &'a [u8],
    /// RDMA reads we accept as target.
    pub responder_resources: u8,
    /// RDMA reads we issue.
    pub initiator_depth: u8,
    /// Hardware flow control.
    pub flow_control: bool,
    /// Transport retries (ignored when accepting).
    pub retry_count: u8,
    /// RNR retries (7 = infinite, what RDS uses).
    pub rnr_retry_count: u8,
}

impl ConnParam<'_> {
    fn to_raw(self, op: &'static str) -> Result<ffi::rdma_conn_param, VerbsError> {
        let len = u8::try_from(self.private_data.len())
            .map_err(|_| VerbsError::invalid(op, "private data longer than 255 bytes"))?;
        Ok(ffi::rdma_conn_param {
            private_data: if len == 0 {
                ptr::null()
            } else {
                self.private_data.as_ptr().cast::<c_void>()
            },
            private_data_len: len,
            responder_resources: self.responder_resources,
            initiator_depth: self.initiator_depth,
            flow_control: u8::from(self.flow_control),
            retry_count: self.retry_count,
            rnr_retry_count: self.rnr_retry_count,
            srq: 0,
            qp_num: 0,
        })
    }
}

fn to_sockaddr(addr: &SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: sockaddr_storage is plain old data; all-zero is valid.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_in fits in (and is less aligned than) sockaddr_storage.
            unsafe { ptr::write((&mut ss as *mut libc::sockaddr_storage).cast(), sin) };
            size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo().to_be(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: sockaddr_in6 fits in (and is less aligned than) sockaddr_storage.
            unsafe { ptr::write((&mut ss as *mut libc::sockaddr_storage).cast(), sin6) };
            size_of::<libc::sockaddr_in6>()
        }
    };
    (ss, len as libc::socklen_t)
}

fn from_sockaddr(ss: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match c_int::from(ss.ss_family) {
        libc::AF_INET => {
            // SAFETY: the family says the storage holds a sockaddr_in.
            let sin: libc::sockaddr_in =
                unsafe { ptr::read((ss as *const libc::sockaddr_storage).cast()) };
            Some(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes()),
                u16::from_be(sin.sin_port),
            )))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says the storage holds a sockaddr_in6.
            let sin6: libc::sockaddr_in6 =
                unsafe { ptr::read((ss as *const libc::sockaddr_storage).cast()) };
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(sin6.sin6_addr.s6_addr),
                u16::from_be(sin6.sin6_port),
                u32::from_be(sin6.sin6_flowinfo),
                sin6.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

fn timeout_ms(t: Duration) -> c_int {
    c_int::try_from(t.as_millis()).unwrap_or(c_int::MAX)
}

impl CmId {
    fn adopt(chan: EventChannel, ptr: NonNull<ffi::rdma_cm_id>) -> CmId {
        CmId {
            inner: Arc::new(CmIdInner {
                lib: chan.inner.lib,
                ptr,
                _chan: chan.inner,
            }),
        }
    }

    fn raw(&self) -> &ffi::rdma_cm_id {
        // SAFETY: the id lives as long as `self`.
        unsafe { self.inner.ptr.as_ref() }
    }

    fn ptr(&self) -> *mut ffi::rdma_cm_id {
        self.inner.ptr.as_ptr()
    }

    fn cm(&self) -> &ffi::CmFns {
        &self.inner.lib.cm
    }

    /// The handle events use for this id.
    pub fn handle(&self) -> IdHandle {
        IdHandle(self.ptr() as usize)
    }

    /// The device context the id is bound to (after address resolution, bind to a device
    /// address, or on a connection request), owned by librdmacm.
    pub fn context(&self) -> Option<Context> {
        NonNull::new(self.raw().verbs).map(|p| Context::borrowed(self.inner.lib, p))
    }

    /// The device port the id uses (0 until bound to a device).
    pub fn port_num(&self) -> u8 {
        self.raw().port_num
    }

    /// The local address (after bind, resolve or on a connection request).
    pub fn local_addr(&self) -> Option<SocketAddr> {
        from_sockaddr(&self.raw().route.addr.src_storage)
    }

    /// The peer's address.
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        from_sockaddr(&self.raw().route.addr.dst_storage)
    }

    /// The source GID of the route (RoCE: derived from the local address).
    pub fn sgid(&self) -> super::device::Gid {
        // SAFETY: every bit pattern of the union is valid bytes.
        super::device::Gid(unsafe { self.raw().route.addr.addr.sgid.raw })
    }

    /// `rdma_bind_addr`.
    ///
    /// # Errors
    /// The address is in use or belongs to no RDMA device (`EADDRNOTAVAIL`/`ENODEV`).
    pub fn bind(&self, addr: SocketAddr) -> Result<(), VerbsError> {
        let (mut ss, _) = to_sockaddr(&addr);
        // SAFETY: a live id and a valid sockaddr (read during the call).
        let rc = unsafe {
            (self.cm().rdma_bind_addr)(self.ptr(), (&mut ss as *mut libc::sockaddr_storage).cast())
        };
        rc_ok("rdma_bind_addr", rc)
    }

    /// `rdma_listen`.
    ///
    /// # Errors
    /// The id is not bound, or listening failed.
    pub fn listen(&self, backlog: i32) -> Result<(), VerbsError> {
        // SAFETY: a live id.
        let rc = unsafe { (self.cm().rdma_listen)(self.ptr(), backlog) };
        rc_ok("rdma_listen", rc)
    }

    /// `rdma_resolve_addr`: completes with `AddrResolved` or `AddrError`.
    ///
    /// # Errors
    /// The request could not be started.
    pub fn resolve_addr(
        &self,
        src: Option<SocketAddr>,
        dst: SocketAddr,
        timeout: Duration,
    ) -> Result<(), VerbsError> {
        let mut s = src.map(|a| to_sockaddr(&a).0);
        let (mut d, _) = to_sockaddr(&dst);
        let sp = s.as_mut().map_or(ptr::null_mut(), |s| {
            (s as *mut libc::sockaddr_storage).cast()
        });
        // SAFETY: a live id; valid sockaddrs (or NULL source), read during the call.
        let rc = unsafe {
            (self.cm().rdma_resolve_addr)(
                self.ptr(),
                sp,
                (&mut d as *mut libc::sockaddr_storage).cast(),
                timeout_ms(timeout),
            )
        };
        rc_ok("rdma_resolve_addr", rc)
    }

    /// `rdma_resolve_route`: completes with `RouteResolved` or `RouteError`.
    ///
    /// # Errors
    /// The request could not be started.
    pub fn resolve_route(&self, timeout: Duration) -> Result<(), VerbsError> {
        // SAFETY: a live id.
        let rc = unsafe { (self.cm().rdma_resolve_route)(self.ptr(), timeout_ms(timeout)) };
        rc_ok("rdma_resolve_route", rc)
    }

    /// `rdma_create_qp`: a reliable-connected queue pair on this id, which the connection
    /// manager moves through its states on connect/accept. `pd` must be on the id's device
    /// ([`CmId::context`]).
    ///
    /// # Errors
    /// No device yet, a different device, or the creation failed.
    pub fn create_qp(&self, pd: &Pd, init: &QpInit<'_>) -> Result<Qp, VerbsError> {
        if self.raw().verbs != pd.context().as_ptr() {
            return Err(VerbsError::invalid(
                "rdma_create_qp",
                "the protection domain is not on the id's device",
            ));
        }
        if !self.raw().qp.is_null() {
            return Err(VerbsError::invalid(
                "rdma_create_qp",
                "the id already has a QP",
            ));
        }
        let mut attr = init.to_raw(pd, "rdma_create_qp")?;
        // SAFETY: a live id and PD of the same device; a fully initialised attribute whose
        // CQs are alive (and kept by the Qp).
        let rc = unsafe { (self.cm().rdma_create_qp)(self.ptr(), pd.as_ptr(), &mut attr) };
        rc_ok("rdma_create_qp", rc)?;
        let qp = NonNull::new(self.raw().qp).ok_or_else(|| VerbsError::errno("rdma_create_qp"))?;
        Ok(Qp::new(
            qp,
            pd,
            init,
            attr.cap,
            QpOwner::Cm(self.inner.clone()),
        ))
    }

    /// `rdma_connect` (after `RouteResolved`): completes with `Established`, `Rejected`,
    /// `Unreachable` or `ConnectError`.
    ///
    /// # Errors
    /// The request could not be sent.
    pub fn connect(&self, param: &ConnParam<'_>) -> Result<(), VerbsError> {
        let mut raw = param.to_raw("rdma_connect")?;
        // SAFETY: a live id; `raw` and its private data are valid during the call.
        let rc = unsafe { (self.cm().rdma_connect)(self.ptr(), &mut raw) };
        rc_ok("rdma_connect", rc)
    }

    /// `rdma_accept` (on a `ConnectRequest`'s new id).
    ///
    /// # Errors
    /// The reply could not be sent.
    pub fn accept(&self, param: &ConnParam<'_>) -> Result<(), VerbsError> {
        let mut raw = param.to_raw("rdma_accept")?;
        // SAFETY: a live id; `raw` and its private data are valid during the call.
        let rc = unsafe { (self.cm().rdma_accept)(self.ptr(), &mut raw) };
        rc_ok("rdma_accept", rc)
    }

    /// `rdma_reject` with private data for the peer.
    ///
    /// # Errors
    /// The data is longer than 255 bytes, or the reject could not be sent.
    pub fn reject(&self, private_data: &[u8]) -> Result<(), VerbsError> {
        let len = u8::try_from(private_data.len()).map_err(|_| {
            VerbsError::invalid("rdma_reject", "private data longer than 255 bytes")
        })?;
        let p = if len == 0 {
            ptr::null()
        } else {
            private_data.as_ptr().cast::<c_void>()
        };
        // SAFETY: a live id; `p` is NULL or `len` readable bytes during the call.
        let rc = unsafe { (self.cm().rdma_reject)(self.ptr(), p, len) };
        rc_ok("rdma_reject", rc)
    }

    /// `rdma_disconnect` (also moves the QP to the error state, flushing its work requests).
    ///
    /// # Errors
    /// Not connected.
    pub fn disconnect(&self) -> Result<(), VerbsError> {
        // SAFETY: a live id.
        let rc = unsafe { (self.cm().rdma_disconnect)(self.ptr()) };
        rc_ok("rdma_disconnect", rc)
    }
}

fn rc_ok(op: &'static str, rc: c_int) -> Result<(), VerbsError> {
    if rc == 0 {
        Ok(())
    } else {
        Err(VerbsError::rc(op, rc))
    }
}

/// librdmacm's name for an event type (`rdma_event_str`), e.g. `RDMA_CM_EVENT_ESTABLISHED`.
pub fn event_str(lib: &'static IbLib, kind: CmEventType) -> String {
    let raw: u32 = match kind {
        CmEventType::AddrResolved => ffi::RDMA_CM_EVENT_ADDR_RESOLVED,
        CmEventType::AddrError => ffi::RDMA_CM_EVENT_ADDR_ERROR,
        CmEventType::RouteResolved => ffi::RDMA_CM_EVENT_ROUTE_RESOLVED,
        CmEventType::RouteError => ffi::RDMA_CM_EVENT_ROUTE_ERROR,
        CmEventType::ConnectRequest => ffi::RDMA_CM_EVENT_CONNECT_REQUEST,
        CmEventType::ConnectResponse => ffi::RDMA_CM_EVENT_CONNECT_RESPONSE,
        CmEventType::ConnectError => ffi::RDMA_CM_EVENT_CONNECT_ERROR,
        CmEventType::Unreachable => ffi::RDMA_CM_EVENT_UNREACHABLE,
        CmEventType::Rejected => ffi::RDMA_CM_EVENT_REJECTED,
        CmEventType::Established => ffi::RDMA_CM_EVENT_ESTABLISHED,
        CmEventType::Disconnected => ffi::RDMA_CM_EVENT_DISCONNECTED,
        CmEventType::DeviceRemoval => ffi::RDMA_CM_EVENT_DEVICE_REMOVAL,
        CmEventType::MulticastJoin => ffi::RDMA_CM_EVENT_MULTICAST_JOIN,
        CmEventType::MulticastError => ffi::RDMA_CM_EVENT_MULTICAST_ERROR,
        CmEventType::AddrChange => ffi::RDMA_CM_EVENT_ADDR_CHANGE,
        CmEventType::TimewaitExit => ffi::RDMA_CM_EVENT_TIMEWAIT_EXIT,
        CmEventType::Unknown(n) => n,
    };
    // SAFETY: returns a pointer to a static string for any value.
    let p = unsafe { (lib.cm.rdma_event_str)(raw) };
    if p.is_null() {
        return format!("{kind:?}");
    }
    // SAFETY: non-NULL static NUL-terminated string.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sockaddr_round_trip() {
        for a in [
            "198.18.0.2:18634".parse::<SocketAddr>().unwrap(),
            "[fe80::1%3]:16385".parse::<SocketAddr>().unwrap(),
            "[2001:db8::5]:1".parse::<SocketAddr>().unwrap(),
        ] {
            let (ss, len) = to_sockaddr(&a);
            assert!(len as usize <= size_of::<libc::sockaddr_storage>());
            assert_eq!(from_sockaddr(&ss), Some(a));
        }
        // SAFETY (test): all-zero storage is valid; family 0 is none.
        let zero: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        assert_eq!(from_sockaddr(&zero), None);
    }

    #[test]
    fn ipv4_bytes_are_network_order() {
        let (ss, _) = to_sockaddr(&"10.1.2.3:258".parse().unwrap());
        // SAFETY (test): the storage holds a sockaddr_in.
        let sin: libc::sockaddr_in =
            unsafe { ptr::read((&ss as *const libc::sockaddr_storage).cast()) };
        assert_eq!(sin.sin_addr.s_addr.to_ne_bytes(), [10, 1, 2, 3]);
        assert_eq!(sin.sin_port.to_ne_bytes(), [1, 2]);
    }
}
