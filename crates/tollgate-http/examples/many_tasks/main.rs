//! Calling a rate-limited endpoint from many tasks at once through the
//! client layer: the tasks share one `Outbound`, which learns the server's
//! rate from its answers and releases their requests one interval apart.
//!
//! ```sh
//! cargo run -p tollgate-http --example many_tasks -- URL [TASKS] [REQUESTS] [RATE] [API_KEY]
//! ```
//!
//! `RATE` is what the client believes it may send a second (default 40);
//! the README shows it against `tollgate serve` limiting 20 a second.

mod run;

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(url) = args.first() else {
        eprintln!("usage: many_tasks URL [TASKS=16] [REQUESTS=200] [RATE=40] [API_KEY=demo]");
        std::process::exit(2);
    };
    let number = |i: usize, default: u64| match args.get(i) {
        None => default,
        Some(text) => text.parse().unwrap_or_else(|_| {
            eprintln!("argument {i}: `{text}` is not a whole number");
            std::process::exit(2)
        }),
    };
    let (tasks, requests, rate) = (number(1, 16).max(1), number(2, 200), number(3, 40).max(1));
    let api_key = args.get(4).map_or("demo", String::as_str);
    let figures = run::run(url, api_key, tasks, requests, rate).await;
    println!("{tasks} tasks, client rate {rate}/s: {figures}");
}
