//! The rdma-core run-time libraries: `libibverbs.so.1` / `librdmacm.so.1` load with every
//! symbol we call, what a host without RDMA devices reports, what a missing library or symbol
//! reports, and that nothing links against rdma-core at build time.
//!
//! Prerequisites (headers, run-time libraries, a C compiler) come from
//! `.ci/deps.d/ibverbs-dev.sh`; as root the tests run it when something is missing.

mod ib_prereqs;

use std::path::Path;
use std::process::Command;

use rds_core::ib::{self, ffi, IbLib, IbUnavailable};

use ib_prereqs::*;

/// Whether this host has RDMA devices (then the "no devices" expectations flip).
fn host_has_rdma_devices() -> bool {
    std::fs::read_dir("/sys/class/infiniband")
        .map(|d| d.count() > 0)
        .unwrap_or(false)
}

#[test]
fn runtime_libraries_load_and_report_devices() {
    ensure_prereqs();
    let lib = ib::lib().expect("libibverbs.so.1 and librdmacm.so.1 load with every symbol");
    assert_eq!(lib.verbs_name(), "libibverbs.so.1");
    assert_eq!(lib.cm_name(), "librdmacm.so.1");
    match ib::availability() {
        Ok(devs) => {
            assert!(
                host_has_rdma_devices(),
                "devices reported without /sys/class/infiniband"
            );
            assert!(!devs.is_empty());
            for d in &devs {
                eprintln!("ib device: {d}");
            }
        }
        Err(e) => {
            assert!(
                !host_has_rdma_devices(),
                "this host has RDMA devices, yet: {e}"
            );
            // libibverbs fails with ENOSYS when it cannot read the uverbs ABI version.
            let kernel = Path::new("/sys/class/infiniband_verbs/abi_version").exists();
            let expected = if kernel {
                IbUnavailable::NoDevices
            } else {
                IbUnavailable::NoKernelSupport
            };
            assert_eq!(e, expected);
            assert!(e.to_string().starts_with("no RDMA devices"), "{e}");
            eprintln!("availability: {e}");
            // The list itself is empty, not an error.
            let list = ib::DeviceList::new(lib).expect("ibv_get_device_list");
            assert_eq!(list.kernel_support(), kernel);
            assert!(list.is_empty());
            assert_eq!(list.len(), 0);
            assert_eq!(list.iter().count(), 0);
        }
    }
}

#[test]
fn runtime_missing_library_is_named() {
    let e = IbLib::open_named("libibverbs-rds-test-missing.so.1", ffi::LIBRDMACM)
        .expect_err("no such library");
    match &e {
        IbUnavailable::LibraryMissing {
            library, package, ..
        } => {
            assert_eq!(library, "libibverbs-rds-test-missing.so.1");
            assert_eq!(*package, "libibverbs1 (and ibverbs-providers)");
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(
        e.to_string()
            .starts_with("libibverbs-rds-test-missing.so.1 not found: install libibverbs1 (and ibverbs-providers)"),
        "{e}"
    );

    ensure_prereqs();
    let e = IbLib::open_named(ffi::LIBIBVERBS, "librdmacm-rds-test-missing.so.1")
        .expect_err("no such library");
    assert!(
        e.to_string()
            .starts_with("librdmacm-rds-test-missing.so.1 not found: install librdmacm1"),
        "{e}"
    );
}

#[test]
fn runtime_missing_symbol_is_named() {
    ensure_prereqs();
    // libc is a real library without our symbols: the first one is reported.
    let e = IbLib::open_named("libc.so.6", ffi::LIBRDMACM).expect_err("libc has no verbs");
    match &e {
        IbUnavailable::SymbolMissing {
            library, symbol, ..
        } => {
            assert_eq!(library, "libc.so.6");
            assert_eq!(*symbol, "ibv_get_device_list");
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(
        e.to_string()
            .starts_with("libc.so.6 has no symbol ibv_get_device_list"),
        "{e}"
    );
}

#[test]
fn runtime_cm_channel_without_kernel_support_is_an_error() {
    ensure_prereqs();
    let lib = ib::lib().expect("libraries load");
    match ib::cm::EventChannel::new(lib) {
        Ok(ch) => {
            // rdma_ucm is loaded here: the channel works and is empty.
            assert!(Path::new("/dev/infiniband/rdma_cm").exists());
            assert!(ch.fd() >= 0);
            assert!(ch.get_event().expect("read the channel").is_none());
            let id = ch.create_id().expect("rdma_create_id");
            assert!(id.context().is_none(), "an unbound id has no device");
            assert_eq!(id.local_addr(), None);
        }
        Err(e) => {
            assert!(!Path::new("/dev/infiniband/rdma_cm").exists(), "{e}");
            assert_eq!(e.op, "rdma_create_event_channel");
        }
    }
}

#[test]
fn no_link_time_dependency_on_rdma_core() {
    // This test binary links rds-core: its dynamic section must not name the libraries.
    let exe = std::env::current_exe().expect("current exe");
    let out = Command::new("readelf").arg("-d").arg(&exe).output();
    let Ok(out) = out else {
        panic!("readelf (binutils) is needed; run {DEPS_SCRIPT} as root");
    };
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("(NEEDED)"), "a dynamic executable: {text}");
    assert!(!text.contains("libibverbs"), "{text}");
    assert!(!text.contains("librdmacm"), "{text}");
}
