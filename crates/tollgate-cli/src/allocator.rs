//! The binary's allocator: mimalloc, asked the way its own `malloc` is
//! fastest.
//!
//! A Rust allocation carries an alignment, and the `mimalloc` crate passes
//! every one to `mi_malloc_aligned`. That call's fast path only serves
//! blocks of up to 1 KiB; a larger block (hyper's buffers, a boxed request
//! future) whose size class is not a power of two goes to an over-allocating
//! fallback, although any mimalloc block is already 16-byte aligned. Counted
//! in the proxy under callgrind, a request's fourteen allocations cost 1,570
//! instructions that way, six of them through the fallback
//! (docs/PERFORMANCE.md, "Session 15"). As Rust's own `System` allocator
//! does with `malloc`, an alignment that plain `mi_malloc` already
//! guarantees goes to plain `mi_malloc`; only the rare larger one (Tokio's
//! 128-byte aligned task cells) takes the aligned call.

use std::alloc::{GlobalAlloc, Layout};
use std::ffi::c_void;

use libmimalloc_sys as mi;

/// The alignment every `mi_malloc` block of at least this size has
/// (mimalloc's `MI_MAX_ALIGN_SIZE`, `alignof(max_align_t)`); a smaller
/// block is aligned to its size rounded up to a power of two, hence the
/// `align <= size` condition below, as in `System`.
const MALLOC_ALIGN: usize = 16;

/// mimalloc for every allocation of the `tollgate` binary.
pub(crate) struct MiMalloc;

/// Whether plain `mi_malloc(size)` returns a block aligned for `layout`.
fn plain(align: usize, size: usize) -> bool {
    align <= MALLOC_ALIGN && align <= size
}

/// `mi_malloc` or `mi_zalloc`, and their aligned forms.
type Plain = unsafe extern "C" fn(usize) -> *mut c_void;
type Aligned = unsafe extern "C" fn(usize, usize) -> *mut c_void;

/// A block for `layout` from `plain` when its alignment allows, else from
/// `aligned`.
///
/// # Safety
///
/// `layout` has a non-zero size, as `GlobalAlloc::alloc` requires.
#[inline]
unsafe fn allocate(layout: Layout, plain_call: Plain, aligned_call: Aligned) -> *mut u8 {
    // SAFETY: mimalloc accepts any size and any power-of-two alignment.
    unsafe {
        if plain(layout.align(), layout.size()) {
            plain_call(layout.size()).cast()
        } else {
            aligned_call(layout.size(), layout.align()).cast()
        }
    }
}

// SAFETY: every block comes from mimalloc and goes back to `mi_free`, which
// frees aligned and plain blocks alike; each call below returns a block
// aligned for the layout it was given (see `plain`), or null on failure.
unsafe impl GlobalAlloc for MiMalloc {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's layout, as `alloc` requires.
        unsafe { allocate(layout, mi::mi_malloc, mi::mi_malloc_aligned) }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as `alloc`.
        unsafe { allocate(layout, mi::mi_zalloc, mi::mi_zalloc_aligned) }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        // SAFETY: `ptr` came from this allocator.
        unsafe { mi::mi_free(ptr.cast::<c_void>()) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `ptr` came from this allocator with `layout`; the new
        // block keeps `layout`'s alignment.
        unsafe {
            if plain(layout.align(), new_size) {
                mi::mi_realloc(ptr.cast::<c_void>(), new_size).cast()
            } else {
                mi::mi_realloc_aligned(ptr.cast::<c_void>(), new_size, layout.align()).cast()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Allocates `layout` through each of the four calls, checks every
    /// block's alignment and contents, and frees it.
    fn check(layout: Layout) {
        let (size, align) = (layout.size(), layout.align());
        // SAFETY: a non-zero size and a valid layout; each block is freed
        // with the layout it has at that point.
        unsafe {
            let p = MiMalloc.alloc(layout);
            assert!(!p.is_null());
            assert_eq!(p as usize % align, 0, "alloc {size} aligned {align}");
            p.write_bytes(0xA5, size);
            let grown = MiMalloc.realloc(p, layout, size * 3);
            assert_eq!(grown as usize % align, 0, "realloc {size} aligned {align}");
            assert!(
                (0..size).all(|i| *grown.add(i) == 0xA5),
                "realloc kept the bytes"
            );
            let grown_layout = Layout::from_size_align(size * 3, align).unwrap();
            let shrunk = MiMalloc.realloc(grown, grown_layout, size);
            assert_eq!(shrunk as usize % align, 0, "shrunk {size} aligned {align}");
            assert!(
                (0..size).all(|i| *shrunk.add(i) == 0xA5),
                "shrinking kept the bytes"
            );
            MiMalloc.dealloc(shrunk, layout);
            let z = MiMalloc.alloc_zeroed(layout);
            assert_eq!(z as usize % align, 0, "zalloc {size} aligned {align}");
            assert!((0..size).all(|i| *z.add(i) == 0), "zalloc zeroed");
            MiMalloc.dealloc(z, layout);
        }
    }

    /// Every size a Rust type can have (a multiple of its alignment) up to
    /// 8 KiB, for the alignments plain `mi_malloc` serves: each size class
    /// of mimalloc's is reached, with other blocks of the class alive so
    /// that the block is not always a page's first.
    #[test]
    fn plain_blocks_are_aligned_for_their_layout() {
        for align in [1, 2, 4, 8, 16] {
            let mut alive = Vec::new();
            for size in (align..=8192).step_by(align) {
                let layout = Layout::from_size_align(size, align).unwrap();
                check(layout);
                alive.push(vec![0u8; size]);
            }
        }
    }

    /// Larger alignments, and sizes under the alignment, take the aligned
    /// calls and get what they asked for.
    #[test]
    fn aligned_blocks_are_aligned_for_their_layout() {
        for align in [32, 64, 128, 4096] {
            for size in [align, 3 * align, 70_000 / align * align + align] {
                check(Layout::from_size_align(size, align).unwrap());
            }
        }
        for (size, align) in [(1, 2), (4, 8), (8, 16), (24, 32)] {
            check(Layout::from_size_align(size, align).unwrap());
        }
    }
}
