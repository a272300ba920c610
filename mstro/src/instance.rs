//! The process-wide instance: [`init`], [`finalize`], and the pool manager a process may
//! serve ([`pm_start`], [`pm_getinfo`], [`pm_terminate`]). The pool itself is joined on
//! first use ([`Instance::session`]).

use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};

use pool::selector::Selector as PoolSelector;

use crate::cells::{CdoCell, GroupCell, RequestCell, SubCell};
use crate::handles::{Kind, Registry};
use crate::session::{Found, Session, Settings};
use crate::status::{Error, Result, Status};

/// Where the instance stands with the pool.
enum Slot {
    /// Not joined yet: the first operation joins.
    NotYet,
    /// Joined (or serving).
    Joined(Arc<Session>),
    /// The pool manager this process served was terminated.
    Terminated,
}

impl Slot {
    fn serves(&self) -> bool {
        matches!(self, Slot::Joined(s) if *s.found() == Found::ServedHere)
    }

    /// Takes the session out, leaving `then`.
    fn take(&mut self, then: Slot) -> Option<Arc<Session>> {
        match std::mem::replace(self, then) {
            Slot::Joined(s) => Some(s),
            Slot::NotYet | Slot::Terminated => None,
        }
    }
}

/// Leaves the pool of `session` unless another thread still uses it (its end closes it).
fn close(session: Option<Arc<Session>>) -> Result<()> {
    match session.map(Arc::try_unwrap) {
        Some(Ok(s)) => s.close(),
        Some(Err(_)) | None => Ok(()),
    }
}

/// The live instance (between `init` and `finalize`).
pub(crate) struct Instance {
    pub(crate) settings: Settings,
    slot: Mutex<Slot>,
    pub(crate) cdos: Registry<CdoCell>,
    pub(crate) selectors: Registry<PoolSelector>,
    pub(crate) subscriptions: Registry<SubCell>,
    pub(crate) requests: Registry<RequestCell>,
    pub(crate) groups: Registry<GroupCell>,
}

static INSTANCE: RwLock<Option<Arc<Instance>>> = RwLock::new(None);

/// The live instance.
///
/// # Errors
/// [`Status::Uninit`] before `init` or after `finalize`.
pub(crate) fn instance() -> Result<Arc<Instance>> {
    INSTANCE
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .clone()
        .ok_or_else(|| {
            Error::new(
                Status::Uninit,
                "maestro is not initialized: call mstro_init first (or it was finalized)",
            )
        })
}

/// True between [`init`] and [`finalize`].
pub fn is_initialized() -> bool {
    instance().is_ok()
}

impl Instance {
    fn slot(&self) -> MutexGuard<'_, Slot> {
        self.slot.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The joined pool, joining it now if this is the first use (see
    /// [`crate::session`] for where the pool manager is found).
    ///
    /// # Errors
    /// As [`Session::join`]; [`Status::NoPm`] after [`pm_terminate`].
    pub(crate) fn session(&self) -> Result<Arc<Session>> {
        let mut slot = self.slot();
        match &*slot {
            Slot::Joined(s) => return Ok(s.clone()),
            Slot::Terminated => {
                return Err(Error::new(
                    Status::NoPm,
                    "the pool manager this process served was terminated (mstro_pm_terminate)",
                ));
            }
            Slot::NotYet => {}
        }
        let s = Arc::new(Session::join(&self.settings)?);
        tracing::info!(
            "{} #{} joined workflow {:?} ({})",
            self.settings.component,
            self.settings.index,
            self.settings.workflow,
            s.found()
        );
        *slot = Slot::Joined(s.clone());
        Ok(s)
    }
}

/// Starts Maestro in this process (`mstro_init`): `workflow` and `component` fall back to
/// `MSTRO_WORKFLOW_NAME` and `MSTRO_COMPONENT_NAME`; `index` is the component index (the
/// rank, usually). Loads the schemas, connects to the PMIx host if one started the
/// process, and sets up logging; the pool is joined on first use.
///
/// # Errors
/// [`Status::NotTwice`] if already initialized; [`Status::Invarg`] for bad names,
/// variables or schemas; [`Status::Fail`] if a PMIx host refuses the process.
pub fn init(workflow: Option<&str>, component: Option<&str>, index: i64) -> Result<()> {
    crate::init_logging();
    let mut slot = INSTANCE.write().unwrap_or_else(PoisonError::into_inner);
    if slot.is_some() {
        return Err(Error::new(
            Status::NotTwice,
            "mstro_init was called already; call mstro_finalize before initializing again",
        ));
    }
    let settings = Settings::from_env(workflow, component, index)?;
    *slot = Some(Arc::new(Instance {
        settings,
        slot: Mutex::new(Slot::NotYet),
        cdos: Registry::new(Kind::Cdo),
        selectors: Registry::new(Kind::Selector),
        subscriptions: Registry::new(Kind::Subscription),
        requests: Registry::new(Kind::Request),
        groups: Registry::new(Kind::Group),
    }));
    Ok(())
}

/// Ends Maestro in this process (`mstro_finalize`): ends every subscription, cancels
/// asynchronous demands in flight, forgets every handle, leaves the pool (waiting for the PM's goodbye at most `MSTRO_TIMEOUT`), stops a
/// pool manager this process runs and leaves the PMIx host. Always ends the instance, even
/// when it reports an error; `init` may be called again afterwards.
///
/// # Errors
/// [`Status::Uninit`] if not initialized; the leave's error otherwise.
pub fn finalize() -> Result<()> {
    let inst = INSTANCE
        .write()
        .unwrap_or_else(PoisonError::into_inner)
        .take()
        .ok_or_else(|| Error::new(Status::Uninit, "mstro_finalize without mstro_init"))?;
    drop(inst.subscriptions.drain());
    drop(inst.selectors.drain());
    // Demands still in flight end with the instance (the pool forgets them as we leave).
    for request in inst.requests.drain() {
        request.cancel();
    }
    drop(inst.groups.drain());
    let cdos = inst.cdos.drain();
    if !cdos.is_empty() {
        tracing::warn!(
            "mstro_finalize: {} CDO handles were not disposed (offers among them are withdrawn by the pool manager)",
            cdos.len()
        );
    }
    drop(cdos);
    let session = inst.slot().take(Slot::NotYet);
    close(session)
}

/// Makes this process the workflow's pool manager (`mstro_pm_start`): starts it (on every
/// interface and a private Unix socket), announces it through PMIx under a PMIx host, and
/// joins it, so this process's own subscriptions see every other app's events.
///
/// With `MSTRO_PM_STANDBY_FOR` set, this process is a standby: the call first watches
/// the active pool manager that setting names and returns once it took over from it
/// ([`Session::stand_by`]); a program written as a pool manager runs unchanged as the
/// standby of another. Other threads' pool calls wait meanwhile.
///
/// # Errors
/// [`Status::Uninit`]; [`Status::NotTwice`] if this process already serves or already
/// joined a pool (call it right after `init`); [`Status::Fail`] if the PM cannot start;
/// for a standby, [`Status::NoPm`] if the active one stopped on purpose (nothing to take
/// over) or was not found.
pub fn pm_start() -> Result<()> {
    let inst = instance()?;
    let mut slot = inst.slot();
    let why = match &*slot {
        Slot::NotYet => {
            let session = match &inst.settings.standby_for {
                Some(target) => Session::stand_by(&inst.settings, target)?,
                None => Session::serve(&inst.settings)?,
            };
            *slot = Slot::Joined(Arc::new(session));
            return Ok(());
        }
        Slot::Joined(s) if *s.found() == Found::ServedHere => {
            "this process serves a pool manager already".to_string()
        }
        Slot::Joined(s) => format!(
            "this process joined a pool already ({}); call mstro_pm_start right after mstro_init",
            s.found()
        ),
        Slot::Terminated => {
            "this process's pool manager was terminated; finalize and init again".into()
        }
    };
    Err(Error::new(Status::NotTwice, why))
}

/// The PM info of the pool manager this process serves (`mstro_pm_getinfo`), the text
/// other processes put in `MSTRO_POOL_MANAGER_INFO`. It carries the workflow secret.
///
/// # Errors
/// [`Status::Uninit`]; [`Status::Invstate`] if this process serves no pool manager.
pub fn pm_getinfo() -> Result<String> {
    let inst = instance()?;
    match &*inst.slot() {
        Slot::Joined(s) if *s.found() == Found::ServedHere => Ok(s.info().encode()),
        _ => Err(Error::new(
            Status::Invstate,
            "this process serves no pool manager; call mstro_pm_start first",
        )),
    }
}

/// Stops the pool manager this process serves (`mstro_pm_terminate`): this process leaves
/// it, its publication is withdrawn, and the other apps' connections close. Later pool
/// operations of this process fail with [`Status::NoPm`] until `finalize`.
///
/// # Errors
/// [`Status::Uninit`]; [`Status::Invstate`] if this process serves no pool manager.
pub fn pm_terminate() -> Result<()> {
    let inst = instance()?;
    let mut slot = inst.slot();
    if !slot.serves() {
        return Err(Error::new(
            Status::Invstate,
            "this process serves no pool manager; call mstro_pm_start first",
        ));
    }
    drop(inst.subscriptions.drain());
    // Later calls must not join a new pool silently.
    let session = slot.take(Slot::Terminated);
    drop(slot);
    close(session)
}
