//! Folded calls (`tollgate_v4_fold`): each call of a fold decides exactly
//! as if sent alone, in order, at the fold's one reading of the server's
//! clock, and fails alone; a backend shared by many callers folds their
//! decisions and hands each its own.

mod common;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::{Cmd, RedisResult, Value};
use tollgate::{Algorithm, Backend, BackendExt, Limit, Policy, Quota};
use tollgate_redis::harness::RedisServer;
use tollgate_redis::{exact, RedisBackend, FOLD_FUNCTION, FUNCTION};

const T0_US: u64 = 1_700_000_000_000_000;
const SECOND_NS: u64 = 1_000_000_000;

/// A script call as the backend sends it: its keys and arguments.
struct Call {
    keys: Vec<String>,
    args: Vec<String>,
}

/// The arguments of a call of `op` on `policy`'s limits, at `now_us` on the
/// caller's clock (`None`: the server's, with `deadline_us`).
fn args(
    policy: &Policy,
    op: &str,
    amount: u64,
    now_us: Option<u64>,
    deadline_us: Option<u64>,
) -> Vec<String> {
    let mut args = match now_us {
        Some(t) => vec![t.to_string(), "3600000".into()],
        None => vec![String::new(), "0".into()],
    };
    args.extend([
        op.to_string(),
        amount.to_string(),
        policy.limits().len().to_string(),
    ]);
    for limit in policy.limits() {
        let e = exact::encode(limit).unwrap();
        args.push(e.algorithm.to_string());
        args.extend([e.cap, e.x, e.y, e.max].map(|v| v.to_string()));
    }
    args.extend(deadline_us.map(|d| d.to_string()));
    args
}

async fn raw(server: &RedisServer) -> MultiplexedConnection {
    let client = redis::Client::open(server.url()).unwrap();
    client.get_multiplexed_async_connection().await.unwrap()
}

/// A reply as its integers (an array, or packed as little-endian doubles
/// in a fold), or its error's code.
fn outcome(reply: RedisResult<Value>) -> Result<Vec<i64>, String> {
    match reply.and_then(Value::extract_error) {
        Ok(Value::BulkString(packed)) => Ok(packed
            .chunks_exact(8)
            .map(|d| f64::from_le_bytes(d.try_into().unwrap()) as i64)
            .collect()),
        Ok(v) => Ok(redis::from_redis_value(v).unwrap()),
        Err(e) => Err(e.code().unwrap_or("?").to_string()),
    }
}

async fn alone(conn: &mut MultiplexedConnection, call: &Call) -> Result<Vec<i64>, String> {
    let mut cmd = redis::cmd("FCALL");
    cmd.arg(FUNCTION)
        .arg(call.keys.len())
        .arg(&call.keys)
        .arg(&call.args);
    outcome(conn.req_packed_command(&cmd).await)
}

/// The calls as one fold, each call's policy sent once for all calls with
/// the same arguments.
async fn folded(conn: &mut MultiplexedConnection, calls: &[Call]) -> Vec<Result<Vec<i64>, String>> {
    let mut cmd: Cmd = redis::cmd("FCALL");
    let keys: Vec<&String> = calls.iter().flat_map(|c| &c.keys).collect();
    cmd.arg(FOLD_FUNCTION).arg(keys.len()).arg(keys);
    // A call's arguments: 4 of its operation, its policy's, then maybe a deadline.
    let limits = |c: &Call| c.args[4].parse::<usize>().unwrap();
    let policy = |c: &Call| c.args[4..5 + 5 * limits(c)].to_vec();
    let mut policies: Vec<Vec<String>> = vec![];
    for c in calls {
        if !policies.contains(&policy(c)) {
            policies.push(policy(c));
        }
    }
    cmd.arg(policies.len()).arg(&policies).arg(calls.len());
    for c in calls {
        let index = policies.iter().position(|p| *p == policy(c)).unwrap() + 1;
        let deadline = c.args.get(5 + 5 * limits(c));
        cmd.arg(c.keys.len()).arg(index).arg(&c.args[..4]);
        cmd.arg(deadline.map_or("", String::as_str));
    }
    match conn.req_packed_command(&cmd).await.unwrap() {
        Value::Array(replies) => replies.into_iter().map(|r| outcome(Ok(r))).collect(),
        other => panic!("a fold's reply is an array, got {other:?}"),
    }
}

/// Two policies: one limit on one key, and two limits (a sliding log on
/// two keys, a fixed window) charged together.
fn policies() -> [Policy; 2] {
    let q = |n| Quota::new(n, SECOND_NS).unwrap();
    [
        Policy::new(Limit::new(Algorithm::Gcra, q(5))),
        Policy::with_limits(vec![
            Limit::new(Algorithm::SlidingLog, q(4)),
            Limit::new(Algorithm::FixedWindow, q(6)),
        ])
        .unwrap(),
    ]
}

/// A call of a fold: policy, key, step in us, operation, amount.
type Step = (usize, usize, u64, &'static str, u64);

/// Folds of calls.
fn folds() -> impl Strategy<Value = Vec<Vec<Step>>> {
    let op = prop_oneof![
        6 => (Just("check"), 0u64..4),
        1 => (Just("refund"), 1u64..3),
        1 => (Just("force"), prop_oneof![1u64..3, Just(1 << 52)]),
        1 => (Just("lease"), 1u64..6),
    ];
    let call = (0usize..2, 0usize..3, 0u64..150_000, op)
        .prop_map(|(p, k, step, (op, n))| (p, k, step, op, n));
    prop::collection::vec(prop::collection::vec(call, 1..12), 1..15)
}

#[test]
fn each_call_of_a_fold_decides_as_if_sent_alone() {
    let Some(server) = common::server() else {
        return;
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (folding, single) = rt.block_on(async {
        let url = server.url();
        (common::backend(&url).await, common::backend(&url).await)
    });
    let conn = rt.block_on(raw(&server));
    // Loads the library.
    rt.block_on(single.check("warm", &single.prepare(&policies()[0]).unwrap(), 1))
        .unwrap();
    let policies = policies();
    let mut runner = TestRunner::new(Config {
        cases: 24,
        failure_persistence: None,
        ..Config::default()
    });
    let case_no = std::cell::Cell::new(0);
    runner
        .run(&folds(), |trace| {
            case_no.set(case_no.get() + 1);
            let mut conn = conn.clone();
            let mut now = T0_US;
            for (f, fold) in trace.iter().enumerate() {
                let (mut ours, mut theirs) = (vec![], vec![]);
                for &(p, k, step, op, amount) in fold {
                    now += step;
                    let key = format!("c{}-p{p}-k{k}", case_no.get());
                    let args = args(&policies[p], op, amount, Some(now), None);
                    let keys = |b: &RedisBackend| b.redis_keys(&key, &policies[p]).unwrap();
                    ours.push(Call {
                        keys: keys(&folding),
                        args: args.clone(),
                    });
                    theirs.push(Call {
                        keys: keys(&single),
                        args,
                    });
                }
                let got = rt.block_on(folded(&mut conn, &ours));
                for (i, call) in theirs.iter().enumerate() {
                    let expected = rt.block_on(alone(&mut conn, call));
                    prop_assert_eq!(&got[i], &expected, "fold {}, call {}: {:?}", f, i, fold[i]);
                }
            }
            Ok(())
        })
        .unwrap();
}

#[tokio::test]
async fn a_fold_reads_the_server_clock_once_and_fails_call_by_call() {
    let Some(server) = common::server() else {
        return;
    };
    let redis = common::backend(&server.url()).await;
    let policy = &policies()[0];
    redis
        .check("warm", &redis.prepare(policy).unwrap(), 1)
        .await
        .unwrap();
    let keys = redis.redis_keys("k", policy).unwrap();
    let far = Some(u64::MAX >> 12);
    let call = |op, amount, deadline| Call {
        keys: keys.clone(),
        args: args(policy, op, amount, None, deadline),
    };
    let mut calls: Vec<Call> = (0..7).map(|_| call("check", 1, far)).collect();
    calls.insert(2, call("force", 1 << 52, far));
    calls.insert(4, call("check", 1, Some(1)));
    let got = folded(&mut raw(&server).await, &calls).await;
    assert_eq!(got[2], Err("TOLLGATE_RANGE".to_string()));
    assert_eq!(got[4], Err("TOLLGATE_LATE".to_string()));
    // GCRA 5/s: one emission interval (200 ms) more per admitted request,
    // exactly, since all share one time; then a wait of exactly one.
    let replies: Vec<Vec<i64>> = got.into_iter().filter_map(Result::ok).collect();
    for (k, reply) in replies.iter().enumerate() {
        let k = k as i64 + 1;
        if k <= 5 {
            assert_eq!(reply[2..], [1, 5 - k, 0, 200_000 * k, 0], "request {k}");
        } else {
            assert_eq!(reply[2..], [0, 0, 200_000, 1_000_000, 0], "request {k}");
        }
    }
    // Written once at the end of the fold, with the TTL of its last charge.
    let ttl: i64 = server
        .cli(&["pttl", &keys[0]])
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!((900..=1000).contains(&ttl), "PTTL {ttl}");
}

/// FCALLs the server ran since its statistics were reset.
fn fcalls(server: &RedisServer) -> u64 {
    let stats = server.cli(&["info", "commandstats"]).unwrap();
    stats
        .lines()
        .find_map(|l| l.strip_prefix("cmdstat_fcall:calls="))
        .and_then(|v| v.split(',').next())
        .map_or(0, |v| v.parse().unwrap())
}

/// 64 tasks sharing a backend, each on its own key with its own cost: each
/// gets its own decision; returns how many FCALLs carried them.
async fn sixty_four_own_decisions(server: &RedisServer, redis: RedisBackend) -> u64 {
    let policy = redis
        .prepare(&Policy::new(Limit::new(
            Algorithm::TokenBucket,
            Quota::new(100, SECOND_NS).unwrap(),
        )))
        .unwrap();
    redis.check("warm", &policy, 1).await.unwrap();
    server.cli(&["config", "resetstat"]).unwrap();
    let tasks: Vec<_> = (1..=64u64)
        .map(|cost| {
            let (redis, policy) = (redis.clone(), policy.clone());
            tokio::spawn(async move {
                let d = redis
                    .check(&format!("own-{cost}"), &policy, cost)
                    .await
                    .unwrap();
                assert!(d.allowed);
                assert_eq!(d.remaining, 100 - cost, "the decision of cost {cost}");
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    fcalls(server)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callers_sharing_a_backend_get_their_own_decisions_folded() {
    let Some(server) = common::server() else {
        return;
    };
    let folding = common::backend(&server.url()).await;
    let calls = sixty_four_own_decisions(&server, folding).await;
    assert!(calls < 64, "{calls} FCALLs for 64 decisions");
    let alone = common::config(&server.url())
        .fold(0)
        .connect()
        .await
        .unwrap();
    assert_eq!(sixty_four_own_decisions(&server, alone).await, 64);
}
