//! One run of the `many_tasks` example, shared with the tests that measure
//! the client layer against real servers: `requests` GETs of one URL from
//! `tasks` tasks through one shaped client, counting every 429 that came
//! back (retried or not) and every request that did not end in a 2xx.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::{Extensions, StatusCode};
use reqwest_middleware::{ClientBuilder, Middleware, Next};
use tollgate::{Algorithm, Limit, Quota};
use tollgate_http::client::{Outbound, OutboundMiddleware};

/// What one run did.
#[derive(Clone, Copy, Debug)]
pub struct Figures {
    /// Requests made (retries not counted).
    pub requests: u64,
    /// Requests that ended in a 2xx.
    pub ok: u64,
    /// 429 answers received, retried ones included.
    pub refusals: u64,
    /// Requests that did not end in a 2xx (a 429 once retries ran out, an
    /// error).
    pub failed: u64,
    /// From the first request to the last answer.
    pub elapsed: Duration,
}

impl Figures {
    /// Requests that ended in a 2xx, per second.
    pub fn goodput(&self) -> f64 {
        self.ok as f64 / self.elapsed.as_secs_f64()
    }
}

impl std::fmt::Display for Figures {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} requests: {} ok, {} 429s received, {} failed, {:.2} s, goodput {:.1}/s",
            self.requests,
            self.ok,
            self.refusals,
            self.failed,
            self.elapsed.as_secs_f64(),
            self.goodput()
        )
    }
}

/// Counts the 429s each attempt receives: it sits inside the shaping
/// middleware, so it sees the retries too.
struct CountRefusals(Arc<AtomicU64>);

#[async_trait::async_trait]
impl Middleware for CountRefusals {
    async fn handle(
        &self,
        request: reqwest::Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<reqwest::Response> {
        let response = next.run(request, extensions).await?;
        if response.status() == StatusCode::TOO_MANY_REQUESTS {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
        Ok(response)
    }
}

/// Sends `requests` GETs of `url` with `x-api-key: api_key` from `tasks`
/// tasks sharing one client that believes it may send `rate` a second
/// (the server's own rate is learned from its answers).
pub async fn run(url: &str, api_key: &str, tasks: u64, requests: u64, rate: u64) -> Figures {
    let limit = Limit::new(
        Algorithm::Gcra,
        Quota::per_second(rate).expect("a rate of at least 1"),
    );
    let outbound = Outbound::new(limit).expect("a valid budget");
    let refusals = Arc::new(AtomicU64::new(0));
    let client = ClientBuilder::new(reqwest::Client::new())
        .with(OutboundMiddleware::new(outbound))
        .with(CountRefusals(refusals.clone()))
        .build();
    let next = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let workers: Vec<_> = (0..tasks)
        .map(|_| {
            let (client, next) = (client.clone(), next.clone());
            let (url, api_key) = (url.to_string(), api_key.to_string());
            tokio::spawn(async move {
                let mut ok = 0;
                while next.fetch_add(1, Ordering::Relaxed) < requests {
                    let answer = client.get(&url).header("x-api-key", &api_key).send().await;
                    ok += u64::from(answer.is_ok_and(|a| a.status().is_success()));
                }
                ok
            })
        })
        .collect();
    let mut ok = 0;
    for worker in workers {
        ok += worker.await.expect("a worker does not panic");
    }
    Figures {
        requests,
        ok,
        refusals: refusals.load(Ordering::Relaxed),
        failed: requests - ok,
        elapsed: start.elapsed(),
    }
}
