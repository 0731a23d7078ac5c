//! Key types that own memory and may still be compared without the shard's
//! lock: `String`, `CompactKey` and their kin.
//!
//! A lock-free read ([`crate::sharded::Probe::peek`]) compares the key it
//! looks for with a bit copy of a stored key, which another thread may be
//! removing meanwhile. For a key without drop glue (`u64`, `&'static str`)
//! that is always sound. For a key that owns memory, it is sound when
//! three things hold, and this module names the types they are known to
//! hold for:
//!
//! 1. Whatever code can run on a `&K` (the type's own methods, and any
//!    `Borrow` or `Eq` a user writes for it, which sees only that public
//!    surface) only reads the memory the key owns, or changes a reference
//!    count atomically (`Arc`). No type here has interior mutability, and
//!    all are `Sync`, so reading through a bit copy is what reading through
//!    a `&K` shared with another thread is.
//! 2. The map never writes to that memory while the key is stored: it
//!    hands out no `&mut K`, and moving an entry (a removal shifting its
//!    neighbours back, a table's growth) moves the key's own bytes, not
//!    what they point to.
//! 3. The memory is freed only when the key is dropped, and a removed key
//!    is dropped only after every read that may have seen it ends
//!    ([`crate::readers::wait`], in [`crate::sharded::Shard::remove`]).
//!
//! A key type of the user's own is not listed (nothing in Rust can tell
//! what its `Eq` does on a copy, an inline lock for one): its refusals take
//! the locked path, as they always could.
//!
//! ```text
//! readable_in_place::<String>()            == true
//! readable_in_place::<tollgate::CompactKey>() == true
//! readable_in_place::<Vec<String>>()       == false (its elements own memory too)
//! ```

use std::any::TypeId;
use std::sync::Arc;

use crate::CompactKey;

/// Whether `K`, a type with drop glue, is one whose stored keys a read
/// without the lock may compare (see the module's three conditions).
/// Types are told apart by [`typeid::of`], which erases lifetimes: every
/// type listed has none, so a match is that very type.
pub(crate) fn readable_in_place<K: ?Sized>() -> bool {
    let listed: [TypeId; 7] = [
        typeid::of::<String>(),
        typeid::of::<Box<str>>(),
        typeid::of::<Arc<str>>(),
        typeid::of::<Vec<u8>>(),
        typeid::of::<Box<[u8]>>(),
        typeid::of::<Arc<[u8]>>(),
        typeid::of::<CompactKey>(),
    ];
    listed.contains(&typeid::of::<K>())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_listed_types_are_read_in_place() {
        assert!(readable_in_place::<String>());
        assert!(readable_in_place::<Box<str>>());
        assert!(readable_in_place::<Arc<str>>());
        assert!(readable_in_place::<Vec<u8>>());
        assert!(readable_in_place::<CompactKey>());
        // Lookalikes: their parts own memory, or their `Eq` is the user's.
        struct Named(#[allow(dead_code)] String);
        assert!(!readable_in_place::<Named>());
        assert!(!readable_in_place::<Vec<String>>());
        assert!(!readable_in_place::<Box<String>>());
        assert!(!readable_in_place::<std::rc::Rc<str>>());
        assert!(!readable_in_place::<(String, u64)>());
    }
}
