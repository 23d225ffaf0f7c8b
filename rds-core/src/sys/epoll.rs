//! Eventfd (waking a thread, signalling readiness) and epoll (waiting on many descriptors).
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::cvt;

/// Whether the kernel has `epoll_pwait2` (until it answers ENOSYS once).
static PWAIT2: AtomicBool = AtomicBool::new(true);

/// A non-blocking, close-on-exec eventfd used to wake a thread or signal readiness.
pub fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: eventfd takes no pointers; a non-negative result is a fresh descriptor we own.
    let fd = cvt(unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) })?;
    // SAFETY: `fd` was just returned by eventfd and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Adds one to an eventfd (makes it readable).
pub fn eventfd_signal(fd: RawFd) {
    let one: u64 = 1;
    // SAFETY: writes 8 bytes from a valid u64 on the stack; errors (EAGAIN at the counter's
    // maximum) leave the fd readable, which is all we want.
    let _ = unsafe { libc::write(fd, (&one as *const u64).cast(), 8) };
}

/// Resets an eventfd to zero (not readable).
pub fn eventfd_clear(fd: RawFd) {
    let mut v: u64 = 0;
    // SAFETY: reads at most 8 bytes into a valid u64 on the stack; EAGAIN means already zero.
    let _ = unsafe { libc::read(fd, (&mut v as *mut u64).cast(), 8) };
}

/// An epoll instance, optionally with a shadow: a second instance that every registration
/// made through [`Epoll::add`], [`Epoll::modify`] and [`Epoll::delete`] also goes to, so that
/// two threads can each sleep in one `epoll_wait` on the same descriptors while one also
/// watches descriptors of its own ([`Epoll::add_shadow_own`]).
#[derive(Debug)]
pub struct Epoll {
    fd: OwnedFd,
    shadow: Option<OwnedFd>,
}

/// Interest bits.
pub const EPOLLIN: u32 = libc::EPOLLIN as u32;
/// Interest bits.
pub const EPOLLOUT: u32 = libc::EPOLLOUT as u32;
/// Interest bits: edge-triggered.
pub const EPOLLET: u32 = libc::EPOLLET as u32;
/// Reported bits.
pub const EPOLLERR: u32 = libc::EPOLLERR as u32;
/// Reported bits.
pub const EPOLLHUP: u32 = libc::EPOLLHUP as u32;
/// Reported bits.
pub const EPOLLRDHUP: u32 = libc::EPOLLRDHUP as u32;

impl Epoll {
    /// A new epoll instance.
    pub fn new() -> io::Result<Self> {
        Ok(Epoll {
            fd: create()?,
            shadow: None,
        })
    }

    /// A new epoll instance with a shadow instance (type docs).
    pub fn with_shadow() -> io::Result<Self> {
        Ok(Epoll {
            fd: create()?,
            shadow: Some(create()?),
        })
    }

    /// Registers (`op`) `fd` in this instance and in its shadow. An addition that the
    /// shadow refuses is taken back here, so that the two keep the same registrations.
    fn ctl(&self, op: libc::c_int, fd: RawFd, token: u64, events: u32) -> io::Result<()> {
        let here = ctl(&self.fd, op, fd, token, events);
        let Some(shadow) = &self.shadow else {
            return here;
        };
        // A deletion goes to both whatever the first answered.
        if here.is_err() && op != libc::EPOLL_CTL_DEL {
            return here;
        }
        let there = ctl(shadow, op, fd, token, events);
        if there.is_err() && op == libc::EPOLL_CTL_ADD {
            let _ = ctl(&self.fd, libc::EPOLL_CTL_DEL, fd, 0, 0);
        }
        here.and(there)
    }

    /// The epoll descriptor itself (readable while an event is pending, for `poll(2)`).
    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// The shadow's descriptor, if there is a shadow.
    pub fn shadow_fd(&self) -> Option<RawFd> {
        self.shadow.as_ref().map(AsRawFd::as_raw_fd)
    }

    /// Registers `fd` with `token` (in the shadow too).
    pub fn add(&self, fd: RawFd, token: u64, events: u32) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_ADD, fd, token, events)
    }

    /// Registers `fd` with `token` in the shadow only.
    ///
    /// # Errors
    /// `EINVAL` if there is no shadow.
    pub fn add_shadow_own(&self, fd: RawFd, token: u64, events: u32) -> io::Result<()> {
        ctl(self.shadow()?, libc::EPOLL_CTL_ADD, fd, token, events)
    }

    /// Changes the interest of `fd` (in the shadow too).
    pub fn modify(&self, fd: RawFd, token: u64, events: u32) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_MOD, fd, token, events)
    }

    /// Unregisters `fd` (from the shadow too).
    pub fn delete(&self, fd: RawFd) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_DEL, fd, 0, 0)
    }

    /// Waits up to `timeout` (None = forever) and returns `(token, events)` pairs in `out`;
    /// a signal ends the wait with none.
    pub fn wait(&self, out: &mut Vec<(u64, u32)>, timeout: Option<Duration>) -> io::Result<()> {
        match wait_on(&self.fd, out, timeout) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(()),
            r => r,
        }
    }

    /// [`Epoll::wait`] on the shadow, where a signal ends the wait with EINTR (kind
    /// `Interrupted`).
    ///
    /// # Errors
    /// `epoll_wait(2)` errors; `EINVAL` if there is no shadow.
    pub fn wait_shadow(
        &self,
        out: &mut Vec<(u64, u32)>,
        timeout: Option<Duration>,
    ) -> io::Result<()> {
        wait_on(self.shadow()?, out, timeout)
    }

    /// The shadow instance; `EINVAL` without one.
    fn shadow(&self) -> io::Result<&OwnedFd> {
        self.shadow
            .as_ref()
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))
    }
}

/// A new epoll descriptor.
fn create() -> io::Result<OwnedFd> {
    // SAFETY: no pointers; a non-negative result is a fresh descriptor we own.
    let fd = cvt(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?;
    // SAFETY: `fd` was just created and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `epoll_ctl(2)` on the instance `ep`.
fn ctl(ep: &OwnedFd, op: libc::c_int, fd: RawFd, token: u64, events: u32) -> io::Result<()> {
    let mut ev = libc::epoll_event { events, u64: token };
    // SAFETY: `ev` is a valid epoll_event for the duration of the call.
    cvt(unsafe { libc::epoll_ctl(ep.as_raw_fd(), op, fd, &mut ev) })?;
    Ok(())
}

/// Waits on the instance `ep` up to `timeout` (None = forever) and returns `(token, events)`
/// pairs in `out` (cleared first); a signal is an error of kind `Interrupted`.
fn wait_on(ep: &OwnedFd, out: &mut Vec<(u64, u32)>, timeout: Option<Duration>) -> io::Result<()> {
    const MAX: usize = 256;
    let mut evs = [libc::epoll_event { events: 0, u64: 0 }; MAX];
    // A timeout that is not whole milliseconds (a 50 us timer) waits to the nanosecond
    // with epoll_pwait2 (Linux 5.11), where the kernel has it; epoll_wait's milliseconds
    // would round it up to one.
    let fine = timeout
        .filter(|d| d.subsec_nanos() % 1_000_000 != 0 && PWAIT2.load(Ordering::Relaxed))
        .and_then(super::poll::timespec);
    let mut n = -1;
    if let Some(ts) = fine {
        // SAFETY: `evs` has room for MAX events and `ts` is a valid timespec, both living
        // across the call; a null signal mask changes none.
        n = unsafe {
            libc::syscall(
                libc::SYS_epoll_pwait2,
                ep.as_raw_fd(),
                evs.as_mut_ptr(),
                MAX as libc::c_int,
                &ts as *const libc::timespec,
                std::ptr::null::<libc::sigset_t>(),
                0usize,
            )
        } as libc::c_int;
        if n < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::ENOSYS) {
            PWAIT2.store(false, Ordering::Relaxed);
        }
    }
    if fine.is_none() || !PWAIT2.load(Ordering::Relaxed) {
        let ms = match timeout {
            None => -1,
            // Round up so that a deadline is not missed by less than a millisecond.
            Some(d) => d.as_micros().div_ceil(1000).min(i32::MAX as u128) as libc::c_int,
        };
        // SAFETY: `evs` has room for MAX events and lives across the call.
        n = unsafe { libc::epoll_wait(ep.as_raw_fd(), evs.as_mut_ptr(), MAX as libc::c_int, ms) };
    }
    out.clear();
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    out.extend(evs[..n as usize].iter().map(|e| (e.u64, e.events)));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A timeout of a fraction of a millisecond (the `epoll_pwait2` path) reports the events
    /// there are, and none when the time runs out.
    #[test]
    fn a_sub_millisecond_timeout_waits_and_reports() {
        let ep = Epoll::new().unwrap();
        let ev = eventfd().unwrap();
        ep.add(ev.as_raw_fd(), 3, EPOLLIN).unwrap();
        let mut out = Vec::new();
        ep.wait(&mut out, Some(Duration::from_micros(300))).unwrap();
        assert!(out.is_empty());
        eventfd_signal(ev.as_raw_fd());
        ep.wait(&mut out, Some(Duration::from_micros(300))).unwrap();
        assert_eq!(out, vec![(3, EPOLLIN)]);
    }

    #[test]
    fn eventfd_and_epoll() {
        let ep = Epoll::new().unwrap();
        let ev = eventfd().unwrap();
        ep.add(ev.as_raw_fd(), 7, EPOLLIN).unwrap();
        let mut out = vec![];
        ep.wait(&mut out, Some(Duration::ZERO)).unwrap();
        assert!(out.is_empty());
        eventfd_signal(ev.as_raw_fd());
        ep.wait(&mut out, Some(Duration::from_millis(100))).unwrap();
        assert_eq!(out, [(7, EPOLLIN)]);
        eventfd_clear(ev.as_raw_fd());
        ep.wait(&mut out, Some(Duration::ZERO)).unwrap();
        assert!(out.is_empty());
    }

    /// The shadow gets every shared registration, change and deletion, and keeps its own
    /// descriptors to itself.
    #[test]
    fn a_shadow_follows_shared_registrations_only() {
        let ep = Epoll::with_shadow().unwrap();
        let [shared, shadows] = [(); 2].map(|()| eventfd().unwrap());
        ep.add(shared.as_raw_fd(), 1, EPOLLIN).unwrap();
        ep.add_shadow_own(shadows.as_raw_fd(), 3, EPOLLIN).unwrap();
        for fd in [&shared, &shadows] {
            eventfd_signal(fd.as_raw_fd());
        }
        let (mut here, mut there) = (Vec::new(), Vec::new());
        let sorted = |v: &mut Vec<(u64, u32)>| {
            v.sort_unstable();
            v.clone()
        };
        ep.wait(&mut here, Some(Duration::ZERO)).unwrap();
        ep.wait_shadow(&mut there, Some(Duration::ZERO)).unwrap();
        assert_eq!(here, [(1, EPOLLIN)]);
        assert_eq!(sorted(&mut there), [(1, EPOLLIN), (3, EPOLLIN)]);
        ep.modify(shared.as_raw_fd(), 9, EPOLLIN).unwrap();
        ep.wait_shadow(&mut there, Some(Duration::ZERO)).unwrap();
        assert_eq!(sorted(&mut there), [(3, EPOLLIN), (9, EPOLLIN)]);
        ep.delete(shared.as_raw_fd()).unwrap();
        ep.wait(&mut here, Some(Duration::ZERO)).unwrap();
        ep.wait_shadow(&mut there, Some(Duration::ZERO)).unwrap();
        assert_eq!((here, there), (vec![], vec![(3, EPOLLIN)]));
        // A descriptor the shadow already has is refused and taken back from both.
        let twice = eventfd().unwrap();
        ep.add_shadow_own(twice.as_raw_fd(), 4, EPOLLIN).unwrap();
        assert!(ep.add(twice.as_raw_fd(), 5, EPOLLIN).is_err());
        eventfd_signal(twice.as_raw_fd());
        let mut left = Vec::new();
        ep.wait(&mut left, Some(Duration::ZERO)).unwrap();
        assert!(left.is_empty(), "not left here");
        assert!(Epoll::new()
            .unwrap()
            .wait_shadow(&mut Vec::new(), None)
            .is_err());
    }
}
