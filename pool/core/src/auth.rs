//! JOIN authentication: the PM sends a fresh nonce; the application answers with
//! HMAC-SHA256, keyed by the workflow secret, over the nonce and its identity. Without the
//! secret no JOIN succeeds, and a proof is bound to one challenge and one identity.

use hmac::{Hmac, Mac};
use sha2::Sha256;

fn mac(
    secret: &[u8],
    nonce: &[u8; 32],
    workflow: &str,
    component: &str,
    index: i64,
) -> Hmac<Sha256> {
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(secret)
        .unwrap_or_else(|_| unreachable!("HMAC accepts any key length"));
    m.update(b"maestro-join-v1\0");
    m.update(nonce);
    for part in [workflow.as_bytes(), component.as_bytes()] {
        m.update(&(part.len() as u64).to_le_bytes());
        m.update(part);
    }
    m.update(&index.to_le_bytes());
    m
}

/// The proof an application sends in `Join`.
pub fn prove(
    secret: &[u8],
    nonce: &[u8; 32],
    workflow: &str,
    component: &str,
    index: i64,
) -> Vec<u8> {
    mac(secret, nonce, workflow, component, index)
        .finalize()
        .into_bytes()
        .to_vec()
}

/// Checks a proof in constant time.
pub fn verify(
    secret: &[u8],
    nonce: &[u8; 32],
    workflow: &str,
    component: &str,
    index: i64,
    proof: &[u8],
) -> bool {
    mac(secret, nonce, workflow, component, index)
        .verify_slice(proof)
        .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proofs_bind_secret_nonce_and_identity() {
        let (s, n) = (b"secret".as_slice(), [7u8; 32]);
        let p = prove(s, &n, "wf", "producer", 1);
        assert!(verify(s, &n, "wf", "producer", 1, &p));
        assert!(!verify(b"other", &n, "wf", "producer", 1, &p));
        assert!(!verify(s, &[8u8; 32], "wf", "producer", 1, &p));
        assert!(!verify(s, &n, "wf", "producer", 2, &p));
        assert!(!verify(s, &n, "wf", "consumer", 1, &p));
        assert!(!verify(s, &n, "wf", "producer", 1, &[]));
    }
}
