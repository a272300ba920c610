//! Transport planning: how a consumer gets an offer's bytes (see the module docs of
//! [`super`]): same process, the provider's file on a global file system when it wrote one,
//! inline with the ticket, RMA over the first pair of endpoints that reach each other, else
//! the stream.

use std::sync::Arc;

use smallvec::SmallVec;

use fabric_types::{ProviderClass, RemoteRegion};

use super::kept::POOL;
use super::traffic::Route;
use super::{App, Manager};
use crate::Subnet;
use crate::events::EventKind;
use crate::proto::{
    AppId, CdoId, FabricEndpoint, GfsFile, HostMemory, InlineBytes, OfferExtras, Source,
};

/// A group's members larger than this are not sent inline with their tickets when the
/// consumer can copy them out of the provider's memory: it copies a burst of them in one
/// batch, which drains a group faster from about 1.5 KiB on (`maestro bench pool --group
/// 10000`, inline against copied: 1.5 KiB 175-187k against 176-179k members/s, 2 KiB
/// 134-141k against 172-173k, 4 KiB 64-65k against 168-177k).
pub(super) const GROUP_INLINE_MAX: usize = 1536;

/// Whether consumer `c` can copy `p`'s offers out of its memory: both on one host, both
/// announcing their memory, both with a shared-memory endpoint.
fn copyable(c: &App, p: &App) -> bool {
    let shm = |a: &App| {
        a.endpoint
            .iter()
            .chain(&a.alternates)
            .any(|e| ProviderClass::of(&e.provider) == ProviderClass::SharedMemory)
    };
    c.host == p.host && copies(c) && p.memory.is_some() && shm(c) && shm(p)
}

/// Whether consumer `c` copies offers out of other processes' memory: it announced its
/// own (its process takes part) and none of its copies failed.
fn copies(c: &App) -> bool {
    c.memory.is_some() && !c.copies_refused
}

/// An RMA plan of an offer not registered with the fabric, as a copy out of the
/// provider's memory only ([`HostMemory::copy_only`]); `None` when the plan names no such
/// copy (the endpoints paired do not share memory).
fn copy_only((source, how, route): (Source, String, Route)) -> Option<(Source, String, Route)> {
    match source {
        Source::Rma {
            endpoint,
            region,
            via,
            memory: Some(mut m),
        } => {
            m.copy_only = true;
            let how = if how.is_empty() {
                how
            } else {
                format!("copy from the provider's memory (not registered with the fabric; {how})")
            };
            let source = Source::Rma {
                endpoint,
                region,
                via,
                memory: Some(m),
            };
            Some((source, how, route))
        }
        _ => None,
    }
}

/// Endpoints that reach each other: the consumer's `i`th (`ce`) and the provider's `j`th,
/// with why the NICs chosen first could not be used (`detour`), if they could not.
struct Pair<'a> {
    i: usize,
    ce: &'a FabricEndpoint,
    j: usize,
    detour: Option<String>,
}

impl Manager {
    /// Whether plans say how and why: only for subscribers of transport events (the one
    /// event that shows it), as plans are the hot path.
    fn transports_worded(&self) -> bool {
        self.events.wants(EventKind::TransportStarted, false)
    }

    /// Chooses how `consumer` gets offer `from` of `provider` (see the module docs), and
    /// says how and why, for the transport event (worded only when someone subscribes to
    /// transport events: this is the hot path); `bulk` for a group's member. A small CDO
    /// whose offer carried its bytes: inline, with the ticket (a group's member above
    /// [`GROUP_INLINE_MAX`] only when it cannot be copied from the provider's memory).
    /// Between processes: RMA over the first pair of their endpoints that can reach each
    /// other (common provider, links up, a common network, shared memory only within a
    /// host), the NICs chosen for them first, then their other networks; else a stream,
    /// with the reason the chosen pair failed.
    pub(super) fn plan(
        &self,
        (consumer, bulk): (AppId, bool),
        provider: AppId,
        from: CdoId,
        region: RemoteRegion,
    ) -> (Source, String, Route) {
        let describe = self.transports_worded();
        let words = |f: &dyn Fn() -> String| if describe { f() } else { String::new() };
        let stream = |why: &str| {
            let source = Source::Stream { len: region.len };
            let route = Route::of(&source, None);
            (source, words(&|| format!("stream: {why}")), route)
        };
        // What the offer carries besides its region (looked up once).
        let extras = self.cdos.get(&from).map(|f| &f.extras);
        // Bytes the provider wrote to the global file system: the consumer reads the file
        // (the transport the provider chose, which outlives the provider's memory; or, one
        // the PM had it write, from the same directory).
        let file = extras.and_then(OfferExtras::gfs);
        let gfs = |file: &GfsFile| {
            let source = Source::Gfs {
                file: file.clone(),
                len: region.len,
            };
            let route = Route::of(&source, None);
            let how = words(&|| format!("gfs (the file {})", file.path));
            (source, how, route)
        };
        // A CDO the pool keeps is its file, whoever asks.
        if provider == POOL {
            return file.map_or_else(|| stream("a kept CDO without its file"), gfs);
        }
        let (Some(c), Some(p)) = (self.apps.get(&consumer), self.apps.get(&provider)) else {
            return stream("an application is gone");
        };
        if c.process == p.process && c.host == p.host {
            let source = Source::SameProcess {
                pool: self.instance,
                app: provider,
                cdo: from,
                len: region.len,
            };
            let route = Route::of(&source, None);
            return (source, words(&|| "same-process (no copy)".into()), route);
        }
        if let Some(file) = file.filter(|_| self.reads_file(consumer, provider, from)) {
            return gfs(file);
        }
        // A small CDO whose offer brought its bytes: they go with the ticket; unless it is
        // a group's member the consumer copies out of the provider's memory with the
        // others in one batch, which is faster from GROUP_INLINE_MAX on.
        let inline = extras.and_then(OfferExtras::inline);
        let batched = |b: &&InlineBytes| bulk && b.len() > GROUP_INLINE_MAX && copyable(c, p);
        if let Some(bytes) = inline.filter(|b| !batched(b)) {
            let how = words(&|| format!("inline ({} bytes with the ticket)", bytes.len()));
            let source = Source::Inline {
                bytes: bytes.clone(),
            };
            let route = Route::of(&source, None);
            return (source, how, route);
        }
        let unregistered = extras.is_some_and(OfferExtras::unregistered);
        if unregistered && !copyable(c, p) {
            return stream(
                "the offer is not registered with the fabric (its bytes are copied on its host only)",
            );
        }
        let theirs = self.offered_on(p, from, region);
        match self.pair(c, p, &theirs) {
            Ok(Pair { i, ce, j, detour }) => {
                let (pe, region) = theirs[j];
                let planned = self.rma(c, p, (i, ce), (j, pe, region), extras, detour.as_deref());
                if unregistered {
                    return copy_only(planned).unwrap_or_else(|| {
                        stream("the offer is not registered with the fabric and the endpoints chosen do not share memory")
                    });
                }
                planned
            }
            Err(why) => stream(&why),
        }
    }

    /// The first [`Pair`] of a consumer endpoint of `c` and a provider endpoint of `theirs`
    /// that reach each other, the NICs chosen for them first, then one side's
    /// other networks, then both; with why the chosen pair could not be used, if it could
    /// not. Why none can, if none can.
    fn pair<'a>(
        &self,
        c: &'a App,
        p: &App,
        theirs: &[(&Arc<FabricEndpoint>, RemoteRegion)],
    ) -> Result<Pair<'a>, String> {
        // Most apps have one endpoint: no allocation for up to four.
        let mine: SmallVec<[&Arc<FabricEndpoint>; 4]> =
            c.endpoint.iter().chain(&c.alternates).collect();
        if mine.is_empty() {
            return Err("the consumer has no fabric endpoint".into());
        }
        if theirs.is_empty() {
            return Err("the provider has no fabric endpoint".into());
        }
        let mut pairs: SmallVec<[(usize, usize); 4]> = (0..mine.len())
            .flat_map(|i| (0..theirs.len()).map(move |j| (i, j)))
            .collect();
        pairs.sort_by_key(|&(i, j)| (i.min(1) + j.min(1), j.min(1), i, j));
        let mut first_failure = None;
        for (i, j) in pairs {
            let network = c.networks.get(i).copied().flatten();
            match self.reachable(c, p, (mine[i], network), theirs[j].0) {
                Ok(()) => {
                    let (ce, detour) = (mine[i].as_ref(), first_failure);
                    return Ok(Pair { i, ce, j, detour });
                }
                Err(why) => {
                    first_failure.get_or_insert(why);
                }
            }
        }
        Err(first_failure.unwrap_or_default())
    }

    /// An RMA ticket from provider endpoint `pe` (the `j`th of `p`, `region` registered
    /// with it) to consumer endpoint `ce` (the `i`th of `c`), with how and why (`detour`:
    /// why the NICs chosen first could not be used); over shared memory the consumer may
    /// also copy straight from the provider's memory.
    fn rma(
        &self,
        c: &App,
        p: &App,
        (i, ce): (usize, &FabricEndpoint),
        (j, pe, region): (usize, &Arc<FabricEndpoint>, RemoteRegion),
        extras: Option<&OfferExtras>,
        detour: Option<&str>,
    ) -> (Source, String, Route) {
        let describe = self.transports_worded();
        let ip = |e: &FabricEndpoint| e.address.ip().map(|ip| ip.to_string());
        let mut how = String::new();
        if describe {
            how = format!(
                "rma over {} from {} to {}",
                pe.provider,
                ip(pe).unwrap_or_else(|| "the provider".into()),
                ip(ce).unwrap_or_else(|| "the consumer".into())
            );
            if let Some(why) = detour {
                how.push_str(&format!(" (another network: {why})"));
            }
        }
        // Shared memory is planned within a host only: the consumer may copy straight
        // from the provider's memory, if both take part.
        let memory = p
            .memory
            .filter(|_| ProviderClass::of(&pe.provider) == ProviderClass::SharedMemory && copies(c))
            .map(|process| {
                let file = extras.and_then(OfferExtras::file);
                Box::new(HostMemory {
                    process,
                    file,
                    copy_only: false,
                })
            });
        if memory.is_some() && describe {
            how.push_str(" (or straight from the provider's memory)");
        }
        let source = Source::Rma {
            endpoint: Arc::clone(pe),
            region,
            via: u8::try_from(i).unwrap_or(u8::MAX),
            memory,
        };
        let route = Route::of(&source, Some(j));
        (source, how, route)
    }

    /// Whether `consumer` can read offer `from` (of `provider`, registered as `region`)
    /// without the PM relaying it: one host, its bytes inline, or a pair of endpoints
    /// that reach each other. Where a name has several offers, those are ticketed first.
    pub(super) fn reaches(
        &self,
        consumer: AppId,
        provider: AppId,
        from: CdoId,
        region: RemoteRegion,
    ) -> bool {
        let (Some(c), Some(p)) = (self.apps.get(&consumer), self.apps.get(&provider)) else {
            return false;
        };
        let extras = self.cdos.get(&from).map(|f| &f.extras);
        if c.host == p.host || extras.is_some_and(|e| e.inline().is_some()) {
            return true;
        }
        // Not registered with the fabric: from another host, only a stream relays it.
        if extras.is_some_and(OfferExtras::unregistered) {
            return false;
        }
        let theirs = self.offered_on(p, from, region);
        self.pair(c, p, &theirs).is_ok()
    }

    /// The endpoints of `p` that offer `from` can be read through, each with its region:
    /// the first endpoint with `region`, then the alternates the offer registered with.
    fn offered_on<'a>(
        &'a self,
        p: &'a App,
        from: CdoId,
        region: RemoteRegion,
    ) -> SmallVec<[(&'a Arc<FabricEndpoint>, RemoteRegion); 4]> {
        let alternates = self
            .cdos
            .get(&from)
            .map_or(&[][..], |f| f.extras.alternates());
        p.endpoint
            .iter()
            .map(|e| (e, region))
            .chain(p.alternates.iter().zip(alternates.iter().copied()))
            .collect()
    }

    /// Whether consumer endpoint `ce` of `c` (on `network`, if known) can read from
    /// provider endpoint `pe` of `p`; why not.
    fn reachable(
        &self,
        c: &App,
        p: &App,
        (ce, network): (&FabricEndpoint, Option<Subnet>),
        pe: &FabricEndpoint,
    ) -> Result<(), String> {
        let ip = |e: &FabricEndpoint| e.address.ip();
        if ce.provider != pe.provider {
            return Err(format!(
                "no common fabric provider (consumer {}, provider {})",
                ce.provider, pe.provider
            ));
        }
        for (who, e) in [("consumer", ce), ("provider", pe)] {
            if let Some(net) = ip(e).and_then(|a| self.down.iter().find(|s| s.contains(&a))) {
                return Err(format!(
                    "the {who}'s endpoint {} is on a link that is down ({net})",
                    ip(e).map(|a| a.to_string()).unwrap_or_default()
                ));
            }
        }
        if c.host == p.host {
            return Ok(());
        }
        // A loopback address on another host is that host itself (`--maestro-nic=lo` on
        // several nodes).
        for (who, e) in [("provider", pe), ("consumer", ce)] {
            if let Some(a) = ip(e).filter(std::net::IpAddr::is_loopback) {
                return Err(format!(
                    "the {who}'s endpoint {a} is a loopback address, which does not reach from {} to {}",
                    p.host, c.host
                ));
            }
        }
        if ProviderClass::of(&pe.provider) == ProviderClass::SharedMemory {
            return Err(format!(
                "shared memory does not reach from {} to {}",
                p.host, c.host
            ));
        }
        match (network, ip(pe)) {
            (Some(net), Some(a)) if !net.contains(&a) => Err(format!(
                "the consumer's network {net} does not reach the provider's endpoint {a}"
            )),
            _ => Ok(()),
        }
    }
}
