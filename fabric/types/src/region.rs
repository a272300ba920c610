//! Remote regions: what a peer needs to read a registered buffer.

use serde::{Deserialize, Serialize};

/// What a peer needs to read (or write) a registered region: the key, the address to use
/// in RMA calls (the virtual address for providers with `FI_MR_VIRT_ADDR`, else 0) and the
/// length. Serialisable, to travel in tickets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RemoteRegion {
    /// The RMA address of the first byte.
    pub addr: u64,
    /// The memory key.
    pub key: u64,
    /// The length in bytes.
    pub len: u64,
}

/// A sub-range that does not lie within its region.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("range {offset}+{len} exceeds the remote region of {region_len} bytes")]
pub struct RegionRangeError {
    /// Start of the requested range.
    pub offset: u64,
    /// Its length.
    pub len: u64,
    /// The region's length.
    pub region_len: u64,
}

impl RemoteRegion {
    /// The sub-range `[offset, offset+len)`.
    ///
    /// # Errors
    /// [`RegionRangeError`] if the range exceeds the region.
    pub fn slice(&self, offset: u64, len: u64) -> Result<RemoteRegion, RegionRangeError> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => Ok(RemoteRegion {
                addr: self.addr + offset,
                key: self.key,
                len,
            }),
            _ => Err(RegionRangeError {
                offset,
                len,
                region_len: self.len,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slab_places_only_ranges_wholly_within_it() {
        let slab = SlabPlace {
            base: 0x10000,
            len: 0x4000,
        };
        assert_eq!(slab.offset_of(0x10000, 0x4000), Some(0));
        assert_eq!(slab.offset_of(0x11000, 0x1000), Some(0x1000));
        assert_eq!(slab.offset_of(0x13000, 0x1001), None, "past its end");
        assert_eq!(slab.offset_of(0xf000, 0x10), None, "before it");
        assert_eq!(slab.offset_of(u64::MAX, 2), None, "overflowing");
    }

    #[test]
    fn slices_stay_within_their_region() {
        let r = RemoteRegion {
            addr: 4096,
            key: 7,
            len: 100,
        };
        assert_eq!(
            r.slice(10, 90),
            Ok(RemoteRegion {
                addr: 4106,
                key: 7,
                len: 90
            })
        );
        assert!(r.slice(10, 91).is_err());
        assert!(r.slice(u64::MAX, 2).is_err());
    }
}

/// A memory file (`memfd`) holding a buffer's bytes, which a process of the same host may
/// map instead of asking the kernel to copy them: the file's descriptor in the process
/// that owns it (opened through `/proc/<pid>/fd/<fd>`) and its inode, which the mapper
/// checks (a descriptor number may be reused once closed). Serialisable, to travel in
/// offers.
///
/// Either the file is the buffer's alone, its bytes from offset 0 (`slab` is `None`: a
/// reader may map the buffer itself, no copy at all), or it is a slab of many small
/// buffers (`slab` says where it lies in the owner's memory): a reader maps the slab once,
/// keeps the view, and copies each buffer's bytes out of it at the buffer's address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct MemoryFile {
    /// The descriptor number in the owning process.
    pub fd: u32,
    /// The file's inode number (never 0).
    pub inode: std::num::NonZeroU64,
    /// Where the file lies in the owner's memory, when it is a slab of many buffers.
    #[serde(default)]
    pub slab: Option<SlabPlace>,
}

/// Where a slab's memory file is mapped in the process that owns it: the owner's address
/// of the file's first byte and the file's length. A buffer of the slab at owner's
/// address `a` is at offset `a - base` of the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SlabPlace {
    /// The owner's address of the file's first byte.
    pub base: u64,
    /// The file's length in bytes.
    pub len: u64,
}

impl SlabPlace {
    /// The offset in the file of `len` bytes at the owner's address `addr`; `None` unless
    /// they lie wholly within the slab.
    pub fn offset_of(&self, addr: u64, len: u64) -> Option<u64> {
        let offset = addr.checked_sub(self.base)?;
        (offset.checked_add(len)? <= self.len).then_some(offset)
    }
}
