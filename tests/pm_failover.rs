//! A pool that outlives its manager (issue #52, docs/developers/failover.md): apps whose
//! PM is killed with SIGKILL keep what they hold and their waiting calls, rejoin the PM
//! restarted with `maestro pm --reclaim` within their reclaim timeout, and replay what
//! they hold; nothing offered is lost. A PM that stops on purpose says BYE: its apps do
//! not wait for another.

mod common;

use std::time::{Duration, Instant};

use pool::bootstrap::PmInfo;
use pool::{Client, JoinOptions, ReclaimOptions};

/// Joins `info`'s PM as `component`, riding out its loss for up to 60 s by reading the PM
/// info file at `file` again; calls wait up to an hour (a call that fails did so on
/// evidence).
fn join(info: &PmInfo, file: &std::path::Path, component: &str) -> Client {
    let file = file.to_path_buf();
    let reclaim = ReclaimOptions {
        timeout: Duration::from_secs(60),
        find: Some(std::sync::Arc::new(move || {
            PmInfo::from_file(&file).ok().flatten()
        })),
    };
    Client::join(
        info,
        JoinOptions::new(component, 0)
            .timeout(Duration::from_secs(3600))
            .isolated()
            .reclaim(reclaim),
    )
    .expect("join")
}

/// Starts `maestro pm` for `workflow` writing its info to `file`, with `extra` options and
/// its files under `tmp`; the PM and its info.
fn start_pm(
    workflow: &str,
    file: &std::path::Path,
    tmp: &std::path::Path,
    extra: &[&str],
) -> (common::Group, PmInfo) {
    let file = file.to_str().expect("utf-8 path");
    let mut args = vec!["--info-file", file];
    args.extend_from_slice(extra);
    let tmp = tmp.to_str().expect("utf-8 path");
    let (pm, line) = common::start_pm_with_env(workflow, &args, &[("TMPDIR", tmp)]);
    (pm, PmInfo::parse(&line).expect("PM info"))
}

fn offer(client: &Client, name: &str, bytes: &[u8]) {
    let cdo = client.declare(name).expect("declare");
    client
        .seal_and_offer(
            cdo,
            Default::default(),
            fabric::Buffer::from_slice(bytes).expect("buffer"),
        )
        .expect("offer");
}

fn demand(client: &Client, name: &str) -> Vec<u8> {
    let cdo = client.declare(name).expect("declare");
    let (data, _) = client.demand(cdo).expect("demand");
    data.as_slice().to_vec()
}

/// A workflow of this test's own: a private TMPDIR, the PM info file there, its name.
struct Scene {
    tmp: tempfile::TempDir,
    file: std::path::PathBuf,
    workflow: String,
}

impl Scene {
    fn new(name: &str) -> Scene {
        let tmp = tempfile::tempdir().expect("tempdir");
        let file = tmp.path().join("pm.info");
        let workflow = format!("failover-{name}-{}", std::process::id());
        Scene {
            tmp,
            file,
            workflow,
        }
    }

    /// `maestro pm` of this workflow writing the info file, with `extra` options.
    fn pm(&self, extra: &[&str]) -> (common::Group, PmInfo) {
        start_pm(&self.workflow, &self.file, self.tmp.path(), extra)
    }

    /// `maestro pm --standby-for` the info file, with `extra` options.
    fn standby(&self, extra: &[&str]) -> common::Group {
        let mut cmd = std::process::Command::new(common::maestro());
        cmd.args(["pm", "--workflow", &self.workflow])
            .args(extra)
            .arg("--standby-for")
            .arg(&self.file)
            .env("TMPDIR", self.tmp.path());
        common::Group::spawn(&mut cmd)
    }

    /// Waits until the PM lists a standby.
    fn await_standby(&self) {
        let end = Instant::now() + Duration::from_secs(20);
        while !status(&self.file).contains("standby on ") {
            assert!(
                Instant::now() < end,
                "no standby listed: {}",
                status(&self.file)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// SIGKILL to the PM `pm`; when.
fn kill(pm: &common::Group) -> Instant {
    // SAFETY: signalling the PM's process, which this test started.
    unsafe { libc::kill(pm.pid(), libc::SIGKILL) };
    Instant::now()
}

/// `consumer` demands `name` on a thread of its own; the client and the bytes at the end.
fn demanding(consumer: Client, name: &'static str) -> std::thread::JoinHandle<(Client, Vec<u8>)> {
    std::thread::spawn(move || {
        let got = demand(&consumer, name);
        (consumer, got)
    })
}

#[test]
fn apps_ride_out_a_killed_pm_restarted_with_reclaim_and_nothing_offered_is_lost() {
    let scene = Scene::new("restart");
    let file = &scene.file;
    let (pm, info) = scene.pm(&[]);
    let producer = join(&info, file, "producer");
    let consumer = join(&info, file, "consumer");
    offer(&producer, "before", b"offered before the PM died");
    // A demand nobody can serve yet waits at the PM when it dies.
    let waiting = demanding(consumer, "after");
    std::thread::sleep(Duration::from_millis(200));

    let killed = kill(&pm);
    assert!(common::wait_gone(pm.pid(), Duration::from_secs(10)));
    // Meanwhile the producer offers what the consumer waits for: the call waits too.
    let offering = std::thread::spawn(move || {
        offer(&producer, "after", b"offered while no PM ran");
        producer
    });
    std::thread::sleep(Duration::from_millis(300));
    let (next, _) = scene.pm(&["--reclaim", "--grace", "2"]);
    let producer = offering.join().expect("offer thread");
    let served = killed.elapsed();
    let (consumer, got) = waiting.join().expect("demand thread");
    let stall = killed.elapsed();
    assert_eq!(got, b"offered while no PM ran");
    eprintln!(
        "from the kill: offer answered after {:.2} s, demand served after {:.2} s (a PM restarted 0.3 s after the kill)",
        served.as_secs_f64(),
        stall.as_secs_f64()
    );
    // After the grace period an app that never knew the first PM gets what was offered
    // before it died.
    std::thread::sleep(Duration::from_secs(2));
    let next_info = PmInfo::from_file(file)
        .expect("info file")
        .expect("written");
    let newcomer = join(&next_info, file, "newcomer");
    assert_eq!(demand(&newcomer, "before"), b"offered before the PM died");
    for c in [newcomer, consumer, producer] {
        c.leave().expect("leave");
    }
    drop(next);
}

#[test]
fn a_pm_that_stops_says_bye_and_its_apps_do_not_wait_for_another() {
    let scene = Scene::new("bye");
    let (pm, info) = scene.pm(&[]);
    let consumer = join(&info, &scene.file, "consumer");
    let waiting = std::thread::spawn(move || {
        let cdo = consumer.declare("never").expect("declare");
        let started = Instant::now();
        let r = consumer.demand(cdo).map(|_| ());
        (r, started.elapsed())
    });
    std::thread::sleep(Duration::from_millis(200));
    let out = pm.terminate(Duration::from_secs(10));
    assert_eq!(out.code(), Some(0), "{}", out.stderr);
    let (r, waited) = waiting.join().expect("demand thread");
    assert!(r.is_err(), "a demand outlived a PM that stopped");
    assert!(
        waited < Duration::from_secs(10),
        "waited {waited:?} for a PM that said BYE"
    );
}

/// `maestro pool status --info-file FILE`: the status's text.
fn status(file: &std::path::Path) -> String {
    let out = common::run(
        std::process::Command::new(common::maestro())
            .args(["pool", "status", "--info-file"])
            .arg(file),
        Duration::from_secs(30),
    );
    assert_eq!(out.code(), Some(0), "{}", out.stderr);
    out.stdout
}

#[test]
fn a_standby_takes_over_from_a_killed_pm_and_its_apps_carry_on() {
    let scene = Scene::new("standby");
    let file = &scene.file;
    let (active, info) = scene.pm(&[]);
    let mut standby = scene.standby(&["--grace", "10"]);
    let said = common::lines(standby.child.stderr.take().expect("stderr"));
    let producer = join(&info, file, "producer");
    let consumer = join(&info, file, "consumer");
    offer(&producer, "before", b"offered before the PM died");
    // The standby looks at the active PM's apps twice a second; the PM lists it.
    std::thread::sleep(Duration::from_millis(800));
    scene.await_standby();
    let waiting = demanding(consumer, "after");
    std::thread::sleep(Duration::from_millis(200));
    let killed = kill(&active);
    offer(&producer, "after", b"offered to the standby");
    let served = killed.elapsed();
    let (consumer, got) = waiting.join().expect("demand thread");
    let stall = killed.elapsed();
    assert_eq!(got, b"offered to the standby");
    eprintln!(
        "standby: from the kill, an offer answered after {:.2} s, a waiting demand served after {:.2} s",
        served.as_secs_f64(),
        stall.as_secs_f64()
    );
    assert!(stall < Duration::from_secs(5), "stalled {stall:?}");
    // Both apps it saw came back: its grace period (10 s) ends early, after its shortest
    // length (1 s).
    let text = loop {
        let text = status(file);
        if !text.contains("taking over") {
            break text;
        }
        assert!(
            killed.elapsed() < Duration::from_secs(5),
            "the grace period did not end early: {text}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(text.contains("generation"), "{text}");
    let taken_over = PmInfo::from_file(file).expect("info").expect("written");
    assert_ne!(taken_over, info, "the standby's info");
    assert_eq!(
        producer.pm_info(),
        taken_over,
        "what to hand another job now"
    );
    let newcomer = join(&taken_over, file, "newcomer");
    assert_eq!(demand(&newcomer, "before"), b"offered before the PM died");
    for c in [newcomer, consumer, producer] {
        c.leave().expect("leave");
    }
    let out = standby.terminate(Duration::from_secs(10));
    assert_eq!(out.code(), Some(0));
    let said: Vec<String> = said.try_iter().collect();
    assert!(
        said.iter()
            .any(|l| l.contains("is gone (its 2 apps are expected back): taking over")),
        "{said:?}"
    );
}

#[test]
fn a_standby_of_a_pm_that_stops_exits_without_taking_over() {
    let scene = Scene::new("standby-stop");
    let (active, _) = scene.pm(&[]);
    let standby = scene.standby(&[]);
    scene.await_standby();
    active.terminate(Duration::from_secs(10));
    let out = standby.wait(Duration::from_secs(10));
    assert_eq!(out.code(), Some(0), "{}", out.stderr);
    assert!(
        out.stderr.contains("nothing to take over"),
        "{}",
        out.stderr
    );
}

/// Polls `maestro pool status` of the PM in `file` until an app joined it; how long that
/// took from `since` (the first operation the PM that took over served: a reclaim).
/// `None` when the job `pid` ended first (it was leaving when its PM died).
fn first_rejoin(file: &std::path::Path, since: Instant, pid: i32) -> Option<Duration> {
    let end = since + Duration::from_secs(60);
    loop {
        if !common::alive(pid) {
            return None;
        }
        let out = common::run(
            std::process::Command::new(common::maestro())
                .args(["pool", "status", "--json", "--info-file"])
                .arg(file),
            Duration::from_secs(10),
        );
        if out.code() == Some(0) {
            let s: serde_json::Value = serde_json::from_str(&out.stdout).expect("json");
            if s["app_count"].as_u64().unwrap_or(0) > 0 {
                return Some(since.elapsed());
            }
        }
        assert!(Instant::now() < end, "nobody rejoined in 60 s");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The Rust workflow (`pool_workflow`: 4 ranks under `maestro run`, 2 producers of 100
/// CDOs each, up to 4 MiB, one consumer checking every byte) with its pool manager killed
/// with SIGKILL at a random moment of the run (fixed seeds), ten times: five taken over by
/// a standby, five by the PM restarted with `--reclaim` 0.2 s later. Every run completes
/// with every checksum matching; the stall from the kill to the first app rejoined is
/// printed.
#[test]
fn the_workflow_completes_through_a_pm_killed_at_random_moments() {
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    let mut stalls = Vec::new();
    for run in 0..10 {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let delay = Duration::from_millis(300 + rng % 1500);
        let standby = run % 2 == 0;
        let scene = Scene::new(&format!("workflow-{run}"));
        let (active, _) = scene.pm(&[]);
        let watcher = standby.then(|| scene.standby(&["--grace", "3"]));
        let mut cmd = std::process::Command::new(common::maestro());
        cmd.args(["run", "-n", "4", "--"])
            .arg(common::example("pool_workflow"))
            .args(["--cdos", "100", "--max-size", "4M"])
            .env("MSTRO_WORKFLOW_NAME", &scene.workflow)
            .env("MSTRO_POOL_MANAGER_INFO_FILE", &scene.file)
            .env("TMPDIR", scene.tmp.path());
        let job = common::Group::spawn(&mut cmd);
        std::thread::sleep(delay);
        let mid_run = common::alive(job.pid());
        let killed = kill(&active);
        let restarted = (!standby).then(|| {
            std::thread::sleep(Duration::from_millis(200));
            scene.pm(&["--reclaim", "--grace", "3"]).0
        });
        let stall = mid_run
            .then(|| first_rejoin(&scene.file, killed, job.pid()))
            .flatten();
        let out = job.wait(Duration::from_secs(300));
        out.assert_workflow_of(2, 100);
        eprintln!(
            "run {run} ({}): killed {:.2} s in{}",
            if standby {
                "standby"
            } else {
                "restarted with --reclaim"
            },
            delay.as_secs_f64(),
            match stall {
                Some(s) => format!(
                    ", first app rejoined {:.2} s after the kill",
                    s.as_secs_f64()
                ),
                None => ", after the workflow ended".into(),
            }
        );
        stalls.extend(stall.filter(|_| standby));
        drop((active, watcher, restarted));
    }
    for s in &stalls {
        assert!(
            *s < Duration::from_secs(2),
            "a standby stalled the workflow {s:?}"
        );
    }
}

/// What the pool keeps after its producer left outlives the PM too: a GFS offer handed
/// over at its withdraw, its producer gone, the PM killed; the PM restarted with
/// `--reclaim` adopts the file from the dead PM's directory (left by the sweeps for it)
/// and a newcomer gets its bytes; nothing of the dead PM's directory is left.
#[test]
fn a_cdo_kept_after_its_producer_left_outlives_a_killed_pm() {
    let scene = Scene::new("kept");
    let gfs = scene.tmp.path().join("gfs");
    std::fs::create_dir(&gfs).expect("gfs dir");
    let gfs_arg = gfs.to_str().expect("utf-8 path");
    let (pm, info) = scene.pm(&["--gfs-dir", gfs_arg]);
    let options = |component: &str, offer: bool| {
        JoinOptions::new(component, 0)
            .isolated()
            .gfs(pool::GfsOptions {
                dir: gfs.clone(),
                offer,
                group_readable: false,
            })
    };
    let producer = Client::join(&info, options("producer", true)).expect("join");
    let cdo = producer.declare("kept/field").expect("declare");
    let bytes: Vec<u8> = (0..1u32 << 16).map(|i| (i % 251) as u8).collect();
    producer
        .seal_and_offer(
            cdo,
            Default::default(),
            fabric::Buffer::from_slice(&bytes).expect("buffer"),
        )
        .expect("offer");
    producer
        .withdraw(cdo)
        .expect("withdraw, handing the file over");
    producer.leave().expect("leave");

    let before: Vec<_> = (std::fs::read_dir(&gfs).expect("gfs dir").flatten())
        .map(|e| e.path())
        .collect();
    assert_eq!(before.len(), 1, "the PM's directory alone: {before:?}");
    // A PM taking over adopts what is described, and the withdraw was answered only once
    // the kept file was: killed right after it, the PM loses nothing.
    let described = std::fs::read_dir(&before[0]).is_ok_and(|d| {
        d.flatten()
            .any(|e| e.file_name().to_string_lossy().ends_with(".maestro.json"))
    });
    assert!(described, "described before the withdraw was answered");
    let killed = kill(&pm);
    assert!(common::wait_gone(pm.pid(), Duration::from_secs(10)));
    // Its janitor sweeps the GFS directory: the kept files stay for the next PM.
    let orphaned = before[0].join("maestro-orphaned");
    common::wait_for(&gfs, Duration::from_secs(20), "the janitor's sweep", || {
        orphaned.exists()
    });
    assert!(before[0].exists(), "left for the next PM");

    let (next, next_info) = scene.pm(&["--reclaim", "--grace", "1", "--gfs-dir", gfs_arg]);
    // A new app's JOIN waits out the grace period (refused `Grace`, tried again).
    let consumer = Client::join(&next_info, options("consumer", false)).expect("join");
    let cdo = consumer.declare("kept/field").expect("declare");
    let got = match consumer.demand(cdo) {
        Ok((data, _)) => data.as_slice().to_vec(),
        Err(e) => {
            let left: Vec<_> = walkdir(&gfs);
            panic!("demand: {e:?}; the GFS directory holds {left:?}");
        }
    };
    eprintln!(
        "kept CDO served {:.2} s after its PM was killed",
        killed.elapsed().as_secs_f64()
    );
    assert_eq!(got, bytes);
    assert!(
        !before[0].exists(),
        "the dead PM's directory is gone once adopted"
    );
    consumer.leave().expect("leave");
    drop(next);
}

/// A program written as a pool manager runs unchanged as a standby: the C PM tool with
/// `MSTRO_PM_STANDBY_FOR` (the active PM's info file) blocks in `mstro_pm_start` while it
/// watches, takes over when the active PM is killed (its apps carry on), then prints its
/// info, counts the apps leaving through its own subscription and stops.
#[test]
fn the_c_pm_tool_stands_by_and_takes_over_unchanged() {
    let scene = Scene::new("c-standby");
    let file = &scene.file;
    let (active, info) = scene.pm(&[]);
    let c = common::capi::installed();
    let mut cmd = std::process::Command::new(c.bin("pm_tool"));
    cmd.args(["--clients", "2"])
        .env("MSTRO_WORKFLOW_NAME", &scene.workflow)
        .env("MSTRO_PM_STANDBY_FOR", file)
        .env("MSTRO_PM_GRACE", "10")
        .env("TMPDIR", scene.tmp.path())
        .env_remove("MSTRO_POOL_MANAGER_INFO");
    let mut tool = common::Group::spawn(&mut cmd);
    scene.await_standby();
    let producer = join(&info, file, "producer");
    let consumer = join(&info, file, "consumer");
    offer(&producer, "before", b"offered before the PM died");
    // The standby looks at the active PM's apps twice a second.
    std::thread::sleep(Duration::from_millis(800));
    let waiting = demanding(consumer, "after");
    std::thread::sleep(Duration::from_millis(200));
    let killed = kill(&active);
    offer(&producer, "after", b"offered to the C standby");
    let (consumer, got) = waiting.join().expect("demand thread");
    assert_eq!(got, b"offered to the C standby");
    eprintln!(
        "C standby: a waiting demand served {:.2} s after the kill",
        killed.elapsed().as_secs_f64()
    );
    // Taken over (both apps back: the grace period ends early), it joins its own PM and
    // prints the info it wrote to the file.
    let (printed, reader) = common::capi::tool_info(&mut tool);
    let written = PmInfo::from_file(file).expect("info").expect("written");
    assert_eq!(PmInfo::parse(&printed).expect("printed info"), written);
    assert_ne!(written, info, "the standby's own");
    let end = Instant::now() + Duration::from_secs(20);
    loop {
        let out = common::run(
            std::process::Command::new(common::maestro())
                .args(["pool", "status", "--json", "--info-file"])
                .arg(file),
            Duration::from_secs(30),
        );
        let status: serde_json::Value = serde_json::from_str(&out.stdout).expect("json");
        if status["subscriptions"].as_u64() >= Some(1) {
            break;
        }
        assert!(Instant::now() < end, "the tool never subscribed: {status}");
        std::thread::sleep(Duration::from_millis(100));
    }
    for c in [consumer, producer] {
        c.leave().expect("leave");
    }
    // Subscribed once its grace period was over, it hears first of the apps joined before
    // (the two that rejoined in it), as any APP_JOIN subscription does, then of their
    // leaves.
    common::capi::assert_tool_saw_two(tool, reader);
    assert!(!file.exists(), "the standby's info file goes when it stops");
}

/// A pool of three shards (threads of one `maestro pm --shards 3`) with a standby per
/// shard (`--standby-for FILE --shard S`): the pool's process is killed, every shard is
/// taken over by its standby, each putting its endpoints into the info file in place of
/// the lost shard's; the apps reclaim at every shard, a demand waiting through the loss
/// is served, and a newcomer finds every CDO offered before the kill.
#[test]
fn a_standby_per_shard_takes_over_a_sharded_pool_and_its_apps_carry_on() {
    let scene = Scene::new("shard-standbys");
    let file = &scene.file;
    let (active, info) = scene.pm(&["--shards", "3"]);
    assert_eq!(info.shards().count(), 3);
    let mut standbys: Vec<(common::Group, _)> = (0..3)
        .map(|s| {
            let shard = s.to_string();
            let mut g = scene.standby(&["--grace", "10", "--shard", &shard]);
            let said = common::lines(g.child.stderr.take().expect("stderr"));
            (g, said)
        })
        .collect();
    let producer = join(&info, file, "producer");
    let consumer = join(&info, file, "consumer");
    // Joined at shard 0 alone: it first uses the other shards while they are taken over.
    let late = join(&info, file, "late");
    let names: Vec<String> = (0..24).map(|i| format!("before-{i}")).collect();
    for name in &names {
        offer(&producer, name, name.as_bytes());
    }
    // Every shard lists its standby (each looks at its shard's apps twice a second).
    for s in 0..3 {
        await_shard_standby(&info, s);
    }
    std::thread::sleep(Duration::from_millis(800));
    // Demands waiting through the loss, for names of every shard.
    let after: Vec<&'static str> = (0..6)
        .map(|i| &*Box::leak(format!("after-{i}").into_boxed_str()))
        .collect();
    let homes: std::collections::BTreeSet<usize> =
        after.iter().map(|n| info.shards().home(n)).collect();
    assert!(homes.len() > 1, "{homes:?}");
    let waiting = std::thread::spawn(move || {
        let got: Vec<Vec<u8>> = after.iter().map(|n| demand(&consumer, n)).collect();
        (consumer, got)
    });
    std::thread::sleep(Duration::from_millis(300));
    let killed = kill(&active);
    let first_use = {
        // Names of shards 1 and 2 first: their cores are made while nothing serves them.
        let mut names = names.clone();
        names.sort_by_key(|n| info.shards().home(n) == 0);
        std::thread::spawn(move || {
            for name in &names {
                assert_eq!(demand(&late, name), name.as_bytes(), "{name}");
            }
            late
        })
    };
    for i in 0..6 {
        let name = format!("after-{i}");
        offer(&producer, &name, name.as_bytes());
    }
    let (consumer, got) = waiting.join().expect("demand thread");
    for (i, bytes) in got.iter().enumerate() {
        assert_eq!(bytes, format!("after-{i}").as_bytes());
    }
    eprintln!(
        "shard standbys: from the kill, six demands over the shards served after {:.2} s",
        killed.elapsed().as_secs_f64()
    );
    let late = first_use
        .join()
        .expect("first use of shards being taken over");
    let taken_over = PmInfo::from_file(file).expect("info").expect("written");
    assert_eq!(taken_over.shards().count(), 3);
    for s in 0..3 {
        assert_ne!(
            taken_over.shard(s),
            info.shard(s),
            "shard {s} has its standby's endpoints"
        );
    }
    let newcomer = join(&taken_over, file, "newcomer");
    for name in &names {
        assert_eq!(demand(&newcomer, name), name.as_bytes());
    }
    for c in [newcomer, late, consumer, producer] {
        c.leave().expect("leave");
    }
    for (s, (standby, said)) in standbys.drain(..).enumerate() {
        let out = standby.terminate(Duration::from_secs(10));
        assert_eq!(out.code(), Some(0));
        let said: Vec<String> = said.try_iter().collect();
        assert!(
            said.iter()
                .any(|l| l.contains(&format!("took over shard {s} of 3"))),
            "{said:?}"
        );
    }
}

/// Waits until shard `shard` of the pool of `info` lists a standby.
fn await_shard_standby(info: &PmInfo, shard: usize) {
    use pool::view::{Query, View};
    let part = info.of_shard(shard).expect("shard");
    let end = Instant::now() + Duration::from_secs(20);
    loop {
        let mut o = pool::Observer::connect(&part, "test", Duration::from_secs(5))
            .expect("observe the shard");
        let View::Status(st) = o.query(Query::Status).expect("status") else {
            panic!("a status")
        };
        if !st.standbys.is_empty() {
            return;
        }
        assert!(Instant::now() < end, "shard {shard} lists no standby");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Each shard's generation, as `maestro pool status --json` of the pool in `file` shows.
fn generations(file: &std::path::Path) -> Vec<u64> {
    let out = common::run(
        std::process::Command::new(common::maestro())
            .args(["pool", "status", "--json", "--info-file"])
            .arg(file),
        Duration::from_secs(30),
    );
    assert_eq!(out.code(), Some(0), "{}", out.stderr);
    let v: serde_json::Value = serde_json::from_str(&out.stdout).expect("JSON");
    v["shards"]
        .as_array()
        .expect("shards")
        .iter()
        .map(|s| s["generation"].as_u64().expect("a generation"))
        .collect()
}

/// The process of rank `rank` of the job running `maestro pm` for `workflow` (its
/// command line names the workflow, its environment the rank).
fn rank_pid(workflow: &str, rank: u32) -> i32 {
    let want = format!("PMIX_RANK={rank}");
    for e in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|p| p.parse::<i32>().ok()) else {
            continue;
        };
        let cmdline = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        let args: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
        let ours = args.contains(&&b"pm"[..]) && args.contains(&workflow.as_bytes());
        if !ours {
            continue;
        }
        let environ = std::fs::read(e.path().join("environ")).unwrap_or_default();
        if environ.split(|&b| b == 0).any(|v| v == want.as_bytes()) {
            return pid;
        }
    }
    panic!("no rank {rank} of workflow {workflow}")
}

/// A pool of three shards as the ranks of one job (`maestro run --grace 600`: the others
/// serve on when a rank dies), a standby for shard 2 alone: its rank is killed, the
/// standby takes it over and puts its endpoints into the info file that rank 0 still
/// holds; the apps reclaim at shard 2 only (shards 0 and 1 keep their generation), a
/// demand of shard 2's waiting through the loss is served, and so is every CDO offered
/// before.
#[test]
fn one_shard_killed_alone_is_taken_over_while_the_others_serve_on() {
    let scene = Scene::new("one-shard");
    let file = &scene.file;
    let mut job = std::process::Command::new(common::maestro());
    job.args(["run", "--grace", "600", "-n", "3"])
        .arg(common::maestro())
        .args([
            "pm",
            "--workflow",
            &scene.workflow,
            "--shards",
            "3",
            "--print-info",
        ])
        .arg("--info-file")
        .arg(file)
        .env("TMPDIR", scene.tmp.path());
    let (job, line) = common::spawn_pm(&mut job);
    let info = PmInfo::parse(&line).expect("PM info");
    let mut standby = scene.standby(&["--grace", "10", "--shard", "2"]);
    let said = common::lines(standby.child.stderr.take().expect("stderr"));
    let producer = join(&info, file, "producer");
    let consumer = join(&info, file, "consumer");
    let names: Vec<String> = (0..24).map(|i| format!("kept-{i}")).collect();
    for name in &names {
        offer(&producer, name, name.as_bytes());
    }
    await_shard_standby(&info, 2);
    std::thread::sleep(Duration::from_millis(800));
    let before = generations(file);
    let late = (0..)
        .map(|i| format!("late-{i}"))
        .find(|n| info.shards().home(n) == 2)
        .expect("a name of shard 2");
    let waiting = {
        let late: &'static str = Box::leak(late.clone().into_boxed_str());
        demanding(consumer, late)
    };
    std::thread::sleep(Duration::from_millis(300));
    // SAFETY: signalling a rank of the job this test started.
    unsafe { libc::kill(rank_pid(&scene.workflow, 2), libc::SIGKILL) };
    offer(&producer, &late, b"offered to shard 2's standby");
    let (consumer, got) = waiting.join().expect("demand thread");
    assert_eq!(got, b"offered to shard 2's standby");
    for name in &names {
        assert_eq!(demand(&consumer, name), name.as_bytes(), "{name}");
    }
    let taken_over = PmInfo::from_file(file).expect("info").expect("written");
    assert_eq!(taken_over.shard(0), info.shard(0), "shard 0 serves on");
    assert_eq!(taken_over.shard(1), info.shard(1), "shard 1 serves on");
    assert_ne!(
        taken_over.shard(2),
        info.shard(2),
        "shard 2 is its standby's"
    );
    let after = generations(file);
    assert_eq!(
        after[..2],
        before[..2],
        "shards 0 and 1 were never taken over"
    );
    assert_ne!(after[2], before[2], "shard 2 was");
    for c in [consumer, producer] {
        c.leave().expect("leave");
    }
    let out = standby.terminate(Duration::from_secs(10));
    assert_eq!(out.code(), Some(0));
    let said: Vec<String> = said.try_iter().collect();
    assert!(
        said.iter().any(|l| l.contains("took over shard 2 of 3")),
        "{said:?}"
    );
    drop(job);
}

/// A standby of a sharded pool must say which shard: refused at once, naming the count.
#[test]
fn a_standby_of_a_sharded_pool_without_a_shard_is_refused() {
    let scene = Scene::new("shard-standby-refused");
    let (_active, _) = scene.pm(&["--shards", "2"]);
    for (extra, says) in [
        (
            &[][..],
            "has 2 shards: stand by for one with --shard S (0 to 1)",
        ),
        (&["--shard", "2"][..], "--shard 2: the pool of workflow"),
    ] {
        let standby = scene.standby(extra);
        let out = standby.wait(Duration::from_secs(30));
        assert_ne!(out.code(), Some(0));
        assert!(out.stderr.contains(says), "{}", out.stderr);
    }
}

/// Every path under `dir` (for a failure's message).
fn walkdir(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut all = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = e.path();
        if path.is_dir() {
            all.extend(walkdir(&path));
        }
        all.push(path);
    }
    all
}
