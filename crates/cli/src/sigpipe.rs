//! `mozart status | head` must end quietly, not panic with "failed printing to stdout".
//!
//! The Rust runtime ignores SIGPIPE, so a closed pipe turns every `println!` into a panic.
//! Short-lived commands restore the default action (die silently, like other Unix tools);
//! the conductor keeps ignoring it, since a client hanging up must never kill the daemon.

/// Restore the default SIGPIPE disposition for this (short-lived, single-threaded) process.
#[allow(unsafe_code)]
pub fn restore_default() {
    use nix::sys::signal::{signal, SigHandler, Signal};
    // SAFETY: called from `main` before any other thread exists; installing SIG_DFL runs no
    // handler code, so nothing can observe a half-installed handler.
    unsafe {
        let _ = signal(Signal::SIGPIPE, SigHandler::SigDfl);
    }
}
