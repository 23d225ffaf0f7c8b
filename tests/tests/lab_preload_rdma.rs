//! RDMA through the preload library on RDS/IB (issue 20): the C program
//! `tests/preload/rds_rdma.c`, unmodified, in lab guest g1 with `LD_PRELOAD=librds_preload.so`
//! (the kernel's RDS modules removed, so an embedded node of ours serves it and picks RDS/IB
//! because the address is on `rxe0`), against the same program in g2 on the kernel's
//! `rds_rdma`. Both roles both ways: the target registers a buffer with
//! `RDS_CMSG_RDMA_MAP` and sends its cookie, the initiator gets it as `RDS_CMSG_RDMA_DEST`,
//! RDMA-writes and RDMA-reads the region (`RDS_CMSG_RDMA_ARGS`, `RDS_RDMA_NOTIFY_ME`) and
//! reports the `RDS_CMSG_RDMA_STATUS` notifications; the target checks every byte the write
//! put into its memory, the initiator every byte the read brought. Each side's transcript
//! must be exactly the expected one, and g2's kernel must list the connection as
//! `infiniband`. A third run has g1's target register with `RDS_GET_MR` (and release with
//! `RDS_FREE_MR`) instead.
//!
//! One boot of two guests. Needs root, `gcc` with a static libc, and the release
//! `librds_preload.so` (`cargo build --release -p rds-preload`); fails, never skips, when the
//! lab cannot boot.

use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use rds_tests::lab::{guest_addr, Lab, LabOptions};

const T: Duration = Duration::from_secs(90);

const INITIATOR: &str = "initiator: bound
initiator: \"map\" came with a cookie (RDS_CMSG_RDMA_DEST), offset 0
initiator: RDMA write notified: token 0x1111 status 0
initiator: RDMA read notified: token 0x2222 status 0
initiator: the RDMA read brought the target's 8192 bytes
";

const TARGET: &str = "target: mapped 16384 bytes (RDS_CMSG_RDMA_MAP), cookie written: yes, offset 0
target: \"wrote\" arrived after the RDMA write put 8192 bytes in place
target: \"read\" arrived
";

const TARGET_GETMR: &str =
    "target: registered 16384 bytes (RDS_GET_MR), cookie written: yes, offset 0
target: \"wrote\" arrived after the RDMA write put 8192 bytes in place
target: \"read\" arrived
target: RDS_FREE_MR released the region
target: a second RDS_FREE_MR: EINVAL
";

/// `rds_rdma.c`'s bytes: built dynamically for the preloaded side (`LD_PRELOAD` needs the
/// dynamic loader), statically for the kernel's side.
fn program(static_link: bool) -> Vec<u8> {
    let out = rds_tests::build_c_program(
        "rds_rdma",
        static_link,
        std::path::Path::new(env!("CARGO_TARGET_TMPDIR")),
    );
    let bytes = std::fs::read(&out).unwrap();
    let _ = std::fs::remove_file(&out);
    bytes
}

/// The command running `rds_rdma ROLE` in guest `g` (g1 through the preload library).
fn cmd(g: usize, role: &str, port: u16) -> String {
    let (me, peer) = (guest_addr(g), guest_addr(3 - g));
    let pre = if g == 1 {
        "mkdir -p /tmp/rp; LD_PRELOAD=/mnt/share/librds_preload.so RDS_NO_DAEMON=1 \
         RDS_RUNTIME_DIR=/tmp/rp "
    } else {
        ""
    };
    format!("{pre}/mnt/share/rds_rdma {role} {me} {peer} {port}")
}

/// One exchange: the initiator in guest `ig` (started first), the target (`role`) in the
/// other.
fn exchange(lab: &Lab, ig: usize, role: &str, port: u16) -> Result<()> {
    let tg = 3 - ig;
    let ini = lab.spawn(ig, &cmd(ig, "initiator", port), T)?;
    ini.wait_for_output("initiator: bound", Duration::from_secs(30))
        .with_context(|| format!("initiator in g{ig}"))?;
    let t = lab.exec(tg, &cmd(tg, role, port), T)?;
    let want = if role == "target" {
        TARGET
    } else {
        TARGET_GETMR
    };
    let i = ini.wait()?;
    let both = format!(
        "initiator g{ig}: exit {}\n{}{}\ntarget g{tg}: exit {}\n{}{}",
        i.status, i.stdout, i.stderr, t.status, t.stdout, t.stderr
    );
    ensure!(i.status == 0 && t.status == 0, "{both}");
    ensure!(
        i.stdout == INITIATOR && t.stdout == want,
        "transcripts differ from the expected ones:\n{both}"
    );
    Ok(())
}

fn run(lab: &Lab) -> Result<()> {
    lab.exec_ok(
        1,
        "rmmod rds_rdma && rmmod rds_tcp && rmmod rds && ! grep -q '^rds' /proc/modules",
        T,
    )
    .context("removing the kernel's RDS modules from g1")?;
    let lib = std::fs::read(rds_tests::preload_library()).context("librds_preload.so")?;
    lab.write_share(1, "librds_preload.so", &lib)?;
    lab.write_share(1, "rds_rdma", &program(false))?;
    lab.write_share(2, "rds_rdma", &program(true))?;

    exchange(lab, 1, "target", 4600).context("preloaded initiator (g1), kernel target (g2)")?;
    println!("g1 preloaded initiator -> g2 kernel target: RDMA write and read, notified, checked");
    exchange(lab, 2, "target", 4601).context("kernel initiator (g2), preloaded target (g1)")?;
    println!("g2 kernel initiator -> g1 preloaded target: RDMA write and read, notified, checked");
    // RDS_GET_MR by setsockopt works on our stack (the kernel's FRWR on rxe has no
    // registration without a connection and answers EOPNOTSUPP, so only g1 takes this role).
    exchange(lab, 2, "target-getmr", 4602)
        .context("kernel initiator (g2), preloaded RDS_GET_MR target (g1)")?;
    println!("g2 kernel initiator -> g1 preloaded RDS_GET_MR target: RDMA, RDS_FREE_MR checked");

    lab.expect_kernel_ib_conn(2, 1, T)
}

#[test]
fn rdma_through_the_preload_library_against_the_kernel() {
    let t0 = Instant::now();
    let lab = Lab::start(2, LabOptions::default()).expect("the kernel lab must boot");
    let booted = t0.elapsed();
    let r = run(&lab);
    let diag = if r.is_err() {
        lab.exec(1, "dmesg | tail -20", T)
            .map(|o| o.stdout)
            .unwrap_or_default()
    } else {
        String::new()
    };
    lab.stop().unwrap();
    if let Err(e) = r {
        panic!("{e:#}\n--- g1 dmesg ---\n{diag}");
    }
    println!(
        "lab_preload_rdma: boot {:.1}s, total {:.1}s",
        booted.as_secs_f64(),
        t0.elapsed().as_secs_f64()
    );
}
