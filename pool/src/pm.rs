//! The pool manager's IO driver (tokio): a TCP listener, one reader and one writer task per
//! connection, and one actor task that owns the sans-IO [`Manager`] and turns its outputs
//! into frames. A connection that sends a malformed frame is logged and closed; everyone
//! else carries on.

use std::collections::HashMap;
use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};

use crate::manager::{ConnId, Manager};
use crate::proto::{self, FromPm, ToPm};

enum Event {
    Connected(ConnId, mpsc::UnboundedSender<Option<Vec<u8>>>),
    Messages(ConnId, Vec<ToPm>),
    Gone(ConnId),
}

/// A running pool manager; stops when dropped (or with [`PoolManager::stop`]).
pub struct PoolManager {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl PoolManager {
    /// Starts a pool manager for `workflow` with `secret` on `listen` (port 0 picks one),
    /// on its own runtime thread.
    ///
    /// # Errors
    /// The OS error if the address cannot be bound or the runtime cannot start.
    pub fn start(
        workflow: &str,
        secret: &[u8],
        listen: SocketAddr,
    ) -> std::io::Result<PoolManager> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?;
        let listener = rt.block_on(TcpListener::bind(listen))?;
        let addr = listener.local_addr()?;
        let (stop_tx, stop_rx) = oneshot::channel();
        let manager = Manager::new(workflow, secret);
        let thread = std::thread::Builder::new()
            .name("pool-manager".into())
            .spawn(move || rt.block_on(serve(listener, manager, stop_rx)))?;
        Ok(PoolManager {
            addr,
            stop: Some(stop_tx),
            thread: Some(thread),
        })
    }

    /// The address applications connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops serving and waits for the runtime to end.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for PoolManager {
    fn drop(&mut self) {
        self.shutdown();
    }
}

async fn serve(listener: TcpListener, mut manager: Manager, mut stop: oneshot::Receiver<()>) {
    let (tx, mut rx) = mpsc::unbounded_channel::<Event>();
    let mut writers: HashMap<ConnId, mpsc::UnboundedSender<Option<Vec<u8>>>> = HashMap::new();
    let mut next: ConnId = 1;
    loop {
        tokio::select! {
            _ = &mut stop => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let conn = next;
                    next += 1;
                    tracing::debug!("connection {conn} from {peer}");
                    spawn_connection(conn, stream, tx.clone());
                }
                Err(e) => tracing::warn!("accept: {e}"),
            },
            Some(ev) = rx.recv() => {
                match ev {
                    Event::Connected(conn, w) => {
                        writers.insert(conn, w);
                        let mut nonce = [0u8; 32];
                        if getrandom::fill(&mut nonce).is_err() {
                            tracing::error!("no randomness for a JOIN challenge; closing {conn}");
                            writers.remove(&conn);
                            continue;
                        }
                        manager.connected(conn, nonce);
                    }
                    Event::Messages(conn, msgs) => {
                        for m in msgs {
                            manager.handle(conn, m);
                        }
                    }
                    Event::Gone(conn) => {
                        writers.remove(&conn);
                        manager.disconnected(conn);
                    }
                }
                flush(&mut manager, &mut writers);
            }
        }
    }
}

/// Sends the manager's output, one frame per connection per round.
fn flush(
    manager: &mut Manager,
    writers: &mut HashMap<ConnId, mpsc::UnboundedSender<Option<Vec<u8>>>>,
) {
    let mut batches: HashMap<ConnId, Vec<FromPm>> = HashMap::new();
    while let Some((conn, msg)) = manager.poll_output() {
        batches.entry(conn).or_default().push(msg);
    }
    for (conn, batch) in batches {
        match (proto::encode(&batch), writers.get(&conn)) {
            (Ok(frame), Some(w)) => {
                let _ = w.send(Some(frame));
            }
            (Err(e), _) => tracing::error!("encoding a reply to {conn}: {e}"),
            (_, None) => {}
        }
    }
    for conn in manager.take_closing() {
        if let Some(w) = writers.remove(&conn) {
            let _ = w.send(None);
        }
    }
}

fn spawn_connection(conn: ConnId, stream: TcpStream, events: mpsc::UnboundedSender<Event>) {
    let _ = stream.set_nodelay(true);
    let (mut read, mut write) = stream.into_split();
    let (wtx, mut wrx) = mpsc::unbounded_channel::<Option<Vec<u8>>>();
    let _ = events.send(Event::Connected(conn, wtx));
    tokio::spawn(async move {
        while let Some(Some(frame)) = wrx.recv().await {
            if write.write_all(&frame).await.is_err() {
                break;
            }
        }
        let _ = write.shutdown().await;
    });
    tokio::spawn(async move {
        let mut buf = Vec::with_capacity(64 * 1024);
        let mut chunk = vec![0u8; 64 * 1024];
        loop {
            match read.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
            match proto::drain_frames::<ToPm>(&mut buf) {
                Ok(msgs) if msgs.is_empty() => {}
                Ok(msgs) => {
                    if events.send(Event::Messages(conn, msgs)).is_err() {
                        break;
                    }
                }
                Err(e) => {
                    tracing::warn!("connection {conn} sent a bad frame ({e}); closing it");
                    break;
                }
            }
        }
        let _ = events.send(Event::Gone(conn));
    });
}
