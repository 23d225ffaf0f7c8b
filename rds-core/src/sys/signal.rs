//! Signal dispositions a process passes on to the program it executes.
#![allow(unsafe_code)]

/// Puts the stop signals (SIGINT, SIGTERM, SIGHUP, SIGQUIT) back to their default
/// disposition, for a process about to `exec` a program that must be stoppable by them: a
/// command started in the background by a shell without job control, or under `nohup`,
/// inherits some of them ignored, and a program cannot always catch a signal that was ignored
/// when it started (a shell script's `trap` cannot).
pub fn default_stop_signals() {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT] {
        // SAFETY: SIG_DFL installs no handler, so no code of ours can run in signal context.
        unsafe {
            libc::signal(sig, libc::SIG_DFL);
        }
    }
}
