//! One rule's heavy-hitter summary counting hits, for callgrind: what the
//! instructions of one `HeavyHitters::record` are measured on
//! (docs/PERFORMANCE.md, "The heavy-hitter summary's share"). `new` sends a
//! key the summary does not hold every time (each replaces one of the
//! smallest of 100, the layer bench's case); `held` cycles through 100 keys
//! it holds (a heavy hitter's case). Keys are the layer bench's (50 bytes).
//!
//! ```sh
//! cargo build --release -p tollgate --example top_cost
//! valgrind --tool=callgrind --callgrind-out-file=/dev/null --collect-atstart=no \
//!     --toggle-collect='*top_cost*measured*' target/release/examples/top_cost new|held N
//! ```
//!
//! Instructions per record: callgrind's total (`Collected`) over `N`.

use tollgate::top::{HeavyHitters, Hit, TopConfig};

/// One hit of each of `keys`, all in the first sub-window, as `hit`.
#[inline(never)]
fn measured(summary: &HeavyHitters, keys: &[String], hit: Hit) {
    for (i, key) in keys.iter().enumerate() {
        summary.record(i as u64, key, hit, 1);
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (held, n) = match args.as_slice() {
        [case, n] if case == "new" || case == "held" => match n.parse::<usize>() {
            Ok(n) => (case == "held", n),
            Err(_) => usage(),
        },
        _ => usage(),
    };
    let key = |i: usize| {
        format!(
            "api=key-{i:0>8}.example.org/ip=198.18.{}.{}",
            i / 256 % 256,
            i % 256
        )
    };
    let summary = HeavyHitters::new(TopConfig::default());
    let warm: Vec<String> = (0..10_000).map(key).collect();
    // Not counted: the same loop as a closure callgrind is not told of.
    let fill = |keys: &[String]| {
        for key in keys {
            summary.record(0, key, Hit::Admitted, 1);
        }
    };
    fill(&warm);
    let keys: Vec<String> = if held {
        (0..n).map(|i| key(10_000 - 100 + i % 100)).collect()
    } else {
        (0..n).map(|i| key(10_000 + i)).collect()
    };
    measured(&summary, &keys, Hit::Admitted);
}

fn usage() -> ! {
    eprintln!("usage: top_cost new|held N");
    std::process::exit(2);
}
