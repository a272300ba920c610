//! CPU and NUMA-node sets as sorted index lists, with the Linux list syntax
//! (`0-3,8,10-11`) used by `taskset -c`, Slurm and `/sys`.

use std::collections::BTreeSet;
use std::fmt;

use serde::{Deserialize, Serialize};

/// A set of OS indices (PUs for a cpuset, NUMA nodes for a nodeset).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub struct IndexSet(BTreeSet<u32>);

/// Why a cpuset string was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CpuSetError {
    /// Nothing in it.
    #[error("empty CPU list; give CPUs like 0-3,8")]
    Empty,
    /// A piece is not a number or range.
    #[error("{0:?} is not a CPU number or range; use the list syntax 0-3,8,10-11")]
    Syntax(String),
    /// A range runs backwards.
    #[error("range {0:?} runs backwards; write low-high")]
    Backwards(String),
    /// CPUs the machine does not have.
    #[error("CPU {cpu} is out of range: this machine's CPUs are {available}")]
    OutOfRange {
        /// The first offending CPU.
        cpu: u32,
        /// The machine's CPUs.
        available: String,
    },
}

impl IndexSet {
    /// The empty set.
    pub fn new() -> IndexSet {
        IndexSet::default()
    }

    /// Parses the list syntax.
    ///
    /// # Errors
    /// [`CpuSetError`] naming the piece that is wrong.
    pub fn parse(s: &str) -> Result<IndexSet, CpuSetError> {
        let mut set = BTreeSet::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let num = |x: &str| {
                x.trim()
                    .parse::<u32>()
                    .map_err(|_| CpuSetError::Syntax(part.to_string()))
            };
            match part.split_once('-') {
                Some((a, b)) => {
                    let (a, b) = (num(a)?, num(b)?);
                    if a > b {
                        return Err(CpuSetError::Backwards(part.to_string()));
                    }
                    if b - a > 1 << 20 {
                        return Err(CpuSetError::Syntax(part.to_string()));
                    }
                    set.extend(a..=b);
                }
                None => {
                    set.insert(num(part)?);
                }
            }
        }
        if set.is_empty() {
            return Err(CpuSetError::Empty);
        }
        Ok(IndexSet(set))
    }

    /// Checks that every index is in `all`.
    ///
    /// # Errors
    /// [`CpuSetError::OutOfRange`] with the first index outside.
    pub fn check_within(&self, all: &IndexSet) -> Result<(), CpuSetError> {
        match self.0.iter().find(|i| !all.0.contains(i)) {
            Some(&cpu) => Err(CpuSetError::OutOfRange {
                cpu,
                available: all.to_string(),
            }),
            None => Ok(()),
        }
    }

    /// Adds an index.
    pub fn insert(&mut self, i: u32) {
        self.0.insert(i);
    }

    /// True if nothing is in the set.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// True if the sets share an index.
    pub fn intersects(&self, other: &IndexSet) -> bool {
        self.0.intersection(&other.0).next().is_some()
    }

    /// True if every index of `other` is in `self`.
    pub fn includes(&self, other: &IndexSet) -> bool {
        other.0.is_subset(&self.0)
    }

    /// The indices, ascending.
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.0.iter().copied()
    }
}

impl FromIterator<u32> for IndexSet {
    fn from_iter<T: IntoIterator<Item = u32>>(iter: T) -> Self {
        IndexSet(iter.into_iter().collect())
    }
}

impl fmt::Display for IndexSet {
    /// The list syntax, ranges collapsed (`0-3,8`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        let mut it = self.0.iter().copied().peekable();
        while let Some(start) = it.next() {
            let mut end = start;
            while it.peek() == Some(&(end + 1)) {
                end += 1;
                it.next();
            }
            if !first {
                f.write_str(",")?;
            }
            first = false;
            if start == end {
                write!(f, "{start}")?;
            } else {
                write!(f, "{start}-{end}")?;
            }
        }
        Ok(())
    }
}

impl From<IndexSet> for String {
    fn from(s: IndexSet) -> String {
        s.to_string()
    }
}

impl TryFrom<String> for IndexSet {
    type Error = CpuSetError;
    fn try_from(s: String) -> Result<IndexSet, CpuSetError> {
        if s.trim().is_empty() {
            return Ok(IndexSet::new());
        }
        IndexSet::parse(&s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints_the_list_syntax() {
        let s = IndexSet::parse("8, 0-3,10-11,2").expect("valid");
        assert_eq!(s.to_string(), "0-3,8,10-11");
        assert!(s.includes(&IndexSet::parse("1-2").expect("valid")));
        assert!(s.intersects(&IndexSet::parse("11-20").expect("valid")));
        assert!(!s.intersects(&IndexSet::parse("4-7").expect("valid")));
    }

    #[test]
    fn refuses_bad_lists() {
        assert_eq!(IndexSet::parse(""), Err(CpuSetError::Empty));
        assert_eq!(IndexSet::parse(" , "), Err(CpuSetError::Empty));
        assert_eq!(IndexSet::parse("a"), Err(CpuSetError::Syntax("a".into())));
        assert_eq!(
            IndexSet::parse("5-2"),
            Err(CpuSetError::Backwards("5-2".into()))
        );
        assert!(matches!(
            IndexSet::parse("0-99999999"),
            Err(CpuSetError::Syntax(_))
        ));
        let all = IndexSet::parse("0-3").expect("valid");
        assert_eq!(
            IndexSet::parse("2,9").expect("valid").check_within(&all),
            Err(CpuSetError::OutOfRange {
                cpu: 9,
                available: "0-3".into()
            })
        );
    }
}
