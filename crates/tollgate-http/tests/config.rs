//! The rule parts read from YAML under the names the server's config will
//! use. Enums are externally tagged, so YAML writes them as single-key maps
//! (`key: {all: [...]}`), read with `singleton_map_recursive`.

use tollgate_http::{ClientIp, Cost, Key, Matcher, MissingKey, Mode, OnStoreError, Reconcile};

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleParts {
    matcher: Matcher,
    key: Key,
    cost: Cost,
    reconcile: Option<Reconcile>,
    mode: Mode,
    on_store_error: OnStoreError,
    on_missing_key: MissingKey,
}

#[test]
fn rule_parts_from_yaml() {
    let yaml = r#"
matcher: { methods: [POST], route: "/v1/chat/{model}", host: "*.example.com" }
key:
  all:
    - label: tenant
    - first_of:
        - header: { name: x-api-key }
        - ip: { v6: 56 }
cost: { header: x-max-tokens }
reconcile: { header: x-used-tokens }
mode: shadow
on_store_error: closed
on_missing_key: skip
"#;
    let parts: RuleParts = yaml_value(yaml);
    assert_eq!(parts.matcher.methods, ["POST"]);
    assert!(matches!(parts.key, Key::All(ref p) if p.len() == 2));
    assert!(matches!(parts.cost, Cost::Header(ref h) if h == "x-max-tokens"));
    assert!(matches!(parts.reconcile, Some(Reconcile::Header(_))));
    assert_eq!(parts.mode, Mode::Shadow);
    assert!(matches!(parts.on_store_error, OnStoreError::Closed));
    assert_eq!(parts.on_missing_key, MissingKey::Skip);

    let ip: ClientIp =
        yaml_value("trusted_proxies: [10.0.0.0/8, \"fd00::/8\"]\nheader: forwarded\n");
    assert_eq!(ip.trusted_proxies.len(), 2);
    // Typos are errors, not silently ignored settings.
    let typo = serde_yaml_ng::with::singleton_map_recursive::deserialize::<Matcher, _>(
        serde_yaml_ng::Deserializer::from_str("path: /v1"),
    );
    assert!(typo.is_err());
}

fn yaml_value<T: serde::de::DeserializeOwned>(yaml: &str) -> T {
    serde_yaml_ng::with::singleton_map_recursive::deserialize(
        serde_yaml_ng::Deserializer::from_str(yaml),
    )
    .unwrap()
}
