//! The client layer's `many_tasks` example run against `tollgate serve` as
//! a process (a reverse proxy in front of its demo upstream, the rules of
//! examples/client.yaml): 1, 4 and 16 tasks through one client that
//! believes it may send twice the server's 20 a second, on a token bucket
//! with bursts of 5 and of 20 and on a fixed window.

#[path = "../../tollgate-http/examples/many_tasks/run.rs"]
mod run;

mod common;

use common::{free_port, Serving};

const CONFIG: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/client.yaml");
/// Requests per run: about 3 s at the server's rate.
const REQUESTS: u64 = 60;
const RATE: u64 = 20;

/// `tollgate serve` as a reverse proxy in front of its demo upstream, and
/// the proxy's port. Its listeners are bound together, so the proxy is
/// ready once the HTTP API answers.
fn start() -> (Serving, u16) {
    let (api, proxy, upstream) = (free_port(), free_port(), free_port());
    let (api_addr, proxy_addr) = (format!("127.0.0.1:{api}"), format!("127.0.0.1:{proxy}"));
    let upstream_addr = format!("127.0.0.1:{upstream}");
    let upstream_url = format!("http://{upstream_addr}");
    let args = [
        "--config",
        CONFIG,
        "--no-grpc",
        "--no-watch",
        "--http-listen",
        &api_addr,
        "--proxy-listen",
        &proxy_addr,
        "--upstream",
        &upstream_url,
        "--demo-upstream",
        &upstream_addr,
    ];
    (Serving::start(&args, &[], api), proxy)
}

/// Runs 1, 4 and 16 tasks at once against the rule under `path`, each run
/// on its own key, and checks each: everything done, at most 2 refusals,
/// at least 0.85 of the rate.
fn three_runs(path: &str) {
    let (serve, proxy) = start();
    let url = format!("http://127.0.0.1:{proxy}/{path}");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let figures = runtime.block_on(async {
        let runs = [1, 4, 16].map(|tasks| {
            let url = url.clone();
            tokio::spawn(async move {
                let key = format!("tasks-{tasks}");
                (tasks, run::run(&url, &key, tasks, REQUESTS, 2 * RATE).await)
            })
        });
        let mut figures = Vec::new();
        for run in runs {
            figures.push(run.await.unwrap());
        }
        figures
    });
    for (tasks, figures) in figures {
        eprintln!("{path}, {tasks} tasks: {figures}");
        let log = serve.log();
        assert_eq!(figures.failed, 0, "{tasks} tasks: {figures}\n{log}");
        assert!(figures.refusals <= 2, "{tasks} tasks: {figures}");
        assert!(
            figures.goodput() >= 0.85 * RATE as f64,
            "{tasks} tasks: {figures}"
        );
    }
}

#[test]
fn token_bucket_with_bursts_of_5() {
    three_runs("burst5");
}

#[test]
fn token_bucket_with_bursts_of_20() {
    three_runs("burst20");
}

#[test]
fn fixed_window() {
    three_runs("window");
}
