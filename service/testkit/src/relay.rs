//! [`Relay`]: a TCP relay in front of the fake GitHub that can be cut and restored, so a test
//! sees what a network outage looks like to a client (connection refused, connections
//! dropped) while the fake's world stays as it was.

use std::net::SocketAddr;
use std::sync::Mutex;

use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};

/// A relay on 127.0.0.1 forwarding every connection to `upstream`.
pub struct Relay {
    addr: SocketAddr,
    upstream: SocketAddr,
    task: Mutex<Option<JoinHandle<()>>>,
}

impl Relay {
    /// Binds a free port and starts forwarding.
    pub async fn start(upstream: SocketAddr) -> std::io::Result<Relay> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let relay = Relay {
            addr,
            upstream,
            task: Mutex::new(None),
        };
        relay.serve(listener);
        Ok(relay)
    }

    /// `http://127.0.0.1:PORT` of the relay: use it as the API and web base.
    pub fn origin(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The network goes away: the port is closed (new connections are refused) and every
    /// connection through the relay is dropped.
    pub fn cut(&self) {
        if let Some(task) = self.slot().take() {
            // Aborting the accept loop drops the listener and its JoinSet of connections.
            task.abort();
        }
    }

    /// The network comes back on the same port.
    pub async fn restore(&self) -> std::io::Result<()> {
        self.cut();
        let listener = TcpListener::bind(self.addr).await?;
        self.serve(listener);
        Ok(())
    }

    fn slot(&self) -> std::sync::MutexGuard<'_, Option<JoinHandle<()>>> {
        self.task.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn serve(&self, listener: TcpListener) {
        let upstream = self.upstream;
        let task = tokio::spawn(async move {
            let mut connections = JoinSet::new();
            loop {
                let Ok((mut inbound, _)) = listener.accept().await else {
                    // Out of descriptors or similar: do not spin.
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                    continue;
                };
                connections.spawn(async move {
                    if let Ok(mut outbound) = TcpStream::connect(upstream).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
                // Reap finished connections so the set does not grow.
                while connections.try_join_next().is_some() {}
            }
        });
        *self.slot() = Some(task);
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.cut();
    }
}
