//! The retry loop on a fake clock: no sleeping.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use http::{HeaderMap, Method, Response, StatusCode};
use tollgate::{Algorithm, Clock, FakeClock, Limit, Quota};

use super::shape::tests::drive;
use super::*;

fn outbound(clock: &FakeClock) -> Arc<Outbound<FakeClock>> {
    let limit = Limit::new(Algorithm::Gcra, Quota::per_second(1000).unwrap());
    Arc::new(Outbound::with_clock(limit, clock.clone()).unwrap())
}

fn answer(status: u16, retry_after: Option<&'static str>) -> Response<()> {
    let mut r = Response::new(());
    *r.status_mut() = StatusCode::from_u16(status).unwrap();
    if let Some(v) = retry_after {
        r.headers_mut()
            .insert(http::header::RETRY_AFTER, v.parse().unwrap());
    }
    r
}

/// Sends one request with `method` and `headers`; the server answers with
/// `answers` in turn (the last one repeated). Returns the final status,
/// the attempts made and the fake time it all took.
async fn call(
    clock: &FakeClock,
    o: Arc<Outbound<FakeClock>>,
    method: Method,
    mut headers: HeaderMap,
    answers: Vec<(u16, Option<&'static str>)>,
) -> (Result<StatusCode, String>, u32, u64) {
    let attempts = Arc::new(AtomicU32::new(0));
    let start = clock.now();
    let task = tokio::spawn({
        let attempts = attempts.clone();
        async move {
            o.prepare(&method, &mut headers);
            let out = Outgoing {
                method: &method,
                host: "api.example",
                path: "/",
                headers: &headers,
                replayable: true,
            };
            let send = || {
                let n = attempts.fetch_add(1, Ordering::SeqCst) as usize;
                let (status, after) = answers[n.min(answers.len() - 1)];
                async move { Ok::<_, ()>(answer(status, after)) }
            };
            o.send(&out, send, |_| false)
                .await
                .map(|r| r.status())
                .map_err(|e| format!("{e:?}"))
        }
    });
    let result = drive(clock, task).await;
    (result, attempts.load(Ordering::SeqCst), clock.now() - start)
}

/// [`call`] with a GET through a fresh [`outbound`].
async fn get(
    clock: &FakeClock,
    answers: Vec<(u16, Option<&'static str>)>,
) -> (Result<StatusCode, String>, u32, u64) {
    call(
        clock,
        outbound(clock),
        Method::GET,
        HeaderMap::new(),
        answers,
    )
    .await
}

const SEC: u64 = 1_000_000_000;

#[tokio::test]
async fn retries_after_what_the_server_said() {
    let clock = FakeClock::new();
    let answers = vec![(429, Some("2")), (200, None)];
    let (result, attempts, took) = get(&clock, answers).await;
    assert_eq!(result, Ok(StatusCode::OK));
    assert_eq!(attempts, 2);
    assert!((2 * SEC..2 * SEC + SEC / 10).contains(&took), "{took}");
}

#[tokio::test]
async fn backs_off_with_jitter_and_stops_at_the_attempt_cap() {
    let clock = FakeClock::new();
    let (result, attempts, took) = get(&clock, vec![(503, None)]).await;
    assert_eq!(result, Ok(StatusCode::SERVICE_UNAVAILABLE));
    assert_eq!(attempts, Retry::default().max_attempts);
    // Full jitter: at most 100 + 200 + 400 ms in all (plus the fake
    // clock's 10 ms steps).
    assert!(took <= 730_000_000, "{took}");
}

#[tokio::test]
async fn a_wait_past_the_total_cap_is_not_taken() {
    let clock = FakeClock::new();
    let (result, attempts, took) = get(&clock, vec![(429, Some("120"))]).await;
    assert_eq!(result, Ok(StatusCode::TOO_MANY_REQUESTS));
    assert_eq!((attempts, took), (1, 0));
}

#[tokio::test]
async fn a_post_without_a_key_is_never_retried() {
    let clock = FakeClock::new();
    let answers = vec![(429, Some("1")), (200, None)];
    let (result, attempts, _) = call(
        &clock,
        outbound(&clock),
        Method::POST,
        HeaderMap::new(),
        answers.clone(),
    )
    .await;
    assert_eq!((result, attempts), (Ok(StatusCode::TOO_MANY_REQUESTS), 1));

    let mut keyed = HeaderMap::new();
    keyed.insert(IDEMPOTENCY_KEY, "order-17".parse().unwrap());
    let (result, attempts, _) = call(
        &clock,
        outbound(&clock),
        Method::POST,
        keyed,
        answers.clone(),
    )
    .await;
    assert_eq!((result, attempts), (Ok(StatusCode::OK), 2));
}

#[tokio::test]
async fn the_layer_can_add_the_key() {
    let clock = FakeClock::new();
    let limit = Limit::new(Algorithm::Gcra, Quota::per_second(1000).unwrap());
    let o = Outbound::with_clock(limit, clock.clone())
        .unwrap()
        .idempotency_keys(true);
    let mut headers = HeaderMap::new();
    o.prepare(&Method::POST, &mut headers);
    let key = headers[IDEMPOTENCY_KEY].to_str().unwrap().to_string();
    assert_eq!(key.len(), 32);
    o.prepare(&Method::POST, &mut headers);
    assert_eq!(
        headers[IDEMPOTENCY_KEY],
        key.as_str(),
        "an existing key stays"
    );
    let mut get = HeaderMap::new();
    o.prepare(&Method::GET, &mut get);
    assert!(get.is_empty(), "GET needs none");
    let answers = vec![(503, None), (200, None)];
    let (result, attempts, _) =
        call(&clock, Arc::new(o), Method::POST, HeaderMap::new(), answers).await;
    assert_eq!((result, attempts), (Ok(StatusCode::OK), 2));
}

#[tokio::test]
async fn the_budget_holds_when_everything_is_refused() {
    let clock = FakeClock::new();
    let budget = Budget {
        percent: 10,
        burst: 5,
        per_second: 1,
    };
    let limit = Limit::new(Algorithm::Gcra, Quota::per_second(1000).unwrap());
    let o = Arc::new(
        Outbound::with_clock(limit, clock.clone())
            .unwrap()
            .budget(budget)
            .unwrap(),
    );
    let requests = 200u64;
    let mut attempts = 0u64;
    for _ in 0..requests {
        let (result, n, _) = call(
            &clock,
            o.clone(),
            Method::GET,
            HeaderMap::new(),
            vec![(503, None)],
        )
        .await;
        assert_eq!(result, Ok(StatusCode::SERVICE_UNAVAILABLE));
        attempts += u64::from(n);
    }
    let retries = attempts - requests;
    let seconds = clock.now().div_ceil(SEC);
    let bound = budget.burst + budget.per_second * seconds + requests * budget.percent / 100;
    assert!(retries <= bound, "{retries} retries > {bound}");
    assert!(
        retries < requests * 3 / 10,
        "{retries} retries for {requests} requests"
    );
}

#[tokio::test]
async fn shaping_errors_come_at_once() {
    let clock = FakeClock::new();
    let limit = Limit::new(Algorithm::Gcra, Quota::per_minute(1).unwrap());
    let o = Arc::new(
        Outbound::with_clock(limit, clock.clone())
            .unwrap()
            .deadline(Duration::from_secs(5))
            .cost(|out| if out.path == "/big" { 2 } else { 1 }),
    );
    let headers = HeaderMap::new();
    let out = |path| Outgoing {
        method: &Method::GET,
        host: "h",
        path,
        headers: &headers,
        replayable: true,
    };
    let ok = || async { Ok::<_, ()>(answer(200, None)) };
    let big = o.send(&out("/big"), ok, |_| false).await;
    assert!(matches!(
        big,
        Err(ClientError::Shaped(ShapeError::NeverFits { cost: 2 }))
    ));
    assert!(o.send(&out("/"), ok, |_| false).await.is_ok());
    let late = o.send(&out("/"), ok, |_| false).await;
    assert!(matches!(
        late,
        Err(ClientError::Shaped(ShapeError::TooLate { .. }))
    ));
    assert_eq!(clock.now(), 0);
}

#[tokio::test]
async fn a_spent_budget_announced_by_the_server_pauses_the_host() {
    let clock = FakeClock::new();
    let o = outbound(&clock);
    let mut spent = Response::new(());
    spent
        .headers_mut()
        .insert("ratelimit", r#""p";r=0;t=20"#.parse().unwrap());
    let headers = HeaderMap::new();
    let out = Outgoing {
        method: &Method::GET,
        host: "api.example",
        path: "/",
        headers: &headers,
        replayable: true,
    };
    let first = o.send(&out, || async { Ok::<_, ()>(spent.clone()) }, |_| false);
    assert!(first.await.is_ok());
    let (result, attempts, took) = call(
        &clock,
        o.clone(),
        Method::GET,
        HeaderMap::new(),
        vec![(200, None)],
    )
    .await;
    assert_eq!((result, attempts), (Ok(StatusCode::OK), 1));
    assert!((20 * SEC..21 * SEC).contains(&took), "{took}");
}

#[tokio::test]
async fn a_retry_that_cannot_fit_returns_the_answer_it_has() {
    let clock = FakeClock::new();
    let limit = Limit::new(Algorithm::Gcra, Quota::per_second(1000).unwrap());
    let o = Arc::new(
        Outbound::with_clock(limit, clock.clone())
            .unwrap()
            .deadline(Duration::from_secs(30)),
    );
    let attempts = Arc::new(AtomicU32::new(0));
    let task = tokio::spawn({
        let (o, attempts) = (o.clone(), attempts.clone());
        async move {
            let headers = HeaderMap::new();
            let out = Outgoing {
                method: &Method::GET,
                host: "api.example",
                path: "/",
                headers: &headers,
                replayable: true,
            };
            let send = || {
                attempts.fetch_add(1, Ordering::SeqCst);
                // While this attempt is out, another answer pauses the host
                // past the deadline: the retry (due at 5 s) cannot go.
                o.shaper().pause("api.example", Duration::from_secs(31));
                async { Ok::<_, ()>(answer(429, Some("5"))) }
            };
            o.send(&out, send, |_| false).await.map(|r| r.status())
        }
    });
    let status = drive(&clock, task).await.map_err(|e| format!("{e:?}"));
    assert_eq!(status, Ok(StatusCode::TOO_MANY_REQUESTS));
    assert_eq!(attempts.load(Ordering::SeqCst), 1);
}

fn respond(status: u16, fields: &[(&'static str, &'static str)]) -> Response<()> {
    let mut r = answer(status, None);
    for (name, value) in fields {
        r.headers_mut().insert(*name, value.parse().unwrap());
    }
    r
}

/// Sends one GET through `o`, answered `answer`, and returns the fake time
/// it was sent at.
async fn send_at(clock: &FakeClock, o: &Arc<Outbound<FakeClock>>, answer: Response<()>) -> u64 {
    let task = tokio::spawn({
        let (o, clock) = (o.clone(), clock.clone());
        async move {
            let headers = HeaderMap::new();
            let out = Outgoing {
                method: &Method::GET,
                host: "api.example",
                path: "/",
                headers: &headers,
                replayable: true,
            };
            let sent = std::sync::Mutex::new(0);
            let send = || {
                *sent.lock().unwrap() = clock.now();
                let answer = answer.clone();
                async move { Ok::<_, ()>(answer) }
            };
            let _ = o.send(&out, send, |_| false).await;
            let at = *sent.lock().unwrap();
            at
        }
    });
    drive(clock, task).await
}

#[tokio::test]
async fn a_retry_after_longer_than_the_reset_is_honoured() {
    let clock = FakeClock::new();
    let limit = Limit::new(Algorithm::Gcra, Quota::per_second(1000).unwrap());
    let o = Outbound::with_clock(limit, clock.clone()).unwrap();
    let o = Arc::new(o.deadline(Duration::from_secs(300)));
    let refused = respond(
        429,
        &[("retry-after", "120"), ("ratelimit", r#""p";r=0;t=17"#)],
    );
    assert_eq!(send_at(&clock, &o, refused).await, 0);
    // Past the retry cap (30 s): the 429 came back, and the host pauses
    // the longer of the two, 120 s, not the limit's 17.
    let next = send_at(&clock, &o, answer(200, None)).await;
    assert!((120 * SEC..121 * SEC).contains(&next), "{next}");
}

/// 20 a second announced by the server: paced at 52.5 ms with the default
/// 5% headroom.
const POLICY: (&str, &str) = ("ratelimit-policy", r#""p";q=20;w=1"#);
const PACED: u64 = 52_500_000;

#[tokio::test]
async fn waiting_tasks_leave_one_interval_apart() {
    let clock = FakeClock::new();
    let o = outbound(&clock);
    // The first answer teaches the server's rate; then eight tasks at once.
    send_at(
        &clock,
        &o,
        respond(200, &[POLICY, ("ratelimit", r#""p";r=4;t=1"#)]),
    )
    .await;
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let (o, clock) = (o.clone(), clock.clone());
            let ok = respond(200, &[POLICY, ("ratelimit", r#""p";r=4;t=1"#)]);
            tokio::spawn(async move { send_at(&clock, &o, ok).await })
        })
        .collect();
    let all = tokio::spawn(async move {
        let mut at = Vec::new();
        for task in tasks {
            at.push(task.await.unwrap());
        }
        at
    });
    let mut at = drive(&clock, all).await;
    at.sort_unstable();
    // The fake clock moves 10 ms at a time: a slot taken late is made up
    // on the next, so gaps are 50 or 60 ms and 7 of them span 367.5 ms.
    let tick = 10_000_000;
    for pair in at.windows(2) {
        assert!(pair[1] - pair[0] >= PACED - tick, "{at:?}");
    }
    let span = at[7] - at[0];
    assert!(span.abs_diff(7 * PACED) <= tick, "{at:?}");
}

#[tokio::test]
async fn a_one_second_refusal_from_a_known_rate_waits_one_interval() {
    let clock = FakeClock::new();
    let o = outbound(&clock);
    let refused = respond(
        429,
        &[
            POLICY,
            ("retry-after", "1"),
            ("ratelimit", r#""p";r=0;t=1"#),
        ],
    );
    let ok = respond(200, &[POLICY, ("ratelimit", r#""p";r=0;t=1"#)]);
    let attempts = Arc::new(AtomicU32::new(0));
    let task = tokio::spawn({
        let (o, attempts) = (o.clone(), attempts.clone());
        async move {
            let headers = HeaderMap::new();
            let out = Outgoing {
                method: &Method::GET,
                host: "api.example",
                path: "/",
                headers: &headers,
                replayable: true,
            };
            let send = || {
                let n = attempts.fetch_add(1, Ordering::SeqCst);
                let answer = if n == 0 { refused.clone() } else { ok.clone() };
                async move { Ok::<_, ()>(answer) }
            };
            o.send(&out, send, |_| false).await.map(|r| r.status())
        }
    });
    let status = drive(&clock, task).await.map_err(|e| format!("{e:?}"));
    assert_eq!(status, Ok(StatusCode::OK));
    assert_eq!(attempts.load(Ordering::SeqCst), 2);
    // One paced interval, not the second the fields round up to.
    assert!(clock.now() < 100_000_000, "{}", clock.now());
    // A spent budget on an admitted answer holds the next request back by
    // one interval, no more.
    let next = send_at(&clock, &o, respond(200, &[POLICY])).await;
    let after = next - clock.now().min(next);
    assert!(next >= PACED && after < SEC, "{next}");
}

#[tokio::test]
async fn bursts_only_when_asked_and_while_the_server_has_units_left() {
    let clock = FakeClock::new();
    let limit = Limit::new(Algorithm::Gcra, Quota::per_second(1000).unwrap());
    let o = Arc::new(
        Outbound::with_clock(limit, clock.clone())
            .unwrap()
            .bursts(true),
    );
    let has = |r: &'static str| respond(200, &[POLICY, ("ratelimit", r)]);
    send_at(&clock, &o, has(r#""p";r=2;t=1"#)).await;
    // Two units left: both go at once.
    assert_eq!(send_at(&clock, &o, has(r#""p";r=1;t=1"#)).await, 0);
    assert_eq!(send_at(&clock, &o, has(r#""p";r=0;t=1"#)).await, 0);
    // None left: the next waits for the server's next unit.
    assert!(send_at(&clock, &o, has(r#""p";r=0;t=1"#)).await >= PACED);
}
