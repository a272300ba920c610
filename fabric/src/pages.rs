//! Memory the library maps for itself: page rounding, `mmap`, the memory files (memfd)
//! behind shareable buffers, and whether the kernel gives shared memory huge pages. Used
//! by buffers (`mr`) and by the views of other processes' memory (`cma`).

use std::io;
use std::num::NonZeroU64;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;

use fabric_types::MemoryFile;

/// A huge page (x86-64, aarch64 with 4 KiB pages).
pub(crate) const HUGE_PAGE: usize = 2 << 20;

/// `len` rounded up to whole huge pages.
pub(crate) fn huge_pages(len: usize) -> usize {
    len.div_ceil(HUGE_PAGE) * HUGE_PAGE
}

/// `len` rounded up to whole pages.
pub(crate) fn pages(len: usize) -> usize {
    const PAGE: usize = 4096;
    len.div_ceil(PAGE) * PAGE
}

/// `mmap(NULL, len, prot, flags, fd, 0)`.
///
/// # Errors
/// The OS error.
pub(crate) fn map(len: usize, prot: i32, flags: i32, fd: i32) -> std::io::Result<*mut u8> {
    // SAFETY: a new mapping chosen by the kernel; checked for MAP_FAILED below.
    let p = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, flags, fd, 0) };
    if p == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error());
    }
    Ok(p.cast())
}

/// Whether this system gives shared memory (memory files) transparent huge pages when
/// asked: `/sys/kernel/mm/transparent_hugepage/shmem_enabled` (or its 2 MiB knob,
/// `hugepages-2048kB/shmem_enabled`, unless that says `inherit`) is `always`,
/// `within_size`, `advise` or `force`. Debian's default, `never`, gives none. Read once.
pub fn huge_shared_pages() -> bool {
    static HUGE: std::sync::LazyLock<bool> = std::sync::LazyLock::new(|| {
        let dir = "/sys/kernel/mm/transparent_hugepage";
        let read = |path: String| std::fs::read_to_string(path).ok();
        let knob = read(format!("{dir}/hugepages-2048kB/shmem_enabled"))
            .filter(|k| chosen(k) != Some("inherit"))
            .or_else(|| read(format!("{dir}/shmem_enabled")));
        knob.as_deref()
            .and_then(chosen)
            .is_some_and(|c| matches!(c, "always" | "within_size" | "advise" | "force"))
    });
    *HUGE
}

/// The chosen word of a sysfs setting (`always [never] advise` -> `never`).
fn chosen(setting: &str) -> Option<&str> {
    let open = setting.find('[')?;
    let close = setting[open..].find(']')? + open;
    Some(&setting[open + 1..close])
}

/// The memory file behind a [`crate::Buffer::shareable`] buffer, owned by this process.
pub(crate) struct OwnFile {
    file: std::fs::File,
    inode: NonZeroU64,
}

impl OwnFile {
    /// A memory file of `len` bytes (zeroed); [`OwnFile::seal`] it once mapped.
    ///
    /// # Errors
    /// [`crate::FabricError::Os`] with the failing call.
    pub(crate) fn create(len: usize) -> crate::Result<OwnFile> {
        let os = |what: &str, source: io::Error| crate::FabricError::Os {
            what: format!("{what} for a shareable {len}-byte buffer"),
            source,
            hint: "no file descriptors or memory left: raise `ulimit -n`, or offer plain buffers (Buffer::new)",
        };
        let flags = libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING;
        // SAFETY: a NUL-terminated name; the descriptor is checked below.
        let fd = unsafe { libc::memfd_create(c"maestro-cdo".as_ptr(), flags) };
        if fd < 0 {
            return Err(os("memfd_create", io::Error::last_os_error()));
        }
        // SAFETY: a fresh descriptor that nothing else owns.
        let file = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
        file.set_len(len as u64).map_err(|e| os("sizing", e))?;
        let ino = file.metadata().map_err(|e| os("fstat", e))?.ino();
        let inode = NonZeroU64::new(ino).ok_or_else(|| {
            os(
                "a memory file without an inode",
                io::Error::from_raw_os_error(libc::EIO),
            )
        })?;
        Ok(OwnFile { file, inode })
    }

    /// Seals the file for good against growing, shrinking and any write but through the
    /// mappings that exist now (the owner's): a view can never lose its pages, and no
    /// process that opens the file, even read-write, can change the bytes through it.
    ///
    /// # Errors
    /// [`crate::FabricError::Os`] if the kernel refuses (before Linux 5.1).
    pub(crate) fn seal(&self) -> crate::Result<()> {
        let seals =
            libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_FUTURE_WRITE | libc::F_SEAL_SEAL;
        // SAFETY: a plain call on a valid descriptor.
        if unsafe { libc::fcntl(self.raw(), libc::F_ADD_SEALS, seals) } != 0 {
            return Err(crate::FabricError::Os {
                what: "sealing a memory file".into(),
                source: io::Error::last_os_error(),
                hint: "memory files need Linux 5.1 or later: offer plain buffers (Buffer::new)",
            });
        }
        Ok(())
    }

    /// The descriptor.
    pub(crate) fn raw(&self) -> i32 {
        self.file.as_raw_fd()
    }

    /// What another process needs to map it.
    pub(crate) fn describe(&self) -> MemoryFile {
        MemoryFile {
            fd: u32::try_from(self.raw()).unwrap_or(u32::MAX),
            inode: self.inode,
            slab: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_chosen_word_of_a_setting() {
        assert_eq!(
            chosen("always within_size advise [never] deny force\n"),
            Some("never")
        );
        assert_eq!(chosen("[inherit] always"), Some("inherit"));
        assert_eq!(chosen("always never"), None);
        assert_eq!(chosen("]["), None);
    }
}
