//! A deterministic generator of realistic access logs, for the sample log
//! shipped in `examples/`, the tests and the benchmark.
//!
//! Four hours of traffic from 2026-11-02 08:00 UTC in the `combined-xff`
//! format (combined plus `"$http_x_forwarded_for"`), with about:
//!
//! - 35% from a few heavy clients (API integrations): steady Poisson
//!   traffic plus a burst of 120 requests in 6 seconds every 10 minutes;
//! - 10% from a bot crawling product pages at 8 a second for a stretch of
//!   the second hour;
//! - 55% from many light clients (a browsing session now and then); a
//!   quarter of them on IPv6, rotating addresses within their /64, and a
//!   fifth behind the load balancer at 10.0.0.0/8, which appends their
//!   address to `X-Forwarded-For`; a few of those put a forged address in
//!   front of it;
//! - one line in a thousand malformed (truncated, binary, a TLS handshake
//!   sent to the HTTP port).
//!
//! Lines are written in completion order (the time logged is the request's
//! start, and requests take up to two seconds), so the log is out of order
//! by up to two seconds, as a real one is. The same seed and size give the
//! same bytes.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io::{self, Write};

use tollgate_sim::rng::PyRandom;

/// The log format of the generated lines, for `--log-format`.
pub const FORMAT: &str = "combined-xff";
/// 2026-11-02 08:00:00 UTC, the first request's time, in seconds.
pub const START_S: u64 = 1_793_606_400;
const DURATION_S: f64 = 4.0 * 3600.0;
const NS: f64 = 1e9;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Heavy,
    Bot,
    Light,
}

struct Client {
    kind: Kind,
    /// Requests per second on average (outside the heavy clients' bursts).
    rate: f64,
    id: u32,
    v6: bool,
    proxied: bool,
    spoofs: bool,
}

const AGENTS: [&str; 4] = [
    "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0",
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_5) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.5 Safari/605.1.15",
    "okhttp/4.12.0",
    "python-requests/2.32.3",
];

/// Writes a log of `lines` lines generated from `seed`.
pub fn generate(seed: u64, lines: u64, out: &mut impl Write) -> io::Result<()> {
    let mut rng = PyRandom::new(seed);
    let total_rate = lines as f64 / DURATION_S;
    let heavy = 3 + (lines / 1_000_000) as u32;
    let light = (lines / 250).max(200) as u32;
    let mut clients = Vec::new();
    for id in 0..heavy {
        // Uneven: the first heavy client sends the most.
        let weight = 1.0 / f64::from(id + 1);
        let norm: f64 = (0..heavy).map(|i| 1.0 / f64::from(i + 1)).sum();
        // The bursts carry 120 requests every 600 s.
        let rate = (0.35 * total_rate * weight / norm - 0.2).max(0.01);
        clients.push(Client {
            kind: Kind::Heavy,
            rate,
            id,
            v6: false,
            proxied: false,
            spoofs: false,
        });
    }
    clients.push(Client {
        kind: Kind::Bot,
        rate: 8.0,
        id: 0,
        v6: false,
        proxied: false,
        spoofs: false,
    });
    for id in 0..light {
        // Light clients vary tenfold in how busy they are.
        let r = rng.random();
        let rate = 0.55 * total_rate / f64::from(light) * (0.25 + 1.5 * r);
        let v6 = id % 4 == 1;
        let proxied = id % 5 == 2;
        clients.push(Client {
            kind: Kind::Light,
            rate,
            id,
            v6,
            proxied,
            spoofs: proxied && id % 3 == 0,
        });
    }
    // The next request of each client, earliest first.
    let mut next: BinaryHeap<Reverse<(u64, usize)>> = BinaryHeap::new();
    for (i, c) in clients.iter().enumerate() {
        let start = match c.kind {
            Kind::Bot => 3600.0 + 600.0,
            _ => rng.expovariate(c.rate),
        };
        next.push(Reverse(((start * NS) as u64, i)));
    }
    // Lines waiting for their completion time to be written.
    let mut pending: BinaryHeap<Reverse<(u64, u64, Vec<u8>)>> = BinaryHeap::new();
    let mut written = 0u64;
    let mut sequence = 0u64;
    let mut line = Vec::with_capacity(256);
    while written < lines {
        let Some(Reverse((t, i))) = next.pop() else {
            break;
        };
        while let Some(Reverse((done, _, _))) = pending.peek() {
            if *done > t {
                break;
            }
            let Some(Reverse((_, _, text))) = pending.pop() else {
                break;
            };
            out.write_all(&text)?;
            written += 1;
            if written == lines {
                return Ok(());
            }
        }
        let c = &clients[i];
        line.clear();
        if rng.random() < 0.001 {
            malformed(&mut rng, t, &mut line);
        } else {
            request(&mut rng, c, t, &mut line);
        }
        let done = t + (rng.uniform(0.0, 2.0) * NS) as u64;
        sequence += 1;
        pending.push(Reverse((done, sequence, line.clone())));
        let gap = match c.kind {
            Kind::Bot if t as f64 > (3600.0 + 600.0 + 1500.0) * NS => f64::INFINITY,
            Kind::Bot => rng.uniform(0.5, 1.5) / c.rate,
            Kind::Heavy if (t / 1_000_000_000) % 600 < 6 => rng.expovariate(20.0),
            _ => rng.expovariate(c.rate),
        };
        let mut t_next = t as f64 + gap * NS;
        if c.kind == Kind::Heavy {
            // Jump into the next burst window if the gap passes its start.
            let burst_at = ((t / 1_000_000_000) / 600 + 1) * 600;
            if t_next >= burst_at as f64 * NS && (t / 1_000_000_000) % 600 >= 6 {
                t_next = burst_at as f64 * NS;
            }
        }
        if t_next < DURATION_S * NS {
            next.push(Reverse((t_next as u64, i)));
        } else if next.is_empty() {
            break;
        }
    }
    while written < lines {
        let Some(Reverse((_, _, text))) = pending.pop() else {
            break;
        };
        out.write_all(&text)?;
        written += 1;
    }
    Ok(())
}

fn request(rng: &mut PyRandom, c: &Client, t: u64, out: &mut Vec<u8>) {
    let pick = |rng: &mut PyRandom, n: u32| (rng.random() * f64::from(n)) as u32;
    let (peer, xff) = match c.kind {
        Kind::Heavy => (format!("198.51.100.{}", 10 + c.id % 200), "-".to_string()),
        Kind::Bot => ("203.0.113.66".to_string(), "-".to_string()),
        Kind::Light if c.proxied => {
            let client = format!("192.0.{}.{}", 2 + c.id / 250 % 50, c.id % 250 + 1);
            let forged = if c.spoofs {
                format!(
                    "{}.{}.{}.{}, ",
                    pick(rng, 223) + 1,
                    pick(rng, 255),
                    pick(rng, 255),
                    pick(rng, 254) + 1
                )
            } else {
                String::new()
            };
            (
                format!("10.0.0.{}", 1 + pick(rng, 4)),
                format!("{forged}{client}"),
            )
        }
        Kind::Light if c.v6 => (
            format!(
                "2001:db8:{:x}:{:x}::{:x}",
                c.id / 65_536,
                c.id % 65_536,
                1 + pick(rng, 0xfffe)
            ),
            "-".to_string(),
        ),
        Kind::Light => (
            format!(
                "100.{}.{}.{}",
                64 + c.id / 65_536 % 64,
                c.id / 256 % 256,
                c.id % 256
            ),
            "-".to_string(),
        ),
    };
    let (method, path, status, agent) = match c.kind {
        Kind::Bot => (
            "GET",
            format!("/products/{}", 1000 + pick(rng, 90_000)),
            200,
            "Mozilla/5.0 (compatible; ExampleBot/2.1)",
        ),
        Kind::Heavy => {
            let r = rng.random();
            let path = if r < 0.5 {
                format!(
                    "/api/v1/orders/{:08x}-{:04x}-4{:03x}-a{:03x}-{:012x}",
                    pick(rng, u32::MAX),
                    pick(rng, 0xffff),
                    pick(rng, 0xfff),
                    pick(rng, 0xfff),
                    u64::from(pick(rng, u32::MAX)) << 8
                )
            } else if r < 0.8 {
                format!("/api/v1/products/{}?fields=price", 1000 + pick(rng, 90_000))
            } else {
                format!("/api/v1/search?q=item{}", pick(rng, 500))
            };
            (
                if r < 0.15 { "POST" } else { "GET" },
                path,
                200,
                AGENTS[2 + (c.id as usize % 2)],
            )
        }
        Kind::Light => {
            let r = rng.random();
            let path = if r < 0.4 {
                "/".to_string()
            } else if r < 0.7 {
                format!("/products/{}", 1000 + pick(rng, 90_000))
            } else if r < 0.9 {
                "/static/app.js".to_string()
            } else {
                "/login".to_string()
            };
            (
                if r >= 0.97 { "POST" } else { "GET" },
                path,
                if r >= 0.97 { 302 } else { 200 },
                AGENTS[c.id as usize % 2],
            )
        }
    };
    let bytes = 200 + pick(rng, 20_000);
    let _ = writeln!(
        out,
        "{peer} - - [{}] \"{method} {path} HTTP/1.1\" {status} {bytes} \"-\" \"{agent}\" \"{xff}\"",
        clf(t)
    );
}

fn malformed(rng: &mut PyRandom, t: u64, out: &mut Vec<u8>) {
    match (rng.random() * 3.0) as u32 {
        0 => {
            let _ = write!(out, "100.64.0.9 - - [{}] \"GET /products/12", clf(t));
            out.push(b'\n');
        }
        1 => out.extend_from_slice(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03 binary\x1b[2J\n"),
        _ => {
            let _ = writeln!(
                out,
                "100.64.0.9 - - [{}] \"\\x16\\x03\\x01\" 400 157 \"-\" \"-\" \"-\"",
                clf(t)
            );
        }
    }
}

/// `02/Nov/2026:08:00:00 +0000` for nanoseconds after [`START_S`].
fn clf(t: u64) -> String {
    let minute = crate::time::utc_minute((START_S + t / 1_000_000_000) * 1_000_000_000);
    // `2026-11-02 08:00` to `02/Nov/2026:08:00`.
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let month = MONTHS[minute[5..7].parse::<usize>().unwrap_or(1) - 1];
    format!(
        "{}/{month}/{}:{}:{:02} +0000",
        &minute[8..10],
        &minute[0..4],
        &minute[11..16],
        t / 1_000_000_000 % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_bytes() {
        let mut a = Vec::new();
        let mut b = Vec::new();
        generate(7, 2_000, &mut a).unwrap();
        generate(7, 2_000, &mut b).unwrap();
        assert_eq!(a, b);
        assert_eq!(a.iter().filter(|&&c| c == b'\n').count(), 2_000);
        assert!(crate::time::clf(clf(0).as_bytes()) == Some(START_S * 1_000_000_000));
    }
}
