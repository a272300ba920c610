//! The global-file-system transport (Maestro's `GFS`): producers write offered CDOs whole to
//! files of their own under a directory every consumer sees, consumers read the files. Real
//! pool managers (`maestro pm`), real clients over real connections, and the C library's
//! producer and consumer with Maestro's settings (`MSTRO_TRANSPORT_DEFAULT=GFS`,
//! `MSTRO_TRANSPORT_GFS_DIR`).

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::pool::offer;
use common::{maestro, run, start_pm, wait_for};
use pool::GfsOptions;

const T: Duration = Duration::from_secs(60);

fn gfs(dir: &Path, offer: bool) -> GfsOptions {
    GfsOptions {
        dir: dir.to_path_buf(),
        offer,
        group_readable: false,
    }
}

/// Joins the PM of `info` as `component` (TCP on loopback) with `dir` as its GFS
/// directory, offering through it when `offer`.
fn join_gfs(
    info: &pool::bootstrap::PmInfo,
    component: &str,
    dir: &Path,
    offer: bool,
) -> pool::Client {
    pool::Client::join(info, common::tcp_lo_options(component).gfs(gfs(dir, offer))).expect("join")
}

/// The files of CDOs under `dir`, recursively (not directories, nor the pool's JSON
/// files: the description beside each kept file and the mark of its directory).
fn files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).expect("dir").flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(files(&p));
        } else if p.extension().is_none_or(|x| x != "json") {
            out.push(p);
        }
    }
    out
}

/// `maestro pool ARGS --json` against the PM of `info`.
fn view(info: &str, what: &str) -> serde_json::Value {
    let out = run(
        Command::new(maestro()).args(["pool", what, "--json", "--info", info]),
        T,
    );
    assert_eq!(out.code(), Some(0), "{}", out.stderr);
    serde_json::from_str(&out.stdout).expect("json")
}

/// A producer offering through the global file system: each CDO is a file of its own (mode
/// 0600, in a directory of the producer's) while offered, consumers read it, the PM counts
/// the transport as `gfs`, and the file goes at withdraw and the directory when the
/// producer leaves. A consumer with no GFS directory, or another one, is told why it cannot
/// read.
#[test]
fn offers_go_through_files_every_consumer_reads() {
    let (_pm, info) = start_pm("gfs", &[]);
    let dir = tempfile::tempdir().expect("tempdir");
    let pm_info = pool::bootstrap::PmInfo::parse(&info).expect("info");
    let producer = join_gfs(&pm_info, "producer", dir.path(), true);
    let big_cdo = offer(&producer, "big", 3 << 20);
    offer(&producer, "small", 8);
    let written = files(dir.path());
    assert_eq!(written.len(), 2, "{written:?}");
    use std::os::unix::fs::PermissionsExt;
    for f in &written {
        let mode = std::fs::metadata(f).expect("file").permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{}", f.display());
    }

    let consumer = join_gfs(&pm_info, "consumer", dir.path(), false);
    for (name, len) in [("big", 3 << 20), ("small", 8)] {
        let cdo = consumer.declare(name).expect("declare");
        let (data, _) = consumer.demand(cdo).expect("demand");
        assert_eq!(data.len(), len);
        assert!(data.iter().all(|&b| b == 7), "{name}: the bytes offered");
        consumer.dispose(cdo).expect("dispose");
    }
    let fabric = view(&info, "fabric");
    assert_eq!(fabric["transports"]["gfs"]["transfers"], 2, "{fabric}");
    assert_eq!(
        fabric["transports"]["gfs"]["bytes"],
        (3 << 20) + 8,
        "{fabric}"
    );

    // Without the directory, or with another, a consumer is told what to set.
    let other = tempfile::tempdir().expect("tempdir");
    for (label, opts) in [
        ("no-gfs", common::tcp_lo_options("no-gfs")),
        (
            "other-gfs",
            common::tcp_lo_options("other-gfs").gfs(gfs(other.path(), false)),
        ),
    ] {
        let lost = pool::Client::join(&pm_info, opts).expect("join");
        let cdo = lost.declare("small").expect("declare");
        let e = lost.demand(cdo).expect_err(label);
        let says = if label == "no-gfs" {
            "set MSTRO_TRANSPORT_GFS_DIR"
        } else {
            "not under this app's GFS directory"
        };
        assert!(e.to_string().contains(says), "{label}: {e}");
    }

    let big = written
        .iter()
        .find(|f| f.metadata().is_ok_and(|m| m.len() > 8));
    producer.withdraw(big_cdo).expect("withdraw");
    assert!(!big.expect("the big file").exists(), "removed at withdraw");
    assert_eq!(files(dir.path()).len(), 1);
    drop(producer);
    assert!(
        files(dir.path()).is_empty(),
        "nothing left when the producer is gone"
    );
    assert_eq!(
        std::fs::read_dir(dir.path()).expect("dir").count(),
        0,
        "its directory gone too"
    );
}

/// `.maestro.core.cdo.transport` chooses per CDO whatever the app's default: a CDO of an
/// RDMA app asking for `GFS` goes through a file, one of a GFS app asking for `rdma` does
/// not; asking for GFS without a GFS directory, or for a transport that is none, is an
/// error saying what to give.
#[test]
fn a_cdos_transport_attribute_overrides_the_apps_default() {
    let (_pm, info) = start_pm("gfs-per-cdo", &[]);
    let dir = tempfile::tempdir().expect("tempdir");
    let pm_info = pool::bootstrap::PmInfo::parse(&info).expect("info");
    let join = |name: &str, gfs_opts: Option<GfsOptions>| {
        let opts = common::tcp_lo_options(name);
        let opts = match gfs_opts {
            Some(g) => opts.gfs(g),
            None => opts,
        };
        pool::Client::join(&pm_info, opts).expect("join")
    };
    let transport = |t: &str| {
        pool::attr::Attributes::from([(
            ".maestro.core.cdo.transport".to_string(),
            pool::attr::AttrValue::Str(t.into()),
        )])
    };
    let offer_as = |c: &pool::Client, name: &str, attrs| {
        let cdo = c.declare(name).expect("declare");
        let mut data = fabric::Buffer::new(4096).expect("buffer");
        data.as_mut_slice().fill(7);
        c.seal_and_offer(cdo, attrs, data)
    };
    let rdma_app = join("rdma-app", Some(gfs(dir.path(), false)));
    offer_as(&rdma_app, "by-file", transport("GFS")).expect("offer");
    offer_as(&rdma_app, "by-memory", pool::attr::Attributes::new()).expect("offer");
    assert_eq!(files(dir.path()).len(), 1, "only the CDO that asked");
    let gfs_app = join("gfs-app", Some(gfs(dir.path(), true)));
    // Sealed first, offered after: the choice is remembered from the seal.
    let cdo = gfs_app.declare("by-memory-too").expect("declare");
    gfs_app.seal(cdo, transport("rdma")).expect("seal");
    let mut data = fabric::Buffer::new(4096).expect("buffer");
    data.as_mut_slice().fill(7);
    gfs_app.offer(cdo, data).expect("offer");
    assert_eq!(files(dir.path()).len(), 1, "rdma asked for: no file");

    let no_dir = join("no-dir", None);
    let e = offer_as(&no_dir, "x", transport("GFS")).expect_err("no directory");
    assert!(e.to_string().contains("set MSTRO_TRANSPORT_GFS_DIR"), "{e}");
    let e = offer_as(&no_dir, "y", transport("MIO")).expect_err("no transport");
    assert!(e.to_string().contains(r#"give "GFS" or "RDMA""#), "{e}");

    let consumer = join("consumer", Some(gfs(dir.path(), false)));
    for name in ["by-file", "by-memory", "by-memory-too"] {
        let cdo = consumer.declare(name).expect("declare");
        let (data, _) = consumer.demand(cdo).expect("demand");
        assert!(data.len() == 4096 && data.iter().all(|&b| b == 7), "{name}");
    }
    let fabric = view(&info, "fabric");
    assert_eq!(fabric["transports"]["gfs"]["transfers"], 1, "{fabric}");
}

/// A consumer that shares no network with the producer (it has no fabric endpoint at all)
/// but the same GFS directory: the PM has the producer write the offer there rather than
/// relay it, and the consumer reads the file; a consumer without the directory still gets
/// the producer's memory by stream; the file goes at withdraw.
#[test]
fn the_pm_has_offers_written_to_files_for_consumers_sharing_no_network() {
    let (_pm, info) = start_pm("gfs-spill", &[]);
    let dir = tempfile::tempdir().expect("tempdir");
    let pm_info = pool::bootstrap::PmInfo::parse(&info).expect("info");
    let producer = join_gfs(&pm_info, "producer", dir.path(), false);
    let cdo = offer(&producer, "big", 1 << 20);
    assert!(files(dir.path()).is_empty(), "RDMA by default: no file yet");
    let no_network = |name: &str, g: Option<GfsOptions>| {
        let opts = pool::JoinOptions::new(name, 0).isolated();
        let opts = match g {
            Some(g) => opts.gfs(g),
            None => opts,
        };
        pool::Client::join(&pm_info, opts).expect("join")
    };
    for (name, g) in [("reader", Some(gfs(dir.path(), false))), ("streamer", None)] {
        let c = no_network(name, g);
        let mine = c.declare("big").expect("declare");
        let (data, _) = c.demand(mine).expect("demand");
        assert!(
            data.len() == 1 << 20 && data.iter().all(|&b| b == 7),
            "{name}"
        );
    }
    assert_eq!(files(dir.path()).len(), 1, "written once");
    let fabric = view(&info, "fabric");
    assert_eq!(fabric["transports"]["gfs"]["transfers"], 1, "{fabric}");
    assert_eq!(fabric["transports"]["stream"]["transfers"], 1, "{fabric}");
    producer.withdraw(cdo).expect("withdraw");
    assert!(files(dir.path()).is_empty(), "the file went with the offer");
}

/// A group offered through the global file system: every member is a file, the consumer's
/// one demand gets them all from the files (in the producer's order), and a PM keeping
/// files keeps the members the producer withdraws with the group: a consumer after the
/// producer left gets the group whole.
#[test]
fn a_groups_members_go_through_files_and_outlive_their_producer() {
    let dir = tempfile::tempdir().expect("tempdir");
    let gfs_dir = dir.path().display().to_string();
    let (_pm, info) = start_pm("gfs-group", &["--gfs-dir", &gfs_dir]);
    let pm_info = pool::bootstrap::PmInfo::parse(&info).expect("info");
    let producer = join_gfs(&pm_info, "forecast", dir.path(), true);
    let group = producer.declare("ensemble").expect("declare");
    let members: Vec<_> = (0..3u8)
        .map(|i| {
            let cdo = producer.declare(&format!("member-{i}")).expect("declare");
            let mut data = fabric::Buffer::new(8192).expect("buffer");
            data.as_mut_slice().fill(i);
            (cdo, Some(pool::attr::Attributes::new()), data)
        })
        .collect();
    let ids: Vec<_> = members.iter().map(|(c, ..)| *c).collect();
    producer
        .offer_group(group, members)
        .expect("offer the group");
    assert_eq!(files(dir.path()).len(), 4, "three members and the group");
    let demand = |name: &str| {
        let c = join_gfs(&pm_info, name, dir.path(), false);
        let wanted = c.declare("ensemble").expect("declare");
        let (got, _) = c.demand_group(wanted).expect("demand the group");
        let seen: Vec<(String, usize, u8)> = got
            .iter()
            .map(|m| (m.name.clone(), m.data.len(), m.data[0]))
            .collect();
        assert_eq!(
            seen,
            (0..3u8)
                .map(|i| (format!("member-{i}"), 8192, i))
                .collect::<Vec<_>>(),
            "{name}"
        );
    };
    demand("products");
    producer.withdraw_group(group, &ids).expect("withdraw");
    drop(producer);
    demand("late-products");
    let fabric = view(&info, "fabric");
    assert!(
        fabric["transports"]["gfs"]["transfers"].as_u64() >= Some(6),
        "every member from its file: {fabric}"
    );
}

/// `maestro bench pool --transport gfs` demands files through the pool and copies as many
/// bytes between files of the same directory, per size, in one table; the directory it
/// made is gone after.
#[test]
fn the_pool_benchmark_measures_gfs_against_a_copy() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = run(
        Command::new(maestro()).args([
            "bench",
            "pool",
            "--transport",
            "gfs",
            "--gfs-dir",
            &dir.path().display().to_string(),
            "--sizes",
            "4K,1M",
            "--volume",
            "4M",
            "--json",
        ]),
        Duration::from_secs(300),
    );
    assert_eq!(out.code(), Some(0), "{out:?}");
    let v: serde_json::Value = serde_json::from_str(out.stdout.trim()).expect("JSON");
    let rows = v["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 2, "{v}");
    for r in rows {
        for k in ["gbps", "cp_gbps", "p50_us"] {
            assert!(r[k].as_f64().is_some_and(|x| x > 0.0), "{k}: {r}");
        }
        assert!(
            r["raw_gbps"].is_null(),
            "no fi_read baseline for files: {r}"
        );
    }
    assert!(
        files(dir.path()).is_empty(),
        "the provider's files went with it"
    );
}

/// Data that outlives its producer: with `maestro pm --gfs-dir`, a producer whose offers
/// went to files withdraws them, disposes them and leaves; consumers that come later get
/// them from the pool (the provider attribute still names the producer), `maestro pool`
/// shows them as kept, one whose lifetime ends goes with its file, one `maestro pool
/// discard` ends too, and when the PM stops every file goes except the one marked to
/// persist, which is named after its CDO.
#[test]
fn cdos_handed_to_the_pool_outlive_their_producer() {
    let dir = tempfile::tempdir().expect("tempdir");
    let gfs_dir = dir.path().display().to_string();
    let (pm, info) = start_pm("gfs-keep", &["--gfs-dir", &gfs_dir]);
    let pm_info = pool::bootstrap::PmInfo::parse(&info).expect("info");
    let producer = join_gfs(&pm_info, "forecast", dir.path(), true);
    let attrs = |lifetime: u64, persist: bool| {
        pool::attr::Attributes::from([
            (
                ".maestro.core.cdo.lifetime".to_string(),
                pool::attr::AttrValue::Uint(lifetime),
            ),
            (
                ".maestro.core.cdo.persist".to_string(),
                pool::attr::AttrValue::Bool(persist),
            ),
        ])
    };
    for (name, len, lifetime, persist) in [
        ("t2m/step-6", 1 << 20, 0, false),
        ("archive/t2m", 4096, 0, true),
        ("brief", 8, 1, false),
    ] {
        let cdo = producer.declare(name).expect("declare");
        let mut data = fabric::Buffer::new(len).expect("buffer");
        data.as_mut_slice().fill(7);
        producer
            .seal_and_offer(cdo, attrs(lifetime, persist), data)
            .expect("offer");
        producer.withdraw(cdo).expect("withdraw at once");
        producer.dispose(cdo).expect("dispose");
    }
    drop(producer);
    let kept = files(dir.path());
    assert!(
        kept.len() <= 3,
        "the producer's own files went with it: {kept:?}"
    );

    let consumer = join_gfs(&pm_info, "products", dir.path(), false);
    let cdo = consumer.declare("t2m/step-6").expect("declare");
    let (data, attributes) = consumer
        .demand(cdo)
        .expect("demand after the producer left");
    assert_eq!(data.len(), 1 << 20);
    assert!(data.iter().all(|&b| b == 7));
    assert_eq!(
        attributes.get(".maestro.core.cdo.provider"),
        Some(&pool::attr::AttrValue::Str("forecast:0".into())),
        "whose bytes they are"
    );
    let ls = view(&info, "ls");
    let states: Vec<(&str, &str)> = ls["cdos"]
        .as_array()
        .expect("cdos")
        .iter()
        .filter(|c| c["app"] == "pool")
        .map(|c| {
            (
                c["name"].as_str().unwrap_or(""),
                c["state"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert!(states.contains(&("t2m/step-6", "kept")), "{ls}");

    // The brief one's lifetime ends: its file goes, and it is no longer offered.
    let brief = kept
        .iter()
        .find(|f| f.metadata().is_ok_and(|m| m.len() == 8))
        .expect("the brief CDO's file")
        .clone();
    wait_for(dir.path(), T, "the brief CDO's file removed", || {
        !brief.exists()
    });
    let status = view(&info, "status");
    assert_eq!(status["cdos"]["kept"], 2, "{status}");

    // The products are made: the field is discarded, and its file goes.
    let field = kept
        .iter()
        .find(|f| f.metadata().is_ok_and(|m| m.len() == 1 << 20))
        .expect("the field's file")
        .clone();
    let out = run(
        Command::new(maestro()).args(["pool", "discard", "t2m/step-6", "--json", "--info", &info]),
        T,
    );
    assert_eq!(out.code(), Some(0), "{out:?}");
    let said: serde_json::Value = serde_json::from_str(&out.stdout).expect("json");
    assert_eq!(said["discarded"], 1, "{said}");
    wait_for(dir.path(), T, "the discarded field's file removed", || {
        !field.exists()
    });
    let status = view(&info, "status");
    assert_eq!(status["cdos"]["kept"], 1, "{status}");

    // The workflow ends: every file goes but the one to persist, under its name.
    drop(consumer);
    let persisted = common::assert_only_persisted(
        pm,
        dir.path(),
        "gfs-keep",
        &["archive%2Ft2m", "archive%2Ft2m.maestro.json"],
    );
    assert_eq!(
        std::fs::read(persisted.join("archive%2Ft2m")).expect("persisted"),
        vec![7u8; 4096]
    );
    // Beside it, what it is.
    let described = std::fs::read_to_string(persisted.join("archive%2Ft2m.maestro.json"));
    let described: serde_json::Value =
        serde_json::from_str(&described.expect("description")).expect("JSON");
    assert_eq!(
        (
            &described["name"],
            &described["size"],
            &described["provider"]
        ),
        (
            &serde_json::json!("archive/t2m"),
            &serde_json::json!(4096),
            &serde_json::json!("forecast:0")
        ),
        "{described}"
    );
}

/// What one workflow persisted, the next adopts (`maestro pm --adopt`): a consumer of the
/// second demands it by name and gets its bytes, its attributes as they were sealed (types
/// kept) and its producer; the second persists it in turn, and the first's directory is
/// gone (the file moved, never copied).
#[test]
fn a_later_workflow_adopts_what_an_earlier_one_persisted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let gfs_dir = dir.path().display().to_string();
    let names = ["analysis%2Ft2m", "analysis%2Ft2m.maestro.json"];
    let sealed = pool::attr::Attributes::from([
        (
            ".maestro.core.cdo.persist".to_string(),
            pool::attr::AttrValue::Bool(true),
        ),
        (
            ".maestro.core.cdo.lifetime".to_string(),
            pool::attr::AttrValue::Uint(0),
        ),
    ]);
    let (pm, info) = start_pm("gfs-first", &["--gfs-dir", &gfs_dir]);
    let pm_info = pool::bootstrap::PmInfo::parse(&info).expect("info");
    let producer = join_gfs(&pm_info, "analysis", dir.path(), true);
    let cdo = producer.declare("analysis/t2m").expect("declare");
    let mut data = fabric::Buffer::new(4096).expect("buffer");
    data.as_mut_slice().fill(7);
    producer
        .seal_and_offer(cdo, sealed.clone(), data)
        .expect("offer");
    producer.withdraw(cdo).expect("withdraw");
    producer.dispose(cdo).expect("dispose");
    drop(producer);
    let first = common::assert_only_persisted(pm, dir.path(), "gfs-first", &names);

    let adopt = first.display().to_string();
    let (pm, info) = start_pm("gfs-second", &["--gfs-dir", &gfs_dir, "--adopt", &adopt]);
    assert!(!first.exists(), "the first workflow's files moved");
    let pm_info = pool::bootstrap::PmInfo::parse(&info).expect("info");
    let consumer = join_gfs(&pm_info, "products", dir.path(), false);
    let want = consumer.declare("analysis/t2m").expect("declare");
    let (data, attributes) = consumer.demand(want).expect("demand");
    assert!(data.len() == 4096 && data.iter().all(|&b| b == 7));
    for (key, value) in &sealed {
        assert_eq!(attributes.get(key), Some(value), "{key}");
    }
    assert_eq!(
        attributes.get(".maestro.core.cdo.provider"),
        Some(&pool::attr::AttrValue::Str("analysis:0".into()))
    );
    drop(consumer);
    common::assert_only_persisted(pm, dir.path(), "gfs-second", &names);
}

/// A `maestro pm` keeping files, killed with SIGKILL, leaves them for the next PM of its
/// workflow (`--reclaim`, a standby: tests/pm_failover.rs) for `pool::KEPT_FOR_TAKER`
/// from its janitor's sweep on, and no longer: the first sweep after that removes them.
#[test]
fn a_killed_pms_kept_files_stay_for_a_taker_then_are_swept() {
    let dir = tempfile::tempdir().expect("tempdir");
    let gfs_dir = dir.path().display().to_string();
    let (mut pm, info) = start_pm("gfs-kill", &["--gfs-dir", &gfs_dir]);
    let pm_info = pool::bootstrap::PmInfo::parse(&info).expect("info");
    let producer = join_gfs(&pm_info, "forecast", dir.path(), true);
    let cdo = offer(&producer, "field", 4096);
    producer.withdraw(cdo).expect("withdraw");
    drop(producer);
    assert_eq!(files(dir.path()).len(), 1, "the kept file");
    pm.child.kill().expect("SIGKILL");
    let _ = pm.child.wait();
    let stamps = || {
        (std::fs::read_dir(dir.path()).expect("dir").flatten())
            .map(|e| e.path().join("maestro-orphaned"))
            .filter(|p| p.exists())
            .collect::<Vec<_>>()
    };
    wait_for(dir.path(), T, "the PM's janitor swept", || {
        !stamps().is_empty()
    });
    assert_eq!(
        files(dir.path()).len(),
        2,
        "the kept file is left (and the stamp)"
    );
    // The window over, the next sweep (a janitor's here) removes it.
    for stamp in stamps() {
        let long_ago = std::time::SystemTime::now() - pool::KEPT_FOR_TAKER;
        std::fs::File::options()
            .write(true)
            .open(stamp)
            .and_then(|f| f.set_modified(long_ago))
            .expect("age the stamp");
    }
    let out = run(
        Command::new(maestro())
            .args(["janitor", "--kept-for-taker", "--gfs-dir", &gfs_dir])
            .stdin(std::process::Stdio::null()),
        T,
    );
    assert_eq!(out.code(), Some(0), "{out:?}");
    assert!(
        std::fs::read_dir(dir.path()).is_ok_and(|mut d| d.next().is_none()),
        "left: {:?}",
        files(dir.path())
    );
}

/// A launcher killed with SIGKILL while its ranks offer through the global file system
/// leaves no files behind: its janitor removes the directories of its dead ranks.
#[test]
fn a_killed_launchers_ranks_leave_no_files() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut launcher = common::Group::spawn(
        Command::new(maestro())
            .args(["run", "-n", "3", "--"])
            .arg(common::example("pool_workflow"))
            .args(["--cdos", "2000", "--max-size", "65536"])
            .env("MSTRO_TRANSPORT_DEFAULT", "GFS")
            .env("MSTRO_TRANSPORT_GFS_DIR", dir.path())
            .env("MSTRO_WORKFLOW_NAME", "gfs-killed"),
    );
    wait_for(dir.path(), T, "a CDO's file", || {
        !files(dir.path()).is_empty()
    });
    let janitors = common::children_named(launcher.pid(), "maestro");
    assert_eq!(janitors.len(), 1, "the launcher's janitor");
    // SAFETY: signalling the launcher this test started (its pid, not its group: the ranks
    // die of their parent's death).
    unsafe { libc::kill(launcher.pid(), libc::SIGKILL) };
    let _ = launcher.child.wait();
    assert!(
        common::wait_gone(janitors[0], T),
        "the janitor ends once done"
    );
    assert_eq!(
        std::fs::read_dir(dir.path()).expect("dir").count(),
        0,
        "left behind: {:?}",
        files(dir.path())
    );
}

/// Persisted CDOs whose names are too long for a file name once escaped (300 bytes, 100
/// slashes, 4 KiB) are kept all the same: cut and hashed file names, each described by a
/// file that holds the name whole, from which a later workflow adopts them by name.
#[test]
fn persisted_cdos_are_kept_whatever_their_names() {
    let dir = tempfile::tempdir().expect("tempdir");
    let gfs_dir = dir.path().display().to_string();
    let names = ["x".repeat(300), "/".repeat(100), "é".repeat(2048)];
    let persist = pool::attr::Attributes::from([(
        ".maestro.core.cdo.persist".to_string(),
        pool::attr::AttrValue::Bool(true),
    )]);
    let (pm, info) = start_pm("gfs-long", &["--gfs-dir", &gfs_dir]);
    let pm_info = pool::bootstrap::PmInfo::parse(&info).expect("info");
    let producer = join_gfs(&pm_info, "analysis", dir.path(), true);
    for (i, name) in names.iter().enumerate() {
        let cdo = producer.declare(name).expect("declare");
        let mut data = fabric::Buffer::new(64).expect("buffer");
        data.as_mut_slice().fill(u8::try_from(i).expect("small"));
        producer
            .seal_and_offer(cdo, persist.clone(), data)
            .expect("offer");
        producer.withdraw(cdo).expect("withdraw");
        producer.dispose(cdo).expect("dispose");
    }
    drop(producer);
    let stopped = pm.terminate(T);
    assert_eq!(stopped.code(), Some(0), "{stopped:?}");
    let persisted = dir.path().join("maestro-persist-gfs-long");
    let mut described = 0;
    for e in std::fs::read_dir(&persisted).expect("persisted").flatten() {
        let file = e.file_name().to_string_lossy().into_owned();
        assert!(file.len() < 255, "{file}");
        if let Some(data) = file.strip_suffix(".maestro.json") {
            let text = std::fs::read_to_string(e.path()).expect("description");
            let d: serde_json::Value = serde_json::from_str(&text).expect("json");
            let name = d["name"].as_str().expect("name");
            assert!(names.iter().any(|n| n == name), "{name:.40}");
            assert!(data.contains('~'), "hashed: {data}");
            assert_eq!(
                std::fs::metadata(persisted.join(data)).expect("data").len(),
                64
            );
            described += 1;
        }
    }
    assert_eq!(described, 3, "every CDO persisted with its description");
    // Adopted again, each is demanded by its whole name.
    let adopt = persisted.display().to_string();
    let (pm, info) = start_pm("gfs-long-2", &["--gfs-dir", &gfs_dir, "--adopt", &adopt]);
    let pm_info = pool::bootstrap::PmInfo::parse(&info).expect("info");
    let consumer = join_gfs(&pm_info, "products", dir.path(), false);
    for (i, name) in names.iter().enumerate() {
        let want = consumer.declare(name).expect("declare");
        let (data, _) = consumer.demand(want).expect("demand");
        assert!(data.iter().all(|&b| usize::from(b) == i), "{name:.40}");
    }
    drop(consumer);
    let stopped = pm.terminate(T);
    assert_eq!(stopped.code(), Some(0), "{stopped:?}");
}

/// A member that links a second name of another file into the PM's directory and hands
/// that over as its offer's file: the PM checks what it was given, stops offering it and
/// drops its name there (the other file untouched), and persists nothing of it.
#[test]
fn the_pool_keeps_only_the_file_a_producer_offered() {
    use pool::proto::{FromPm, GfsFile, OfferExtras, Op, ToPm};
    let dir = tempfile::tempdir().expect("tempdir");
    let gfs_dir = dir.path().display().to_string();
    // Someone's precious file on the same file system (as /etc/shadow on a GFS's).
    let outside = tempfile::tempdir_in(dir.path().parent().expect("parent")).expect("tempdir");
    let secret = outside.path().join("secret");
    std::fs::write(&secret, b"not the pool's").expect("secret");
    let (mut pm, info) = start_pm("gfs-plant", &["--gfs-dir", &gfs_dir]);
    let stderr = common::lines(pm.child.stderr.take().expect("stderr"));
    let pm_info = pool::bootstrap::PmInfo::parse(&info).expect("info");
    let mut conn = pool_tools::wire::Conn::connect(
        &pool::bootstrap::ControlAddr::Tcp(common::tcp_addr(&pm_info)),
        T,
    )
    .expect("connect");
    let join = common::apps::answer_challenge(&mut conn, &pm_info, "planter", |_| {});
    conn.send_batch(&[join]).expect("join");
    let (app, keep) = match conn.recv(Op::Join).expect("welcome") {
        FromPm::Welcome {
            app,
            keep: Some(keep),
            ..
        } => (app, keep),
        other => panic!("{other:?}"),
    };
    // Its own file, offered as written to the GFS.
    let own = dir.path().join("planter-file");
    std::fs::write(&own, b"offered").expect("own");
    let cdo = pool::proto::cdo_ids(app).next().expect("id");
    let extras = OfferExtras::default().with_gfs(GfsFile {
        path: own.to_str().expect("utf-8").into(),
        checksum: pool::attr::checksum(b"offered"),
    });
    let persist = pool::attr::Attributes::from([(
        ".maestro.core.cdo.persist".to_string(),
        pool::attr::AttrValue::Bool(true),
    )]);
    // The plant: the secret's second name where the hand-over goes.
    let planted = std::path::Path::new(&*keep).join(cdo.to_string());
    std::fs::hard_link(&secret, &planted).expect("link");
    conn.send_batch(&[
        ToPm::Declare {
            cdo,
            name: "stolen".into(),
        },
        ToPm::SealOffer {
            cdo,
            attributes: persist,
            region: fabric::RemoteRegion {
                addr: 0,
                key: 0,
                len: 7,
            },
            extras,
        },
        ToPm::Withdraw {
            cdo,
            keep: Some(planted.to_str().expect("utf-8").into()),
        },
    ])
    .expect("send");
    // Refused once checked, saying why: the producer hears its CDO is not kept.
    let withdraw_answer = |conn: &mut pool_tools::wire::Conn| loop {
        if let m @ (FromPm::Done {
            op: Op::Withdraw, ..
        }
        | FromPm::Refused {
            op: Op::Withdraw, ..
        }) = conn.recv(Op::Withdraw).expect("answer")
        {
            break m;
        }
    };
    match withdraw_answer(&mut conn) {
        FromPm::Refused {
            why: pool::proto::Refusal::NotKept(why),
            ..
        } => assert!(
            why.contains("another name than the producer's file"),
            "{why}"
        ),
        other => panic!("{other:?}"),
    }
    // Its withdraw without the file is done at once: the offer is withdrawn already.
    conn.send_batch(&[ToPm::Withdraw { cdo, keep: None }])
        .expect("send");
    let done = withdraw_answer(&mut conn);
    assert!(matches!(done, FromPm::Done { .. }), "{done:?}");
    let said = loop {
        let line = stderr.recv_timeout(T).expect("the PM's log");
        if line.contains("refused:") {
            break line;
        }
    };
    assert!(
        said.contains("another name than the producer's file"),
        "{said}"
    );
    wait_for(dir.path(), T, "the planted name dropped", || {
        !planted.exists()
    });
    let pool_view = view(&info, "ls");
    let listed = pool_view["cdos"].as_array().expect("cdos");
    assert!(listed.iter().all(|c| c["state"] != "kept"), "{pool_view}");
    drop(conn);
    let stopped = pm.terminate(T);
    assert_eq!(stopped.code(), Some(0), "{stopped:?}");
    assert_eq!(std::fs::read(&secret).expect("secret"), b"not the pool's");
    assert!(
        !dir.path().join("maestro-persist-gfs-plant").exists(),
        "nothing persisted"
    );
}
