//! The node's inventory, cached between processes of one user.
//!
//! Collecting the live inventory loads libfabric (on Debian its dependencies' constructors
//! alone take about 0.2 s) and asks every provider for its offers (`fi_getinfo`, 0.1 s
//! more), on the critical path of every launch. What it finds changes only with the
//! machine: so the inventory is kept in the user's runtime directory with a
//! *fingerprint* of everything it depends on, read cheaply without libfabric: the boot,
//! the host name, every network interface's state and addresses (`/sys/class/net`), the
//! OpenFabrics devices and their ports' states (`/sys/class/infiniband`), the installed
//! libfabric and its provider plugins (size and modification time), and the environment
//! variables that steer libfabric and hwloc (`FI_*`, `HWLOC_*`). A link that goes down, a
//! device that appears, another libfabric or another `FI_PROVIDER` makes a new
//! fingerprint, and the inventory is collected again.
//!
//! Where: `inventory.json` in the user's private directory ([`safefs::user_dir`]:
//! `$XDG_RUNTIME_DIR/maestro`, else `$TMPDIR/maestro-<uid>`; directory mode 0700, file
//! 0600; a directory that is not the user's own and private is not used).
//! `MSTRO_INVENTORY_CACHE=0` turns the cache off.

use std::fmt::Write as _;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::{Inventory, InventoryError, Options, collect};

/// The file's content.
#[derive(Serialize, Deserialize)]
struct Cached {
    fingerprint: String,
    inventory: Inventory,
}

/// The live inventory ([`collect`] with default options), from the cache when the machine
/// has not changed since it was written, else collected and cached.
///
/// # Errors
/// As [`collect`]. A cache that cannot be read or written is ignored (logged at debug).
pub fn collect_cached() -> Result<Inventory, InventoryError> {
    let Some(path) = cache_file() else {
        return collect(&Options::default());
    };
    let fingerprint = fingerprint(Path::new("/sys"), fabric::LIBFABRIC_DIR);
    match read(&path, &fingerprint) {
        Some(inv) => {
            tracing::debug!("inventory from the cache {}", path.display());
            return Ok(inv);
        }
        None => tracing::debug!("inventory cache {} missing or stale", path.display()),
    }
    let inventory = collect(&Options::default())?;
    let cached = Cached {
        fingerprint,
        inventory,
    };
    if let Err(e) = write(&path, &cached) {
        tracing::debug!("inventory cache {} not written: {e}", path.display());
    }
    Ok(cached.inventory)
}

/// The inventory in `path` if its fingerprint is `fingerprint`.
fn read(path: &Path, fingerprint: &str) -> Option<Inventory> {
    let text = std::fs::read(path).ok()?;
    let cached: Cached = serde_json::from_slice(&text).ok()?;
    (cached.fingerprint == fingerprint).then_some(cached.inventory)
}

/// Writes atomically (a private temporary file renamed over the old one).
fn write(path: &Path, cached: &Cached) -> std::io::Result<()> {
    let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
    let json = serde_json::to_vec(cached).map_err(std::io::Error::other)?;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    std::io::Write::write_all(&mut f, &json)?;
    drop(f);
    std::fs::rename(&tmp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

/// The cache file, creating its private directory; `None` when the cache is off or no
/// safe directory exists.
fn cache_file() -> Option<PathBuf> {
    if std::env::var("MSTRO_INVENTORY_CACHE").is_ok_and(|v| v.trim() == "0") {
        return None;
    }
    let dir = safefs::user_dir()
        .inspect_err(|e| tracing::debug!("inventory cache off: {e}"))
        .ok()?;
    Some(dir.join("inventory.json"))
}

/// Everything the live inventory depends on, as text (see the module docs): `sys` is the
/// sysfs root (`/sys`), `libdir` where libfabric is installed.
fn fingerprint(sys: &Path, libdir: &str) -> String {
    let mut f = String::new();
    let _ = writeln!(f, "schema {} {}", crate::SCHEMA, env!("CARGO_PKG_VERSION"));
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
    let _ = writeln!(f, "boot {} host {}", boot.trim(), crate::local_hostname());
    for (dir, attrs) in [
        (
            sys.join("class/net"),
            &["operstate", "carrier", "address", "mtu", "speed", "ifindex"][..],
        ),
        (sys.join("class/infiniband"), &["node_guid", "fw_ver"][..]),
    ] {
        for entry in sorted_entries(&dir) {
            let _ = write!(f, "{}", entry.display());
            for a in attrs {
                let v = std::fs::read_to_string(entry.join(a)).unwrap_or_default();
                let _ = write!(f, " {a}={}", v.trim());
            }
            for port in sorted_entries(&entry.join("ports")) {
                let state = std::fs::read_to_string(port.join("state")).unwrap_or_default();
                let _ = write!(f, " port {} {}", port.display(), state.trim());
            }
            let _ = writeln!(f);
        }
    }
    for (k, v) in all_addresses_text() {
        let _ = writeln!(f, "addr {k} {v}");
    }
    let lib = Path::new(libdir);
    let files =
        std::iter::once(lib.join("libfabric.so.1")).chain(sorted_entries(&lib.join("libfabric")));
    for file in files {
        if let Ok(m) = std::fs::metadata(&file) {
            let _ = writeln!(f, "lib {} {} {}", file.display(), m.len(), m.mtime());
        }
    }
    // Any bytes: a variable that is not UTF-8 is fingerprinted as lossy text, never a panic.
    let mut vars: Vec<(String, String)> = std::env::vars_os()
        .map(|(k, v)| {
            (
                k.to_string_lossy().into_owned(),
                v.to_string_lossy().into_owned(),
            )
        })
        .filter(|(k, _)| k.starts_with("FI_") || k.starts_with("HWLOC_"))
        .collect();
    vars.sort();
    for (k, v) in vars {
        let _ = writeln!(f, "env {k}={v}");
    }
    f
}

/// The interfaces' addresses (they change without the link state changing).
fn all_addresses_text() -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = crate::netif::all_addresses()
        .unwrap_or_default()
        .into_iter()
        .map(|a| (a.interface.clone(), format!("{} up={}", a.subnet(), a.up)))
        .collect();
    v.sort();
    v
}

/// The entries of `dir`, sorted (none if unreadable).
fn sorted_entries(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    v.sort();
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sysfs(dir: &Path, state: &str) {
        let eth = dir.join("class/net/eth0");
        std::fs::create_dir_all(&eth).expect("mkdir");
        std::fs::write(eth.join("operstate"), state).expect("write");
        let port = dir.join("class/infiniband/mlx5_0/ports/1");
        std::fs::create_dir_all(&port).expect("mkdir");
        std::fs::write(port.join("state"), "4: ACTIVE").expect("write");
    }

    #[test]
    fn the_fingerprint_follows_links_and_devices() {
        let dir = tempfile::tempdir().expect("tempdir");
        sysfs(dir.path(), "up");
        let up = fingerprint(dir.path(), "/nonexistent");
        assert_eq!(up, fingerprint(dir.path(), "/nonexistent"), "stable");
        assert!(
            up.contains("operstate=up") && up.contains("4: ACTIVE"),
            "{up}"
        );
        sysfs(dir.path(), "down");
        assert_ne!(
            up,
            fingerprint(dir.path(), "/nonexistent"),
            "a link went down"
        );
        sysfs(dir.path(), "up");
        std::fs::create_dir_all(dir.path().join("class/infiniband/mlx5_1")).expect("mkdir");
        assert_ne!(
            up,
            fingerprint(dir.path(), "/nonexistent"),
            "a device appeared"
        );
    }

    #[test]
    fn a_stale_or_foreign_file_is_not_used() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("inventory.json");
        let inv = collect(&Options {
            topology: None,
            sysfs_net: Some(dir.path().join("none")),
            ..Options::default()
        })
        .expect("inventory");
        let cached = Cached {
            fingerprint: "machine A".into(),
            inventory: inv.clone(),
        };
        write(&path, &cached).expect("write");
        assert_eq!(read(&path, "machine A").as_ref(), Some(&inv));
        assert!(read(&path, "machine B").is_none(), "stale");
        std::fs::write(&path, "not json").expect("write");
        assert!(read(&path, "machine A").is_none(), "garbage");
        let mode = std::fs::metadata(&path).expect("meta").mode() & 0o777;
        assert_eq!(mode, 0o600);
    }
}
