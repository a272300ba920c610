//! The files of the CDOs the pool keeps after their producers left (see
//! [`pool_core::Manager::take_discarded`]): the PM's directory on the global file system,
//! `DIR/maestro-gfs-HOST_PID-RANDOM` (mode 0700; producers link their files into it at
//! withdraw), what goes when a kept CDO's lifetime ends, and what is left when the
//! workflow ends: nothing, except the files of CDOs marked `.maestro.core.cdo.persist`,
//! which move to `DIR/maestro-persist-WORKFLOW/NAME` (the CDO's name, `/` and other
//! characters outside `[A-Za-z0-9._-]` as `%XX`; `NAME.N` for a second CDO of a name),
//! each described beside it in `NAME.maestro.json` (name, size, checksum, provider,
//! attributes). A
//! PM killed before it could clean up leaves its directory to the next process that sweeps
//! the GFS directory (`maestro run`'s janitor, the next client writing there).

use std::path::{Path, PathBuf};

use pool_core::{Adopted, KeptFile, Manager};

/// The PM's directory of kept files.
#[derive(Debug)]
pub(super) struct KeptDir {
    /// The GFS directory, as given.
    root: PathBuf,
    /// The PM's own directory in it.
    dir: PathBuf,
    /// The workflow (names the directory of persisted files).
    workflow: String,
    /// Removals (and moves) running on blocking threads: the end waits for them.
    pending: Vec<tokio::task::JoinHandle<()>>,
    /// Files adopted so far (names their links).
    adopted: u64,
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
        Ok(KeptDir {
            root: root.to_path_buf(),
            dir,
            workflow: workflow.to_string(),
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
        let (dir, persisted) = (self.dir.clone(), self.persisted());
        // Off the PM's thread: a parallel file system may take its time.
        self.pending.retain(|h| !h.is_finished());
        self.pending.push(tokio::task::spawn_blocking(move || {
            for f in files {
                settle(&dir, &persisted, &f);
            }
        }));
    }

    /// The workflow ended: once the removals under way are done, the kept CDOs' files go
    /// (those to persist move), and the directory with them.
    pub(super) async fn finish(mut self, files: Vec<KeptFile>) {
        for h in std::mem::take(&mut self.pending) {
            let _ = h.await;
        }
        let persisted = self.persisted();
        for f in &files {
            settle(&self.dir, &persisted, f);
        }
        if let Err(e) = std::fs::remove_dir_all(&self.dir) {
            tracing::warn!("removing {}: {e}", self.dir.display());
        }
    }

    /// Has the pool offer again the CDOs an earlier workflow persisted in each of `dirs`
    /// (`DIR/maestro-persist-WORKFLOW`: each file with its `NAME.maestro.json`): each file
    /// of the user's own, of the size its description says, is moved into this directory
    /// and offered as a kept CDO (its lifetime from now; persisted again at this
    /// workflow's end if it was marked to persist, as it was). What cannot be adopted is
    /// left where it is, and the log says why. Returns how many were adopted.
    pub(super) fn adopt(&mut self, manager: &mut Manager, dirs: &[PathBuf]) -> usize {
        let mut adopted = 0;
        for dir in dirs {
            let entries = match std::fs::read_dir(dir) {
                Ok(e) => e,
                Err(e) => {
                    tracing::warn!("adopting from {}: {e}", dir.display());
                    continue;
                }
            };
            for e in entries.flatten() {
                let described = e.path();
                let Some(data) = described
                    .to_str()
                    .and_then(|p| p.strip_suffix(".maestro.json"))
                    .map(PathBuf::from)
                else {
                    continue;
                };
                match self.adopt_one(manager, &described, &data) {
                    Ok(()) => adopted += 1,
                    Err(why) => tracing::warn!("not adopting {}: {why}", data.display()),
                }
            }
            // Emptied: it goes (a directory still holding something stays).
            let _ = std::fs::remove_dir(dir);
        }
        adopted
    }

    /// Adopts the file `data` as `described` says.
    fn adopt_one(
        &mut self,
        manager: &mut Manager,
        described: &Path,
        data: &Path,
    ) -> Result<(), String> {
        let text = safefs::read_own(described, 1 << 20).map_err(|e| e.to_string())?;
        let size = safefs::open_own(data, false)
            .map_err(|e| e.to_string())?
            .metadata()
            .map_err(|e| e.to_string())?
            .len();
        self.adopted += 1;
        let to = self.dir.join(format!("adopted-{}", self.adopted));
        let path = to
            .to_str()
            .ok_or("the pool's directory is not UTF-8")?
            .to_string();
        let file = Adopted::described(&text, path).map_err(|e| format!("its description: {e}"))?;
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
        for moved in [data, described] {
            if let Err(e) = std::fs::remove_file(moved) {
                tracing::warn!("removing {} once adopted: {e}", moved.display());
            }
        }
        Ok(())
    }

    /// Where persisted files go.
    fn persisted(&self) -> PathBuf {
        self.root
            .join(format!("maestro-persist-{}", escape(&self.workflow)))
    }
}

/// Removes kept file `f` of `dir`, or moves it into `persisted` if it is to persist.
fn settle(dir: &Path, persisted: &Path, f: &KeptFile) {
    let path = Path::new(&*f.path);
    if path.parent() != Some(dir) {
        tracing::warn!(
            "not touching {}: not a file of {}",
            path.display(),
            dir.display()
        );
        return;
    }
    let done = match &f.persist {
        Some(description) => persist(path, persisted, (&f.name, description)).map(|to| {
            tracing::info!("CDO {} persisted as {}", f.name, to.display());
        }),
        None => std::fs::remove_file(path),
    };
    if let Err(e) = done.or_else(|e| match e.kind() {
        std::io::ErrorKind::NotFound => Ok(()),
        _ => Err(e),
    }) {
        tracing::warn!("kept file {} of CDO {}: {e}", path.display(), f.name);
    }
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
    let base = escape(name);
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
    }

    #[test]
    fn files_go_or_persist_under_their_names_and_nothing_else_is_touched() {
        let root = tempfile::tempdir().expect("tempdir");
        let kept = KeptDir::create(root.path(), "wf/1").expect("kept dir");
        let file = |id: u32, name: &str, persist: bool| {
            let p = kept.dir.join(id.to_string());
            std::fs::write(&p, name).expect("file");
            KeptFile {
                path: p.to_str().expect("utf-8").into(),
                name: name.into(),
                persist: persist.then(|| format!("{{\"id\": {id}}}").into()),
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
                persist: None,
            },
        ];
        let persisted = root.path().join("maestro-persist-wf%2F1");
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime")
            .block_on(kept.finish(files));
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
}
