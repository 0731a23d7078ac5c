//! The `many_tasks` example's run against tollgate's own layer on a real
//! axum server: 1, 4 and 16 tasks through one client that believes it may
//! send twice the server's 20 a second, on a token bucket with bursts of 5
//! and of 20 and on a fixed window. (`tollgate serve` gets the same runs in
//! tollgate-cli's tests.)

mod support;

#[path = "../examples/many_tasks/run.rs"]
mod run;

use axum::{routing::get, Router};
use tollgate::{Algorithm, Limit, MemoryBackend, Quota};
use tollgate_http::{Key, RateLimit, Rule};

/// Requests per run: about 3 s at the server's rate.
const REQUESTS: u64 = 60;
const RATE: u64 = 20;

/// A server limiting each `x-api-key` to `limit`.
async fn server(limit: Limit) -> String {
    let rule = Rule::new("per-key", limit).key(Key::header("x-api-key"));
    let layer = RateLimit::builder(MemoryBackend::new())
        .rule(rule)
        .build()
        .unwrap();
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(layer);
    format!("http://{}/", support::serve(app).await)
}

/// Runs 1, 4 and 16 tasks at once, each run on its own key, and checks
/// each: everything done, at most 2 refusals, at least 0.85 of the rate.
async fn three_runs(limit: Limit) {
    let url = server(limit).await;
    let runs = [1, 4, 16].map(|tasks| {
        let url = url.clone();
        tokio::spawn(async move {
            let key = format!("tasks-{tasks}");
            (tasks, run::run(&url, &key, tasks, REQUESTS, 2 * RATE).await)
        })
    });
    for run in runs {
        let (tasks, figures) = run.await.unwrap();
        eprintln!("{tasks} tasks: {figures}");
        assert_eq!(figures.failed, 0, "{tasks} tasks: {figures}");
        assert!(figures.refusals <= 2, "{tasks} tasks: {figures}");
        assert!(
            figures.goodput() >= 0.85 * RATE as f64,
            "{tasks} tasks: {figures}"
        );
    }
}

fn token_bucket(burst: u64) -> Limit {
    let quota = Quota::per_second(RATE).unwrap().with_burst(burst).unwrap();
    Limit::new(Algorithm::TokenBucket, quota)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_bucket_with_bursts_of_5() {
    three_runs(token_bucket(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_bucket_with_bursts_of_20() {
    three_runs(token_bucket(20)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fixed_window() {
    let quota = Quota::per_second(RATE).unwrap();
    three_runs(Limit::new(Algorithm::FixedWindow, quota)).await;
}
