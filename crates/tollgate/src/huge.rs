//! Large tables on transparent huge pages.
//!
//! At a million keys a table spans tens of megabytes, and with 4 KiB pages
//! nearly every lookup misses the TLB as well as the cache (in a virtual
//! machine a TLB miss walks two page tables). Asking Linux to back the
//! table with 2 MiB pages (`MADV_HUGEPAGE`, honoured when
//! `/sys/kernel/mm/transparent_hugepage/enabled` is `always` or `madvise`)
//! took about a quarter off a lookup at 1M keys here. Small tables, and
//! other systems, use the global allocator unchanged.

use std::alloc::Layout;
use std::ptr::NonNull;

use allocator_api2::alloc::{AllocError, Allocator, Global};

/// One huge page on x86-64 and aarch64 Linux.
const HUGE_PAGE: usize = 2 << 20;

/// The global allocator, with blocks of a huge page or more aligned to a
/// huge page and marked for huge pages. Sizes are not rounded up: the
/// kernel backs the whole huge pages inside the block with huge pages and
/// the tail, if any, with small ones.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct HugePages;

impl HugePages {
    /// The layout actually allocated for `layout`, if it is large enough to
    /// be worth huge pages. A function of `layout` alone, so freeing a block
    /// recomputes the layout it was allocated with.
    fn huge(layout: Layout) -> Option<Layout> {
        if layout.size() < HUGE_PAGE {
            return None;
        }
        Layout::from_size_align(layout.size(), layout.align().max(HUGE_PAGE)).ok()
    }
}

// SAFETY: every block comes from `Global` and goes back to it with the
// layout it was allocated with (`huge` is deterministic).
unsafe impl Allocator for HugePages {
    fn allocate(&self, layout: Layout) -> Result<NonNull<[u8]>, AllocError> {
        let Some(huge) = Self::huge(layout) else {
            return Global.allocate(layout);
        };
        let block = Global.allocate(huge)?;
        #[cfg(target_os = "linux")]
        // SAFETY: the range is exactly the block just allocated, starting on
        // a page boundary; the call only advises the kernel, and a refusal
        // (for example huge pages disabled) leaves ordinary pages.
        unsafe {
            libc::madvise(block.as_ptr().cast(), huge.size(), libc::MADV_HUGEPAGE);
        }
        Ok(block)
    }

    unsafe fn deallocate(&self, ptr: NonNull<u8>, layout: Layout) {
        let layout = Self::huge(layout).unwrap_or(layout);
        // SAFETY: `ptr` was allocated by `allocate` with this same layout.
        unsafe { Global.deallocate(ptr, layout) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_blocks_are_aligned_to_a_huge_page_and_usable() {
        let layout = Layout::from_size_align(3 * HUGE_PAGE + 8, 16).unwrap();
        let block = HugePages.allocate(layout).unwrap();
        let ptr = block.as_ptr().cast::<u8>();
        assert_eq!(ptr as usize % HUGE_PAGE, 0);
        assert!(block.len() >= layout.size());
        // SAFETY: the block holds `layout.size()` writable bytes and is
        // freed once, with the layout it was allocated with.
        unsafe {
            std::ptr::write_bytes(ptr, 0xA5, layout.size());
            assert_eq!(*ptr.add(layout.size() - 1), 0xA5);
            HugePages.deallocate(NonNull::new(ptr).unwrap(), layout);
        }
    }

    #[test]
    fn a_table_grows_through_both_paths() {
        // About 250k buckets of 16 bytes: the last growths take the huge path.
        let hash = |key: u64| key.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let mut table = crate::table::Table::new(0.0);
        for key in 0..200_000u64 {
            table.insert(hash(key), (key, !key), &|(k, _)| hash(*k));
        }
        assert!(table.allocation_size() > HUGE_PAGE);
        for key in (0..200_000u64).step_by(997) {
            assert_eq!(
                table.find(hash(key), |(k, _)| *k == key),
                Some(&(key, !key))
            );
        }
    }
}
