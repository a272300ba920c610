//! A blocking pool client: joins the pool manager with the workflow secret, runs the CDO
//! operations named after Maestro's (`declare`, `seal`, `offer`, `require`, `demand`,
//! `withdraw`, `retract`, `dispose`), and carries out the transfers the PM tickets to it by
//! reading from the provider's registered memory over the `fabric` layer.
//!
//! Every call waits with the client's timeout. Tickets that arrive while a call waits are
//! served on the spot (read, then `TransferDone`), so a consumer never blocks a provider.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::time::Duration;

use fabric::{Buffer, Endpoint, MemoryRegion, Peer};

use crate::attr::Attributes;
use crate::proto::{self, AppId, CdoId, FromPm, Location, Refusal, ToPm};
use crate::wire::Conn;

/// What can go wrong for a client.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The control connection failed.
    #[error("pool manager connection: {0}")]
    Io(#[from] std::io::Error),
    /// The PM sent a bad frame.
    #[error("pool manager sent a bad frame: {0}")]
    Frame(#[from] proto::FrameError),
    /// The PM refused an operation.
    #[error("{op} refused: {why}")]
    Refused {
        /// The operation.
        op: String,
        /// Why.
        why: Refusal,
    },
    /// No answer in time.
    #[error("{0} got no answer from the pool manager in time")]
    Timeout(&'static str),
    /// The PM closed the connection.
    #[error("the pool manager closed the connection")]
    Closed,
    /// A fabric error while moving data.
    #[error(transparent)]
    Fabric(#[from] fabric::FabricError),
    /// The PM answered something unexpected.
    #[error("unexpected answer from the pool manager: {0}")]
    Protocol(String),
}

/// Result alias.
pub type Result<T> = std::result::Result<T, ClientError>;

/// A joined application.
pub struct Client {
    conn: Conn,
    app: AppId,
    endpoint: Endpoint,
    peers: HashMap<Vec<u8>, Peer>,
    offered: HashMap<CdoId, MemoryRegion>,
    local: HashMap<CdoId, (Vec<u8>, Attributes)>,
    next_local: u64,
    timeout: Duration,
}

impl Client {
    /// Connects to the PM at `addr`, answers its challenge with a proof of `secret`, and
    /// joins as `component`/`index` of `workflow`. Data moves over `endpoint`.
    ///
    /// # Errors
    /// Connection errors; [`ClientError::Refused`] with `BadProof` for a wrong secret.
    pub fn join(
        addr: SocketAddr,
        workflow: &str,
        component: &str,
        index: i64,
        secret: &[u8],
        endpoint: Endpoint,
        timeout: Duration,
    ) -> Result<Client> {
        let mut conn = Conn::connect(addr, timeout)?;
        let app = conn.join(workflow, component, index, secret)?;
        Ok(Client {
            conn,
            app,
            endpoint,
            peers: HashMap::new(),
            offered: HashMap::new(),
            local: HashMap::new(),
            next_local: 1,
            timeout,
        })
    }

    /// This app's id.
    pub fn app(&self) -> AppId {
        self.app
    }

    fn send(&mut self, msg: ToPm) -> Result<()> {
        self.conn.send(&[msg])
    }

    /// Waits for the message `pick` accepts, serving tickets and keeping other messages.
    fn wait<T>(
        &mut self,
        what: &'static str,
        mut pick: impl FnMut(&FromPm) -> Option<Result<T>>,
    ) -> Result<T> {
        let mut kept = VecDeque::new();
        let result = loop {
            let m = match self.conn.recv(what) {
                Ok(m) => m,
                Err(e) => break Err(e),
            };
            if let Some(r) = pick(&m) {
                break r;
            }
            match m {
                FromPm::Ticket {
                    transfer,
                    cdo,
                    location,
                    attributes,
                } => {
                    let error = match self.fetch(&location) {
                        Ok(data) => {
                            self.local.insert(cdo, (data, attributes));
                            None
                        }
                        Err(e) => Some(e.to_string()),
                    };
                    if let Err(e) = self.send(ToPm::TransferDone { transfer, error }) {
                        break Err(e);
                    }
                }
                FromPm::Refused { op, why, .. } if op == what => {
                    break Err(ClientError::Refused { op, why });
                }
                other => kept.push_back(other),
            }
        };
        self.conn.requeue(kept);
        result
    }

    /// Reads a ticketed location into local memory.
    fn fetch(&mut self, location: &Location) -> Result<Vec<u8>> {
        if location.region.len == 0 {
            return Ok(Vec::new());
        }
        if location.provider != self.endpoint.info().provider {
            return Err(ClientError::Protocol(format!(
                "the provider offers over {}, this app over {}",
                location.provider,
                self.endpoint.info().provider
            )));
        }
        let peer = match self.peers.get(&location.address.0) {
            Some(p) => *p,
            None => {
                let p = self.endpoint.insert_peer(&location.address)?;
                self.peers.insert(location.address.0.clone(), p);
                p
            }
        };
        let len = usize::try_from(location.region.len).unwrap_or(usize::MAX);
        let dst = self.endpoint.register(Buffer::new(len)?)?;
        let dst = self
            .endpoint
            .read(peer, dst, location.region)?
            .wait(self.timeout)?;
        Ok(dst.as_slice()[..len].to_vec())
    }

    fn expect_done(&mut self, op: &'static str, cdo: CdoId) -> Result<()> {
        self.wait(op, |m| match m {
            FromPm::Done { op: o, cdo: c } if o == op && *c == cdo => Some(Ok(())),
            FromPm::Refused {
                op: o,
                cdo: Some(c),
                why,
            } if o == op && *c == cdo => Some(Err(ClientError::Refused {
                op: o.clone(),
                why: why.clone(),
            })),
            _ => None,
        })
    }

    /// Declares a CDO named `name`.
    ///
    /// # Errors
    /// Refusals (bad name) and connection errors.
    pub fn declare(&mut self, name: &str) -> Result<CdoId> {
        let local = self.next_local;
        self.next_local += 1;
        self.send(ToPm::Declare {
            local,
            name: name.into(),
        })?;
        self.wait("declare", |m| match m {
            FromPm::Declared { local: l, cdo } if *l == local => Some(Ok(*cdo)),
            _ => None,
        })
    }

    /// Seals a declared CDO with its attributes.
    ///
    /// # Errors
    /// Refusals (wrong state) and connection errors.
    pub fn seal(&mut self, cdo: CdoId, attributes: Attributes) -> Result<()> {
        self.send(ToPm::Seal { cdo, attributes })?;
        self.expect_done("seal", cdo)
    }

    /// Offers a sealed CDO's bytes: they are registered with the fabric and stay readable by
    /// consumers until [`Client::withdraw`].
    ///
    /// # Errors
    /// Registration, refusal and connection errors.
    pub fn offer(&mut self, cdo: CdoId, data: Buffer) -> Result<()> {
        let region = self.endpoint.register(data)?;
        let location = Location {
            address: self.endpoint.address().clone(),
            provider: self.endpoint.info().provider.clone(),
            region: region.remote(),
        };
        self.offered.insert(cdo, region);
        self.send(ToPm::Offer { cdo, location })?;
        self.expect_done("offer", cdo)
    }

    /// Declares the intent to consume `cdo`; the PM may move it right away.
    ///
    /// # Errors
    /// Refusals and connection errors.
    pub fn require(&mut self, cdo: CdoId) -> Result<()> {
        self.send(ToPm::Require { cdo })?;
        self.expect_done("require", cdo)
    }

    /// Waits until `cdo` is local and returns its bytes and attributes.
    ///
    /// # Errors
    /// [`ClientError::Timeout`] if nobody offers it in time; `NoProvider` if its providers
    /// vanished; connection and fabric errors.
    pub fn demand(&mut self, cdo: CdoId) -> Result<(Vec<u8>, Attributes)> {
        self.send(ToPm::Demand { cdo })?;
        self.wait("demand", |m| match m {
            FromPm::Ready { cdo: c } if *c == cdo => Some(Ok(())),
            FromPm::Refused {
                op,
                cdo: Some(c),
                why,
            } if op == "demand" && *c == cdo => Some(Err(ClientError::Refused {
                op: op.clone(),
                why: why.clone(),
            })),
            _ => None,
        })?;
        self.local
            .remove(&cdo)
            .ok_or_else(|| ClientError::Protocol(format!("CDO {cdo} ready but no data arrived")))
    }

    /// Cancels a require.
    ///
    /// # Errors
    /// Refusals and connection errors.
    pub fn retract(&mut self, cdo: CdoId) -> Result<()> {
        self.send(ToPm::Retract { cdo })?;
        self.expect_done("retract", cdo)
    }

    /// Takes an offer back once no transfer reads from it; returns the buffer.
    ///
    /// # Errors
    /// Refusals and connection errors.
    pub fn withdraw(&mut self, cdo: CdoId) -> Result<Buffer> {
        self.send(ToPm::Withdraw { cdo })?;
        self.expect_done("withdraw", cdo)?;
        self.offered
            .remove(&cdo)
            .map(MemoryRegion::into_buffer)
            .ok_or_else(|| {
                ClientError::Protocol(format!("withdrew CDO {cdo} that this client did not offer"))
            })
    }

    /// Forgets a CDO.
    ///
    /// # Errors
    /// Refusals and connection errors.
    pub fn dispose(&mut self, cdo: CdoId) -> Result<()> {
        self.send(ToPm::Dispose { cdo })?;
        self.expect_done("dispose", cdo)
    }

    /// Leaves the workflow; returns once the PM says BYE (when no consumer still needs this
    /// app's offers).
    ///
    /// # Errors
    /// Timeout and connection errors.
    pub fn leave(mut self) -> Result<()> {
        self.send(ToPm::Leave)?;
        self.wait("leave", |m| matches!(m, FromPm::Bye).then_some(Ok(())))
    }
}
