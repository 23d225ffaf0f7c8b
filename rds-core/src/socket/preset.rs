//! What a socket was told before bind: the options that [`super::Socket`] keeps until a
//! backend exists ([`Preset`]) and hands to the backend that binds it, with the timing
//! options of the moment ([`Timing`]). Shared by the API and the three backends, so that no
//! backend reaches back into the API file.

use std::net::SocketAddr;
use std::time::Duration;

use crate::info::TransportKind;

/// Options set on an unbound socket, handed to its backend at bind.
#[derive(Debug, Default, Clone)]
pub(super) struct Preset {
    /// `SO_RDS_TRANSPORT`.
    pub transport: Option<TransportKind>,
    /// `SO_SNDBUF` (usable bytes).
    pub sndbuf: Option<usize>,
    /// `SO_RCVBUF` (usable bytes).
    pub rcvbuf: Option<usize>,
    /// `RDS_CONG_MONITOR`.
    pub cong_monitor: bool,
    /// `RDS_RECVERR`.
    pub recverr: bool,
    /// The default destination (`connect` before bind).
    pub connected: Option<SocketAddr>,
    /// Whose share of the node budget the socket draws on (0: root's, the default).
    pub owner: u32,
}

/// The options that the socket keeps itself after bind too, as they stood at bind.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Timing {
    /// `SO_TIMESTAMP`.
    pub timestamps: bool,
    /// `SO_RCVTIMEO` (`None`: wait forever).
    pub read_timeout: Option<Duration>,
    /// `SO_SNDTIMEO` (`None`: wait forever).
    pub write_timeout: Option<Duration>,
}
