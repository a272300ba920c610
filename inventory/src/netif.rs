//! The host's network interfaces: their addresses and networks (`getifaddrs`), whether their
//! links are usable (the one definition, [`link_usable`]), and a monitor that reports link
//! changes.
//!
//! Used by the inventory (link state of NICs), the pool manager (which addresses to
//! advertise), pool clients (the network of their fabric endpoint, link changes reported to
//! the PM) and `maestro run` (which raises PMIx `PMIX_FABRIC_UPDATED` on link changes).
//! Polling `/sys/class/net/<if>/operstate` costs a few small reads and needs no netlink
//! socket or privilege.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use ipnet::IpNet;

/// One address of a network interface.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InterfaceAddress {
    /// The interface name.
    pub interface: String,
    /// The address (IPv4 or IPv6).
    pub address: IpAddr,
    /// The prefix length of its network (from the netmask).
    pub prefix: u8,
    /// Whether the interface is administratively up.
    pub up: bool,
}

impl InterfaceAddress {
    /// The network the address is on, with the address (`10.1.0.1/24`).
    pub fn subnet(&self) -> IpNet {
        IpNet::new(self.address, self.prefix).unwrap_or_else(|_| IpNet::from(self.address))
    }
}

/// Every IPv4 and IPv6 address of every interface of this host (`getifaddrs`), in the
/// kernel's order.
///
/// # Errors
/// The OS error of `getifaddrs`.
pub fn all_addresses() -> std::io::Result<Vec<InterfaceAddress>> {
    use nix::net::if_::InterfaceFlags;
    let list = nix::ifaddrs::getifaddrs().map_err(std::io::Error::from)?;
    Ok(list
        .filter_map(|ifa| {
            let address = ip_of(ifa.address.as_ref()?)?;
            let prefix = match ifa.netmask.as_ref().and_then(ip_of) {
                Some(mask) => prefix_of(mask),
                None if address.is_ipv4() => 32,
                None => 128,
            };
            Some(InterfaceAddress {
                interface: ifa.interface_name,
                address,
                prefix,
                up: ifa.flags.contains(InterfaceFlags::IFF_UP),
            })
        })
        .collect())
}

/// The IP address of a socket address of family `AF_INET` or `AF_INET6`.
fn ip_of(sa: &nix::sys::socket::SockaddrStorage) -> Option<IpAddr> {
    if let Some(v4) = sa.as_sockaddr_in() {
        return Some(v4.ip().into());
    }
    sa.as_sockaddr_in6().map(|v6| v6.ip().into())
}

/// The prefix length of a netmask (its leading one bits).
fn prefix_of(mask: IpAddr) -> u8 {
    let ones = match mask {
        IpAddr::V4(m) => m.to_bits().leading_ones(),
        IpAddr::V6(m) => m.to_bits().leading_ones(),
    };
    ones as u8
}

/// The addresses of interfaces that are up, IPv4 only, loopback last, those of the
/// interfaces named in `except` left out (a pool manager listening on `0.0.0.0`
/// advertises these; link-local 169.254/16 is left out too).
///
/// # Errors
/// The OS error of `getifaddrs`.
pub fn interface_addresses(except: &[String]) -> std::io::Result<Vec<IpAddr>> {
    let mut out: Vec<IpAddr> = all_addresses()?
        .into_iter()
        .filter(|a| !except.contains(&a.interface))
        .filter_map(|a| match a.address {
            IpAddr::V4(ip) if a.up && !ip.is_link_local() => Some(ip.into()),
            _ => None,
        })
        .collect();
    out.sort_by_key(|ip| (ip.is_loopback(), *ip));
    out.dedup();
    Ok(out)
}

/// Whether this process's network namespace has an interface named `name`, or the
/// machine an RDMA device of that name (`/sys/class/infiniband`).
pub fn interface_exists(name: &str) -> bool {
    let Ok(c) = std::ffi::CString::new(name) else {
        return false;
    };
    // SAFETY: a NUL-terminated name; if_nametoindex only reads it.
    let index = unsafe { libc::if_nametoindex(c.as_ptr()) };
    index != 0
        || std::path::Path::new("/sys/class/infiniband")
            .join(name)
            .exists()
}

/// The addresses (IPv4 and IPv6, not link-local) of the interfaces named `names` (a NIC
/// and its aliases), in the kernel's order; empty when none has one.
pub fn addresses_of(names: &[&str]) -> Vec<IpAddr> {
    let link_local = |ip: &IpAddr| match ip {
        IpAddr::V4(v4) => v4.is_link_local(),
        IpAddr::V6(v6) => v6.is_unicast_link_local(),
    };
    all_addresses()
        .unwrap_or_default()
        .into_iter()
        .filter(|a| names.contains(&a.interface.as_str()) && !link_local(&a.address))
        .map(|a| a.address)
        .collect()
}

/// The networks of interface `name`, with its addresses (empty if unknown or unreadable).
pub fn networks_of(name: &str) -> Vec<IpNet> {
    all_addresses()
        .unwrap_or_default()
        .iter()
        .filter(|a| a.interface == name)
        .map(InterfaceAddress::subnet)
        .collect()
}

/// The network of the interface that has address `ip`, when this host has it.
pub fn network_with(ip: IpAddr) -> Option<IpNet> {
    all_addresses()
        .ok()?
        .iter()
        .find(|a| a.address == ip)
        .map(InterfaceAddress::subnet)
}

/// Traffic counters of a network interface since it came up (the kernel's
/// `/sys/class/net/NAME/statistics`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Bytes received.
    pub rx_bytes: u64,
    /// Bytes sent.
    pub tx_bytes: u64,
    /// Packets received.
    pub rx_packets: u64,
    /// Packets sent.
    pub tx_packets: u64,
    /// Receive errors.
    pub rx_errors: u64,
    /// Send errors.
    pub tx_errors: u64,
}

/// The traffic counters of interface `name` now; `None` when it is no network interface
/// of this machine (an RDMA device name, say) or the kernel does not say.
pub fn counters(name: &str) -> Option<Counters> {
    if name.is_empty() || name.contains('/') || name.starts_with('.') {
        return None;
    }
    let dir = std::path::Path::new("/sys/class/net")
        .join(name)
        .join("statistics");
    let read = |f: &str| -> Option<u64> {
        std::fs::read_to_string(dir.join(f))
            .ok()?
            .trim()
            .parse()
            .ok()
    };
    Some(Counters {
        rx_bytes: read("rx_bytes")?,
        tx_bytes: read("tx_bytes")?,
        rx_packets: read("rx_packets")?,
        tx_packets: read("tx_packets")?,
        rx_errors: read("rx_errors")?,
        tx_errors: read("tx_errors")?,
    })
}

/// Whether a link is usable, from what the kernel says (`/sys/class/net/<if>/operstate`
/// and `carrier`). The one rule of the project: `up` is usable; `unknown` (loopback, tun
/// and drivers that do not track it) is usable when the carrier is on; no state at all
/// (a topology from a file) is usable unless the carrier is known to be off; every other
/// state (`down`, `lowerlayerdown`, `notpresent`, `dormant`, `testing`) is not.
pub fn link_usable(operstate: Option<&str>, carrier: Option<bool>) -> bool {
    match operstate.map(str::trim) {
        Some("up") => true,
        Some("unknown") => carrier == Some(true),
        None => carrier != Some(false),
        Some(_) => false,
    }
}

/// The link state and carrier of interface directory `dir` in sysfs; `None` if sysfs does
/// not know the interface. (Reading `carrier` fails while the interface is down.)
pub(crate) fn read_link(dir: &Path) -> Option<(String, Option<bool>)> {
    let state = std::fs::read_to_string(dir.join("operstate")).ok()?;
    let carrier = std::fs::read_to_string(dir.join("carrier"))
        .ok()
        .map(|c| c.trim() == "1");
    Some((state.trim().to_string(), carrier))
}

/// Whether `name`'s link is usable ([`link_usable`]); `None` if sysfs does not know it.
fn link_up(sysfs: &Path, name: &str) -> Option<bool> {
    let (state, carrier) = read_link(&sysfs.join(name))?;
    Some(link_usable(Some(&state), carrier))
}

/// One link that went down or up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinkChange {
    /// The interface.
    pub name: String,
    /// Its addresses with their prefixes (still assigned while the link is down).
    pub addresses: Vec<IpNet>,
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
                    addresses: networks_of(name),
                    up,
                });
            }
        }
        changes
    }
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
        let lo: IpNet = "127.0.0.1/8".parse().expect("subnet");
        assert!(networks_of("lo").contains(&lo), "{:?}", networks_of("lo"));
        assert!(networks_of("no-such-if").is_empty());
        assert_eq!(network_with("127.0.0.1".parse().expect("ip")), Some(lo));
    }

    #[test]
    fn interfaces_include_loopback_last() {
        let ips = interface_addresses(&[]).expect("getifaddrs");
        assert_eq!(
            ips.last(),
            Some(&"127.0.0.1".parse().expect("ip")),
            "{ips:?}"
        );
        let no_lo = interface_addresses(&["lo".into()]).expect("getifaddrs");
        assert!(no_lo.iter().all(|ip| !ip.is_loopback()), "{no_lo:?}");
    }

    #[test]
    fn netmasks_give_prefixes() {
        let p = |m: &str| prefix_of(m.parse().expect("mask"));
        assert_eq!(p("255.255.255.0"), 24);
        assert_eq!(p("255.255.240.0"), 20);
        assert_eq!(p("0.0.0.0"), 0);
        assert_eq!(p("ffff:ffff:ffff:ffff::"), 64);
    }

    #[test]
    fn one_rule_for_usable_links() {
        assert!(link_usable(Some("up"), None));
        assert!(link_usable(Some("unknown"), Some(true)));
        assert!(!link_usable(Some("unknown"), Some(false)));
        assert!(
            !link_usable(Some("unknown"), None),
            "admin down: no carrier file"
        );
        assert!(link_usable(None, None), "a topology file says nothing");
        assert!(!link_usable(None, Some(false)));
        for down in ["down", "lowerlayerdown", "notpresent", "dormant"] {
            assert!(!link_usable(Some(down), Some(true)), "{down}");
        }
    }
}
