//! Bounded memory: the peak allocation of a run depends on the keys, not
//! on the number of lines. Measured with a counting allocator (this test
//! binary's global allocator), not RSS.

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};

use tollgate_core::Algorithm;
use tollgate_http::{ClientIp, Key, Routes};
use tollgate_whatif::engine::{self, Options};
use tollgate_whatif::format::FormatName;
use tollgate_whatif::policy::Candidates;

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as is to the system allocator.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let live = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(live, Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: `ptr` was allocated by `alloc` above with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// A log of `lines` lines from 2,000 clients over two hours, to a file.
fn log(lines: u64, dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join(format!("{lines}.log"));
    let mut out = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    for i in 0..lines {
        let s = i * 7_200 / lines;
        writeln!(
            out,
            "192.0.{}.{} - - [02/Nov/2026:{:02}:{:02}:{:02} +0000] \"GET /items/{i} HTTP/1.1\" 200 5 \"-\" \"t\"",
            i % 2_000 / 250,
            i % 250,
            8 + s / 3600,
            s / 60 % 60,
            s % 60
        )
        .unwrap();
    }
    path
}

/// Peak bytes allocated while deciding the file at `path`.
fn peak(path: &std::path::Path) -> usize {
    let limits: Vec<u64> = (1..=20).map(|i| i * 10).collect();
    let c = Candidates::sweep(Algorithm::Gcra, 60_000_000_000, &limits, &[10], Key::ip()).unwrap();
    let options = Options {
        format: FormatName::parse("combined").unwrap(),
        client_ip: ClientIp::socket(),
        routes: Routes::default(),
        strict: false,
        workers: 2,
    };
    let file = std::fs::File::open(path).unwrap();
    let base = LIVE.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    let outcome = engine::run(file, &c, &options, &mut || {}).unwrap();
    assert_eq!(outcome.lanes[0].keys.len(), 2_000);
    PEAK.load(Ordering::Relaxed) - base
}

#[test]
fn peak_allocation_does_not_grow_with_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let small = log(100_000, dir.path());
    let large = log(800_000, dir.path());
    let (a, b) = (peak(&small), peak(&large));
    // Eight times the lines: the same keys, states and queues. The slack
    // covers batches in flight, which do not depend on the log's length.
    assert!(
        b < a + 4 * 1024 * 1024,
        "100k lines: {a} bytes, 800k lines: {b} bytes"
    );
    assert!(b < 64 * 1024 * 1024, "{b} bytes");
}
