//! The Prometheus text format (0.0.4) as real parsers read it: Python's `prometheus_client`
//! (`prometheus_client.parser.text_string_to_metric_families`, in `/usr/bin/python3`, installed
//! by `.ci/deps.d/prometheus.sh`), and the rules of the Go parser that Prometheus and
//! node_exporter's textfile collector use which the Python one does not enforce ([`strict`]).

use std::collections::BTreeMap;
use std::io::Write;
use std::process::{Command, Stdio};

use anyhow::{bail, ensure, Context, Result};

/// The interpreter that has `prometheus_client`.
pub const PYTHON: &str = "/usr/bin/python3";

/// Prints the families the parser found as one JSON list.
const SCRIPT: &str = r#"
import json, sys
from prometheus_client.parser import text_string_to_metric_families
out = []
for f in text_string_to_metric_families(sys.stdin.read()):
    out.append({"name": f.name, "type": f.type, "help": f.documentation,
                "samples": [{"name": s.name, "labels": s.labels, "value": s.value}
                            for s in f.samples]})
json.dump(out, sys.stdout)
"#;

/// One sample as the parser read it.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
pub struct Sample {
    /// The sample's name (a counter's ends in `_total`).
    pub name: String,
    /// Its labels.
    pub labels: BTreeMap<String, String>,
    /// Its value.
    pub value: f64,
}

/// One family as the parser read it.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
pub struct Family {
    /// The family's name (`prometheus_client` takes `_total` off a counter's).
    pub name: String,
    /// `counter`, `gauge`, ...
    #[serde(rename = "type")]
    pub kind: String,
    /// The HELP text, unescaped.
    pub help: String,
    /// The samples in order.
    pub samples: Vec<Sample>,
}

impl Family {
    /// The value of the sample with these labels (besides `node`).
    pub fn value(&self, labels: &[(&str, &str)]) -> Option<f64> {
        self.samples
            .iter()
            .find(|s| {
                labels
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
                    && s.labels.len() == labels.len() + 1
            })
            .map(|s| s.value)
    }
}

/// `text` through `prometheus_client`'s parser. Fails (never skips) when the parser is
/// missing.
pub fn parse(text: &str) -> Result<Vec<Family>> {
    let mut child = Command::new(PYTHON)
        .args(["-c", SCRIPT])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("{PYTHON} (install it: bash .ci/deps.d/prometheus.sh)"))?;
    child
        .stdin
        .take()
        .context("stdin")?
        .write_all(text.as_bytes())?;
    let out = child.wait_with_output()?;
    let err = String::from_utf8_lossy(&out.stderr);
    if err.contains("No module named 'prometheus_client'") {
        bail!("Python's prometheus_client is missing: run bash .ci/deps.d/prometheus.sh\n{err}");
    }
    ensure!(
        out.status.success(),
        "prometheus_client refused the exposition: {err}\n--- text ---\n{text}"
    );
    serde_json::from_slice(&out.stdout).context("the parser's JSON")
}

/// The Go text parser's rules (`expfmt.TextParser`, which Prometheus and node_exporter's
/// textfile collector use) that Python's parser lets pass: a family's HELP and TYPE come once,
/// before its samples; a counter's or gauge's samples carry the family's name; no family comes
/// back later; no blank line, no timestamp; the text ends with a newline.
pub fn strict(text: &str) -> Result<()> {
    ensure!(text.ends_with('\n'), "no final newline");
    let valid = |n: &str| {
        !n.is_empty()
            && !n.starts_with(|c: char| c.is_ascii_digit())
            && n.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
    };
    let mut done: Vec<String> = Vec::new();
    let mut current: Option<(String, bool, bool)> = None; // name, HELP seen, TYPE seen
    for (i, line) in text.lines().enumerate() {
        let at = || format!("line {}: {line:?}", i + 1);
        ensure!(!line.is_empty(), "blank {}", at());
        if let Some(rest) = line.strip_prefix("# ") {
            let (what, rest) = rest.split_once(' ').context(at())?;
            let name = rest.split(' ').next().unwrap_or_default();
            ensure!(valid(name), "bad metric name, {}", at());
            match &mut current {
                Some((n, help, ty)) if n == name => {
                    let seen = if what == "HELP" { help } else { ty };
                    ensure!(!*seen, "second {what}, {}", at());
                    *seen = true;
                }
                _ => {
                    if let Some((n, _, _)) = current.take() {
                        done.push(n);
                    }
                    ensure!(!done.iter().any(|d| d == name), "{name} again, {}", at());
                    current = Some((name.to_string(), what == "HELP", what == "TYPE"));
                }
            }
            if what == "TYPE" {
                let t = rest.split(' ').nth(1).unwrap_or_default();
                ensure!(["counter", "gauge"].contains(&t), "type {t}, {}", at());
            } else {
                ensure!(what == "HELP", "unknown comment, {}", at());
            }
            continue;
        }
        let name_end = line.find(['{', ' ']).context(at())?;
        let name = &line[..name_end];
        let family = current.as_ref().map(|c| c.0.as_str());
        ensure!(
            family == Some(name),
            "sample outside its family {family:?}, {}",
            at()
        );
        ensure!(
            current.as_ref().is_some_and(|c| c.1 && c.2),
            "sample before HELP and TYPE, {}",
            at()
        );
        let after = match line[name_end..].strip_prefix('{') {
            Some(r) => {
                let close = closing_brace(r).with_context(at)?;
                &r[close + 1..]
            }
            None => &line[name_end..],
        };
        let fields: Vec<&str> = after.split_whitespace().collect();
        ensure!(fields.len() == 1, "value (no timestamp), {}", at());
        fields[0]
            .parse::<f64>()
            .with_context(|| format!("value, {}", at()))?;
    }
    Ok(())
}

/// Where the label set ends (the `}` outside a quoted value).
fn closing_brace(s: &str) -> Option<usize> {
    let mut quoted = false;
    let mut escaped = false;
    for (i, c) in s.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            '}' if !quoted => return Some(i),
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strict_rules() {
        let ok = "# HELP a_total x\n# TYPE a_total counter\na_total{n=\"}\\\"\"} 1\n";
        strict(ok).unwrap();
        for bad in [
            "# TYPE a gauge\na 1",
            "a 1\n",
            "# HELP a x\na 1\n",
            "# HELP a x\n# TYPE a gauge\na 1 123\n",
            "# HELP a x\n# TYPE a gauge\na_total 1\n",
            "# HELP a x\n# TYPE a gauge\na 1\n# HELP b y\n# TYPE b gauge\n# HELP a x\n",
            "# HELP a x\n# HELP a x\n# TYPE a gauge\n",
            "# HELP a x\n# TYPE a gauge\n\na 1\n",
            "# HELP a x\n# TYPE a summary\na 1\n",
            "# EOF\n",
        ] {
            assert!(strict(bad).is_err(), "{bad:?}");
        }
    }
}
