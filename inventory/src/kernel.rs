//! The kernel's view of network interfaces (`/sys/class/net`): link state, MTU, speed,
//! hardware address and type, for every interface including virtual ones hwloc does not
//! report (`lo`).

use std::path::Path;

use crate::model::{Link, NicKind};

/// One interface as the kernel reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct KernelIf {
    pub name: String,
    pub kind: NicKind,
    pub link: Link,
}

/// Every interface under `root` (normally `/sys/class/net`), sorted by name. Unreadable
/// entries are skipped; unreadable attributes stay unknown.
pub(crate) fn interfaces(root: &Path) -> Vec<KernelIf> {
    let Ok(dir) = std::fs::read_dir(root) else {
        return Vec::new();
    };
    let mut out: Vec<KernelIf> = dir
        .flatten()
        .map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let p = e.path();
            let read = |attr: &str| {
                std::fs::read_to_string(p.join(attr))
                    .ok()
                    .map(|s| s.trim().to_string())
                    .filter(|s| !s.is_empty())
            };
            let kind = match read("type").as_deref() {
                Some("772") => NicKind::Loopback,
                Some("32") => NicKind::Infiniband,
                Some("1") => NicKind::Ethernet,
                _ => NicKind::Other,
            };
            let (state, carrier) = crate::netif::read_link(&p).unzip();
            KernelIf {
                name,
                kind,
                link: Link {
                    state: state.filter(|s| !s.is_empty()),
                    carrier: carrier.flatten(),
                    mtu: read("mtu").and_then(|v| v.parse().ok()),
                    // Virtual interfaces report -1 or fail with EINVAL: unknown.
                    speed_mbps: read("speed")
                        .and_then(|v| v.parse::<i64>().ok())
                        .and_then(|v| u64::try_from(v).ok()),
                    address: read("address"),
                },
            }
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_sysfs_like_tree() {
        let dir = std::env::temp_dir().join(format!("inventory-kernel-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for (name, ty, state, mtu, speed) in [
            ("lo", "772", "unknown", "65536", ""),
            ("ib0", "32", "up", "2044", "100000"),
            ("eth9", "1", "down", "1500", "-1"),
        ] {
            let d = dir.join(name);
            std::fs::create_dir_all(&d).expect("mkdir");
            for (f, v) in [
                ("type", ty),
                ("operstate", state),
                ("mtu", mtu),
                ("speed", speed),
            ] {
                std::fs::write(d.join(f), format!("{v}\n")).expect("write");
            }
        }
        let ifs = interfaces(&dir);
        std::fs::remove_dir_all(&dir).expect("cleanup");
        assert_eq!(
            ifs.iter().map(|i| i.name.as_str()).collect::<Vec<_>>(),
            ["eth9", "ib0", "lo"]
        );
        assert_eq!(ifs[0].kind, NicKind::Ethernet);
        assert!(!ifs[0].link.usable());
        assert_eq!(ifs[0].link.speed_mbps, None);
        assert_eq!(ifs[1].kind, NicKind::Infiniband);
        assert_eq!(ifs[1].link.speed_mbps, Some(100_000));
        assert_eq!(ifs[2].kind, NicKind::Loopback);
        assert_eq!(ifs[2].link.mtu, Some(65536));
        assert!(interfaces(Path::new("/nonexistent")).is_empty());
    }
}
