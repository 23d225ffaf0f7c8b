//! What a process passes on to the programs it executes (for the tools' detached helpers).

/// Puts SIGINT, SIGTERM, SIGHUP and SIGQUIT back to their default disposition before an
/// `exec`: a command started in the background by a shell without job control, or under
/// `nohup`, inherits some of them ignored, and the program it runs could then not be stopped
/// by them (a shell script cannot `trap` a signal ignored when it started).
pub fn default_stop_signals() {
    crate::sys::default_stop_signals();
}
