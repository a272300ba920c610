//! Who sends a JOIN, beyond the workflow secret it proves: the trust model's evidence.
//!
//! Anyone holding the PM info (the secret) may join, from any job, launcher, allocation or
//! host of the workflow's user; nobody else. The secret is always required; what the PM
//! can learn of the sender may only refuse it:
//! - a peer on the PM's Unix socket, or over TCP from this host (loopback or any of its
//!   addresses), is a process of this host: the kernel names its user (`SO_PEERCRED`,
//!   its TCP socket table, in any TCP state a process still holds); another user's is refused
//!   whatever it holds, and so is a local end no process can be matched to (one that shut
//!   down or closed before its JOIN was checked: nothing proves whose it was);
//! - a JOIN's PMIx credential is shown to the PM's PMIx host: valid for another user, or
//!   called forged or expired, refuses; one the host cannot check (another `maestro run`'s,
//!   no host) is no evidence, for an honest component of another job must be able to join;
//! - a peer on another host with nothing checkable: the secret alone decides.

use std::net::SocketAddr;

use super::CredentialVerdict;
use crate::Identity;
use crate::peers::PeerEnd;

/// Where the kernel's word on a peer's user comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum PeerUser {
    /// Said at accept (a Unix socket's `SO_PEERCRED`; `None` if the kernel did not).
    Known(Option<u32>),
    /// A TCP connection accepted on `server` from `peer`: asked of the kernel's TCP
    /// socket table when its JOIN comes (a peer of this host is in it, one of another
    /// host is not; see [`crate::peers`]).
    Tcp {
        /// The PM's end.
        server: SocketAddr,
        /// The peer's end.
        peer: SocketAddr,
    },
}

impl PeerUser {
    /// The kernel's word on the peer (blocking: may read the TCP socket table and the host's
    /// interfaces). A Unix socket whose peer the kernel did not name, or tables that cannot
    /// be read, leave a local peer unmatched.
    pub(super) fn resolve(self) -> PeerEnd {
        match self {
            PeerUser::Known(Some(uid)) => PeerEnd::Owner(uid),
            PeerUser::Known(None) => PeerEnd::Unmatched,
            PeerUser::Tcp { server, peer } => {
                match crate::peers::peer_end(server, peer, crate::peers::is_host_address) {
                    Ok(end) => end,
                    Err(e) => {
                        tracing::warn!(
                            "pool manager: cannot tell which user connected from {peer} ({e})"
                        );
                        if crate::peers::is_host_address(peer.ip()) {
                            PeerEnd::Unmatched
                        } else {
                            PeerEnd::Remote
                        }
                    }
                }
            }
        }
    }
}

/// The evidence on a JOIN's sender, for the PM run by `me`: the kernel's word on its end
/// (`peer`) and the PMIx host's `credential` verdict (see the module's rules).
pub(super) fn identity(me: u32, peer: PeerEnd, credential: Option<CredentialVerdict>) -> Identity {
    let peer_uid = match peer {
        PeerEnd::Owner(uid) if uid != me => {
            return Identity::Refused(format!(
                "the connecting process runs as uid {uid}, the pool manager as uid {me}"
            ));
        }
        PeerEnd::Owner(uid) => Some(uid),
        PeerEnd::Unmatched => {
            return Identity::Refused(
                "it connected from this host, but no process of this host holds its end of the connection (it shut down or closed before its JOIN was checked), so nothing proves its user; a client keeps its connection open until it is welcomed".into(),
            );
        }
        PeerEnd::Remote => None,
    };
    let mut proof = peer_uid.map(|_| "the kernel names the peer's user".to_string());
    match credential {
        Some(CredentialVerdict::Valid { uid: Some(uid) }) if uid != me => {
            return Identity::Refused(format!(
                "its PMIx credential was issued to uid {uid}, the pool manager runs as uid {me}"
            ));
        }
        Some(CredentialVerdict::Valid { .. }) => {
            proof.get_or_insert_with(|| "its PMIx credential validated".into());
        }
        Some(CredentialVerdict::Forged(why)) => {
            return Identity::Refused(format!("its PMIx credential did not validate ({why})"));
        }
        Some(CredentialVerdict::Unverifiable(why)) => {
            tracing::debug!("pool manager: a JOIN's credential cannot be checked here: {why}");
        }
        None => {}
    }
    proof.map_or(Identity::Unproven, Identity::Proven)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ME: u32 = 1000;

    #[test]
    fn another_user_is_refused_by_any_evidence_and_the_unprovable_left_to_the_secret() {
        let valid = |uid| Some(CredentialVerdict::Valid { uid: Some(uid) });
        let (me, other, remote) = (PeerEnd::Owner(ME), PeerEnd::Owner(1001), PeerEnd::Remote);
        // Nothing known (another host): the secret decides.
        assert_eq!(identity(ME, remote, None), Identity::Unproven);
        let other_launcher = Some(CredentialVerdict::Unverifiable("another launcher's".into()));
        assert_eq!(
            identity(ME, remote, other_launcher.clone()),
            Identity::Unproven
        );
        // Evidence for the user.
        assert!(matches!(identity(ME, me, None), Identity::Proven(_)));
        assert!(matches!(
            identity(ME, remote, valid(ME)),
            Identity::Proven(_)
        ));
        assert!(matches!(
            identity(ME, me, other_launcher),
            Identity::Proven(_)
        ));
        // Any evidence against refuses, whatever else is known; so does a local end that
        // no process holds, even with a valid credential.
        for (peer, cred) in [
            (other, None),
            (other, valid(ME)),
            (remote, valid(1001)),
            (me, valid(1001)),
            (me, Some(CredentialVerdict::Forged("signature".into()))),
            (PeerEnd::Unmatched, None),
            (PeerEnd::Unmatched, valid(ME)),
        ] {
            assert!(
                matches!(identity(ME, peer, cred.clone()), Identity::Refused(_)),
                "{peer:?} {cred:?}"
            );
        }
        let Identity::Refused(why) = identity(ME, other, None) else {
            unreachable!()
        };
        assert!(
            why.contains("uid 1001") && why.contains("uid 1000"),
            "{why}"
        );
    }
}
