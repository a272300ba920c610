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
