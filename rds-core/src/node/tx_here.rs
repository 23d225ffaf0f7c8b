//! Which thread writes an application's send on RDS/TCP: the sender itself or the I/O
//! thread, by the message's size and the socket's send buffer ([`TxHere`]).

/// What of an application's send its own thread transmits on RDS/TCP
/// (`Inner::after_app_call_inline`), by the size of the message sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TxHere {
    /// Nothing: a large message is written by the I/O thread while the sender goes on (a
    /// 1 MiB `--loopback` stream written by its sender measured 0.84x the rate).
    No,
    /// On an idle lane only ([`Transport::lane_idle`]): messages to a lane that streams
    /// are left to the I/O thread, which writes them together, so that the peer wakes once
    /// for many (writing each 64 B message here measured half the rate of
    /// `--loopback -d 32`).
    ///
    /// [`Transport::lane_idle`]: super::transport::Transport::lane_idle
    IdleLane,
    /// On any lane with nothing waiting to be written, whatever is unacknowledged: for a
    /// message of 1-64 KiB from a socket with a small send buffer (the default's 104 KiB),
    /// which holds a few such messages, so that its sender waits for room every few sends.
    /// Writing its stream itself, the sender learns TCP's acknowledgements right after its
    /// writes (the kernel's `sendmsg` frees acknowledged messages in the same way) and
    /// neither waits for the I/O thread's wake-up nor wakes it: qperf `rds_bw -m 4096`
    /// 1.2-1.4x the rate (docs/performance.md). A large buffer keeps the I/O thread writing
    /// while the sender copies the next messages, and small messages are better written
    /// together (see `IdleLane`).
    OpenLane,
}

impl TxHere {
    /// Smallest message written on an open lane ([`TxHere::OpenLane`]).
    const OPEN_MIN: usize = 1 << 10;
    /// Largest message written on an open lane.
    const OPEN_MAX: usize = 64 << 10;
    /// Largest send buffer of a socket whose sends go on open lanes.
    const OPEN_SNDBUF_MAX: usize = 1 << 20;
    /// Largest message written on an idle lane.
    const IDLE_MAX: usize = 16 << 10;

    /// The rule for a message of `len` bytes sent by a socket whose send buffer holds
    /// `sndbuf` bytes.
    pub(crate) fn for_send(len: usize, sndbuf: usize) -> Self {
        if (Self::OPEN_MIN..=Self::OPEN_MAX).contains(&len) && sndbuf <= Self::OPEN_SNDBUF_MAX {
            TxHere::OpenLane
        } else if len <= Self::IDLE_MAX {
            TxHere::IdleLane
        } else {
            TxHere::No
        }
    }
}

#[cfg(test)]
mod tx_here_tests {
    use super::TxHere;

    /// Which thread writes a send, by its size and its socket's send buffer: a default
    /// buffer's 1-64 KiB messages go on open lanes, small ones on idle lanes, large ones and
    /// every message of a socket with a large buffer as before.
    #[test]
    fn the_sender_writes_its_stream_itself_only_with_a_small_buffer() {
        let default = crate::tunables::Tunables::default().sndbuf_default as usize;
        assert!(default <= 1 << 20, "the default buffer is a small one");
        for (len, sndbuf, want) in [
            (64, default, TxHere::IdleLane),
            (1023, default, TxHere::IdleLane),
            (1024, default, TxHere::OpenLane),
            (8192, default, TxHere::OpenLane),
            (64 << 10, default, TxHere::OpenLane),
            ((64 << 10) + 1, default, TxHere::No),
            (1 << 20, default, TxHere::No),
            (8192, 1 << 20, TxHere::OpenLane),
            (8192, (1 << 20) + 1, TxHere::IdleLane),
            (16 << 10, 64 << 20, TxHere::IdleLane),
            ((16 << 10) + 1, 64 << 20, TxHere::No),
        ] {
            assert_eq!(
                TxHere::for_send(len, sndbuf),
                want,
                "{len} bytes, send buffer {sndbuf}"
            );
        }
    }
}
