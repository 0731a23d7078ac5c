//! The layer, requests and service both in-process measurements of the
//! layer share: the criterion bench (`benches/layer.rs`) and the
//! instruction count under callgrind (`examples/layer_cost.rs`).

use std::convert::Infallible;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use tollgate::MemoryBackend;
use tollgate_http::{PeerAddr, RateLimit};
use tower::{service_fn, Service};

#[path = "../bench_rules.rs"]
mod bench_rules;

/// Distinct clients, each sending in turn.
pub const KEYS: u32 = 10_000;

/// The `i`th request: client `i % KEYS`, by address and API key.
pub fn request(i: u32) -> Request<()> {
    let ip = IpAddr::V4(Ipv4Addr::from(0xC612_0000 + i % KEYS));
    let mut req = Request::get("/v1/items")
        .header("x-api-key", format!("key-{}", i % KEYS))
        .body(())
        .unwrap();
    req.extensions_mut()
        .insert(PeerAddr(SocketAddr::new(ip, 40000)));
    req
}

/// The trivial service behind the layer.
pub fn handler(
) -> impl Service<Request<()>, Response = Response<Full<Bytes>>, Error = Infallible, Future: Send> + Clone
{
    service_fn(|_req: Request<()>| async {
        Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"ok"))))
    })
}

/// The first `rules` of the bench rules, admitting or refusing, with the
/// heavy-hitter summaries on or off.
pub fn layer(rules: usize, refuse: bool, summaries: bool) -> RateLimit<MemoryBackend> {
    let mut builder = RateLimit::builder(MemoryBackend::new()).summaries(summaries);
    for rule in bench_rules::rules(refuse).into_iter().take(rules) {
        builder = builder.rule(rule);
    }
    builder.build().unwrap()
}
