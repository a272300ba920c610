//! Credentials issued by `maestro run` to its ranks (`PMIx_Get_credential`) and checked for
//! them (`PMIx_Validate_credential`).
//!
//! Scheme: an HMAC-SHA256 over the claims with a 256-bit key that the launcher draws from
//! the OS at start and never writes anywhere, so only this launcher can issue or validate its
//! job's credentials (no munge daemon needed). Wire form (ASCII):
//! `maestro-cred-v2;<issuer>;<nspace>;<rank>;<uid>;<gid>;<issued-unix-seconds>;<hex hmac>`,
//! where `<issuer>` names the launcher (16 hex digits derived from its key, which they do
//! not reveal). A credential is valid for [`CREDENTIAL_TTL`] after issue.
//!
//! Another launcher's credential (or any other kind) is [`CredentialError::Foreign`]: not
//! this launcher's to judge, which a pool manager takes as no evidence (an honest
//! component of another job must be able to join with the PM info), whereas one that
//! names this launcher and fails its check is forged.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The `PMIX_CRED_TYPE` our host reports.
pub const CREDENTIAL_TYPE: &str = "maestro-hmac-sha256-v1";
/// How long a credential stays valid.
pub const CREDENTIAL_TTL: Duration = Duration::from_secs(3600);
const PREFIX: &str = "maestro-cred-v2";

/// What a valid credential proves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claims {
    /// The namespace of the process it was issued to.
    pub nspace: String,
    /// Its rank.
    pub rank: u32,
    /// The uid the launcher registered for it.
    pub uid: u32,
    /// The gid the launcher registered for it.
    pub gid: u32,
    /// When it was issued (seconds since the epoch).
    pub issued: u64,
}

/// Why a credential was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CredentialError {
    /// Not of the `maestro-cred-v1;...` form.
    #[error("malformed credential: {0}")]
    Malformed(&'static str),
    /// The HMAC does not match: forged or altered.
    #[error("credential signature does not match (forged or altered)")]
    BadSignature,
    /// Not issued by this launcher (another `maestro run`'s, or another kind): it cannot
    /// judge it.
    #[error("credential not issued by this launcher: it cannot check it")]
    Foreign,
    /// Older than the time-to-live.
    #[error("credential expired ({age_secs} s old, valid for {ttl_secs} s)")]
    Expired {
        /// Its age.
        age_secs: u64,
        /// The limit.
        ttl_secs: u64,
    },
}

/// Issues and validates credentials with one secret key.
pub struct Authority {
    key: [u8; 32],
    /// This launcher's name in its credentials.
    issuer: String,
}

impl Authority {
    /// A new authority with a fresh random key.
    ///
    /// # Errors
    /// When the OS random source fails.
    pub fn generate() -> Result<Authority, getrandom::Error> {
        let mut key = [0u8; 32];
        getrandom::fill(&mut key)?;
        let mut a = Authority {
            key,
            issuer: String::new(),
        };
        a.issuer = hex::encode(&a.mac("maestro credential issuer").finalize().into_bytes()[..8]);
        Ok(a)
    }

    fn mac(&self, body: &str) -> Hmac<Sha256> {
        let mut m = <Hmac<Sha256> as Mac>::new_from_slice(&self.key)
            .unwrap_or_else(|_| unreachable!("HMAC accepts any key length"));
        m.update(body.as_bytes());
        m
    }

    /// Issues a credential for `claims`.
    pub fn issue(&self, claims: &Claims) -> Vec<u8> {
        let body = format!(
            "{PREFIX};{};{};{};{};{};{}",
            self.issuer, claims.nspace, claims.rank, claims.uid, claims.gid, claims.issued
        );
        let tag = hex::encode(self.mac(&body).finalize().into_bytes());
        format!("{body};{tag}").into_bytes()
    }

    /// Checks a credential at time `now` (seconds since the epoch).
    ///
    /// # Errors
    /// [`CredentialError`] saying why it is refused: [`CredentialError::Foreign`] if it
    /// does not name this launcher as its issuer.
    pub fn validate(&self, cred: &[u8], now: u64) -> Result<Claims, CredentialError> {
        let text = std::str::from_utf8(cred).map_err(|_| CredentialError::Foreign)?;
        let text = text.trim_end_matches('\0');
        let mut head = text.splitn(3, ';');
        if head.next() != Some(PREFIX) || head.next() != Some(self.issuer.as_str()) {
            return Err(CredentialError::Foreign);
        }
        let (body, tag) = text
            .rsplit_once(';')
            .ok_or(CredentialError::Malformed("no signature"))?;
        let tag =
            hex::decode(tag).map_err(|_| CredentialError::Malformed("signature is not hex"))?;
        self.mac(body)
            .verify_slice(&tag)
            .map_err(|_| CredentialError::BadSignature)?;
        let fields: Vec<&str> = body.split(';').collect();
        let [_, _, nspace, rank, uid, gid, issued] = fields[..] else {
            return Err(CredentialError::Malformed("wrong number of fields"));
        };
        let num = |s: &str| {
            s.parse::<u64>()
                .map_err(|_| CredentialError::Malformed("bad number"))
        };
        let claims = Claims {
            nspace: nspace.to_string(),
            rank: u32::try_from(num(rank)?).map_err(|_| CredentialError::Malformed("bad rank"))?,
            uid: u32::try_from(num(uid)?).map_err(|_| CredentialError::Malformed("bad uid"))?,
            gid: u32::try_from(num(gid)?).map_err(|_| CredentialError::Malformed("bad gid"))?,
            issued: num(issued)?,
        };
        let age = now.saturating_sub(claims.issued);
        if age > CREDENTIAL_TTL.as_secs() {
            return Err(CredentialError::Expired {
                age_secs: age,
                ttl_secs: CREDENTIAL_TTL.as_secs(),
            });
        }
        Ok(claims)
    }
}

/// Seconds since the epoch now.
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claims() -> Claims {
        Claims {
            nspace: "maestro.job.1".into(),
            rank: 2,
            uid: 1000,
            gid: 100,
            issued: 1_000_000,
        }
    }

    #[test]
    fn issued_credentials_validate() {
        let a = Authority::generate().expect("random");
        let cred = a.issue(&claims());
        assert_eq!(a.validate(&cred, 1_000_010), Ok(claims()));
    }

    #[test]
    fn forged_altered_foreign_and_expired_are_refused() {
        let a = Authority::generate().expect("random");
        let b = Authority::generate().expect("random");
        let cred = a.issue(&claims());
        // Another launcher's is not this one's to judge.
        assert_eq!(b.validate(&cred, 1_000_010), Err(CredentialError::Foreign));
        let altered = String::from_utf8(cred.clone())
            .unwrap()
            .replacen(";2;", ";3;", 1);
        assert_eq!(
            a.validate(altered.as_bytes(), 1_000_010),
            Err(CredentialError::BadSignature)
        );
        assert!(matches!(
            a.validate(&cred, 1_000_000 + 3601),
            Err(CredentialError::Expired { .. })
        ));
        // Another kind of credential is foreign too.
        for other in [
            b"garbage".as_slice(),
            &[0xff, 0xfe],
            b"x;zz",
            b"maestro-cred-v1;a;0",
        ] {
            assert_eq!(a.validate(other, 0), Err(CredentialError::Foreign));
        }
        // What names this launcher but is cut or not signed in hex is malformed.
        let issuer = format!("{PREFIX};{}", a.issuer);
        assert!(matches!(
            a.validate(format!("{issuer};zz").as_bytes(), 0),
            Err(CredentialError::Malformed(_))
        ));
        let cut = String::from_utf8(cred.clone()).expect("ascii");
        let (body, tag) = cut.rsplit_once(';').expect("signed");
        let (shorter, _) = body.rsplit_once(';').expect("fields");
        let resigned = hex::encode(a.mac(shorter).finalize().into_bytes());
        assert_eq!(
            a.validate(format!("{shorter};{resigned}").as_bytes(), 0),
            Err(CredentialError::Malformed("wrong number of fields"))
        );
        assert!(!tag.is_empty());
    }
}
