//! A buffer each thread reuses to format what a response carries, so that
//! the only allocation left per field or body is the one that keeps its
//! bytes (a `HeaderValue`'s or the body's own).

use std::cell::Cell;

thread_local! {
    static BUFFER: Cell<Vec<u8>> = const { Cell::new(Vec::new()) };
}

/// Runs `write` on this thread's empty buffer and gives the buffer back
/// (a nested call, which nothing makes, would get a fresh one).
pub(crate) fn bytes<R>(write: impl FnOnce(&mut Vec<u8>) -> R) -> R {
    BUFFER.with(|cell| {
        let mut buffer = cell.take();
        buffer.clear();
        let result = write(&mut buffer);
        cell.set(buffer);
        result
    })
}

/// [`bytes`] as text.
pub(crate) fn text<R>(write: impl FnOnce(&mut String) -> R) -> R {
    bytes(|buffer| {
        // Empty, so valid UTF-8 with nothing to check.
        let mut text = String::from_utf8(std::mem::take(buffer)).unwrap_or_default();
        let result = write(&mut text);
        *buffer = text.into_bytes();
        result
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_use_starts_empty_and_keeps_the_allocation() {
        let first = text(|out| {
            out.push_str("ratelimit");
            out.as_ptr()
        });
        let second = text(|out| {
            assert!(out.is_empty());
            out.push('x');
            out.as_ptr()
        });
        assert_eq!(first, second);
        bytes(|out| assert!(out.is_empty()));
    }
}
