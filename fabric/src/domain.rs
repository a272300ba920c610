//! The fabric and domain an endpoint opened, kept alive by the endpoint and by every region
//! registered with it (closed after the last), and the keys of new registrations.

use fabric_sys as sys;

use crate::discover::InfoList;
use crate::error::{FabricError, Result, check};

/// Fabric and domain: what memory registrations need to stay valid.
pub(crate) struct Shared {
    pub(crate) fabric: *mut sys::fid_fabric,
    pub(crate) domain: *mut sys::fid_domain,
    pub(crate) mr_mode: u32,
    /// Bits of the keys the application picks (`mr_key_size` bytes, at most 8).
    pub(crate) key_mask: u64,
}

impl Shared {
    /// Opens the fabric and the domain of `fi` (the first entry of `list`).
    ///
    /// # Errors
    /// [`FabricError::Call`] naming the call that failed; what was opened is closed.
    pub(crate) fn open(fi: &sys::fi_info, list: &InfoList) -> Result<Shared> {
        let mut shared = Shared {
            fabric: std::ptr::null_mut(),
            domain: std::ptr::null_mut(),
            // SAFETY: domain_attr of a returned info is valid.
            mr_mode: unsafe { (*fi.domain_attr).mr_mode } as u32,
            // SAFETY: `domain_attr` of an info that fi_getinfo returned is valid.
            key_mask: match unsafe { (*fi.domain_attr).mr_key_size } {
                0 | 8.. => u64::MAX,
                n => (1u64 << (8 * n)) - 1,
            },
        };
        // SAFETY: objects opened in order from the info; each failure leaves what was
        // opened to the owners' drops.
        unsafe {
            check(
                "fi_fabric",
                sys::fi_fabric(fi.fabric_attr, &mut shared.fabric, std::ptr::null_mut()).into(),
            )?;
            check(
                "fi_domain",
                sys::fi_domain(
                    shared.fabric,
                    list.0,
                    &mut shared.domain,
                    std::ptr::null_mut(),
                )
                .into(),
            )?;
        }
        Ok(shared)
    }
    /// A key for a new registration: random within the domain's key size, or 0 where the
    /// provider issues keys itself.
    pub(crate) fn fresh_key(&self) -> Result<u64> {
        if self.mr_mode & sys::FI_MR_PROV_KEY != 0 {
            return Ok(0);
        }
        Ok(random_key()? & self.key_mask)
    }
}

/// Keys drawn from the kernel at a time (one `getrandom` call for this many registrations).
const KEYS_AHEAD: usize = 64;

/// Random keys drawn ahead: one `getrandom` system call per [`KEYS_AHEAD`] registrations
/// instead of one each (about 0.5 µs each on the test VM, a tenth of what a 64 KiB offer
/// costs its provider). They come from the kernel as before, only in bulk; a child of
/// `fork()` never uses those its parent drew (it would draw the parent's keys): they are
/// marked with the process generation ([`crate::slab::generation`]) they were drawn in.
/// Nobody waits for them: a thread that finds another drawing draws a key of its own.
struct KeysAhead {
    generation: u64,
    keys: [u64; KEYS_AHEAD],
    left: usize,
}

static KEYS: std::sync::Mutex<KeysAhead> = std::sync::Mutex::new(KeysAhead {
    generation: 0,
    keys: [0; KEYS_AHEAD],
    left: 0,
});

/// 64 random bits for a registration's key, from [`KEYS`].
///
/// # Errors
/// [`FabricError::InvalidArgument`] when the kernel gives no randomness.
fn random_key() -> Result<u64> {
    let generation = crate::slab::generation();
    let mut ahead = match KEYS.try_lock() {
        Ok(ahead) => ahead,
        Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
        // Another thread draws (or, in a child of fork(), held the lock as the parent
        // forked): one key of its own, never a wait.
        Err(std::sync::TryLockError::WouldBlock) => {
            let mut key = [0u64];
            fill(&mut key)?;
            return Ok(key[0]);
        }
    };
    if ahead.left == 0 || ahead.generation != generation {
        fill(&mut ahead.keys)?;
        ahead.generation = generation;
        ahead.left = KEYS_AHEAD;
    }
    ahead.left -= 1;
    let at = ahead.left;
    // Used once: not left behind in memory for a later draw to repeat.
    Ok(std::mem::take(&mut ahead.keys[at]))
}

// SAFETY: FI_THREAD_SAFE domain; the pointers are only closed in drop.
unsafe impl Send for Shared {}
// SAFETY: shared references only reach what the `Send` reason above makes safe from any
// thread (FI_THREAD_SAFE objects, state behind a mutex).
unsafe impl Sync for Shared {}

pub(crate) fn close_fid(what: &str, fid: *mut sys::fid) {
    if fid.is_null() {
        return;
    }
    // SAFETY: each fid is closed once, by its owner.
    let rc = unsafe { sys::fi_close(fid) };
    if rc != 0 {
        tracing::warn!("fi_close({what}): {rc}");
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // SAFETY: taking the address of the embedded fid of live objects.
        unsafe {
            if !self.domain.is_null() {
                close_fid("domain", &mut (*self.domain).fid);
            }
            if !self.fabric.is_null() {
                close_fid("fabric", &mut (*self.fabric).fid);
            }
        }
    }
}

/// Fills `keys` (at most [`KEYS_AHEAD`]) with random bits from the kernel.
///
/// # Errors
/// [`FabricError::InvalidArgument`] when the kernel gives no randomness.
fn fill(keys: &mut [u64]) -> Result<()> {
    debug_assert!(keys.len() <= KEYS_AHEAD);
    let mut bytes = [0u8; 8 * KEYS_AHEAD];
    let bytes = &mut bytes[..8 * keys.len().min(KEYS_AHEAD)];
    getrandom::fill(bytes).map_err(|e| {
        FabricError::InvalidArgument(format!(
            "no randomness for a memory key ({e}); the kernel's getrandom must work"
        ))
    })?;
    for (key, b) in keys.iter_mut().zip(bytes.chunks_exact(8)) {
        let mut k = [0u8; 8];
        k.copy_from_slice(b);
        *key = u64::from_ne_bytes(k);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_drawn_ahead_are_used_once_and_not_across_a_fork() {
        let keys: Vec<u64> = (0..=3 * KEYS_AHEAD)
            .map(|_| random_key().expect("key"))
            .collect();
        let mut seen = keys.clone();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), keys.len(), "a key drawn twice");
        // As a child of fork() finds them: drawn in its parent's generation. The key the
        // parent would use next is not the child's.
        let parents_next = {
            let mut ahead = KEYS.lock().expect("keys");
            ahead.generation = ahead.generation.wrapping_sub(1);
            ahead.keys[ahead.left - 1]
        };
        assert_ne!(random_key().expect("key"), parents_next);
    }
}
