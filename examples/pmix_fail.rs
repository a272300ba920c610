//! pmix_fail: makes rank 0 fail in a chosen way while the other ranks wait for the host's
//! `PMIX_ERR_PROC_ABORTED` event and print it. Used to check that a launcher propagates
//! failures: `pmix_fail abort STATUS`, `pmix_fail crash` (SIGSEGV-like abort by signal),
//! `pmix_fail exit STATUS` (exit without finalize).
//!
//! The surviving ranks print `rank R: rank 0 failed (event ...)` and then wait to be
//! stopped by the launcher; they exit 3 if no event came within 10 s.

use std::process::ExitCode;
use std::time::Duration;

use pmix::{Client, Status, Value};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mode = args.first().map(String::as_str).unwrap_or("abort");
    let status: i32 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(7);
    let client = match Client::init() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("pmix_fail: {e}");
            return ExitCode::from(2);
        }
    };
    let me = client.rank();
    let handler = match client.register_events(&[Status::PROC_ABORTED]) {
        Ok(h) => h,
        Err(e) => {
            eprintln!("pmix_fail: {e}");
            return ExitCode::from(2);
        }
    };
    if let Err(e) = client.fence(&[], false, Duration::from_secs(30)) {
        eprintln!("pmix_fail: {e}");
        return ExitCode::from(2);
    }
    if me == 0 {
        match mode {
            "abort" => {
                let _ = client.abort(status, "pmix_fail was asked to abort");
                // The host kills us; should it not, fall through to an error exit.
                std::thread::sleep(Duration::from_secs(30));
                return ExitCode::from(4);
            }
            // SAFETY: deliberately dying by signal, as a crashing rank would.
            "crash" => unsafe {
                libc::raise(libc::SIGKILL);
            },
            _ => std::process::exit(status),
        }
    }
    match handler.recv_timeout(Duration::from_secs(10)) {
        Some(ev) => {
            let who = ev.affected_proc().map(|p| p.rank);
            let code = pmix::find(&ev.info, pmix::keys::EXIT_CODE).and_then(|v| match v {
                Value::Int(c) => Some(*c),
                _ => None,
            });
            println!(
                "rank {me}: rank {who:?} failed (event {}, exit code {code:?})",
                ev.status.0
            );
            // Wait for the launcher to stop us.
            std::thread::sleep(Duration::from_secs(30));
            ExitCode::SUCCESS
        }
        None => {
            println!("rank {me}: no failure event");
            ExitCode::from(3)
        }
    }
}
