//! The client layer's `many_tasks` example run against `tollgate serve` as
//! a process (a reverse proxy in front of its demo upstream, the rules of
//! examples/client.yaml): 1, 4 and 16 tasks through one client that
//! believes it may send twice the server's 20 a second, on a token bucket
//! with bursts of 5 and of 20 and on a fixed window.

#[path = "../../tollgate-http/examples/many_tasks/run.rs"]
mod run;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const CONFIG: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/client.yaml");
/// Requests per run: about 3 s at the server's rate.
const REQUESTS: u64 = 60;
const RATE: u64 = 20;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `tollgate serve`, killed when dropped (a failing test too), with its log
/// kept for the failure message.
struct Serve {
    child: Child,
    log: tempfile::NamedTempFile,
    proxy: u16,
}

impl Serve {
    fn start() -> Serve {
        let (api, proxy, upstream) = (free_port(), free_port(), free_port());
        let log = tempfile::NamedTempFile::new().unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_tollgate"))
            .args(["serve", "--config", CONFIG, "--no-grpc", "--no-watch"])
            .args(["--http-listen", &format!("127.0.0.1:{api}")])
            .args(["--proxy-listen", &format!("127.0.0.1:{proxy}")])
            .args(["--upstream", &format!("http://127.0.0.1:{upstream}")])
            .args(["--demo-upstream", &format!("127.0.0.1:{upstream}")])
            .stdin(Stdio::null())
            .stderr(log.reopen().unwrap())
            .spawn()
            .unwrap();
        let mut serve = Serve { child, log, proxy };
        let deadline = Instant::now() + Duration::from_secs(30);
        while !answers(proxy) {
            if let Some(status) = serve.child.try_wait().unwrap() {
                panic!("tollgate serve exited ({status}):\n{}", serve.log());
            }
            assert!(Instant::now() < deadline, "no answer:\n{}", serve.log());
            std::thread::sleep(Duration::from_millis(50));
        }
        serve
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.log.path()).unwrap_or_default()
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether the proxy forwards a request to the demo upstream (a path no
/// rule matches, so no budget is spent).
fn answers(port: u16) -> bool {
    let Ok(mut conn) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = conn.set_read_timeout(Some(Duration::from_secs(5)));
    let request = b"GET /ready HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";
    if conn.write_all(request).is_err() {
        return false;
    }
    let mut answer = String::new();
    let _ = conn.read_to_string(&mut answer);
    answer.starts_with("HTTP/1.1 200")
}

/// Runs 1, 4 and 16 tasks at once against the rule under `path`, each run
/// on its own key, and checks each: everything done, at most 2 refusals,
/// at least 0.85 of the rate.
fn three_runs(path: &str) {
    let serve = Serve::start();
    let url = format!("http://127.0.0.1:{}/{path}", serve.proxy);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let figures = runtime.block_on(async {
        let runs = [1, 4, 16].map(|tasks| {
            let url = url.clone();
            tokio::spawn(async move {
                let key = format!("tasks-{tasks}");
                (tasks, run::run(&url, &key, tasks, REQUESTS, 2 * RATE).await)
            })
        });
        let mut figures = Vec::new();
        for run in runs {
            figures.push(run.await.unwrap());
        }
        figures
    });
    for (tasks, figures) in figures {
        eprintln!("{path}, {tasks} tasks: {figures}");
        let log = serve.log();
        assert_eq!(figures.failed, 0, "{tasks} tasks: {figures}\n{log}");
        assert!(figures.refusals <= 2, "{tasks} tasks: {figures}");
        assert!(
            figures.goodput() >= 0.85 * RATE as f64,
            "{tasks} tasks: {figures}"
        );
    }
}

#[test]
fn token_bucket_with_bursts_of_5() {
    three_runs("burst5");
}

#[test]
fn token_bucket_with_bursts_of_20() {
    three_runs("burst20");
}

#[test]
fn fixed_window() {
    three_runs("window");
}
