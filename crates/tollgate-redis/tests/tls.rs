//! `rediss://`: a TLS-only `redis-server` with a self-signed certificate
//! made by the test; the backend trusts it only when told to, and a URL the
//! client cannot use is a configuration error, never a store error.

mod common;

use tollgate::{Algorithm, Backend, BackendError, BackendExt, Limit, Policy, Quota};
use tollgate_redis::harness::{skip_requested, RedisServer};
use tollgate_redis::RedisConfig;

/// A self-signed certificate for 127.0.0.1 and its key, in PEM.
fn self_signed() -> (String, String) {
    let cert = rcgen::generate_simple_self_signed(vec!["127.0.0.1".into(), "localhost".into()])
        .expect("a self-signed certificate");
    (cert.cert.pem(), cert.signing_key.serialize_pem())
}

fn config(url: &str) -> RedisConfig {
    common::config(url).connect_timeout(std::time::Duration::from_secs(5))
}

#[tokio::test]
async fn rediss_decides_through_tls_with_the_roots_it_is_given() {
    if skip_requested() {
        return;
    }
    let (cert, key) = self_signed();
    let server = RedisServer::start_tls(&cert, &key).unwrap_or_else(|e| panic!("{e}"));
    assert!(server.url().starts_with("rediss://"));
    let policy = Policy::new(Limit::new(Algorithm::Gcra, Quota::per_second(2).unwrap()));

    let redis = config(&server.url())
        .root_certificates(cert.as_bytes())
        .connect()
        .await
        .unwrap();
    assert!(
        redis
            .check("k", &redis.prepare(&policy).unwrap(), 2)
            .await
            .unwrap()
            .allowed
    );
    assert!(
        !redis
            .check("k", &redis.prepare(&policy).unwrap(), 1)
            .await
            .unwrap()
            .allowed
    );
    // The key really is in that server.
    let keys = redis.redis_keys("k", &policy).unwrap();
    assert_eq!(server.cli(&["exists", &keys[0]]).unwrap().trim(), "1");

    // Without the roots, the system's do not know this certificate.
    let untrusted = config(&server.url()).connect().await;
    assert!(
        matches!(&untrusted, Err(BackendError::Config(m)) if m.contains("certificate")),
        "{:?}",
        untrusted.err()
    );
    // Plain text to a TLS port: the server never answers a RESP greeting.
    let plain = config(&server.url().replace("rediss://", "redis://"))
        .connect_timeout(std::time::Duration::from_millis(500))
        .connect()
        .await;
    assert!(
        matches!(
            &plain,
            Err(BackendError::Timeout(_) | BackendError::Unavailable(_))
        ),
        "{:?}",
        plain.err()
    );
}

#[tokio::test]
async fn an_unusable_url_is_a_configuration_error() {
    for url in ["redis://", "redis://host:notaport", "ftp://127.0.0.1:6379"] {
        let result = config(url).connect().await;
        assert!(
            matches!(&result, Err(BackendError::Config(_))),
            "{url}: {:?}",
            result.err()
        );
    }
}
