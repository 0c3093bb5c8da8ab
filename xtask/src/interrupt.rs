//! Ctrl-C, SIGTERM and SIGHUP: stop the throwaway clusters before the process goes away.
//!
//! A background thread waits for the first of these signals, then terminates the running child
//! step (Ctrl-C already reaches it through the terminal's process group; SIGTERM and SIGHUP may
//! not), tears down every live [`crate::pg::Cluster`] and exits with `128 + signal`.

use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread;

use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

/// Process id of the step currently running as a child, 0 when none.
static CHILD: AtomicU32 = AtomicU32::new(0);

/// Installs the handler; without it (registration failed) a signal kills the process as usual
/// and a cluster may be left behind, which is reported as a warning.
pub fn install() {
    let mut signals = match Signals::new([SIGINT, SIGTERM, SIGHUP]) {
        Ok(signals) => signals,
        Err(e) => {
            eprintln!(
                "xtask: warning: cannot handle Ctrl-C ({e}); an interrupt may leave a cluster behind"
            );
            return;
        }
    };
    thread::spawn(move || {
        if let Some(signal) = signals.forever().next() {
            eprintln!("\nxtask: interrupted (signal {signal}); cleaning up");
            let child = CHILD.load(Ordering::SeqCst);
            if child != 0 && signal != SIGINT {
                let _ = Command::new("kill")
                    .args(["-TERM", &child.to_string()])
                    .stdin(Stdio::null())
                    .status();
            }
            crate::pg::teardown_all();
            std::process::exit(128 + signal);
        }
    });
}

/// Records `pid` as the running child step until the returned guard is dropped.
pub fn track_child(pid: u32) -> ChildTracked {
    CHILD.store(pid, Ordering::SeqCst);
    ChildTracked
}

/// Clears the running child step on drop.
#[derive(Debug)]
pub struct ChildTracked;

impl Drop for ChildTracked {
    fn drop(&mut self) {
        CHILD.store(0, Ordering::SeqCst);
    }
}
