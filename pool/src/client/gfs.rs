//! The global-file-system transport on the client's side (Maestro's `GFS`): a producer
//! writes an offered CDO's bytes whole to a file of its own under a directory every
//! consumer sees (`MSTRO_TRANSPORT_GFS_DIR`, a parallel file system across nodes), and
//! names the file in its offer; consumers read the file ([`pool_core::proto::Source::Gfs`]).
//!
//! Each client writes into a directory of its own, `DIR/maestro-gfs-HOST_PID-RANDOM` (mode
//! 0700, created exclusively: nobody else's CDO can collide), one file per CDO named by its id,
//! written to a temporary name, flushed and renamed before the offer names it (mode 0600,
//! or 0640 with [`GfsOptions::group_readable`]). The file goes at the offer's withdraw,
//! and the directory with whatever is left when the client is dropped; the directories of
//! this host's clients that were killed are swept by the next client that writes there and
//! by `maestro run`'s janitor ([`sweep`]; the host in the name keeps a process of the same
//! id on another node sharing the directory safe). A consumer reads
//! only regular files of its own user under its own GFS directory, never through a link,
//! of exactly the size and checksum the ticket says: a ticket naming anything else is an
//! error.
//!
//! A CDO may choose the file system for itself ([`crate::attr::TRANSPORT`]). A withdrawn
//! offer's file is handed over to a PM that keeps such files (linked into its directory:
//! the kept CDOs of `pool_core`'s manager), and an app may discard what the pool keeps
//! under a name ([`super::AsyncClient::discard`]).

use std::io::{Read, Write};
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use fabric::Buffer;

use super::data::CdoData;
use super::{ClientError, Result, answer};
use crate::attr::Attributes;
use crate::proto::{CdoId, GfsFile, Op};
use pool_core::client::{Route, Transport};

/// Where and how an app uses the global file system.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GfsOptions {
    /// The directory every process of the workflow sees (`MSTRO_TRANSPORT_GFS_DIR`).
    pub dir: PathBuf,
    /// Offer through it (`MSTRO_TRANSPORT_DEFAULT=GFS`); else it is only read from.
    pub offer: bool,
    /// Make the files readable by the group (for consumers running as other users of the
    /// group); else only this user reads them.
    pub group_readable: bool,
}

/// The prefix of this host's client directories in a GFS directory (`_` ends the host:
/// host names never hold one).
pub(crate) fn host_prefix() -> String {
    format!("maestro-gfs-{}_", inventory::local_hostname())
}

/// The file that marks a pool manager's directory of kept files (JSON: its workflow):
/// what a pool manager taking over looks for.
pub(crate) const POOL_MARKER: &str = "maestro-pool.json";

/// Written into the directory of kept files of a pool manager found gone: when.
pub(crate) const ORPHANED: &str = "maestro-orphaned";

/// How long the directory of kept files of a pool manager that is gone stays for a pool
/// manager taking over its workflow (`maestro pm --reclaim`, a standby), counted from the
/// first sweep that found it gone: 10 minutes, well past the apps' wait for the next
/// manager (`MSTRO_PM_RECLAIM_TIMEOUT`, 30 s by default).
pub const KEPT_FOR_TAKER: std::time::Duration = std::time::Duration::from_secs(600);

/// What a sweep ([`sweep`]) does with the directory of kept files of a pool manager that
/// is gone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeptOfGone {
    /// Left for the next manager of its workflow (`maestro pm --reclaim`, a standby) for
    /// [`KEPT_FOR_TAKER`] from the first sweep that found it gone: what a client and a
    /// standalone `maestro pm`'s janitor do.
    LeftForTaker,
    /// Removed: its workflow is over (the janitor of a `maestro run` that was killed with
    /// its ranks, the pool manager among them).
    Removed,
}

/// Removes from the GFS directory `dir` the directories of this host's clients whose
/// process is gone (killed before they could remove them); a pool manager's directory of
/// kept files as `kept` says. Errors are ignored.
pub fn sweep(dir: &Path, kept: KeptOfGone) {
    for gone in crate::stale::dead_process_dirs(dir, &host_prefix()) {
        if kept == KeptOfGone::Removed || !left_for_taker(&gone) {
            tracing::debug!("removing {}", gone.display());
            let _ = std::fs::remove_dir_all(gone);
        }
    }
}

/// Whether `dir`, of a process that is gone, is a pool manager's directory of kept files
/// still left for the next manager ([`KeptOfGone::LeftForTaker`]); the first time it is
/// asked, the window starts.
fn left_for_taker(dir: &Path) -> bool {
    if !dir.join(POOL_MARKER).is_file() {
        return false;
    }
    let stamp = dir.join(ORPHANED);
    match std::fs::symlink_metadata(&stamp) {
        Ok(m) => m
            .modified()
            .ok()
            .and_then(|at| at.elapsed().ok())
            .is_some_and(|since| since < KEPT_FOR_TAKER),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            tracing::info!(
                "{}: kept CDOs of a pool manager that is gone, left for the next one for {} s",
                dir.display(),
                KEPT_FOR_TAKER.as_secs()
            );
            // Exclusive: nothing already there (a link, say) is opened or followed.
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&stamp)
                .is_ok()
        }
        Err(_) => false,
    }
}

/// Creates a directory of this process in the GFS directory `root`,
/// `root/maestro-gfs-HOST_PID-RANDOM` (mode 0700, created exclusively: nobody else's files
/// can collide; [`sweep`] removes it once this process is gone), after sweeping those of
/// this host's dead processes.
///
/// # Errors
/// No randomness for the name; the directory cannot be created (or something is there).
pub(crate) fn process_dir(root: &Path) -> std::io::Result<PathBuf> {
    let mut token = [0u8; 8];
    getrandom::fill(&mut token)
        .map_err(|e| std::io::Error::other(format!("no randomness for a file name: {e}")))?;
    let dir = root.join(format!(
        "{}{}-{}",
        host_prefix(),
        std::process::id(),
        hex::encode(token)
    ));
    sweep(root, KeptOfGone::LeftForTaker);
    safefs::new_private_dir(&dir).map_err(safefs::Error::into_io)?;
    Ok(dir)
}

/// This client's files on the global file system.
pub(crate) struct Gfs {
    /// The shared directory, as given.
    root: PathBuf,
    /// This client's directory in it, once it offered through it.
    mine: std::sync::OnceLock<PathBuf>,
    offer: bool,
    mode: u32,
    /// The CDOs whose files are in it now (a withdraw of any other has nothing to hand
    /// over, and need not look).
    written: std::sync::Mutex<std::collections::HashSet<CdoId>>,
}

/// Why `dir` is worth a warning as a GFS directory: another user's private directory
/// (root can write there, nobody else of the workflow can read what it writes).
fn others_private(dir: &Path) -> Option<String> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let meta = std::fs::metadata(dir).ok()?;
    let mode = meta.permissions().mode();
    (meta.uid() != safefs::euid() && mode & 0o007 == 0).then(|| {
        format!(
            "the GFS directory {} is a private directory of uid {} (mode {:o}): this process (uid {}) writes there only because it may, and the workflow's processes of that user cannot read its files; give a directory of the workflow's user (MSTRO_TRANSPORT_GFS_DIR)",
            dir.display(),
            meta.uid(),
            mode & 0o7777,
            safefs::euid()
        )
    })
}

impl Gfs {
    pub(crate) fn new(o: &GfsOptions) -> Result<Gfs> {
        if !o.dir.is_absolute() {
            return Err(ClientError::Gfs(format!(
                "the GFS directory {} is not an absolute path: give MSTRO_TRANSPORT_GFS_DIR as one",
                o.dir.display()
            )));
        }
        if !o.dir.is_dir() {
            return Err(ClientError::Gfs(format!(
                "the GFS directory {} is no directory here: create it, on a file system every node of the workflow sees",
                o.dir.display()
            )));
        }
        if let Some(why) = others_private(&o.dir) {
            tracing::warn!("{why}");
        }
        Ok(Gfs {
            root: o.dir.clone(),
            mine: std::sync::OnceLock::new(),
            offer: o.offer,
            mode: if o.group_readable { 0o640 } else { 0o600 },
            written: std::sync::Mutex::default(),
        })
    }

    /// The GFS directory, as given.
    pub(crate) fn root(&self) -> &Path {
        &self.root
    }

    /// Whether offers go through the file system.
    pub(crate) fn offers(&self) -> bool {
        self.offer
    }

    /// This client's directory, created on first use.
    fn mine(&self) -> Result<&Path> {
        if let Some(p) = self.mine.get() {
            return Ok(p);
        }
        let dir = process_dir(&self.root).map_err(|e| ClientError::Gfs(e.to_string()))?;
        if self.mode & 0o040 != 0 {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o750))?;
        }
        Ok(self.mine.get_or_init(|| dir))
    }

    /// Writes `bytes`, CDO `cdo`'s, whole to its file (a temporary name first, flushed to
    /// the file system, then renamed): the file's path, with the bytes' checksum.
    pub(crate) fn write(&self, cdo: CdoId, bytes: &[u8]) -> Result<GfsFile> {
        let dir = self.mine()?;
        let (tmp, path) = (dir.join(format!("{cdo}.tmp")), dir.join(cdo.to_string()));
        let mut f = safefs::create_or_open_own(&tmp, self.mode)
            .map_err(|e| ClientError::Gfs(e.to_string()))?;
        f.set_len(0)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, &path)?;
        let path = path
            .into_os_string()
            .into_string()
            .map_err(|p| ClientError::Gfs(format!("the GFS path {p:?} is not UTF-8")))?;
        self.written().insert(cdo);
        Ok(GfsFile {
            path: path.into(),
            checksum: crate::attr::checksum(bytes),
        })
    }

    /// The CDOs whose files are in this client's directory.
    fn written(&self) -> std::sync::MutexGuard<'_, std::collections::HashSet<CdoId>> {
        self.written
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Removes CDO `cdo`'s file (its offer was withdrawn).
    pub(crate) fn remove(&self, cdo: CdoId) {
        if !self.written().remove(&cdo) {
            return;
        }
        if let Some(dir) = self.mine.get()
            && let Err(e) = std::fs::remove_file(dir.join(cdo.to_string()))
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!("removing the GFS file of CDO {cdo}: {e}");
        }
    }

    /// Links CDO `cdo`'s file into the PM's directory of kept files `keep` (see
    /// [`pool_core::proto::ToPm::Withdraw`]): the path the pool offers it under from now on.
    /// `None` when this client wrote no file for it.
    ///
    /// # Errors
    /// [`ClientError::Gfs`] for a directory outside this client's GFS directory or a file
    /// the file system does not link (another file system, no permission).
    pub(crate) fn hand_over(&self, cdo: CdoId, keep: &str) -> Result<Option<String>> {
        let Some(dir) = self.mine.get() else {
            return Ok(None);
        };
        let keep = Path::new(keep);
        if !self.inside(keep) {
            return Err(ClientError::Gfs(format!(
                "the pool manager keeps files in {}, not under this app's GFS directory {}: give every process of the workflow, and the PM, the same MSTRO_TRANSPORT_GFS_DIR",
                keep.display(),
                self.root.display()
            )));
        }
        let (from, to) = (dir.join(cdo.to_string()), keep.join(cdo.to_string()));
        match std::fs::hard_link(&from, &to) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !from.exists() => {
                return Ok(None);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                // Left by a hand-over the PM refused: this one replaces it.
                std::fs::remove_file(&to)?;
                std::fs::hard_link(&from, &to)?;
            }
            Err(e) => {
                return Err(ClientError::Gfs(format!(
                    "linking {} into the pool's directory {}: {e}",
                    from.display(),
                    keep.display()
                )));
            }
        }
        to.into_os_string()
            .into_string()
            .map(Some)
            .map_err(|p| ClientError::Gfs(format!("the GFS path {p:?} is not UTF-8")))
    }

    /// Whether `p` is under this client's GFS directory, without `..`.
    fn inside(&self, p: &Path) -> bool {
        p.starts_with(&self.root)
            && p.components()
                .all(|c| matches!(c, Component::RootDir | Component::Normal(_)))
    }

    /// Reads the `len` bytes of the file a ticket names (into `lent` if given and large
    /// enough) and checks them by its checksum.
    ///
    /// # Errors
    /// [`ClientError::Gfs`] for a path outside this client's GFS directory, with `..`, of
    /// a link or another user's file, of another size or other bytes; IO errors.
    pub(crate) fn read(&self, file: &GfsFile, len: usize, lent: Option<Buffer>) -> Result<CdoData> {
        let path = &*file.path;
        let p = Path::new(path);
        if !self.inside(p) {
            return Err(ClientError::Gfs(format!(
                "a ticket names the file {path}, not under this app's GFS directory {}: give every process of the workflow the same MSTRO_TRANSPORT_GFS_DIR",
                self.root.display()
            )));
        }
        let mut f = safefs::open_own(p, false).map_err(|e| ClientError::Gfs(e.to_string()))?;
        let size = f.metadata()?.len();
        if size != len as u64 {
            return Err(ClientError::Gfs(format!(
                "the file {path} has {size} bytes, the CDO {len}: it was changed after its offer"
            )));
        }
        let mut buf = match lent {
            Some(b) if b.len() >= len => b,
            _ => Buffer::new(len)?,
        };
        f.read_exact(&mut buf.as_mut_slice()[..len])?;
        if crate::attr::checksum(&buf.as_slice()[..len]) != file.checksum {
            return Err(ClientError::Gfs(format!(
                "the file {path} does not hold the bytes offered (their checksum differs): it was changed after its offer"
            )));
        }
        Ok(CdoData::own(buf, len))
    }
}

impl Drop for Gfs {
    fn drop(&mut self) {
        if let Some(dir) = self.mine.get()
            && let Err(e) = std::fs::remove_dir_all(dir)
        {
            tracing::warn!("removing the GFS directory {}: {e}", dir.display());
        }
    }
}

/// What an app does with the global file system through its client: choosing it per
/// CDO, handing offers over to a PM that keeps them, discarding kept CDOs.
impl super::AsyncClient {
    /// The global file system an offer of `cdo` goes through, if it does (as the core
    /// decides: [`pool_core::client::ClientCore::transport`]).
    ///
    /// # Errors
    /// [`ClientError::Gfs`] for a CDO asking for the global file system in an app that has
    /// no GFS directory; [`CallError::Attribute`](crate::CallError::Attribute) for a transport that is none.
    pub(super) fn gfs_for(
        &self,
        cdo: CdoId,
        seal: Option<&Attributes>,
    ) -> Result<Option<Arc<Gfs>>> {
        let transport = self.shared.core().transport(cdo, seal)?;
        Ok(self.gfs_of(transport))
    }

    /// The global file system, for an offer whose bytes go by `transport`.
    pub(super) fn gfs_of(&self, transport: Transport) -> Option<Arc<Gfs>> {
        match transport {
            Transport::Gfs => self.shared.gfs.clone(),
            Transport::Fabric => None,
        }
    }

    /// Ends the CDOs the pool keeps under `name` (offers their producers handed over at
    /// withdraw; see [`super::JoinOptions::gfs`]): consumers can no longer demand them, and their
    /// files go once no transfer reads them. Returns how many there were (0 is no error:
    /// none, or their lifetime ended already).
    ///
    /// # Errors
    /// `NotAllowed` (refused) when another component owns the name (`maestro pm
    /// --owner`); `BadName`; connection errors.
    pub async fn discard(&self, name: &str) -> Result<u64> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let now = Instant::now();
        let (shard, (local, call)) = self.shared.with_core(|c| {
            let discard = c.discard(now, name, tx)?;
            Ok((c.shard_of(Route::Name(name)), discard))
        })?;
        answer(&self.shared, (Op::Discard, local), Some((shard, call)), rx).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gfs(dir: &Path, offer: bool) -> Gfs {
        Gfs::new(&GfsOptions {
            dir: dir.to_path_buf(),
            offer,
            group_readable: false,
        })
        .expect("gfs")
    }

    #[test]
    fn another_users_private_directory_is_told() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert_eq!(others_private(dir.path()), None, "the user's own");
        // As root, a directory of another uid with no access for others.
        if safefs::euid() == 0 {
            use std::os::unix::fs::PermissionsExt;
            let theirs = dir.path().join("theirs");
            std::fs::create_dir(&theirs).expect("mkdir");
            std::os::unix::fs::chown(&theirs, Some(4242), None).expect("chown");
            std::fs::set_permissions(&theirs, std::fs::Permissions::from_mode(0o700))
                .expect("chmod");
            let why = others_private(&theirs).expect("told");
            assert!(why.contains("private directory of uid 4242"), "{why}");
        }
    }

    #[test]
    fn a_file_is_written_whole_read_back_checked_and_removed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let producer = gfs(dir.path(), true);
        let file = producer.write(7, b"seven bytes").expect("write");
        let path = file.path.to_string();
        assert!(path.starts_with(&*dir.path().to_string_lossy()), "{path}");
        assert!(path.ends_with("/7"), "{path}");
        assert_eq!(file.checksum, crate::attr::checksum(b"seven bytes"));
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).expect("file").permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let consumer = gfs(dir.path(), false);
        let data = consumer.read(&file, 11, None).expect("read");
        assert_eq!(data.as_slice(), b"seven bytes");
        let wrong = consumer.read(&file, 12, None).expect_err("size");
        assert!(
            wrong.to_string().contains("has 11 bytes, the CDO 12"),
            "{wrong}"
        );
        // Other bytes of the same size: told apart by the checksum.
        std::fs::write(&path, b"eight bytes").expect("rewrite");
        let changed = consumer.read(&file, 11, None).expect_err("changed");
        assert!(
            changed.to_string().contains("changed after its offer"),
            "{changed}"
        );
        for outside in ["/etc/passwd", &format!("{}/../x", dir.path().display())] {
            let elsewhere = GfsFile {
                path: outside.into(),
                checksum: 0,
            };
            let e = consumer.read(&elsewhere, 1, None).expect_err("outside");
            assert!(
                e.to_string().contains("not under this app's GFS directory"),
                "{e}"
            );
        }
        producer.remove(7);
        assert!(!Path::new(&path).exists());
        let again = producer.write(8, b"x").expect("write");
        drop(producer);
        assert!(
            !Path::new(&*again.path).exists(),
            "the client's directory goes with it"
        );
        assert_eq!(std::fs::read_dir(dir.path()).expect("dir").count(), 0);
    }

    #[test]
    fn directories_of_this_hosts_dead_clients_are_swept_and_no_others() {
        let dir = tempfile::tempdir().expect("tempdir");
        let dead = dir
            .path()
            .join(format!("{}{}-00", host_prefix(), u32::MAX - 1));
        let elsewhere = dir
            .path()
            .join(format!("maestro-gfs-another-host_{}-00", u32::MAX - 1));
        for d in [&dead, &elsewhere] {
            std::fs::create_dir(d).expect("dir");
            std::fs::write(d.join("1"), b"x").expect("file");
        }
        let producer = gfs(dir.path(), true);
        let path = producer.write(1, b"y").expect("write");
        assert!(
            !dead.exists(),
            "a dead client's directory of this host is swept"
        );
        assert!(elsewhere.exists(), "another host's is not ours to judge");
        assert!(
            Path::new(&*path.path).exists(),
            "and this client's own stays"
        );
    }

    #[test]
    fn a_bad_directory_is_refused_saying_what_to_give() {
        for (dir, says) in [
            ("relative/dir", "not an absolute path"),
            ("/nonexistent/gfs", "no directory here"),
        ] {
            let e = Gfs::new(&GfsOptions {
                dir: dir.into(),
                offer: true,
                group_readable: false,
            })
            .err()
            .expect("refused");
            assert!(e.to_string().contains(says), "{e}");
        }
    }

    #[test]
    fn a_gone_managers_kept_files_stay_for_the_next_one_for_a_while() {
        let root = tempfile::tempdir().expect("tempdir");
        let dead = u32::MAX - 1;
        let (client, pm) = (
            root.path().join(format!("{}{dead}-aa", host_prefix())),
            root.path().join(format!("{}{dead}-bb", host_prefix())),
        );
        for d in [&client, &pm] {
            std::fs::create_dir(d).expect("mkdir");
        }
        std::fs::write(pm.join(POOL_MARKER), "{}").expect("marker");
        sweep(root.path(), KeptOfGone::LeftForTaker);
        assert!(!client.exists(), "a client's directory goes");
        assert!(pm.join(ORPHANED).exists(), "the window starts");
        sweep(root.path(), KeptOfGone::LeftForTaker);
        assert!(pm.exists(), "within the window it stays");
        let long_ago = std::time::SystemTime::now() - KEPT_FOR_TAKER;
        std::fs::File::options()
            .write(true)
            .open(pm.join(ORPHANED))
            .and_then(|f| f.set_modified(long_ago))
            .expect("age the stamp");
        sweep(root.path(), KeptOfGone::LeftForTaker);
        assert!(!pm.exists(), "past it, it goes");
        // A workflow that is over keeps nothing for a taker.
        std::fs::create_dir(&pm).expect("mkdir");
        std::fs::write(pm.join(POOL_MARKER), "{}").expect("marker");
        sweep(root.path(), KeptOfGone::Removed);
        assert!(!pm.exists(), "removed at once");
    }
}
