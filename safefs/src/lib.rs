//! Files and directories in places other users can write.
//!
//! `/tmp`, `$TMPDIR` and `/dev/shm` are shared by every local user: whatever the project
//! creates or opens there may already exist, planted by someone else as a file of theirs
//! (which we would then write our secrets into), a symbolic link (which would make us
//! truncate its target), a FIFO (which blocks whoever opens it for reading) or a
//! directory (which makes our `mkdir` fail). This crate is the one place that touches
//! such paths, with one rule for all of them:
//!
//! - **Created exclusively** (`O_CREAT | O_EXCL`, `mkdir` that must create) and **never
//!   followed** (`O_NOFOLLOW`; `lstat`, not `stat`).
//! - **Opened without blocking** (`O_NONBLOCK`), so a FIFO in the way is an error, not a
//!   hang, and **checked after opening** (`fstat` of what was opened, not of the path):
//!   a regular file (or directory) of this user, private where it must be.
//! - A squatted name is an [`Error::Squatted`] that names the squatter (its owner and
//!   what it is) and says what to do; callers never fall back silently.
//!
//! Most of what the project keeps lives in the user's own private directory
//! ([`user_dir`]: `$XDG_RUNTIME_DIR/maestro`, else `${TMPDIR:-/tmp}/maestro-<uid>`,
//! created 0700 and checked): nothing another user plants can be inside it, so only that
//! one directory's name can be squatted, and that is a clear error.

use std::ffi::CString;
use std::fs::File;
use std::os::fd::FromRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Why a path in a shared place could not be used.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Something this user did not create sits at the path: `what` says what it is and
    /// whose.
    #[error(
        "{path} is {what}, not ours: another user or program put it there first; remove it (as its owner or root) or choose another path"
    )]
    Squatted {
        /// The path.
        path: PathBuf,
        /// What is there, e.g. "a FIFO of uid 1001".
        what: String,
    },
    /// A directory of ours that others may read or write (it must be 0700).
    #[error(
        "{path} is open to other users (mode {mode:o}); make it private (chmod 700) or remove it"
    )]
    NotPrivate {
        /// The directory.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// A file of ours with more than one name: another name was linked to it (or it was
    /// linked to another file), so it is not the one file the caller created.
    #[error(
        "{path} has {links} names (hard links), not one: another file was linked there; remove that name"
    )]
    Linked {
        /// The path.
        path: PathBuf,
        /// How many names the file has.
        links: u64,
    },
    /// The system refused (`what`: the operation).
    #[error("{what} {path}: {source}")]
    Io {
        /// The operation, e.g. "creating".
        what: &'static str,
        /// The path.
        path: PathBuf,
        /// The system's error.
        source: std::io::Error,
    },
}

impl Error {
    /// The error as an `std::io::Error` (kind `AlreadyExists` for a squatted path,
    /// `PermissionDenied` for a directory open to others), for callers that speak
    /// `io::Result`.
    pub fn into_io(self) -> std::io::Error {
        let kind = match &self {
            Error::Squatted { .. } | Error::Linked { .. } => std::io::ErrorKind::AlreadyExists,
            Error::NotPrivate { .. } => std::io::ErrorKind::PermissionDenied,
            Error::Io { source, .. } => source.kind(),
        };
        std::io::Error::new(kind, self.to_string())
    }
}

impl From<Error> for std::io::Error {
    fn from(e: Error) -> std::io::Error {
        e.into_io()
    }
}

fn io<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> Error + 'a {
    move |source| Error::Io {
        what,
        path: path.to_path_buf(),
        source,
    }
}

/// The effective uid of this process.
pub fn euid() -> u32 {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() }
}

/// What `meta` describes, and whose: "a FIFO of uid 1001".
pub fn describe(meta: &std::fs::Metadata) -> String {
    let t = meta.file_type();
    use std::os::unix::fs::FileTypeExt;
    let kind = if t.is_symlink() {
        "a symbolic link"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_dir() {
        "a directory"
    } else if t.is_file() {
        "a file"
    } else {
        "a device"
    };
    format!("{kind} of uid {}", meta.uid())
}

/// The user's private directory: `$XDG_RUNTIME_DIR/maestro` where that variable is set,
/// else `${TMPDIR:-/tmp}/maestro-<uid>`; created with mode 0700, or checked to be a
/// directory of this user that nobody else may enter.
///
/// # Errors
/// [`Error::Squatted`] when another user owns that name (set `XDG_RUNTIME_DIR` or
/// `TMPDIR` to a private directory), [`Error::NotPrivate`], or the system's refusal.
pub fn user_dir() -> Result<PathBuf, Error> {
    user_dir_under(&std::env::temp_dir())
}

/// As [`user_dir`], but the same for every process of the user on this node whatever its
/// `TMPDIR` (`$XDG_RUNTIME_DIR/maestro`, else `/tmp/maestro-<uid>`): for what the user's
/// jobs share across launchers.
///
/// # Errors
/// As [`user_dir`].
pub fn node_user_dir() -> Result<PathBuf, Error> {
    user_dir_under(Path::new("/tmp"))
}

fn user_dir_under(tmp: &Path) -> Result<PathBuf, Error> {
    let dir = match std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        Some(d) => PathBuf::from(d).join("maestro"),
        None => tmp.join(format!("maestro-{}", euid())),
    };
    private_dir(&dir)?;
    Ok(dir)
}

/// Creates `path` as a directory with mode 0700, or accepts it if it exists as a
/// directory (not a link) of this user with no access for others.
///
/// # Errors
/// [`Error::Squatted`] (something else, or someone else's), [`Error::NotPrivate`], or
/// the system's refusal.
pub fn private_dir(path: &Path) -> Result<(), Error> {
    match std::fs::DirBuilder::new().mode(0o700).create(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(io("creating", path)(e)),
    }
    let meta = std::fs::symlink_metadata(path).map_err(io("examining", path))?;
    if !meta.is_dir() || meta.uid() != euid() {
        return Err(Error::Squatted {
            path: path.to_path_buf(),
            what: describe(&meta),
        });
    }
    let mode = meta.permissions().mode() & 0o7777;
    if mode & 0o077 != 0 {
        return Err(Error::NotPrivate {
            path: path.to_path_buf(),
            mode,
        });
    }
    Ok(())
}

/// Creates `path` as a new directory with mode 0700; fails if anything is there.
///
/// # Errors
/// [`Error::Squatted`] naming what is there, or the system's refusal.
pub fn new_private_dir(path: &Path) -> Result<(), Error> {
    match std::fs::DirBuilder::new().mode(0o700).create(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Err(squatted(path)),
        Err(e) => Err(io("creating", path)(e)),
    }
}

/// The [`Error::Squatted`] for what is at `path` now.
fn squatted(path: &Path) -> Error {
    let what =
        std::fs::symlink_metadata(path).map_or_else(|_| "something".into(), |m| describe(&m));
    Error::Squatted {
        path: path.to_path_buf(),
        what,
    }
}

fn c_path(path: &Path) -> Result<CString, Error> {
    CString::new(path.as_os_str().as_bytes()).map_err(|_| Error::Io {
        what: "naming",
        path: path.to_path_buf(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidInput, "the path has a NUL byte"),
    })
}

/// `open(2)` with `flags | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC`, then clears
/// `O_NONBLOCK` (regular files ignore it; it only keeps a FIFO from blocking the open).
fn open_raw(path: &Path, flags: libc::c_int, mode: libc::mode_t) -> std::io::Result<File> {
    let c = c_path(path).map_err(Error::into_io)?;
    let all = flags | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC;
    // SAFETY: a NUL-terminated path; the descriptor returned is owned by the File below.
    let fd = unsafe { libc::open(c.as_ptr(), all, libc::c_uint::from(mode)) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` is a descriptor this function just opened and nothing else owns.
    let file = unsafe { File::from_raw_fd(fd) };
    // SAFETY: fcntl on the descriptor `file` owns.
    unsafe {
        let fl = libc::fcntl(fd, libc::F_GETFL);
        if fl >= 0 {
            libc::fcntl(fd, libc::F_SETFL, fl & !libc::O_NONBLOCK);
        }
    }
    Ok(file)
}

/// Creates a new file at `path` with `mode`, exclusively and without following a link.
///
/// # Errors
/// [`Error::Squatted`] naming what is already there, or the system's refusal.
fn create_new(path: &Path, mode: u32) -> Result<File, Error> {
    let flags = libc::O_CREAT | libc::O_EXCL | libc::O_RDWR;
    match open_raw(path, flags, mode as libc::mode_t) {
        Ok(f) => Ok(f),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Err(squatted(path)),
        Err(e) => Err(io("creating", path)(e)),
    }
}

/// Takes `file`'s exclusive lock (`flock`) without waiting; held until every descriptor
/// of the open file closes. `false` when another process holds it (or the file system
/// refuses locks): the one place the project locks files, for a pool manager's info file.
pub fn try_lock(file: &File) -> bool {
    use std::os::fd::AsRawFd;
    // SAFETY: flock on a descriptor `file` owns for the duration of the call.
    unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) == 0 }
}

/// Opens an existing regular file of this user at `path` (for writing too when `write`),
/// never following a link nor blocking on a FIFO.
///
/// # Errors
/// [`Error::Squatted`] for a link, a FIFO, anything not a regular file, or a file of
/// another user; the system's refusal (`NotFound` when nothing is there).
pub fn open_own(path: &Path, write: bool) -> Result<File, Error> {
    let flags = if write { libc::O_RDWR } else { libc::O_RDONLY };
    let file = open_raw(path, flags, 0).map_err(|e| {
        // ELOOP: the last component is a symbolic link.
        if e.raw_os_error() == Some(libc::ELOOP) {
            squatted(path)
        } else {
            io("opening", path)(e)
        }
    })?;
    let meta = file.metadata().map_err(io("examining", path))?;
    if !meta.is_file() || meta.uid() != euid() {
        return Err(Error::Squatted {
            path: path.to_path_buf(),
            what: describe(&meta),
        });
    }
    Ok(file)
}

/// Checks that `path` is a regular file of this user with one name (not a link, not a
/// second name of another file): a file the caller made, and only it. Returns its
/// metadata.
///
/// # Errors
/// [`Error::Squatted`] for anything else at the path or another user's file,
/// [`Error::Linked`] for a file with more names; the system's refusal.
pub fn sole_own_file(path: &Path) -> Result<std::fs::Metadata, Error> {
    let meta = std::fs::symlink_metadata(path).map_err(io("examining", path))?;
    if !meta.is_file() || meta.uid() != euid() {
        return Err(Error::Squatted {
            path: path.to_path_buf(),
            what: describe(&meta),
        });
    }
    if meta.nlink() != 1 {
        return Err(Error::Linked {
            path: path.to_path_buf(),
            links: meta.nlink(),
        });
    }
    Ok(meta)
}

/// The path naming what `file` (a directory) has open, whatever is at its path now.
fn fd_path(file: &File) -> PathBuf {
    use std::os::fd::AsRawFd;
    PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()))
}

/// An open directory of this user reached without following any symbolic link on the
/// way (`openat2` with `RESOLVE_NO_SYMLINKS`): its entries are reached through
/// [`OwnDir::path`], which names the directory opened, whatever is renamed or planted at
/// its path afterwards.
#[derive(Debug)]
pub struct OwnDir {
    dir: File,
}

impl OwnDir {
    /// Opens the directory `path`, refusing a link anywhere in the path and a directory of
    /// another user.
    ///
    /// # Errors
    /// [`Error::Squatted`] for a link in the path (named by the kernel's `ELOOP`),
    /// something not a directory, or another user's; the system's refusal.
    pub fn open(path: &Path) -> Result<OwnDir, Error> {
        let c = c_path(path)?;
        // SAFETY: `open_how` is plain integers; all zero is a valid value.
        let mut how: libc::open_how = unsafe { std::mem::zeroed() };
        how.flags =
            (libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC) as u64;
        how.resolve = libc::RESOLVE_NO_SYMLINKS;
        // SAFETY: openat2 with a NUL-terminated path and an `open_how` of the size given;
        // the descriptor returned is owned by the File below.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_openat2,
                libc::AT_FDCWD,
                c.as_ptr(),
                &raw const how,
                std::mem::size_of::<libc::open_how>(),
            )
        };
        if fd < 0 {
            let e = std::io::Error::last_os_error();
            return Err(match e.raw_os_error() {
                Some(libc::ELOOP) => Error::Squatted {
                    path: path.to_path_buf(),
                    what: "reached through a symbolic link".into(),
                },
                Some(libc::ENOTDIR) => squatted(path),
                _ => io("opening", path)(e),
            });
        }
        let fd = libc::c_int::try_from(fd).map_err(|_| Error::Io {
            what: "opening",
            path: path.to_path_buf(),
            source: std::io::Error::other("the kernel returned no descriptor"),
        })?;
        // SAFETY: `fd` is a descriptor this function just opened and nothing else owns.
        let dir = unsafe { File::from_raw_fd(fd) };
        let meta = dir.metadata().map_err(io("examining", path))?;
        if !meta.is_dir() || meta.uid() != euid() {
            return Err(Error::Squatted {
                path: path.to_path_buf(),
                what: describe(&meta),
            });
        }
        Ok(OwnDir { dir })
    }

    /// A path that names the opened directory itself (`/proc/self/fd/N`): `path().join(x)`
    /// is entry `x` of it.
    pub fn path(&self) -> PathBuf {
        fd_path(&self.dir)
    }
}

/// Reads at most `limit` bytes of an existing regular file of this user (see
/// [`open_own`]) as text.
///
/// # Errors
/// As [`open_own`]; `InvalidData` for text that is not UTF-8.
pub fn read_own(path: &Path, limit: u64) -> Result<String, Error> {
    use std::io::Read;
    let mut text = String::new();
    open_own(path, false)?
        .take(limit)
        .read_to_string(&mut text)
        .map_err(io("reading", path))?;
    Ok(text)
}

/// As [`read_own`], for a file whose directory decides who could have put it there: the
/// directory (the path's last but one component) must not be a link and must be this
/// user's or root's, and where others may write in it, sticky (as `/tmp`), so that nobody
/// else can replace what is in it.
///
/// # Errors
/// [`Error::Squatted`] for a directory that is a link, not a directory, or another user's;
/// [`Error::NotPrivate`] for one others may write in without the sticky bit; then as
/// [`read_own`].
pub fn read_own_in_safe_dir(path: &Path, limit: u64) -> Result<String, Error> {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let Some(name) = path.file_name() else {
        return Err(io("reading", path)(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "the path names no file",
        )));
    };
    let dir = open_raw(parent, libc::O_RDONLY | libc::O_DIRECTORY, 0).map_err(|e| {
        // A link there: ELOOP, or ENOTDIR with O_DIRECTORY.
        if matches!(e.raw_os_error(), Some(libc::ELOOP | libc::ENOTDIR)) {
            squatted(parent)
        } else {
            io("opening", parent)(e)
        }
    })?;
    let meta = dir.metadata().map_err(io("examining", parent))?;
    if !meta.is_dir() || (meta.uid() != euid() && meta.uid() != 0) {
        return Err(Error::Squatted {
            path: parent.to_path_buf(),
            what: describe(&meta),
        });
    }
    let mode = meta.permissions().mode() & 0o7777;
    if mode & 0o022 != 0 && mode & 0o1000 == 0 {
        return Err(Error::NotPrivate {
            path: parent.to_path_buf(),
            mode,
        });
    }
    // The file, in the directory just checked (whatever is renamed at its path now).
    let inside = fd_path(&dir).join(name);
    read_own(&inside, limit).map_err(|e| match e {
        Error::Squatted { what, .. } => Error::Squatted {
            path: path.to_path_buf(),
            what,
        },
        Error::Io { what, source, .. } => Error::Io {
            what,
            path: path.to_path_buf(),
            source,
        },
        other => other,
    })
}

/// Opens the file at `path` for writing whether or not it exists: created exclusively
/// (mode `mode`) when absent, else opened as an existing regular file of this user, made
/// `mode`, and truncated only by the caller (who may first want to lock it).
///
/// # Errors
/// As `create_new` (an exclusive create refused by what sits there) and [`open_own`].
pub fn create_or_open_own(path: &Path, mode: u32) -> Result<File, Error> {
    for _ in 0..3 {
        match create_new(path, mode) {
            Ok(f) => return Ok(f),
            Err(Error::Squatted { .. }) => {}
            Err(e) => return Err(e),
        }
        match open_own(path, true) {
            Ok(f) => {
                f.set_permissions(std::fs::Permissions::from_mode(mode))
                    .map_err(io("changing the mode of", path))?;
                return Ok(f);
            }
            // Removed between the two: create again.
            Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    Err(squatted(path))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    #[test]
    fn a_new_file_is_created_once_and_never_through_a_link() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("info");
        let mut f = create_new(&path, 0o600).expect("create");
        f.write_all(b"x").expect("write");
        let mode = std::fs::metadata(&path).expect("meta").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let err = create_new(&path, 0o600).expect_err("twice");
        assert!(err.to_string().contains("a file of uid"), "{err}");
        // A link to a victim: neither created through nor opened through.
        let victim = dir.path().join("victim");
        std::fs::write(&victim, b"keep").expect("victim");
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&victim, &link).expect("symlink");
        let err = create_new(&link, 0o600).expect_err("link");
        assert!(err.to_string().contains("a symbolic link"), "{err}");
        let err = open_own(&link, true).expect_err("link");
        assert!(err.to_string().contains("a symbolic link"), "{err}");
        let err = create_or_open_own(&link, 0o600).expect_err("link");
        assert!(err.to_string().contains("symbolic link"), "{err}");
        assert_eq!(std::fs::read(&victim).expect("victim"), b"keep");
    }

    #[test]
    fn a_fifo_is_refused_at_once() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("fifo");
        let c = c_path(&path).expect("path");
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o666) }, 0);
        for err in [
            open_own(&path, false).expect_err("fifo"),
            read_own(&path, 100).expect_err("fifo"),
            create_or_open_own(&path, 0o600).expect_err("fifo"),
        ] {
            assert!(err.to_string().contains("a FIFO of uid"), "{err}");
        }
    }

    #[test]
    fn an_existing_file_of_ours_is_opened_and_made_private() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("f");
        std::fs::write(&path, b"old").expect("write");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).expect("chmod");
        let mut f = create_or_open_own(&path, 0o600).expect("open");
        let mode = f.metadata().expect("meta").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let mut text = String::new();
        f.read_to_string(&mut text).expect("read");
        assert_eq!(text, "old");
        assert_eq!(read_own(&path, 2).expect("read"), "ol");
    }

    #[test]
    fn a_directory_is_opened_only_without_links_on_the_way() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let real = tmp.path().join("real");
        std::fs::create_dir(&real).expect("dir");
        std::fs::write(real.join("f"), b"x").expect("file");
        let dir = OwnDir::open(&real).expect("own dir");
        assert_eq!(std::fs::read(dir.path().join("f")).expect("read"), b"x");
        // A link as the last component, or as one on the way.
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(&real, &link).expect("symlink");
        for via in [link.clone(), link.join(".")] {
            let e = OwnDir::open(&via).expect_err("a link");
            assert!(matches!(e, Error::Squatted { .. }), "{via:?}: {e}");
            assert!(e.to_string().contains("symbolic link"), "{e}");
        }
        assert!(matches!(
            OwnDir::open(&real.join("f")),
            Err(Error::Squatted { .. })
        ));
    }

    #[test]
    fn a_file_with_a_second_name_is_not_the_sole_file() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let f = tmp.path().join("f");
        std::fs::write(&f, b"x").expect("file");
        assert!(sole_own_file(&f).is_ok());
        std::fs::hard_link(&f, tmp.path().join("g")).expect("link");
        let e = sole_own_file(&f).expect_err("two names");
        assert!(matches!(e, Error::Linked { links: 2, .. }), "{e}");
        std::os::unix::fs::symlink(&f, tmp.path().join("l")).expect("symlink");
        assert!(matches!(
            sole_own_file(&tmp.path().join("l")),
            Err(Error::Squatted { .. })
        ));
    }

    #[test]
    fn private_directories_are_checked() {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path().join("d");
        private_dir(&d).expect("create");
        private_dir(&d).expect("again");
        new_private_dir(&d).expect_err("exists");
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let err = private_dir(&d).expect_err("open to others");
        assert!(
            matches!(err, Error::NotPrivate { mode: 0o755, .. }),
            "{err}"
        );
        let f = dir.path().join("f");
        std::fs::write(&f, b"").expect("file");
        let err = private_dir(&f).expect_err("a file");
        assert!(err.to_string().contains("a file of uid"), "{err}");
        let link = dir.path().join("l");
        std::os::unix::fs::symlink(&d, &link).expect("symlink");
        let err = private_dir(&link).expect_err("a link");
        assert!(err.to_string().contains("a symbolic link"), "{err}");
    }
}
