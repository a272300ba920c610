//! A directory of CDOs, as the archiver writes it and the librarian serves it: per CDO one
//! file with its bytes and one `.attrs.json` file with its attributes, both named after the
//! CDO with every byte outside `[A-Za-z0-9._-]` written `%XX` (names may hold `/`).
//! Files are written to a temporary name and renamed, so a reader never sees half a CDO.

use std::io::Write;
use std::path::{Path, PathBuf};

use pool_core::attr::{self, Attributes};

const ATTRS: &str = ".attrs.json";

/// Why the archive could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    /// A file operation failed.
    #[error("archive {path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A directory to read an archive from is not one.
    #[error("no archive at {path}: {why} (pool_archiver --dir {path} writes one)")]
    Missing {
        /// The directory given.
        path: PathBuf,
        /// What is there instead, or what failed.
        why: String,
    },
    /// An attributes file is not valid.
    #[error("archive {path}: bad attributes ({why}); remove the file or fix it")]
    Attributes {
        /// The file.
        path: PathBuf,
        /// The parse error.
        why: String,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> ArchiveError + '_ {
    move |source| ArchiveError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// A directory of archived CDOs.
#[derive(Clone, Debug)]
pub struct Archive {
    dir: PathBuf,
}

impl Archive {
    /// Opens (creating it if needed) the archive in `dir`.
    ///
    /// # Errors
    /// [`ArchiveError::Io`] if the directory cannot be created.
    pub fn open(dir: &Path) -> Result<Archive, ArchiveError> {
        std::fs::create_dir_all(dir).map_err(io(dir))?;
        Ok(Archive {
            dir: dir.to_path_buf(),
        })
    }

    /// Opens the archive in `dir` to read it: the directory must exist (a reader of a
    /// misspelled path would otherwise serve an empty archive forever).
    ///
    /// # Errors
    /// [`ArchiveError::Missing`] when `dir` is not a directory that can be read.
    pub fn existing(dir: &Path) -> Result<Archive, ArchiveError> {
        let missing = |why: String| ArchiveError::Missing {
            path: dir.to_path_buf(),
            why,
        };
        match std::fs::metadata(dir) {
            Ok(m) if m.is_dir() => std::fs::read_dir(dir)
                .map(|_| Archive {
                    dir: dir.to_path_buf(),
                })
                .map_err(|e| missing(e.to_string())),
            Ok(_) => Err(missing("not a directory".into())),
            Err(e) => Err(missing(e.to_string())),
        }
    }

    /// Stores a CDO (replacing an earlier one of that name); the built-in name and size
    /// are not stored (the pool sets them). Returns the data file's path.
    ///
    /// # Errors
    /// [`ArchiveError::Io`] when a file cannot be written.
    pub fn store(
        &self,
        name: &str,
        data: &[u8],
        attributes: &Attributes,
    ) -> Result<PathBuf, ArchiveError> {
        let mut kept = attributes.clone();
        attr::strip_derived(&mut kept);
        let json = serde_json::to_vec_pretty(&kept).map_err(|e| ArchiveError::Attributes {
            path: self.attrs_path(name),
            why: e.to_string(),
        })?;
        self.write(&self.attrs_path(name), &json)?;
        let path = self.data_path(name);
        self.write(&path, data)?;
        Ok(path)
    }

    /// The CDO `name`: its bytes and attributes, or `None` if not archived.
    ///
    /// # Errors
    /// [`ArchiveError`] when the files cannot be read or the attributes do not parse.
    pub fn load(&self, name: &str) -> Result<Option<(Vec<u8>, Attributes)>, ArchiveError> {
        let path = self.data_path(name);
        let data = match std::fs::read(&path) {
            Ok(d) => d,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io(&path)(e)),
        };
        let apath = self.attrs_path(name);
        let attributes = match std::fs::read(&apath) {
            Ok(j) => serde_json::from_slice(&j).map_err(|e| ArchiveError::Attributes {
                path: apath.clone(),
                why: e.to_string(),
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Attributes::new(),
            Err(e) => return Err(io(&apath)(e)),
        };
        Ok(Some((data, attributes)))
    }

    /// The names of every archived CDO, sorted.
    ///
    /// # Errors
    /// [`ArchiveError::Io`] when the directory cannot be read.
    pub fn names(&self) -> Result<Vec<String>, ArchiveError> {
        let mut names: Vec<String> = std::fs::read_dir(&self.dir)
            .map_err(io(&self.dir))?
            .flatten()
            .filter_map(|e| {
                let file = e.file_name().into_string().ok()?;
                if file.ends_with(ATTRS) || file.starts_with(".tmp-") {
                    return None;
                }
                unescape(&file)
            })
            .collect();
        names.sort();
        Ok(names)
    }

    fn data_path(&self, name: &str) -> PathBuf {
        self.dir.join(escape(name))
    }

    fn attrs_path(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{}{ATTRS}", escape(name)))
    }

    fn write(&self, path: &Path, bytes: &[u8]) -> Result<(), ArchiveError> {
        let file = path
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default();
        let tmp = self.dir.join(format!(".tmp-{}-{file}", std::process::id()));
        let written = std::fs::File::create(&tmp)
            .and_then(|mut f| f.write_all(bytes).and_then(|()| f.sync_data()))
            .and_then(|()| std::fs::rename(&tmp, path));
        if let Err(e) = written {
            let _ = std::fs::remove_file(&tmp);
            return Err(io(path)(e));
        }
        Ok(())
    }
}

/// A CDO name as a file name.
fn escape(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || b"._-".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    // `.` and `..` are not file names of their own; nor may a name hide as a dot file.
    if out.starts_with('.') {
        out.replace_range(0..1, "%2E");
    }
    out
}

/// The CDO name of a file name, if it is one [`escape`] makes.
fn unescape(file: &str) -> Option<String> {
    let mut bytes = Vec::with_capacity(file.len());
    let mut it = file.bytes();
    while let Some(b) = it.next() {
        if b == b'%' {
            let hex = [it.next()?, it.next()?];
            bytes.push(u8::from_str_radix(std::str::from_utf8(&hex).ok()?, 16).ok()?);
        } else {
            bytes.push(b);
        }
    }
    String::from_utf8(bytes).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use pool_core::attr::AttrValue;

    #[test]
    fn names_round_trip_through_file_names() {
        for name in [
            "plain",
            "a/b/../c",
            ".hidden",
            "..",
            "ü %41",
            "x.attrs.json",
        ] {
            let file = escape(name);
            assert!(!file.contains('/') && !file.starts_with('.'), "{file}");
            assert_eq!(unescape(&file).as_deref(), Some(name));
        }
        assert_eq!(unescape("%4"), None);
        assert_eq!(unescape("%zz"), None);
    }

    #[test]
    fn a_reader_needs_an_archive_that_exists() {
        let dir = tempfile::tempdir().expect("tempdir");
        let nowhere = dir.path().join("nowhere");
        let e = Archive::existing(&nowhere).expect_err("missing");
        assert!(e.to_string().contains("no archive at"), "{e}");
        assert!(!nowhere.exists(), "a reader creates nothing");
        let file = dir.path().join("file");
        std::fs::write(&file, b"x").expect("file");
        let e = Archive::existing(&file).expect_err("a file");
        assert!(e.to_string().contains("not a directory"), "{e}");
        assert!(Archive::existing(dir.path()).is_ok());
    }

    #[test]
    fn cdos_round_trip_with_typed_attributes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let a = Archive::open(&dir.path().join("arch")).expect("open");
        let attrs = Attributes::from([
            (".user.step".to_string(), AttrValue::Int(-3)),
            (
                ".user.when".to_string(),
                AttrValue::Timestamp(1_700_000_000_123_456_789),
            ),
            (".user.blob".to_string(), AttrValue::Blob(vec![0, 255])),
            (attr::NAME.to_string(), AttrValue::Str("dropped".into())),
        ]);
        a.store("run/1/field", b"bytes", &attrs).expect("store");
        a.store("empty", b"", &Attributes::new()).expect("store");
        assert_eq!(a.names().expect("names"), ["empty", "run/1/field"]);
        let (data, back) = a.load("run/1/field").expect("load").expect("there");
        assert_eq!(data, b"bytes");
        assert_eq!(back.len(), 3, "the built-in name is not stored");
        assert_eq!(back.get(".user.when"), attrs.get(".user.when"));
        assert_eq!(a.load("absent").expect("load"), None);
        std::fs::write(dir.path().join("arch").join("empty.attrs.json"), "{").expect("write");
        assert!(matches!(
            a.load("empty"),
            Err(ArchiveError::Attributes { .. })
        ));
    }
}
