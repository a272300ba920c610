//! The pool manager's logic, sans IO (in the manner of `quinn-proto`): a deterministic state
//! machine fed with connection events and decoded messages, producing messages to send. No
//! sockets, threads or clocks: the driver supplies nonces and delivers outputs.
//!
//! It keeps the applications (JOIN with proof of the workflow secret, WELCOME, LEAVE/BYE),
//! every CDO's state, the offers by name and the transfers in flight, and enforces:
//! - a demand of a name not yet offered waits until some app offers it;
//! - require lets the PM ticket a transfer before the demand;
//! - any offer of a name is a valid source; the least loaded one is ticketed;
//! - withdraw completes only when no transfer reads from the offer, and a ticketed
//!   transfer is never lost by a withdraw;
//! - LEAVE is answered with BYE only when nothing required is pending on the app's offers;
//! - when a provider disappears, demands only it could serve fail with `NoProvider`,
//!   transfers from it are re-ticketed from other offers, requires keep waiting.
//!
//! CDO states: `Declared` → `Sealed` → `Offered` → (`Withdrawing`) → `Withdrawn` for a
//! provider; `Declared` → `Required` (with a transfer, demanded or not) → local for a
//! consumer; `Dispose` ends either.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

use crate::attr::{self, AttrValue, Attributes};
use crate::auth;
use crate::proto::{AppId, CdoId, FromPm, Location, Refusal, ToPm, TransferId};

/// A connection, as the driver numbers them.
pub type ConnId = u64;

/// Longest CDO name accepted.
pub const MAX_NAME: usize = 4096;

/// Where a CDO is in its life.
#[derive(Clone, Debug, PartialEq)]
enum State {
    Declared,
    Sealed,
    Offered(Location),
    Withdrawing(Location),
    Withdrawn,
    Required(Want),
}

/// A consumer's wish.
#[derive(Clone, Debug, Default, PartialEq)]
struct Want {
    demanded: bool,
    transfer: Option<TransferId>,
    local: bool,
    /// Offers whose transfer failed; not ticketed again.
    failed: BTreeSet<CdoId>,
}

impl State {
    fn name(&self) -> &'static str {
        match self {
            State::Declared => "declared",
            State::Sealed => "sealed",
            State::Offered(_) => "offered",
            State::Withdrawing(_) => "being withdrawn",
            State::Withdrawn => "withdrawn",
            State::Required(w) if w.local => "local",
            State::Required(w) if w.transfer.is_some() => "in transfer",
            State::Required(_) => "required",
        }
    }
}

#[derive(Debug)]
struct Cdo {
    app: AppId,
    name: String,
    attributes: Attributes,
    state: State,
}

#[derive(Debug)]
struct Transfer {
    from: CdoId,
    to: CdoId,
}

#[derive(Debug)]
enum Conn {
    /// Challenged, not joined yet.
    Challenged([u8; 32]),
    /// Joined as this app.
    Joined(AppId),
    /// JOIN refused: nothing is served.
    Refused,
}

#[derive(Debug)]
struct App {
    conn: ConnId,
    component: String,
    index: i64,
    leaving: bool,
    cdos: BTreeSet<CdoId>,
}

/// The pool manager state machine.
pub struct Manager {
    workflow: String,
    secret: Vec<u8>,
    conns: HashMap<ConnId, Conn>,
    apps: BTreeMap<AppId, App>,
    cdos: BTreeMap<CdoId, Cdo>,
    /// Offered (not withdrawing) CDOs by name.
    offers: HashMap<String, BTreeSet<CdoId>>,
    /// Consumers waiting for a ticket, by name.
    waiting: HashMap<String, BTreeSet<CdoId>>,
    transfers: BTreeMap<TransferId, Transfer>,
    next_id: u64,
    out: VecDeque<(ConnId, FromPm)>,
    closing: Vec<ConnId>,
}

impl Manager {
    /// A manager for `workflow`, admitting apps that prove knowledge of `secret`.
    pub fn new(workflow: &str, secret: &[u8]) -> Manager {
        Manager {
            workflow: workflow.to_string(),
            secret: secret.to_vec(),
            conns: HashMap::new(),
            apps: BTreeMap::new(),
            cdos: BTreeMap::new(),
            offers: HashMap::new(),
            waiting: HashMap::new(),
            transfers: BTreeMap::new(),
            next_id: 1,
            out: VecDeque::new(),
            closing: Vec::new(),
        }
    }

    fn id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    /// The next message to send, with its connection.
    pub fn poll_output(&mut self) -> Option<(ConnId, FromPm)> {
        self.out.pop_front()
    }

    /// Connections the driver should close once their queued output is sent.
    pub fn take_closing(&mut self) -> Vec<ConnId> {
        std::mem::take(&mut self.closing)
    }

    /// Number of joined applications.
    pub fn app_count(&self) -> usize {
        self.apps.len()
    }

    /// Number of live CDOs.
    pub fn cdo_count(&self) -> usize {
        self.cdos.len()
    }

    /// A new connection: challenge it with `nonce` (fresh random bytes from the driver).
    pub fn connected(&mut self, conn: ConnId, nonce: [u8; 32]) {
        self.conns.insert(conn, Conn::Challenged(nonce));
        self.out.push_back((conn, FromPm::Challenge { nonce }));
    }

    fn refuse(&mut self, conn: ConnId, op: &str, cdo: Option<CdoId>, why: Refusal) {
        self.out.push_back((
            conn,
            FromPm::Refused {
                op: op.to_string(),
                cdo,
                why,
            },
        ));
    }

    fn done(&mut self, conn: ConnId, op: &str, cdo: CdoId) {
        self.out.push_back((
            conn,
            FromPm::Done {
                op: op.to_string(),
                cdo,
            },
        ));
    }

    /// Handles one message from `conn`.
    pub fn handle(&mut self, conn: ConnId, msg: ToPm) {
        let app = match (self.conns.get(&conn), &msg) {
            (Some(Conn::Challenged(nonce)), ToPm::Join { .. }) => {
                let nonce = *nonce;
                return self.join(conn, nonce, msg);
            }
            (Some(Conn::Joined(_)), ToPm::Join { .. }) => {
                return self.refuse(conn, "join", None, Refusal::DuplicateJoin);
            }
            (Some(Conn::Joined(app)), _) => *app,
            _ => return self.refuse(conn, op_name(&msg), None, Refusal::NotJoined),
        };
        match msg {
            ToPm::Join { .. } => unreachable!("handled above"),
            ToPm::Leave => self.leave(app),
            ToPm::Declare { local, name } => self.declare(conn, app, local, name),
            ToPm::Seal { cdo, attributes } => {
                self.with_cdo(conn, app, "seal", cdo, |m, c| m.seal(conn, c, attributes))
            }
            ToPm::Offer { cdo, location } => {
                self.with_cdo(conn, app, "offer", cdo, |m, c| m.offer(conn, c, location))
            }
            ToPm::Require { cdo } => {
                self.with_cdo(conn, app, "require", cdo, |m, c| m.require(conn, c, false))
            }
            ToPm::Demand { cdo } => {
                self.with_cdo(conn, app, "demand", cdo, |m, c| m.require(conn, c, true))
            }
            ToPm::Retract { cdo } => {
                self.with_cdo(conn, app, "retract", cdo, |m, c| m.retract(conn, c))
            }
            ToPm::Withdraw { cdo } => {
                self.with_cdo(conn, app, "withdraw", cdo, |m, c| m.withdraw(conn, c))
            }
            ToPm::Dispose { cdo } => {
                self.with_cdo(conn, app, "dispose", cdo, |m, c| m.dispose(conn, c))
            }
            ToPm::TransferDone { transfer, error } => {
                self.transfer_done(conn, app, transfer, error)
            }
        }
    }

    fn join(&mut self, conn: ConnId, nonce: [u8; 32], msg: ToPm) {
        let ToPm::Join {
            workflow,
            component,
            index,
            proof,
        } = msg
        else {
            return;
        };
        let why = if workflow != self.workflow {
            Some(Refusal::WrongWorkflow)
        } else if !auth::verify(&self.secret, &nonce, &workflow, &component, index, &proof) {
            Some(Refusal::BadProof)
        } else {
            None
        };
        if let Some(why) = why {
            self.conns.insert(conn, Conn::Refused);
            self.refuse(conn, "join", None, why);
            self.closing.push(conn);
            return;
        }
        let app = self.id();
        self.conns.insert(conn, Conn::Joined(app));
        self.apps.insert(
            app,
            App {
                conn,
                component,
                index,
                leaving: false,
                cdos: BTreeSet::new(),
            },
        );
        self.out.push_back((conn, FromPm::Welcome { app }));
    }

    /// The component name and index of a joined app.
    pub fn app_identity(&self, app: AppId) -> Option<(&str, i64)> {
        self.apps.get(&app).map(|a| (a.component.as_str(), a.index))
    }

    fn declare(&mut self, conn: ConnId, app: AppId, local: u64, name: String) {
        if name.is_empty() || name.len() > MAX_NAME {
            return self.refuse(conn, "declare", None, Refusal::BadName);
        }
        let cdo = self.id();
        self.cdos.insert(
            cdo,
            Cdo {
                app,
                name,
                attributes: Attributes::new(),
                state: State::Declared,
            },
        );
        if let Some(a) = self.apps.get_mut(&app) {
            a.cdos.insert(cdo);
        }
        self.out.push_back((conn, FromPm::Declared { local, cdo }));
    }

    /// Runs `f` on `cdo` if `app` owns it, else refuses.
    fn with_cdo(
        &mut self,
        conn: ConnId,
        app: AppId,
        op: &str,
        cdo: CdoId,
        f: impl FnOnce(&mut Self, CdoId) -> Result<(), Refusal>,
    ) {
        if self.cdos.get(&cdo).is_none_or(|c| c.app != app) {
            return self.refuse(conn, op, Some(cdo), Refusal::UnknownCdo);
        }
        if let Err(why) = f(self, cdo) {
            self.refuse(conn, op, Some(cdo), why);
        }
    }

    fn cdo(&mut self, cdo: CdoId) -> &mut Cdo {
        self.cdos
            .get_mut(&cdo)
            .unwrap_or_else(|| unreachable!("checked by with_cdo"))
    }

    fn wrong(op: &str, state: &State) -> Refusal {
        Refusal::WrongState {
            op: op.to_string(),
            state: state.name().to_string(),
        }
    }

    fn seal(&mut self, conn: ConnId, cdo: CdoId, attributes: Attributes) -> Result<(), Refusal> {
        let c = self.cdo(cdo);
        if c.state != State::Declared {
            return Err(Self::wrong("seal", &c.state));
        }
        // The built-in name and size are derived (see `published`), not stored.
        c.attributes = attributes;
        c.attributes.remove(attr::NAME);
        c.attributes.remove(attr::LOCAL_SIZE);
        c.state = State::Sealed;
        self.done(conn, "seal", cdo);
        Ok(())
    }

    fn offer(&mut self, conn: ConnId, cdo: CdoId, location: Location) -> Result<(), Refusal> {
        let c = self.cdo(cdo);
        if c.state != State::Sealed {
            return Err(Self::wrong("offer", &c.state));
        }
        c.state = State::Offered(location);
        let name = c.name.clone();
        self.offers.entry(name.clone()).or_default().insert(cdo);
        self.done(conn, "offer", cdo);
        let waiting: Vec<CdoId> = self
            .waiting
            .get(&name)
            .map(|w| w.iter().copied().collect())
            .unwrap_or_default();
        for w in waiting {
            self.ticket(w);
        }
        Ok(())
    }

    fn require(&mut self, conn: ConnId, cdo: CdoId, demand: bool) -> Result<(), Refusal> {
        let op = if demand { "demand" } else { "require" };
        let c = self.cdo(cdo);
        match &mut c.state {
            State::Declared => {
                c.state = State::Required(Want {
                    demanded: demand,
                    ..Want::default()
                })
            }
            State::Required(w) if demand && !w.demanded => w.demanded = true,
            other => return Err(Self::wrong(op, other)),
        }
        let (local, name) = match &c.state {
            State::Required(w) => (w.local, c.name.clone()),
            _ => unreachable!("just set"),
        };
        if !demand {
            self.done(conn, "require", cdo);
        }
        if local {
            self.out.push_back((conn, FromPm::Ready { cdo }));
        } else if matches!(&self.cdo(cdo).state, State::Required(w) if w.transfer.is_none()) {
            self.waiting.entry(name).or_default().insert(cdo);
            self.ticket(cdo);
        }
        Ok(())
    }

    /// An offer's attributes as consumers see them: the sealed ones plus the built-in name
    /// and size (derived here rather than stored per CDO, to keep the PM small).
    fn published(&self, offer: CdoId) -> Attributes {
        let Some(c) = self.cdos.get(&offer) else {
            return Attributes::new();
        };
        let mut a = c.attributes.clone();
        a.insert(attr::NAME.into(), AttrValue::Str(c.name.clone()));
        if let State::Offered(l) | State::Withdrawing(l) = &c.state {
            a.insert(attr::LOCAL_SIZE.into(), AttrValue::Uint(l.region.len));
        }
        a
    }

    /// Tickets a transfer to waiting consumer `to` from the least loaded usable offer.
    fn ticket(&mut self, to: CdoId) {
        let Some(c) = self.cdos.get(&to) else { return };
        let State::Required(want) = &c.state else {
            return;
        };
        if want.transfer.is_some() || want.local {
            return;
        }
        let load = |m: &Self, o: CdoId| m.transfers.values().filter(|t| t.from == o).count();
        let Some(from) = self
            .offers
            .get(&c.name)
            .into_iter()
            .flatten()
            .copied()
            .filter(|o| !want.failed.contains(o))
            .min_by_key(|&o| (load(self, o), o))
        else {
            return;
        };
        let (name, consumer) = (c.name.clone(), c.app);
        let Some(State::Offered(location)) = self.cdos.get(&from).map(|f| f.state.clone()) else {
            return;
        };
        let attributes = self.published(from);
        let transfer = self.id();
        self.transfers.insert(transfer, Transfer { from, to });
        if let Some(w) = self.waiting.get_mut(&name) {
            w.remove(&to);
        }
        if let State::Required(w) = &mut self.cdo(to).state {
            w.transfer = Some(transfer);
        }
        if let Some(conn) = self.apps.get(&consumer).map(|a| a.conn) {
            self.out.push_back((
                conn,
                FromPm::Ticket {
                    transfer,
                    cdo: to,
                    location,
                    attributes,
                },
            ));
        }
    }

    fn transfer_done(
        &mut self,
        conn: ConnId,
        app: AppId,
        transfer: TransferId,
        error: Option<String>,
    ) {
        let owned = self
            .transfers
            .get(&transfer)
            .is_some_and(|t| self.cdos.get(&t.to).is_some_and(|c| c.app == app));
        if !owned {
            return self.refuse(conn, "transfer-done", None, Refusal::UnknownTransfer);
        }
        let Some(t) = self.transfers.remove(&transfer) else {
            return;
        };
        if let Some(State::Required(w)) = self.cdos.get_mut(&t.to).map(|c| &mut c.state) {
            w.transfer = None;
            match error {
                None => {
                    w.local = true;
                    let demanded = w.demanded;
                    if demanded {
                        self.out.push_back((conn, FromPm::Ready { cdo: t.to }));
                    }
                }
                Some(_) => self.retry_elsewhere(t.to, t.from),
            }
        }
        self.source_released(t.from);
    }

    /// A transfer to consumer `to` from `failed` failed: never ticket that offer to it
    /// again, put it back among the waiting, and ticket another offer if one exists.
    fn retry_elsewhere(&mut self, to: CdoId, failed: CdoId) {
        let Some(c) = self.cdos.get_mut(&to) else {
            return;
        };
        let State::Required(w) = &mut c.state else {
            return;
        };
        w.transfer = None;
        w.failed.insert(failed);
        let name = c.name.clone();
        self.waiting.entry(name).or_default().insert(to);
        self.ticket(to);
    }

    /// A transfer from `offer` ended: finish a pending withdraw or leave.
    fn source_released(&mut self, offer: CdoId) {
        let busy = self.transfers.values().any(|t| t.from == offer);
        let Some(c) = self.cdos.get_mut(&offer) else {
            return;
        };
        let app = c.app;
        if let (State::Withdrawing(_), false) = (&c.state, busy) {
            c.state = State::Withdrawn;
            if let Some(conn) = self.apps.get(&app).map(|a| a.conn) {
                self.done(conn, "withdraw", offer);
            }
        }
        self.try_bye(app);
    }

    fn retract(&mut self, conn: ConnId, cdo: CdoId) -> Result<(), Refusal> {
        let c = self.cdo(cdo);
        let State::Required(w) = &c.state else {
            return Err(Self::wrong("retract", &c.state));
        };
        if w.transfer.is_some() {
            return Err(Self::wrong("retract", &c.state));
        }
        let name = c.name.clone();
        c.state = State::Declared;
        if let Some(w) = self.waiting.get_mut(&name) {
            w.remove(&cdo);
        }
        self.done(conn, "retract", cdo);
        self.retry_byes();
        Ok(())
    }

    fn withdraw(&mut self, _conn: ConnId, cdo: CdoId) -> Result<(), Refusal> {
        let c = self.cdo(cdo);
        let State::Offered(location) = &c.state else {
            return Err(Self::wrong("withdraw", &c.state));
        };
        c.state = State::Withdrawing(location.clone());
        let name = c.name.clone();
        if let Some(o) = self.offers.get_mut(&name) {
            o.remove(&cdo);
        }
        self.source_released(cdo);
        Ok(())
    }

    fn dispose(&mut self, conn: ConnId, cdo: CdoId) -> Result<(), Refusal> {
        let c = self.cdo(cdo);
        match &c.state {
            State::Offered(_) | State::Withdrawing(_) => {
                return Err(Self::wrong("dispose", &c.state));
            }
            State::Required(w) if w.transfer.is_some() => {
                return Err(Self::wrong("dispose", &c.state));
            }
            _ => {}
        }
        let (name, app) = (c.name.clone(), c.app);
        self.cdos.remove(&cdo);
        if let Some(w) = self.waiting.get_mut(&name) {
            w.remove(&cdo);
        }
        if let Some(a) = self.apps.get_mut(&app) {
            a.cdos.remove(&cdo);
        }
        self.done(conn, "dispose", cdo);
        self.retry_byes();
        Ok(())
    }

    fn leave(&mut self, app: AppId) {
        if let Some(a) = self.apps.get_mut(&app) {
            a.leaving = true;
        }
        self.try_bye(app);
    }

    /// True if a consumer still needs one of `app`'s offers: a transfer reads from it, or a
    /// consumer requires its name and no other app offers it.
    fn needed(&self, app: AppId) -> bool {
        let Some(a) = self.apps.get(&app) else {
            return false;
        };
        a.cdos.iter().any(|&o| {
            let Some(c) = self.cdos.get(&o) else {
                return false;
            };
            match &c.state {
                State::Offered(_) | State::Withdrawing(_) => {
                    self.transfers.values().any(|t| t.from == o)
                        || (self.waiting.get(&c.name).is_some_and(|w| !w.is_empty())
                            && !self
                                .offers
                                .get(&c.name)
                                .into_iter()
                                .flatten()
                                .any(|&x| self.cdos.get(&x).is_some_and(|x| x.app != app)))
                }
                _ => false,
            }
        })
    }

    fn try_bye(&mut self, app: AppId) {
        let Some(leaving) = self.apps.get(&app).map(|a| a.leaving) else {
            return;
        };
        if !leaving || self.needed(app) {
            return;
        }
        if let Some(a) = self.apps.get(&app) {
            let conn = a.conn;
            self.out.push_back((conn, FromPm::Bye));
            self.closing.push(conn);
        }
        self.remove_app(app, false);
    }

    fn retry_byes(&mut self) {
        let leaving: Vec<AppId> = self
            .apps
            .iter()
            .filter(|(_, a)| a.leaving)
            .map(|(&id, _)| id)
            .collect();
        for app in leaving {
            self.try_bye(app);
        }
    }

    /// The connection is gone (closed or broken): the app's CDOs go, transfers from its
    /// offers are re-ticketed elsewhere, and demands only it could serve fail.
    pub fn disconnected(&mut self, conn: ConnId) {
        if let Some(Conn::Joined(app)) = self.conns.remove(&conn) {
            self.remove_app(app, true);
        }
    }

    fn remove_app(&mut self, app: AppId, died: bool) {
        let Some(a) = self.apps.remove(&app) else {
            return;
        };
        self.conns.remove(&a.conn);
        let mut names = BTreeSet::new();
        for cdo in &a.cdos {
            if let Some(c) = self.cdos.remove(cdo) {
                if let Some(o) = self.offers.get_mut(&c.name) {
                    o.remove(cdo);
                }
                if let Some(w) = self.waiting.get_mut(&c.name) {
                    w.remove(cdo);
                }
                names.insert(c.name);
            }
        }
        // Transfers from its offers fail; transfers to its CDOs just end.
        let lost: Vec<(TransferId, Transfer)> = self
            .transfers
            .iter()
            .filter(|(_, t)| a.cdos.contains(&t.from) || a.cdos.contains(&t.to))
            .map(|(&id, t)| {
                (
                    id,
                    Transfer {
                        from: t.from,
                        to: t.to,
                    },
                )
            })
            .collect();
        for (id, t) in lost {
            self.transfers.remove(&id);
            if a.cdos.contains(&t.from) {
                self.retry_elsewhere(t.to, t.from);
            } else if a.cdos.contains(&t.to) {
                self.source_released(t.from);
            }
        }
        if died {
            for name in names {
                self.fail_orphaned_demands(&name);
            }
        }
        self.retry_byes();
    }

    /// Fails demands of `name` that no offer can serve any more.
    fn fail_orphaned_demands(&mut self, name: &str) {
        let usable = |m: &Self, w: &Want| {
            m.offers
                .get(name)
                .into_iter()
                .flatten()
                .any(|o| !w.failed.contains(o))
        };
        let orphaned: Vec<CdoId> = self
            .waiting
            .get(name)
            .into_iter()
            .flatten()
            .copied()
            .filter(|c| matches!(self.cdos.get(c).map(|c| &c.state), Some(State::Required(w)) if w.demanded && !usable(self, w)))
            .collect();
        for cdo in orphaned {
            if let Some(w) = self.waiting.get_mut(name) {
                w.remove(&cdo);
            }
            let Some(c) = self.cdos.get_mut(&cdo) else {
                continue;
            };
            c.state = State::Declared;
            let app = c.app;
            if let Some(conn) = self.apps.get(&app).map(|a| a.conn) {
                self.refuse(conn, "demand", Some(cdo), Refusal::NoProvider);
            }
        }
    }
}

fn op_name(msg: &ToPm) -> &'static str {
    match msg {
        ToPm::Join { .. } => "join",
        ToPm::Leave => "leave",
        ToPm::Declare { .. } => "declare",
        ToPm::Seal { .. } => "seal",
        ToPm::Offer { .. } => "offer",
        ToPm::Require { .. } => "require",
        ToPm::Demand { .. } => "demand",
        ToPm::Retract { .. } => "retract",
        ToPm::Withdraw { .. } => "withdraw",
        ToPm::Dispose { .. } => "dispose",
        ToPm::TransferDone { .. } => "transfer-done",
    }
}
