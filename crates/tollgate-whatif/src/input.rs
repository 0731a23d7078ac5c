//! Reading a log: plain or gzip (told apart by the magic bytes, not the
//! name), split into lines in large blocks with a bound on the line length,
//! so neither a huge file nor a file without newlines can exhaust memory.

use std::io::{self, BufRead, BufReader, Read};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use flate2::read::MultiGzDecoder;

/// The longest line kept, in bytes; a longer one is counted as malformed and
/// skipped without being buffered.
pub const MAX_LINE_BYTES: usize = 64 * 1024;

/// Bytes read per refill of the line splitter.
const BLOCK_BYTES: usize = 1 << 20;

/// The first two bytes of every gzip member (RFC 1952).
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// A reader that counts the bytes taken from the underlying source (the
/// compressed bytes for a gzip file), for a progress bar over its size.
pub struct Counted<R> {
    inner: R,
    read: Arc<AtomicU64>,
}

impl<R: Read> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

/// `source` decompressed if it starts with the gzip magic bytes, as is
/// otherwise; `read` counts the raw bytes consumed.
pub fn open(
    source: impl Read + Send + 'static,
    read: Arc<AtomicU64>,
) -> io::Result<Box<dyn Read + Send>> {
    let mut buffered = BufReader::with_capacity(
        BLOCK_BYTES,
        Counted {
            inner: source,
            read,
        },
    );
    let head = buffered.fill_buf()?;
    if head.starts_with(&GZIP_MAGIC) {
        Ok(Box::new(MultiGzDecoder::new(buffered)))
    } else {
        Ok(Box::new(buffered))
    }
}

/// One line from [`Lines::next_line`].
#[derive(Debug, PartialEq, Eq)]
pub enum Line<'a> {
    /// A line without its `\n` or `\r\n`.
    Text(&'a [u8]),
    /// A line over [`MAX_LINE_BYTES`], skipped: its first
    /// [`HEAD_BYTES`], to show which line it was.
    TooLong(&'a [u8]),
}

/// How much of an over-long line is kept to show.
pub const HEAD_BYTES: usize = 160;

/// Splits a reader into lines, reading in blocks of a mebibyte.
pub struct Lines<R> {
    input: R,
    buf: Vec<u8>,
    /// Start of the unconsumed bytes in `buf`.
    start: usize,
    /// End of the valid bytes in `buf`.
    end: usize,
    eof: bool,
    /// The head of the over-long line being skipped.
    head: Vec<u8>,
}

impl<R: Read> Lines<R> {
    /// Lines of `input`.
    pub fn new(input: R) -> Self {
        Lines {
            input,
            buf: vec![0; BLOCK_BYTES],
            start: 0,
            end: 0,
            eof: false,
            head: Vec::new(),
        }
    }

    /// The next line, `None` at the end of the input.
    pub fn next_line(&mut self) -> io::Result<Option<Line<'_>>> {
        let mut skipping = false;
        loop {
            if let Some(i) = memchr::memchr(b'\n', &self.buf[self.start..self.end]) {
                let (from, to) = (self.start, self.start + i);
                self.start = to + 1;
                if skipping {
                    return Ok(Some(Line::TooLong(&self.head)));
                }
                if to - from > MAX_LINE_BYTES + 1 {
                    return Ok(Some(self.too_long(from)));
                }
                return Ok(Some(self.text(from, to)));
            }
            if self.eof {
                if self.start == self.end && !skipping {
                    return Ok(None);
                }
                let (from, to) = (self.start, self.end);
                self.start = self.end;
                if skipping {
                    return Ok(Some(Line::TooLong(&self.head)));
                }
                if to - from > MAX_LINE_BYTES + 1 {
                    return Ok(Some(self.too_long(from)));
                }
                return Ok(Some(self.text(from, to)));
            }
            if self.end - self.start > MAX_LINE_BYTES + 1 {
                // No newline within the bound: drop what is buffered and
                // skip to the next newline.
                skipping = true;
                self.head.clear();
                self.head
                    .extend_from_slice(&self.buf[self.start..self.start + HEAD_BYTES]);
                self.start = 0;
                self.end = 0;
            } else if self.start > 0 {
                self.buf.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            }
            let n = read_retrying(&mut self.input, &mut self.buf[self.end..])?;
            if n == 0 {
                self.eof = true;
            }
            self.end += n;
        }
    }

    fn text(&self, from: usize, mut to: usize) -> Line<'_> {
        if to > from && self.buf[to - 1] == b'\r' {
            to -= 1;
        }
        if to - from > MAX_LINE_BYTES {
            return self.too_long(from);
        }
        Line::Text(&self.buf[from..to])
    }

    /// The over-long line starting at `from` in the buffer.
    fn too_long(&self, from: usize) -> Line<'_> {
        Line::TooLong(&self.buf[from..from + HEAD_BYTES])
    }
}

fn read_retrying(input: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        match input.read(buf) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// Each line, or the head of an over-long one as the error.
    fn all(input: &[u8]) -> Vec<Result<Vec<u8>, Vec<u8>>> {
        let mut lines = Lines::new(input);
        let mut out = Vec::new();
        while let Some(line) = lines.next_line().unwrap() {
            out.push(match line {
                Line::Text(t) => Ok(t.to_vec()),
                Line::TooLong(head) => Err(head.to_vec()),
            });
        }
        out
    }

    #[test]
    fn endings_and_a_missing_last_newline() {
        let got = all(b"a\r\nb\n\nc");
        assert_eq!(
            got,
            [
                Ok(b"a".to_vec()),
                Ok(b"b".to_vec()),
                Ok(vec![]),
                Ok(b"c".to_vec())
            ]
        );
        assert!(all(b"").is_empty());
    }

    #[test]
    fn long_lines_are_skipped_whole_across_blocks() {
        let mut input = Vec::new();
        input.extend_from_slice(b"first\n");
        input.extend(std::iter::repeat_n(b'x', 3 * BLOCK_BYTES));
        input.extend_from_slice(b"\nafter\n");
        input.extend(std::iter::repeat_n(b'y', MAX_LINE_BYTES));
        input.extend_from_slice(b"\r\n");
        input.extend(std::iter::repeat_n(b'z', MAX_LINE_BYTES + 1));
        let got = all(&input);
        assert_eq!(got.len(), 5);
        assert_eq!(got[0], Ok(b"first".to_vec()));
        // The skipped lines show their beginning.
        assert_eq!(got[1], Err(vec![b'x'; HEAD_BYTES]));
        assert_eq!(got[2], Ok(b"after".to_vec()));
        assert_eq!(got[3].as_ref().unwrap().len(), MAX_LINE_BYTES);
        assert_eq!(got[4], Err(vec![b'z'; HEAD_BYTES]));
    }

    #[test]
    fn gzip_is_recognised_by_its_magic_bytes() {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(b"one\ntwo\n").unwrap();
        let bytes = gz.finish().unwrap();
        let size = bytes.len() as u64;
        let read = Arc::new(AtomicU64::new(0));
        let mut text = String::new();
        open(io::Cursor::new(bytes), read.clone())
            .unwrap()
            .read_to_string(&mut text)
            .unwrap();
        assert_eq!(text, "one\ntwo\n");
        assert_eq!(read.load(Ordering::Relaxed), size);
        let mut plain = String::new();
        open(&b"\x1f plain"[..], Arc::default())
            .unwrap()
            .read_to_string(&mut plain)
            .unwrap();
        assert_eq!(plain, "\x1f plain");
    }
}
