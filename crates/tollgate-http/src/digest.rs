//! The one hash tollgate-http shows in place of a secret: header keys are
//! stored as it, and logs name keys by it.

use sha2::{Digest, Sha256};

/// The first 128 bits of SHA-256 of `bytes`, as 32 lower-case hex digits:
/// short enough for a store key, long enough that two clients never share
/// one by accident, and not reversible to the secret.
pub fn digest(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(32);
    push_digest(&mut out, bytes);
    out
}

/// [`digest`], appended to `out` (a store key being written).
pub(crate) fn push_digest(out: &mut String, bytes: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for b in digest_bytes(bytes) {
        out.push(char::from(HEX[usize::from(b >> 4)]));
        out.push(char::from(HEX[usize::from(b & 0xf)]));
    }
}

/// The same 128 bits as bytes.
pub fn digest_bytes(bytes: &[u8]) -> [u8; 16] {
    let sum = Sha256::digest(bytes);
    let mut out = [0; 16];
    out.copy_from_slice(&sum[..16]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_value() {
        // SHA-256("abc") starts ba7816bf8f01cfea414140de5dae2223.
        assert_eq!(digest(b"abc"), "ba7816bf8f01cfea414140de5dae2223");
        assert_ne!(digest(b"abd"), digest(b"abc"));
    }
}
