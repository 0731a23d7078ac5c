//! A real server on 127.0.0.1 with a configuration written to a temp file.

#![allow(dead_code)]

use std::io::Write;
use std::path::PathBuf;

use tollgate_server::listener::ListenerLimits;
use tollgate_server::server::{self, Running, ServeOptions};

pub struct TestServer {
    pub running: Running,
    pub dir: tempfile::TempDir,
}

impl TestServer {
    pub fn config_path(&self) -> PathBuf {
        self.dir.path().join("limits.yaml")
    }

    pub fn http_url(&self, path: &str) -> String {
        format!("http://{}{path}", self.running.http.unwrap())
    }

    pub fn grpc_url(&self) -> String {
        format!("http://{}", self.running.grpc.unwrap())
    }
}

pub fn options(path: PathBuf, store: &str) -> ServeOptions {
    ServeOptions {
        config: Some(path),
        directory: Default::default(),
        watch: false,
        store: store.to_string(),
        prefix: format!("tollgate-test:{}:", std::process::id()),
        // Generous: a loaded CI machine must not turn a slow store answer
        // into a store error the tests do not expect.
        store_timeout: std::time::Duration::from_secs(5),
        memory: tollgate_server::store::MemorySettings::default(),
        top: tollgate_server::top_shape::TopSettings::default(),
        http_token: None,
        grpc: Some("127.0.0.1:0".parse().unwrap()),
        http: Some("127.0.0.1:0".parse().unwrap()),
        limits: ListenerLimits::default(),
        health: Default::default(),
        metrics: None,
        proxy: None,
        workers: 1,
        answers: Default::default(),
    }
}

pub async fn start_with(yaml: &str, tweak: impl FnOnce(&mut ServeOptions)) -> TestServer {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("limits.yaml");
    std::fs::File::create(&path)
        .unwrap()
        .write_all(yaml.as_bytes())
        .unwrap();
    let mut opts = options(path, "memory");
    tweak(&mut opts);
    let running = server::start(opts).await.unwrap();
    TestServer { running, dir }
}

pub async fn start(yaml: &str) -> TestServer {
    start_with(yaml, |_| {}).await
}

/// One request over a fresh connection: status and body as text.
pub async fn send(method: &str, url: &str, body: &str) -> (u16, String, http::HeaderMap) {
    send_with(method, url, body, &[]).await
}

/// As [`send`], with extra request header fields.
pub async fn send_with(
    method: &str,
    url: &str,
    body: &str,
    extra: &[(&str, &str)],
) -> (u16, String, http::HeaderMap) {
    use http_body_util::{BodyExt, Full};
    let uri: http::Uri = url.parse().unwrap();
    let stream = tokio::net::TcpStream::connect(uri.authority().unwrap().as_str())
        .await
        .unwrap();
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(conn);
    let mut req = http::Request::builder();
    for (k, v) in extra {
        req = req.header(*k, *v);
    }
    let req = req
        .method(method)
        .uri(uri.path_and_query().unwrap().as_str())
        .header("host", uri.authority().unwrap().as_str())
        .header("content-type", "application/json")
        .body(Full::new(bytes::Bytes::from(body.to_string())))
        .unwrap();
    let res = sender.send_request(req).await.unwrap();
    let status = res.status().as_u16();
    let headers = res.headers().clone();
    let bytes = res.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        String::from_utf8_lossy(&bytes).into_owned(),
        headers,
    )
}

pub async fn get(url: &str) -> (u16, String) {
    let (status, body, _) = send("GET", url, "").await;
    (status, body)
}

/// The process's metrics, rendered (the recorder is per process).
pub fn get_metrics_text() -> (u16, String) {
    (200, tollgate_server::metrics::render())
}

/// A slow client: sends one byte of body on `stream` every `every` until
/// the server answers (returned as text) or 100 bytes have gone.
pub async fn trickle(mut stream: tokio::net::TcpStream, every: std::time::Duration) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut answer = Vec::new();
    for _ in 0..100 {
        tokio::time::sleep(every).await;
        // Read first: an answer already here is not lost to the reset
        // that writing to a closed socket brings.
        let mut buf = [0u8; 256];
        let short = std::time::Duration::from_millis(1);
        if let Ok(Ok(n)) = tokio::time::timeout(short, stream.read(&mut buf)).await {
            answer.extend_from_slice(&buf[..n]);
            break;
        }
        if stream.write_all(b" ").await.is_err() {
            let wait = std::time::Duration::from_secs(1);
            let _ = tokio::time::timeout(wait, stream.read_to_end(&mut answer)).await;
            break;
        }
    }
    String::from_utf8_lossy(&answer).into_owned()
}
