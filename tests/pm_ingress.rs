//! What an unauthenticated or misbehaving peer can make a pool manager (`maestro pm`) hold:
//! 200 connections that send garbage or nothing, 16 MiB frames before JOIN, and a joined
//! app that streams requests without reading the answers. Each is closed within its bound,
//! the PM's memory stays bounded (its RSS is sampled throughout), and an honest app is
//! served during the attack.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::{rss_kib, start_pm, tcp_addr};
use pool::bootstrap::PmInfo;
use pool::proto::{self, CdoId, FromPm, ToPm};
use pool::{Client, JoinOptions};

/// The PM's join deadline in this test.
const JOIN_TIMEOUT: Duration = Duration::from_secs(2);

/// Samples a process's RSS every 20 ms until dropped; keeps the peak.
struct RssWatch {
    peak: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl RssWatch {
    fn start(pid: i32) -> RssWatch {
        let peak = Arc::new(AtomicU64::new(rss_kib(pid)));
        let stop = Arc::new(AtomicBool::new(false));
        let (p, s) = (Arc::clone(&peak), Arc::clone(&stop));
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                p.fetch_max(rss_kib(pid), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        RssWatch {
            peak,
            stop,
            thread: Some(thread),
        }
    }

    fn peak(&self) -> u64 {
        self.peak.load(Ordering::Relaxed)
    }
}

impl Drop for RssWatch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Reads until the PM closes the connection (EOF or reset); the time that took, or `None`
/// if it was still open after `limit`.
fn closed_within(s: &mut TcpStream, limit: Duration) -> Option<Duration> {
    let start = Instant::now();
    let mut sink = [0u8; 65536];
    while start.elapsed() < limit {
        s.set_read_timeout(Some(Duration::from_millis(100)))
            .expect("timeout");
        match s.read(&mut sink) {
            Ok(0) => return Some(start.elapsed()),
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => return Some(start.elapsed()),
        }
    }
    None
}

/// Reads one frame's messages from a blocking stream.
fn read_frame(s: &mut TcpStream) -> Vec<FromPm> {
    let mut header = [0u8; proto::HEADER];
    s.read_exact(&mut header).expect("header");
    let len = proto::payload_len(&header).expect("frame header");
    let mut payload = vec![0u8; len];
    s.read_exact(&mut payload).expect("payload");
    proto::decode(&payload).expect("frame")
}

/// Joins `info`'s PM by hand (challenge, proof, welcome) and returns the raw connection.
fn join_raw(info: &PmInfo) -> TcpStream {
    join_raw_as(info, proto::Role::App)
}

/// As [`join_raw`], in `role`.
fn join_raw_as(info: &PmInfo, role: proto::Role) -> TcpStream {
    let mut s = TcpStream::connect(tcp_addr(info)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let nonce = match read_frame(&mut s).as_slice() {
        [FromPm::Challenge { nonce }] => *nonce,
        other => panic!("expected a challenge, got {other:?}"),
    };
    let join = proto::Join {
        workflow: info.workflow.clone(),
        component: "streamer".into(),
        index: 0,
        host: "localhost".into(),
        process: 1,
        job: String::new(),
        endpoint: None,
        alternates: Vec::new(),
        networks: Vec::new(),
        memory: None,
        credential: None,
        nics: Default::default(),
        gfs: None,
        role,
        proof: pool::auth::prove(&info.secret, &nonce, &info.workflow, "streamer", 0),
        reclaim: None,
        member: None,
    };
    s.write_all(&proto::encode(&[ToPm::Join(Box::new(join))]).expect("encode"))
        .expect("send join");
    assert!(
        matches!(read_frame(&mut s).as_slice(), [FromPm::Welcome { .. }]),
        "not welcomed"
    );
    s
}

/// An honest app joins and moves a CDO through the PM while the attack goes on.
fn honest_round_trip(info: &PmInfo, name: &str) {
    let c = Client::join(
        info,
        JoinOptions::new("honest", 0)
            .timeout(Duration::from_secs(30))
            .isolated(),
    )
    .expect("an honest app joins during the attack");
    let cdo = c.declare(name).expect("declare");
    c.seal_and_offer(
        cdo,
        Default::default(),
        fabric::Buffer::new(4096).expect("buf"),
    )
    .expect("offer");
    c.withdraw(cdo).expect("withdraw");
    c.leave().expect("leave");
}

#[test]
fn hostile_connections_are_closed_and_the_pm_stays_small() {
    let (pm, info) = start_pm(
        "ingress",
        &[
            "--listen",
            "127.0.0.1:0",
            "--no-unix-socket",
            "--join-timeout",
            "2",
            "--max-ingress",
            "16M",
            "--max-queued",
            "1M",
        ],
    );
    let info = PmInfo::parse(&info).expect("PM info");
    let addr = tcp_addr(&info);
    let start_rss = rss_kib(pm.pid());
    let watch = RssWatch::start(pm.pid());

    // 100 connections that send nothing, 100 that send garbage.
    let mut silent: Vec<TcpStream> = (0..100)
        .map(|_| TcpStream::connect(addr).expect("connect"))
        .collect();
    let mut garbage: Vec<TcpStream> = (0..100)
        .map(|i| {
            let mut s = TcpStream::connect(addr).expect("connect");
            let junk: Vec<u8> = (0..4096u32).map(|b| (b * 7 + i) as u8).collect();
            let _ = s.write_all(&junk);
            s
        })
        .collect();
    // Eight 16 MiB frames announced before JOIN, their bodies streamed.
    let big: Vec<_> = (0..8)
        .map(|_| {
            std::thread::spawn(move || {
                let mut s = TcpStream::connect(addr).expect("connect");
                s.set_write_timeout(Some(Duration::from_secs(10)))
                    .expect("timeout");
                let mut frame = proto::encode(&[ToPm::Leave]).expect("encode");
                frame.truncate(proto::HEADER);
                frame[5..9].copy_from_slice(&(proto::MAX_FRAME as u32).to_le_bytes());
                let chunk = vec![0x5Au8; 1 << 20];
                let mut sent = 0usize;
                if s.write_all(&frame).is_ok() {
                    while sent < proto::MAX_FRAME && s.write_all(&chunk).is_ok() {
                        sent += chunk.len();
                    }
                }
                (sent, closed_within(&mut s, Duration::from_secs(10)))
            })
        })
        .collect();

    // The honest app is served while all that is going on.
    honest_round_trip(&info, "during-the-attack");

    for (i, s) in garbage.iter_mut().enumerate() {
        assert!(
            closed_within(s, Duration::from_secs(5)).is_some(),
            "garbage connection {i} was left open"
        );
    }
    for b in big {
        let (sent, closed) = b.join().expect("big frame thread");
        assert!(
            sent < proto::MAX_FRAME && closed.is_some(),
            "a 16 MiB frame before JOIN was taken in ({sent} bytes sent, closed: {closed:?})"
        );
    }
    let waited = Instant::now();
    for (i, s) in silent.iter_mut().enumerate() {
        let limit = (JOIN_TIMEOUT + Duration::from_secs(10)).saturating_sub(waited.elapsed());
        assert!(
            closed_within(s, limit).is_some(),
            "silent connection {i} still open {:?} after the join deadline",
            waited.elapsed()
        );
    }

    let attack_peak = watch.peak();
    // A joined app that streams requests and never reads the answers is cut off once its
    // unread answers pass --max-queued; the PM reads it only as fast as it can handle.
    let mut streamer = join_raw(&info);
    streamer
        .set_write_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    let batch: Vec<ToPm> = (0..1000)
        .map(|i| ToPm::Withdraw {
            cdo: CdoId::MAX - i,
            keep: None,
        })
        .collect();
    let frame = proto::encode(&batch).expect("encode");
    let streamed = Instant::now();
    let mut frames = 0u64;
    while streamed.elapsed() < Duration::from_secs(60) && streamer.write_all(&frame).is_ok() {
        frames += 1;
    }
    assert!(
        streamed.elapsed() < Duration::from_secs(60),
        "a connection that never reads was not cut off ({frames} frames of requests taken)"
    );
    honest_round_trip(&info, "after-the-attack");

    let peak = watch.peak();
    drop(watch);
    let end_rss = rss_kib(pm.pid());
    eprintln!(
        "PM RSS: start {start_rss} KiB, peak {attack_peak} KiB before the streamer, {peak} KiB after, end {end_rss} KiB; streamer cut off after {frames} frames"
    );
    // Without the bounds the 16 MiB frames alone cost 8 x 16-32 MiB.
    assert!(
        peak < start_rss + 96 * 1024,
        "the PM grew from {start_rss} KiB to {peak} KiB"
    );
    drop(pm);
}

/// An observer that asks and never reads its answers is cut off at `--max-queued`: the PM
/// does not grow, and an honest app is served on.
#[test]
fn an_observer_that_stops_reading_is_cut_off() {
    let (pm, info) = start_pm(
        "observer",
        &[
            "--listen",
            "127.0.0.1:0",
            "--no-unix-socket",
            "--max-queued",
            "1M",
        ],
    );
    let info = PmInfo::parse(&info).expect("PM info");
    let app = Client::join(
        &info,
        JoinOptions::new("app", 0)
            .timeout(Duration::from_secs(30))
            .isolated(),
    )
    .expect("join");
    for i in 0..1000 {
        app.declare(&format!("a-rather-long-name-for-cdo-number-{i:06}"))
            .expect("declare");
    }
    let start_rss = rss_kib(pm.pid());
    let mut o = join_raw_as(&info, proto::Role::Observer);
    // Pages of 1000 CDOs, ~80 KiB each: 400 of them are 30 MiB of answers.
    let ls = pool::view::Query::Ls(pool::view::Ls {
        selector: None,
        after: None,
        limit: 1000,
        attributes: true,
    });
    let frame = proto::encode(
        &(0..20)
            .map(|id| ToPm::Query {
                id,
                query: ls.clone(),
            })
            .collect::<Vec<_>>(),
    )
    .expect("encode");
    o.set_write_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    // Asked and read, a query is answered: a page of 1000.
    o.write_all(
        &proto::encode(&[ToPm::Query {
            id: 99,
            query: ls.clone(),
        }])
        .expect("encode"),
    )
    .expect("ask");
    match read_frame(&mut o).as_slice() {
        [FromPm::View { id: 99, view }] => match view.as_ref() {
            pool::view::View::Cdos(page) => assert_eq!(page.cdos.len(), 1000),
            other => panic!("{other:?}"),
        },
        other => panic!("{other:?}"),
    }
    for _ in 0..20 {
        if o.write_all(&frame).is_err() {
            break;
        }
    }
    // Not reading: the PM hands it one question at a time, and its answers pile up past
    // the limit once the sockets' buffers are full; it is cut off when another observer
    // (this one, which reads) is the only one left.
    let mut watch =
        pool::Observer::connect(&info, "watch", Duration::from_secs(30)).expect("observer");
    let end = Instant::now() + Duration::from_secs(30);
    while !matches!(
        watch.query(pool::view::Query::Status),
        Ok(pool::view::View::Status(s)) if s.observer_count == 1
    ) {
        assert!(
            Instant::now() < end,
            "the PM kept an observer that does not read"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(watch);
    assert!(
        closed_within(&mut o, Duration::from_secs(30)).is_some(),
        "the PM kept the connection of an observer that does not read"
    );
    honest_round_trip(&info, "after-the-observer");
    let grown = rss_kib(pm.pid()).saturating_sub(start_rss);
    assert!(grown < 64 << 10, "the PM grew by {grown} KiB");
}
