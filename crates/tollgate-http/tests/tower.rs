//! The layer around plain tower services (no axum router, no socket):
//! queueing under tokio's paused clock, reconciled costs over a long run,
//! metrics.

use std::convert::Infallible;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use tollgate::{
    Algorithm, Backend, BackendError, FakeClock, Limit, MemoryBackend, Operation, Outcome, Policy,
    Quota,
};
use tollgate_http::{Cost, Key, LimitBody, RateLimit, Reconcile, ReportedCost, Rule};
use tower::{service_fn, Layer, Service, ServiceExt};

type Reply = Response<LimitBody<Full<Bytes>>>;

/// A service that answers at once and reports the cost in `x-used`.
fn service<B: Backend + 'static>(
    layer: &RateLimit<B>,
) -> impl Service<Request<()>, Response = Reply, Error = Infallible, Future: Send> + Clone {
    layer.layer(service_fn(|req: Request<()>| async move {
        let mut response = Response::new(Full::new(Bytes::from_static(b"ok")));
        if let Some(used) = req.headers().get("x-used") {
            let used = used.to_str().unwrap().parse().unwrap();
            response.extensions_mut().insert(ReportedCost(used));
        }
        Ok::<_, Infallible>(response)
    }))
}

fn request() -> Request<()> {
    Request::get("/").body(()).unwrap()
}

/// A leaky queue of 1 a second holding 2 waiting requests, one key.
fn queue(clock: &FakeClock) -> RateLimit<MemoryBackend<FakeClock>> {
    let quota = Quota::per_second(1).unwrap().with_burst(2).unwrap();
    RateLimit::builder(MemoryBackend::with_clock(clock.clone()))
        .rule(
            Rule::new("queue", Limit::new(Algorithm::LeakyQueue, quota)).key(Key::constant("all")),
        )
        .build()
        .unwrap()
}

/// Sends a request and returns its status with the (virtual) time it took.
async fn timed<S>(svc: S) -> (StatusCode, Duration)
where
    S: Service<Request<()>, Response = Reply, Error = Infallible>,
{
    let start = tokio::time::Instant::now();
    let response = svc.oneshot(request()).await.unwrap();
    (response.status(), start.elapsed())
}

#[tokio::test(start_paused = true)]
async fn leaky_queue_delays_on_a_timer() {
    // The store's clock stands still, so four requests arrive at one
    // instant; tokio's paused clock runs the waits without real time.
    let svc = service(&queue(&FakeClock::new()));
    let (a, b, c, d) = tokio::join!(
        timed(svc.clone()),
        timed(svc.clone()),
        timed(svc.clone()),
        timed(svc.clone())
    );
    assert_eq!(a, (StatusCode::OK, Duration::ZERO));
    assert_eq!(b, (StatusCode::OK, Duration::from_secs(1)));
    assert_eq!(c, (StatusCode::OK, Duration::from_secs(2)));
    // The queue holds two: the fourth is refused at once.
    assert_eq!(d, (StatusCode::TOO_MANY_REQUESTS, Duration::ZERO));
}

#[tokio::test(start_paused = true)]
async fn a_client_that_leaves_the_queue_gives_its_slot_back() {
    let svc = service(&queue(&FakeClock::new()));
    assert_eq!(timed(svc.clone()).await, (StatusCode::OK, Duration::ZERO));
    // The second waits a second; it goes away after a millisecond.
    let waiting = svc.clone().oneshot(request());
    assert!(tokio::time::timeout(Duration::from_millis(1), waiting)
        .await
        .is_err());
    // Its refund runs on a task of its own.
    tokio::time::sleep(Duration::from_millis(1)).await;
    // The next request takes the freed place: one second, not two.
    assert_eq!(
        timed(svc.clone()).await,
        (StatusCode::OK, Duration::from_secs(1))
    );
}

/// A store that says it decides at once, then never answers.
struct Stalls;

impl Backend for Stalls {
    type Prepared = ();

    fn decides_at_once(&self) -> bool {
        true
    }

    fn prepare(&self, _: &Policy) -> Result<(), BackendError> {
        Ok(())
    }

    fn apply(
        &self,
        _: &str,
        _: &(),
        _: Operation,
    ) -> impl std::future::Future<Output = Result<Outcome, BackendError>> + Send {
        std::future::pending()
    }
}

#[tokio::test]
async fn a_store_that_does_not_decide_at_once_as_it_said_gets_503_not_a_hang() {
    let quota = Quota::per_second(1).unwrap();
    let layer = RateLimit::builder(Stalls)
        .rule(Rule::new("stalled", Limit::new(Algorithm::Gcra, quota)).key(Key::constant("all")))
        .build()
        .unwrap();
    let response = service(&layer).oneshot(request()).await.unwrap();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(response.headers()["retry-after"], "1");
}

/// Requests of a pseudo-random size, each estimated at 50 tokens.
fn sizes(seed: u64, n: usize) -> Vec<u64> {
    let mut x = seed;
    (0..n)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 33) % 400
        })
        .collect()
}

/// Sends `sizes` one every 100 ms (store time) through a rule of 1000 tokens
/// a minute charged 50 up front, and returns (time, used) of each admitted
/// request.
async fn run(reconcile: bool, sizes: &[u64]) -> Vec<(u64, u64)> {
    let clock = FakeClock::new();
    let quota = Quota::per_minute(1000).unwrap();
    let mut rule = Rule::new("tokens", Limit::new(Algorithm::TokenBucket, quota))
        .key(Key::constant("tenant"))
        .cost(Cost::Constant(50));
    if reconcile {
        rule = rule.reconcile(Reconcile::Extension);
    }
    let layer = RateLimit::builder(MemoryBackend::with_clock(clock.clone()))
        .rule(rule)
        .build()
        .unwrap();
    let svc = service(&layer);
    let mut admitted = Vec::new();
    for &used in sizes {
        let req = Request::get("/").header("x-used", used).body(()).unwrap();
        if svc.clone().oneshot(req).await.unwrap().status() == StatusCode::OK {
            admitted.push((clock.now_ns(), used));
        }
        clock.advance(Duration::from_millis(100));
    }
    admitted
}

trait Now {
    fn now_ns(&self) -> u64;
}

impl Now for FakeClock {
    fn now_ns(&self) -> u64 {
        tollgate::Clock::now(self)
    }
}

/// The most tokens used in any span, less what the token bucket allows in
/// it (`burst + rate × span`): positive means the limit was exceeded.
fn worst_excess(admitted: &[(u64, u64)]) -> i128 {
    let mut worst = i128::MIN;
    for (i, &(start, _)) in admitted.iter().enumerate() {
        let mut used = 0i128;
        for &(t, u) in &admitted[i..] {
            used += i128::from(u);
            let allowed = 1000 + i128::from(t - start) * 1000 / 60_000_000_000;
            worst = worst.max(used - allowed);
        }
    }
    worst
}

#[tokio::test]
async fn an_output_token_limit_holds_over_time() {
    for seed in [1, 2, 3] {
        let sizes = sizes(seed, 3000); // five minutes, ~4x the rate on average
        let most_over_estimate = i128::from(sizes.iter().max().unwrap() - 50);
        let reconciled = run(true, &sizes).await;
        // Any span: at most the bucket's promise, plus the one request whose
        // real size was learned after it was admitted (the debt it leaves).
        let excess = worst_excess(&reconciled);
        assert!(excess <= most_over_estimate, "seed {seed}: {excess} over");
        let total: u64 = reconciled.iter().map(|r| r.1).sum();
        assert!(
            total <= 1000 + 5 * 1000 + 400,
            "seed {seed}: {total} tokens in five minutes"
        );
        // Charging the estimate alone lets far more through: the test has teeth.
        let estimated = run(false, &sizes).await;
        assert!(
            worst_excess(&estimated) > 10 * most_over_estimate,
            "seed {seed}"
        );
    }
}

#[test]
fn metrics_count_every_outcome() {
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let quota = Quota::per_minute(1).unwrap();
            let layer = RateLimit::builder(MemoryBackend::with_clock(FakeClock::new()))
                .rule(
                    Rule::new("live", Limit::new(Algorithm::FixedWindow, quota))
                        .key(Key::constant("a")),
                )
                .rule(
                    Rule::new("dark", Limit::new(Algorithm::FixedWindow, quota))
                        .key(Key::constant("b"))
                        .shadow(),
                )
                .build()
                .unwrap();
            let svc = service(&layer);
            for _ in 0..3 {
                svc.clone().oneshot(request()).await.unwrap();
            }
        });
    });
    let mut counts = Vec::new();
    let mut latencies = 0;
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let labels: Vec<String> = key
            .key()
            .labels()
            .map(|l| format!("{}={}", l.key(), l.value()))
            .collect();
        match value {
            DebugValue::Counter(n) => counts.push((labels.join(","), n)),
            DebugValue::Histogram(v) => latencies += v.len(),
            DebugValue::Gauge(_) => {}
        }
    }
    counts.sort();
    assert_eq!(
        counts,
        [
            ("rule=dark,outcome=allowed".to_string(), 1),
            ("rule=live,outcome=allowed".to_string(), 1),
            ("rule=live,outcome=denied".to_string(), 2),
        ]
    );
    assert_eq!(latencies, 3);
}

/// Requests made outside `recorder`'s scope through a layer built inside
/// it, with or without `register_metrics_once`: what the recorder saw.
fn counted_outside_the_recorder(register: bool) -> (u64, usize) {
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let layer = metrics::with_local_recorder(&recorder, || {
        let builder = RateLimit::builder(MemoryBackend::with_clock(FakeClock::new())).rule(
            Rule::new(
                "live",
                Limit::new(Algorithm::FixedWindow, Quota::per_minute(1).unwrap()),
            )
            .key(Key::constant("a")),
        );
        let builder = if register {
            builder.register_metrics_once()
        } else {
            builder
        };
        builder.build().unwrap()
    });
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let svc = service(&layer);
        for _ in 0..3 {
            svc.clone().oneshot(request()).await.unwrap();
        }
    });
    let (mut decisions, mut latencies) = (0, 0);
    for (_, _, _, value) in snapshotter.snapshot().into_vec() {
        match value {
            DebugValue::Counter(n) => decisions += n,
            DebugValue::Histogram(v) => latencies += v.len(),
            DebugValue::Gauge(_) => {}
        }
    }
    (decisions, latencies)
}

#[test]
fn metrics_registered_once_go_to_the_recorder_of_build_time() {
    assert_eq!(counted_outside_the_recorder(true), (3, 3));
    // Looked up per request, they go to the recorder of the time: none.
    assert_eq!(counted_outside_the_recorder(false), (0, 0));
}
