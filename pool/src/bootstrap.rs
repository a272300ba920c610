//! Finding the pool manager: its *PM info*, a versioned text that carries the workflow name,
//! the PM's control endpoints and the workflow secret.
//!
//! - Inside one PMIx job it travels with `PMIx_Put` under [`PM_INFO_KEY`] ([`announce`])
//!   and a collecting fence, after which every rank reads it ([`read_announced`]).
//! - Across jobs, [`announce`] also publishes it (`PMIx_Publish`, global range) under
//!   [`published_key`] of the workflow, and another job's processes find it with
//!   [`lookup`]. Hosts differ: `maestro run` shares published data between the jobs of
//!   one user on a node; Open MPI's `mpirun` within its DVM; Slurm has no publish at all.
//! - Otherwise it comes from `MSTRO_POOL_MANAGER_INFO` (the PM prints it as
//!   `MSTRO_POOL_MANAGER_INFO;<info>;`, as Maestro Core does) or a file.
//!
//! Format: `mstro-pm-v1:<workflow as hex>:<addr>[,<addr>...]:<secret as hex>`. The secret
//! admits whoever holds the info: keep it to the job (PMIx data stays within the job's
//! user) and files holding it private.

use std::net::SocketAddr;

/// The PMIx key under which the PM info is put.
pub const PM_INFO_KEY: &str = "maestro.pool.pm-info";
/// The environment variable with the PM info, outside one PMIx job.
pub const PM_INFO_ENV: &str = "MSTRO_POOL_MANAGER_INFO";
const PREFIX: &str = "mstro-pm-v1";

/// The key under which [`announce`] publishes a workflow's PM info for other jobs.
pub fn published_key(workflow: &str) -> String {
    format!("{PM_INFO_KEY}.{workflow}")
}

/// Why the PM info could not be announced or found through PMIx.
#[derive(Debug, thiserror::Error)]
pub enum BootstrapError {
    /// A PMIx call failed (see the PMIx error for what to do).
    #[error("PM info through PMIx: {0}")]
    Pmix(#[from] pmix::Error),
    /// The value found is not a valid PM info.
    #[error("PM info found through PMIx is malformed: {0}")]
    Info(#[from] PmInfoError),
    /// The value found is not a string.
    #[error(
        "the PMIx key {0:?} does not hold a string; another program uses it: rename the workflow (MSTRO_WORKFLOW_NAME)"
    )]
    NotAString(String),
}

/// How far [`announce`] reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reach {
    /// The processes of this job (after their collecting fence): the host cannot publish.
    Job,
    /// The processes of this job only: another job already published a pool manager for
    /// this workflow name (its users keep finding that one).
    JobBecauseTaken,
    /// This job and other jobs that [`lookup`] the workflow.
    OtherJobs,
}

impl std::fmt::Display for Reach {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Reach::Job => "this job (the PMIx host cannot publish to other jobs)",
            Reach::JobBecauseTaken => {
                "this job only (another job already published a pool manager for this workflow name)"
            }
            Reach::OtherJobs => "this job and other jobs",
        })
    }
}

/// Puts `info` for this job (`PMIx_Put` global scope + `Commit`: the job's ranks read it
/// with [`read_announced`] after a collecting fence) and publishes it for other jobs where
/// the host supports `PMIx_Publish`.
///
/// # Errors
/// [`BootstrapError::Pmix`] if the put or commit fails, or the publish fails for another
/// reason than lack of support or a name another job holds (see [`Reach`]).
pub fn announce(
    client: &pmix::Client,
    info: &PmInfo,
    timeout: std::time::Duration,
) -> Result<Reach, BootstrapError> {
    let text = pmix::Value::String(info.encode());
    client.put(pmix::Scope::Global, PM_INFO_KEY, &text)?;
    client.commit()?;
    let data = [pmix::Info::new(published_key(&info.workflow), text)];
    match client.publish(&data, pmix::Range::Global, timeout) {
        Ok(()) => Ok(Reach::OtherJobs),
        Err(pmix::Error::NotSupported { .. }) => Ok(Reach::Job),
        Err(pmix::Error::Pmix { status, .. }) if status == pmix::Status::DUPLICATE_KEY => {
            Ok(Reach::JobBecauseTaken)
        }
        Err(e) => Err(e.into()),
    }
}

/// Reads the PM info that `root` [`announce`]d; call it after a collecting fence.
///
/// # Errors
/// [`BootstrapError`] if the key is missing or malformed.
pub fn read_announced(client: &pmix::Client, root: &pmix::Proc) -> Result<PmInfo, BootstrapError> {
    let value = client.get(root, PM_INFO_KEY, pmix::GetOptions::default())?;
    let text = value
        .as_str()
        .ok_or_else(|| BootstrapError::NotAString(PM_INFO_KEY.into()))?;
    Ok(PmInfo::parse(text)?)
}

/// Looks for the PM info of `workflow` that another job published. With `wait`, waits up
/// to that long for it to appear; without, answers at once. `Ok(None)`: nobody published
/// it (within `wait`), or the host has no publish/lookup (Slurm).
///
/// # Errors
/// [`BootstrapError`] for other PMIx failures or a malformed value.
pub fn lookup(
    client: &pmix::Client,
    workflow: &str,
    wait: Option<std::time::Duration>,
) -> Result<Option<PmInfo>, BootstrapError> {
    let key = published_key(workflow);
    match client.lookup(&[&key], wait) {
        Ok(found) => {
            let Some(p) = found.into_iter().find(|p| p.key == key) else {
                return Ok(None);
            };
            let text = p.value.as_str().ok_or(BootstrapError::NotAString(key))?;
            Ok(Some(PmInfo::parse(text)?))
        }
        Err(
            pmix::Error::NotFound { .. }
            | pmix::Error::NotSupported { .. }
            | pmix::Error::Timeout { .. },
        ) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// One control endpoint of the pool manager.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ControlAddr {
    /// A TCP address (any host that can route to it).
    Tcp(SocketAddr),
    /// A Unix socket (processes on the PM's host; in the PM info it comes first, and
    /// elsewhere connecting to it fails at once and the next endpoint is tried).
    Unix(std::path::PathBuf),
}

impl std::fmt::Display for ControlAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ControlAddr::Tcp(a) => write!(f, "{a}"),
            ControlAddr::Unix(p) => write!(f, "unix:{}", p.display()),
        }
    }
}

impl From<SocketAddr> for ControlAddr {
    fn from(a: SocketAddr) -> ControlAddr {
        ControlAddr::Tcp(a)
    }
}

impl ControlAddr {
    /// The form inside the PM info: `ip:port`, or `unix=<path as hex>` (paths may hold
    /// the info's separators).
    fn encode(&self) -> String {
        use std::os::unix::ffi::OsStrExt;
        match self {
            ControlAddr::Tcp(a) => a.to_string(),
            ControlAddr::Unix(p) => format!("unix={}", hex::encode(p.as_os_str().as_bytes())),
        }
    }

    fn decode(s: &str) -> Result<ControlAddr, PmInfoError> {
        use std::os::unix::ffi::OsStrExt;
        match s.strip_prefix("unix=") {
            Some(h) => {
                let bytes = unhex(h, "unix socket path")?;
                Ok(ControlAddr::Unix(
                    std::ffi::OsStr::from_bytes(&bytes).into(),
                ))
            }
            None => s
                .parse()
                .map(ControlAddr::Tcp)
                .map_err(|_| PmInfoError::Endpoint(s.to_string())),
        }
    }
}

/// Where the pool manager is and how to prove membership.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PmInfo {
    /// The workflow name.
    pub workflow: String,
    /// The PM's control endpoints, tried in order.
    pub endpoints: Vec<ControlAddr>,
    /// The workflow secret.
    pub secret: Vec<u8>,
}

/// Why a PM info string was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PmInfoError {
    /// Not `mstro-pm-v1:...` with four fields.
    #[error(
        "PM info {0:?} is not of the form mstro-pm-v1:<workflow>:<addrs>:<secret>; copy it whole from the pool manager's output"
    )]
    Format(String),
    /// A field is not valid hex or UTF-8.
    #[error("PM info field {field} is not valid hex{utf8}")]
    Hex {
        /// The field.
        field: &'static str,
        /// Whether UTF-8 was expected too.
        utf8: &'static str,
    },
    /// An endpoint is not `ip:port` or `unix=<hex path>`.
    #[error("PM info endpoint {0:?} is not ip:port or unix=<path as hex>")]
    Endpoint(String),
    /// No endpoint, or an empty secret.
    #[error("PM info has no {0}")]
    Missing(&'static str),
}

fn unhex(s: &str, field: &'static str) -> Result<Vec<u8>, PmInfoError> {
    hex::decode(s).map_err(|_| PmInfoError::Hex { field, utf8: "" })
}

impl PmInfo {
    /// The text form.
    pub fn encode(&self) -> String {
        let addrs: Vec<String> = self.endpoints.iter().map(ControlAddr::encode).collect();
        format!(
            "{PREFIX}:{}:{}:{}",
            hex::encode(self.workflow.as_bytes()),
            addrs.join(","),
            hex::encode(&self.secret)
        )
    }

    /// Parses the text form (surrounding whitespace and the `MSTRO_POOL_MANAGER_INFO;…;`
    /// wrapper the PM prints are accepted).
    ///
    /// # Errors
    /// [`PmInfoError`] naming the field that is wrong.
    pub fn parse(s: &str) -> Result<PmInfo, PmInfoError> {
        let s = s.trim();
        let s = s
            .strip_prefix(&format!("{PM_INFO_ENV};"))
            .map(|r| r.trim_end_matches(';'))
            .unwrap_or(s);
        let parts: Vec<&str> = s.split(':').collect();
        // IPv6 endpoints contain ':' too: the last field is the secret, the second the name.
        if parts.len() < 4 || parts[0] != PREFIX {
            return Err(PmInfoError::Format(s.chars().take(80).collect()));
        }
        let workflow =
            String::from_utf8(unhex(parts[1], "workflow")?).map_err(|_| PmInfoError::Hex {
                field: "workflow",
                utf8: " UTF-8",
            })?;
        let secret = unhex(parts[parts.len() - 1], "secret")?;
        let addrs = parts[2..parts.len() - 1].join(":");
        let endpoints = addrs
            .split(',')
            .filter(|a| !a.is_empty())
            .map(ControlAddr::decode)
            .collect::<Result<Vec<_>, _>>()?;
        if endpoints.is_empty() {
            return Err(PmInfoError::Missing("endpoint"));
        }
        if secret.is_empty() {
            return Err(PmInfoError::Missing("secret"));
        }
        Ok(PmInfo {
            workflow,
            endpoints,
            secret,
        })
    }

    /// Reads `MSTRO_POOL_MANAGER_INFO`; `None` when unset or empty.
    ///
    /// # Errors
    /// [`PmInfoError`] for a malformed value.
    pub fn from_env() -> Result<Option<PmInfo>, PmInfoError> {
        match std::env::var(PM_INFO_ENV) {
            Ok(v) if !v.trim().is_empty() => PmInfo::parse(&v).map(Some),
            _ => Ok(None),
        }
    }
}

/// The IPv4 addresses of this host's interfaces that are up, other interfaces before
/// loopback (a PM listening on `0.0.0.0` advertises these; link-local 169.254/16 is left out).
///
/// # Errors
/// The OS error of `getifaddrs`.
pub fn interface_addresses() -> std::io::Result<Vec<std::net::IpAddr>> {
    let mut out: Vec<std::net::IpAddr> = all_addresses()?
        .into_iter()
        .filter_map(|a| match a.address {
            std::net::IpAddr::V4(ip) if a.up && !ip.is_link_local() => Some(ip.into()),
            _ => None,
        })
        .collect();
    out.sort_by_key(|ip| (ip.is_loopback(), *ip));
    out.dedup();
    Ok(out)
}

/// One address of a network interface.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InterfaceAddress {
    /// The interface name.
    pub interface: String,
    /// The address (IPv4 or IPv6).
    pub address: std::net::IpAddr,
    /// The prefix length of its network (from the netmask).
    pub prefix: u8,
    /// Whether the interface is administratively up.
    pub up: bool,
}

impl InterfaceAddress {
    /// The network the address is on.
    pub fn subnet(&self) -> Subnet {
        Subnet {
            address: self.address,
            prefix: self.prefix,
        }
    }
}

/// An IP network: an address and a prefix length (`10.1.0.1/24`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Subnet {
    /// An address in the network.
    pub address: std::net::IpAddr,
    /// The prefix length (at most 32 for IPv4, 128 for IPv6).
    pub prefix: u8,
}

impl Subnet {
    /// Whether `ip` is in this network.
    pub fn contains(&self, ip: std::net::IpAddr) -> bool {
        use std::net::IpAddr::{V4, V6};
        let (a, b, bits) = match (self.address, ip) {
            (V4(a), V4(b)) => (u128::from(a.to_bits()), u128::from(b.to_bits()), 32),
            (V6(a), V6(b)) => (a.to_bits(), b.to_bits(), 128),
            _ => return false,
        };
        let prefix = u32::from(self.prefix).min(bits);
        let shift = bits - prefix;
        shift >= 128 || (a >> shift) == (b >> shift)
    }
}

impl std::fmt::Display for Subnet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.address, self.prefix)
    }
}

impl std::str::FromStr for Subnet {
    type Err = String;

    /// `ip/prefix`, or a bare `ip` (the single host).
    fn from_str(s: &str) -> Result<Subnet, String> {
        let (ip, prefix) = match s.split_once('/') {
            Some((ip, p)) => (ip, Some(p)),
            None => (s, None),
        };
        let address: std::net::IpAddr = ip
            .parse()
            .map_err(|_| format!("{s:?} is not an IP address or ip/prefix"))?;
        let max = if address.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => max,
            Some(p) => p
                .parse::<u8>()
                .ok()
                .filter(|p| *p <= max)
                .ok_or_else(|| format!("{s:?}: the prefix must be 0 to {max}"))?,
        };
        Ok(Subnet { address, prefix })
    }
}

/// The prefix length of a netmask (its leading one bits).
fn prefix_of(mask: &[u8]) -> u8 {
    let mut n = 0;
    for b in mask {
        n += b.leading_ones();
        if *b != 0xff {
            break;
        }
    }
    n as u8
}

/// Every IPv4 and IPv6 address of every interface of this host (`getifaddrs`), in the
/// kernel's order.
///
/// # Errors
/// The OS error of `getifaddrs`.
pub fn all_addresses() -> std::io::Result<Vec<InterfaceAddress>> {
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `list`, freed below with freeifaddrs.
    if unsafe { libc::getifaddrs(&mut list) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut out = Vec::new();
    let mut at = list;
    while !at.is_null() {
        // SAFETY: a node of the list getifaddrs returned.
        let ifa = unsafe { &*at };
        at = ifa.ifa_next;
        if ifa.ifa_addr.is_null() || ifa.ifa_name.is_null() {
            continue;
        }
        let Some(address) = ip_of(ifa.ifa_addr) else {
            continue;
        };
        let prefix = match ip_of(ifa.ifa_netmask) {
            Some(std::net::IpAddr::V4(m)) => prefix_of(&m.octets()),
            Some(std::net::IpAddr::V6(m)) => prefix_of(&m.octets()),
            None if address.is_ipv4() => 32,
            None => 128,
        };
        out.push(InterfaceAddress {
            // SAFETY: ifa_name is a NUL-terminated string of the list.
            interface: unsafe { std::ffi::CStr::from_ptr(ifa.ifa_name) }
                .to_string_lossy()
                .into_owned(),
            address,
            prefix,
            up: ifa.ifa_flags & (libc::IFF_UP as u32) != 0,
        });
    }
    // SAFETY: the list from getifaddrs, freed once.
    unsafe { libc::freeifaddrs(list) };
    Ok(out)
}

/// The IP address in a `sockaddr` of family `AF_INET` or `AF_INET6`; `None` for NULL or
/// other families.
fn ip_of(sa: *const libc::sockaddr) -> Option<std::net::IpAddr> {
    if sa.is_null() {
        return None;
    }
    // SAFETY: a non-null sockaddr from getifaddrs, read as its family says.
    unsafe {
        match i32::from((*sa).sa_family) {
            libc::AF_INET => {
                let sin = &*(sa as *const libc::sockaddr_in);
                Some(u32::from_be(sin.sin_addr.s_addr).to_be_bytes().into())
            }
            libc::AF_INET6 => {
                let sin6 = &*(sa as *const libc::sockaddr_in6);
                Some(sin6.sin6_addr.s6_addr.into())
            }
            _ => None,
        }
    }
}

/// A fresh 256-bit workflow secret from the OS.
///
/// # Errors
/// When the OS random source fails.
pub fn new_secret() -> std::io::Result<Vec<u8>> {
    let mut s = vec![0u8; 32];
    getrandom::fill(&mut s).map_err(|e| std::io::Error::other(format!("OS random source: {e}")))?;
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_including_ipv6_and_odd_names() {
        let info = PmInfo {
            workflow: "climate:run;7 ü".into(),
            endpoints: vec![
                ControlAddr::Unix("/tmp/odd:dir,name/pm.sock".into()),
                ControlAddr::Tcp("127.0.0.1:4000".parse().expect("v4")),
                ControlAddr::Tcp("[::1]:4001".parse().expect("v6")),
            ],
            secret: vec![1, 2, 255],
        };
        let text = info.encode();
        assert_eq!(PmInfo::parse(&text), Ok(info.clone()));
        assert_eq!(
            PmInfo::parse(&format!("  {PM_INFO_ENV};{text};\n")),
            Ok(info)
        );
    }

    #[test]
    fn subnets_parse_and_contain() {
        let s: Subnet = "10.1.0.1/24".parse().expect("subnet");
        assert!(s.contains("10.1.0.200".parse().expect("ip")));
        assert!(!s.contains("10.1.1.1".parse().expect("ip")));
        assert!(!s.contains("::1".parse().expect("ip")));
        let host: Subnet = "fd00::2".parse().expect("host");
        assert_eq!(host.prefix, 128);
        assert!(host.contains("fd00::2".parse().expect("ip")));
        assert!(!host.contains("fd00::3".parse().expect("ip")));
        let all: Subnet = "0.0.0.0/0".parse().expect("all");
        assert!(all.contains("192.0.2.7".parse().expect("ip")));
        assert_eq!(s.to_string(), "10.1.0.1/24");
        for bad in ["10.1.0.1/33", "x/2", "10.1.0.1/", "::1/129"] {
            assert!(bad.parse::<Subnet>().is_err(), "{bad}");
        }
        assert_eq!(prefix_of(&[255, 255, 255, 0]), 24);
        assert_eq!(prefix_of(&[255, 255, 240, 0]), 20);
        assert_eq!(prefix_of(&[0; 4]), 0);
    }

    #[test]
    fn interfaces_include_loopback_last() {
        let ips = interface_addresses().expect("getifaddrs");
        assert_eq!(
            ips.last(),
            Some(&"127.0.0.1".parse().expect("ip")),
            "{ips:?}"
        );
    }

    #[test]
    fn malformed_info_is_a_typed_error() {
        assert!(matches!(PmInfo::parse(""), Err(PmInfoError::Format(_))));
        assert!(matches!(
            PmInfo::parse("mstro-pm-v2:00:1.2.3.4:5:00"),
            Err(PmInfoError::Format(_))
        ));
        assert!(matches!(
            PmInfo::parse("mstro-pm-v1:zz:127.0.0.1:1:00"),
            Err(PmInfoError::Hex {
                field: "workflow",
                ..
            })
        ));
        assert!(matches!(
            PmInfo::parse("mstro-pm-v1:ff:127.0.0.1:1:00"),
            Err(PmInfoError::Hex { utf8: " UTF-8", .. })
        ));
        assert!(matches!(
            PmInfo::parse("mstro-pm-v1:61:nohost:00"),
            Err(PmInfoError::Endpoint(_))
        ));
        assert!(matches!(
            PmInfo::parse("mstro-pm-v1:61:unix=2f7:00"),
            Err(PmInfoError::Hex {
                field: "unix socket path",
                ..
            })
        ));
        assert!(matches!(
            PmInfo::parse("mstro-pm-v1:61::00"),
            Err(PmInfoError::Missing("endpoint"))
        ));
        assert!(matches!(
            PmInfo::parse("mstro-pm-v1:61:127.0.0.1:1:"),
            Err(PmInfoError::Missing("secret"))
        ));
        assert!(matches!(
            PmInfo::parse("mstro-pm-v1:61:127.0.0.1:1:0"),
            Err(PmInfoError::Hex {
                field: "secret",
                ..
            })
        ));
    }
}
