//! `scripts/install.sh` into a temporary DESTDIR with PREFIX=/usr, from the binaries of this
//! build (BINDIR): the tools run from there, the man pages, the unit and each tool's bash, zsh
//! and fish completions are in place, and the unit starts the installed rds-ctrl.

use std::path::Path;
use std::process::Command;

#[test]
fn installs_into_a_destdir() {
    let bindir = rds_tests::workspace_bin("rds-ctrl")
        .parent()
        .unwrap()
        .to_path_buf();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let dest = tempfile::tempdir().unwrap();
    let out = Command::new(root.join("scripts/install.sh"))
        .env("DESTDIR", dest.path())
        .env("PREFIX", "/usr")
        .env("BINDIR", &bindir)
        .env("LIBDIR", rds_tests::preload_library().parent().unwrap())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let usr = dest.path().join("usr");
    for tool in [
        "rds-ping",
        "rds-info",
        "rds-stress",
        "rds-ctrl",
        "rds-trace",
    ] {
        let v = Command::new(usr.join("bin").join(tool))
            .arg("--version")
            .output()
            .unwrap();
        assert!(v.status.success(), "{tool}");
        let text = String::from_utf8_lossy(&v.stdout).into_owned();
        assert!(
            text.starts_with(&format!("{tool} {}", env!("CARGO_PKG_VERSION"))),
            "{text}"
        );
    }
    for page in [
        "man1/rds-ping.1",
        "man1/rds-info.1",
        "man1/rds-stress.1",
        "man1/rds-trace.1",
        "man7/rds.7",
        "man8/rds-ctrl.8",
        "man8/rds-preload.8",
    ] {
        assert!(usr.join("share/man").join(page).is_file(), "{page}");
    }
    // Completions in the shells' standard directories, each naming its tool's options.
    for (tool, option) in [
        ("rds-ping", "-c"),
        ("rds-info", "--list-nodes"),
        ("rds-stress", "--loopback"),
        ("rds-ctrl", "health"),
        ("rds-trace", "--install-wireshark-plugin"),
    ] {
        for (path, shell) in [
            (format!("share/bash-completion/completions/{tool}"), "bash"),
            (format!("share/zsh/vendor-completions/_{tool}"), "zsh"),
            (
                format!("share/fish/vendor_completions.d/{tool}.fish"),
                "fish",
            ),
        ] {
            let text =
                std::fs::read_to_string(usr.join(&path)).unwrap_or_else(|e| panic!("{path}: {e}"));
            // fish names options without their dashes: `-s c`, `-l list-nodes`.
            let bare = option.trim_start_matches('-');
            let named = match shell {
                "fish" if option.starts_with("--") => text.contains(&format!("-l {bare}")),
                "fish" if option.starts_with('-') => text.contains(&format!("-s {bare}")),
                _ => text.contains(option),
            };
            assert!(
                named && text.contains(tool),
                "{shell} completion of {tool}:\n{text}"
            );
        }
    }
    assert!(usr.join("lib/librds_preload.so").is_file());
    assert!(usr.join("include/rds_preload.h").is_file());
    let unit = std::fs::read_to_string(usr.join("lib/systemd/system/rds-daemon.service")).unwrap();
    assert!(
        unit.lines()
            .any(|l| l == "ExecStart=/usr/bin/rds-ctrl daemon"),
        "{unit}"
    );

    // A relative PREFIX is refused.
    let out = Command::new(root.join("scripts/install.sh"))
        .env("DESTDIR", dest.path())
        .env("PREFIX", "usr")
        .env("BINDIR", &bindir)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "install.sh: PREFIX must be an absolute path, not 'usr'\n"
    );
}
