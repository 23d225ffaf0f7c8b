//! How a run ends and starts: SIGINT and SIGTERM end a `--loopback` run (whose default `-T 0`
//! runs until interrupted) with the dashes, the average line, the percentile line and, with
//! `--json`, the JSON document, then exit 128 + the signal number; the first per-second line
//! follows the "tasks will start in 2 seconds" line by the original's start-up (2 s for the
//! tasks to start, 2 s of warm-up, then one line a second). Addresses: 127.50.36-38.x.

mod common;

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, ChildStdout, Stdio};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use common::*;

/// Reads `r` line by line, sending each line with its arrival time; the whole text is the
/// thread's result.
fn lines_of<R: Read + Send + 'static>(
    r: R,
) -> (mpsc::Receiver<(Instant, String)>, JoinHandle<String>) {
    let (tx, rx) = mpsc::channel();
    let h = std::thread::spawn(move || {
        let mut all = String::new();
        for l in BufReader::new(r).lines() {
            let Ok(l) = l else { break };
            all.push_str(&l);
            all.push('\n');
            let _ = tx.send((Instant::now(), l));
        }
        all
    });
    (rx, h)
}

fn read_all<R: Read + Send + 'static>(mut r: R) -> JoinHandle<String> {
    std::thread::spawn(move || {
        let mut s = String::new();
        let _ = r.read_to_string(&mut s);
        s
    })
}

/// Waits for the child's exit with a deadline (killed and failed past it).
fn wait_code(child: &mut Child, limit: Duration) -> Option<i32> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(st) = child.try_wait().expect("wait") {
            return st.code();
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("rds-stress did not end {limit:?} after the signal");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Starts `rds-stress --loopback` with `extra`, waits for its first per-second line (on
/// stdout, or on stderr with `--json`), sends `sig` and returns (stdout, stderr, exit code).
fn interrupted(a: &str, b: &str, extra: &[&str], sig: Signal) -> (String, String, Option<i32>) {
    let rt = tempfile::tempdir().unwrap();
    let mut c = cmd(rt.path());
    c.args(["--loopback", "-r", a, "-s", b]).args(extra);
    c.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c.spawn().expect("spawn rds-stress");
    let stdout: ChildStdout = child.stdout.take().unwrap();
    let stderr = child.stderr.take().unwrap();
    let json = extra.contains(&"--json");
    let (human, human_text, other_text) = if json {
        let (rx, h) = lines_of(stderr);
        (rx, h, read_all(stdout))
    } else {
        let (rx, h) = lines_of(stdout);
        (rx, h, read_all(stderr))
    };
    let re = interval_re();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match human.recv_timeout(left) {
            Ok((_, l)) if re.is_match(&l) => break,
            Ok(_) => {}
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "no per-second line within 30 s:\n{}\n{}",
                    human_text.join().unwrap(),
                    other_text.join().unwrap()
                );
            }
        }
    }
    kill(Pid::from_raw(child.id() as i32), sig).expect("kill");
    let code = wait_code(&mut child, Duration::from_secs(20));
    drop(human);
    let (h, o) = (human_text.join().unwrap(), other_text.join().unwrap());
    // The runtime directory holds no socket of the two nodes once the run ended.
    let left: Vec<_> = std::fs::read_dir(rt.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".sock"))
        .collect();
    assert!(left.is_empty(), "sockets left behind: {left:?}");
    if json {
        (o, h, code)
    } else {
        (h, o, code)
    }
}

/// Checks the human report of an interrupted run: start-up, header, at least one per-second
/// line, dashes, the average line and the percentile line last.
fn check_summary(text: &str) {
    let lines: Vec<&str> = text.lines().collect();
    let start = lines
        .iter()
        .position(|l| *l == "Starting up....")
        .unwrap_or_else(|| panic!("no start-up line in:\n{text}"));
    assert_eq!(
        lines[start - 1],
        "negotiated options, tasks will start in 2 seconds"
    );
    assert_eq!(lines[start + 1], HEADER, "{text}");
    let dashes = lines
        .iter()
        .position(|l| *l == "---------------------------------------------")
        .unwrap_or_else(|| panic!("no dashes in:\n{text}"));
    assert!(dashes > start + 2, "no per-second line:\n{text}");
    for l in &lines[start + 2..dashes] {
        assert!(interval_re().is_match(l), "bad interval line {l:?}");
    }
    assert_eq!(lines.len(), dashes + 3, "{text}");
    let avg = lines[dashes + 1];
    assert!(average_re().is_match(avg), "bad average line {avg:?}");
    assert_eq!(field(avg, 0), 1.0);
    assert!(field(avg, 1) > 0.0 && field(avg, 2) > 0.0, "{avg}");
    assert!(percentile_re().is_match(lines[dashes + 2]), "{text}");
}

#[test]
fn sigint_prints_the_summary_and_exits_130() {
    let (out, err, code) = interrupted("127.50.36.1", "127.50.36.2", &[], Signal::SIGINT);
    assert_eq!(code, Some(130), "stdout:\n{out}\nstderr:\n{err}");
    assert_eq!(err, "");
    assert!(
        loopback_line_re("127.50.36.1", "127.50.36.2")
            .is_match(out.lines().next().unwrap_or_default()),
        "{out}"
    );
    check_summary(&out);
}

#[test]
fn sigterm_with_json_prints_the_document_and_exits_143() {
    let (out, err, code) = interrupted("127.50.37.1", "127.50.37.2", &["--json"], Signal::SIGTERM);
    assert_eq!(code, Some(143), "stdout:\n{out}\nstderr:\n{err}");
    check_summary(&err);
    let v: serde_json::Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("stdout is not JSON ({e}):\n{out}"));
    assert_eq!(v["stopped"], "interrupted");
    assert_eq!(v["tasks"], 1);
    assert_eq!(v["req_bytes"], 1024);
    assert_eq!(v["ack_bytes"], 63);
    assert_eq!(v["depth"], 1);
    assert_eq!(v["one_way"], false);
    let n = v["intervals"].as_array().expect("intervals").len();
    assert!(n >= 1, "{out}");
    // The intervals are the per-second lines shown on stderr.
    let shown = err.lines().filter(|l| interval_re().is_match(l)).count();
    assert_eq!(n, shown, "{out}\n{err}");
    assert!(v["seconds"].as_f64().unwrap() > 0.0);
    assert!(v["tx_per_sec"].as_f64().unwrap() > 0.0);
    assert!(v["rx_per_sec"].as_f64().unwrap() > 0.0);
    assert!(v["requests_sent"].as_u64().unwrap() > 0);
    assert!(v["requests_received"].as_u64().unwrap() > 0);
    let p = &v["rtt_us"];
    assert!(p["avg"].as_f64().unwrap() > 0.0);
    assert!(p["count"].as_u64().unwrap() > 0);
    assert!(p["p50"].as_u64().unwrap() <= p["max"].as_u64().unwrap());
    assert!(v["cpu_percent"].is_null());
}

/// A `-T 3` run shows exactly three per-second lines after the start-up. The time from the
/// "tasks will start" line to the first per-second line is printed (the original's start-up
/// takes 5 s: 2 s until the tasks start, 2 s of warm-up, then the first 1-second interval).
#[test]
fn timed_run_lines_and_start_up_gap() {
    let rt = tempfile::tempdir().unwrap();
    let mut c = cmd(rt.path());
    c.args([
        "--loopback",
        "-r",
        "127.50.38.1",
        "-s",
        "127.50.38.2",
        "-T",
        "3",
    ]);
    c.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c.spawn().expect("spawn rds-stress");
    let (rx, text) = lines_of(child.stdout.take().unwrap());
    let err = read_all(child.stderr.take().unwrap());
    let code = wait_code(&mut child, Duration::from_secs(40));
    let lines: Vec<(Instant, String)> = rx.iter().collect();
    let (out, err) = (text.join().unwrap(), err.join().unwrap());
    assert_eq!(code, Some(0), "stdout:\n{out}\nstderr:\n{err}");
    let re = interval_re();
    let said = lines
        .iter()
        .find(|(_, l)| l == "negotiated options, tasks will start in 2 seconds")
        .expect("start line")
        .0;
    let intervals: Vec<&(Instant, String)> = lines.iter().filter(|(_, l)| re.is_match(l)).collect();
    assert_eq!(intervals.len(), 3, "{out}");
    eprintln!(
        "start-up: first per-second line {:.3} s after \"tasks will start in 2 seconds\", \
         then {:.3} s and {:.3} s",
        intervals[0].0.duration_since(said).as_secs_f64(),
        intervals[1].0.duration_since(intervals[0].0).as_secs_f64(),
        intervals[2].0.duration_since(intervals[1].0).as_secs_f64()
    );
    check_summary(&out);
}
