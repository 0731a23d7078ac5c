//! `tollgate serve` as a process with envoyproxy/ratelimit's environment and
//! runtime directory (reloaded on a file change, a swapped root link and a
//! ConfigMap update, with real Redis), SIGHUP in every mode, the settings
//! and flags it refuses, and one validation for `--check`, start and reload.

mod common;

use std::os::unix::fs::symlink;
use std::path::Path;

use common::{free_port, Serving};
use tollgate_redis::harness::{skip_requested, RedisServer};

fn limits(domain: &str, per_minute: u32) -> String {
    format!("domain: {domain}\ndescriptors:\n  - key: user\n    rate_limit: {{ unit: minute, requests_per_unit: {per_minute} }}\n")
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// The limit `/json` reports for `user=probe` in `domain` (0 when none);
/// each probe is a hit of its own user.
fn limit_of(server: &Serving, domain: &str) -> u64 {
    let body = format!(
        r#"{{"domain":"{domain}","descriptors":[{{"entries":[{{"key":"user","value":"probe"}}]}}]}}"#
    );
    let (_, answer) = server.request("POST", "/json", &body);
    let v: serde_json::Value = serde_json::from_str(&answer).unwrap_or_default();
    v["statuses"][0]["currentLimit"]["requestsPerUnit"]
        .as_u64()
        .unwrap_or(0)
}

/// Replaces the link `link` by one to `target` at once, as a deployment
/// publishing a new runtime directory does.
fn swap_link(link: &Path, target: &str) {
    let name = link.file_name().unwrap().to_string_lossy();
    let tmp = link.with_file_name(format!("{name}.next"));
    symlink(target, &tmp).unwrap();
    std::fs::rename(&tmp, link).unwrap();
}

#[test]
fn upstream_environment_and_runtime_directory_start_answer_and_reload() {
    if skip_requested() {
        eprintln!("TOLLGATE_SKIP_REDIS=1: the upstream environment on Redis is skipped");
        return;
    }
    let password = "pw-files-test";
    let redis = RedisServer::start_with_password(password).unwrap_or_else(|e| panic!("{e}"));
    let root = tempfile::tempdir().unwrap();
    let v1 = root.path().join("v1/ratelimit/config");
    write(&v1.join("a.yaml"), &limits("a", 3));
    write(&v1.join("b.yaml"), &limits("b", 4));
    // A dot file upstream skips with RUNTIME_IGNOREDOTFILES=true.
    write(&v1.join(".a.yaml.swp"), &limits("a", 99));
    let current = root.path().join("current");
    symlink("v1", &current).unwrap();
    let (http, grpc) = (free_port(), free_port());
    let redis_url = format!("127.0.0.1:{}", redis.port());
    let env = [
        ("PORT", http.to_string()),
        ("HOST", "127.0.0.1".into()),
        ("GRPC_PORT", grpc.to_string()),
        ("GRPC_HOST", "127.0.0.1".into()),
        ("USE_STATSD", "false".into()),
        ("LOG_LEVEL", "info".into()),
        ("LOG_FORMAT", "json".into()),
        ("RUNTIME_ROOT", current.display().to_string()),
        ("RUNTIME_SUBDIRECTORY", "ratelimit".into()),
        ("RUNTIME_APPDIRECTORY", "config".into()),
        ("RUNTIME_IGNOREDOTFILES", "true".into()),
        ("REDIS_SOCKET_TYPE", "tcp".into()),
        ("REDIS_URL", redis_url),
        ("REDIS_AUTH", password.into()),
        (
            "CACHE_KEY_PREFIX",
            format!("files-test-{}:", std::process::id()),
        ),
    ];
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let server = Serving::start(&[], &env, http);
    let log = server.log();
    assert!(log.contains("\"limits\":2"), "{log}");
    assert!(log.contains("redis://***@127.0.0.1"), "{log}");
    assert!(!log.contains(password), "{log}");
    // The startup log names the configuration and every listener.
    assert!(log.contains("ratelimit/config"), "{log}");
    for port in [http, grpc] {
        assert!(log.contains(&format!("127.0.0.1:{port}")), "{log}");
    }
    assert_eq!((limit_of(&server, "a"), limit_of(&server, "b")), (3, 4));
    // Counted in Redis: a fourth hit of 3 is over.
    let hit = r#"{"domain":"a","descriptors":[{"entries":[{"key":"user","value":"ada"}]}]}"#;
    let codes: Vec<u16> = (0..4)
        .map(|_| server.request("POST", "/json", hit).0)
        .collect();
    assert_eq!(codes, [200, 200, 200, 429]);
    let keys = redis.cli(&["--scan", "--pattern", "files-test-*"]).unwrap();
    assert!(!keys.trim().is_empty(), "no key in Redis");

    // A file of the directory changes in place.
    write(&v1.join("b.yaml"), &limits("b", 5));
    server.wait_for("b.yaml's change", || limit_of(&server, "b") == 5);

    // The root link swapped to a new directory.
    let v2 = root.path().join("v2/ratelimit/config");
    write(&v2.join("c.yaml"), &limits("c", 6));
    swap_link(&current, "v2");
    server.wait_for("the swapped root", || limit_of(&server, "c") == 6);
    assert_eq!(limit_of(&server, "a"), 0, "v1's domains are gone");
    let (status, body) = server.request("GET", "/healthcheck", "");
    assert_eq!((status, body.as_str()), (200, "OK"));
}

#[test]
fn a_configmap_update_reloads_with_the_directory_watched() {
    let root = tempfile::tempdir().unwrap();
    let config = root.path().join("ratelimit/config");
    // Kubernetes' layout: the files are links through `..data`, a link to
    // a hidden timestamped directory swapped on each update.
    write(&config.join("..2026_01/limits.yaml"), &limits("a", 3));
    symlink("..2026_01", config.join("..data")).unwrap();
    symlink("..data/limits.yaml", config.join("limits.yaml")).unwrap();
    let (http, prometheus) = (free_port(), free_port());
    let root_text = root.path().display().to_string();
    let port = http.to_string();
    let prometheus_addr = format!("127.0.0.1:{prometheus}");
    let env = [
        ("USE_PROMETHEUS", "true"),
        ("PROMETHEUS_ADDR", prometheus_addr.as_str()),
        ("PROMETHEUS_PATH", "/prom"),
        ("PORT", port.as_str()),
        ("HOST", "127.0.0.1"),
        ("RUNTIME_ROOT", root_text.as_str()),
        ("RUNTIME_SUBDIRECTORY", "ratelimit"),
        ("RUNTIME_IGNOREDOTFILES", "true"),
        ("RUNTIME_WATCH_ROOT", "false"),
        ("USE_STATSD", "false"),
    ];
    let server = Serving::start(&["--no-grpc", "--store", "memory"], &env, http);
    assert_eq!(limit_of(&server, "a"), 3);
    write(&config.join("..2026_02/limits.yaml"), &limits("a", 8));
    swap_link(&config.join("..data"), "..2026_02");
    server.wait_for("the ConfigMap update", || limit_of(&server, "a") == 8);
    // Upstream's Prometheus listener, where its scrape looks.
    let (status, metrics) = Serving::request_to(prometheus, "GET", "/prom", "").unwrap();
    assert_eq!(status, 200);
    assert!(
        metrics.contains(r#"ratelimit_service_rate_limit_total_hits{domain="a",key1="user"}"#),
        "{metrics}"
    );
}

#[test]
fn sighup_reloads_or_is_a_logged_no_op_and_never_ends_the_process() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("limits.yaml");
    write(&file, &limits("a", 3));
    let http = free_port();
    let listen = format!("127.0.0.1:{http}");
    let file_arg = file.display().to_string();
    let args = [
        "--config",
        &file_arg,
        "--no-watch",
        "--no-grpc",
        "--http-listen",
        &listen,
    ];
    let server = Serving::start(&args, &[], http);
    write(&file, &limits("a", 7));
    server.signal("HUP");
    server.wait_for("the reload on SIGHUP", || limit_of(&server, "a") == 7);
    assert!(server.child.id() > 0);
    drop(server);

    let http = free_port();
    let listen = format!("127.0.0.1:{http}");
    let mut server = Serving::start(&["--no-grpc", "--http-listen", &listen], &[], http);
    for _ in 0..3 {
        server.signal("HUP");
    }
    server.wait_for("the SIGHUP log line", || {
        server.log().contains("SIGHUP: no configuration to reload")
    });
    assert!(
        server.child.try_wait().unwrap().is_none(),
        "{}",
        server.log()
    );
    assert_eq!(server.request("GET", "/healthcheck", "").0, 200);
}

#[test]
fn what_check_accepts_serves_and_a_bad_reload_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("limits.yaml");
    let rule = |name: &str| {
        format!("http:\n  rules:\n    - name: {name}\n      limit: {{ unit: minute, requests_per_unit: 2 }}\n")
    };
    write(&file, &rule("api"));
    let bad = dir.path().join("bad.yaml");
    write(&bad, &rule("\"caf\u{e9}\""));
    let checked = common::run(&["serve", "--check", &bad.display().to_string()], "");
    assert!(!checked.status.success());
    let said = String::from_utf8_lossy(&checked.stderr);
    assert!(said.contains("bad.yaml:3:7: HTTP rule name"), "{said}");

    let (http, proxy, demo) = (free_port(), free_port(), free_port());
    let (http_a, proxy_a, demo_a) = (
        format!("127.0.0.1:{http}"),
        format!("127.0.0.1:{proxy}"),
        format!("127.0.0.1:{demo}"),
    );
    let upstream = format!("http://{demo_a}");
    let file_arg = file.display().to_string();
    let args = [
        "--config",
        &file_arg,
        "--no-grpc",
        "--http-listen",
        &http_a,
        "--proxy-listen",
        &proxy_a,
        "--upstream",
        &upstream,
        "--demo-upstream",
        &demo_a,
    ];
    let server = Serving::start(&args, &[], http);
    // The bad name written over the running file: refused, logged, and the
    // proxy keeps deciding by the running rule (no 500).
    std::fs::copy(&bad, &file).unwrap();
    server.wait_for("the refused reload", || {
        server.log().contains("configuration not reloaded")
    });
    let codes: Vec<u16> = (0..3)
        .map(|_| Serving::request_to(proxy, "GET", "/x", "").unwrap().0)
        .collect();
    assert_eq!(codes, [200, 200, 429], "{}", server.log());
}

#[test]
fn settings_and_flags_it_cannot_honour_are_refused_by_name() {
    let refused = |args: &[&str], env: &[(&str, &str)]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_tollgate"))
            .arg("serve")
            .args(args)
            .env_clear()
            .envs(env.iter().copied())
            .output()
            .unwrap();
        assert!(!out.status.success(), "{args:?} {env:?} started");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let said = refused(
        &[],
        &[
            ("REDIS_TYPE", "sentinel"),
            ("REDIS_SOCKET_TYPE", "tcp"),
            ("REDIS_AUTH", "hunter2"),
            ("USE_STATSD", "true"),
        ],
    );
    assert!(
        said.contains("REDIS_TYPE=sentinel") && said.contains("USE_STATSD=true"),
        "{said}"
    );
    assert!(!said.contains("hunter2"), "{said}");
    let said = refused(
        &[
            "--no-grpc",
            "--http-listen",
            "127.0.0.1:0",
            "--max-connections",
            "0",
        ],
        &[],
    );
    assert!(
        said.contains("--max-connections must be at least 1"),
        "{said}"
    );
    let said = refused(
        &[
            "--no-grpc",
            "--http-listen",
            "127.0.0.1:0",
            "--upstream",
            "http://127.0.0.1:9/api",
        ],
        &[],
    );
    assert!(said.contains("a path is not supported"), "{said}");
}

#[test]
fn an_upstream_without_rules_is_warned_about() {
    let (http, proxy) = (free_port(), free_port());
    let (http_a, proxy_a) = (format!("127.0.0.1:{http}"), format!("127.0.0.1:{proxy}"));
    let args = [
        "--no-grpc",
        "--http-listen",
        &http_a,
        "--proxy-listen",
        &proxy_a,
        "--upstream",
        "http://127.0.0.1:9",
    ];
    let server = Serving::start(&args, &[], http);
    assert!(
        server.log().contains("--upstream without any HTTP rule"),
        "{}",
        server.log()
    );
}
