//! `maestro bench pool --events`: the event-driven stream, as ECMWF-style consumers run it.
//! The consumer subscribes to OFFER events; the provider process makes and fills fresh CDOs
//! (`events SIZE COUNT`, answered `prepared`: their making is not timed) and on `go` offers
//! them as fast as it can; the consumer demands each as its event arrives, `--window` in
//! flight.

use std::time::{Duration, Instant};

use fabric::Buffer;
use pool::attr::Attributes;
use pool::{Client, PoolManager};

use super::cpu::{PerCdo, Sample};
use super::{Lender, PoolBench, PoolBenchError, ProviderArgs, ProviderProcess, demand, verify};
use crate::pattern;
use crate::peer::SEED;

impl PoolBench {
    /// How many fresh CDOs of `size` the event-driven stream offers: as many as the
    /// volume would demand, at most `--events-max` (20,000) and 1 GiB (the provider keeps
    /// them all until it leaves).
    fn event_count(&self, size: usize) -> usize {
        let size = size.max(1);
        let most = usize::try_from(self.events_max).unwrap_or(usize::MAX);
        (self.volume / size)
            .clamp(1, most)
            .min(((1usize << 30) / size).max(1))
    }

    /// The event-driven stream of `size` (`--events`): subscribed to offers, the consumer
    /// has the provider offer fresh CDOs as fast as it can and demands each as its event
    /// arrives, `--window` in flight; CDOs per second from the request to the last demand
    /// (the first checked), and the CPU each party spent per CDO meanwhile.
    pub(super) fn event_stream(
        &self,
        (consumer, pm): (&Client, &PoolManager),
        provider: &mut ProviderProcess,
        size: usize,
    ) -> Result<(f64, PerCdo), PoolBenchError> {
        let count = self.event_count(size);
        let prefix = format!("{}/", event_prefix(size));
        let offers = consumer.subscribe(
            &pool::selector::Selector::all(),
            pool::events::EventKind::Offer,
            pool::events::SubscribeOptions::default(),
        )?;
        let lender = self
            .user_memory
            .then(|| Lender::new(size, usize::from(self.window)));
        let lender = lender.as_ref();
        // The provider makes and fills its buffers first: the stream times the pool, not
        // the producer's memset.
        provider.tell(&format!("events {size} {count}"))?;
        provider.expect("prepared", Duration::from_secs(600))?;
        let cpu = Sample::take(pm, provider)?;
        let start = Instant::now();
        provider.tell(&format!("go {}", self.events_batch))?;
        let told = (prefix.as_str(), count, size);
        if self.events_batch > 0 {
            self.fetch_batches(consumer, &offers, told)?;
        } else {
            self.demand_as_told(consumer, (&offers, lender), told)?;
        }
        let per_sec = count as f64 / start.elapsed().as_secs_f64();
        let spent = cpu.per_cdo(&Sample::take(pm, provider)?, count);
        drop(offers);
        Ok((per_sec, spent))
    }

    /// The consumer's side of the stream one CDO per call: each CDO of the `count` named
    /// `prefix...` demanded (into memory of `lender`, if given) as its offer event arrives,
    /// `--window` in flight; the bytes of the first checked (of all with `--verify-all`).
    fn demand_as_told(
        &self,
        consumer: &Client,
        (offers, lender): (&pool::Subscription, Option<&Lender>),
        (prefix, count, size): (&str, usize, usize),
    ) -> Result<(), PoolBenchError> {
        use futures::TryStreamExt;
        let c = consumer.as_async();
        // The names of this size's offers, as their events arrive.
        let names = futures::stream::unfold(0usize, |told| async move {
            if told == count {
                return None;
            }
            loop {
                match offers.next_timeout(Duration::from_secs(600)).await {
                    Ok(Some(e)) => match e.cdo {
                        Some(name) if name.starts_with(prefix) => {
                            return Some((Ok(name), told + 1));
                        }
                        _ => {}
                    },
                    Ok(None) => {
                        let late = PoolBenchError::Provider(format!(
                            "{} of {count} offer events came within 600 s",
                            told
                        ));
                        return Some((Err(late), count));
                    }
                    Err(e) => return Some((Err(e.into()), count)),
                }
            }
        });
        let first = std::sync::atomic::AtomicBool::new(true);
        let fetch = |name: String| {
            let first = &first;
            async move {
                let cdo = c.declare(&name)?;
                let mut loan = Lender::loan(lender);
                let to = (loan.as_mut(), false);
                if first.swap(false, std::sync::atomic::Ordering::Relaxed) || self.verify_all {
                    demand(c, cdo, to, |d| verify(size, d)).await?;
                } else {
                    demand(c, cdo, to, |_| Ok(())).await?;
                }
                c.dispose(cdo).await?;
                drop(loan);
                Ok::<(), PoolBenchError>(())
            }
        };
        consumer.block_on(
            names
                .map_ok(fetch)
                .try_buffer_unordered(usize::from(self.window))
                .try_collect::<Vec<()>>(),
        )?;
        Ok(())
    }

    /// The consumer's side of the stream in batches (`--events-batch N`): waits for an
    /// offer event, then takes the CDOs of it and of the events queued behind it, up to N,
    /// with one `fetch_many`, until `count` CDOs named `prefix...` came; the bytes of the
    /// first batch are checked (of all with `--verify-all`).
    fn fetch_batches(
        &self,
        consumer: &Client,
        offers: &pool::Subscription,
        (prefix, count, size): (&str, usize, usize),
    ) -> Result<(), PoolBenchError> {
        let batch = usize::try_from(self.events_batch).unwrap_or(usize::MAX);
        let (mut took, mut check) = (0, true);
        let mut names = Vec::with_capacity(batch);
        while took < count {
            let Some(first) = offers.wait_timeout(Duration::from_secs(600))? else {
                return Err(PoolBenchError::Provider(format!(
                    "{took} of {count} offer events came within 600 s"
                )));
            };
            names.clear();
            let mut next = Some(first);
            while let Some(e) = next {
                if let Some(name) = e.cdo.filter(|n| n.starts_with(prefix)) {
                    names.push(name);
                }
                next = if names.len() < batch {
                    offers.poll()?
                } else {
                    None
                };
            }
            let refs: Vec<&str> = names.iter().map(String::as_str).collect();
            for got in consumer.fetch_many(&refs)? {
                let (data, _) = got?;
                if check {
                    verify(size, data.as_slice())?;
                }
            }
            check = self.verify_all;
            took += names.len();
        }
        Ok(())
    }
}

/// The name prefix of the event-driven stream's CDOs of a size (`PREFIX/i`).
fn event_prefix(size: usize) -> String {
    format!("bench-events-{size}")
}

/// The provider's side of `events SIZE COUNT` (`stream` is `SIZE COUNT`): COUNT fresh
/// buffers of SIZE filled with the benchmark's pattern, with their CDOs' names.
///
/// # Errors
/// A malformed command; a buffer that cannot be made.
pub(super) fn prepare(
    args: &ProviderArgs,
    stream: &str,
) -> Result<Vec<(String, Buffer)>, PoolBenchError> {
    let mut words = stream.split_whitespace().map(str::parse::<usize>);
    let (Some(Ok(size)), Some(Ok(count))) = (words.next(), words.next()) else {
        return Err(PoolBenchError::Provider(format!(
            "a bad command \"events {stream}\": events SIZE COUNT"
        )));
    };
    (0..count)
        .map(|i| {
            let mut buf = args.buffers.make(size)?;
            pattern::fill(buf.as_mut_slice(), SEED);
            Ok((format!("{}/{i}", event_prefix(size)), buf))
        })
        .collect()
}

/// How many offers the event-driven stream's provider has in flight: a producer that
/// writes many fields at once (measured: 16 offered 37,800 8-byte CDOs/s here, 64 43,200,
/// 256 58,200, before the blocking client corked its polls).
const OFFERS_IN_FLIGHT: usize = 256;

/// Offers the `prepared` CDOs (name and filled buffer) as fast as it can,
/// [`OFFERS_IN_FLIGHT`] offers in flight; their ids.
pub(super) fn offer_stream(
    client: &Client,
    prepared: Vec<(String, Buffer)>,
    batch: usize,
) -> Result<Vec<pool::proto::CdoId>, PoolBenchError> {
    use futures::{StreamExt, TryStreamExt};
    let c = client.as_async();
    if batch > 0 {
        return offer_batches(client, prepared, batch);
    }
    let one = |(name, buf): (String, Buffer)| async move {
        let cdo = c.declare(&name)?;
        c.seal_and_offer(cdo, Attributes::new(), buf).await?;
        Ok::<_, PoolBenchError>(cdo)
    };
    client.block_on(
        futures::stream::iter(prepared)
            .map(one)
            .buffer_unordered(OFFERS_IN_FLIGHT)
            .try_collect(),
    )
}

/// [`offer_stream`] in batches of `batch` (`offer_many`), two in flight.
fn offer_batches(
    client: &Client,
    prepared: Vec<(String, Buffer)>,
    batch: usize,
) -> Result<Vec<pool::proto::CdoId>, PoolBenchError> {
    use futures::{StreamExt, TryStreamExt};
    let c = client.as_async();
    let mut items = prepared.into_iter().peekable();
    let batches = std::iter::from_fn(move || {
        items.peek()?;
        let b: Vec<pool::NewOffer> = (items.by_ref().take(batch))
            .map(|(name, buf)| (name, Attributes::new(), buf))
            .collect();
        Some(b)
    });
    let offered: Vec<Vec<pool::proto::CdoId>> = client.block_on(
        futures::stream::iter(batches)
            .map(|b| async move {
                let ids = c.offer_many(b).await?;
                ids.into_iter()
                    .map(|r| r.map_err(PoolBenchError::from))
                    .collect::<Result<Vec<_>, _>>()
            })
            .buffer_unordered(2)
            .try_collect(),
    )?;
    Ok(offered.into_iter().flatten().collect())
}
