//! The worker pool: requests other than socket operations wait their turn and run on at
//! most [`WORKERS`] threads (started as needed), within the per-uid and unprivileged caps
//! ([`BUSY_PER_UID`], [`PRIVILEGED_RESERVE`]); each worker gives its connection back.

use std::collections::{HashMap, VecDeque};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};

use super::{requests, Action, Conn, Ctx, Park, Peer, BUSY_PER_UID, PRIVILEGED_RESERVE, WORKERS};
use crate::ctl::{Reply, Request};
use crate::sys;

/// What a worker runs.
#[derive(Debug)]
pub(super) enum Work {
    Frame {
        /// The request, or why it is malformed.
        req: Result<Request, String>,
        data: Vec<u8>,
        file: Option<OwnedFd>,
    },
    /// The rest of a reply the event loop could not write without blocking.
    Flush(Vec<u8>),
}

/// A connection with the work to run for it.
#[derive(Debug)]
pub(super) struct Job {
    pub(super) conn: Conn,
    pub(super) work: Work,
}

/// A connection back from a worker.
#[derive(Debug)]
pub(super) enum Done {
    Idle(Conn),
    Park(Conn, Park),
    Close(Conn),
}

/// The pool and its queue.
pub(super) struct Pool {
    ctx: Arc<Ctx>,
    /// What a worker signals when it gives a connection back.
    wake: Arc<OwnedFd>,
    /// Complete requests waiting for a worker.
    waiting: VecDeque<Job>,
    busy_by_uid: HashMap<u32, usize>,
    busy_total: usize,
    busy_unpriv: usize,
    workers: usize,
    job_tx: mpsc::Sender<Job>,
    job_rx: Arc<Mutex<mpsc::Receiver<Job>>>,
    done_tx: mpsc::Sender<Done>,
    done_rx: mpsc::Receiver<Done>,
}

impl Pool {
    /// A pool with no worker yet; workers signal `wake` when they give a connection back.
    pub(super) fn new(ctx: Arc<Ctx>, wake: Arc<OwnedFd>) -> Self {
        let (done_tx, done_rx) = mpsc::channel();
        let (job_tx, job_rx) = mpsc::channel();
        Pool {
            ctx,
            wake,
            waiting: VecDeque::new(),
            busy_by_uid: HashMap::new(),
            busy_total: 0,
            busy_unpriv: 0,
            workers: 0,
            job_tx,
            job_rx: Arc::new(Mutex::new(job_rx)),
            done_tx,
            done_rx,
        }
    }

    /// Queues a job (run by [`Pool::schedule`]).
    pub(super) fn push(&mut self, job: Job) {
        self.waiting.push_back(job);
    }

    /// A connection a worker gave back, if one did (its worker counts as free again).
    pub(super) fn next_done(&mut self) -> Option<Done> {
        let d = self.done_rx.try_recv().ok()?;
        let peer = match &d {
            Done::Idle(c) | Done::Park(c, _) | Done::Close(c) => c.peer,
        };
        self.finished(&peer);
        Some(d)
    }

    /// A job of `peer` ended.
    fn finished(&mut self, peer: &Peer) {
        self.busy_total -= 1;
        if !peer.privileged {
            self.busy_unpriv -= 1;
        }
        if let Some(n) = self.busy_by_uid.get_mut(&peer.uid) {
            *n -= 1;
            if *n == 0 {
                self.busy_by_uid.remove(&peer.uid);
            }
        }
    }

    /// Hands waiting jobs to workers as the caps allow, oldest first. Returns the
    /// connections no worker can take (the pool is gone): close them.
    pub(super) fn schedule(&mut self) -> Vec<Conn> {
        let mut keep = VecDeque::new();
        let mut lost = Vec::new();
        while let Some(job) = self.waiting.pop_front() {
            let p = job.conn.peer;
            let uid_busy = self.busy_by_uid.get(&p.uid).copied().unwrap_or(0);
            let fits = self.busy_total < WORKERS
                && (p.privileged
                    || (self.busy_unpriv < WORKERS - PRIVILEGED_RESERVE
                        && uid_busy < BUSY_PER_UID));
            if !fits {
                keep.push_back(job);
                continue;
            }
            self.busy_total += 1;
            if !p.privileged {
                self.busy_unpriv += 1;
            }
            *self.busy_by_uid.entry(p.uid).or_insert(0) += 1;
            if self.workers < self.busy_total {
                self.spawn_worker();
            }
            if let Err(mpsc::SendError(job)) = self.job_tx.send(job) {
                self.finished(&p);
                lost.push(job.conn);
            }
        }
        self.waiting = keep;
        lost
    }

    fn spawn_worker(&mut self) {
        let rx = self.job_rx.clone();
        let tx = self.done_tx.clone();
        let ctx = self.ctx.clone();
        let wake = self.wake.clone();
        if std::thread::Builder::new()
            .name("rds-ctl-work".into())
            .spawn(move || loop {
                let job = {
                    let g = rx.lock().unwrap_or_else(|p| p.into_inner());
                    g.recv()
                };
                let Ok(job) = job else { break };
                let d = work(&ctx, job);
                if tx.send(d).is_err() {
                    break;
                }
                sys::eventfd_signal(wake.as_raw_fd());
            })
            .is_ok()
        {
            self.workers += 1;
        }
    }
}

/// Runs one job on a worker.
fn work(ctx: &Ctx, job: Job) -> Done {
    let Job { mut conn, work } = job;
    if conn.stream.set_nonblocking(false).is_err() {
        return Done::Close(conn);
    }
    let next = match work {
        Work::Frame { req, data, file } => requests::frame(ctx, &mut conn, req, data, file),
        Work::Flush(rest) => {
            use std::io::Write;
            conn.stream
                .write_all(&rest)
                .ok()
                .map(|()| Action::Reply(Reply::Ok, Vec::new()))
        }
    };
    match next {
        None => Done::Close(conn),
        Some(_) if conn.stream.set_nonblocking(true).is_err() => Done::Close(conn),
        Some(Action::Park(p)) => Done::Park(conn, p),
        // Rings are set up in the event loop only.
        Some(Action::Ring { .. }) => Done::Close(conn),
        Some(Action::Reply(..)) => Done::Idle(conn),
    }
}
