//! The documentation's references hold (issue 33). In `README.md`, `ARCHITECTURE.md` and
//! `docs/*.md`:
//!
//! - every relative link names a file or directory of the repository, and its `#anchor` a
//!   heading of the linked document;
//! - every `path` in backticks that names a file of the repository exists (a path below a
//!   directory `.gitignore` lists, such as `tests/lab/cache`, need not; absolute paths,
//!   `~/…`, `$VAR/…` and built files under `target/` are not the repository's);
//! - every code span (`` `…` ``) ends on its line, so that the checks see it whole;
//! - every fenced code block is tagged `sh` (commands) or `text` (output), and every command
//!   of a `sh` block, and every inline `cargo …` or `scripts/…` command, names a binary or
//!   script that exists: a tool of the workspace, an executable file of the repository, or a
//!   system program from a short list; `cargo` arguments `-p`, `--test`, `--bin`, `--bench`,
//!   `--example` and `--path` name a package, test, binary, benchmark, example or package
//!   directory of the workspace.
//!
//! Scripts and sources that point to a section of a document by its heading
//! (`docs/performance.md, "Heading"`) name a heading that exists.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .unwrap()
}

/// The checked documents, relative to the repository.
fn documents() -> Vec<PathBuf> {
    let mut docs = vec![PathBuf::from("README.md"), PathBuf::from("ARCHITECTURE.md")];
    let mut more: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .expect("docs/ exists")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .map(|p| Path::new("docs").join(p.file_name().unwrap()))
        .collect();
    more.sort();
    assert!(!more.is_empty(), "docs/ holds no .md file");
    docs.extend(more);
    docs
}

/// System programs a documented command may run.
const SYSTEM_PROGRAMS: &[&str] = &[
    "cargo",
    "git",
    "man",
    "modprobe",
    "qperf",
    "tcpdump",
    "tshark",
    "wireshark",
];

// ---------------------------------------------------------------------------------------------
// Markdown

/// One document: its fenced blocks (info string, lines with their numbers) and the text
/// outside them (lines with their numbers).
struct Doc {
    blocks: Vec<(String, Vec<(usize, String)>)>,
    prose: Vec<(usize, String)>,
}

fn parse(path: &Path) -> Doc {
    let text = std::fs::read_to_string(root().join(path))
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut doc = Doc {
        blocks: Vec::new(),
        prose: Vec::new(),
    };
    let mut open: Option<(String, Vec<(usize, String)>)> = None;
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        let fence = line.trim_start().strip_prefix("```");
        match (&mut open, fence) {
            (None, Some(info)) => open = Some((info.trim().to_string(), Vec::new())),
            (Some(_), Some(_)) => doc.blocks.push(open.take().unwrap()),
            (Some((_, lines)), None) => lines.push((n, line.to_string())),
            (None, None) => doc.prose.push((n, line.to_string())),
        }
    }
    assert!(
        open.is_none(),
        "{}: a code block is not closed",
        path.display()
    );
    doc
}

/// The inline code spans of a line of prose.
fn code_spans(line: &str) -> Vec<String> {
    line.split('`')
        .enumerate()
        .filter(|(i, _)| i % 2 == 1)
        .map(|(_, s)| s.to_string())
        .collect()
}

/// The text of a line of prose without its code spans.
fn without_code(line: &str) -> String {
    line.split('`')
        .enumerate()
        .filter(|(i, _)| i % 2 == 0)
        .map(|(_, s)| s)
        .collect::<Vec<_>>()
        .join("")
}

/// The targets of the `[text](target)` links of a line (outside code spans).
fn link_targets(line: &str) -> Vec<String> {
    let text = without_code(line);
    let mut out = Vec::new();
    let mut rest = text.as_str();
    while let Some(i) = rest.find("](") {
        let after = &rest[i + 2..];
        match after.find(')') {
            Some(j) => {
                out.push(after[..j].to_string());
                rest = &after[j + 1..];
            }
            None => break,
        }
    }
    out
}

/// GitHub's anchors of a document's headings (lower case, punctuation dropped, spaces as
/// hyphens, `-1`, `-2` … for repeated ones).
fn anchors(path: &Path) -> BTreeSet<String> {
    let doc = parse(path);
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    for (_, line) in &doc.prose {
        let Some(title) = heading(line) else { continue };
        let slug: String = title
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let k = seen.entry(slug.clone()).or_insert(0);
        out.insert(if *k == 0 {
            slug.clone()
        } else {
            format!("{slug}-{k}")
        });
        *k += 1;
    }
    out
}

/// The text of a heading line (`## Title` gives `Title`), or `None`.
fn heading(line: &str) -> Option<&str> {
    let t = line.trim_start_matches('#');
    (t.len() < line.len() && line.len() - t.len() <= 6 && t.starts_with(' ')).then(|| t.trim())
}

/// The headings of a document as written (code spans' backticks kept).
fn headings(path: &Path) -> BTreeSet<String> {
    parse(path)
        .prose
        .iter()
        .filter_map(|(_, l)| heading(l).map(str::to_string))
        .collect()
}

// ---------------------------------------------------------------------------------------------
// The workspace

/// Packages by name: their directory, binaries, tests, benches and examples.
#[derive(Default, Debug)]
struct Package {
    dir: PathBuf,
    bins: BTreeSet<String>,
    tests: BTreeSet<String>,
    benches: BTreeSet<String>,
    examples: BTreeSet<String>,
}

fn stems(dir: &Path) -> BTreeSet<String> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return BTreeSet::new();
    };
    rd.filter_map(|e| {
        let p = e.ok()?.path();
        if p.extension().is_some_and(|x| x == "rs") {
            Some(p.file_stem()?.to_string_lossy().into_owned())
        } else if p.join("main.rs").is_file() {
            Some(p.file_name()?.to_string_lossy().into_owned())
        } else {
            None
        }
    })
    .collect()
}

/// `name = "…"` values of the `[[section]]` tables of a manifest.
fn manifest_targets(manifest: &str, section: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut inside = false;
    for line in manifest.lines() {
        let l = line.trim();
        if l.starts_with('[') {
            inside = l == format!("[[{section}]]");
        } else if inside {
            if let Some(v) = l.strip_prefix("name = ") {
                out.insert(v.trim_matches('"').to_string());
            }
        }
    }
    out
}

fn workspace() -> BTreeMap<String, Package> {
    let top = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    let members = top
        .lines()
        .find_map(|l| l.trim().strip_prefix("members = "))
        .expect("workspace members");
    let mut out = BTreeMap::new();
    for m in members.trim_matches(|c| c == '[' || c == ']').split(',') {
        let dir = root().join(m.trim().trim_matches('"'));
        let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap();
        let name = manifest
            .lines()
            .find_map(|l| l.trim().strip_prefix("name = "))
            .unwrap()
            .trim_matches('"')
            .to_string();
        let mut p = Package {
            bins: stems(&dir.join("src/bin")),
            tests: stems(&dir.join("tests")),
            benches: manifest_targets(&manifest, "bench"),
            examples: stems(&dir.join("examples")),
            dir,
        };
        p.bins.extend(manifest_targets(&manifest, "bin"));
        p.benches.extend(stems(&p.dir.join("benches")));
        if p.dir.join("src/main.rs").is_file() {
            p.bins.insert(name.clone());
        }
        out.insert(name, p);
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Paths

/// Directories `.gitignore` lists from the top (`/tests/lab/cache/`), as relative paths.
fn ignored_dirs() -> Vec<String> {
    std::fs::read_to_string(root().join(".gitignore"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.strip_prefix('/'))
        .map(|l| l.trim_end_matches('/').to_string())
        .filter(|l| !l.is_empty() && !l.contains('*'))
        .collect()
}

/// Whether a code span is a path of the repository: one word with a `/`, starting with a
/// lower-case letter or a dot (not an address, an option or a constant), without wildcards,
/// placeholders or alternatives.
fn repo_path_like(s: &str) -> bool {
    let first = s.chars().next().unwrap_or(' ');
    s.contains('/')
        && !s.contains(char::is_whitespace)
        && !s.contains("://")
        && (first.is_ascii_lowercase() || first == '.')
        && !s.starts_with("target/")
        && !s.contains([
            '*', '<', '>', '|', '…', '=', '{', '(', ':', '[', ',', '+', '$',
        ])
}

/// Where a path of `doc` may be relative to: the repository, the document's directory, and
/// for `ARCHITECTURE.md` (which names modules by their path in the stack)
/// `rds-core/src`.
fn bases(doc: &Path) -> Vec<PathBuf> {
    let mut b = vec![root(), root().join(doc.parent().unwrap())];
    if doc == Path::new("ARCHITECTURE.md") {
        b.push(root().join("rds-core/src"));
    }
    b
}

fn path_exists(doc: &Path, p: &str, ignored: &[String]) -> bool {
    let p = p.trim_start_matches("./");
    ignored
        .iter()
        .any(|d| p == d || p.starts_with(&format!("{d}/")))
        || bases(doc).iter().any(|b| b.join(p).exists())
}

// ---------------------------------------------------------------------------------------------
// Commands

/// What is wrong with one command (`None`: nothing). `words` start after `sudo` and
/// `VAR=value` assignments.
fn command_problem(ws: &BTreeMap<String, Package>, cmd: &str) -> Option<String> {
    let words: Vec<&str> = cmd
        .split_whitespace()
        .skip_while(|w| {
            *w == "sudo"
                || w.split_once('=').is_some_and(|(k, _)| {
                    !k.is_empty() && k.chars().all(|c| c.is_ascii_uppercase() || c == '_')
                })
        })
        .collect();
    let prog = *words.first()?;
    let bins: BTreeSet<&str> = ws
        .values()
        .flat_map(|p| p.bins.iter().map(String::as_str))
        .collect();
    if prog.contains('/') {
        let f = root().join(prog);
        use std::os::unix::fs::PermissionsExt;
        return match std::fs::metadata(&f) {
            Ok(m) if m.is_file() && m.permissions().mode() & 0o111 != 0 => None,
            Ok(_) => Some(format!("{prog} is not an executable file")),
            Err(_) => Some(format!("{prog} does not exist")),
        };
    }
    if bins.contains(prog) {
        return None;
    }
    if !SYSTEM_PROGRAMS.contains(&prog) {
        return Some(format!(
            "{prog} is neither a binary of the workspace nor a script of the repository (nor \
             one of the system programs {SYSTEM_PROGRAMS:?})"
        ));
    }
    if prog != "cargo" {
        return None;
    }
    let args: Vec<&str> = words[1..]
        .iter()
        .take_while(|w| **w != "--")
        .copied()
        .collect();
    let value = |flag: &str| -> Vec<&str> {
        args.windows(2)
            .filter(|w| w[0] == flag)
            .map(|w| w[1])
            .collect()
    };
    let pkgs: Vec<&str> = [value("-p"), value("--package")].concat();
    for p in &pkgs {
        if !ws.contains_key(*p) {
            return Some(format!("no package {p} in the workspace"));
        }
    }
    // Without -p, the workspace: any package may hold the target.
    let scope: Vec<&Package> = if pkgs.is_empty() {
        ws.values().collect()
    } else {
        pkgs.iter().map(|p| &ws[*p]).collect()
    };
    type Pick = fn(&Package) -> &BTreeSet<String>;
    let kinds: [(&str, &str, Pick); 4] = [
        ("--test", "test", |p| &p.tests),
        ("--bin", "binary", |p| &p.bins),
        ("--bench", "benchmark", |p| &p.benches),
        ("--example", "example", |p| &p.examples),
    ];
    for (flag, what, pick) in kinds {
        for v in value(flag) {
            if !scope.iter().any(|p| pick(p).contains(v)) {
                return Some(format!("no {what} {v} in {pkgs:?}"));
            }
        }
    }
    for d in value("--path") {
        if !root().join(d).join("Cargo.toml").is_file() {
            return Some(format!("--path {d}: no package there"));
        }
    }
    None
}

/// The commands of a shell line: its comment dropped, split at `|`, `&&`, `||`, `;` and `&`.
fn shell_commands(line: &str) -> Vec<String> {
    let code = match line.find(" #") {
        Some(i) => &line[..i],
        None if line.trim_start().starts_with('#') => "",
        None => line,
    };
    code.replace("&&", "\n")
        .replace("||", "\n")
        .replace(['|', ';', '&'], "\n")
        .lines()
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .map(str::to_string)
        .collect()
}

/// Whether an inline code span is a command to check: its first word (after `VAR=value`
/// assignments) is `cargo` or a path to a script.
fn inline_command(span: &str) -> bool {
    let first = span
        .split_whitespace()
        .find(|w| !w.contains('='))
        .unwrap_or("");
    span.contains(' ') && (first == "cargo" || first.starts_with("scripts/"))
}

// ---------------------------------------------------------------------------------------------
// The test

#[test]
fn documents_name_what_exists() {
    let ws = workspace();
    let ignored = ignored_dirs();
    let mut problems = Vec::new();
    let mut counts = BTreeMap::new();
    for path in documents() {
        let doc = parse(&path);
        let at = |n: usize| format!("{}:{n}", path.display());
        let (mut links, mut paths, mut cmds) = (0, 0, 0);
        for (n, line) in &doc.prose {
            // A code span ends on its line, so that the checks below see it whole.
            if line.matches('`').count() % 2 == 1 {
                problems.push(format!(
                    "{}: a code span runs over the end of the line: keep each on one line",
                    at(*n)
                ));
            }
            for target in link_targets(line) {
                if target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                links += 1;
                let (file, anchor) = target.split_once('#').unwrap_or((&target, ""));
                let linked = if file.is_empty() {
                    path.clone()
                } else {
                    path.parent().unwrap().join(file)
                };
                if !root().join(&linked).exists() {
                    problems.push(format!("{}: link to {target}: no such file", at(*n)));
                    continue;
                }
                if !anchor.is_empty()
                    && linked.extension().is_some_and(|x| x == "md")
                    && !anchors(&linked).contains(anchor)
                {
                    problems.push(format!(
                        "{}: link to {target}: no heading with anchor #{anchor} in {}",
                        at(*n),
                        linked.display()
                    ));
                }
            }
            for span in code_spans(line) {
                if inline_command(&span) {
                    cmds += 1;
                    if let Some(p) = command_problem(&ws, &span) {
                        problems.push(format!("{}: `{span}`: {p}", at(*n)));
                    }
                } else if repo_path_like(&span) {
                    paths += 1;
                    if !path_exists(&path, &span, &ignored) {
                        problems.push(format!("{}: `{span}` does not exist", at(*n)));
                    }
                }
            }
        }
        for (info, lines) in &doc.blocks {
            let first = lines.first().map_or(0, |l| l.0.saturating_sub(1));
            match info.as_str() {
                "text" => {}
                "sh" => {
                    for (n, line) in lines {
                        for c in shell_commands(line) {
                            cmds += 1;
                            if let Some(p) = command_problem(&ws, &c) {
                                problems.push(format!("{}: {c}: {p}", at(*n)));
                            }
                        }
                    }
                }
                other => problems.push(format!(
                    "{}: a code block tagged {other:?}: tag it sh (commands) or text (output)",
                    at(first)
                )),
            }
        }
        counts.insert(path.display().to_string(), (links, paths, cmds));
    }
    println!("links, paths and commands checked per document: {counts:?}");
    assert!(problems.is_empty(), "\n{}", problems.join("\n"));
    // The checks saw something: the README links, names paths and shows commands.
    let (l, p, c) = counts["README.md"];
    assert!(
        l >= 5 && p >= 5 && c >= 10,
        "README.md: {l} links, {p} paths, {c} commands"
    );
}

/// `docs/NAME.md, "Heading"` (or `README.md, …`) in the scripts and sources names a heading
/// of that document.
#[test]
fn section_references_name_existing_headings() {
    let mut files = Vec::new();
    for dir in ["scripts", ".ci", "tests/src", "tests/tests"] {
        collect(&root().join(dir), &mut files);
    }
    for p in workspace().values() {
        for sub in ["src", "tests", "benches"] {
            collect(&p.dir.join(sub), &mut files);
        }
    }
    // This file's own examples are not references.
    files.retain(|f| !f.ends_with("tests/tests/docs_links.rs"));
    let mut refs = 0;
    let mut problems = Vec::new();
    for f in &files {
        let Ok(text) = std::fs::read_to_string(f) else {
            continue;
        };
        for (i, line) in text.lines().enumerate() {
            for (doc, title) in section_refs(line) {
                refs += 1;
                let path = root().join(&doc);
                if !path.is_file() {
                    problems.push(format!("{}:{}: {doc} does not exist", f.display(), i + 1));
                } else if !headings(Path::new(&doc)).contains(&title) {
                    problems.push(format!(
                        "{}:{}: no heading \"{title}\" in {doc}",
                        f.display(),
                        i + 1
                    ));
                }
            }
        }
    }
    println!("{refs} section references checked");
    assert!(problems.is_empty(), "\n{}", problems.join("\n"));
    assert!(
        refs >= 1,
        "scripts/bench-app-path.sh names a section of docs/performance.md"
    );
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            collect(&p, out);
        } else if p
            .extension()
            .is_some_and(|x| x == "rs" || x == "sh" || x == "py")
            || p.file_name().is_some_and(|n| n == "run")
        {
            out.push(p);
        }
    }
}

/// `(document, heading)` of each `DOC.md, "Heading"` in a line (a `\` before a quote, as in
/// a shell string, is allowed).
fn section_refs(line: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(i) = rest.find(".md, ") {
        let before = &rest[..i];
        let start = before
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '/' || c == '_' || c == '-'))
            .map_or(0, |j| j + 1);
        let doc = format!("{}.md", &before[start..]);
        let after = rest[i + 5..].trim_start_matches('\\');
        rest = &rest[i + 5..];
        let Some(quoted) = after.strip_prefix('"') else {
            continue;
        };
        if let Some(end) = quoted.find(['"', '\\']) {
            out.push((doc, quoted[..end].to_string()));
        }
    }
    out
}
