//! The one hash tollgate-http shows in place of a secret: header keys are
//! stored as it, and logs name keys by it.

use sha2::{Digest, Sha256};

/// The first 128 bits of SHA-256 of `bytes`, as 32 lower-case hex digits:
/// short enough for a store key, long enough that two clients never share
/// one by accident, and not reversible to the secret.
pub fn digest(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(32);
    for b in digest_bytes(bytes) {
        out.push(char::from_digit(u32::from(b >> 4), 16).unwrap_or('0'));
        out.push(char::from_digit(u32::from(b & 0xf), 16).unwrap_or('0'));
    }
    out
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
