//! Redis decides exactly like the core: random traces of checks, refunds,
//! forced charges and leases with microsecond times, every algorithm,
//! single and layered policies, through `FCALL` and through `EVALSHA`.

mod common;

use tollgate::{Algorithm, Limit, Policy, Quota};
use tollgate_redis::ScriptMode;
use tollgate_testkit::agreement::{Agreement, T0_NS};

/// [`T0_NS`] in the store's microseconds.
const T0_US: u64 = T0_NS / 1000;

/// Periods that exercise the unit reduction: whole microseconds, a period
/// shorter than the clock's tick ratio, and an odd one of ~1 s.
const PERIODS_NS: &[u64] = &[1_000, 7_000, 1_000_000, 999_999_937, 60_000_000_000];

#[test]
fn redis_decides_like_the_core_on_random_traces() {
    let Some(server) = common::server() else {
        return;
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    // Every other case goes through EVALSHA instead of FCALL: one Lua source.
    let functions = rt.block_on(common::backend(&server.url()));
    let eval = rt
        .block_on(
            common::config(&server.url())
                .mode(ScriptMode::Eval)
                .connect(),
        )
        .unwrap();
    Agreement::new(PERIODS_NS, 1000).run(
        |case, key, policy, op, now_us| {
            let redis = if case % 2 == 0 { &functions } else { &eval };
            rt.block_on(redis.apply_at(key, policy, op, now_us))
        },
        common::at_store_resolution,
    );
}

#[test]
fn the_eval_path_decides_like_the_function_path() {
    let Some(server) = common::server() else {
        return;
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let functions = common::backend(&server.url()).await;
        let eval = common::config(&server.url())
            .mode(ScriptMode::Eval)
            .connect()
            .await
            .unwrap();
        assert!(functions.uses_functions() && !eval.uses_functions());
        for algorithm in Algorithm::ALL {
            let quota = Quota::with_parts(3, 1_000_000, 4).unwrap();
            let policy = Policy::new(Limit::new(algorithm, quota));
            for (t, cost) in [(0, 1), (10, 2), (20, 3), (700, 1), (2_500, 5)] {
                let at = T0_US + t;
                let a = functions.check_at("k", &policy, cost, at).await.unwrap();
                let b = eval.check_at("k", &policy, cost, at).await.unwrap();
                assert_eq!(a, b, "{algorithm} at +{t}us");
            }
        }
    });
}
