//! The other process of a two-process fabric run (`maestro-bench fabric-peer`), and the handle the
//! first process keeps on it.
//!
//! `owner` registers a buffer filled with a known pattern, prints one JSON line
//! ([`OwnerInfo`]: its address, the region's descriptor, the checksum) and serves remote
//! reads until its stdin closes. `reader` reads an owner's region in a loop, checking every
//! read, until an error (which it prints, exiting 1) or `--count` reads.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use fabric::baseline::RawEndpoint;
use fabric::{
    Address, Buffer, Config, Endpoint, MemoryRegion, ProgressMode, ProviderInfo, RemoteRegion,
    Scope, discover, select,
};
use serde::{Deserialize, Serialize};

use crate::pattern;

/// The seed of the owner's pattern.
pub const SEED: u64 = 0x006d_6165_7374_726f;

/// What an owner announces.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct OwnerInfo {
    /// The provider it serves on.
    pub provider: String,
    /// Its endpoint address.
    pub address: Address,
    /// Its region.
    pub region: RemoteRegion,
    /// The checksum of the whole region.
    pub checksum: u64,
    /// Its process id.
    pub pid: u32,
    /// The region's address in its memory (for same-host copies: `maestro bench copy`).
    pub addr: u64,
    /// The memory file holding the region, when the owner was asked for one
    /// (`--shareable`).
    pub file: Option<fabric::MemoryFile>,
}

/// Errors of the two-process runs.
#[derive(Debug, thiserror::Error)]
pub enum PeerError {
    /// Options that do not go together; the text says which and what to do.
    #[error("{0}")]
    Usage(String),
    /// A fabric error.
    #[error(transparent)]
    Fabric(#[from] fabric::FabricError),
    /// The owner's region is smaller than the reads need.
    #[error("the owner's region: {0}")]
    Region(#[from] fabric::RegionRangeError),
    /// Spawning or talking to the peer failed.
    #[error("peer process: {0}")]
    Io(#[from] std::io::Error),
    /// The peer said something that is not an [`OwnerInfo`].
    #[error("peer process sent {line:?}: {reason}")]
    Protocol {
        /// What it sent.
        line: String,
        /// Why it is not understood.
        reason: String,
    },
    /// A same-host copy or view of the owner's memory failed (`maestro bench copy`).
    #[error(transparent)]
    Cma(#[from] fabric::cma::CmaError),
    /// Data arrived corrupted.
    #[error("checksum mismatch after reading {len} bytes: got {got:#x}, expected {expected:#x}")]
    Corrupt {
        /// Bytes read.
        len: usize,
        /// Checksum of what arrived.
        got: u64,
        /// Checksum of what was sent.
        expected: u64,
    },
}

/// The offer for `provider` on loopback (or shared memory).
///
/// # Errors
/// Discovery or selection errors naming what exists.
pub fn loopback_offer(provider: &str) -> Result<ProviderInfo, PeerError> {
    offer_on(provider, None)
}

/// The offer for `provider` on the network interface `iface` (loopback when `None`; shared
/// memory needs none).
///
/// # Errors
/// Discovery or selection errors naming what exists.
pub fn offer_on(provider: &str, iface: Option<&str>) -> Result<ProviderInfo, PeerError> {
    let shm = fabric::ProviderClass::of(provider) == fabric::ProviderClass::SharedMemory;
    let cfg = Config {
        provider: Some(provider.to_string()),
        iface: (!shm).then(|| iface.unwrap_or("lo").to_string()),
        ..Config::default()
    };
    let scope = if shm { Scope::SameNode } else { Scope::AnyNode };
    Ok(select(&discover()?, &cfg, scope, &[])
        .map_err(fabric::FabricError::from)?
        .remove(0))
}

/// Where the other process of a two-process benchmark runs (the pool benchmark's
/// provider, the raw baseline's owner), and the network interface both processes use.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct Remote {
    /// The network interface both processes' endpoints open on (not for shm; default
    /// loopback): across nodes, each node's interface to the other (`eth0`).
    #[arg(long)]
    pub iface: Option<String>,
    /// Runs the other process (the pool's provider, the raw baseline's owner) on another
    /// node: this command, split at spaces, is put in front of its command line, as
    /// mpirun's launch agent is (`scripts/cluster.sh exec 2`). Needs a network provider
    /// and `--iface`.
    #[arg(long)]
    pub launcher: Option<String>,
}

impl Remote {
    /// Refuses a launcher that cannot work with `provider`.
    ///
    /// # Errors
    /// The reason and what to do, as text.
    pub fn check(&self, provider: &str) -> Result<(), String> {
        let Some(launcher) = &self.launcher else {
            return Ok(());
        };
        if launcher.trim().is_empty() {
            return Err(
                "--launcher is empty: give the command that runs a program on the other node"
                    .into(),
            );
        }
        if fabric::ProviderClass::of(provider) == fabric::ProviderClass::SharedMemory {
            return Err(format!(
                "--launcher runs the other process on another node, which {provider} does not reach: use a network provider (--provider 'tcp;ofi_rxm')"
            ));
        }
        if self.iface.is_none() {
            return Err("--launcher needs --iface: the interface both nodes reach each other on (loopback does not leave a node)".into());
        }
        Ok(())
    }

    /// A command that runs this executable where the other process belongs: here, or
    /// through the launcher.
    ///
    /// # Errors
    /// When this executable's path is unknown.
    pub fn command(&self) -> std::io::Result<Command> {
        launched(self.launcher.as_deref())
    }

    /// The offer for `provider` on this side's interface.
    ///
    /// # Errors
    /// As [`offer_on`].
    pub fn offer(&self, provider: &str) -> Result<ProviderInfo, PeerError> {
        offer_on(provider, self.iface.as_deref())
    }

    /// The options that tell the other process the interface.
    pub fn args(&self) -> impl Iterator<Item = &str> {
        self.iface.iter().flat_map(|i| ["--iface", i.as_str()])
    }
}

/// A command that runs this executable through `launcher` (split at spaces and put in
/// front of its command line, as mpirun's launch agent is: `scripts/cluster.sh exec 2`),
/// or here without one.
///
/// # Errors
/// When this executable's path is unknown.
pub fn launched(launcher: Option<&str>) -> std::io::Result<Command> {
    let exe = std::env::current_exe()?;
    let mut words = launcher.iter().flat_map(|l| l.split_whitespace());
    Ok(match words.next() {
        Some(first) => {
            let mut c = Command::new(first);
            c.args(words).arg(exe);
            c
        }
        None => Command::new(exe),
    })
}

/// How the owner serves: bare libfabric, or our layer with a progress mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Serving {
    /// [`RawEndpoint`], spinning.
    Raw,
    /// [`Endpoint`] with this progress mode.
    Ours(ProgressMode),
}

/// The command line of one side of a two-process fabric run (`maestro-bench fabric-peer`,
/// hidden).
#[derive(Clone, Debug, clap::Args)]
pub struct PeerArgs {
    /// `owner` (serve a region) or `reader` (read an owner's region in a loop).
    #[arg(value_parser = ["owner", "reader"])]
    role: String,
    /// The provider (owner).
    #[arg(long, default_value = "tcp;ofi_rxm")]
    provider: String,
    /// Region size in bytes (owner).
    #[arg(long, default_value_t = 1 << 20)]
    size: usize,
    /// Serve with bare libfabric instead of our layer (owner).
    #[arg(long)]
    raw: bool,
    /// Progress mode of our layer (owner).
    #[arg(long, default_value = "block", value_parser = pool_tools::cli::parse_progress)]
    progress: ProgressMode,
    /// The owner's announcement, a JSON line (reader).
    #[arg(long)]
    owner: Option<String>,
    /// Reads to do; 0 = until an error (reader).
    #[arg(long, default_value_t = 1)]
    count: u64,
    /// The network interface to open on (owner; default loopback).
    #[arg(long)]
    iface: Option<String>,
    /// Keep the region in a memory file that processes of this host may map (owner).
    #[arg(long)]
    shareable: bool,
}

/// `maestro-bench fabric-peer`: serves as the owner or reads as the reader; exit code 1 on
/// failure.
pub fn main(args: PeerArgs) -> std::process::ExitCode {
    let serving = if args.raw {
        Serving::Raw
    } else {
        Serving::Ours(args.progress)
    };
    let result = match (args.role.as_str(), args.owner) {
        ("owner", _) => serve_owner(
            &args.provider,
            (args.size, args.shareable),
            serving,
            args.iface.as_deref(),
        ),
        (_, Some(line)) => match serde_json::from_str::<OwnerInfo>(&line) {
            Ok(info) => run_reader(&info, args.count),
            Err(e) => Err(PeerError::Protocol {
                line,
                reason: e.to_string(),
            }),
        },
        (_, None) => Err(PeerError::Protocol {
            line: String::new(),
            reason: "reader needs --owner JSON".into(),
        }),
    };
    pool_tools::cli::exit(&format!("fabric-peer {}", args.role), result, 1)
}

/// Runs the owner side on `iface` (loopback when `None`): announce on stdout, serve until
/// stdin closes. The region is `size` bytes, in a memory file if `shareable`.
///
/// # Errors
/// Fabric errors while setting up.
pub fn serve_owner(
    provider: &str,
    (size, shareable): (usize, bool),
    serving: Serving,
    iface: Option<&str>,
) -> Result<(), PeerError> {
    let offer = offer_on(provider, iface)?;
    let mut buf = if shareable {
        Buffer::shareable(size)?
    } else {
        Buffer::new(size)?
    };
    pattern::fill(buf.as_mut_slice(), SEED);
    let checksum = pattern::checksum(buf.as_slice());
    let (addr, file) = (buf.as_slice().as_ptr() as u64, buf.memory_file());
    let announce = |address: &Address, region: RemoteRegion| -> Result<(), PeerError> {
        let info = OwnerInfo {
            provider: offer.provider.clone(),
            address: address.clone(),
            region,
            checksum,
            pid: std::process::id(),
            addr,
            file,
        };
        let mut out = std::io::stdout().lock();
        writeln!(out, "{}", serde_json::to_string(&info).unwrap_or_default())?;
        out.flush()?;
        Ok(())
    };
    if let Serving::Ours(progress) = serving {
        let ep = Endpoint::open_with(&offer, progress)?;
        let mr = ep.register::<fabric::access::RemoteRead>(buf)?;
        announce(ep.address(), mr.remote())?;
        // The endpoint's progress thread serves; we wait for the parent to let go.
        let _ = std::io::stdin().read_to_end(&mut Vec::new());
    } else {
        let mut ep = RawEndpoint::open(&offer)?;
        let (_, region) = ep.register(buf)?;
        announce(&ep.address().clone(), region)?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        std::thread::spawn(move || {
            let _ = std::io::stdin().read_to_end(&mut Vec::new());
            flag.store(true, std::sync::atomic::Ordering::Relaxed);
        });
        ep.serve_spin(&stop);
    }
    Ok(())
}

/// A spawned owner process; killed and reaped on drop.
pub struct OwnerProcess {
    child: Child,
    /// Closed to tell it to end.
    stdin: Option<ChildStdin>,
    /// What it announced.
    pub info: OwnerInfo,
}

impl OwnerProcess {
    /// Starts `maestro-bench fabric-peer owner` where `remote` says and reads its announcement
    /// (within 30 s); its region is `size` bytes, in a memory file if `shareable`.
    ///
    /// # Errors
    /// Spawn failures; a peer that exits or announces garbage.
    pub fn spawn(
        provider: &str,
        (size, shareable): (usize, bool),
        serving: Serving,
        remote: &Remote,
    ) -> Result<OwnerProcess, PeerError> {
        let mut cmd = remote.command()?;
        cmd.args([
            "fabric-peer",
            "owner",
            "--provider",
            provider,
            "--size",
            &size.to_string(),
        ])
        .args(remote.args())
        .args(shareable.then_some("--shareable"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
        match serving {
            Serving::Raw => cmd.arg("--raw"),
            Serving::Ours(ProgressMode::Spin) => cmd.args(["--progress", "spin"]),
            Serving::Ours(ProgressMode::Block) => cmd.args(["--progress", "block"]),
        };
        let mut child = cmd.spawn()?;
        let stdin = child
            .stdin
            .take()
            .ok_or_else(|| std::io::Error::other("no stdin pipe"))?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| std::io::Error::other("no stdout pipe"))?;
        let line = read_line_within(stdout, Duration::from_secs(30));
        let parsed = line
            .as_deref()
            .map_err(|e| e.to_string())
            .and_then(|l| serde_json::from_str::<OwnerInfo>(l).map_err(|e| e.to_string()));
        match parsed {
            Ok(info) => Ok(OwnerProcess {
                child,
                stdin: Some(stdin),
                info,
            }),
            Err(reason) => {
                let _ = child.kill();
                let _ = child.wait();
                Err(PeerError::Protocol {
                    line: line.unwrap_or_default(),
                    reason,
                })
            }
        }
    }
}

impl Drop for OwnerProcess {
    fn drop(&mut self) {
        end_child(&mut self.child, self.stdin.take(), Duration::from_secs(5));
    }
}

/// Ends a benchmark's helper process and reaps it: closes its input (`stdin`), which tells
/// it to end by itself (removing its `shm` files, which a killed process leaves in
/// `/dev/shm`), and kills it only if it has not within `grace`.
pub fn end_child(child: &mut Child, stdin: Option<ChildStdin>, grace: Duration) {
    drop(stdin);
    let start = Instant::now();
    while start.elapsed() < grace {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// Reads one line from `out` in a helper thread, giving up after `limit`.
fn read_line_within(out: ChildStdout, limit: Duration) -> Result<String, std::io::Error> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let r = BufReader::new(out).read_line(&mut line).map(|_| line);
        let _ = tx.send(r);
    });
    match rx.recv_timeout(limit) {
        Ok(Ok(l)) if !l.is_empty() => Ok(l),
        Ok(Ok(_)) => Err(std::io::Error::other(
            "the peer exited before announcing itself",
        )),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(std::io::Error::other(format!(
            "no announcement from the peer within {limit:?}"
        ))),
    }
}

/// Reads the owner's whole region `count` times (0: until an error), verifying each read;
/// prints `read N ok` after each.
///
/// # Errors
/// The first failing read (peer gone, ...) or corruption.
pub fn run_reader(info: &OwnerInfo, count: u64) -> Result<(), PeerError> {
    let offer = loopback_offer(&info.provider)?;
    let mut ep = Endpoint::open(&offer)?;
    // Generous per-read deadlines (the slowest provider, udp;ofi_rxd, moves ~0.3 GB/s alone
    // and less when tests share the cores); a vanished owner is reported by the provider
    // itself on connection-based providers, long before this.
    ep.set_timeouts(fabric::Timeouts {
        base: Duration::from_secs(5),
        min_bandwidth: 20e6,
        ..fabric::Timeouts::default()
    });
    let peer = ep.insert_peer(&info.address)?;
    let len = usize::try_from(info.region.len).unwrap_or(usize::MAX);
    let mut dst: MemoryRegion = ep.register(Buffer::new(len)?)?;
    let mut n = 0u64;
    while count == 0 || n < count {
        let start = Instant::now();
        dst = ep
            .read(peer, dst, info.region)?
            .wait(Duration::from_secs(600))?;
        let got = pattern::checksum(dst.as_slice());
        if got != info.checksum {
            return Err(PeerError::Corrupt {
                len,
                got,
                expected: info.checksum,
            });
        }
        n += 1;
        println!(
            "read {n} ok: {len} bytes in {:?}, checksum {got:#x}",
            start.elapsed()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn remote(iface: Option<&str>, launcher: Option<&str>) -> Remote {
        Remote {
            iface: iface.map(str::to_string),
            launcher: launcher.map(str::to_string),
        }
    }

    #[test]
    fn a_launcher_needs_a_network_provider_and_an_interface() {
        assert_eq!(remote(None, None).check("shm"), Ok(()));
        let across = remote(Some("eth0"), Some("cluster.sh exec 2"));
        assert_eq!(across.check("tcp;ofi_rxm"), Ok(()));
        for (r, provider, says) in [
            (across.clone(), "shm", "network provider"),
            (remote(None, Some("cluster.sh exec 2")), "tcp", "--iface"),
            (remote(Some("eth0"), Some("  ")), "tcp", "empty"),
        ] {
            let why = r.check(provider).expect_err("refused");
            assert!(why.contains(says), "{why}");
        }
    }

    #[test]
    fn the_launcher_goes_in_front_of_this_executable() {
        let cmd = remote(Some("eth0"), Some("nsenter -t 42  -n"))
            .command()
            .expect("command");
        assert_eq!(cmd.get_program(), "nsenter");
        let args: Vec<_> = cmd.get_args().collect();
        assert_eq!(&args[..3], ["-t", "42", "-n"]);
        assert_eq!(
            args[3],
            std::env::current_exe().expect("exe").as_os_str(),
            "then this executable"
        );
        let here = remote(None, None).command().expect("command");
        assert_eq!(here.get_args().count(), 0);
        let on_eth0 = remote(Some("eth0"), None);
        let iface: Vec<_> = on_eth0.args().collect();
        assert_eq!(iface, ["--iface", "eth0"]);
    }
}
