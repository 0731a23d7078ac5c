//! Input quoted in a message, made safe for a terminal.
//!
//! A trace field, a file name or a flag's value can hold control bytes: an
//! escape sequence would reach the terminal (retitling it, moving the
//! cursor) and a stray `\r` would overwrite the start of the line. Every
//! message that quotes input passes it through [`escape_controls`].
//!
//! ```
//! use tollgate_trace::escape::escape_controls;
//!
//! assert_eq!(escape_controls("a\x1b]0;pwned\x07\r"), r"a\x1b]0;pwned\x07\r");
//! assert_eq!(escape_controls("plain ünïcode"), "plain ünïcode");
//! ```

use std::borrow::Cow;
use std::fmt::Write;

/// `text` with every control character (C0, DEL and C1) written as an
/// escape: `\n`, `\r`, `\t`, `\xNN` below 0x80 and `\u{NN}` above. Other
/// characters, backslashes included, are kept, so escaping twice changes
/// nothing more.
pub fn escape_controls(text: &str) -> Cow<'_, str> {
    if !text.chars().any(char::is_control) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\n' => out.push_str(r"\n"),
            '\r' => out.push_str(r"\r"),
            '\t' => out.push_str(r"\t"),
            c if c.is_control() && c.is_ascii() => {
                let _ = write!(out, r"\x{:02x}", c as u32);
            }
            c if c.is_control() => {
                let _ = write!(out, r"\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_control_character_is_escaped_and_nothing_else() {
        for c in (0..=0x10ffff).filter_map(char::from_u32) {
            let text = c.to_string();
            let escaped = escape_controls(&text);
            assert!(!escaped.chars().any(char::is_control), "{:x}", c as u32);
            assert_eq!(escaped == text, !c.is_control(), "{:x}", c as u32);
        }
        assert_eq!(escape_controls("\0\x7f\u{9b}\t"), r"\x00\x7f\u{9b}\t");
    }

    #[test]
    fn escaping_is_idempotent() {
        let once = escape_controls("x\x1b[2J\r\ny\\z").into_owned();
        assert_eq!(once, r"x\x1b[2J\r\ny\z");
        assert_eq!(escape_controls(&once), once);
    }
}
