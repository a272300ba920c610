//! Signals and other event sources fed into the launcher's main loop: SIGINT, SIGTERM,
//! SIGHUP and SIGQUIT (forwarded to every rank), and the PMIx host's events.

use std::sync::mpsc::{Receiver, Sender};

use super::{LoopEvent, RunError, io_err};

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
            crate::process::default_action(sig);
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
