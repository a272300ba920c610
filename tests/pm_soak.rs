//! One pool manager under load, through `maestro bench pm` (injector processes speaking the
//! wire protocol): 64 apps x 10,000 CDOs declared, sealed and offered, then required,
//! ticketed and reported done by 64 consumers, then two soak rounds of withdraw+dispose
//! (1,280,000 CDOs through the PM). Every operation must be answered (an injector fails on
//! any refusal or missing answer), and the PM's memory must be flat across rounds and
//! mostly given back after the withdrawals.

mod common;

use std::process::Command;
use std::time::Duration;

#[test]
fn sixty_four_apps_and_a_million_cdos_lose_nothing_and_give_memory_back() {
    let out = common::run(
        Command::new(common::maestro()).args([
            "bench",
            "pm",
            "--injectors",
            "64",
            "--cdos",
            "10000",
            "--require",
            "--soak",
            "2",
            "--json",
        ]),
        Duration::from_secs(600),
    );
    assert_eq!(out.code(), Some(0), "{out:?}");
    let r: serde_json::Value = serde_json::from_str(out.stdout.trim()).expect("JSON report");
    eprintln!("{r}");
    assert_eq!(r["cdos"], 640_000);
    let soak = &r["soak"];
    assert!(soak["cdos"].as_u64() >= Some(1_000_000), "{soak}");
    let mib = |v: &serde_json::Value| v.as_u64().unwrap_or(u64::MAX) >> 20;
    let (start, peak) = (mib(&soak["rss_start"]), mib(&soak["rss_peak"]));
    let after: Vec<u64> = soak["rss_after_withdraw"]
        .as_array()
        .expect("rounds")
        .iter()
        .map(mib)
        .collect();
    eprintln!("PM RSS: start {start} MiB, peak {peak} MiB, after each round {after:?} MiB");
    assert_eq!(after.len(), 2);
    assert!(
        after[1] <= after[0] + 32,
        "the PM's memory grows from round to round: {after:?} MiB"
    );
    assert!(
        after[1] < peak / 2,
        "the PM kept its memory after every CDO was withdrawn: peak {peak} MiB, then {after:?} MiB"
    );
}

/// A pool of three managers (`maestro bench pm --shards 3`): each producer joins shard 0,
/// then the others as the member it is, and offers each name at its home; every offer is
/// answered, the shards share them about evenly, each reports its CPU per operation, and an
/// observer of the three lists every CDO once.
/// Options the sharded run does not measure are refused, saying which.
#[test]
fn three_shards_hold_every_offer_once_between_them() {
    let out = common::run(
        Command::new(common::maestro()).args([
            "bench",
            "pm",
            "--shards",
            "3",
            "--injectors",
            "3",
            "--cdos",
            "3000",
            "--observer",
            "--json",
        ]),
        Duration::from_secs(300),
    );
    assert_eq!(out.code(), Some(0), "{out:?}");
    let r: serde_json::Value = serde_json::from_str(out.stdout.trim()).expect("JSON report");
    let shards = r["shards"].as_array().expect("shards");
    assert_eq!(shards.len(), 3, "{r}");
    let held: u64 = shards.iter().filter_map(|s| s["cdos"].as_u64()).sum();
    assert_eq!(held, 9000, "{r}");
    // One observer of the three lists every CDO once.
    assert_eq!(
        r["observer"]["idle_cdos_listed"].as_u64(),
        Some(9000),
        "{r}"
    );
    for s in shards {
        assert!(
            (2000..4000).contains(&s["cdos"].as_u64().unwrap_or(0)),
            "{r}"
        );
        assert!(s["cpu_seconds"].as_f64() > Some(0.0), "{r}");
    }
    let refused = common::run(
        Command::new(common::maestro()).args(["bench", "pm", "--shards", "2", "--require"]),
        Duration::from_secs(60),
    );
    assert_ne!(refused.code(), Some(0));
    assert!(
        refused.stderr.contains("leave out --require"),
        "{refused:?}"
    );
}
