//! Choosing the libfabric offer an endpoint opens: by capability, then by transport class,
//! restricted by the user's overrides and the NIC the inventory chose.
//!
//! Rules, in order:
//! 1. usable for the pool: an RDM endpoint with RMA (remote reads) and tagged messages;
//!    never an IPv6 link-local fabric (`fe80::/64`: unusable without a scope id);
//! 2. `MSTRO_OFI_PROVIDER` (else `FI_PROVIDER`) restricts the provider: `tcp` matches
//!    `tcp;ofi_rxm`, a full name matches exactly;
//! 3. `MSTRO_OFI_IFACE` restricts the domain (interface or device name);
//!    `MSTRO_OFI_IFACE_EXCLUDE` takes domains out (a management network kept free of data);
//! 4. shared memory only for peers on the same node ([`Scope::SameNode`]), where it wins;
//! 5. the preferred domain (the inventory's NIC for this process) before others;
//! 6. class: native RDMA hardware, then TCP (`tcp;ofi_rxm`, `net`), then UDP
//!    (`udp;ofi_rxd`), then `sockets`;
//! 7. within a class, libfabric's own order.

use serde::{Deserialize, Serialize};

use crate::discover::{EndpointType, ProviderInfo};
pub use crate::error::SelectError;
use fabric_types::{ProviderClass, provider_matches};

/// User overrides, usually from the environment.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Config {
    /// Provider restriction (`MSTRO_OFI_PROVIDER`, else `FI_PROVIDER`).
    pub provider: Option<String>,
    /// The NIC network providers must use (`MSTRO_OFI_IFACE`: interface or domain name, as
    /// the SPANK plugin sets it). Shared memory, on no NIC, stays available to same-node
    /// peers.
    pub iface: Option<String>,
    /// Interfaces (libfabric domains: the interface name for TCP and UDP, the device name
    /// for RDMA) the pool never uses (`MSTRO_OFI_IFACE_EXCLUDE`: names separated by commas
    /// or spaces, as Open MPI's `btl_tcp_if_exclude`): no endpoint opens on them, first or
    /// alternate, and a pool manager listening on every interface does not advertise
    /// their addresses, so neither data nor the control connections that may relay it
    /// cross them (a management network). Shared memory is never excluded.
    pub exclude: Vec<String>,
    /// How progress threads wait (`MSTRO_OFI_PROGRESS`: `block` or `spin`).
    pub progress: ProgressMode,
    /// Never copy straight out of another process's memory on this host ([`crate::cma`];
    /// `MSTRO_OFI_CMA=off`): same-host bytes then move by shared-memory RMA only.
    pub no_cross_memory: bool,
}

/// A malformed fabric setting in the environment.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{var}={value:?} is not valid: {expected}")]
pub struct ConfigError {
    /// The variable.
    pub var: &'static str,
    /// Its value.
    pub value: String,
    /// What it takes.
    pub expected: &'static str,
}

impl Config {
    /// Reads `MSTRO_OFI_PROVIDER` (or `FI_PROVIDER`), `MSTRO_OFI_IFACE`,
    /// `MSTRO_OFI_IFACE_EXCLUDE`, `MSTRO_OFI_PROGRESS` and `MSTRO_OFI_CMA`. Empty values
    /// count as unset.
    ///
    /// # Errors
    /// [`ConfigError`] for a `MSTRO_OFI_PROGRESS` other than `block` or `spin`, a
    /// `MSTRO_OFI_CMA` other than `on` or `off`, an excluded name that cannot be an
    /// interface's, or a `MSTRO_OFI_IFACE` that the exclusion names.
    pub fn from_env() -> Result<Config, ConfigError> {
        Config::from_lookup(|k| std::env::var(k).ok())
    }

    /// As [`Config::from_env`], with the variables' values from `lookup`.
    ///
    /// # Errors
    /// As [`Config::from_env`].
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
        let var = |k: &str| lookup(k).filter(|v| !v.trim().is_empty());
        let iface = var("MSTRO_OFI_IFACE");
        let exclude = match var("MSTRO_OFI_IFACE_EXCLUDE") {
            None => Vec::new(),
            Some(v) => parse_exclude(&v, iface.as_deref())?,
        };
        Ok(Config {
            provider: var("MSTRO_OFI_PROVIDER").or_else(|| var("FI_PROVIDER")),
            iface,
            exclude,
            progress: match var("MSTRO_OFI_PROGRESS") {
                None => ProgressMode::default(),
                Some(v) => ProgressMode::parse(&v).ok_or(ConfigError {
                    var: "MSTRO_OFI_PROGRESS",
                    value: v,
                    expected: "block (sleep when idle, the default) or spin (never sleep)",
                })?,
            },
            no_cross_memory: match var("MSTRO_OFI_CMA") {
                None => false,
                Some(v) => match v.trim().to_ascii_lowercase().as_str() {
                    // The words `MSTRO_DROP_UNKNOWN_ATTRIBUTES` takes too.
                    "on" | "1" | "yes" | "true" => false,
                    "off" | "0" | "no" | "false" => true,
                    _ => {
                        return Err(ConfigError {
                            var: "MSTRO_OFI_CMA",
                            value: v,
                            expected: "on (same-host reads copy straight from the provider's memory, the default) or off",
                        });
                    }
                },
            },
        })
    }
}

/// The names of `MSTRO_OFI_IFACE_EXCLUDE=value` (commas or spaces between them), checked:
/// each could name an interface (at most 15 bytes, no `/`, no control character), and
/// `iface` (`MSTRO_OFI_IFACE`) is not among them.
fn parse_exclude(value: &str, iface: Option<&str>) -> Result<Vec<String>, ConfigError> {
    let error = |expected| ConfigError {
        var: "MSTRO_OFI_IFACE_EXCLUDE",
        value: value.to_string(),
        expected,
    };
    let mut names: Vec<String> = Vec::new();
    for name in value.split(|c: char| c == ',' || c.is_whitespace()) {
        if name.is_empty() {
            continue;
        }
        if name.len() > 15 || name.contains('/') || name.chars().any(char::is_control) {
            return Err(error(
                "interface or device names (at most 15 bytes, no '/') separated by commas, e.g. eth0,ib1",
            ));
        }
        if iface == Some(name) {
            return Err(error(
                "names other than the one MSTRO_OFI_IFACE chooses: unset one of the two",
            ));
        }
        if !names.iter().any(|n| n == name) {
            names.push(name.to_string());
        }
    }
    Ok(names)
}

impl ProgressMode {
    /// `block` or `spin` (any case).
    pub fn parse(s: &str) -> Option<ProgressMode> {
        match s.trim().to_ascii_lowercase().as_str() {
            "block" => Some(ProgressMode::Block),
            "spin" => Some(ProgressMode::Spin),
            _ => None,
        }
    }
}

/// Who the endpoint will talk to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Only processes on this node: shared memory is best.
    SameNode,
    /// Processes on other nodes (or unknown): shared memory is excluded.
    AnyNode,
}

fn usable(o: &ProviderInfo) -> bool {
    o.endpoint == EndpointType::Rdm
        && o.caps.rma
        && o.caps.tagged
        && !o.is_ipv6_link_local()
        && ProviderClass::of(&o.provider) != ProviderClass::Other
}

/// Ranks the offers and returns them best first (never empty). `preferred` names the NIC
/// chosen for this process (its name and aliases, e.g. `ib0` and `mlx5_0`): offers on it
/// rank before the others, after shared memory for same-node scopes.
///
/// # Errors
/// [`SelectError::NoMatch`] naming the restrictions and what was available.
pub fn select(
    offers: &[ProviderInfo],
    config: &Config,
    scope: Scope,
    preferred: &[&str],
) -> Result<Vec<ProviderInfo>, SelectError> {
    let usable_offers: Vec<&ProviderInfo> = offers.iter().filter(|o| usable(o)).collect();
    let mut ranked: Vec<(usize, &ProviderInfo)> = usable_offers
        .iter()
        .copied()
        .enumerate()
        .filter(|(_, o)| {
            config
                .provider
                .as_deref()
                .is_none_or(|p| provider_matches(p, &o.provider))
        })
        .filter(|(_, o)| {
            config.iface.as_deref().is_none_or(|i| {
                o.domain == i || ProviderClass::of(&o.provider) == ProviderClass::SharedMemory
            })
        })
        .filter(|(_, o)| {
            ProviderClass::of(&o.provider) == ProviderClass::SharedMemory
                || !config.exclude.contains(&o.domain)
        })
        .filter(|(_, o)| {
            scope == Scope::SameNode
                || ProviderClass::of(&o.provider) != ProviderClass::SharedMemory
        })
        .collect();
    ranked.sort_by_key(|&(order, o)| {
        let class = ProviderClass::of(&o.provider);
        let shm_first = !(scope == Scope::SameNode && class == ProviderClass::SharedMemory);
        let not_preferred = !preferred.is_empty() && !preferred.contains(&o.domain.as_str());
        (shm_first, not_preferred, class, order)
    });
    if ranked.is_empty() {
        let mut restriction = String::new();
        if let Some(p) = &config.provider {
            restriction.push_str(&format!(" for provider {p:?}"));
        }
        if let Some(i) = &config.iface {
            restriction.push_str(&format!(" on interface {i:?}"));
        }
        if !config.exclude.is_empty() {
            restriction.push_str(&format!(" except on {}", config.exclude.join(", ")));
        }
        if scope == Scope::AnyNode {
            restriction.push_str(" reaching other nodes");
        }
        // Each (provider, domain) once, in libfabric's order (it lists one per fabric and
        // endpoint type, so the same pair comes back several times).
        let mut available: Vec<String> = Vec::new();
        for o in &usable_offers {
            let entry = format!("{} on {}", o.provider, o.domain);
            if !available.contains(&entry) {
                available.push(entry);
            }
        }
        return Err(SelectError::NoMatch {
            restriction,
            available: if available.is_empty() {
                "none".into()
            } else {
                available.join(", ")
            },
        });
    }
    Ok(ranked.into_iter().map(|(_, o)| o.clone()).collect())
}

/// How an endpoint's progress thread waits: see the module docs. `MSTRO_OFI_PROGRESS`
/// (`block` or `spin`) sets it for endpoints opened with [`crate::Config`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProgressMode {
    /// Sleep when idle (blocking wait or backoff).
    #[default]
    Block,
    /// Never sleep: poll and yield.
    Spin,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::discover::Caps;

    fn offer(provider: &str, fabric: &str, domain: &str) -> ProviderInfo {
        ProviderInfo {
            provider: provider.into(),
            fabric: fabric.into(),
            domain: domain.into(),
            endpoint: EndpointType::Rdm,
            caps: Caps {
                rma: true,
                msg: true,
                tagged: true,
                atomic: false,
            },
        }
    }

    fn offers() -> Vec<ProviderInfo> {
        let mut msg_only = offer("tcp", "127.0.0.1/32", "lo");
        msg_only.endpoint = EndpointType::Msg;
        vec![
            msg_only,
            offer("udp;ofi_rxd", "127.0.0.1/32", "lo"),
            offer("net", "fe80::/64", "eth0"),
            offer("tcp;ofi_rxm", "10.0.0.0/24", "eth0"),
            offer("tcp;ofi_rxm", "127.0.0.1/32", "lo"),
            offer("net", "10.0.0.0/24", "eth0"),
            offer("shm", "shm", "shm"),
            offer("sockets", "10.0.0.0/24", "eth0"),
            offer("verbs;ofi_rxm", "IB-0xfe80", "mlx5_0"),
        ]
    }

    fn names(v: &[ProviderInfo]) -> Vec<String> {
        v.iter()
            .map(|o| format!("{}@{}", o.provider, o.domain))
            .collect()
    }

    #[test]
    fn rdma_hardware_first_then_tcp_then_udp_and_never_link_local() {
        let r = select(&offers(), &Config::default(), Scope::AnyNode, &[]).expect("selection");
        assert_eq!(
            names(&r),
            [
                "verbs;ofi_rxm@mlx5_0",
                "tcp;ofi_rxm@eth0",
                "tcp;ofi_rxm@lo",
                "net@eth0",
                "udp;ofi_rxd@lo",
                "sockets@eth0"
            ]
        );
    }

    #[test]
    fn settings_come_from_the_environment_and_bad_values_say_what_is_expected() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(name, _)| *name == k)
                    .map(|(_, v)| (*v).to_string())
            }
        };
        let cfg = Config::from_lookup(env(&[
            ("FI_PROVIDER", "tcp"),
            ("MSTRO_OFI_IFACE", " "),
            ("MSTRO_OFI_PROGRESS", "Spin"),
            ("MSTRO_OFI_CMA", "off"),
        ]))
        .expect("valid");
        assert_eq!(cfg.provider.as_deref(), Some("tcp"));
        assert_eq!(cfg.iface, None, "blank is unset");
        assert_eq!(cfg.progress, ProgressMode::Spin);
        assert!(cfg.no_cross_memory);
        assert_eq!(Config::from_lookup(env(&[])), Ok(Config::default()));
        for (var, bad) in [
            ("MSTRO_OFI_PROGRESS", "fast"),
            ("MSTRO_OFI_CMA", "maybe"),
            ("MSTRO_OFI_IFACE_EXCLUDE", "eth0,a/b"),
            ("MSTRO_OFI_IFACE_EXCLUDE", "a-name-longer-than-15"),
        ] {
            let err = Config::from_lookup(move |k: &str| (k == var).then(|| bad.to_string()))
                .expect_err("invalid");
            assert_eq!((err.var, err.value.as_str()), (var, bad));
            assert!(
                err.to_string().contains(" or ") || err.to_string().contains("e.g."),
                "{err}"
            );
        }
        let cfg = Config::from_lookup(env(&[("MSTRO_OFI_IFACE_EXCLUDE", " eth0, ib1 eth0,")]))
            .expect("valid");
        assert_eq!(cfg.exclude, ["eth0", "ib1"]);
        let err = Config::from_lookup(env(&[
            ("MSTRO_OFI_IFACE", "eth0"),
            ("MSTRO_OFI_IFACE_EXCLUDE", "eth0"),
        ]))
        .expect_err("chosen and excluded");
        assert!(err.to_string().contains("unset one of the two"), "{err}");
    }

    #[test]
    fn same_node_prefers_shared_memory() {
        let r = select(&offers(), &Config::default(), Scope::SameNode, &[]).expect("selection");
        assert_eq!(r[0].provider, "shm");
    }

    #[test]
    fn preferred_domain_and_overrides() {
        let r = select(&offers(), &Config::default(), Scope::AnyNode, &["lo"]).expect("selection");
        assert_eq!(names(&r[..2]), ["tcp;ofi_rxm@lo", "udp;ofi_rxd@lo"]);
        let tcp = Config {
            provider: Some("tcp".into()),
            ..Config::default()
        };
        let r = select(&offers(), &tcp, Scope::AnyNode, &[]).expect("selection");
        assert!(r.iter().all(|o| o.provider == "tcp;ofi_rxm"));
        let udp_lo = Config {
            provider: Some("udp;ofi_rxd".into()),
            iface: Some("lo".into()),
            ..Config::default()
        };
        let r = select(&offers(), &udp_lo, Scope::AnyNode, &[]).expect("selection");
        assert_eq!(names(&r), ["udp;ofi_rxd@lo"]);
        // The interface restricts network providers; same-node peers keep shared memory.
        let lo = Config {
            iface: Some("lo".into()),
            ..Config::default()
        };
        let r = select(&offers(), &lo, Scope::SameNode, &[]).expect("selection");
        assert_eq!(r[0].provider, "shm", "{:?}", names(&r));
        assert!(r[1..].iter().all(|o| o.domain == "lo"), "{:?}", names(&r));
    }

    #[test]
    fn excluded_interfaces_open_nothing_but_shared_memory_stays() {
        let no_eth0 = Config {
            exclude: vec!["eth0".into()],
            ..Config::default()
        };
        let r = select(&offers(), &no_eth0, Scope::SameNode, &["eth0"]).expect("selection");
        assert_eq!(
            names(&r),
            [
                "shm@shm",
                "verbs;ofi_rxm@mlx5_0",
                "tcp;ofi_rxm@lo",
                "udp;ofi_rxd@lo"
            ]
        );
        let only_eth0 = Config {
            iface: Some("eth0".into()),
            ..no_eth0
        };
        let msg = select(&offers(), &only_eth0, Scope::AnyNode, &[])
            .expect_err("nothing left")
            .to_string();
        assert!(msg.contains("except on eth0"), "{msg}");
    }

    #[test]
    fn progress_mode_parses() {
        assert_eq!(ProgressMode::parse("SPIN"), Some(ProgressMode::Spin));
        assert_eq!(ProgressMode::parse(" block"), Some(ProgressMode::Block));
        assert_eq!(ProgressMode::parse("fast"), None);
    }

    #[test]
    fn nothing_usable_says_what_exists() {
        let cfg = Config {
            provider: Some("psm2".into()),
            ..Config::default()
        };
        let err = select(&offers(), &cfg, Scope::AnyNode, &[]).expect_err("no psm2");
        let msg = err.to_string();
        assert!(msg.contains("for provider \"psm2\""), "{msg}");
        assert!(msg.contains("tcp;ofi_rxm on lo"), "{msg}");
        // libfabric lists a pair once per fabric: the error names each pair once.
        let mut twice = offers();
        twice.extend(offers());
        let msg = select(&twice, &cfg, Scope::AnyNode, &[])
            .expect_err("no psm2")
            .to_string();
        assert_eq!(msg.matches("tcp;ofi_rxm on lo").count(), 1, "{msg}");
        let shm_only = Config {
            provider: Some("shm".into()),
            ..Config::default()
        };
        let msg = select(&offers(), &shm_only, Scope::AnyNode, &[])
            .expect_err("no shm remotely")
            .to_string();
        assert!(msg.contains("reaching other nodes"), "{msg}");
    }
}
