//! Conformance with envoyproxy/ratelimit: the answers its source and tests
//! give, asked of a real `tollgate serve` over gRPC (Envoy's own protos, the
//! client stubs of `envoy-types`), on every store: memory, Redis, Redis
//! Cluster and PostgreSQL (each started here through its harness; the
//! `TOLLGATE_SKIP_REDIS=1` / `TOLLGATE_SKIP_POSTGRES=1` skips say so).
//!
//! Each case cites where its expected answer comes from, as
//! `envoyproxy/ratelimit <file>:<line>` or `<file>:<start>-<end>`. Line
//! numbers refer to envoyproxy/ratelimit as stored at these commits, one per
//! file (each file read at a version that holds the cited code):
//!
//! - src/config/config_impl.go: afec97a7622ad23ede50ed67c7a57b2d771d2d03
//! - src/limiter/base_limiter.go, src/service/ratelimit.go,
//!   test/service/ratelimit_test.go: 1dc9d23d8493b6966968fcad42adbb16d6c83cca
//! - src/limiter/cache_key.go: 5fc35dfcf26efe466ed758fb184cff58ac1d6f6a
//! - src/redis/fixed_cache_impl.go: 6c6a8bfe65d5a425842b28a873408d59efa7f833
//! - src/settings/settings.go: 00e75e687256efaa1214f3d24f29757962c2fa42
//! - src/utils/utilities.go, test/redis/fixed_cache_impl_test.go:
//!   04f202f0f518cde5eea5d000a86d792cb469190b
//! - test/config/config_test.go, test/config/wildcard.yaml:
//!   008b66acb35b95630b2d10aff17f8a7a5a4174e0
//!
//! Upstream's defaults are tollgate's defaults, so the main server runs with
//! no setting at all; the global switches each get a server of their own on
//! the same store.

mod support;

use std::time::{SystemTime, UNIX_EPOCH};

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{
    Entry, RateLimitOverride,
};
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{Code, DescriptorStatus};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::UInt64Value;
use tollgate_server::answers::{Answers, LimitHeaders};
use tonic::transport::Channel;

const CONFIG: &str = "
domain: conf
descriptors:
  - key: basic
    rate_limit: { unit: hour, requests_per_unit: 3 }
  - key: named
    rate_limit: { unit: hour, requests_per_unit: 5, name: my_limit }
  - key: dark
    shadow_mode: true
    rate_limit: { unit: hour, requests_per_unit: 2 }
  - key: zero
    rate_limit: { unit: hour, requests_per_unit: 0 }
  - key: unl
    rate_limit: { unlimited: true }
  - key: unl_named
    rate_limit: { unlimited: true, name: unl_limit }
  - key: unl_replacer
    rate_limit:
      unit: hour
      requests_per_unit: 10
      replaces: [{ name: unl_limit }]
  - key: wild
    value: foo*
    rate_limit: { unit: hour, requests_per_unit: 2 }
  - key: noWild
    value: foo
    rate_limit: { unit: hour, requests_per_unit: 20 }
  - key: midWild
    value: bar*b
    rate_limit: { unit: hour, requests_per_unit: 20 }
  - key: shared
    value: files*
    share_threshold: true
    rate_limit: { unit: hour, requests_per_unit: 2 }
  - key: prec
    value: exact
    rate_limit: { unit: hour, requests_per_unit: 7 }
  - key: prec
    value: ex*
    rate_limit: { unit: hour, requests_per_unit: 8 }
  - key: prec
    rate_limit: { unit: hour, requests_per_unit: 9 }
  - key: parent
    value: p
    descriptors:
      - key: child
        rate_limit: { unit: hour, requests_per_unit: 4 }
  - key: narrow
    rate_limit: { unit: hour, requests_per_unit: 1, name: narrow_limit }
  - key: wide
    rate_limit:
      unit: hour
      requests_per_unit: 10
      replaces: [{ name: narrow_limit }]
  - key: quota
    quota_mode: true
    rate_limit: { unit: hour, requests_per_unit: 1 }
  - key: tight
    rate_limit: { unit: hour, requests_per_unit: 1 }
  - key: loose
    rate_limit: { unit: hour, requests_per_unit: 10 }
  - key: per_minute
    rate_limit: { unit: minute, requests_per_unit: 100 }
  - key: per_day
    rate_limit: { unit: day, requests_per_unit: 100 }
  - key: per_second
    rate_limit: { unit: second, requests_per_unit: 100 }
";

type Client = RateLimitServiceClient<Channel>;

/// One server per setting, all on the same store.
struct Servers {
    default: support::TestServer,
    shadow: support::TestServer,
    stop: support::TestServer,
    headers: support::TestServer,
}

impl Servers {
    async fn start(store: &str) -> Servers {
        let with = |answers: Answers| {
            let store = store.to_string();
            support::start_with(CONFIG, move |o| {
                o.store = store;
                o.http = None;
                o.answers = answers;
            })
        };
        Servers {
            default: with(Answers::default()).await,
            shadow: with(Answers {
                global_shadow: true,
                ..Answers::default()
            })
            .await,
            stop: with(Answers {
                stop_increment_when_over: true,
                ..Answers::default()
            })
            .await,
            headers: with(Answers {
                limit_headers: Some(LimitHeaders::default()),
                ..Answers::default()
            })
            .await,
        }
    }

    async fn shutdown(self) {
        for server in [self.default, self.shadow, self.stop, self.headers] {
            server.running.shutdown().await;
        }
    }
}

async fn client(server: &support::TestServer) -> Client {
    RateLimitServiceClient::connect(server.grpc_url())
        .await
        .unwrap()
}

fn descriptor(entries: &[(&str, &str)]) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|(k, v)| Entry {
                key: k.to_string(),
                value: v.to_string(),
            })
            .collect(),
        ..RateLimitDescriptor::default()
    }
}

fn with_hits(mut d: RateLimitDescriptor, hits: u64) -> RateLimitDescriptor {
    d.hits_addend = Some(UInt64Value { value: hits });
    d
}

fn request(descriptors: Vec<RateLimitDescriptor>) -> RateLimitRequest {
    RateLimitRequest {
        domain: "conf".into(),
        descriptors,
        hits_addend: 0,
    }
}

async fn ask(c: &mut Client, descriptors: Vec<RateLimitDescriptor>) -> RateLimitResponse {
    c.should_rate_limit(request(descriptors))
        .await
        .unwrap()
        .into_inner()
}

/// One descriptor of `key=value`, one hit: its status.
async fn hit(c: &mut Client, key: &str, value: &str) -> DescriptorStatus {
    ask(c, vec![descriptor(&[(key, value)])]).await.statuses[0].clone()
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// The hour boundary resets every counter of the cases: a run that would
/// cross it waits for it to pass first.
async fn away_from_the_hour() {
    let left = 3600 - unix_now() % 3600;
    if left < 30 {
        tokio::time::sleep(std::time::Duration::from_secs(left + 1)).await;
    }
}

/// `duration_until_reset` is upstream's: the unit minus the time into the
/// unit's window, windows aligned on the Unix epoch, whole seconds
/// (envoyproxy/ratelimit src/utils/utilities.go:53-60, `CalculateReset`).
fn assert_epoch_reset(s: &DescriptorStatus, unit_secs: u64) {
    let got = s.duration_until_reset.expect("the reset is always sent");
    assert_eq!(got.nanos, 0, "whole seconds: {got:?}");
    let after = unit_secs - unix_now() % unit_secs;
    // Asked a moment ago: the same second, or the one before (or the
    // window just turned).
    let ok = got.seconds as u64 == after
        || got.seconds as u64 == after + 1
        || (after == unit_secs && got.seconds == 1);
    assert!(
        ok,
        "reset {} s, expected {after} s (unit {unit_secs} s)",
        got.seconds
    );
}

fn limit_of(s: &DescriptorStatus) -> (u32, i32, &str) {
    let l = s.current_limit.as_ref().expect("a current_limit");
    (l.requests_per_unit, l.unit, l.name.as_str())
}

fn ok(s: &DescriptorStatus) -> bool {
    s.code == Code::Ok as i32
}

async fn run(store: &str) {
    away_from_the_hour().await;
    let servers = Servers::start(store).await;
    let mut c = client(&servers.default).await;

    // 1. A first hit: OK, the limit less one, the limit as configured with
    // an empty name (none in the file), the reset from the unit's window.
    // envoyproxy/ratelimit src/limiter/base_limiter.go:125-127
    // (GetResponseDescriptorStatus: OK with overLimitThreshold -
    // limitAfterIncrease remaining); test/redis/fixed_cache_impl_test.go:180-183
    // and :225-235 (TestRedis: 10 per second, after 5 hits, 5 remaining).
    let s = hit(&mut c, "basic", "a").await;
    assert!(ok(&s));
    assert_eq!(s.limit_remaining, 2);
    assert_eq!(limit_of(&s), (3, Unit::Hour as i32, ""));
    assert_epoch_reset(&s, 3600);

    // 2. current_limit.name is the file's rate_limit.name.
    // envoyproxy/ratelimit src/config/config_impl.go:86-104 (NewRateLimit puts
    // Name in the RateLimitResponse_RateLimit it answers with; the file's
    // name passed at :175-179).
    let s = hit(&mut c, "named", "a").await;
    assert_eq!(limit_of(&s), (5, Unit::Hour as i32, "my_limit"));

    // 3. Every hit is counted, a refused one too: past the limit the
    // answer is OVER_LIMIT with 0 remaining and the reset still sent, and
    // a later peek (hits_addend 0) still sees the count past the limit.
    // envoyproxy/ratelimit src/redis/fixed_cache_impl.go:37-40 and :238-239
    // (pipelineAppend: INCRBY whatever the outcome); base_limiter.go:104-107
    // (OVER_LIMIT with 0).
    for _ in 0..2 {
        hit(&mut c, "basic", "b").await;
    }
    let at = hit(&mut c, "basic", "b").await;
    assert!(ok(&at), "at the limit is still OK");
    assert_eq!(at.limit_remaining, 0);
    let over = hit(&mut c, "basic", "b").await;
    assert_eq!(over.code, Code::OverLimit as i32);
    assert_eq!(over.limit_remaining, 0);
    assert_epoch_reset(&over, 3600);
    let peek = ask(&mut c, vec![with_hits(descriptor(&[("basic", "b")]), 0)]).await;
    assert_eq!(
        peek.statuses[0].code,
        Code::OverLimit as i32,
        "the refusal was counted"
    );

    // 4. More hits than the whole limit at once: over, and counted.
    // envoyproxy/ratelimit src/limiter/base_limiter.go:104-107
    // (limitAfterIncrease > overLimitThreshold).
    let big = ask(&mut c, vec![with_hits(descriptor(&[("basic", "c")]), 5)]).await;
    assert_eq!(
        (big.overall_code, big.statuses[0].limit_remaining),
        (Code::OverLimit as i32, 0)
    );
    let peek = ask(&mut c, vec![with_hits(descriptor(&[("basic", "c")]), 0)]).await;
    assert_eq!(peek.statuses[0].code, Code::OverLimit as i32);

    // 5. hits_addend 0 on a fresh key only asks: OK, the whole limit left,
    // the reset sent. envoyproxy/ratelimit src/utils/utilities.go:99-102
    // (GetHitsAddends: a descriptor's hits_addend may be zero, "check only").
    let peek = ask(&mut c, vec![with_hits(descriptor(&[("basic", "d")]), 0)]).await;
    assert!(ok(&peek.statuses[0]));
    assert_eq!(peek.statuses[0].limit_remaining, 3);
    assert_epoch_reset(&peek.statuses[0], 3600);

    // 6. The request's hits_addend 0 counts as 1.
    // envoyproxy/ratelimit src/utils/utilities.go:103-106 (GetHitsAddends:
    // max(1, request.HitsAddend)).
    let s = hit(&mut c, "basic", "e").await;
    assert_eq!(s.limit_remaining, 2);

    // 7. shadow_mode: counted, never over; past the limit the status is OK
    // with 0 remaining. envoyproxy/ratelimit src/limiter/base_limiter.go:135-141
    // ("If the limit is in ShadowMode, it should be always return OK");
    // test/service/ratelimit_test.go:274-307 (TestRuleShadowMode: shadow
    // rules OK); test/redis/fixed_cache_impl_test.go:670-784
    // (TestOverLimitWithLocalCacheShadowRule: over, still OK, 0 remaining).
    let mut last = None;
    for _ in 0..4 {
        last = Some(ask(&mut c, vec![descriptor(&[("dark", "a")])]).await);
    }
    let last = last.unwrap();
    assert_eq!(last.overall_code, Code::Ok as i32);
    assert!(ok(&last.statuses[0]));
    assert_eq!(last.statuses[0].limit_remaining, 0, "counted: 4 hits on 2");

    // 8. requests_per_unit 0 keeps its unit and its reset, and is over.
    // envoyproxy/ratelimit src/limiter/base_limiter.go:99 and :104-107
    // (0 + hits > 0).
    let s = hit(&mut c, "zero", "a").await;
    assert_eq!(s.code, Code::OverLimit as i32);
    assert_eq!(limit_of(&s), (0, Unit::Hour as i32, ""));
    assert_epoch_reset(&s, 3600);

    // 9. unlimited: OK, the largest remaining, no current_limit.
    // envoyproxy/ratelimit src/service/ratelimit.go:209-213 (isUnlimited: OK
    // with LimitRemaining MaxUint32).
    let s = hit(&mut c, "unl", "a").await;
    assert!(ok(&s) && s.current_limit.is_none());
    assert_eq!(s.limit_remaining, u32::MAX);

    // 9b. ... and stays so when another matched limit replaces it: it is
    // marked unlimited before the replacing. envoyproxy/ratelimit
    // src/service/ratelimit.go:151-160 and :163-174 (constructLimitsToCheck:
    // isUnlimited set before the replaced limits are dropped).
    let res = ask(
        &mut c,
        vec![
            descriptor(&[("unl_named", "a")]),
            descriptor(&[("unl_replacer", "a")]),
        ],
    )
    .await;
    assert_eq!(res.statuses[0].limit_remaining, u32::MAX);

    // 10. No limit matched: OK, 0 remaining, no limit and no reset.
    // envoyproxy/ratelimit src/limiter/base_limiter.go:86-89 and :211-216
    // (key "": OK, nil limit, 0 remaining, no DurationUntilReset).
    let s = hit(&mut c, "nobody", "a").await;
    assert!(ok(&s) && s.current_limit.is_none() && s.duration_until_reset.is_none());
    assert_eq!(s.limit_remaining, 0);

    // 11. The request's own limit replaces the file's, named with nothing,
    // even for a descriptor the file does not limit.
    // envoyproxy/ratelimit src/config/config_impl.go:329-344 (GetLimit:
    // descriptor.GetLimit() != nil gives NewRateLimit(requests, unit, ..,
    // name "")); test/config/config_test.go:260-272 (TestConfigLimitOverride,
    // :249-327: the override, no name).
    let mut d = descriptor(&[("nobody", "override")]);
    d.limit = Some(RateLimitOverride {
        requests_per_unit: 1,
        unit: Unit::Hour as i32,
    });
    let first = ask(&mut c, vec![d.clone()]).await;
    assert_eq!(limit_of(&first.statuses[0]), (1, Unit::Hour as i32, ""));
    assert_eq!(first.statuses[0].limit_remaining, 0);
    let second = ask(&mut c, vec![d.clone()]).await;
    assert_eq!(second.overall_code, Code::OverLimit as i32);

    // 12. ... but only in a known domain.
    // envoyproxy/ratelimit src/config/config_impl.go:321-327 (GetLimit:
    // unknown domain, nil before the override is looked at, :329);
    // test/config/config_test.go:254-259 (TestConfigLimitOverride).
    let mut other = request(vec![d]);
    other.domain = "elsewhere".into();
    let res = c.should_rate_limit(other).await.unwrap().into_inner();
    assert!(res.statuses[0].current_limit.is_none());

    // 13. A value ending in `*` matches by prefix, each value with its own
    // counter; a value that does not start so is not limited.
    // envoyproxy/ratelimit test/config/config_test.go:589-609
    // (TestWildcardConfig, :569-626) and test/config/wildcard.yaml:4-8.
    for _ in 0..2 {
        assert!(ok(&hit(&mut c, "wild", "foo1").await));
    }
    assert_eq!(
        hit(&mut c, "wild", "foo1").await.code,
        Code::OverLimit as i32
    );
    assert!(ok(&hit(&mut c, "wild", "foo2").await), "its own counter");
    assert!(hit(&mut c, "wild", "bar").await.current_limit.is_none());

    // 14. A value without `*` does not match by prefix ("Non-wildcard
    // values don't eager match"). envoyproxy/ratelimit
    // test/config/config_test.go:611-617 (TestWildcardConfig) and
    // test/config/wildcard.yaml:9-13.
    assert!(hit(&mut c, "noWild", "foo1").await.current_limit.is_none());

    // 15. A `*` inside a value is no wildcard ("Wildcard in the middle of
    // value is not supported"): `bar*b` matches itself only.
    // envoyproxy/ratelimit test/config/config_test.go:619-625
    // (TestWildcardConfig; it asks the key `midWildcard`, not the file's
    // `midWild`) and test/config/wildcard.yaml:18-22;
    // src/config/config_impl.go:209-212 (only a value ending in `*` is a
    // wildcard).
    assert!(hit(&mut c, "midWild", "barab")
        .await
        .current_limit
        .is_none());
    assert_eq!(limit_of(&hit(&mut c, "midWild", "bar*b").await).0, 20);

    // 16. Precedence: the exact value, then a wildcard, then the key alone.
    // envoyproxy/ratelimit src/config/config_impl.go:364-389 (GetLimit:
    // key_value, :370, then wildcardKeys, :373-381, then key, :384-389).
    assert_eq!(limit_of(&hit(&mut c, "prec", "exact").await).0, 7);
    assert_eq!(limit_of(&hit(&mut c, "prec", "exactly").await).0, 8);
    assert_eq!(limit_of(&hit(&mut c, "prec", "other").await).0, 9);

    // 17. share_threshold: every value the wildcard matches shares one
    // counter. envoyproxy/ratelimit src/config/config_impl.go:203-207,
    // :391-401 and :483-490 (shareThreshold, ShareThresholdKeyPattern).
    assert!(ok(&hit(&mut c, "shared", "files1").await));
    assert!(ok(&hit(&mut c, "shared", "files2").await));
    assert_eq!(
        hit(&mut c, "shared", "files3").await.code,
        Code::OverLimit as i32
    );

    // 18. Nested descriptors: the limit of the full path; a request deeper
    // than the configuration, or stopping above its limit, has none.
    // envoyproxy/ratelimit src/config/config_impl.go:462-494 (GetLimit:
    // "request depth does not match config depth", :492).
    let full = ask(&mut c, vec![descriptor(&[("parent", "p"), ("child", "x")])]).await;
    assert_eq!(limit_of(&full.statuses[0]).0, 4);
    let short = ask(&mut c, vec![descriptor(&[("parent", "p")])]).await;
    assert!(short.statuses[0].current_limit.is_none());
    let deep = ask(
        &mut c,
        vec![descriptor(&[
            ("parent", "p"),
            ("child", "x"),
            ("more", "y"),
        ])],
    )
    .await;
    assert!(deep.statuses[0].current_limit.is_none());

    // 19. replaces: a matched limit replacing another by name leaves it
    // out of the request. envoyproxy/ratelimit src/service/ratelimit.go:151-154
    // and :163-174 (constructLimitsToCheck: replacing); no upstream
    // TestServiceWithReplaces is stored.
    for _ in 0..3 {
        let res = ask(
            &mut c,
            vec![descriptor(&[("narrow", "a")]), descriptor(&[("wide", "a")])],
        )
        .await;
        assert_eq!(res.overall_code, Code::Ok as i32);
        assert!(res.statuses[0].current_limit.is_none());
    }

    // 20. quota_mode: a quota over its limit is reported OVER_LIMIT but
    // refuses the request only when every quota group is over; a plain
    // limit over refuses. envoyproxy/ratelimit src/service/ratelimit.go:180-242
    // (shouldRateLimitWorker) has no quota_mode, failedRateLimitDescriptors
    // or quotaGroups (none found in the stored versions): there any
    // OVER_LIMIT status makes the overall code OVER_LIMIT (:214-217), so
    // this case is tollgate's own, not upstream's.
    hit(&mut c, "quota", "q1").await;
    let res = ask(
        &mut c,
        vec![
            descriptor(&[("quota", "q1")]),
            descriptor(&[("quota", "q2")]),
        ],
    )
    .await;
    assert_eq!(res.statuses[0].code, Code::OverLimit as i32);
    assert_eq!(res.overall_code, Code::Ok as i32, "q2 still has room");
    let res = ask(
        &mut c,
        vec![
            descriptor(&[("quota", "q1")]),
            descriptor(&[("quota", "q2")]),
        ],
    )
    .await;
    assert_eq!(res.overall_code, Code::OverLimit as i32, "every quota over");

    // 21. Windows start on the unit's boundary since the epoch, for every
    // unit. envoyproxy/ratelimit src/utils/utilities.go:53-60
    // (CalculateReset) and src/limiter/cache_key.go:72-73 (GenerateCacheKey:
    // (now / divider) * divider).
    assert_epoch_reset(&hit(&mut c, "per_minute", "a").await, 60);
    assert_epoch_reset(&hit(&mut c, "per_day", "a").await, 86_400);
    assert_epoch_reset(&hit(&mut c, "per_second", "a").await, 1);

    // 22. Without STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT, every descriptor
    // of a refused request is charged.
    // envoyproxy/ratelimit src/redis/fixed_cache_impl.go:101-104
    // (getHitsAddend, named getHitsAddendValue at that commit: "If
    // stopCacheKeyIncrementWhenOverlimit is false, then we always increment
    // the cache key"); src/settings/settings.go:109 (default false).
    hit(&mut c, "tight", "default").await;
    let res = ask(
        &mut c,
        vec![
            descriptor(&[("tight", "default")]),
            descriptor(&[("loose", "default")]),
        ],
    )
    .await;
    assert_eq!(res.overall_code, Code::OverLimit as i32);
    assert_eq!(res.statuses[1].limit_remaining, 9);

    // 23. With it, only the descriptors that would go over are charged.
    // envoyproxy/ratelimit src/redis/fixed_cache_impl.go:98-126
    // (getHitsAddend, as getHitsAddendValue; the GET pipeline before INCRBY,
    // :173-216); test/redis/fixed_cache_impl_test.go:817-828
    // (TestOverLimitWithStopCacheKeyIncrementWhenOverlimitConfig).
    let mut stop = client(&servers.stop).await;
    hit(&mut stop, "tight", "stop").await;
    let res = ask(
        &mut stop,
        vec![
            descriptor(&[("tight", "stop")]),
            descriptor(&[("loose", "stop")]),
        ],
    )
    .await;
    assert_eq!(res.statuses[0].code, Code::OverLimit as i32);
    assert_eq!(res.statuses[1].limit_remaining, 10, "loose was not charged");
    let peek = ask(
        &mut stop,
        vec![with_hits(descriptor(&[("loose", "stop")]), 0)],
    )
    .await;
    assert_eq!(peek.statuses[0].limit_remaining, 10);
    let tight = ask(
        &mut stop,
        vec![with_hits(descriptor(&[("tight", "stop")]), 0)],
    )
    .await;
    assert_eq!(
        tight.statuses[0].code,
        Code::OverLimit as i32,
        "the over key is"
    );

    // 24. SHADOW_MODE: the overall answer is OK, each status still says
    // OVER_LIMIT. envoyproxy/ratelimit src/service/ratelimit.go:234-238 ("If
    // there is a global shadow_mode, it should always return OK");
    // test/service/ratelimit_test.go:217-272 (TestServiceGlobalShadowMode).
    let mut shadow = client(&servers.shadow).await;
    hit(&mut shadow, "tight", "shadow").await;
    let res = ask(&mut shadow, vec![descriptor(&[("tight", "shadow")])]).await;
    assert_eq!(res.overall_code, Code::Ok as i32);
    assert_eq!(res.statuses[0].code, Code::OverLimit as i32);

    // 25. LIMIT_RESPONSE_HEADERS_ENABLED: the limit, remaining and reset of
    // the descriptor closest to its limit, under the default names.
    // envoyproxy/ratelimit src/settings/settings.go:112-118
    // (LIMIT_LIMIT_HEADER RateLimit-Limit, ...) and src/service/ratelimit.go
    // (minimumDescriptor, :196-232; rateLimitResetHeader, :261-268);
    // test/service/ratelimit_test.go:348-405
    // (TestServiceWithCustomRatelimitHeaders) and :407-458
    // (TestServiceWithDefaultRatelimitHeaders).
    let mut headers = client(&servers.headers).await;
    let res = ask(
        &mut headers,
        vec![descriptor(&[("loose", "h")]), descriptor(&[("basic", "h")])],
    )
    .await;
    let field = |name: &str| {
        res.response_headers_to_add
            .iter()
            .find(|h| h.key == name)
            .map(|h| h.value.clone())
    };
    assert_eq!(field("RateLimit-Limit").as_deref(), Some("3"));
    assert_eq!(field("RateLimit-Remaining").as_deref(), Some("2"));
    let reset: u64 = field("RateLimit-Reset").unwrap().parse().unwrap();
    assert!(reset > 0 && reset <= 3600);

    // 26. By default no header is added.
    // envoyproxy/ratelimit src/settings/settings.go:112
    // (LIMIT_RESPONSE_HEADERS_ENABLED default false).
    let res = ask(&mut c, vec![descriptor(&[("loose", "none")])]).await;
    assert!(res.response_headers_to_add.is_empty());

    servers.shutdown().await;
}

#[tokio::test]
async fn memory() {
    run("memory").await;
}

#[tokio::test]
async fn redis() {
    if tollgate_redis::harness::skip_requested() {
        eprintln!("TOLLGATE_SKIP_REDIS=1: the Redis conformance run is skipped");
        return;
    }
    let redis = tollgate_redis::harness::RedisServer::start().unwrap_or_else(|e| panic!("{e}"));
    run(&redis.url()).await;
}

#[tokio::test]
async fn redis_cluster() {
    if tollgate_redis::harness::skip_requested() {
        eprintln!("TOLLGATE_SKIP_REDIS=1: the Redis Cluster conformance run is skipped");
        return;
    }
    let cluster = tollgate_redis::harness::RedisCluster::start().unwrap_or_else(|e| panic!("{e}"));
    run(&cluster.url()).await;
}

#[tokio::test]
async fn postgres() {
    if tollgate_postgres::harness::skip_requested() {
        eprintln!("TOLLGATE_SKIP_POSTGRES=1: the PostgreSQL conformance run is skipped");
        return;
    }
    let pg = tollgate_postgres::harness::PgServer::start().unwrap_or_else(|e| panic!("{e}"));
    run(&pg.url()).await;
}

/// share_threshold on a value without `*` is refused when the file loads,
/// naming it. envoyproxy/ratelimit src/config/config_impl.go:194-201
/// ("share_threshold can only be used with wildcard values").
#[test]
fn share_threshold_without_a_wildcard_is_refused() {
    let yaml = "domain: d\ndescriptors:\n  - key: k\n    value: v\n    share_threshold: true\n    rate_limit: { unit: hour, requests_per_unit: 1 }\n";
    let err = tollgate_server::config::Config::parse("f.yaml", yaml).unwrap_err();
    assert!(err.message.contains("share_threshold"), "{err}");
}

/// A body that is no RateLimitRequest is the client's error:
/// INVALID_ARGUMENT, not INTERNAL (issue 22, item 14; envoyproxy/ratelimit
/// answers through grpc-go, whose codec error is also not INTERNAL).
#[tokio::test]
async fn a_malformed_request_is_an_invalid_argument() {
    let server = support::start(CONFIG).await;
    let stream = tokio::net::TcpStream::connect(server.running.grpc.unwrap())
        .await
        .unwrap();
    let (mut sender, connection) = h2::client::handshake(stream).await.unwrap();
    tokio::spawn(connection);
    let post = http::Request::post("/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit")
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .unwrap();
    let (response, mut body) = sender.send_request(post, false).unwrap();
    // One uncompressed message of three bytes that are no protobuf.
    let frame = bytes::Bytes::from_static(&[0, 0, 0, 0, 3, 0xff, 0xff, 0xff]);
    body.send_data(frame, true).unwrap();
    let response = response.await.unwrap();
    let status = match response.headers().get("grpc-status") {
        Some(s) => s.to_str().unwrap().to_string(),
        None => {
            let mut body = response.into_body();
            while body.data().await.is_some() {}
            let trailers = body.trailers().await.unwrap().unwrap();
            trailers["grpc-status"].to_str().unwrap().to_string()
        }
    };
    assert_eq!(status, "3", "INVALID_ARGUMENT");
    server.running.shutdown().await;
}

/// NEAR_LIMIT_RATIO: an admitted hit counts as near the limit once the
/// count passes floor(limit * ratio). envoyproxy/ratelimit
/// src/limiter/base_limiter.go:102 (nearLimitThreshold = floor(limit *
/// nearLimitRatio)) and :177-189 (checkNearLimitThreshold:
/// limitAfterIncrease > it, :178).
#[tokio::test]
async fn near_limit_ratio_sets_the_near_limit_statistic() {
    let yaml = "domain: near\ndescriptors:\n  - key: n\n    rate_limit: { unit: hour, requests_per_unit: 10 }\n";
    away_from_the_hour().await;
    let server = support::start_with(yaml, |o| {
        o.answers = Answers {
            near_limit_ratio: 0.5,
            ..Answers::default()
        }
    })
    .await;
    let mut c = client(&server).await;
    let near = || {
        let text = support::get_metrics_text().1;
        let series = format!(
            "{}{{rule=\"near.n\"}} ",
            tollgate_server::metrics::NEAR_LIMIT
        );
        text.lines()
            .find_map(|l| l.strip_prefix(series.as_str()).map(str::to_string))
    };
    for _ in 0..5 {
        let mut req = request(vec![descriptor(&[("n", "x")])]);
        req.domain = "near".into();
        c.should_rate_limit(req).await.unwrap();
    }
    assert_eq!(near(), None, "5 of 10 is not past floor(10 * 0.5)");
    let mut req = request(vec![descriptor(&[("n", "x")])]);
    req.domain = "near".into();
    c.should_rate_limit(req).await.unwrap();
    assert_eq!(near().as_deref(), Some("1"));
    server.running.shutdown().await;
}
