//! Kernel-only proof of the interop lab: boots two guests and runs `lab.sh check` (kernel
//! RDS/TCP and RDS/IB inside and between the guests, the selftest traffic with resets,
//! netem), then exercises the Rust API the interop tests use (exec, spawn, 9p share, netns
//! threads). Needs root; it fails, never skips, when the lab cannot run.

use rds_tests::lab::{guest_addr, Lab, LabOptions, HOST_ADDR1, HOST_ADDR2, RDS_TCP_PORT};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(60);

#[test]
fn kernel_lab_selftest() {
    let t0 = Instant::now();
    let lab = Lab::start(2, LabOptions::default()).expect("the kernel lab must boot");
    let booted = t0.elapsed();

    // 1. the kernel-only checks of lab.sh (18 checks with two guests)
    let report = lab.run_kernel_checks().expect("kernel-only lab checks");
    println!("{report}");
    assert!(report.contains("\nPASS"), "no PASS verdict in:\n{report}");
    assert!(!report.contains(" FAIL "), "a check failed:\n{report}");

    // 2. exec: output, stderr and exit status come back
    let out = lab
        .exec(1, "echo out-$(hostname); echo err >&2; exit 7", T)
        .unwrap();
    assert_eq!(out.status, 7);
    assert_eq!(out.stdout, "out-g1\n");
    assert_eq!(out.stderr, "err\n");
    let out = lab.exec_ok(2, "ip -4 -o addr show dev eth0", T).unwrap();
    assert!(
        out.stdout.contains(&format!("{}/24", guest_addr(2))),
        "{}",
        out.stdout
    );

    // 3. spawn: a kernel RDS receiver in g1, a sender in g2, synchronised on "bound"
    let recv = lab
        .spawn(
            1,
            "rdstool recv -b 198.18.0.2:7000 -t tcp -n 20 --sources 1 --timeout 60",
            T,
        )
        .unwrap();
    recv.wait_for_output("recv: bound", Duration::from_secs(30))
        .unwrap();
    lab.exec_ok(
        2,
        "rdstool send -b 198.18.0.4:7001 -d 198.18.0.2:7000 -t tcp -n 20 -s 0,100,70000",
        T,
    )
    .unwrap();
    let r = recv.wait().unwrap().check("receiver").unwrap();
    assert!(r.stdout.contains("recv: ok received=20"), "{}", r.stdout);

    // fixed text content, printed by the receiver
    let recv = lab
        .spawn(
            2,
            "rdstool recv -b 198.18.0.4:7100 -t tcp -n 2 --no-verify --print --timeout 30",
            T,
        )
        .unwrap();
    recv.wait_for_output("recv: bound", Duration::from_secs(30))
        .unwrap();
    lab.exec_ok(
        1,
        "rdstool send -b 198.18.0.2:7101 -d 198.18.0.4:7100 -n 2 --text hello-from-g1",
        T,
    )
    .unwrap();
    let r = recv.wait().unwrap().check("text receiver").unwrap();
    assert!(
        r.stdout
            .contains("msg 198.18.0.2:7101 13 68656c6c6f2d66726f6d2d6731 hello-from-g1"),
        "{}",
        r.stdout
    );

    // a job that outlives its time limit is killed by the guest (status 124)
    let slow = lab.exec(1, "sleep 30", Duration::from_secs(2)).unwrap();
    assert_eq!(slow.status, 124, "{slow:?}");
    // and a killed background job reports 128+SIGKILL
    let job = lab.spawn(2, "sleep 40", T).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    job.kill();
    assert_eq!(job.wait().unwrap().status, 137);

    // 4. a host-built glibc-dynamic Rust binary runs in the guest from the 9p share: this
    //    test executable itself, listing its tests
    let exe = std::fs::read(std::env::current_exe().unwrap()).unwrap();
    let path = lab.write_share(1, "lab_kernel_test", &exe).unwrap();
    let out = lab
        .exec_ok(1, &format!("{path} --list --format terse"), T)
        .unwrap();
    assert!(
        out.stdout.contains("kernel_lab_selftest: test"),
        "{}",
        out.stdout
    );

    // 5. host threads inside the rdslab namespace reach the guests' RDS/TCP listeners from
    //    the host-side addresses; a thread spawned there inherits the namespace
    let local = lab
        .in_netns(|| {
            let inner = std::thread::spawn(|| {
                let dst = SocketAddr::new(IpAddr::V4(guest_addr(2)), RDS_TCP_PORT);
                TcpStream::connect_timeout(&dst, Duration::from_secs(5)).map(|s| s.local_addr())
            });
            inner.join().expect("inner thread")
        })
        .unwrap()
        .expect("TCP connect from the netns")
        .expect("local address");
    let ip = local.ip();
    assert!(
        ip == IpAddr::V4(HOST_ADDR1) || ip == IpAddr::V4(HOST_ADDR2),
        "unexpected source address {ip}"
    );
    // the main namespace never gets the lab's addresses
    let main_ns = std::fs::read_to_string("/proc/net/fib_trie").unwrap_or_default();
    assert!(
        !main_ns.contains("198.18.0.1"),
        "198.18.0.1 leaked into the main netns"
    );
    // ns_command runs host programs there too
    let o = lab
        .ns_command("ip")
        .args(["-4", "-o", "addr", "show", "dev", "br0"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&o.stdout).contains("198.18.0.3/24"));

    lab.stop().unwrap();
    println!(
        "lab: boot (incl. setup) {:.1}s, total {:.1}s",
        booted.as_secs_f64(),
        t0.elapsed().as_secs_f64()
    );
}

/// Guests without the kernel's rds_rdma (for userspace RDS/IB tests): rxe0 is there, the
/// kernel refuses (and does not autoload) the IB transport.
#[test]
fn kernel_lab_without_rds_rdma() {
    let opts = LabOptions {
        ib: false,
        ..LabOptions::default()
    };
    let lab = Lab::start(1, opts).expect("the kernel lab must boot");
    let report = lab.run_kernel_checks().expect("kernel-only lab checks");
    println!("{report}");
    assert!(report.contains("g1-ib-absent"), "{report}");
    assert!(report.contains("\nPASS"), "{report}");
    let out = lab
        .exec_ok(1, "cat /proc/cmdline; ls /dev/infiniband", T)
        .unwrap();
    assert!(out.stdout.contains("lab.ib=0"), "{}", out.stdout);
    assert!(out.stdout.contains("uverbs0"), "{}", out.stdout);
    lab.stop().unwrap();
}
