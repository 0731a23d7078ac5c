//! Load tests against real servers on 127.0.0.1, started by each test on
//! port 0: tollgate's own proxy in front of the demo upstream, a slow
//! server, and servers that answer garbage, close or hang.
//!
//! No assertion here depends on timing: counts of the schedule, counts of
//! answers, and the server's own counters.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tollgate_core::{Algorithm, Limit, Quota};
use tollgate_loadtest::client::Failure;
use tollgate_loadtest::config::{Config, Mix, Rate};
use tollgate_loadtest::report::Report;
use tollgate_server::listener::ListenerLimits;
use tollgate_server::server::{self, ProxyOptions, Running, ServeOptions};

/// The demo upstream on a free port.
async fn demo_upstream() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(tollgate_loadtest::demo::serve(listener));
    format!("http://{addr}")
}

/// `tollgate serve` with one HTTP rule per `x-api-key`, named `rule`, in
/// front of the demo upstream.
async fn proxy(rule: &str, limit: &str) -> (Running, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("limits.yaml");
    let yaml = format!(
        "domain: test\ndescriptors: []\nhttp:\n  rules:\n    - name: {rule}\n      \
         key: {{ header: {{ name: x-api-key }} }}\n      limit: {limit}\n"
    );
    std::fs::write(&path, yaml).unwrap();
    let options = ServeOptions {
        config: Some(path),
        directory: Default::default(),
        watch: false,
        store: "memory".into(),
        prefix: "t:".into(),
        store_timeout: Duration::from_secs(5),
        memory: tollgate_server::store::MemorySettings::default(),
        top: tollgate_server::top_shape::TopSettings::default(),
        http_token: None,
        grpc: None,
        http: Some("127.0.0.1:0".parse().unwrap()),
        limits: ListenerLimits::default(),
        health: Default::default(),
        metrics: None,
        proxy: Some(ProxyOptions {
            listen: "127.0.0.1:0".parse().unwrap(),
            upstream: demo_upstream().await,
            timeout: Duration::from_secs(10),
        }),
        // Two, as `tollgate serve` on this machine: the server's counts
        // are summed over its workers.
        workers: 2,
        answers: Default::default(),
    };
    (server::start(options).await.unwrap(), dir)
}

/// The value of `tollgate_http_decisions_total` for `rule` and `outcome`
/// in the server's own `/metrics`.
async fn decisions(running: &Running, rule: &str, outcome: &str) -> u64 {
    let stream = tokio::net::TcpStream::connect(running.http.unwrap())
        .await
        .unwrap();
    let (mut tx, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(conn);
    let request = http::Request::get("/metrics")
        .header("host", "localhost")
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .unwrap();
    let response = tx.send_request(request).await.unwrap();
    let body = http_body_util::BodyExt::collect(response.into_body())
        .await
        .unwrap();
    let text = String::from_utf8(body.to_bytes().to_vec()).unwrap();
    text.lines()
        .filter(|l| l.starts_with("tollgate_http_decisions_total{"))
        .filter(|l| {
            l.contains(&format!("rule=\"{rule}\"")) && l.contains(&format!("outcome=\"{outcome}\""))
        })
        .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap() as u64)
        .sum()
}

fn config(url: String) -> Config {
    let mut c = Config::new(url);
    c.timeout = Duration::from_secs(10);
    // Generous: a stalled CI machine must not turn arrivals into drops.
    c.max_lateness = Duration::from_secs(2);
    c
}

async fn run(c: &Config) -> Report {
    tollgate_loadtest::loadtest(c, &()).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn report_counts_equal_the_servers_metrics() {
    let (running, _dir) = proxy(
        "lt-metrics",
        "{ algorithm: token_bucket, unit: second, requests_per_unit: 4, burst: 2 }",
    )
    .await;
    let mut c = config(format!("http://{}/x", running.proxy.unwrap()));
    c.policy = Some(Limit::new(
        Algorithm::TokenBucket,
        Quota::with_parts(4, 1_000_000_000, 2).unwrap(),
    ));
    c.clients = 4;
    c.rate = Rate::Multiple(3.0);
    c.duration = Some(Duration::from_millis(1500));
    c.mix = "ignore=50%,backoff=50%".parse().unwrap();
    let report = run(&c).await;
    let t = &report.target;
    assert_eq!(t.statuses.error_total(), 0, "{t:?}");
    assert!(t.statuses.ok > 0 && t.statuses.too_many > 0, "{t:?}");
    assert_eq!(t.statuses.ok + t.statuses.too_many, t.sent);
    assert_eq!(
        decisions(&running, "lt-metrics", "allowed").await,
        t.statuses.ok
    );
    assert_eq!(
        decisions(&running, "lt-metrics", "denied").await,
        t.statuses.too_many
    );
    // Every refusal carried the fields a client needs.
    assert_eq!(t.refusals.retry_after_valid, t.refusals.count);
    assert_eq!(t.refusals.ratelimit_valid, t.refusals.count);
    assert_eq!(t.refusals.policy_valid, t.refusals.count);
    // 12/s offered per client for 1.5 s, constant: 18 each.
    assert_eq!(t.offered, 72);
    // The exact limiter keeps every client near the policy's bound: at
    // most 2 + 4 = 6 admitted in any 1 s by the server's clock; counted by
    // the times answers arrived, a stalled answer can shift by up to one
    // more second's worth (4).
    for row in &report.overshoot {
        assert!(row.worst_period <= 6 + 4, "{row:?}");
    }
    // A 1 s policy has one span: its column is not printed twice.
    let text = report.to_text();
    assert_eq!(text.matches("most in 1s").count(), 1, "{text}");
    running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_at_retry_after_is_admitted() {
    let (running, _dir) = proxy(
        "lt-honour",
        "{ algorithm: token_bucket, unit: second, requests_per_unit: 2, burst: 2 }",
    )
    .await;
    let mut c = config(format!("http://{}/", running.proxy.unwrap()));
    c.clients = 2;
    c.rate = Rate::PerSecond(10.0);
    c.duration = Some(Duration::from_secs(3));
    c.mix = Mix(vec![(tollgate_loadtest::config::Behaviour::Honour, 100)]);
    let report = run(&c).await;
    let rf = &report.target.refusals;
    assert!(rf.clean_retries >= 1, "{rf:?}");
    assert_eq!(rf.clean_admitted, rf.clean_retries, "{rf:?}");
    assert!(report.target.withheld > 0);
    assert_eq!(rf.retry_after_valid, rf.count);
    running.shutdown().await;
}

/// Answers each request after `delay`.
async fn slow_server(delay: Duration) -> String {
    use hyper::service::service_fn;
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            tokio::spawn(async move {
                let service = service_fn(move |_req| async move {
                    tokio::time::sleep(delay).await;
                    Ok::<_, std::convert::Infallible>(http::Response::new(
                        http_body_util::Full::new(bytes::Bytes::from_static(b"slow\n")),
                    ))
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    format!("http://{addr}/")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_loop_holds_the_offered_rate_against_a_slow_server() {
    let url = slow_server(Duration::from_millis(100)).await;
    let mut c = config(url.clone());
    c.clients = 5;
    c.rate = Rate::PerSecond(40.0);
    c.duration = Some(Duration::from_secs(2));
    // 200/s answered after 100 ms needs 20 connections at once.
    c.connections = 100;
    let report = run(&c).await;
    let t = &report.target;
    // 5 clients x 40/s x 2 s, from the start instant whatever the server does.
    assert_eq!(t.offered, 400);
    assert!(t.sent.abs_diff(400) <= 4, "sent {} of 400: {t:?}", t.sent);
    assert_eq!(t.statuses.ok, t.sent);

    // Too few connections: the arrivals nobody could send are counted as
    // dropped, not sent late at a lower rate.
    c.connections = 2;
    c.max_lateness = Duration::from_millis(50);
    let report = run(&c).await;
    let t = &report.target;
    assert_eq!(t.offered, 400);
    assert_eq!(t.sent + t.dropped, 400);
    // Two connections answer at most about 20 a second.
    assert!(t.dropped >= 300, "{t:?}");
}

/// A server that treats each connection with `answer`.
async fn raw_server<F, Fut>(answer: F) -> String
where
    F: Fn(tokio::net::TcpStream) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            tokio::spawn(answer(stream));
        }
    });
    format!("http://{addr}/")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_servers_are_errors_not_crashes() {
    let garbage = raw_server(|mut s| async move {
        let mut buf = [0u8; 1024];
        let _ = s.read(&mut buf).await;
        let _ = s.write_all(b"SPDY/9 banana\r\n\x00\x01\r\n\r\n").await;
    })
    .await;
    let closing = raw_server(|s| async move { drop(s) }).await;
    let hanging = raw_server(|mut s| async move {
        let mut buf = [0u8; 1024];
        while let Ok(n) = s.read(&mut buf).await {
            if n == 0 {
                break;
            }
        }
    })
    .await;
    for (url, failure) in [
        (garbage, Failure::Protocol),
        (closing, Failure::Closed),
        (hanging, Failure::Timeout),
    ] {
        let mut c = config(url);
        c.clients = 2;
        c.rate = Rate::PerSecond(10.0);
        c.duration = Some(Duration::from_millis(600));
        c.timeout = Duration::from_millis(200);
        c.connections = 4;
        let report = run(&c).await;
        let t = &report.target;
        assert_eq!(t.statuses.ok, 0, "{t:?}");
        assert!(
            t.statuses.errors.get(&failure).copied().unwrap_or(0) > 0,
            "{failure:?}: {t:?}"
        );
        assert_eq!(t.statuses.error_total(), t.sent);
        assert_eq!(t.rate(), 0.0, "nothing was answered");
        let text = report.to_text();
        assert!(text.contains("errors"));
        // No policy: nothing says the target is a limiter.
        let header = text.lines().find(|l| l.starts_with("requests")).unwrap();
        assert!(
            header.contains("target") && !header.contains("limiter"),
            "{header}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closed_loop_and_count_bound_stop_by_themselves() {
    let url = demo_upstream().await;
    let mut c = config(format!("{url}/"));
    c.rate = Rate::Max;
    c.duration = Some(Duration::from_millis(300));
    c.connections = 4;
    c.baseline = Some(format!("{url}/"));
    let report = run(&c).await;
    assert!(report.target.sent > 0);
    assert_eq!(report.target.statuses.ok, report.target.sent);
    assert_eq!(report.target.dropped, 0);
    // Every request offered was sent: none counted at the end and dropped.
    assert_eq!(report.target.offered, report.target.sent);
    assert!(report.baseline.is_some());

    let mut c = config(format!("{url}/"));
    c.duration = None;
    c.requests = Some(25);
    c.rate = Rate::PerSecond(200.0);
    let report = run(&c).await;
    assert_eq!((report.target.offered, report.target.sent), (25, 25));
}
