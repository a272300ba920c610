//! The load generator of `maestro bench pm`: an injector process (its command line and
//! main, and the parent's handle, [`Injector`]) that joins as many apps
//! as asked, offers, requires, withdraws and disposes in windows of batches, and reports
//! its rates.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Stdio};
use std::time::Instant;

use fabric::RemoteRegion;
use pool::bootstrap::PmInfo;
use pool::proto::{FromPm, Op, ToPm};
use pool_tools::wire::Conn;

use super::{PmBench, PmBenchError, TIMEOUT, parse_batch, subscribe};

/// The command line of one injector process (`maestro-bench pm-injector`, hidden).
#[derive(Clone, Debug, clap::Args)]
pub struct InjectorArgs {
    /// The PM info.
    #[arg(long)]
    pm: String,
    /// producer, consumer or subscriber.
    #[arg(long, value_parser = ["producer", "consumer", "subscriber"])]
    role: String,
    /// Injector index.
    #[arg(long)]
    index: usize,
    /// CDOs.
    #[arg(long)]
    cdos: usize,
    /// Operations per frame.
    #[arg(long, value_parser = parse_batch)]
    batch: usize,
}

/// `maestro-bench pm-injector`: one injector ([`inject`]); exit code 1 on failure.
pub fn main(args: &InjectorArgs) -> std::process::ExitCode {
    let result = PmInfo::parse(&args.pm)
        .map_err(|e| PmBenchError::Injector(e.to_string()))
        .and_then(|info| inject(&info, &args.role, args.index, args.cdos, args.batch));
    pool_tools::cli::exit("pm-injector", result, 1)
}

pub(super) struct Injector {
    child: Child,
    lines: std::io::Lines<BufReader<std::process::ChildStdout>>,
}

impl Injector {
    pub(super) fn spawn(
        info: &PmInfo,
        role: &str,
        index: usize,
        b: &PmBench,
    ) -> Result<Injector, PmBenchError> {
        // Through the launcher of its turn (another node), or here.
        let launcher =
            (!b.launcher.is_empty()).then(|| b.launcher[index % b.launcher.len()].as_str());
        let mut child = crate::peer::launched(launcher)?
            .args(["pm-injector", "--pm", &info.encode(), "--role", role])
            .args([
                "--index",
                &index.to_string(),
                "--cdos",
                &b.cdos.to_string(),
                "--batch",
                &b.batch.to_string(),
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        let out = child
            .stdout
            .take()
            .ok_or_else(|| PmBenchError::Injector("no stdout".into()))?;
        Ok(Injector {
            child,
            lines: BufReader::new(out).lines(),
        })
    }

    /// The injector's next line.
    fn line(&mut self) -> Result<String, PmBenchError> {
        Ok(self
            .lines
            .next()
            .ok_or_else(|| PmBenchError::Injector("exited without a report".into()))??)
    }

    /// Waits for the injector to say `what`.
    pub(super) fn expect(&mut self, what: &str) -> Result<(), PmBenchError> {
        let line = self.line()?;
        if line == what {
            Ok(())
        } else {
            Err(PmBenchError::Injector(line))
        }
    }

    /// Reads the injector's report of a round: seconds it took.
    pub(super) fn seconds(&mut self) -> Result<f64, PmBenchError> {
        self.report("done")
    }

    /// Reads the injector's `<what> in S s` report.
    fn report(&mut self, what: &str) -> Result<f64, PmBenchError> {
        let line = self.line()?;
        line.strip_prefix(what)
            .and_then(|s| s.strip_prefix(" in "))
            .and_then(|s| s.trim_end_matches(" s").parse().ok())
            .ok_or(PmBenchError::Injector(line))
    }

    /// Sends a producer a command (`withdraw`, `offer`) and waits for its `what` report.
    pub(super) fn command(&mut self, command: &str, what: &str) -> Result<f64, PmBenchError> {
        let stdin = self
            .child
            .stdin
            .as_mut()
            .ok_or_else(|| PmBenchError::Injector("no stdin".into()))?;
        writeln!(stdin, "{command}")?;
        stdin.flush()?;
        self.report(what)
    }
}

impl Drop for Injector {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Batches an injector keeps in flight.
const WINDOW: usize = 2;

/// The `k`-th name injector `index` offers.
pub(super) fn name(index: usize, k: usize) -> String {
    format!("inj{index}/{k}")
}

/// Collects `n` answers accepted by `pick`, failing on refusals.
pub(super) fn collect<T>(
    conn: &mut Conn,
    op: Op,
    n: usize,
    mut pick: impl FnMut(FromPm) -> Option<T>,
) -> Result<Vec<T>, PmBenchError> {
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        match conn.recv(op)? {
            FromPm::Refused { op, why, .. } => {
                return Err(PmBenchError::Injector(format!("{op} refused: {why}")));
            }
            FromPm::DoneMany { op, cdos } => {
                out.extend(
                    cdos.into_iter()
                        .filter_map(|cdo| pick(FromPm::Done { op, cdo })),
                );
            }
            m => out.extend(pick(m)),
        }
    }
    Ok(out)
}

/// One injector process: runs its role and prints `done in S s`. Producers then keep their
/// CDOs live and follow commands on stdin until it closes: `withdraw` (withdraw and
/// dispose every CDO, each answered, then `withdrawn in S s`) and `offer` (another round of
/// declare+seal+offer, then `done in S s`).
///
/// # Errors
/// Protocol errors; a refused operation (a CDO the PM lost).
pub fn inject(
    info: &PmInfo,
    role: &str,
    index: usize,
    cdos: usize,
    batch: usize,
) -> Result<(), PmBenchError> {
    if info.shards().count() > 1 {
        if role != "producer" {
            return Err(PmBenchError::Injector(format!(
                "a sharded pool is measured with producers only, not a {role}"
            )));
        }
        return inject_sharded(info, index, cdos, batch);
    }
    let addr = info
        .endpoints
        .first()
        .ok_or_else(|| PmBenchError::Injector("PM info has no endpoint".into()))?;
    let mut conn = Conn::connect(addr, TIMEOUT)?;
    let app = conn.join(info, role, index as i64)?;
    // The CDO ids this app gives, in order.
    let mut ids = pool::proto::cdo_ids(app);
    if role == "subscriber" {
        return subscribe(&mut conn, cdos);
    }
    let producer = role == "producer";
    let report = |what: &str, start: Instant| -> Result<(), PmBenchError> {
        println!("{what} in {} s", start.elapsed().as_secs_f64());
        std::io::stdout().flush()?;
        Ok(())
    };
    let start = Instant::now();
    let name_of = |k: usize| name(index, k);
    let mut live = run_round(&mut conn, &mut ids, (&name_of, cdos, batch), producer)?;
    report("done", start)?;
    if !producer {
        return Ok(());
    }
    let mut command = String::new();
    loop {
        command.clear();
        if std::io::stdin().read_line(&mut command)? == 0 {
            return Ok(());
        }
        let start = Instant::now();
        match command.trim() {
            "withdraw" => {
                withdraw_all(&mut conn, &live, batch)?;
                live.clear();
                report("withdrawn", start)?;
            }
            "offer" => {
                live = run_round(&mut conn, &mut ids, (&name_of, cdos, batch), producer)?;
                report("done", start)?;
            }
            other => return Err(PmBenchError::Injector(format!("unknown command {other:?}"))),
        }
    }
}

/// A producer of a sharded pool: joins shard 0, then every other shard as the member it
/// is; offers each of its `cdos` names at the name's home, every shard's share on a thread
/// of its own (its own connection, its own part of the app's CDO ids), and prints `done
/// in S s` once all are answered; keeps them live until stdin closes.
///
/// # Errors
/// Protocol errors; a refused operation.
fn inject_sharded(
    info: &PmInfo,
    index: usize,
    cdos: usize,
    batch: usize,
) -> Result<(), PmBenchError> {
    let shards = info.shards();
    let endpoint = |s: usize| {
        info.shard(s)
            .and_then(<[_]>::first)
            .ok_or_else(|| PmBenchError::Injector(format!("PM info has no endpoint of shard {s}")))
    };
    let mut first = Conn::connect(endpoint(0)?, TIMEOUT)?;
    let app = first.join(info, "producer", index as i64)?;
    let mut conns = vec![first];
    for s in 1..shards.count() {
        let mut conn = Conn::connect(endpoint(s)?, TIMEOUT)?;
        conn.join_member(info, ("producer", index as i64), app)?;
        conns.push(conn);
    }
    let mut homes: Vec<Vec<usize>> = vec![Vec::new(); shards.count()];
    for k in 0..cdos {
        homes[shards.home(&name(index, k))].push(k);
    }
    let start = Instant::now();
    std::thread::scope(|scope| {
        let runs: Vec<_> = (conns.iter_mut().zip(&homes).enumerate())
            .map(|(s, (conn, ks))| {
                scope.spawn(move || {
                    let place = shards.place(s).ok_or_else(|| {
                        PmBenchError::Injector(format!("shard {s} of {}", shards.count()))
                    })?;
                    let mut ids = place.cdo_ids(app);
                    let name_of = |k: usize| name(index, ks[k]);
                    run_round(conn, &mut ids, (&name_of, ks.len(), batch), true).map(drop)
                })
            })
            .collect();
        runs.into_iter().try_for_each(|h| {
            h.join()
                .map_err(|_| PmBenchError::Injector("a shard's thread panicked".into()))?
        })
    })?;
    println!("done in {} s", start.elapsed().as_secs_f64());
    std::io::stdout().flush()?;
    // Live until the parent is done with them.
    let mut line = String::new();
    while std::io::stdin().read_line(&mut line)? > 0 {
        line.clear();
    }
    drop(conns);
    Ok(())
}

/// Withdraws and disposes `ids` in batches; every operation must be answered `Done`.
fn withdraw_all(conn: &mut Conn, ids: &[u64], batch: usize) -> Result<(), PmBenchError> {
    for chunk in ids.chunks(batch.max(1)) {
        let ops: Vec<ToPm> = chunk
            .iter()
            .flat_map(|&cdo| {
                [
                    ToPm::Withdraw { cdo, keep: None },
                    ToPm::Dispose { cdo, answer: true },
                ]
            })
            .collect();
        conn.send_batch(&ops)?;
        collect(conn, Op::Withdraw, ops.len(), |m| {
            matches!(m, FromPm::Done { .. }).then_some(())
        })?;
    }
    Ok(())
}

/// One round: declare `cdos` names (the `k`-th `name_of(k)`, under the next of `ids`) and
/// seal+offer (producer) or require (consumer) each, in batches of `batch`, [`WINDOW`]
/// batches in flight. Returns the producer's live CDOs.
fn run_round(
    conn: &mut Conn,
    ids: &mut std::ops::RangeInclusive<u64>,
    (name_of, cdos, batch): (&dyn Fn(usize) -> String, usize, usize),
    producer: bool,
) -> Result<Vec<u64>, PmBenchError> {
    let mut live = Vec::with_capacity(if producer { cdos } else { 0 });
    let mut send_batch = |conn: &mut Conn, k: usize| -> Result<usize, PmBenchError> {
        let n = batch.min(cdos - k);
        let mut ops = Vec::with_capacity(2 * n);
        for i in k..k + n {
            let cdo = ids
                .next()
                .ok_or_else(|| PmBenchError::Injector("out of CDO ids".into()))?;
            ops.push(ToPm::Declare {
                cdo,
                name: name_of(i),
            });
            ops.push(if producer {
                live.push(cdo);
                ToPm::SealOffer {
                    cdo,
                    attributes: Default::default(),
                    region: RemoteRegion {
                        addr: 0,
                        key: cdo,
                        len: 0,
                    },
                    extras: Default::default(),
                }
            } else {
                ToPm::Require { cdo }
            });
        }
        conn.send_batch(&ops)?;
        Ok(n)
    };
    // One counted answer per CDO: the offer's Done, or the require's ticket (the require's
    // own Done is not counted: the ticket is what the consumer waits for).
    let (mut sent, mut answers) = (0, 0);
    let mut done = Vec::new();
    while answers < cdos {
        // Keep the PM busy: the next batches travel while earlier answers are read.
        while sent < cdos && sent < answers + WINDOW * batch {
            sent += send_batch(conn, sent)?;
        }
        match conn.recv(Op::Offer)? {
            FromPm::Refused { op, why, .. } => {
                return Err(PmBenchError::Injector(format!("{op} refused: {why}")));
            }
            // With subscribers the PM runs a SealOffer as its two operations and answers
            // the seal too: only the offer's answer counts. The PM packs runs of answers,
            // also across batches.
            FromPm::DoneMany {
                op: Op::Offer,
                cdos: offered,
            } => answers += offered.len(),
            FromPm::Done { op: Op::Offer, .. } => answers += 1,
            FromPm::Ticket { transfer, .. } => {
                answers += 1;
                done.push(ToPm::TransferDone {
                    transfer,
                    error: None,
                    direct: None,
                });
            }
            _ => {}
        }
        if done.len() >= batch || (answers == cdos && !done.is_empty()) {
            conn.send_batch(&done)?;
            done.clear();
        }
    }
    Ok(live)
}
