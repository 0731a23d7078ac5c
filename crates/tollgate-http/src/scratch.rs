//! A buffer each thread reuses to format what a response carries, and a
//! block each thread cuts the finished bytes from ([`shared`]), so that a
//! field or a body costs no allocation of its own.

use std::cell::{Cell, RefCell};

use bytes::{Bytes, BytesMut};
use http::header::{HeaderValue, InvalidHeaderValue};

thread_local! {
    static BUFFER: Cell<Vec<u8>> = const { Cell::new(Vec::new()) };
    static BLOCK: RefCell<BytesMut> = RefCell::new(BytesMut::new());
}

/// The size of a thread's block of response bytes.
const BLOCK_SIZE: usize = 4096;

/// `bytes`, copied into this thread's block and cut from it: the value
/// shares the block, counted, instead of an allocation of its own.
///
/// A block is allocated when the last one is full, and written over again
/// once every value cut from it has been dropped, which hyper does as soon
/// as it has written the response's head (a body's bytes, once sent). So a
/// value keeps at most one block alive. Values larger than a quarter block
/// get an allocation of their own, as before.
pub(crate) fn shared(bytes: &[u8]) -> Bytes {
    if bytes.len() > BLOCK_SIZE / 4 {
        return Bytes::copy_from_slice(bytes);
    }
    BLOCK.with_borrow_mut(|block| {
        if block.capacity() < bytes.len() {
            // Takes back the whole block when nothing cut from it is
            // alive, else starts a new one.
            block.reserve(BLOCK_SIZE);
        }
        block.extend_from_slice(bytes);
        block.split().freeze()
    })
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

/// A header value that `write` writes in this thread's buffer, then kept
/// in this thread's block of response bytes: no allocation of its own (a
/// value over 1 KiB excepted). Used for the fields a response or a
/// forwarded request gets on every message.
///
/// ```
/// let value = tollgate_http::header_value(|out| out.push_str("\"per-ip\";r=9;t=1")).unwrap();
/// assert_eq!(value, "\"per-ip\";r=9;t=1");
/// ```
pub fn header_value(write: impl FnOnce(&mut String)) -> Result<HeaderValue, InvalidHeaderValue> {
    text(|out| {
        write(out);
        HeaderValue::from_maybe_shared(shared(out.as_bytes()))
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

    #[test]
    fn values_keep_their_bytes_while_the_block_is_reused() {
        let kept = shared(b"ratelimit");
        // Enough values to fill several blocks, each dropped at once.
        for i in 0..10 * BLOCK_SIZE {
            let value = format!("\"r\";r={i};t=1");
            assert_eq!(shared(value.as_bytes()), value.as_bytes());
        }
        assert_eq!(kept, &b"ratelimit"[..]);
        let large = vec![b'x'; BLOCK_SIZE];
        assert_eq!(shared(&large), large);
        assert_eq!(shared(b""), &b""[..]);
    }
}
