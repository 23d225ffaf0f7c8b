//! The destination list of the several-destination form: names from the command line and
//! from `-f FILE` (one per line, `-` for standard input, blank lines and `#` comments
//! ignored), each resolved once, at most [`MAX_DESTINATIONS`] and no address twice (a pong
//! names only the address it comes from, so two destinations with one address could not be
//! told apart).

use std::collections::HashMap;
use std::io::Read;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::path::Path;

/// A destination: as given, and its address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dest {
    /// As given on the command line or in the file.
    pub name: String,
    /// The address it resolved to.
    pub addr: IpAddr,
}

/// A host name or a numeric address: the first address it resolves to.
pub fn resolve(name: &str) -> Option<IpAddr> {
    if let Ok(ip) = name.parse::<IpAddr>() {
        return Some(ip);
    }
    // "[v6]" as some users write it.
    if let Some(ip) = name
        .strip_prefix('[')
        .and_then(|n| n.strip_suffix(']'))
        .and_then(|n| n.parse::<IpAddr>().ok())
    {
        return Some(ip);
    }
    // Only what a host name (or an address with a scope, fe80::1%eth0) can hold goes to the
    // resolver.
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | ':' | '%'))
    {
        return None;
    }
    let addrs: Vec<SocketAddr> = (name, 0u16).to_socket_addrs().ok()?.collect();
    addrs.first().map(SocketAddr::ip)
}

/// Most destinations of one run. Each is a connection of the RDS node (an embedded node opens
/// up to 8 TCP lanes to a peer), and the whole list is checked at every turn of the loop.
pub const MAX_DESTINATIONS: usize = 256;
/// Largest destination file read (a list of [`MAX_DESTINATIONS`] names with comments fits
/// many times over).
pub const MAX_FILE_BYTES: u64 = 1 << 20;

/// A name and where it was given: empty for the command line, `FILE:LINE` for a file.
pub type Named = (String, String);

/// The name of `path` in messages: standard input for `-`.
pub fn file_label(path: &Path) -> String {
    if path == Path::new("-") {
        "standard input".into()
    } else {
        path.display().to_string()
    }
}

/// The destinations of `text`, a destination file called `label`: one name per line, `#`
/// starting a comment, blank lines ignored.
///
/// # Errors
/// A line that is not UTF-8 or holds more than one word, with its file and line number.
pub fn parse_list(text: &[u8], label: &str) -> Result<Vec<Named>, String> {
    let mut names = Vec::new();
    for (i, raw) in text.split(|&b| b == b'\n').enumerate() {
        let at = format!("{label}:{}", i + 1);
        let line = std::str::from_utf8(raw).map_err(|_| format!("{at}: not UTF-8 text"))?;
        let line = line.split('#').next().unwrap_or_default().trim();
        if line.is_empty() {
            continue;
        }
        if line.split_whitespace().nth(1).is_some() {
            return Err(format!("{at}: one destination per line, not <{line}>"));
        }
        names.push((line.to_string(), at));
    }
    Ok(names)
}

/// The destinations listed in `path` (`-`: standard input), see [`parse_list`].
///
/// # Errors
/// The file cannot be read (with its errno, as the original's `die_errno`), is larger than
/// [`MAX_FILE_BYTES`], or a line is refused by [`parse_list`].
pub fn read_file(path: &Path) -> Result<Vec<Named>, String> {
    let label = file_label(path);
    let cant = |e: std::io::Error| match e.raw_os_error() {
        Some(n) => format!(
            "Cannot read destination file <{label}>, errno: {n} ({})",
            rds_core::errno::strerror(n)
        ),
        None => format!("Cannot read destination file <{label}>: {e}"),
    };
    let mut text = Vec::new();
    let limit = MAX_FILE_BYTES + 1;
    if path == Path::new("-") {
        std::io::stdin().lock().take(limit).read_to_end(&mut text)
    } else {
        std::fs::File::open(path).and_then(|f| f.take(limit).read_to_end(&mut text))
    }
    .map_err(cant)?;
    if text.len() as u64 > MAX_FILE_BYTES {
        return Err(format!(
            "Destination file <{label}> is larger than {MAX_FILE_BYTES} bytes"
        ));
    }
    parse_list(&text, &label)
}

/// Resolves every name with `resolve`, in order.
///
/// # Errors
/// More than [`MAX_DESTINATIONS`] names (before any is resolved), a name that does not
/// resolve (the original's message, after its file and line), or an address given twice.
pub fn resolve_all(
    names: &[Named],
    resolve: impl Fn(&str) -> Option<IpAddr>,
) -> Result<Vec<Dest>, String> {
    if names.len() > MAX_DESTINATIONS {
        return Err(format!(
            "Too many destinations: {} (at most {MAX_DESTINATIONS})",
            names.len()
        ));
    }
    let at = |origin: &str| {
        if origin.is_empty() {
            String::new()
        } else {
            format!("{origin}: ")
        }
    };
    let mut seen: HashMap<IpAddr, usize> = HashMap::new();
    let mut dests: Vec<Dest> = Vec::with_capacity(names.len());
    for (name, origin) in names {
        let addr = resolve(name)
            .ok_or_else(|| format!("{}Cannot parse destination address <{name}>", at(origin)))?;
        let key = canonical(addr);
        if let Some(&first) = seen.get(&key) {
            let other = &dests[first].name;
            return Err(if other == name {
                format!("{}Duplicate destination <{name}>", at(origin))
            } else {
                format!(
                    "{}Duplicate destination <{name}>: same address ({key}) as <{other}>",
                    at(origin)
                )
            });
        }
        seen.insert(key, dests.len());
        dests.push(Dest {
            name: name.clone(),
            addr,
        });
    }
    Ok(dests)
}

/// An IPv4-mapped IPv6 address as the IPv4 address it is (the address its pongs come from).
pub fn canonical(a: IpAddr) -> IpAddr {
    match a {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(a, IpAddr::V4),
        v4 => v4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(list: &[&str]) -> Vec<Named> {
        list.iter()
            .map(|n| (n.to_string(), String::new()))
            .collect()
    }

    #[test]
    fn lists_comments_and_blank_lines() {
        let text = b"# peers\n\n127.0.0.5\n  127.0.0.6   # rack 2\n\t\n::1\r\n#127.0.0.7\n";
        let got = parse_list(text, "hosts").unwrap();
        assert_eq!(
            got,
            [
                ("127.0.0.5".to_string(), "hosts:3".to_string()),
                ("127.0.0.6".to_string(), "hosts:4".to_string()),
                ("::1".to_string(), "hosts:6".to_string()),
            ]
        );
        assert_eq!(parse_list(b"", "x").unwrap(), []);
        assert_eq!(
            parse_list(b"a\nb c\n", "f").unwrap_err(),
            "f:2: one destination per line, not <b c>"
        );
        assert_eq!(
            parse_list(b"a\n\xff\n", "f").unwrap_err(),
            "f:2: not UTF-8 text"
        );
    }

    #[test]
    fn resolves_in_order_without_duplicates() {
        let r = |n: &str| resolve(n);
        let d = resolve_all(&named(&["127.0.0.2", "::1", "::ffff:127.0.0.3"]), r).unwrap();
        let addrs: Vec<String> = d.iter().map(|d| d.addr.to_string()).collect();
        assert_eq!(addrs, ["127.0.0.2", "::1", "::ffff:127.0.0.3"]);
        assert_eq!(d[2].name, "::ffff:127.0.0.3");
        assert_eq!(
            resolve_all(&named(&["127.0.0.2", "127.0.0.2"]), r).unwrap_err(),
            "Duplicate destination <127.0.0.2>"
        );
        assert_eq!(
            resolve_all(&named(&["127.0.0.3", "::ffff:127.0.0.3"]), r).unwrap_err(),
            "Duplicate destination <::ffff:127.0.0.3>: same address (127.0.0.3) as <127.0.0.3>"
        );
        let from_file = vec![
            ("127.0.0.2".to_string(), String::new()),
            ("bad!".to_string(), "peers:7".to_string()),
        ];
        assert_eq!(
            resolve_all(&from_file, r).unwrap_err(),
            "peers:7: Cannot parse destination address <bad!>"
        );
    }

    #[test]
    fn the_cap_is_checked_before_resolving() {
        let many: Vec<String> = (0..=MAX_DESTINATIONS)
            .map(|i| format!("127.1.{}.{}", i / 250, i % 250 + 1))
            .collect();
        let refs: Vec<&str> = many.iter().map(String::as_str).collect();
        let err = resolve_all(&named(&refs), |_| panic!("resolved")).unwrap_err();
        assert_eq!(
            err,
            format!(
                "Too many destinations: {} (at most {MAX_DESTINATIONS})",
                MAX_DESTINATIONS + 1
            )
        );
        assert_eq!(
            resolve_all(&named(&refs[..MAX_DESTINATIONS]), resolve)
                .unwrap()
                .len(),
            MAX_DESTINATIONS
        );
    }
}
