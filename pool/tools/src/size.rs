//! Sizes as users type them on command lines: `4096`, `64K`, `1M`, `4G` (powers of 1024),
//! shared by `maestro`'s options and the examples' (`pool_workflow --max-size`).

/// The largest size taken: 4 GiB.
pub const MAX: usize = 4 << 30;

/// Parses one size of 1 byte to [`MAX`]: digits, optionally followed by `K`, `M` or `G`
/// (either case).
///
/// # Errors
/// Anything else, 0, or more than [`MAX`]: a message naming the text and what to give.
pub fn parse(text: &str) -> Result<usize, String> {
    let p = text.trim();
    let (num, mult) = match p.as_bytes().last() {
        Some(b'K' | b'k') => (&p[..p.len() - 1], 1usize << 10),
        Some(b'M' | b'm') => (&p[..p.len() - 1], 1 << 20),
        Some(b'G' | b'g') => (&p[..p.len() - 1], 1 << 30),
        _ => (p, 1),
    };
    num.parse::<usize>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .filter(|&n| n > 0 && n <= MAX)
        .ok_or_else(|| format!("{p:?} is not a size between 1 byte and 4G (e.g. 4K, 1M, 256M)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_with_and_without_units() {
        assert_eq!(parse("100"), Ok(100));
        assert_eq!(parse("4k"), Ok(4096));
        assert_eq!(parse("64M"), Ok(64 << 20));
        assert_eq!(parse("4G"), Ok(MAX));
        for bad in ["", "0", "5G", "-1", "1T", "K", "1.5M"] {
            let e = parse(bad).expect_err(bad);
            assert!(e.contains("is not a size"), "{bad}: {e}");
        }
    }
}
