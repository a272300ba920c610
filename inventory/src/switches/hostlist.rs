//! Slurm's host lists (`n[1-4,7],login1`): expanded into names and compressed back, as
//! `topology.conf` and `scontrol show hostnames` write them.

/// Most names one host list expands to: a list from outside (a site's file) cannot make
/// the process allocate without bound.
pub const MAX_HOSTS: usize = 1 << 20;

/// Why a host list is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostListError {
    /// A `[` without its `]`, a `]` without its `[`, or a bracket inside a bracket.
    #[error("host list {0:?}: unbalanced brackets; write it as Slurm does, e.g. n[1-4,7]")]
    Brackets(String),
    /// A range that is not `A-B` of numbers with A <= B, or a bracket with nothing in it.
    #[error("host list {list:?}: {range:?} is no range of numbers (write 1-4 or 07-12)")]
    Range {
        /// The list.
        list: String,
        /// The part that is wrong.
        range: String,
    },
    /// More than [`MAX_HOSTS`] names.
    #[error("host list {0:?} names more than {MAX_HOSTS} hosts")]
    TooMany(String),
    /// An empty name (`a,,b`, a leading or trailing comma).
    #[error("host list {0:?} has an empty name")]
    Empty(String),
}

/// The names `list` stands for, in its order: comma-separated parts, each a name with any
/// number of bracketed ranges (`rack[1-2]n[01-03]`: the product, the last range fastest),
/// numbers keeping the width of the range's first bound when it has leading zeros.
///
/// # Errors
/// [`HostListError`] saying what is wrong.
pub fn expand(list: &str) -> Result<Vec<String>, HostListError> {
    let mut out = Vec::new();
    for part in split_top(list)? {
        if part.is_empty() {
            return Err(HostListError::Empty(list.into()));
        }
        let mut names = vec![String::new()];
        let mut rest = part;
        while let Some(open) = rest.find('[') {
            let close = rest[open..]
                .find(']')
                .map(|c| open + c)
                .ok_or_else(|| HostListError::Brackets(list.into()))?;
            let prefix = &rest[..open];
            let numbers = numbers(list, &rest[open + 1..close])?;
            let mut next = Vec::with_capacity(names.len().saturating_mul(numbers.len()));
            for n in &names {
                for num in &numbers {
                    if out.len() + next.len() >= MAX_HOSTS {
                        return Err(HostListError::TooMany(list.into()));
                    }
                    next.push(format!("{n}{prefix}{num}"));
                }
            }
            names = next;
            rest = &rest[close + 1..];
        }
        if rest.contains(']') {
            return Err(HostListError::Brackets(list.into()));
        }
        for n in names {
            if out.len() >= MAX_HOSTS {
                return Err(HostListError::TooMany(list.into()));
            }
            out.push(format!("{n}{rest}"));
        }
    }
    Ok(out)
}

/// `list` split at the commas outside brackets.
fn split_top(list: &str) -> Result<Vec<&str>, HostListError> {
    let (mut parts, mut depth, mut start) = (Vec::new(), 0u8, 0);
    for (i, c) in list.char_indices() {
        match c {
            '[' if depth == 0 => depth = 1,
            ']' if depth == 1 => depth = 0,
            '[' | ']' => return Err(HostListError::Brackets(list.into())),
            ',' if depth == 0 => {
                parts.push(list[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err(HostListError::Brackets(list.into()));
    }
    parts.push(list[start..].trim());
    Ok(parts)
}

/// The numbers of a bracket's inside (`1-4,7`, `01-12`), as text of their width.
fn numbers(list: &str, inside: &str) -> Result<Vec<String>, HostListError> {
    let bad = |range: &str| HostListError::Range {
        list: list.into(),
        range: range.into(),
    };
    let mut out = Vec::new();
    for range in inside.split(',') {
        let (a, b) = range.split_once('-').unwrap_or((range, range));
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|c| c.is_ascii_digit());
        if !digits(a) || !digits(b) {
            return Err(bad(range));
        }
        let (lo, hi): (u64, u64) = (
            a.parse().map_err(|_| bad(range))?,
            b.parse().map_err(|_| bad(range))?,
        );
        if lo > hi {
            return Err(bad(range));
        }
        if (hi - lo) as usize >= MAX_HOSTS {
            return Err(HostListError::TooMany(list.into()));
        }
        let width = if a.starts_with('0') { a.len() } else { 0 };
        out.extend((lo..=hi).map(|n| format!("{n:0width$}")));
    }
    Ok(out)
}

/// `names` as one host list: names that differ only in a trailing number of the same
/// width (or with no leading zero) share a bracket, in first-seen order of their prefix;
/// the others stay as they are (`n1,n2,n3,n7,login` becomes `n[1-3,7],login`).
pub fn compress<S: AsRef<str>>(names: &[S]) -> String {
    // (prefix, width: 0 when unpadded) -> numbers, in first-seen order.
    let mut groups: Vec<((String, usize), Vec<u64>)> = Vec::new();
    let mut plain: Vec<String> = Vec::new();
    let mut order: Vec<Result<usize, usize>> = Vec::new();
    for name in names {
        let name = name.as_ref();
        let digits = name.bytes().rev().take_while(u8::is_ascii_digit).count();
        let (prefix, num) = name.split_at(name.len() - digits);
        let Ok(n) = num.parse::<u64>() else {
            order.push(Err(plain.len()));
            plain.push(name.to_string());
            continue;
        };
        let width = if num.len() > 1 && num.starts_with('0') {
            num.len()
        } else {
            0
        };
        let key = (prefix.to_string(), width);
        match groups.iter_mut().position(|(k, _)| *k == key) {
            Some(g) => groups[g].1.push(n),
            None => {
                order.push(Ok(groups.len()));
                groups.push((key, vec![n]));
            }
        }
    }
    // An unpadded number as long as a padded group's numbers joins that group (a10 with
    // a08, a09).
    for g in 0..groups.len() {
        let ((prefix, width), _) = &groups[g];
        if *width == 0 {
            continue;
        }
        let (prefix, width) = (prefix.clone(), *width);
        if let Some(u) = groups
            .iter()
            .position(|((p, w), _)| *p == prefix && *w == 0)
        {
            let (fits, rest): (Vec<u64>, Vec<u64>) = std::mem::take(&mut groups[u].1)
                .into_iter()
                .partition(|n| n.to_string().len() == width);
            groups[u].1 = rest;
            groups[g].1.extend(fits);
        }
    }
    let mut parts = Vec::new();
    for o in order {
        match o {
            Err(p) => parts.push(plain[p].clone()),
            Ok(g) => {
                let ((prefix, width), nums) = &groups[g];
                if !nums.is_empty() {
                    parts.push(bracket(prefix, *width, nums));
                }
            }
        }
    }
    parts.join(",")
}

/// `prefix` with `nums` as ranges (one number: no bracket).
fn bracket(prefix: &str, width: usize, nums: &[u64]) -> String {
    let mut nums = nums.to_vec();
    nums.sort_unstable();
    nums.dedup();
    if let [n] = nums[..] {
        return format!("{prefix}{n:0width$}");
    }
    let mut ranges: Vec<String> = Vec::new();
    let mut i = 0;
    while i < nums.len() {
        let start = nums[i];
        let mut end = start;
        while i + 1 < nums.len() && nums[i + 1] == end + 1 {
            i += 1;
            end = nums[i];
        }
        ranges.push(if start == end {
            format!("{start:0width$}")
        } else {
            format!("{start:0width$}-{end:0width$}")
        });
        i += 1;
    }
    format!("{prefix}[{}]", ranges.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_expand_as_slurm_writes_them() {
        assert_eq!(
            expand("n[1-3,7],login").unwrap(),
            ["n1", "n2", "n3", "n7", "login"]
        );
        assert_eq!(expand("a[08-10]").unwrap(), ["a08", "a09", "a10"]);
        assert_eq!(
            expand("r[1-2]n[1-2]").unwrap(),
            ["r1n1", "r1n2", "r2n1", "r2n2"]
        );
        assert_eq!(expand("tux0").unwrap(), ["tux0"]);
    }

    #[test]
    fn bad_lists_say_what_is_wrong() {
        assert!(matches!(expand("n[1-3"), Err(HostListError::Brackets(_))));
        assert!(matches!(expand("n1-3]"), Err(HostListError::Brackets(_))));
        assert!(matches!(expand("n[[1]]"), Err(HostListError::Brackets(_))));
        assert!(matches!(expand("n[3-1]"), Err(HostListError::Range { .. })));
        assert!(matches!(expand("n[]"), Err(HostListError::Range { .. })));
        assert!(matches!(expand("n[a-b]"), Err(HostListError::Range { .. })));
        assert!(matches!(expand("a,,b"), Err(HostListError::Empty(_))));
        assert!(matches!(
            expand("n[0-99999999]"),
            Err(HostListError::TooMany(_))
        ));
        assert!(matches!(
            expand("a[0-2047]b[0-2047]"),
            Err(HostListError::TooMany(_))
        ));
    }

    #[test]
    fn names_compress_into_brackets_and_back() {
        let names = ["n1", "n2", "n3", "n7", "login", "a08", "a09", "a10"];
        let list = compress(&names);
        assert_eq!(list, "n[1-3,7],login,a[08-10]");
        assert_eq!(expand(&list).unwrap(), names);
        assert_eq!(compress(&["x5"]), "x5");
        assert_eq!(compress::<&str>(&[]), "");
    }
}
