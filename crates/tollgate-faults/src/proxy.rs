//! [`Proxy`]: a TCP proxy that injects latency or silence.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// What the proxy does to the traffic it forwards.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Forwards everything at once.
    None,
    /// Holds every chunk this long before forwarding it, both ways.
    Delay(Duration),
    /// Accepts connections and reads everything, forwards nothing: a store
    /// that never answers. A connection that lost bytes this way is closed
    /// once the fault is lifted (as TCP would after a partition), since
    /// its request/reply stream is out of step for good.
    BlackHole,
}

/// A proxy from a free port on 127.0.0.1 to `upstream`; stops when dropped.
pub struct Proxy {
    addr: SocketAddr,
    fault: watch::Sender<Fault>,
    task: JoinHandle<()>,
}

impl Proxy {
    /// Listens on a free local port and forwards to `upstream`, with no
    /// fault. Needs a running tokio runtime.
    pub async fn start(upstream: SocketAddr) -> std::io::Result<Proxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (fault, watching) = watch::channel(Fault::None);
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let fault = watching.clone();
                tokio::spawn(async move {
                    // A refused upstream closes the client: a dead store.
                    if let Ok(server) = TcpStream::connect(upstream).await {
                        relay(client, server, fault).await;
                    }
                });
            }
        });
        Ok(Proxy { addr, fault, task })
    }

    /// Changes the fault, for connections open and to come.
    pub fn set(&self, fault: Fault) {
        self.fault.send_replace(fault);
    }

    /// The proxy's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `redis://` URL of the proxy.
    pub fn url(&self) -> String {
        format!("redis://{}", self.addr)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn relay(client: TcpStream, server: TcpStream, fault: watch::Receiver<Fault>) {
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    let up = pump(client_read, server_write, fault.clone());
    let down = pump(server_read, client_write, fault);
    // Either side closing ends the connection.
    tokio::select! {
        _ = up => {}
        _ = down => {}
    }
}

async fn pump(
    mut from: impl AsyncReadExt + Unpin,
    mut to: impl AsyncWriteExt + Unpin,
    fault: watch::Receiver<Fault>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    let mut lost_bytes = false;
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        let now = *fault.borrow();
        match now {
            Fault::BlackHole => {
                lost_bytes = true;
                continue;
            }
            _ if lost_bytes => return,
            Fault::None => {}
            Fault::Delay(d) => tokio::time::sleep(d).await,
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
