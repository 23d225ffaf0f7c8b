//! Shell completions for bash, zsh and fish, generated from a tool's clap command by
//! `clap_complete`: `TOOL --generate-completions SHELL` (a hidden option, the first argument)
//! prints the script on standard output; `scripts/install.sh` installs one per tool and shell.

use std::ffi::{OsStr, OsString};
use std::io::Write;

use clap_complete::Shell;

/// The option, taken as the first argument only.
pub const OPTION: &str = "--generate-completions";

/// The shells, by the name the option takes.
pub const SHELLS: [(&str, Shell); 3] = [
    ("bash", Shell::Bash),
    ("zsh", Shell::Zsh),
    ("fish", Shell::Fish),
];

/// The shell named by `name`.
///
/// # Errors
/// A message naming the shells.
pub fn shell(name: &str) -> Result<Shell, String> {
    if name.is_empty() {
        return Err(format!("{OPTION} needs a shell: bash, zsh or fish"));
    }
    SHELLS
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, s)| *s)
        .ok_or_else(|| format!("{OPTION}: unknown shell '{name}' (bash, zsh or fish)"))
}

/// Whether `args` (the program name first) ask for completions: `Some` with the shell's
/// name as given (empty when it is missing).
pub fn requested(args: &[OsString]) -> Option<&OsStr> {
    let first = args.get(1)?.to_str()?;
    if first == OPTION {
        return Some(args.get(2).map_or(OsStr::new(""), OsString::as_os_str));
    }
    first
        .strip_prefix(OPTION)
        .and_then(|r| r.strip_prefix('='))
        .map(OsStr::new)
}

/// Writes the completion script of `cmd` (named `prog`) for `shell` to `out`.
pub fn generate(mut cmd: clap::Command, prog: &str, shell: Shell, out: &mut dyn Write) {
    clap_complete::generate(shell, &mut cmd, prog, out);
}

/// The script as a string (for tests).
pub fn script(cmd: clap::Command, prog: &str, shell: Shell) -> String {
    let mut v = Vec::new();
    generate(cmd, prog, shell, &mut v);
    String::from_utf8_lossy(&v).into_owned()
}

/// Whether `script` (of `shell`) offers `option` (`-c`, `--count`, or a subcommand's name):
/// bash and zsh write options as they are typed, fish as `-s c` and `-l count`.
pub fn offers(script: &str, shell: Shell, option: &str) -> bool {
    match (shell, option.strip_prefix("--"), option.strip_prefix('-')) {
        (Shell::Fish, Some(long), _) => script.contains(&format!("-l {long}")),
        (Shell::Fish, None, Some(short)) => script.contains(&format!("-s {short}")),
        _ => script.contains(option),
    }
}

/// Asserts that the script of every shell for `cmd` (named `prog`) offers each of `options`
/// (for the tools' tests).
///
/// # Panics
/// When one does not, with the script.
pub fn assert_offers(cmd: &clap::Command, prog: &str, options: &[&str]) {
    for (name, shell) in SHELLS {
        let s = script(cmd.clone(), prog, shell);
        assert!(s.contains(prog), "{name} completion of {prog}:\n{s}");
        for o in options {
            assert!(
                offers(&s, shell, o),
                "{name} completion of {prog} lacks {o}:\n{s}"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn asked_as_the_first_argument() {
        let a = |v: &[&str]| -> Vec<OsString> { v.iter().map(Into::into).collect() };
        assert_eq!(
            requested(&a(&["t", "--generate-completions", "zsh"])),
            Some(OsStr::new("zsh"))
        );
        assert_eq!(
            requested(&a(&["t", "--generate-completions=fish"])),
            Some(OsStr::new("fish"))
        );
        assert_eq!(
            requested(&a(&["t", "--generate-completions"])),
            Some(OsStr::new(""))
        );
        assert_eq!(requested(&a(&["t", "-c", "--generate-completions"])), None);
        assert_eq!(requested(&a(&["t"])), None);
        assert_eq!(shell("BASH"), Ok(Shell::Bash));
        assert_eq!(
            shell("").unwrap_err(),
            "--generate-completions needs a shell: bash, zsh or fish"
        );
        assert_eq!(
            shell("tcsh").unwrap_err(),
            "--generate-completions: unknown shell 'tcsh' (bash, zsh or fish)"
        );
    }

    #[test]
    fn scripts_name_the_options() {
        let cmd = clap::Command::new("rds-x")
            .arg(clap::Arg::new("count").short('c').long("count"))
            .subcommand(clap::Command::new("load"));
        for (name, sh) in SHELLS {
            let s = script(cmd.clone(), "rds-x", sh);
            assert!(
                s.contains("--count") || s.contains("-l count"),
                "{name}: {s}"
            );
            assert!(s.contains("load"), "{name}: {s}");
        }
    }
}
