//! The files of the CDOs the pool keeps after their producers left (see
//! [`pool_core::Manager::take_discarded`]): the PM's directory on the global file system,
//! `DIR/maestro-gfs-HOST_PID-RANDOM` (mode 0700; producers link their files into it at
//! withdraw), what goes when a kept CDO's lifetime ends, and what is left when the
//! workflow ends: nothing, except the files of CDOs marked `.maestro.core.cdo.persist`,
//! which move to `DIR/maestro-persist-WORKFLOW/NAME` (the CDO's name, `/` and other
//! characters outside `[A-Za-z0-9._-]` as `%XX`; `NAME.N` for a second CDO of a name),
//! each described beside it in `NAME.maestro.json` (name, size, checksum, provider,
//! attributes; a name whose escaped form would be too long for a file name is cut and
//! completed with its hash, the description still holding it whole). Nothing marked to
//! persist is ever deleted because it could not move there (the directory another user's,
//! a link, the file system full): it goes to a fresh private directory
//! `DIR/maestro-persist-WORKFLOW.RANDOM` instead, or stays in the PM's directory, which is
//! then left in place; the log says where, and the PM's end reports it (`maestro pm` exits
//! non-zero). The pool keeps and persists only files of its own user with one name (or the
//! producer's offered file's: see [`pool_core::KeptCheck`]); adopted files come from a
//! directory of the user's own reached through no link.
//!
//! Each kept file is described beside it once checked (`ID.maestro.json`, as a persisted
//! one), and the directory is marked as a pool manager's (`maestro-pool.json`: its
//! workflow). A PM killed before it could clean up leaves its directory to the next
//! manager of its workflow (`maestro pm --reclaim`, a standby: [`KeptDir::take_over`]),
//! which adopts every described file; the sweeps of the GFS directory (`maestro run`'s
//! janitor, the next client writing there) leave it for
//! [`crate::KEPT_FOR_TAKER`], then remove it.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use pool_core::{Adopted, KeptCheck, KeptFile, Manager};

/// The PM's directory of kept files.
#[derive(Debug)]
pub(super) struct KeptDir {
    /// The PM's own directory in the GFS directory.
    dir: PathBuf,
    /// Where persisted files go, and what went wrong with them.
    persisting: Arc<Persisting>,
    /// Removals (and moves) running on blocking threads: the end waits for them.
    pending: Vec<tokio::task::JoinHandle<()>>,
    /// Files adopted so far (names their links).
    adopted: u64,
}

/// Where files to persist go, shared by the blocking tasks that move them.
#[derive(Debug)]
struct Persisting {
    /// The GFS directory, as given.
    root: PathBuf,
    /// The workflow (names the directory of persisted files).
    workflow: String,
    /// What went wrong so far.
    trouble: Mutex<Trouble>,
}

/// Files to persist that could not go where they should: said at the end, which then
/// fails.
#[derive(Debug, Default)]
struct Trouble {
    /// Where each such file went instead, and why.
    said: Vec<String>,
    /// A file stayed in the PM's directory: the directory is left in place.
    stayed: bool,
    /// The fresh private directory chosen for files the usual one refused.
    fallback: Option<PathBuf>,
}

impl KeptDir {
    /// Creates the PM's directory in the GFS directory `root`.
    ///
    /// # Errors
    /// `root` is not an absolute path of a directory (the message says what to give); the
    /// directory cannot be created.
    pub(super) fn create(root: &Path, workflow: &str) -> std::io::Result<KeptDir> {
        if !root.is_absolute() || !root.is_dir() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!(
                    "the GFS directory {} is not an absolute path of a directory here: give one every node of the workflow sees (--gfs-dir, MSTRO_TRANSPORT_GFS_DIR)",
                    root.display()
                ),
            ));
        }
        let dir = crate::client::gfs_process_dir(root)?;
        let marker = serde_json::json!({ "workflow": workflow }).to_string();
        write_new(&dir.join(crate::client::POOL_MARKER), &marker)?;
        Ok(KeptDir {
            dir,
            persisting: Arc::new(Persisting {
                root: root.to_path_buf(),
                workflow: workflow.to_string(),
                trouble: Mutex::new(Trouble::default()),
            }),
            pending: Vec::new(),
            adopted: 0,
        })
    }

    /// The directory, as apps are told it.
    ///
    /// # Errors
    /// A path that is not UTF-8 (the protocol carries paths as text).
    pub(super) fn path(&self) -> std::io::Result<&str> {
        self.dir.to_str().ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("the GFS directory {:?} is not UTF-8", self.dir),
            )
        })
    }

    /// The files of kept CDOs whose end came: removed, or moved among the persisted ones.
    /// Only files of this directory are touched (the manager names no others; a path
    /// anywhere else is logged and left).
    pub(super) fn discard(&mut self, files: Vec<KeptFile>) {
        if files.is_empty() {
            return;
        }
        let (dir, persisting) = (self.dir.clone(), Arc::clone(&self.persisting));
        // Off the PM's thread: a parallel file system may take its time.
        self.pending.retain(|h| !h.is_finished());
        self.pending.push(tokio::task::spawn_blocking(move || {
            for f in files {
                persisting.settle(&dir, &f);
            }
        }));
    }

    /// Checks the files producers handed over (see [`KeptCheck`]) off the PM's thread and
    /// describes those that pass, and those adopted, beside them; `report` is called with
    /// each once done: `Ok` once described, `Err(why)` for one that is not one the pool
    /// keeps. A description that cannot be written is logged: the CDO is kept, and only a
    /// manager taking over would not adopt it.
    pub(super) fn check(
        &mut self,
        checks: Vec<KeptCheck>,
        report: impl Fn(pool_core::proto::CdoId, Result<(), String>) + Send + 'static,
    ) {
        if checks.is_empty() {
            return;
        }
        self.pending.retain(|h| !h.is_finished());
        self.pending.push(tokio::task::spawn_blocking(move || {
            for c in checks {
                let path = Path::new(&*c.path);
                if let Some(offered) = &c.offered
                    && let Err(why) = handed_over(path, Path::new(&**offered))
                {
                    report(c.id, Err(why));
                    continue;
                }
                if let Err(e) = write_new(&described(path), &c.description) {
                    tracing::warn!(
                        "describing kept file {}: {e} (a pool manager taking over would not adopt it)",
                        path.display()
                    );
                }
                report(c.id, Ok(()));
            }
        }));
    }

    /// The workflow ended: once the removals under way are done, the kept CDOs' files go
    /// (those to persist move), and the directory with them unless a file to persist had
    /// to stay in it.
    ///
    /// # Errors
    /// Where each file to persist went that could not go to the persisted files'
    /// directory (a fresh private directory, or the PM's own left in place), and why:
    /// nothing is lost, but the user must look.
    pub(super) async fn finish(mut self, files: Vec<KeptFile>) -> Result<(), String> {
        for h in std::mem::take(&mut self.pending) {
            let _ = h.await;
        }
        for f in &files {
            self.persisting.settle(&self.dir, f);
        }
        let trouble = std::mem::take(
            &mut *self
                .persisting
                .trouble
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        if trouble.stayed {
            tracing::error!(
                "the pool's directory {} is left in place: it holds CDOs that could not be persisted elsewhere",
                self.dir.display()
            );
        } else if let Err(e) = std::fs::remove_dir_all(&self.dir) {
            tracing::warn!("removing {}: {e}", self.dir.display());
        }
        if trouble.said.is_empty() {
            Ok(())
        } else {
            Err(trouble.said.join("; "))
        }
    }

    /// Has the pool offer again the CDOs an earlier workflow persisted in each of `dirs`
    /// (`DIR/maestro-persist-WORKFLOW`: each file with its `NAME.maestro.json`): each file
    /// of the user's own with one name, of the size its description says, is moved into
    /// this directory and offered as a kept CDO (its lifetime from now; persisted again
    /// at this workflow's end if it was marked to persist, as it was). What cannot be
    /// adopted is left where it is, and the log says why. Returns how many were adopted.
    pub(super) fn adopt(&mut self, manager: &mut Manager, dirs: &[PathBuf]) -> usize {
        let mut adopted = 0;
        for dir in dirs {
            adopted += self.adopt_from(manager, dir, From::Persisted);
            // Emptied: it goes (a directory still holding something stays).
            let _ = std::fs::remove_dir(dir);
        }
        adopted
    }

    /// Takes over the CDOs that pool managers of this workflow that are gone kept in the
    /// GFS directory (their directories of kept files, marked with the workflow, of this
    /// user, not of a live process of this host): each described file is moved into
    /// this directory and offered as a kept CDO, as [`KeptDir::adopt`] does (a file may
    /// have a second name still: its producer's, whose withdraw the next manager
    /// completes). Emptied, their directories go; what could not be adopted is left to
    /// the sweeps. Returns how many were adopted.
    pub(super) fn take_over(&mut self, manager: &mut Manager) -> usize {
        let mut adopted = 0;
        for dir in self.gone_managers() {
            let n = self.adopt_from(manager, &dir, From::Gone);
            tracing::info!(
                "took over {n} kept CDOs of the pool manager that is gone ({})",
                dir.display()
            );
            adopted += n;
            for left in [crate::client::POOL_MARKER, crate::client::ORPHANED] {
                let _ = std::fs::remove_file(dir.join(left));
            }
            if std::fs::remove_dir(&dir).is_err() {
                tracing::warn!(
                    "{} keeps what could not be adopted; the sweeps remove it",
                    dir.display()
                );
            }
        }
        adopted
    }

    /// The directories of kept files of this workflow's pool managers that are gone: in
    /// the GFS directory, marked (see [`crate::client::POOL_MARKER`]) with this
    /// workflow, not this one's, of a process of another host or one gone here.
    fn gone_managers(&self) -> Vec<PathBuf> {
        let root = &self.persisting.root;
        let Ok(entries) = std::fs::read_dir(root) else {
            return Vec::new();
        };
        let here = crate::client::gfs_host_prefix();
        let mut gone = Vec::new();
        for e in entries.flatten() {
            let (name, dir) = (e.file_name(), e.path());
            let Some(name) = name.to_str().filter(|n| n.starts_with("maestro-gfs-")) else {
                continue;
            };
            if dir == self.dir || !e.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            let marker = dir.join(crate::client::POOL_MARKER);
            let Ok(text) = safefs::read_own(&marker, 4096) else {
                continue;
            };
            let workflow = serde_json::from_str::<serde_json::Value>(&text)
                .ok()
                .and_then(|v| v["workflow"].as_str().map(str::to_string));
            if workflow.as_deref() != Some(&self.persisting.workflow) {
                continue;
            }
            let live_here = name
                .strip_prefix(&here)
                .and_then(|rest| rest.split('-').next())
                .and_then(|pid| pid.parse().ok())
                .is_some_and(crate::stale::process_alive);
            if live_here {
                tracing::warn!(
                    "not taking over {}: its pool manager runs still",
                    dir.display()
                );
                continue;
            }
            gone.push(dir);
        }
        gone
    }

    /// Adopts each described file of `dir` (see [`KeptDir::adopt`]): how many.
    fn adopt_from(&mut self, manager: &mut Manager, dir: &Path, from: From) -> usize {
        // The user's own directory, reached through no link: one planted in a shared
        // GFS directory (another user's, or a link to another workflow's files) is
        // refused, not followed.
        let own = match safefs::OwnDir::open(dir) {
            Ok(own) => own,
            Err(e) => {
                tracing::warn!("not adopting from {}: {e}", dir.display());
                return 0;
            }
        };
        let entries = match std::fs::read_dir(own.path()) {
            Ok(e) => e,
            Err(e) => {
                tracing::warn!("adopting from {}: {e}", dir.display());
                return 0;
            }
        };
        let mut adopted = 0;
        for e in entries.flatten() {
            let name = e.file_name();
            let Some(base) = name.to_str().and_then(|n| n.strip_suffix(".maestro.json")) else {
                continue;
            };
            let (description, data) = (own.path().join(&name), own.path().join(base));
            match self.adopt_one(manager, (&description, &data), from) {
                Ok(true) => adopted += 1,
                Ok(false) => {}
                Err(why) => {
                    tracing::warn!("not adopting {}: {why}", dir.join(base).display());
                }
            }
        }
        adopted
    }

    /// Adopts the file `data` as `description` says: true once adopted, false for a CDO
    /// whose home is another shard of the pool (left for that one).
    fn adopt_one(
        &mut self,
        manager: &mut Manager,
        (description, data): (&Path, &Path),
        from: From,
    ) -> Result<bool, String> {
        let text = safefs::read_own(description, 1 << 20).map_err(|e| e.to_string())?;
        let size = match from {
            // A regular file of the user's with one name: not a link, not a second name
            // of another file.
            From::Persisted => safefs::sole_own_file(data).map_err(|e| e.to_string())?,
            // Checked as it was kept; its producer's name may be there still.
            From::Gone => safefs::open_own(data, false)
                .map_err(|e| e.to_string())?
                .metadata()
                .map_err(|e| e.to_string())?,
        }
        .len();
        self.adopted += 1;
        let to = self.dir.join(format!("adopted-{}", self.adopted));
        let path = to
            .to_str()
            .ok_or("the pool's directory is not UTF-8")?
            .to_string();
        let file = Adopted::described(&text, path).map_err(|e| format!("its description: {e}"))?;
        if !manager.is_home(&file.name) {
            // Another shard of the pool adopts it.
            self.adopted -= 1;
            return Ok(false);
        }
        if file.len != size {
            return Err(format!(
                "it has {size} bytes, its description says {}",
                file.len
            ));
        }
        std::fs::hard_link(data, &to).map_err(|e| e.to_string())?;
        if let Err(why) = manager.adopt(std::time::Instant::now(), file) {
            let _ = std::fs::remove_file(&to);
            return Err(why.to_string());
        }
        for moved in [data, description] {
            if let Err(e) = std::fs::remove_file(moved) {
                tracing::warn!("removing {} once adopted: {e}", moved.display());
            }
        }
        Ok(true)
    }
}

/// Where an adopted file comes from.
#[derive(Clone, Copy, Debug)]
enum From {
    /// A directory of files an earlier workflow persisted.
    Persisted,
    /// The directory of kept files of a pool manager that is gone.
    Gone,
}

impl Persisting {
    /// Where persisted files go.
    fn persisted(&self) -> PathBuf {
        self.root
            .join(format!("maestro-persist-{}", escape(&self.workflow)))
    }

    /// Removes kept file `f` of `dir`, or moves it among the persisted files if it is to
    /// persist: where they go, else a fresh private directory, else it stays (see the
    /// module's rules).
    fn settle(&self, dir: &Path, f: &KeptFile) {
        let path = Path::new(&*f.path);
        if path.parent() != Some(dir) {
            tracing::warn!(
                "not touching {}: not a file of {}",
                path.display(),
                dir.display()
            );
            return;
        }
        remove(&described(path), &f.name);
        if !f.persist {
            return remove(path, &f.name);
        }
        let description = &f.description;
        // Only a file the pool made its own persists: a second name of another file
        // linked into the directory is dropped (the file it names is left alone).
        match safefs::sole_own_file(path) {
            Ok(_) => {}
            Err(safefs::Error::Io { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::warn!("not persisting CDO {}: {e}", f.name);
                return remove(path, &f.name);
            }
        }
        let usual = self.persisted();
        let why = match persist(path, &usual, (&f.name, description)) {
            Ok(to) => {
                tracing::info!("CDO {} persisted as {}", f.name, to.display());
                return;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !path.exists() => return,
            Err(e) => e,
        };
        let mut trouble = self
            .trouble
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let elsewhere = match &trouble.fallback {
            Some(d) => Ok(d.clone()),
            None => fresh_private(&usual).inspect(|d| trouble.fallback = Some(d.clone())),
        };
        let said = match elsewhere.and_then(|d| persist(path, &d, (&f.name, description))) {
            Ok(to) => format!(
                "CDO {} could not be persisted in {} ({why}): it is persisted as {}",
                f.name,
                usual.display(),
                to.display()
            ),
            Err(e) => {
                trouble.stayed = true;
                format!(
                    "CDO {} could not be persisted in {} ({why}) nor in a fresh directory beside it ({e}): it stays as {}",
                    f.name,
                    usual.display(),
                    path.display()
                )
            }
        };
        tracing::error!("{said}");
        trouble.said.push(said);
    }
}

/// Where kept file `path`'s description goes: `PATH.maestro.json`.
fn described(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_os_string();
    name.push(".maestro.json");
    PathBuf::from(name)
}

/// Writes `text` to a new file at `path` (mode 0600; nothing there is replaced).
fn write_new(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?
        .write_all(text.as_bytes())
}

/// Removes kept file `path` (of CDO `name`); one already gone is fine.
fn remove(path: &Path, name: &str) {
    if let Err(e) = std::fs::remove_file(path)
        && e.kind() != std::io::ErrorKind::NotFound
    {
        tracing::warn!("kept file {} of CDO {name}: {e}", path.display());
    }
}

/// A new private directory beside `usual` (`usual.RANDOM`, created exclusively with mode
/// 0700): where files go that `usual` refused.
fn fresh_private(usual: &Path) -> std::io::Result<PathBuf> {
    let mut last = None;
    for _ in 0..16 {
        let mut b = [0u8; 6];
        getrandom::fill(&mut b).map_err(|e| std::io::Error::other(e.to_string()))?;
        let mut name = usual.as_os_str().to_os_string();
        name.push(format!(".{}", hex::encode(b)));
        let dir = PathBuf::from(name);
        match safefs::new_private_dir(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) => last = Some(e),
        }
    }
    Err(last.map_or_else(
        || std::io::Error::other("no fresh directory"),
        safefs::Error::into_io,
    ))
}

/// Whether the file at `kept`, handed over by a producer whose offer named `offered`, is
/// one the pool keeps (see [`KeptCheck`]): a regular file of this user that is the
/// offered file itself (its only other name) or has one name.
///
/// # Errors
/// Why not, for the log and the CDO's end.
fn handed_over(kept: &Path, offered: &Path) -> Result<(), String> {
    let not_offered = || {
        format!(
            "{} has another name than the producer's file {}: not the file it offered",
            kept.display(),
            offered.display()
        )
    };
    // Twice at most: the producer's withdraw may complete (its name go) between the looks.
    for _ in 0..2 {
        let meta = match safefs::sole_own_file(kept) {
            Ok(_) => return Ok(()),
            Err(safefs::Error::Linked { links: 2, .. }) => std::fs::symlink_metadata(kept),
            Err(e) => return Err(e.to_string()),
        }
        .map_err(|e| e.to_string())?;
        match std::fs::symlink_metadata(offered) {
            Ok(o) if o.dev() == meta.dev() && o.ino() == meta.ino() => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            _ => return Err(not_offered()),
        }
    }
    Err(not_offered())
}

/// Moves `path` to `persisted/NAME` (`NAME.N` if taken; `persisted` made private, or
/// refused if it is a link or someone else's), with `description` beside it in
/// `NAME.maestro.json` (mode 0600): where it went.
fn persist(
    path: &Path,
    persisted: &Path,
    (name, description): (&str, &str),
) -> std::io::Result<PathBuf> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    // The user's own, 0700, never through a link: others sharing the GFS directory can
    // neither read the files nor have them moved elsewhere.
    safefs::private_dir(persisted).map_err(safefs::Error::into_io)?;
    let base = file_name(name);
    for n in 0..10_000u32 {
        let to = match n {
            0 => persisted.join(&base),
            n => persisted.join(format!("{base}.{n}")),
        };
        let mut described = to.clone().into_os_string();
        described.push(".maestro.json");
        // Created exclusively, as the hard link below: the first free name wins, and
        // nothing there is ever replaced.
        let sidecar = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&described);
        let mut sidecar = match sidecar {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        };
        match std::fs::hard_link(path, &to) {
            Ok(()) => {
                sidecar.write_all(description.as_bytes())?;
                std::fs::remove_file(path)?;
                return Ok(to);
            }
            Err(e) => {
                let _ = std::fs::remove_file(&described);
                if e.kind() != std::io::ErrorKind::AlreadyExists {
                    return Err(e);
                }
            }
        }
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::AlreadyExists,
        format!("10,000 files named {base} in {}", persisted.display()),
    ))
}

/// Most bytes of a persisted file's name before its suffixes (`.N`, `.maestro.json`):
/// well under the 255 file systems allow.
const MAX_FILE_NAME: usize = 200;

/// `name` as a persisted file's name: [`escape`]d, or when that is longer than
/// [`MAX_FILE_NAME`], its first 150 bytes, `~` and the name's XXH3-64 in hex (the file's
/// description holds the name whole).
fn file_name(name: &str) -> String {
    let escaped = escape(name);
    if escaped.len() <= MAX_FILE_NAME {
        return escaped;
    }
    // Cut before an escape it would split (escaped text is ASCII).
    let mut cut = 150;
    if let Some(p) = escaped[cut - 2..cut].find('%') {
        cut = cut - 2 + p;
    }
    format!(
        "{}~{:016x}",
        &escaped[..cut],
        pool_core::attr::checksum(name.as_bytes())
    )
}

/// `name` as a file name: `[A-Za-z0-9._-]` as is (a leading `.` too is escaped), every
/// other byte as `%XX`.
fn escape(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for (i, b) in name.bytes().enumerate() {
        let plain = b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || (b == b'.' && i > 0);
        if plain {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_become_file_names_that_say_them() {
        assert_eq!(escape("t2m/step-6"), "t2m%2Fstep-6");
        assert_eq!(escape(".."), "%2E.");
        assert_eq!(escape("a b"), "a%20b");
        assert_eq!(escape("Zürich"), "Z%C3%BCrich");
        assert_eq!(file_name("t2m/step-6"), "t2m%2Fstep-6");
        // Too long for a file name: cut, and told apart by the hash.
        for long in ["x".repeat(300), "/".repeat(100), "é".repeat(2048)] {
            let f = file_name(&long);
            assert!(f.len() <= 170, "{} bytes", f.len());
            let (kept, _) = f.split_once('~').expect("hashed");
            assert!(!kept.ends_with('%') && !kept.ends_with("%C"), "{f}");
            assert_ne!(f, file_name(&format!("{long}!")));
        }
    }

    #[test]
    fn a_kept_file_is_the_producers_offered_file_or_has_one_name() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (offered, kept, other) = (
            dir.path().join("offered"),
            dir.path().join("kept"),
            dir.path().join("other"),
        );
        std::fs::write(&offered, b"x").expect("offered");
        std::fs::write(&other, b"y").expect("other");
        // Linked at hand-over: the offered file's second name.
        std::fs::hard_link(&offered, &kept).expect("link");
        assert_eq!(handed_over(&kept, &offered), Ok(()));
        // The producer's name gone: one name left.
        std::fs::remove_file(&offered).expect("rm");
        assert_eq!(handed_over(&kept, &offered), Ok(()));
        // A second name of another file.
        std::fs::remove_file(&kept).expect("rm");
        std::fs::hard_link(&other, &kept).expect("link");
        std::fs::write(&offered, b"x").expect("offered");
        let why = handed_over(&kept, &offered).expect_err("not the offered file");
        assert!(
            why.contains("another name than the producer's file"),
            "{why}"
        );
    }

    #[test]
    fn files_go_or_persist_under_their_names_and_nothing_else_is_touched() {
        let root = tempfile::tempdir().expect("tempdir");
        let kept = KeptDir::create(root.path(), "wf/1").expect("kept dir");
        let file = |id: u32, name: &str, persist: bool| {
            let p = kept.dir.join(id.to_string());
            std::fs::write(&p, name).expect("file");
            // Described as it was kept.
            std::fs::write(described(&p), "{}").expect("description");
            KeptFile {
                path: p.to_str().expect("utf-8").into(),
                name: name.into(),
                description: format!("{{\"id\": {id}}}").into(),
                persist,
            }
        };
        let elsewhere = root.path().join("other");
        std::fs::write(&elsewhere, b"x").expect("file");
        let files = vec![
            file(1, "t2m/0", false),
            file(2, "t2m/0", true),
            file(3, "t2m/0", true),
            KeptFile {
                path: elsewhere.to_str().expect("utf-8").into(),
                name: "x".into(),
                description: "{}".into(),
                persist: false,
            },
        ];
        let persisted = root.path().join("maestro-persist-wf%2F1");
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime")
            .block_on(kept.finish(files))
            .expect("nothing stayed");
        assert!(elsewhere.exists(), "a file outside the directory is left");
        let mut names: Vec<String> = std::fs::read_dir(&persisted)
            .expect("persisted")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(
            names,
            [
                "t2m%2F0",
                "t2m%2F0.1",
                "t2m%2F0.1.maestro.json",
                "t2m%2F0.maestro.json"
            ]
        );
        let described = std::fs::read_to_string(persisted.join("t2m%2F0.1.maestro.json"));
        assert_eq!(described.expect("description"), r#"{"id": 3}"#);
        let mut left: Vec<String> = std::fs::read_dir(root.path())
            .expect("root")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(
            left,
            ["maestro-persist-wf%2F1", "other"],
            "the PM's directory is gone"
        );
    }

    #[test]
    fn the_next_manager_adopts_what_a_gone_one_of_its_workflow_described() {
        let root = tempfile::tempdir().expect("tempdir");
        let clock = pool_core::Clock {
            origin: std::time::Instant::now(),
            origin_unix_ns: 0,
        };
        let mut manager = Manager::new("wf", b"s", 1, clock);
        let mut kept = KeptDir::create(root.path(), "wf").expect("kept dir");
        manager.set_keep_dir(Some(kept.path().expect("utf-8")));
        // Kept directories of managers that are gone: one of this workflow with a
        // described file and a file never described, one of another workflow.
        let dead = u32::MAX - 1;
        let host = crate::client::gfs_host_prefix();
        let gone = |tag: &str, workflow: &str| {
            let d = root.path().join(format!("{host}{dead}-{tag}"));
            std::fs::create_dir(&d).expect("mkdir");
            let marker = serde_json::json!({ "workflow": workflow }).to_string();
            std::fs::write(d.join(crate::client::POOL_MARKER), marker).expect("marker");
            std::fs::write(d.join("7"), b"123456789").expect("file");
            let description = serde_json::json!({
                "name": "field", "size": 9, "checksum": 42, "provider": "producer:0",
                "attributes": {}, "typed": {}
            });
            std::fs::write(described(&d.join("7")), description.to_string()).expect("json");
            d
        };
        let (ours, theirs) = (gone("aa", "wf"), gone("bb", "other"));
        std::fs::write(ours.join("8"), b"never described").expect("file");
        // The producer's name of the file is there still: it is adopted all the same.
        std::fs::hard_link(ours.join("7"), root.path().join("producers")).expect("link");
        assert_eq!(kept.take_over(&mut manager), 1);
        let files = manager.kept_files();
        assert!(
            matches!(&files[..], [f] if &*f.name == "field" && f.path.starts_with(kept.path().expect("utf-8"))),
            "{files:?}"
        );
        let left: Vec<_> = std::fs::read_dir(&ours)
            .expect("left")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(
            left,
            ["8"],
            "what could not be adopted stays for the sweeps"
        );
        assert!(
            theirs.join("7").exists(),
            "another workflow's are left alone"
        );
        // Adopted, it is described anew in this manager's directory.
        let checks = manager.take_kept_checks();
        assert!(
            matches!(&checks[..], [c] if c.offered.is_none()),
            "{checks:?}"
        );
    }
}
