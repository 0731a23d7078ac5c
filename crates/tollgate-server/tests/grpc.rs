//! Envoy's rate limit API through a tonic client generated from the same
//! protos (envoy-types' client stubs), against a real server: the cases
//! envoyproxy/ratelimit documents.

mod support;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::UInt64Value;
use tollgate_server::answers::Counting;
use tonic::transport::Channel;

const CONFIG: &str = "
domain: rl
descriptors:
  - key: user
    rate_limit: { unit: minute, requests_per_unit: 2 }
  - key: cluster
    value: mongo*
    rate_limit: { unit: second, requests_per_unit: 1 }
  - key: client
    value: foo
    descriptors:
      - key: path
        value: /bar
        rate_limit: { unit: hour, requests_per_unit: 1 }
  - key: health
    rate_limit: { unlimited: true }
  - key: narrow
    rate_limit: { unit: minute, requests_per_unit: 1, name: narrow_limit }
  - key: wide
    rate_limit:
      unit: minute
      requests_per_unit: 10
      replaces: [{ name: narrow_limit }]
  - key: dark
    shadow_mode: true
    rate_limit: { unit: minute, requests_per_unit: 1 }
  - key: bucket
    rate_limit: { algorithm: token_bucket, period: 90s, requests_per_unit: 3, burst: 2 }
  - key: blocked
    rate_limit: { unit: second, requests_per_unit: 0 }
";

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

fn request(descriptors: Vec<RateLimitDescriptor>, hits: u32) -> RateLimitRequest {
    RateLimitRequest {
        domain: "rl".into(),
        descriptors,
        hits_addend: hits,
    }
}

/// A server counting tollgate's way (refusals cost nothing, RateLimit
/// fields in the answer), which these cases describe.
async fn start_tollgate() -> support::TestServer {
    support::start_with(CONFIG, |o| o.answers.counting = Counting::Tollgate).await
}

async fn client(server: &support::TestServer) -> RateLimitServiceClient<Channel> {
    RateLimitServiceClient::connect(server.grpc_url())
        .await
        .unwrap()
}

async fn ask(c: &mut RateLimitServiceClient<Channel>, req: RateLimitRequest) -> RateLimitResponse {
    c.should_rate_limit(req).await.unwrap().into_inner()
}

fn header<'a>(res: &'a RateLimitResponse, name: &str) -> Option<&'a str> {
    res.response_headers_to_add
        .iter()
        .find(|h| h.key == name)
        .map(|h| h.value.as_str())
}

#[tokio::test]
async fn fixed_window_counts_and_answers_with_its_numbers() {
    let server = start_tollgate().await;
    let mut c = client(&server).await;
    let one = || request(vec![descriptor(&[("user", "ada")])], 1);
    let first = ask(&mut c, one()).await;
    assert_eq!(first.overall_code, Code::Ok as i32);
    let s = &first.statuses[0];
    let limit = s.current_limit.as_ref().unwrap();
    assert_eq!(
        (limit.requests_per_unit, limit.unit),
        (2, Unit::Minute as i32)
    );
    // The file's `rate_limit.name`, empty when it gives none (the
    // RateLimit fields name it by its path).
    assert_eq!(limit.name, "");
    assert_eq!(s.limit_remaining, 1);
    // The rest of the current wall-clock minute: under a second when the
    // test runs in a minute's last second, so compared whole, not by its
    // `seconds` alone.
    let reset = s.duration_until_reset.unwrap();
    let reset_ns = i128::from(reset.seconds) * 1_000_000_000 + i128::from(reset.nanos);
    assert!(reset_ns > 0 && reset_ns <= 60_000_000_000, "{reset:?}");
    assert_eq!(
        header(&first, "ratelimit-policy"),
        Some("\"rl.user\";q=2;w=60")
    );
    assert_eq!(ask(&mut c, one()).await.statuses[0].limit_remaining, 0);
    let over = ask(&mut c, one()).await;
    assert_eq!(over.overall_code, Code::OverLimit as i32);
    assert_eq!(over.statuses[0].code, Code::OverLimit as i32);
    assert!(header(&over, "retry-after").is_some());
    // Each value of a key without value has its own counter.
    let other = ask(&mut c, request(vec![descriptor(&[("user", "bob")])], 1)).await;
    assert_eq!(other.overall_code, Code::Ok as i32);
    server.running.shutdown().await;
}

#[tokio::test]
async fn unmatched_descriptor_is_ok_without_a_limit() {
    let server = support::start(CONFIG).await;
    let mut c = client(&server).await;
    for d in [
        descriptor(&[("nobody", "x")]),
        descriptor(&[("client", "foo")]),
    ] {
        let res = ask(&mut c, request(vec![d], 1)).await;
        assert_eq!(res.overall_code, Code::Ok as i32);
        assert_eq!(res.statuses[0].code, Code::Ok as i32);
        assert!(res.statuses[0].current_limit.is_none());
    }
    // An unknown domain limits nothing either.
    let mut other = request(vec![descriptor(&[("user", "ada")])], 1);
    other.domain = "elsewhere".into();
    assert!(ask(&mut c, other).await.statuses[0].current_limit.is_none());
    server.running.shutdown().await;
}

#[tokio::test]
async fn wildcard_and_nested_descriptors() {
    let server = support::start(CONFIG).await;
    let mut c = client(&server).await;
    let wild = || request(vec![descriptor(&[("cluster", "mongo_eu")])], 1);
    assert_eq!(ask(&mut c, wild()).await.overall_code, Code::Ok as i32);
    assert_eq!(
        ask(&mut c, wild()).await.overall_code,
        Code::OverLimit as i32
    );
    let nested = || request(vec![descriptor(&[("client", "foo"), ("path", "/bar")])], 1);
    let first = ask(&mut c, nested()).await;
    assert_eq!(
        first.statuses[0].current_limit.as_ref().unwrap().unit,
        Unit::Hour as i32
    );
    assert_eq!(
        ask(&mut c, nested()).await.overall_code,
        Code::OverLimit as i32
    );
    server.running.shutdown().await;
}

#[tokio::test]
async fn unlimited_never_limits() {
    let server = support::start(CONFIG).await;
    let mut c = client(&server).await;
    for _ in 0..5 {
        let res = ask(&mut c, request(vec![descriptor(&[("health", "x")])], 1000)).await;
        assert_eq!(res.overall_code, Code::Ok as i32);
        assert!(res.statuses[0].current_limit.is_none());
        assert_eq!(res.statuses[0].limit_remaining, u32::MAX);
    }
    server.running.shutdown().await;
}

#[tokio::test]
async fn replaced_limit_is_not_applied() {
    let server = support::start(CONFIG).await;
    let mut c = client(&server).await;
    let both = || {
        request(
            vec![descriptor(&[("narrow", "a")]), descriptor(&[("wide", "a")])],
            1,
        )
    };
    for _ in 0..3 {
        let res = ask(&mut c, both()).await;
        assert_eq!(res.overall_code, Code::Ok as i32);
        assert!(res.statuses[0].current_limit.is_none());
        assert_eq!(
            res.statuses[1]
                .current_limit
                .as_ref()
                .unwrap()
                .requests_per_unit,
            10
        );
    }
    // Alone, the narrow limit applies.
    let alone = || request(vec![descriptor(&[("narrow", "b")])], 1);
    ask(&mut c, alone()).await;
    assert_eq!(
        ask(&mut c, alone()).await.overall_code,
        Code::OverLimit as i32
    );
    server.running.shutdown().await;
}

#[tokio::test]
async fn shadow_mode_is_counted_never_enforced() {
    let server = support::start(CONFIG).await;
    let mut c = client(&server).await;
    for _ in 0..3 {
        let res = ask(&mut c, request(vec![descriptor(&[("dark", "x")])], 1)).await;
        assert_eq!(res.overall_code, Code::Ok as i32);
        assert_eq!(res.statuses[0].code, Code::Ok as i32);
    }
    let text = reqwest_free_get(&server.http_url("/metrics")).await;
    assert!(
        text.lines()
            .any(|l| l.starts_with("tollgate_server_shadow_mode_total{rule=\"rl.dark\"} 2")),
        "{text}"
    );
    server.running.shutdown().await;
}

#[tokio::test]
async fn hits_addend_zero_counts_one_and_above_the_limit_is_over() {
    let server = start_tollgate().await;
    let mut c = client(&server).await;
    // 0 on the request is "not set": one hit, as Envoy's API says.
    let zero = ask(&mut c, request(vec![descriptor(&[("user", "z")])], 0)).await;
    assert_eq!(zero.statuses[0].limit_remaining, 1);
    // More than the whole limit at once: over, nothing charged.
    let big = ask(&mut c, request(vec![descriptor(&[("user", "y")])], 3)).await;
    assert_eq!(big.overall_code, Code::OverLimit as i32);
    assert_eq!(big.statuses[0].limit_remaining, 2);
    // A descriptor's own hits_addend overrides; an explicit 0 only asks.
    let mut peek = descriptor(&[("user", "z")]);
    peek.hits_addend = Some(UInt64Value { value: 0 });
    let res = ask(&mut c, request(vec![peek], 5)).await;
    assert_eq!(
        (res.overall_code, res.statuses[0].limit_remaining),
        (Code::Ok as i32, 1)
    );
    // Negative hits give budget back.
    let mut back = descriptor(&[("user", "z")]);
    back.hits_addend = Some(UInt64Value { value: 1 });
    back.is_negative_hits = true;
    assert_eq!(
        ask(&mut c, request(vec![back], 1)).await.statuses[0].limit_remaining,
        2
    );
    server.running.shutdown().await;
}

#[tokio::test]
async fn any_algorithm_and_period_and_a_blocking_zero() {
    let server = start_tollgate().await;
    let mut c = client(&server).await;
    let res = ask(&mut c, request(vec![descriptor(&[("bucket", "k")])], 1)).await;
    let limit = res.statuses[0].current_limit.as_ref().unwrap();
    assert_eq!(
        (limit.requests_per_unit, limit.unit),
        (3, Unit::Unknown as i32)
    );
    assert_eq!(res.statuses[0].limit_remaining, 1);
    assert_eq!(
        header(&res, "ratelimit-policy"),
        Some("\"rl.bucket\";q=3;w=90")
    );
    let blocked = ask(&mut c, request(vec![descriptor(&[("blocked", "k")])], 1)).await;
    assert_eq!(blocked.overall_code, Code::OverLimit as i32);
    server.running.shutdown().await;
}

#[tokio::test]
async fn empty_domain_and_empty_descriptors_are_invalid_arguments() {
    let server = support::start(CONFIG).await;
    let mut c = client(&server).await;
    let mut empty = request(vec![descriptor(&[("user", "a")])], 1);
    empty.domain.clear();
    let err = c.should_rate_limit(empty).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(err.message().contains("domain"), "{err}");
    let err = c.should_rate_limit(request(vec![], 1)).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    server.running.shutdown().await;
}

/// GET over a raw hyper client.
async fn reqwest_free_get(url: &str) -> String {
    support::get(url).await.1
}

/// envoyproxy/ratelimit serves gRPC's health service on its gRPC port, as
/// `""` and `ratelimit` (src/server/server_impl.go, src/server/health.go):
/// load balancers and Kubernetes gRPC probes ask it there.
#[tokio::test]
async fn the_grpc_health_service_answers_serving() {
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::health_client::HealthClient;
    use tonic_health::pb::HealthCheckRequest;

    let server = start_tollgate().await;
    let channel = Channel::from_shared(server.grpc_url())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut health = HealthClient::new(channel);
    for service in ["", "ratelimit"] {
        let answer = health
            .check(HealthCheckRequest {
                service: service.into(),
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(answer.status(), ServingStatus::Serving, "{service:?}");
    }
    let unknown = health
        .check(HealthCheckRequest {
            service: "other".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(unknown.code(), tonic::Code::NotFound);
    server.running.shutdown().await;
}
