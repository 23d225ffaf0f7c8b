//! The `--stack kernel|user|auto` option every tool takes: which RDS serves the tool's
//! sockets and tables ([`rds_core::socket::StackChoice`]). One parser ([`stack_arg`]), one help
//! text ([`STACK_HELP`]) and one check ([`apply_stack`]) so that the tools agree.

pub use rds_core::socket::StackChoice;

/// The option's help line.
pub const STACK_HELP: &str = "Which RDS to use: kernel (the kernel's AF_RDS), user (this \
                              project's daemon or an embedded node) or auto (the daemon if it \
                              owns the address, else the kernel's RDS if loaded, else an \
                              embedded node; the default)";

/// Parses the option's value (for clap's `value_parser`).
///
/// # Errors
/// A message naming the three values.
pub fn stack_arg(s: &str) -> Result<StackChoice, String> {
    s.parse()
}

/// The stack a tool resolves `auto` to for tables and counters (no address to ask the
/// daemon about): the kernel's when it has RDS loaded, else ours.
pub fn info_stack(s: StackChoice) -> StackChoice {
    match s {
        StackChoice::Auto if rds_core::kernel::loaded() => StackChoice::Kernel,
        StackChoice::Auto => StackChoice::User,
        other => other,
    }
}

/// Makes `s` the process's stack. `kernel` on a host whose kernel has no RDS is refused with
/// one line for stderr: `<tool>: --stack kernel: <why and what to do>`.
///
/// # Errors
/// That line.
pub fn apply_stack(tool: &str, s: StackChoice) -> Result<(), String> {
    if s == StackChoice::Kernel {
        if let Some(why) = rds_core::kernel::unavailable_reason() {
            return Err(format!("{tool}: --stack kernel: {why}"));
        }
    }
    rds_core::socket::set_stack(s);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values() {
        assert_eq!(stack_arg("kernel"), Ok(StackChoice::Kernel));
        assert_eq!(stack_arg("USER"), Ok(StackChoice::User));
        assert_eq!(stack_arg("auto"), Ok(StackChoice::Auto));
        let e = stack_arg("kern").unwrap_err();
        assert!(
            e.contains("invalid stack 'kern'") && e.contains("kernel"),
            "{e}"
        );
    }

    #[test]
    fn kernel_refused_without_kernel_rds() {
        if rds_core::kernel::loaded() {
            return; // a kernel-RDS host: the lab tests cover it
        }
        let e = apply_stack("rds-x", StackChoice::Kernel).unwrap_err();
        assert!(
            e.starts_with("rds-x: --stack kernel: the kernel's RDS is not available"),
            "{e}"
        );
        assert!(
            e.contains("modprobe rds_tcp") && e.contains("--stack user"),
            "{e}"
        );
        assert_eq!(info_stack(StackChoice::Auto), StackChoice::User);
    }
}
