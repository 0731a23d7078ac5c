//! The configuration file: envoyproxy/ratelimit files as they are,
//! tollgate's extensions, and errors that name file, line and column.

use tollgate::{Algorithm, Limit, Policy, Quota};
use tollgate_server::config::{Action, Config, ConfigError};

fn entries(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn error(yaml: &str) -> ConfigError {
    Config::parse("t.yaml", yaml).expect_err("the file must be refused")
}

#[test]
fn envoy_ratelimit_file_loads_as_is_and_matches_by_its_rules() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/configs/envoy-ratelimit.yaml"
    );
    let config = Config::load(std::path::Path::new(path)).unwrap();
    let d = "edge_proxy_per_ip";
    let path_of = |pairs: &[(&str, &str)]| {
        config
            .lookup(d, &entries(pairs))
            .map(|m| m.entry.path.clone())
    };
    // An exact value wins over the key alone; the key alone takes any value.
    assert_eq!(
        path_of(&[("remote_address", "10.0.0.1")]).unwrap(),
        "edge_proxy_per_ip.remote_address_10.0.0.1"
    );
    assert_eq!(
        path_of(&[("remote_address", "10.0.0.2")]).unwrap(),
        "edge_proxy_per_ip.remote_address"
    );
    // Wildcard by prefix.
    assert_eq!(
        path_of(&[("destination_cluster", "mongo_eu")]).unwrap(),
        "edge_proxy_per_ip.destination_cluster_mongo*"
    );
    assert_eq!(path_of(&[("destination_cluster", "redis")]), None);
    // Nested: only the full path has a limit; a prefix of it has none.
    assert_eq!(path_of(&[("client_id", "foo")]), None);
    assert_eq!(
        path_of(&[("client_id", "foo"), ("path", "/foo/bar")]).unwrap(),
        "edge_proxy_per_ip.client_id_foo.path_/foo/bar"
    );
    assert_eq!(
        path_of(&[("client_id", "foo"), ("path", "/x"), ("extra", "y")]),
        None
    );
    // Unknown domain or key: no limit.
    assert!(config
        .lookup("other", &entries(&[("remote_address", "1")]))
        .is_none());
    let nested = config
        .lookup(d, &entries(&[("client_id", "foo"), ("path", "/foo/bar")]))
        .unwrap()
        .entry;
    assert!(nested.shadow && nested.detailed_metric);
    assert_eq!(nested.name.as_deref(), Some("client_foo_bar"));
    let health = config
        .lookup(d, &entries(&[("path", "/health")]))
        .unwrap()
        .entry;
    assert_eq!(health.action, Action::Unlimited);
    let blocked = config
        .lookup(d, &entries(&[("blocked", "x")]))
        .unwrap()
        .entry;
    assert_eq!(blocked.action, Action::Block);
    let per_ip = config
        .lookup(d, &entries(&[("remote_address", "10.0.0.9")]))
        .unwrap()
        .entry;
    let fixed = Limit::new(Algorithm::FixedWindow, Quota::per_second(10).unwrap());
    assert_eq!(per_ip.action, Action::Limit(Policy::new(fixed)));
}

#[test]
fn check_describes_every_limit_in_words() {
    let yaml = "
domain: api
descriptors:
  - key: user
    rate_limit:
      algorithm: token_bucket
      unit: minute
      requests_per_unit: 100
      burst: 20
  - key: org
    rate_limit:
      limits:
        - { algorithm: gcra, period: 1s, requests_per_unit: 10 }
        - { requests_per_unit: 1000, unit: hour }
  - key: probe
    shadow_mode: true
    rate_limit: { unlimited: true }
";
    let config = Config::parse("t.yaml", yaml).unwrap();
    assert_eq!(
        config.describe(),
        [
            "api.user: token bucket: 100 per minute, bursts of 20",
            "api.org: all of (GCRA: 10 per second; fixed window: 1000 per hour)",
            "api.probe: unlimited [shadow mode: counted, never enforced]",
        ]
    );
}

#[test]
fn http_rules_use_the_layers_vocabulary() {
    let yaml = r#"
http:
  rules:
    - name: per-ip
      limit: { algorithm: gcra, requests_per_unit: 50, unit: second }
    - name: per-key
      match: { path_prefix: /v1 }
      key: { header: { name: x-api-key } }
      mode: shadow
      on_store_error: closed
      limits:
        - { algorithm: token_bucket, requests_per_unit: 600, unit: minute, burst: 100 }
"#;
    let config = Config::parse("t.yaml", yaml).unwrap();
    let names: Vec<&str> = config.http_rules().iter().map(|r| r.name()).collect();
    assert_eq!(names, ["per-ip", "per-key"]);
    let lines = config.describe();
    assert!(
        lines[0].starts_with("http rule `per-ip`: GCRA: 50 per second per "),
        "{lines:?}"
    );
    assert!(
        lines[1].contains("token bucket: 600 per minute, bursts of 100"),
        "{lines:?}"
    );
    assert!(
        lines[1].ends_with("[shadow mode: counted, never enforced]"),
        "{lines:?}"
    );
}

#[test]
fn unknown_fields_are_errors_at_their_line_and_column() {
    let e = error("domain: a\ndescriptors:\n  - key: k\n    rate_limt:\n      unit: second\n");
    assert_eq!((e.line, e.column), (4, 5), "{e}");
    assert!(e.message.contains("rate_limt"), "{e}");
    assert!(e.to_string().starts_with("t.yaml:4:5: "), "{e}");
}

#[test]
fn wrong_types_are_errors_at_their_line() {
    let e = error("domain: a\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: many\n");
    assert_eq!(e.line, 6, "{e}");
}

#[test]
fn duplicate_descriptors_are_errors_at_the_second() {
    let e = error("domain: a\ndescriptors:\n  - key: k\n    value: v\n  - key: k\n    value: v\n");
    assert_eq!((e.line, e.column), (5, 10), "{e}");
    assert!(e.message.contains("duplicate descriptor `a.k_v`"), "{e}");
    let e = error("domains:\n  - domain: a\n  - domain: a\n");
    assert_eq!(e.line, 3, "{e}");
}

#[test]
fn impossible_quotas_are_errors_at_their_rate_limit() {
    let e = error("domain: a\ndescriptors:\n  - key: k\n    rate_limit:\n      algorithm: token_bucket\n      period: 1ns\n      requests_per_unit: 1\n      burst: 9000000000000000\n");
    assert_eq!(e.line, 5, "{e}");
    assert!(e.message.starts_with("impossible quota: burst"), "{e}");
    for (yaml, words) in [
        ("rate_limit: { requests_per_unit: 5 }", "missing `unit`"),
        (
            "rate_limit: { unit: fortnight, requests_per_unit: 5 }",
            "unknown unit `fortnight`",
        ),
        (
            "rate_limit: { unit: second, period: 2s, requests_per_unit: 5 }",
            "either `unit` or `period`",
        ),
        (
            "rate_limit: { unit: second, requests_per_unit: 5, burst: 9 }",
            "`burst` does not apply to fixed_window",
        ),
        (
            "rate_limit: { period: 0s, requests_per_unit: 5 }",
            "must be above 0",
        ),
        (
            "rate_limit: { unit: second, algorithm: magic, requests_per_unit: 5 }",
            "unknown algorithm `magic`",
        ),
        (
            "rate_limit: { unlimited: true, unit: second, requests_per_unit: 5 }",
            "takes no quota",
        ),
        (
            "rate_limit: { unit: second, requests_per_unit: 5, replaces: [{ name: nope }] }",
            "`nope`",
        ),
    ] {
        let e = error(&format!(
            "domain: a\ndescriptors:\n  - key: k\n    {yaml}\n"
        ));
        assert!(e.message.contains(words), "{yaml}: {e}");
        assert_eq!(e.line, 4, "{yaml}: {e}");
    }
}

#[test]
fn unreadable_file_names_the_file() {
    let e = Config::load(std::path::Path::new("/nonexistent/limits.yaml")).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("/nonexistent/limits.yaml: cannot read the file"),
        "{e}"
    );
}

#[test]
fn the_shipped_example_is_valid() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/limits.yaml");
    let config = Config::load(std::path::Path::new(path)).unwrap();
    assert_eq!((config.entries().len(), config.http_rules().len()), (5, 2));
}
