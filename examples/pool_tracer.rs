//! pool_tracer: logs the pool events of a selector as JSON lines on stdout.
//!
//!     MSTRO_POOL_MANAGER_INFO=... pool_tracer [--kinds offer,require|all] [--selector S]
//!         [--namespace NS] [--count N] [--new-only]
//!
//! First it prints the current state: an event for every live CDO that matches, of the kind
//! its state stands for (an offered CDO as an `offer`, with the detail "before this
//! subscription"), so CDOs offered before it started are not missed; `--new-only` skips
//! that. Runs until it printed `--count` events, or until SIGINT/SIGTERM; then unsubscribes and
//! leaves. Each line is one `pool::events::PoolEvent`.

mod helpers;

use std::io::Write;
use std::sync::atomic::Ordering;

use clap::Parser;
use pool::events::{EventKind, EventKinds, SubscribeOptions};

/// Logs pool events as JSON lines.
#[derive(Parser)]
struct Args {
    /// Event kinds, comma-separated (declare, seal, offer, require, demand, withdraw,
    /// retract, dispose, app-join, app-leave, transport-started, transport-completed,
    /// fabric) or `all`.
    #[arg(long, default_value = "all")]
    kinds: String,
    /// Only events from now on (not the current state first).
    #[arg(long)]
    new_only: bool,
    #[command(flatten)]
    selecting: helpers::Selecting,
}

fn kinds(text: &str) -> Result<EventKinds, helpers::Error> {
    if text == "all" {
        return Ok(EventKinds::all());
    }
    Ok(text
        .split(',')
        .map(|k| k.trim().parse::<EventKind>())
        .collect::<Result<EventKinds, _>>()?)
}

fn run(args: Args) -> Result<(), helpers::Error> {
    let stop = helpers::stop_flag()?;
    let kinds = kinds(&args.kinds)?;
    let client = helpers::join("tracer")?;
    let selector = args.selecting.parse(&client)?;
    let options = SubscribeOptions {
        no_local: true,
        replay: !args.new_only,
        ..SubscribeOptions::default()
    };
    let sub = client.subscribe(&selector, kinds, options)?;
    eprintln!("pool_tracer: subscribed ({})", args.kinds);
    let mut out = std::io::stdout().lock();
    let mut seen = 0;
    while !stop.load(Ordering::Relaxed) && !args.selecting.enough(seen) {
        if let Some(event) = sub.wait_timeout(helpers::POLL)? {
            writeln!(out, "{}", serde_json::to_string(&event)?)?;
            out.flush()?;
            seen += 1;
        }
    }
    client.unsubscribe(sub)?;
    client.leave()?;
    Ok(())
}

fn main() -> std::process::ExitCode {
    helpers::exit("pool_tracer", run(Args::parse()))
}
