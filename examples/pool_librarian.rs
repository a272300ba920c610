//! pool_librarian: answers REQUIREs and DEMANDs of CDOs it finds in an archive directory
//! (as `pool_archiver` writes it) by offering them, with their archived attributes.
//!
//!     MSTRO_POOL_MANAGER_INFO=... pool_librarian --dir DIR [--eager] [--selector S]
//!         [--namespace NS] [--count N]
//!
//! With `--eager` it offers every archived CDO at start. Runs until it offered `--count`
//! CDOs or SIGINT/SIGTERM, then withdraws its offers and leaves. The attributes' schemas must be loaded
//! (`MSTRO_SCHEMA_PATH`, `MSTRO_SCHEMA_LIST`), as for any producer.

mod helpers;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::Ordering;

use clap::Parser;
use fabric::Buffer;
use pool::Client;
use pool::events::{EventKind, SubscribeOptions};
use pool::proto::CdoId;
use pool_tools::archive::Archive;

/// Offers archived CDOs to whoever needs them.
#[derive(Parser)]
struct Args {
    /// The archive directory.
    #[arg(long)]
    dir: PathBuf,
    /// Offer every archived CDO at start.
    #[arg(long)]
    eager: bool,
    /// Which requires and demands to answer (the selector sees the consumer's CDO: its
    /// name), and how many CDOs to offer before stopping.
    #[command(flatten)]
    selecting: helpers::Selecting,
}

/// Offers `name` from the archive unless it is offered already; false if not archived.
fn serve(
    client: &Client,
    archive: &Archive,
    offered: &mut HashMap<String, CdoId>,
    name: &str,
) -> Result<bool, helpers::Error> {
    if offered.contains_key(name) {
        return Ok(true);
    }
    let Some((data, attributes)) = archive.load(name)? else {
        return Ok(false);
    };
    let cdo = client.declare(name)?;
    client.seal(cdo, attributes)?;
    client.offer(cdo, Buffer::from_slice(&data)?)?;
    offered.insert(name.to_string(), cdo);
    println!("offered {name} ({} bytes)", data.len());
    Ok(true)
}

fn run(args: Args) -> Result<(), helpers::Error> {
    let stop = helpers::stop_flag()?;
    let archive = Archive::existing(&args.dir)?;
    let client = helpers::join("librarian")?;
    let options = SubscribeOptions {
        no_local: true,
        ..SubscribeOptions::default()
    };
    let sub = client.subscribe(
        &args.selecting.parse(&client)?,
        EventKind::Require | EventKind::Demand,
        options,
    )?;
    let mut offered = HashMap::new();
    if args.eager {
        for name in archive.names()? {
            serve(&client, &archive, &mut offered, &name)?;
        }
    }
    eprintln!("pool_librarian: serving {}", args.dir.display());
    while !stop.load(Ordering::Relaxed) && !args.selecting.enough(offered.len() as u64) {
        if let Some(name) = sub.wait_timeout(helpers::POLL)?.and_then(|e| e.cdo) {
            serve(&client, &archive, &mut offered, &name)?;
        }
    }
    client.unsubscribe(sub)?;
    for (_, cdo) in offered {
        client.withdraw(cdo)?;
        client.dispose(cdo)?;
    }
    client.leave()?;
    Ok(())
}

fn main() -> std::process::ExitCode {
    helpers::exit("pool_librarian", run(Args::parse()))
}
