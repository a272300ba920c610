//! pmix_events: rank 0 raises an application event; every other rank must receive it.
//! Exits 0 when each rank saw what it should within 10 s.
//!
//! Run only under a host that relays events between ranks (`maestro run`); never under
//! Slurm, whose stepd kills the job step on any client notification.

use std::process::ExitCode;
use std::time::Duration;

use pmix::{Client, Error, Info, Range, Status, Value};

/// The application event code this example raises.
const HELLO_EVENT: Status = Status::user(42);

fn main() -> ExitCode {
    match events() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pmix_events: {e}");
            ExitCode::FAILURE
        }
    }
}

fn events() -> Result<(), Error> {
    let client = Client::init()?;
    let me = client.rank();
    let handler = client.register_events(&[HELLO_EVENT])?;
    // Everyone has registered before rank 0 speaks.
    client.fence(&[], false, Duration::from_secs(30))?;
    if me == 0 {
        client.notify_event(
            HELLO_EVENT,
            Range::Namespace,
            &[Info::new(
                pmix::keys::EVENT_TEXT_MESSAGE,
                Value::String("hello from rank 0".into()),
            )],
        )?;
        println!("rank 0: event sent");
    } else {
        loop {
            let ev = handler
                .recv_timeout(Duration::from_secs(10))
                .ok_or(Error::Timeout {
                    op: "waiting for rank 0's event",
                })?;
            let from = ev.source.as_ref().map(|p| p.rank);
            if ev.status == HELLO_EVENT && from == Some(0) {
                let msg = pmix::find(&ev.info, pmix::keys::EVENT_TEXT_MESSAGE)
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string();
                println!(
                    "rank {me}: received event {} from rank 0: {msg}",
                    ev.status.0
                );
                break;
            }
        }
    }
    client.fence(&[], false, Duration::from_secs(30))?;
    Ok(())
}
