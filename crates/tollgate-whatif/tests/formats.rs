//! Every input format, malformed lines, gzip, IPv6 clients and forged
//! X-Forwarded-For, through the whole engine.

mod common;

use std::io::Write;

use common::{keys, line, one, options, run};
use tollgate_http::{Key, Routes};
use tollgate_whatif::engine::{self, RunError};
use tollgate_whatif::keys::parse_key;
use tollgate_whatif::policy::Candidates;

#[test]
fn combined_with_malformed_lines_counted_and_escaped() {
    let mut log = String::new();
    for s in 0..5 {
        log.push_str(&line("192.0.2.1", s, "/a", "-"));
    }
    log.push_str("\x1b]0;pwned\x07 not a log line\n");
    log.push_str("192.0.2.1 - - [02/Nov/2026:08:00:09 +0000] \"GET /a\n");
    let o = run(
        log.as_bytes(),
        &one(60, 2, Key::ip()),
        &options("combined", &[]),
    );
    assert_eq!(o.lines, 7);
    assert_eq!(o.malformed.count, 2);
    assert_eq!(o.malformed.samples[0].line, 6);
    let sample = &o.malformed.samples[0].text;
    assert!(
        !sample.contains('\x1b') && sample.contains(r"\x1b"),
        "{sample}"
    );
    // One a second, burst 2, five at one a second: the bucket never empties.
    assert_eq!(keys(&o), [("ip=192.0.2.1".to_string(), 5, 0)]);

    let strict = tollgate_whatif::engine::Options {
        strict: true,
        ..options("combined", &[])
    };
    let err = engine::run(log.as_bytes(), &one(60, 2, Key::ip()), &strict, &mut || {}).unwrap_err();
    assert!(matches!(err, RunError::Strict { line: 6, .. }), "{err}");
    assert!(!err.to_string().contains('\x1b'));
}

#[test]
fn gzip_gives_the_same_outcome_as_plain() {
    let mut plain = Vec::new();
    tollgate_whatif::sample::generate(5, 3_000, &mut plain).unwrap();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&plain).unwrap();
    let gz = gz.finish().unwrap();
    let c = one(30, 5, Key::ip());
    let o = options("combined-xff", &["10.0.0.0/8"]);
    let read = std::sync::Arc::default();
    let unzipped = tollgate_whatif::input::open(std::io::Cursor::new(gz), read).unwrap();
    let from_gz = engine::run(unzipped, &c, &o, &mut || {}).unwrap();
    assert_eq!(from_gz, run(&plain, &c, &o));
    assert!(from_gz.lanes[0].requests > 2_900);
}

#[test]
fn ipv6_clients_share_their_slash_64() {
    let log = [
        line("2001:db8:1:2::1", 0, "/", "-"),
        line("2001:db8:1:2:ffff::9", 0, "/", "-"),
        line("2001:db8:1:3::1", 0, "/", "-"),
        line("[2001:db8:1:2::7]:443", 0, "/", "-"),
    ]
    .concat();
    let o = run(
        log.as_bytes(),
        &one(60, 1, Key::ip()),
        &options("combined", &[]),
    );
    assert_eq!(
        keys(&o),
        [
            ("ip=2001:db8:1:2::/64".to_string(), 3, 2),
            ("ip=2001:db8:1:3::/64".to_string(), 1, 0)
        ]
    );
    let exact = run(
        log.as_bytes(),
        &one(60, 1, parse_key("ip/128").unwrap()),
        &options("combined", &[]),
    );
    assert_eq!(exact.lanes[0].keys.len(), 4);
}

#[test]
fn forged_forwarded_for_is_ignored() {
    let log = [
        // Through our proxy: the client is the hop it appended.
        line("10.0.0.2", 0, "/", "198.51.100.7"),
        // A forged hop in front changes nothing.
        line("10.0.0.2", 1, "/", "6.6.6.6, 198.51.100.7"),
        // Straight from the internet: its header is not believed.
        line("203.0.113.9", 2, "/", "198.51.100.7"),
    ]
    .concat();
    let o = run(
        log.as_bytes(),
        &one(60, 5, Key::ip()),
        &options("combined-xff", &["10.0.0.0/8"]),
    );
    assert_eq!(
        keys(&o),
        [
            ("ip=198.51.100.7".to_string(), 2, 0),
            ("ip=203.0.113.9".to_string(), 1, 0)
        ]
    );
    // Without trusted proxies every peer is the client.
    let o = run(
        log.as_bytes(),
        &one(60, 5, Key::ip()),
        &options("combined-xff", &[]),
    );
    assert_eq!(keys(&o)[0], ("ip=10.0.0.2".to_string(), 2, 0));
}

#[test]
fn custom_log_format_with_an_api_key_and_routes() {
    let format =
        r#"$remote_addr [$time_iso8601] "$request" $status key=$http_x_api_key user=$remote_user"#;
    let log = "\
192.0.2.1 [2026-11-02T08:00:00Z] \"GET /v1/users/ada/repos HTTP/1.1\" 200 key=sk-1 user=ada
192.0.2.2 [2026-11-02T08:00:00Z] \"GET /v1/users/bob/repos HTTP/1.1\" 200 key=sk-1 user=bob
192.0.2.3 [2026-11-02T08:00:01Z] \"GET /v1/orders/12 HTTP/1.1\" 200 key=- user=-
";
    let mut o = options(format, &[]);
    o.routes = Routes::new(["/v1/users/{name}/repos"]).unwrap();
    let c = one(
        60,
        1,
        parse_key("header:x-api-key|field:remote_user|ip").unwrap(),
    );
    let out = run(log.as_bytes(), &c, &o);
    let k = keys(&out);
    assert_eq!(k.len(), 2);
    assert!(k[0].0.starts_with("header.x-api-key="), "{k:?}");
    assert!(!k[0].0.contains("sk-1"), "header keys are digests");
    assert_eq!((k[0].1, k[0].2), (2, 1));
    assert_eq!(k[1].0, "ip=192.0.2.3");
    let routes: Vec<&str> = out.routes.iter().map(|(r, _)| r.as_str()).collect();
    assert_eq!(routes, ["/v1/orders/{id}", "/v1/users/{name}/repos"]);
    let by_route = run(
        log.as_bytes(),
        &one(60, 1, Key::all([Key::Route, Key::constant("x")])),
        &o,
    );
    assert_eq!(
        keys(&by_route)[1],
        ("route=/v1/users/{name}/repos&const=x".to_string(), 2, 1)
    );
}

#[test]
fn envoy_json_logs() {
    let log = r#"{"start_time":"2026-11-02T08:00:00.000Z","method":"GET","path":"/a","downstream_remote_address":"10.0.0.1:5000","x_forwarded_for":"6.6.6.6, 192.0.2.5"}
{"start_time":"2026-11-02T08:00:00.100Z","method":"GET","path":"/a","downstream_remote_address":"10.0.0.1:5000","x_forwarded_for":"192.0.2.5"}
not json
{"method":"GET"}
"#;
    let o = run(
        log.as_bytes(),
        &one(60, 1, Key::ip()),
        &options("envoy-json", &["10.0.0.0/8"]),
    );
    assert_eq!(o.malformed.count, 2);
    assert_eq!(keys(&o), [("ip=192.0.2.5".to_string(), 2, 1)]);
}

#[test]
fn csv_traces_keep_their_keys_and_costs() {
    let log = "t_ns,key,cost\n0,a,1\n0,a,1\n5,b,3\nbad\n";
    let o = run(log.as_bytes(), &one(60, 2, Key::ip()), &options("csv", &[]));
    assert_eq!(
        keys(&o),
        [("a".to_string(), 1 + 1, 0), ("b".to_string(), 1, 1)]
    );
    assert_eq!(o.malformed.count, 1);
    let err = engine::run(
        &b"x,y\n"[..],
        &one(60, 2, Key::ip()),
        &options("csv", &[]),
        &mut || {},
    )
    .unwrap_err();
    assert!(matches!(err, RunError::TraceHeader));
}

#[test]
fn rules_from_the_server_configuration() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("limits.yaml");
    std::fs::write(
        &path,
        "
domain: api
descriptors:
  - key: remote_address
    rate_limit: { unit: minute, requests_per_unit: 1 }
http:
  rules:
    - name: orders
      match: { path_prefix: /orders }
      key: { ip: {} }
      limit: { algorithm: gcra, unit: minute, requests_per_unit: 60, burst: 1 }
",
    )
    .unwrap();
    let c = Candidates::load(&path, &Key::ip()).unwrap();
    let log = [
        line("192.0.2.1", 0, "/orders/1", "-"),
        line("192.0.2.1", 0, "/orders/2", "-"),
        line("192.0.2.1", 0, "/", "-"),
    ]
    .concat();
    let o = run(log.as_bytes(), &c, &options("combined", &[]));
    // The rule sees only /orders: two requests, one refused; the descriptor
    // limit sees all three, one a minute.
    assert_eq!(o.lanes[0].requests, 2);
    assert_eq!(o.refused, [1, 2]);
    assert!(Candidates::load(&dir.path().join("missing.yaml"), &Key::ip()).is_err());
}

#[test]
fn an_over_long_line_is_shown_by_its_beginning() {
    let mut log = b"GET ".to_vec();
    log.extend(std::iter::repeat_n(
        b'a',
        tollgate_whatif::input::MAX_LINE_BYTES + 10,
    ));
    log.push(b'\n');
    let o = run(&log, &one(60, 1, Key::ip()), &options("combined", &[]));
    assert_eq!(o.malformed.count, 1);
    let sample = &o.malformed.samples[0];
    assert!(sample.reason.contains("longer than"), "{}", sample.reason);
    assert!(sample.text.starts_with("GET aaaa"), "{:?}", sample.text);
}
