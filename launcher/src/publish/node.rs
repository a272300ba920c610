//! Publish/lookup across jobs on one node: a directory that every host of the same user
//! on the node shares.
//!
//! A [`super::PublishStore`] keeps what its own job publishes in memory. Data published
//! with `PMIX_RANGE_GLOBAL` must also reach other jobs, which under `maestro run` means
//! other host processes: each such key becomes one file in a private directory
//! ([`NodeDirectory::default_dir`], mode 0700), written atomically and exclusively (a
//! temporary file hard-linked into place), naming the publisher and the host process
//! that stored it. Lookups read the files; an entry whose host process is gone is stale
//! and removed; a host removes its job's entries when the job ends.
//!
//! Values cross jobs as text, for the types a rendezvous needs: strings, bytes, booleans,
//! integers, sizes, times and doubles. Other types are refused with
//! `PMIX_ERR_NOT_SUPPORTED` (publish them within the job's range instead).

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use pmix::{Proc, Published, Status, Value};

const MAGIC: &str = "maestro-pmix-published-v1";

/// A node-wide directory of published data shared by the hosts of one user.
#[derive(Debug)]
pub struct NodeDirectory {
    dir: PathBuf,
    host_pid: u32,
}

/// Why an entry could not be stored.
#[derive(Debug, PartialEq, Eq)]
pub enum PutError {
    /// Another live publisher holds the key.
    Duplicate(Proc),
    /// The value's type does not cross jobs.
    Unsupported,
    /// The file system refused.
    Io,
}

impl PutError {
    /// The status a publish answers with.
    pub(crate) fn status(&self) -> Status {
        match self {
            PutError::Duplicate(_) => Status::DUPLICATE_KEY,
            PutError::Unsupported => Status::NOT_SUPPORTED,
            PutError::Io => Status::ERROR,
        }
    }
}

impl NodeDirectory {
    /// `pmix` in the user's node-wide private directory ([`safefs::node_user_dir`]).
    ///
    /// # Errors
    /// The user's private directory cannot be used (another user took its name: the
    /// error names them).
    pub fn default_dir() -> Result<PathBuf, safefs::Error> {
        Ok(safefs::node_user_dir()?.join("pmix"))
    }

    /// Opens (creating with mode 0700) the directory for this host process.
    ///
    /// # Errors
    /// The directory cannot be created, or it exists but is not a private directory of
    /// this user (published data may hold secrets: fix its owner or mode, or remove it).
    pub fn open(dir: &Path) -> std::io::Result<NodeDirectory> {
        safefs::private_dir(dir)?;
        Ok(NodeDirectory {
            dir: dir.to_path_buf(),
            host_pid: std::process::id(),
        })
    }

    fn path(&self, key: &str) -> PathBuf {
        self.dir.join(hex::encode(key.as_bytes()))
    }

    /// Stores `p` unless another live publisher holds its key.
    pub fn put(&self, p: &Published) -> Result<(), PutError> {
        let value = encode_value(&p.value).ok_or(PutError::Unsupported)?;
        let text = format!(
            "{MAGIC}\nhost {}\nnspace {}\nrank {}\nvalue {value}\n",
            self.host_pid,
            hex::encode(p.publisher.nspace.as_bytes()),
            p.publisher.rank
        );
        let target = self.path(&p.key);
        let tmp = self.dir.join(format!(
            ".tmp-{}-{}",
            self.host_pid,
            hex::encode(p.key.as_bytes())
        ));
        let written = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)
            .and_then(|mut f| f.write_all(text.as_bytes()));
        if written.is_err() {
            let _ = std::fs::remove_file(&tmp);
            return Err(PutError::Io);
        }
        // A stale entry in the way is removed by `read`; try again, a few times at most.
        let mut attempts = 0;
        let result = loop {
            attempts += 1;
            if attempts > 3 {
                break Err(PutError::Io);
            }
            match std::fs::hard_link(&tmp, &target) {
                Ok(()) => break Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    match self.read(&target) {
                        // The same publisher again: replace its value.
                        Some((owner, _)) if owner.publisher == p.publisher => {
                            break std::fs::rename(&tmp, &target).map_err(|_| PutError::Io);
                        }
                        Some((owner, _)) => break Err(PutError::Duplicate(owner.publisher)),
                        // Stale (removed by `read`) or vanished: try again.
                        None => continue,
                    }
                }
                Err(_) => break Err(PutError::Io),
            }
        };
        let _ = std::fs::remove_file(&tmp);
        result
    }

    /// The live entry for `key`, if any.
    pub(crate) fn get(&self, key: &str) -> Option<Published> {
        self.read(&self.path(key)).map(|(p, _)| p)
    }

    /// The live entries whose keys start with `prefix`, in key order (for a process that
    /// is no PMIx client, such as `maestro pool`, finding what the user's jobs published).
    pub fn with_prefix(&self, prefix: &str) -> Vec<(String, Value)> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        let mut found: Vec<(String, Value)> = entries
            .flatten()
            .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
            .filter_map(|e| self.read(&e.path()))
            .filter(|(p, _)| p.key.starts_with(prefix))
            .map(|(p, _)| (p.key, p.value))
            .collect();
        found.sort_by(|a, b| a.0.cmp(&b.0));
        found
    }

    /// Removes `key` if `publisher` stored it.
    pub fn remove(&self, key: &str, publisher: &Proc) {
        let path = self.path(key);
        if self
            .read(&path)
            .is_some_and(|(p, _)| p.publisher == *publisher)
        {
            let _ = std::fs::remove_file(path);
        }
    }

    /// Removes every entry this host stored for `nspace`.
    pub(crate) fn remove_nspace(&self, nspace: &str) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        for e in entries.flatten() {
            let path = e.path();
            if let Some((p, host)) = self.read(&path)
                && host == self.host_pid
                && p.publisher.nspace == nspace
            {
                let _ = std::fs::remove_file(path);
            }
        }
    }

    /// Removes every entry whose host process is gone (for a process that cleans up after
    /// a killed host, such as `maestro run`'s janitor; lookups do it for the keys they
    /// read).
    pub fn sweep_stale(&self) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        for e in entries.flatten() {
            if e.file_name().to_string_lossy().starts_with('.') {
                continue;
            }
            let _ = self.read(&e.path());
        }
    }

    /// Reads one entry with the pid of the host that stored it; a stale or unreadable
    /// entry is removed and reads as `None`.
    fn read(&self, path: &Path) -> Option<(Published, u32)> {
        let text = std::fs::read_to_string(path).ok()?;
        let key_hex = path.file_name()?.to_str()?;
        let parsed = parse_entry(key_hex, &text);
        match parsed {
            Some((p, host)) if host == self.host_pid || process_alive(host) => Some((p, host)),
            _ => {
                tracing::debug!("removing stale published entry {}", path.display());
                let _ = std::fs::remove_file(path);
                None
            }
        }
    }
}

pub use pool::stale::process_alive;

fn parse_entry(key_hex: &str, text: &str) -> Option<(Published, u32)> {
    let mut lines = text.lines();
    (lines.next()? == MAGIC).then_some(())?;
    let mut field = |name: &str| {
        lines
            .next()
            .and_then(|l| l.strip_prefix(name))
            .and_then(|l| l.strip_prefix(' '))
            .map(str::to_string)
    };
    let host = field("host")?.parse().ok()?;
    let nspace = String::from_utf8(unhex(&field("nspace")?)?).ok()?;
    let rank = field("rank")?.parse().ok()?;
    let value = decode_value(&field("value")?)?;
    let key = String::from_utf8(unhex(key_hex)?).ok()?;
    Some((
        Published {
            publisher: Proc::new(&nspace, rank),
            key,
            value,
        },
        host,
    ))
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    hex::decode(s).ok()
}

/// `type:payload` for the value types that cross jobs.
fn encode_value(v: &Value) -> Option<String> {
    Some(match v {
        Value::String(s) => format!("string:{}", hex::encode(s.as_bytes())),
        Value::Bytes(b) => format!("bytes:{}", hex::encode(b)),
        Value::Bool(b) => format!("bool:{b}"),
        Value::Int(i) | Value::Int32(i) => format!("int32:{i}"),
        Value::Int64(i) => format!("int64:{i}"),
        Value::Uint(u) | Value::Uint32(u) => format!("uint32:{u}"),
        Value::Uint64(u) => format!("uint64:{u}"),
        Value::Size(s) => format!("size:{s}"),
        Value::Time(t) => format!("time:{t}"),
        Value::Double(d) => format!("double:{}", d.to_bits()),
        _ => return None,
    })
}

fn decode_value(s: &str) -> Option<Value> {
    let (ty, payload) = s.split_once(':')?;
    Some(match ty {
        "string" => Value::String(String::from_utf8(unhex(payload)?).ok()?),
        "bytes" => Value::Bytes(unhex(payload)?),
        "bool" => Value::Bool(payload.parse().ok()?),
        "int32" => Value::Int32(payload.parse().ok()?),
        "int64" => Value::Int64(payload.parse().ok()?),
        "uint32" => Value::Uint32(payload.parse().ok()?),
        "uint64" => Value::Uint64(payload.parse().ok()?),
        "size" => Value::Size(payload.parse().ok()?),
        "time" => Value::Time(payload.parse().ok()?),
        "double" => Value::Double(f64::from_bits(payload.parse().ok()?)),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn published(nspace: &str, key: &str, value: Value) -> Published {
        Published {
            publisher: Proc::new(nspace, 0),
            key: key.into(),
            value,
        }
    }

    #[test]
    fn values_round_trip_and_others_are_refused() {
        for v in [
            Value::String("mstro-pm-v1:ab:1.2.3.4:5:cd".into()),
            Value::Bytes(vec![0, 255, 7]),
            Value::Bool(true),
            Value::Int32(-3),
            Value::Int64(-1 << 40),
            Value::Uint32(7),
            Value::Uint64(u64::MAX),
            Value::Size(12),
            Value::Time(1_700_000_000),
            Value::Double(-0.125),
        ] {
            let text = encode_value(&v).expect("encodes");
            assert_eq!(decode_value(&text), Some(v), "{text}");
        }
        assert_eq!(encode_value(&Value::Pointer(1)), None);
        for bad in ["", "string", "string:zz", "bool:maybe", "int32:x", "what:1"] {
            assert_eq!(decode_value(bad), None, "{bad}");
        }
    }

    #[test]
    fn two_hosts_share_entries_and_refuse_duplicates() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("store");
        let a = NodeDirectory::open(&dir).expect("open");
        // A second host process on the node (same directory, another pid: ours + 0 is
        // alive, which is all that matters for liveness).
        let b = NodeDirectory::open(&dir).expect("open again");
        let p = published(
            "job-a",
            "maestro.pool.pm-info.wf",
            Value::String("info".into()),
        );
        a.put(&p).expect("put");
        assert_eq!(b.get("maestro.pool.pm-info.wf"), Some(p.clone()));
        // The same publisher may replace its value; another one may not.
        let newer = published(
            "job-a",
            "maestro.pool.pm-info.wf",
            Value::String("v2".into()),
        );
        a.put(&newer).expect("replace");
        let other = published("job-b", "maestro.pool.pm-info.wf", Value::Bool(true));
        assert_eq!(
            b.put(&other),
            Err(PutError::Duplicate(Proc::new("job-a", 0)))
        );
        assert_eq!(
            b.put(&published("job-b", "k", Value::Pointer(1))),
            Err(PutError::Unsupported)
        );
        b.remove("maestro.pool.pm-info.wf", &Proc::new("job-b", 0));
        assert!(
            a.get("maestro.pool.pm-info.wf").is_some(),
            "not b's to remove"
        );
        a.remove_nspace("job-a");
        assert_eq!(b.get("maestro.pool.pm-info.wf"), None);
    }

    #[test]
    fn entries_of_dead_hosts_are_stale() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("store");
        let mut dead = NodeDirectory::open(&dir).expect("open");
        dead.host_pid = u32::MAX - 1; // no such process
        dead.put(&published("old", "k", Value::Int64(1)))
            .expect("put");
        let live = NodeDirectory::open(&dir).expect("open");
        assert_eq!(live.get("k"), None);
        assert_eq!(std::fs::read_dir(&dir).expect("read").count(), 0);
        live.put(&published("new", "k", Value::Int64(2)))
            .expect("the key is free again");
        // Garbage in the directory is stale too.
        std::fs::write(dir.join(hex::encode(b"g")), "not an entry").expect("write");
        assert_eq!(live.get("g"), None);
    }

    #[test]
    fn a_directory_open_to_others_is_refused() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("store");
        std::fs::create_dir(&dir).expect("mkdir");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let err = NodeDirectory::open(&dir).expect_err("refused");
        assert!(err.to_string().contains("chmod 700"), "{err}");
    }
}
