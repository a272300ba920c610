//! fabric_info: what a rank learns about the fabric from its PMIx host, and the NIC it
//! uses. Under `maestro run` the host answers `PMIx_Fabric_register` with the node's
//! devices and registers each rank's NIC (`maestro.fabric.nic`); under hosts that do not
//! (Slurm, mpirun) the rank computes the same choice locally from hwloc and libfabric.
//!
//! Prints `rank R: PMIx fabric: N devices (names)` or `... not supported by this host`, then
//! `rank R: NIC X (from the host|computed locally)` and whether the host's choice matches
//! the local computation. With `--update-when FILE` it then waits (up to 60 s) for FILE to
//! exist and asks again with `PMIx_Fabric_update`, printing each device's link state
//! (`rank R: now: eth0=up,...`): the host's view now, not at launch.

use std::process::ExitCode;
use std::time::Duration;

use pmix::{Client, Error, GetOptions, Value, keys};

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("fabric_info: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let client = Client::init()?;
    let me = client.rank();
    match client.fabric_register(Duration::from_secs(10)) {
        Ok(infos) => {
            let names: Vec<String> = match pmix::find(&infos, keys::FABRIC_DEVICES) {
                Some(Value::Infos(devs)) => devs
                    .iter()
                    .filter_map(|d| match &d.value {
                        Value::Infos(f) => pmix::find(f, keys::FABRIC_DEVICE_NAME)
                            .and_then(Value::as_str)
                            .map(String::from),
                        _ => None,
                    })
                    .collect(),
                _ => Vec::new(),
            };
            println!(
                "rank {me}: PMIx fabric: {} devices ({})",
                names.len(),
                names.join(",")
            );
            // The traffic counters the host gives, per device.
            let traffic: Vec<String> = match pmix::find(&infos, keys::FABRIC_DEVICES) {
                Some(Value::Infos(devs)) => devs
                    .iter()
                    .filter_map(|d| match &d.value {
                        Value::Infos(f) => {
                            let name = pmix::find(f, keys::FABRIC_DEVICE_NAME)?.as_str()?;
                            let n = |k: &str| pmix::find(f, k).and_then(Value::as_u64);
                            let (rx, tx) = (
                                n(maestro_keys::FABRIC_RX_BYTES)?,
                                n(maestro_keys::FABRIC_TX_BYTES)?,
                            );
                            Some(format!("{name} rx={rx} tx={tx}"))
                        }
                        _ => None,
                    })
                    .collect(),
                _ => Vec::new(),
            };
            println!("rank {me}: traffic: {}", traffic.join(", "));
        }
        Err(Error::NotSupported { .. } | Error::NotFound { .. } | Error::Unreachable { .. }) => {
            println!("rank {me}: PMIx fabric: not supported by this host");
        }
        Err(e) => return Err(e.into()),
    }
    match client.get(
        client.proc(),
        keys::DEVICE_DISTANCES,
        GetOptions::immediate(),
    ) {
        Ok(Value::DeviceDistances(d)) => {
            let list: Vec<String> = d
                .iter()
                .map(|x| format!("{}={}", x.osname, x.mindist))
                .collect();
            println!("rank {me}: device distances: {}", list.join(","));
        }
        _ => println!("rank {me}: device distances: not provided by this host"),
    }
    let local_rank = client.local_rank()?;
    let (_, local) = inventory::nic_for_this_process(u32::from(local_rank))?;
    match client.get(
        client.proc(),
        maestro_keys::FABRIC_NIC,
        GetOptions::immediate(),
    ) {
        Ok(Value::String(nic)) => {
            let agree = if nic == local.nic { "yes" } else { "no" };
            println!("rank {me}: NIC {nic} (from the host; local choice agrees: {agree})");
        }
        _ => println!("rank {me}: NIC {} (computed locally)", local.nic),
    }
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--update-when") {
        let file = args.get(i + 1).ok_or("--update-when needs a file")?;
        let end = std::time::Instant::now() + Duration::from_secs(60);
        while !std::path::Path::new(file).exists() {
            if std::time::Instant::now() > end {
                return Err(format!("{file} did not appear within 60 s").into());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let infos = client.fabric_update(Duration::from_secs(10))?;
        println!("rank {me}: now: {}", link_states(&infos).join(","));
    }
    Ok(())
}

/// `name=up|down|unknown` for each device of a fabric answer.
fn link_states(infos: &[pmix::Info]) -> Vec<String> {
    let Some(Value::Infos(devs)) = pmix::find(infos, keys::FABRIC_DEVICES) else {
        return Vec::new();
    };
    devs.iter()
        .filter_map(|d| match &d.value {
            Value::Infos(f) => {
                let name = pmix::find(f, keys::FABRIC_DEVICE_NAME).and_then(Value::as_str)?;
                let state = match pmix::find(f, keys::FABRIC_DEVICE_STATE) {
                    Some(Value::LinkState(s)) if *s == pmix::LINK_UP => "up",
                    Some(Value::LinkState(s)) if *s == pmix::LINK_DOWN => "down",
                    _ => "unknown",
                };
                Some(format!("{name}={state}"))
            }
            _ => None,
        })
        .collect()
}
