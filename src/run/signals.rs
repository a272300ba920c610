//! Signals and other event sources fed into the launcher's main loop: SIGINT, SIGTERM,
//! SIGHUP and SIGQUIT (forwarded to every rank), and the PMIx host's events.

use std::sync::mpsc::{Receiver, Sender};

use super::{LoopEvent, RunError, io_err};

/// Sends `sig` to process group `pgid` (a rank's, which the launcher created); a group
/// already gone (`ESRCH`) is no error: the one place the launcher signals processes.
pub(crate) fn signal_group(pgid: i32, sig: i32) {
    // SAFETY: kill(2) has no memory effects; a negative pid names the group.
    unsafe { libc::kill(-pgid, sig) };
}

/// Puts `sig` back to its default action (a library's constructor may have installed a
/// handler of its own: what the signal does is the program's decision).
pub(crate) fn default_action(sig: i32) {
    // SAFETY: resetting a signal disposition to its default is always sound.
    unsafe { libc::signal(sig, libc::SIG_DFL) };
}

/// Moves events from one channel into the main loop's, wrapped.
pub(super) fn relay<T: Send + 'static>(
    rx: Receiver<T>,
    tx: Sender<LoopEvent>,
    wrap: fn(T) -> LoopEvent,
) -> Result<(), RunError> {
    std::thread::Builder::new()
        .name("host-events".into())
        .spawn(move || {
            for ev in rx {
                if tx.send(wrap(ev)).is_err() {
                    break;
                }
            }
        })
        .map_err(io_err("starting the host event thread"))?;
    Ok(())
}

/// Forwards SIGINT, SIGTERM, SIGHUP and SIGQUIT into the main loop.
pub(super) struct SignalRelay {
    pub(super) handle: signal_hook::iterator::Handle,
}

impl SignalRelay {
    pub(super) fn start(tx: Sender<LoopEvent>) -> Result<SignalRelay, RunError> {
        use signal_hook::consts::{SIGHUP, SIGINT, SIGQUIT, SIGTERM};
        const FORWARDED: [i32; 4] = [SIGINT, SIGTERM, SIGHUP, SIGQUIT];
        // Libraries may install handlers from their constructors (Debian's libfabric pulls
        // in libinfinipath, whose handler exits with status 1 on SIGTERM). signal-hook
        // chains to whatever was installed before it, so reset these signals first: the
        // launcher alone decides what they do.
        for sig in FORWARDED {
            default_action(sig);
        }
        let mut signals = signal_hook::iterator::Signals::new(FORWARDED)
            .map_err(io_err("installing signal handlers"))?;
        let handle = signals.handle();
        std::thread::Builder::new()
            .name("signals".into())
            .spawn(move || {
                for sig in signals.forever() {
                    if tx.send(LoopEvent::Signal(sig)).is_err() {
                        break;
                    }
                }
            })
            .map_err(io_err("starting the signal thread"))?;
        Ok(SignalRelay { handle })
    }

    pub(super) fn stop(self) {
        self.handle.close();
    }
}
