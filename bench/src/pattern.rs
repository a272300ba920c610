//! Deterministic test data: a word pattern any process can regenerate from a seed, and a
//! checksum to compare what arrived with what was sent.

/// The 64-bit word at `index` of the pattern `seed` (splitmix64).
fn word(seed: u64, index: u64) -> u64 {
    let mut z = seed.wrapping_add(index.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Fills `buf` with pattern `seed` (trailing bytes of a partial word included).
pub fn fill(buf: &mut [u8], seed: u64) {
    fill_from(buf, seed, 0);
}

/// Fills `buf` with pattern `seed` from its word `first` on: the bytes a buffer filled
/// with [`fill`] holds at offset `8 * first`.
pub fn fill_from(buf: &mut [u8], seed: u64, first: u64) {
    for (i, chunk) in (first..).zip(buf.chunks_mut(8)) {
        let w = word(seed, i).to_le_bytes();
        chunk.copy_from_slice(&w[..chunk.len()]);
    }
}

/// An order-sensitive checksum of `buf`.
pub fn checksum(buf: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ buf.len() as u64;
    let mut chunks = buf.chunks_exact(8);
    for c in &mut chunks {
        let mut w = [0u8; 8];
        w.copy_from_slice(c);
        h = (h.rotate_left(5) ^ u64::from_le_bytes(w)).wrapping_mul(0x0100_0000_01b3);
    }
    for &b in chunks.remainder() {
        h = (h.rotate_left(5) ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fill_from_a_word_is_the_whole_fills_bytes_there() {
        let mut whole = vec![0u8; 4096];
        fill(&mut whole, 7);
        let mut part = vec![0u8; 1000];
        fill_from(&mut part, 7, 128);
        assert_eq!(part, whole[1024..2024]);
    }

    #[test]
    fn pattern_is_deterministic_and_checksums_differ() {
        let mut a = vec![0u8; 1003];
        let mut b = vec![0u8; 1003];
        fill(&mut a, 7);
        fill(&mut b, 7);
        assert_eq!(a, b);
        assert_eq!(checksum(&a), checksum(&b));
        b[500] ^= 1;
        assert_ne!(checksum(&a), checksum(&b));
        fill(&mut b, 8);
        assert_ne!(checksum(&a), checksum(&b));
    }
}
