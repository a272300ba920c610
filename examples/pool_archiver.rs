//! pool_archiver: keeps a copy of every CDO offered that a selector matches, in a
//! directory (`pool_tools::archive` format) that `pool_librarian` serves later.
//!
//!     MSTRO_POOL_MANAGER_INFO=... pool_archiver --dir DIR [--selector S] [--namespace NS]
//!         [--count N]
//!
//! It subscribes to OFFER with signal-before and require-ack: each offer waits until the
//! archiver required the CDO and acknowledged, so the data is its to fetch even if the
//! producer withdraws right after. Runs until `--count` CDOs are archived or SIGINT/SIGTERM.

mod helpers;

use std::path::PathBuf;
use std::sync::atomic::Ordering;

use clap::Parser;
use pool::events::{EventKind, SubscribeOptions};
use pool_tools::archive::Archive;

/// Archives offered CDOs to a directory.
#[derive(Parser)]
struct Args {
    /// The archive directory (created if missing).
    #[arg(long)]
    dir: PathBuf,
    #[command(flatten)]
    selecting: helpers::Selecting,
}

fn run(args: Args) -> Result<(), helpers::Error> {
    let stop = helpers::stop_flag()?;
    let archive = Archive::open(&args.dir)?;
    let client = helpers::join("archiver")?;
    let selector = args.selecting.parse(&client)?;
    let options = SubscribeOptions {
        signal_before: true,
        require_ack: true,
        no_local: true,
        replay: false,
    };
    let sub = client.subscribe(&selector, EventKind::Offer, options)?;
    eprintln!(
        "pool_archiver: archiving offers into {}",
        args.dir.display()
    );
    let mut archived = 0;
    while !stop.load(Ordering::Relaxed) && !args.selecting.enough(archived) {
        let Some(event) = sub.wait_timeout(helpers::POLL)? else {
            continue;
        };
        let Some(name) = event.cdo.clone() else {
            sub.ack(&event)?;
            continue;
        };
        // Require before the offer happens: the PM moves the data to us right away.
        let cdo = client.declare(&name)?;
        client.require(cdo)?;
        sub.ack(&event)?;
        let (data, attributes) = client.demand(cdo)?;
        let path = archive.store(&name, &data, &attributes)?;
        client.dispose(cdo)?;
        archived += 1;
        println!(
            "archived {name} ({} bytes) to {}",
            data.len(),
            path.display()
        );
    }
    client.unsubscribe(sub)?;
    client.leave()?;
    Ok(())
}

fn main() -> std::process::ExitCode {
    helpers::exit("pool_archiver", run(Args::parse()))
}
