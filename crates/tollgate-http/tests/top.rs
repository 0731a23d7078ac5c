//! The layer's `/v1/top` service: heavy hitters among many distinct keys
//! named per rule, shadow refusals counted apart, secret header keys shown
//! as their digests, old traffic leaving the window (on a fake clock).

use std::convert::Infallible;
use std::time::Duration;

use http::{HeaderName, Request, Response, StatusCode};
use serde_json::Value;
use tollgate::top::TopConfig;
use tollgate::{Algorithm, FakeClock, Limit, MemoryBackend, Quota};
use tollgate_http::{digest as key_digest, HeaderKey, Key, RateLimit, Rule, TopService};
use tower::{service_fn, Layer, Service, ServiceExt};

const TOP_SHAPE_KEYS: usize = 20;

fn layer(clock: &FakeClock) -> RateLimit<MemoryBackend<FakeClock>> {
    let per_key = Rule::new(
        "per-key",
        Limit::new(Algorithm::FixedWindow, Quota::per_minute(10).unwrap()),
    )
    .key(Key::header("x-api-key"));
    let tenant = Key::Header(HeaderKey {
        name: HeaderName::from_static("x-tenant"),
        hashed: false,
    });
    let per_tenant = Rule::new(
        "per-tenant",
        Limit::new(Algorithm::FixedWindow, Quota::per_minute(100).unwrap()),
    )
    .key(tenant)
    .shadow();
    RateLimit::builder(MemoryBackend::with_clock(clock.clone()))
        .rule(per_key)
        .rule(per_tenant)
        .top(TopConfig::new(TOP_SHAPE_KEYS, 10_000_000_000, 60).unwrap())
        .top_clock(clock.clone())
        .build()
        .unwrap()
}

async fn send<S>(svc: &mut S, api_key: &str, tenant: &str) -> StatusCode
where
    S: Service<
        Request<()>,
        Response = Response<tollgate_http::LimitBody<String>>,
        Error = Infallible,
    >,
{
    let request = Request::get("/")
        .header("x-api-key", api_key)
        .header("x-tenant", tenant)
        .body(())
        .unwrap();
    svc.ready()
        .await
        .unwrap()
        .call(request)
        .await
        .unwrap()
        .status()
}

async fn top(service: &TopService, query: &str) -> (StatusCode, Value) {
    let request = Request::get(format!("/v1/top{query}")).body(()).unwrap();
    let response = service.clone().oneshot(request).await.unwrap();
    let status = response.status();
    (status, serde_json::from_str(response.body()).unwrap())
}

fn rule<'a>(top: &'a Value, name: &str) -> &'a Value {
    top["rules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["rule"] == name)
        .unwrap_or_else(|| panic!("no rule {name} in {top}"))
}

#[tokio::test]
async fn names_the_heavy_hitters_among_many_distinct_keys() {
    let clock = FakeClock::new();
    let limit = layer(&clock);
    let mut svc = limit.layer(service_fn(|_req: Request<()>| async {
        Ok::<_, Infallible>(Response::new(String::from("ok")))
    }));
    // 2,000 clients sending once each, and one sending 60 times (50 of
    // them refused); tenant `big` sends 300, over its shadow limit.
    for i in 0..2_000 {
        let tenant = if i % 10 == 0 { "big" } else { "small" };
        assert_eq!(
            send(&mut svc, &format!("key-{i}"), tenant).await,
            StatusCode::OK
        );
        clock.advance(Duration::from_millis(1));
    }
    let mut refused = 0;
    for _ in 0..60 {
        if send(&mut svc, "sk-heavy", "big").await == StatusCode::TOO_MANY_REQUESTS {
            refused += 1;
        }
    }
    assert_eq!(refused, 50);
    for i in 0..40 {
        send(&mut svc, &format!("one-off-{i}"), "big").await;
    }

    let service = limit.top_service();
    let (status, body) = top(&service, "?n=3").await;
    assert_eq!(status, StatusCode::OK);
    let per_key = rule(&body, "per-key");
    assert_eq!(per_key["limit"]["requests"], 10);
    let minute = &per_key["windows"][0];
    assert_eq!(minute["window_s"], 60);
    assert_eq!(minute["totals"]["hits"], 2_100);
    assert_eq!(minute["totals"]["refused"], 50);
    let error_bound = minute["error_bound"].as_u64().unwrap();
    assert!(error_bound <= 2_100 / TOP_SHAPE_KEYS as u64, "{minute}");
    let heaviest = &minute["keys"][0];
    // The API key shows as its digest, as in the store, never as itself.
    assert_eq!(
        heaviest["key"],
        format!("header.x-api-key={}", key_digest(b"sk-heavy"))
    );
    assert!(!body.to_string().contains("sk-heavy"));
    let hits = heaviest["hits"].as_u64().unwrap();
    let error = heaviest["error"].as_u64().unwrap();
    assert!(hits >= 60 && hits - error <= 60, "{heaviest}");
    assert!(heaviest["refused"].as_u64().unwrap() <= 50);
    assert!(heaviest["refused"].as_u64().unwrap() + error >= 50);
    // 60 hits against 10 a minute over the ~2 s covered: far over.
    assert!(heaviest["limit_ratio"].as_f64().unwrap() > 1.0);
    assert_eq!(minute["keys"].as_array().unwrap().len(), 3);

    // The shadow rule counts what it would refuse, and refuses nothing.
    // It is not asked for the 50 requests `per-key` refused first: `big`
    // came 250 times, `small` 1,800, each 100 within its limit.
    let tenant = &rule(&body, "per-tenant")["windows"][0];
    assert_eq!(tenant["totals"]["hits"], 2_050);
    assert_eq!(tenant["totals"]["refused"], 0);
    assert_eq!(tenant["totals"]["shadow_refused"], 150 + 1_700);
    let keys = tenant["keys"].as_array().unwrap();
    let big = keys
        .iter()
        .find(|k| k["key"] == "header.x-tenant=big")
        .unwrap();
    assert_eq!(
        (big["hits"].as_u64(), big["error"].as_u64()),
        (Some(250), Some(0))
    );
    assert_eq!(big["shadow_refused"], 150);

    // Ten minutes on, the last minute is empty; the last ten still hold it.
    clock.advance(Duration::from_secs(120));
    let (_, later) = top(&service, "").await;
    let per_key = rule(&later, "per-key");
    assert_eq!(per_key["windows"][0]["totals"]["hits"], 0);
    assert_eq!(per_key["windows"][1]["totals"]["hits"], 2_100);
    clock.advance(Duration::from_secs(600));
    let (_, gone) = top(&service, "").await;
    assert_eq!(rule(&gone, "per-key")["windows"][1]["totals"]["hits"], 0);

    let (status, bad) = top(&service, "?n=0").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(bad["field"], "n");
}

/// Layers built over one shared `Top` (a layer rebuilt on a configuration
/// change) keep counting in the same summaries.
#[tokio::test]
async fn a_rebuilt_layer_keeps_counting_in_shared_summaries() {
    use std::sync::Arc;
    use tollgate::top::Top;
    use tollgate::Clock;

    let clock = FakeClock::new();
    let shared = Arc::new(Top::new(TopConfig::default()));
    let build = || {
        let per_tenant = Rule::new(
            "per-tenant",
            Limit::new(Algorithm::FixedWindow, Quota::per_minute(100).unwrap()),
        )
        .key(Key::Header(HeaderKey {
            name: HeaderName::from_static("x-tenant"),
            hashed: false,
        }));
        RateLimit::builder(MemoryBackend::with_clock(clock.clone()))
            .rule(per_tenant)
            .top_in(Arc::clone(&shared), Arc::new(clock.clone()))
            .build()
            .unwrap()
    };
    for _ in 0..2 {
        let mut svc = build().layer(service_fn(|_req: Request<()>| async {
            Ok::<_, Infallible>(Response::new(String::from("ok")))
        }));
        send(&mut svc, "k", "acme").await;
    }
    let summary = shared.rule("per-tenant").unwrap();
    let report = summary.report(clock.now(), 60_000_000_000, 10);
    assert_eq!(report.keys[0].key, "header.x-tenant=acme");
    assert_eq!(report.keys[0].hits, 2);
}

/// With the summaries off, requests are still limited, and nothing is
/// counted: `/v1/top` reports no rule, and a shared `Top` gets none.
#[tokio::test]
async fn summaries_off_count_nothing_and_still_limit() {
    use std::sync::Arc;
    use tollgate::top::Top;

    let clock = FakeClock::new();
    let shared = Arc::new(Top::new(TopConfig::default()));
    let limit = RateLimit::builder(MemoryBackend::with_clock(clock.clone()))
        .rule(
            Rule::new(
                "per-key",
                Limit::new(Algorithm::FixedWindow, Quota::per_minute(2).unwrap()),
            )
            .key(Key::header("x-api-key")),
        )
        .top_in(Arc::clone(&shared), Arc::new(clock.clone()))
        .summaries(false)
        .build()
        .unwrap();
    let mut svc = limit.layer(service_fn(|_req: Request<()>| async {
        Ok::<_, Infallible>(Response::new(String::from("ok")))
    }));
    let mut statuses = Vec::new();
    for _ in 0..3 {
        statuses.push(send(&mut svc, "k", "acme").await);
    }
    assert_eq!(
        statuses,
        [
            StatusCode::OK,
            StatusCode::OK,
            StatusCode::TOO_MANY_REQUESTS
        ]
    );
    let (status, body) = top(&limit.top_service(), "").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["rules"], serde_json::json!([]));
    assert!(shared.rules().is_empty());
}
