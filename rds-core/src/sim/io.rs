//! A node's side of the simulated network as the engine driver sees it (`proto::driver::Io`).

use crate::proto::driver::{self, Io};
use crate::proto::{ConnId, DropReason, HeldEnd, LinkId, SockId, Stack};

use super::Sim;

impl Sim {
    /// Moves the node's pending work (connects, disconnects, frames, wakeups) into the
    /// network. Call after every direct use of [`Sim::stack`].
    pub fn pump(&mut self, n: usize) {
        driver::pump(&mut SimIo { sim: self, n });
    }
}

/// Node `n`'s side of the simulated network, as the engine driver sees it.
struct SimIo<'a> {
    sim: &'a mut Sim,
    n: usize,
}

impl Io for SimIo<'_> {
    fn stack(&mut self) -> &mut Stack {
        &mut self.sim.nodes[self.n].stack
    }

    fn connect(&mut self, conn: ConnId, path: usize, epoch: u32) {
        self.sim.connect(self.n, conn, path, epoch);
    }

    fn disconnect(&mut self, conn: ConnId, path: usize, epoch: u32, reason: DropReason) {
        self.sim.disconnect(self.n, conn, path, epoch, reason);
    }

    fn transmit(&mut self, conn: ConnId, path: usize) {
        self.sim.transmit(self.n, conn, path);
    }

    fn wake(&mut self, sock: SockId) {
        self.sim.nodes[self.n].woken.push(sock);
    }

    fn cong_changed(&mut self) {
        self.sim.nodes[self.n].cong_changed = true;
    }

    fn adopt(&mut self, link: LinkId, conn: ConnId, path: usize, epoch: u32) {
        self.sim.adopt(self.n, link.0 as usize, conn, path, epoch);
    }

    fn refuse(&mut self, link: LinkId, why: HeldEnd) {
        let _ = why;
        self.sim.refuse_held(link.0 as usize);
    }

    // The simulated network has no RDMA regions: `rdma_unuse` does nothing.
}
