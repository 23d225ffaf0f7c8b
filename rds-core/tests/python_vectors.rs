//! Header vectors computed independently by `tests/vectors.py` (Python `struct` and a
//! checksum written there) must equal what `rds_core::wire` emits, field for field.

use rds_core::wire::{ExtHeader, HeaderPacket, HeaderRepr};
use serde_json::Value;

fn ext_from_json(e: &Value) -> ExtHeader {
    let u = |k: &str| e[k].as_u64().expect("number") as u32;
    match e["type"].as_u64().unwrap() {
        1 => ExtHeader::Version(u("v")),
        2 => ExtHeader::Rdma { rkey: u("v") },
        3 => ExtHeader::RdmaDest {
            rkey: u("rkey"),
            offset: u("offset"),
        },
        4 => ExtHeader::RdmaBytes {
            bytes: u("bytes"),
            rflags: u("rflags") as u8,
        },
        5 => ExtHeader::Npaths(u("v") as u16),
        6 => ExtHeader::GenNum(u("v")),
        8 => ExtHeader::SportIdx(u("v") as u8),
        t => panic!("unexpected type {t}"),
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[test]
fn python_struct_vectors_match() {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/vectors.py");
    let out = std::process::Command::new("python3")
        .arg(script)
        .output()
        .expect("python3 must be installed to run the independent vectors");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let mut n = 0;
    for line in text.lines() {
        let v: Value = serde_json::from_str(line).unwrap();
        let mut repr = HeaderRepr {
            seq: v["seq"].as_u64().unwrap(),
            ack: v["ack"].as_u64().unwrap(),
            len: v["len"].as_u64().unwrap() as u32,
            sport: v["sport"].as_u64().unwrap() as u16,
            dport: v["dport"].as_u64().unwrap() as u16,
            flags: v["flags"].as_u64().unwrap() as u8,
            credit: v["credit"].as_u64().unwrap() as u8,
            ..Default::default()
        };
        for e in v["exts"].as_array().unwrap() {
            repr.push_ext(ext_from_json(e)).unwrap();
        }
        let mut buf = [0u8; 48];
        if v["csum"].as_bool().unwrap() {
            repr.emit_checksummed(&mut buf);
            assert!(HeaderPacket::new_checked(&buf[..]).unwrap().checksum_ok());
        } else {
            repr.emit(&mut buf);
        }
        assert_eq!(hex(&buf), v["hex"].as_str().unwrap(), "vector {n}: {line}");
        // And the parser reads back the same fields and extensions.
        let back = HeaderRepr::from_bytes(&buf).unwrap();
        assert_eq!(back.seq, repr.seq);
        assert_eq!(
            back.exts().collect::<Vec<_>>(),
            repr.exts().collect::<Vec<_>>()
        );
        n += 1;
    }
    assert_eq!(n, 300);
}
