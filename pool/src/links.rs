//! Link monitoring: watches the operational state of network interfaces in sysfs and reports
//! each change with the interface's addresses. `maestro run` watches the node's NICs and
//! raises PMIx `PMIX_FABRIC_UPDATED` events; a pool client watches the interface its fabric
//! endpoint is bound to and reports changes to its pool manager ([`crate::AsyncClient`]),
//! which is how link events reach the pool under hosts that raise none (Slurm).
//!
//! Polling `/sys/class/net/<if>/operstate` costs a few small reads and needs no netlink
//! socket or privilege.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::bootstrap::Subnet;

/// One link that went down or up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinkChange {
    /// The interface.
    pub name: String,
    /// Its addresses with their prefixes (still assigned while the link is down).
    pub addresses: Vec<Subnet>,
    /// Up now.
    pub up: bool,
}

/// Watches interfaces' link states.
pub struct LinkMonitor {
    sysfs: PathBuf,
    states: BTreeMap<String, bool>,
}

impl LinkMonitor {
    /// Watches `names` (those sysfs knows), starting from their current states.
    pub fn new(names: impl IntoIterator<Item = String>) -> LinkMonitor {
        LinkMonitor::at(Path::new("/sys/class/net"), names)
    }

    fn at(sysfs: &Path, names: impl IntoIterator<Item = String>) -> LinkMonitor {
        let states = names
            .into_iter()
            .filter_map(|n| Some((n.clone(), link_up(sysfs, &n)?)))
            .collect();
        LinkMonitor {
            sysfs: sysfs.to_path_buf(),
            states,
        }
    }

    /// The interfaces watched.
    pub fn watched(&self) -> impl Iterator<Item = &str> {
        self.states.keys().map(String::as_str)
    }

    /// The links whose state changed since the last call.
    pub fn poll(&mut self) -> Vec<LinkChange> {
        let mut changes = Vec::new();
        for (name, was_up) in &mut self.states {
            let Some(up) = link_up(&self.sysfs, name) else {
                continue;
            };
            if up != *was_up {
                *was_up = up;
                changes.push(LinkChange {
                    name: name.clone(),
                    addresses: addresses(name),
                    up,
                });
            }
        }
        changes
    }
}

/// Whether `name`'s link is up (`operstate` `up`, or `unknown` with a carrier, as for
/// interfaces that do not report it); `None` if sysfs does not know the interface.
fn link_up(sysfs: &Path, name: &str) -> Option<bool> {
    let dir = sysfs.join(name);
    let state = std::fs::read_to_string(dir.join("operstate")).ok()?;
    Some(match state.trim() {
        "up" => true,
        "unknown" => std::fs::read_to_string(dir.join("carrier")).is_ok_and(|c| c.trim() == "1"),
        _ => false,
    })
}

/// The IPv4 and IPv6 networks of interface `name` (empty if unreadable).
fn addresses(name: &str) -> Vec<Subnet> {
    crate::bootstrap::all_addresses()
        .unwrap_or_default()
        .iter()
        .filter(|a| a.interface == name)
        .map(crate::bootstrap::InterfaceAddress::subnet)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(sysfs: &Path, name: &str, state: &str, carrier: &str) {
        let dir = sysfs.join(name);
        std::fs::create_dir_all(&dir).expect("mkdir");
        std::fs::write(dir.join("operstate"), format!("{state}\n")).expect("write");
        std::fs::write(dir.join("carrier"), format!("{carrier}\n")).expect("write");
    }

    #[test]
    fn reports_each_change_once() {
        let dir = tempfile::tempdir().expect("tempdir");
        let sysfs = dir.path();
        set(sysfs, "eth1", "up", "1");
        set(sysfs, "tun0", "unknown", "1");
        let mut m = LinkMonitor::at(sysfs, ["eth1", "tun0", "gone0"].map(String::from));
        assert_eq!(m.watched().collect::<Vec<_>>(), ["eth1", "tun0"]);
        assert!(m.poll().is_empty());
        set(sysfs, "eth1", "down", "0");
        set(sysfs, "tun0", "unknown", "0");
        let changes = m.poll();
        assert_eq!(
            changes
                .iter()
                .map(|c| (c.name.as_str(), c.up))
                .collect::<Vec<_>>(),
            [("eth1", false), ("tun0", false)]
        );
        assert!(m.poll().is_empty(), "reported once");
        set(sysfs, "eth1", "up", "1");
        assert!(m.poll()[0].up);
    }

    #[test]
    fn loopback_has_its_addresses() {
        let lo: Subnet = "127.0.0.1/8".parse().expect("subnet");
        assert!(addresses("lo").contains(&lo), "{:?}", addresses("lo"));
        assert!(addresses("no-such-if").is_empty());
    }
}
