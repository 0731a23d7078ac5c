//! The live page (`GET /top`) through a running server: served without the
//! token but holding no data, and, in headless Chromium, showing the heavy
//! hitters `/v1/top` names with the same counts, the store's state and the
//! configuration's source; a store's password shown nowhere (on a Redis
//! with a password: TOLLGATE_SKIP_REDIS=1 skips it, saying so); the load
//! time following a reload. The browser test fails when `chromium` is
//! missing, unless `TOLLGATE_SKIP_BROWSER=1`.

mod support;

use std::path::{Path, PathBuf};

use serde_json::Value;
use support::send_with;
use tollgate_server::api::ApiToken;

const CONFIG: &str = "
domain: api
descriptors:
  - key: user
    rate_limit: { unit: minute, requests_per_unit: 500 }
  - key: tenant
    shadow_mode: true
    rate_limit: { unit: minute, requests_per_unit: 50 }
";

const AUTH: [(&str, &str); 1] = [("authorization", "Bearer s3cret")];

/// The heavy hitters and their hits per request; 300 light users a request
/// hit once each.
const HEAVY: [(&str, u64); 3] = [("heavy-a", 10), ("heavy-b", 25), ("heavy-c", 5)];
const REQUESTS: u64 = 60;
const LIGHT: u64 = 300;

fn descriptor(key: &str, value: &str, hits: u64) -> String {
    format!(r#"{{"entries":[{{"key":"{key}","value":"{value}"}}],"hits":{hits}}}"#)
}

async fn start() -> support::TestServer {
    support::start_with(CONFIG, |o| o.http_token = ApiToken::new("s3cret")).await
}

/// Many light users, a few heavy ones and one tenant over its shadow limit.
async fn send_traffic(server: &support::TestServer) {
    let check = server.http_url("/v1/check");
    for r in 0..REQUESTS {
        let mut descriptors: Vec<String> = (0..LIGHT)
            .map(|i| descriptor("user", &format!("u{}", r * LIGHT + i), 1))
            .collect();
        descriptors.extend(
            HEAVY
                .iter()
                .map(|(name, hits)| descriptor("user", name, *hits)),
        );
        descriptors.push(descriptor("tenant", "acme", 1));
        let body = format!(
            r#"{{"domain":"api","descriptors":[{}]}}"#,
            descriptors.join(",")
        );
        let (status, text, _) = send_with("POST", &check, &body, &AUTH).await;
        assert!(status == 200 || status == 429, "{status}: {text}");
    }
}

async fn top_json(server: &support::TestServer) -> Value {
    let (status, text, _) = send_with("GET", &server.http_url("/v1/top"), "", &AUTH).await;
    assert_eq!(status, 200, "{text}");
    serde_json::from_str(&text).unwrap()
}

fn minute<'a>(top: &'a Value, rule: &str) -> &'a Value {
    let rules = top["rules"].as_array().unwrap();
    let rule = rules.iter().find(|r| r["rule"] == rule).unwrap();
    &rule["windows"][0]
}

#[tokio::test]
async fn the_page_holds_no_data_and_the_json_tells_the_store_and_config() {
    let server = start().await;
    send_traffic(&server).await;
    let (status, html, headers) = send_with("GET", &server.http_url("/top"), "", &[]).await;
    assert_eq!(status, 200);
    assert_eq!(headers["content-type"], "text/html; charset=utf-8");
    let csp = headers["content-security-policy"].to_str().unwrap();
    assert!(csp.contains("default-src 'none'") && csp.contains("connect-src 'self'"));
    assert!(html.contains(r#"<meta name="viewport""#));
    assert!(html.contains(r#"content="/v1/top""#));
    // Nothing from anywhere else, and no key of the traffic.
    assert!(!html.contains("http://") && !html.contains("https://"));
    assert!(!html.contains("heavy-b"));

    let top = top_json(&server).await;
    assert_eq!(top["store"]["url"], "memory");
    assert_eq!(top["store"]["state"], "healthy");
    assert_eq!(top["store"]["fallback_in_use"], false);
    let source = server.config_path().display().to_string();
    assert_eq!(top["config"]["source"], source.as_str());
    assert_eq!(top["config"]["limits"], 2);
    let loaded = top["config"]["loaded_at_s"].as_u64().unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert!(loaded <= now && now - loaded < 60, "{loaded} vs {now}");
    server.running.shutdown().await;
}

/// Where the page's screenshot and DOM are kept.
fn output_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("top-page");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `chromium`, or `None` when the test is to be skipped; panics when it is
/// missing and not skipped.
fn chromium() -> Option<&'static str> {
    let found = std::process::Command::new("chromium")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if found {
        return Some("chromium");
    }
    if std::env::var("TOLLGATE_SKIP_BROWSER").as_deref() == Ok("1") {
        eprintln!("skipped: no chromium, and TOLLGATE_SKIP_BROWSER=1");
        return None;
    }
    panic!("the browser test needs chromium: apt-get install chromium (or set TOLLGATE_SKIP_BROWSER=1 to skip it)");
}

/// Chromium's run of `url` with `args`, headless, in a profile of its own;
/// its standard output.
async fn headless(chromium: &str, profile: &Path, args: &[String], url: &str) -> String {
    let out = tokio::process::Command::new(chromium)
        .args([
            "--headless",
            "--disable-gpu",
            "--no-sandbox",
            "--no-first-run",
            "--hide-scrollbars",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .arg(url)
        .kill_on_drop(true)
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The text of the cell of class `class` in `row`.
fn cell<'a>(row: &'a str, class: &str) -> &'a str {
    let open = format!(r#"<td class="{class}">"#);
    let start = row
        .find(&open)
        .unwrap_or_else(|| panic!("no {class} in {row}"))
        + open.len();
    &row[start..start + row[start..].find("</td>").unwrap()]
}

/// The rows of the rule `rule`'s key table in the rendered `dom`.
fn rows<'a>(dom: &'a str, rule: &str) -> Vec<&'a str> {
    let open = format!(r#"<section class="rule" data-rule="{rule}">"#);
    let start = dom
        .find(&open)
        .unwrap_or_else(|| panic!("the page shows no rule {rule}: {dom}"));
    let section = &dom[start..start + dom[start..].find("</section>").unwrap()];
    section.split("<tr").skip(2).collect()
}

#[tokio::test]
async fn chromium_shows_the_heavy_hitters_the_json_names() {
    let Some(chromium) = chromium() else { return };
    let server = start().await;
    send_traffic(&server).await;
    let top = top_json(&server).await;
    let dir = output_dir();
    let profile = tempfile::tempdir().unwrap();
    // The token in the fragment: never sent to the server.
    let url = server.http_url("/top#token=s3cret");
    // Ten seconds of the page's (virtual) time: four polls.
    let args = ["--dump-dom".into(), "--virtual-time-budget=10000".into()];
    let dom = headless(chromium, profile.path(), &args, &url).await;
    std::fs::write(dir.join("top.html"), &dom).unwrap();
    assert!(!dom.contains("s3cret"), "the token is in the page");

    let user = minute(&top, "api.user");
    let json_keys = user["keys"].as_array().unwrap();
    let shown = rows(&dom, "api.user");
    assert_eq!(shown.len(), json_keys.len(), "{dom}");
    // The heaviest first, as sent: heavy-b, heavy-a, heavy-c.
    let mut heavy = HEAVY;
    heavy.sort_by_key(|&(_, hits)| std::cmp::Reverse(hits));
    for (i, (name, hits)) in heavy.iter().enumerate() {
        let (row, json) = (shown[i], &json_keys[i]);
        let key = format!("api/user={name}");
        assert_eq!(cell(row, "key"), key);
        assert_eq!(json["key"], key.as_str());
        // What was sent, within the stated error.
        let (sent, counted) = (REQUESTS * hits, json["hits"].as_u64().unwrap());
        let error = json["error"].as_u64().unwrap();
        assert!(counted >= sent && counted - error <= sent, "{json}");
        assert!(error <= user["error_bound"].as_u64().unwrap(), "{json}");
        assert_eq!(cell(row, "hits"), counted.to_string());
        assert_eq!(cell(row, "error"), format!("±{error}"));
        assert_eq!(cell(row, "refused"), json["refused"].to_string());
    }
    // heavy-b sent 1,500 against 500 a minute: most refused.
    assert_ne!(cell(shown[0], "refused"), "0");

    let tenant = rows(&dom, "api.tenant");
    let acme = &minute(&top, "api.tenant")["keys"][0];
    assert_eq!(cell(tenant[0], "key"), "api/tenant=acme");
    assert_eq!(
        cell(tenant[0], "shadow"),
        acme["shadow_refused"].to_string()
    );
    assert_ne!(acme["shadow_refused"], 0);

    assert!(
        dom.contains(r#"<dd id="store-state" class="ok">healthy</dd>"#),
        "{dom}"
    );
    let source = server.config_path().display().to_string();
    assert!(
        dom.contains(&format!(r#"<dd id="config-source">{source}</dd>"#)),
        "{dom}"
    );
    for chart in ["admitted", "refused", "shadow_refused"] {
        let label = format!(r#"aria-label="{chart} per second""#);
        assert_eq!(dom.matches(&label).count(), 2, "a {chart} chart per rule");
    }

    // Without the token (another tab: a fresh profile), the page asks for
    // it and shows nothing.
    let fresh = tempfile::tempdir().unwrap();
    let args = ["--dump-dom".into(), "--virtual-time-budget=5000".into()];
    let bare = headless(chromium, fresh.path(), &args, &server.http_url("/top")).await;
    assert!(
        bare.contains(r#"<form id="login" class="shown">"#),
        "{bare}"
    );
    assert!(bare.contains("this server needs its API token"), "{bare}");
    assert!(!bare.contains("heavy-b"), "{bare}");

    let shot = dir.join("top.png");
    let _ = std::fs::remove_file(&shot);
    let args = [
        format!("--screenshot={}", shot.display()),
        "--window-size=1100,860".into(),
        // A minute of polls, for charts with something in them.
        "--virtual-time-budget=60000".into(),
    ];
    headless(chromium, profile.path(), &args, &url).await;
    // And as a phone shows it.
    let phone = dir.join("top-phone.png");
    let _ = std::fs::remove_file(&phone);
    let args = [
        format!("--screenshot={}", phone.display()),
        "--window-size=390,1400".into(),
        "--virtual-time-budget=10000".into(),
    ];
    headless(chromium, profile.path(), &args, &url).await;
    for shot in [&shot, &phone] {
        let png = std::fs::read(shot).unwrap();
        assert!(
            png.starts_with(b"\x89PNG"),
            "no screenshot at {}",
            shot.display()
        );
    }
    eprintln!(
        "the page: {} and {}",
        shot.display(),
        dir.join("top.html").display()
    );
    server.running.shutdown().await;
}

/// The load time `/v1/top` reports follows a reload, not the start only.
#[test]
fn a_reload_records_its_time() {
    use std::time::Duration;
    use tollgate::{FakeClock, MemoryBackend};
    use tollgate_server::config::Config;
    use tollgate_server::engine::Engine;

    let clock = FakeClock::new();
    clock.set(1_764_600_000_000_000_000);
    let config = Config::parse("limits.yaml", CONFIG).unwrap();
    let engine = Engine::new(config.clone(), MemoryBackend::new()).with_wall_clock(clock.clone());
    assert_eq!(engine.loaded_at_s(), 1_764_600_000);
    clock.advance(Duration::from_secs(90));
    assert_eq!(engine.loaded_at_s(), 1_764_600_000, "only a load moves it");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("limits.yaml");
    std::fs::write(&path, CONFIG).unwrap();
    tollgate_server::reload::reload(&engine, &path).unwrap();
    assert_eq!(engine.loaded_at_s(), 1_764_600_090);
    // A file that does not load leaves the running configuration, and its time.
    clock.advance(Duration::from_secs(10));
    std::fs::write(&path, "domain: [").unwrap();
    assert!(tollgate_server::reload::reload(&engine, &path).is_err());
    assert_eq!(engine.loaded_at_s(), 1_764_600_090);
}

/// A store's password is in neither `/v1/top` nor the page.
#[tokio::test]
async fn the_store_password_is_never_shown() {
    use tollgate_redis::harness::{skip_requested, RedisServer};
    if skip_requested() {
        eprintln!("TOLLGATE_SKIP_REDIS=1: skipped");
        return;
    }
    let redis =
        RedisServer::start_with_password("hunter2-secret").unwrap_or_else(|e| panic!("{e}"));
    let url = format!("redis://:hunter2-secret@127.0.0.1:{}", redis.port());
    let server = support::start_with(CONFIG, |o| o.store = url.clone()).await;
    let body = format!(
        r#"{{"domain":"api","descriptors":[{}]}}"#,
        descriptor("user", "ada", 1)
    );
    let (status, text, _) = send_with("POST", &server.http_url("/v1/check"), &body, &[]).await;
    assert_eq!(status, 200, "{text}");
    let (_, text, _) = send_with("GET", &server.http_url("/v1/top"), "", &[]).await;
    assert!(!text.contains("hunter2-secret"), "{text}");
    let top: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(top["store"]["url"], tollgate_redis::redact(&url));
    assert!(
        top["store"]["url"].as_str().unwrap().contains("***"),
        "{text}"
    );
    let (_, html, _) = send_with("GET", &server.http_url("/top"), "", &[]).await;
    assert!(!html.contains("hunter2-secret"));
    server.running.shutdown().await;
}
