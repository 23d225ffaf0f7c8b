//! Zero-copy views of the headers a capture holds around RDS frames: the link layers the
//! reader takes (Ethernet II with its 802.1Q tags, Linux cooked v1 and v2, ERF), IPv4, IPv6
//! with its extension headers, TCP, and the InfiniBand LRH and BTH. The capture writer builds
//! its packets with the same views, so each header's layout is written down once.
//!
//! Contract, the one of [`crate::wire`] for views of captured packets:
//! - Each view (`EthernetFrame`, `Ipv4Packet`, `TcpPacket`, ...) wraps any `AsRef<[u8]>`
//!   without copying; a private `mod field` holds its byte ranges and `HEADER_LEN` (or a
//!   named length, where a file holds two views) is the end of its fixed part. Getters are in the `AsRef` impl, `set_*` in the `AsMut` one.
//! - Untrusted bytes go through `new_checked`, which checks that the fixed part is there.
//!   After it no accessor panics: accessors of a variable part (IPv4 options, the TCP data
//!   offset, IPv6 and ERF extension headers) return what the buffer holds, or an [`Error`].
//! - Where a header says how long it is (IPv4 IHL, TCP data offset), `check_header_len`
//!   judges that length: below the fixed part is [`Error::Malformed`], beyond the buffer
//!   [`Error::Truncated`]. It is apart from `new_checked` because a capture holds packets cut
//!   at a snap length and packets of other protocols: the reader first reads the fixed fields
//!   that say whether a packet is its business (protocol, ports) and only then judges the
//!   rest, so traffic it ignores is never counted as an error.
//! - Setters write their own bytes only; the writer fills zeroed buffers. Getters that only
//!   the tests read are `cfg(test)`, and `mod field` lists every field of the layout.
//! - Accessors are `#[inline]`, as smoltcp's are: the capture writer's per-segment path calls
//!   them from another module.
//!
//! Rooms, one view each (or a header and its extensions), each importing only rooms named
//! after it: `vlan` (802.1Q / 802.1ad tags), `sll` (Linux cooked v1 and v2), `ethernet`,
//! `ipv4`, `ipv6` (and its extension headers), `tcp`, `erf`, `ib` (LRH and BTH), then this
//! file ([`Error`], [`IP_PROTO_TCP`], [`ip_version`] and the macros the views share).

/// Why captured bytes could not be read as a header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Error {
    /// The buffer ends inside the header.
    Truncated,
    /// A length field of the header is impossible (shorter than the header's fixed part).
    Malformed,
}

/// `IPPROTO_TCP`: the IPv4 protocol and IPv6 next header of a TCP segment.
pub(crate) const IP_PROTO_TCP: u8 = 6;

/// The IP version of a packet: the high nibble of its first byte (4 or 6 for the packets a
/// capture reader takes).
///
/// # Errors
/// [`Error::Truncated`] on an empty buffer.
pub(crate) fn ip_version(packet: &[u8]) -> Result<u8, Error> {
    packet.first().map(|b| b >> 4).ok_or(Error::Truncated)
}

/// Big-endian getter of a fixed field: the range comes from `mod field`, so the width is
/// right by construction and `check_len` has made the bytes present.
macro_rules! be_get {
    ($(#[$doc:meta])* $name:ident, $ty:ty, $range:expr) => {
        $(#[$doc])*
        #[inline]
        pub(crate) fn $name(&self) -> $ty {
            let b = &self.buffer.as_ref()[$range];
            <$ty>::from_be_bytes(b.try_into().expect("fixed field width"))
        }
    };
}

/// Big-endian setter of a fixed field.
macro_rules! be_set {
    ($(#[$doc:meta])* $name:ident, $ty:ty, $range:expr) => {
        $(#[$doc])*
        #[inline]
        pub(crate) fn $name(&mut self, value: $ty) {
            self.buffer.as_mut()[$range].copy_from_slice(&value.to_be_bytes());
        }
    };
}

/// The constructors every view shares: `new_unchecked`, `new_checked` (the fixed part, `$len`
/// bytes, must be there) and `check_len`.
macro_rules! view_constructors {
    ($view:ident, $len:expr) => {
        /// Wraps a buffer without checking it; accessors may panic if it is shorter than the
        /// header's fixed part. For bytes built here, not for input.
        #[inline]
        pub(crate) const fn new_unchecked(buffer: T) -> Self {
            $view { buffer }
        }

        /// Wraps untrusted bytes.
        ///
        /// # Errors
        /// [`Error::Truncated`]($crate::trace::net::Error::Truncated) if the fixed part of the header is
        /// not all there.
        #[inline]
        pub(crate) fn new_checked(buffer: T) -> Result<Self, $crate::trace::net::Error> {
            let view = Self::new_unchecked(buffer);
            view.check_len()?;
            Ok(view)
        }

        /// Checks that the fixed part of the header is there.
        ///
        /// # Errors
        /// [`Error::Truncated`]($crate::trace::net::Error::Truncated) if it is not.
        #[inline]
        pub(crate) fn check_len(&self) -> Result<(), $crate::trace::net::Error> {
            if self.buffer.as_ref().len() < $len {
                Err($crate::trace::net::Error::Truncated)
            } else {
                Ok(())
            }
        }
    };
}

// The views below use these macros (textual scope: they are declared after them).
pub(crate) mod erf;
pub(crate) mod ethernet;
pub(crate) mod ib;
pub(crate) mod ipv4;
pub(crate) mod ipv6;
pub(crate) mod sll;
pub(crate) mod tcp;
pub(crate) mod vlan;
