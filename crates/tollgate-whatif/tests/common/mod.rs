//! Helpers shared by the integration tests.
#![allow(dead_code)]

use tollgate_core::Algorithm;
use tollgate_http::{ClientIp, ForwardedHeader, Key, Routes};
use tollgate_whatif::engine::{self, Options, Outcome};
use tollgate_whatif::format::FormatName;
use tollgate_whatif::policy::Candidates;

pub const MINUTE: u64 = 60_000_000_000;

pub fn options(format: &str, trusted: &[&str]) -> Options {
    Options {
        format: FormatName::parse(format).unwrap(),
        client_ip: ClientIp::behind(
            trusted.iter().map(|n| n.parse().unwrap()),
            ForwardedHeader::XForwardedFor,
        ),
        routes: Routes::default(),
        strict: false,
        workers: 3,
    }
}

/// One GCRA policy of `limit` a minute, burst `burst`, keyed by `key`.
pub fn one(limit: u64, burst: u64, key: Key) -> Candidates {
    Candidates::sweep(Algorithm::Gcra, MINUTE, &[limit], &[burst], key).unwrap()
}

pub fn run(log: &[u8], candidates: &Candidates, options: &Options) -> Outcome {
    engine::run(log, candidates, options, &mut || {}).unwrap()
}

/// `(key, volume, refused by the first policy)` of lane 0, by key.
pub fn keys(outcome: &Outcome) -> Vec<(String, u64, u64)> {
    let mut v: Vec<_> = outcome.lanes[0]
        .keys
        .iter()
        .map(|k| {
            (
                String::from_utf8_lossy(&k.key).into_owned(),
                k.volume,
                k.policies[0].refused,
            )
        })
        .collect();
    v.sort();
    v
}

/// A combined-xff line.
pub fn line(peer: &str, second: u64, path: &str, xff: &str) -> String {
    format!(
        "{peer} - - [02/Nov/2026:08:{:02}:{:02} +0000] \"GET {path} HTTP/1.1\" 200 5 \"-\" \"t\" \"{xff}\"\n",
        second / 60,
        second % 60
    )
}
