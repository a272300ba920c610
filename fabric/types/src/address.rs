//! Endpoint addresses as `fi_getname` returns them.

use serde::{Deserialize, Serialize};

/// An endpoint address, the bytes `fi_getname` returns; serialisable to travel to peers:
/// hex in human-readable formats (JSON: environment, files, PMIx), its bytes in binary ones
/// (the pool's frames, where every ticket carries one and hex cost a string per byte).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Address(#[serde(with = "hex_bytes")] pub Vec<u8>);

/// An endpoint address that is not hex (from the wire, an environment variable or a file).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("endpoint address {text:?} {why}: give the hex digits of an address as printed by maestro")]
pub struct AddressError {
    /// The text, trimmed.
    pub text: String,
    /// What is wrong with it.
    pub why: &'static str,
}

mod hex_bytes {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<S: Serializer>(b: &[u8], s: S) -> Result<S::Ok, S::Error> {
        if s.is_human_readable() {
            s.serialize_str(&super::to_hex(b))
        } else {
            b.serialize(s)
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        if d.is_human_readable() {
            let s = String::deserialize(d)?;
            return super::Address::parse_hex(&s)
                .map(|a| a.0)
                .map_err(serde::de::Error::custom);
        }
        Vec::deserialize(d)
    }
}

fn to_hex(b: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    b.iter()
        .flat_map(|x| [DIGITS[usize::from(x >> 4)], DIGITS[usize::from(x & 15)]])
        .map(char::from)
        .collect()
}

/// Linux's `AF_INET` and `AF_INET6`, the families of IP providers' addresses.
const AF_INET: u16 = 2;
const AF_INET6: u16 = 10;

impl Address {
    /// The IP address of an IP provider's endpoint (tcp, net, udp, sockets and the layers
    /// on them name endpoints by `sockaddr_in`/`sockaddr_in6`); `None` for other address
    /// formats (shm, verbs, ...).
    pub fn ip(&self) -> Option<std::net::IpAddr> {
        let family = u16::from_ne_bytes([*self.0.first()?, *self.0.get(1)?]);
        match (family, self.0.len()) {
            (AF_INET, 16) => {
                let b: [u8; 4] = self.0.get(4..8)?.try_into().ok()?;
                Some(std::net::Ipv4Addr::from(b).into())
            }
            (AF_INET6, 28) => {
                let b: [u8; 16] = self.0.get(8..24)?.try_into().ok()?;
                Some(std::net::Ipv6Addr::from(b).into())
            }
            _ => None,
        }
    }

    /// The address as hex.
    pub fn to_hex(&self) -> String {
        to_hex(&self.0)
    }

    /// Parses hex (surrounding whitespace ignored).
    ///
    /// # Errors
    /// [`AddressError`] for an empty text, an odd number of digits or a non-hex character.
    pub fn parse_hex(s: &str) -> Result<Address, AddressError> {
        let s = s.trim();
        let fail = |why| {
            Err(AddressError {
                text: s.to_string(),
                why,
            })
        };
        if !s.bytes().all(|b| b.is_ascii_hexdigit()) {
            return fail("is not hex");
        }
        if s.is_empty() || !s.len().is_multiple_of(2) {
            return fail("is not an even number of hex digits");
        }
        let digit = |b: u8| (b as char).to_digit(16).unwrap_or(0) as u8;
        Ok(Address(
            s.as_bytes()
                .chunks_exact(2)
                .map(|p| digit(p[0]) << 4 | digit(p[1]))
                .collect(),
        ))
    }
}

impl std::fmt::Display for Address {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.ip() {
            Some(ip) => write!(f, "{ip}"),
            None => f.write_str(&self.to_hex()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by the `frames` fuzz target: a multi-byte character in an address from the
    /// wire made the parser slice inside it and panic.
    #[test]
    fn addresses_parse_from_hex_and_refuse_anything_else() {
        assert_eq!(
            Address::parse_hex(" 00ff7a ").expect("hex"),
            Address(vec![0, 255, 0x7a])
        );
        for bad in ["", "0", "0g", "888888888888888\u{23d}8", "ÿÿ"] {
            let e = Address::parse_hex(bad).expect_err(bad);
            assert!(e.to_string().contains("hex"), "{e}");
        }
    }

    #[test]
    fn ip_providers_addresses_name_their_ip() {
        let mut v4 = vec![0u8; 16];
        v4[..2].copy_from_slice(&AF_INET.to_ne_bytes());
        v4[4..8].copy_from_slice(&[10, 1, 2, 3]);
        assert_eq!(Address(v4).ip(), Some("10.1.2.3".parse().expect("ip")));
        let mut v6 = vec![0u8; 28];
        v6[..2].copy_from_slice(&AF_INET6.to_ne_bytes());
        v6[23] = 1;
        assert_eq!(Address(v6).ip(), Some("::1".parse().expect("ip")));
        assert_eq!(Address(vec![1, 2, 3]).ip(), None);
        assert_eq!(Address(vec![1, 2, 3]).to_string(), "010203");
    }

    #[test]
    fn addresses_travel_as_hex_in_json() {
        let a = Address(vec![0xab, 0x01]);
        let json = serde_json::to_string(&a).expect("json");
        assert_eq!(json, "\"ab01\"");
        assert_eq!(serde_json::from_str::<Address>(&json).expect("back"), a);
        assert!(serde_json::from_str::<Address>("\"xyz\"").is_err());
        assert_eq!(Address(vec![0, 0x0f, 0xf0, 0xff]).to_hex(), "000ff0ff");
    }
}
