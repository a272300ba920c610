//! Provider names as libfabric reports them (`tcp;ofi_rxm`, `shm`, `verbs;ofi_rxm`).

use serde::{Deserialize, Serialize};

/// The transport family of a provider, by its core (first) component: `verbs;ofi_rxm` is
/// native RDMA, `tcp;ofi_rxm` and `net` are TCP, `udp;ofi_rxd` is UDP. Declared best first,
/// so the derived order ranks them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ProviderClass {
    /// RDMA hardware: verbs, cxi (Slingshot), efa, psm2/psm3/opx (Omni-Path), usnic.
    NativeRdma,
    /// Reliable datagrams over TCP: `tcp;ofi_rxm`, `net`.
    Tcp,
    /// Reliable datagrams over UDP: `udp;ofi_rxd`.
    Udp,
    /// The old `sockets` provider (slow, last resort).
    Sockets,
    /// Shared memory within one node: `shm`, `sm2`.
    SharedMemory,
    /// Anything else (hooks, unknown providers).
    Other,
}

/// The core (first) component of a provider name: `tcp` of `tcp;ofi_rxm`.
fn core(provider: &str) -> &str {
    provider.split(';').next().unwrap_or("").trim()
}

impl ProviderClass {
    /// Classifies a provider name as libfabric reports it (case does not matter).
    /// No allocation: the pool manager asks for each transfer it plans.
    pub fn of(provider: &str) -> ProviderClass {
        const CLASSES: [(&[&str], ProviderClass); 5] = [
            (
                &["verbs", "cxi", "efa", "psm", "psm2", "psm3", "opx", "usnic"],
                ProviderClass::NativeRdma,
            ),
            (&["tcp", "net"], ProviderClass::Tcp),
            (&["udp"], ProviderClass::Udp),
            (&["sockets"], ProviderClass::Sockets),
            (&["shm", "sm2"], ProviderClass::SharedMemory),
        ];
        let core = core(provider);
        CLASSES
            .iter()
            .find(|(names, _)| names.iter().any(|n| n.eq_ignore_ascii_case(core)))
            .map_or(ProviderClass::Other, |&(_, class)| class)
    }
}

impl std::fmt::Display for ProviderClass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ProviderClass::NativeRdma => "native RDMA",
            ProviderClass::Tcp => "TCP",
            ProviderClass::Udp => "UDP",
            ProviderClass::Sockets => "sockets",
            ProviderClass::SharedMemory => "shared memory",
            ProviderClass::Other => "other",
        })
    }
}

/// Whether a user's provider name (`MSTRO_OFI_PROVIDER`, `--provider`) names `provider`:
/// the whole name (`tcp;ofi_rxm`) or its core (`tcp`), case ignored. The one rule for
/// matching provider names everywhere in the project.
pub fn provider_matches(wanted: &str, provider: &str) -> bool {
    let wanted = wanted.trim();
    provider.trim().eq_ignore_ascii_case(wanted) || core(provider).eq_ignore_ascii_case(wanted)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_follow_the_core_provider() {
        assert_eq!(
            ProviderClass::of("verbs;ofi_rxm"),
            ProviderClass::NativeRdma
        );
        assert_eq!(ProviderClass::of("cxi"), ProviderClass::NativeRdma);
        assert_eq!(ProviderClass::of("tcp;ofi_rxm"), ProviderClass::Tcp);
        assert_eq!(ProviderClass::of("NET"), ProviderClass::Tcp);
        assert_eq!(ProviderClass::of("udp;ofi_rxd"), ProviderClass::Udp);
        assert_eq!(ProviderClass::of("shm"), ProviderClass::SharedMemory);
        assert_eq!(ProviderClass::of("ofi_hook_perf"), ProviderClass::Other);
        assert!(
            ProviderClass::NativeRdma < ProviderClass::Tcp
                && ProviderClass::Tcp < ProviderClass::Udp
        );
    }

    #[test]
    fn names_match_whole_or_by_their_core_in_any_case() {
        assert!(provider_matches("tcp", "tcp;ofi_rxm"));
        assert!(provider_matches("TCP;OFI_RXM", "tcp;ofi_rxm"));
        assert!(provider_matches("shm", "shm"));
        assert!(!provider_matches("ofi_rxm", "tcp;ofi_rxm"));
        assert!(!provider_matches("tc", "tcp;ofi_rxm"));
    }
}
