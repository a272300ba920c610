//! Golden frames: the encoding of one message of every kind, for the current protocol
//! [`VERSION`], pinned in `golden/v<VERSION>.txt` beside this file. A change of the wire
//! format without a version bump fails here (the bytes differ); a new message kind fails
//! until it has a sample ([`covers_every_variant`]). After a deliberate change with its
//! version bump, write the new file
//! with `MAESTRO_BLESS=1 cargo test -p pool-core golden` and commit it.

use std::collections::BTreeMap;
use std::sync::Arc;

use fabric_types::{Address, MemoryFile, RemoteRegion};

use super::*;
use crate::attr::{AttrValue, Attributes};
use crate::events::{EventKind, FabricChange, PoolEvent, SubscribeOptions};
use crate::view::{Ls, Query, View};

/// A message's kind: the name of its variant, as `Debug` prints it.
fn kind<T: std::fmt::Debug>(m: &T) -> String {
    let printed = format!("{m:?}");
    printed
        .split(['(', ' ', '{'])
        .next()
        .unwrap_or_default()
        .to_string()
}

/// Checks that `samples` are one message of each variant, in declaration order: postcard
/// writes the variant's index first (one byte below 128), the samples' indices are 0, 1,
/// 2, ... and the next index is no variant (decoding it is refused as an unknown variant,
/// not as input that ends early). A variant added without a sample fails here.
fn covers_every_variant<T: serde::Serialize + serde::de::DeserializeOwned>(samples: &[T]) {
    let indices: Vec<u8> = samples
        .iter()
        .map(|m| postcard::to_allocvec(m).expect("encodes")[0])
        .collect();
    let expected: Vec<u8> = (0..samples.len()).map(|i| i as u8).collect();
    assert_eq!(
        indices, expected,
        "one sample per variant, in declaration order"
    );
    let next = postcard::from_bytes::<T>(&[samples.len() as u8]).err();
    assert!(
        matches!(next, Some(postcard::Error::SerdeDeCustom)),
        "variant {} exists but has no sample ({next:?})",
        samples.len()
    );
}

fn attributes() -> Attributes {
    Attributes::from([
        (".user.step".into(), AttrValue::Int(2)),
        (".user.param".into(), AttrValue::Str("t2m".into())),
    ])
}

fn region(key: u64) -> RemoteRegion {
    RemoteRegion {
        addr: 0x1000,
        key,
        len: 4096,
    }
}

fn endpoint() -> FabricEndpoint {
    FabricEndpoint {
        provider: "tcp;ofi_rxm".into(),
        address: Address(vec![1, 2, 3, 4]),
    }
}

fn gfs_file() -> GfsFile {
    GfsFile {
        path: "/scratch/wf/maestro-gfs-n1_7-00/5".into(),
        checksum: 0x0123_4567_89ab_cdef,
    }
}

fn selector() -> Box<Expr> {
    let schemas = crate::schema::Schemas::builtin();
    crate::selector::Selector::parse("(and (has .user.step) (.user.step >= 2))", "", &schemas)
        .expect("a selector")
        .expr()
        .clone()
        .into()
}

/// One message to the PM of each kind, in declaration order, every field set.
fn to_pm_samples() -> Vec<ToPm> {
    let memory = ProcessMemory {
        pid: 4242,
        token: 7,
        token_addr: 0x7fff_0000_1000,
    };
    let extras = || {
        OfferExtras::new(
            vec![region(10)],
            Some(MemoryFile {
                fd: 12,
                inode: std::num::NonZeroU64::new(99).expect("non-zero"),
                slab: Some(fabric_types::SlabPlace {
                    base: 0x7f00_0000_0000,
                    len: 32 << 20,
                }),
            }),
        )
    };
    vec![
        ToPm::Join(Box::new(Join {
            workflow: "wf".into(),
            component: "producer".into(),
            index: 1,
            host: "n1".into(),
            process: 42,
            job: "maestro.job.1".into(),
            endpoint: Some(endpoint()),
            alternates: vec![endpoint()],
            networks: vec![Some("10.0.0.1/24".parse().expect("subnet")), None],
            memory: Some(memory),
            credential: Some(vec![9; 4]),
            nics: Nics {
                names: vec!["eth0".into(), "eth1".into()],
                reason: Some("eth0, chosen by the PMIx host".into()),
            },
            gfs: Some("/scratch/wf".into()),
            role: Role::App,
            proof: vec![0xab; 32],
            reclaim: Some(crate::proto::Reclaim {
                app: 3,
                generation: 0x1234_5678,
                last_serial: 4242,
            }),
            member: Some(3),
        })),
        ToPm::Leave,
        ToPm::Declare {
            cdo: 1 << 40 | 1,
            name: "t2m/step-2".into(),
        },
        ToPm::Seal {
            cdo: 1 << 40 | 1,
            attributes: attributes(),
        },
        ToPm::Offer {
            cdo: 1 << 40 | 1,
            region: region(9),
            extras: extras(),
        },
        ToPm::SealOffer {
            cdo: 1 << 40 | 2,
            attributes: attributes(),
            region: region(11),
            extras: OfferExtras::default()
                .with_gfs(gfs_file())
                .with_unregistered(),
        },
        ToPm::Require { cdo: 2 << 40 | 1 },
        ToPm::Demand { cdo: 2 << 40 | 1 },
        ToPm::DemandGroup {
            group: 2 << 40 | 2,
            first: 2 << 40 | 3,
            capacity: 16,
        },
        ToPm::UseLease {
            cdo: 2 << 40 | 4,
            lease: 77,
        },
        ToPm::Took {
            cdo: 2 << 40 | 5,
            lease: 79,
            direct: Some(Direct::Copied),
        },
        ToPm::Release {
            leases: vec![77, 78],
        },
        ToPm::Retract { cdo: 2 << 40 | 1 },
        ToPm::Withdraw {
            cdo: 1 << 40 | 2,
            keep: Some("/scratch/wf/maestro-gfs-n1_7-00/5".into()),
        },
        ToPm::Dispose {
            cdo: 1 << 40 | 1,
            answer: true,
        },
        ToPm::Discard {
            local: 3,
            name: "t2m/step-2".into(),
        },
        ToPm::Spilled {
            cdo: 1 << 40 | 1,
            file: Ok(gfs_file()),
        },
        ToPm::TransferDone {
            transfer: 5,
            error: Some("peer gone".into()),
            direct: Some(Direct::Copied),
        },
        ToPm::Fetch {
            transfer: 5,
            offset: 4096,
            len: 8192,
        },
        ToPm::Chunk(Chunk {
            transfer: 5,
            offset: 0,
            data: vec![1, 2, 3],
        }),
        ToPm::Subscribe {
            local: 4,
            kinds: EventKind::Offer.into(),
            selector: selector(),
            options: SubscribeOptions {
                signal_before: true,
                require_ack: true,
                no_local: false,
                replay: true,
            },
        },
        ToPm::Unsubscribe { sub: 6 },
        ToPm::Ack { sub: 6, serial: 12 },
        ToPm::Report {
            change: FabricChange::Link {
                name: "eth1".into(),
                addresses: vec!["10.0.1.1/24".parse().expect("subnet")],
                up: false,
            },
        },
        ToPm::Query {
            id: 8,
            query: Query::Ls(Ls {
                selector: Some(selector()),
                after: Some(1 << 40 | 1),
                limit: 100,
                attributes: true,
            }),
        },
        ToPm::Replayed,
        ToPm::Taken { sub: 6, count: 256 },
    ]
}

/// One message from the PM of each kind, in declaration order, every field set.
fn from_pm_samples() -> Vec<FromPm> {
    let rma = Source::Rma {
        endpoint: Arc::new(endpoint()),
        region: region(9),
        via: 1,
        memory: None,
    };
    vec![
        FromPm::Challenge { nonce: [7; 32] },
        FromPm::Welcome {
            app: 2,
            pool: 0x5eed,
            keep: Some("/scratch/wf/maestro-gfs-n1_7-00".into()),
            lease_grace: std::time::Duration::from_millis(1500),
        },
        FromPm::Bye,
        FromPm::Done {
            op: Op::Seal,
            cdo: 1 << 40 | 1,
        },
        FromPm::DoneMany {
            op: Op::Declare,
            cdos: vec![1 << 40 | 1, 1 << 40 | 2],
        },
        FromPm::Discarded { local: 3, count: 1 },
        FromPm::Spill { cdo: 1 << 40 | 1 },
        FromPm::Ticket {
            transfer: 5,
            cdo: 2 << 40 | 1,
            source: rma.clone(),
            attributes: attributes(),
            provider: "producer:1".into(),
            completes_demand: true,
        },
        FromPm::Revoke { lease: 77 },
        FromPm::Ready { cdo: 2 << 40 | 1 },
        FromPm::Serve {
            transfer: 5,
            cdo: 1 << 40 | 1,
            offset: 0,
            len: 4096,
        },
        FromPm::Chunk(Chunk {
            transfer: 5,
            offset: 4096,
            data: vec![4, 5, 6],
        }),
        FromPm::Subscribed { local: 4, sub: 6 },
        FromPm::Event {
            sub: 6,
            event: Arc::new(PoolEvent {
                kind: EventKind::Offer,
                serial: 12,
                time: 1_700_000_000_000_000_000,
                before: true,
                needs_ack: true,
                app: 1,
                component: "producer".into(),
                index: 1,
                cdo: Some("t2m/step-2".into()),
                attributes: attributes(),
                detail: String::new(),
            })
            .into(),
            lease: Some(Box::new(Grant {
                lease: 77,
                source: Source::Gfs {
                    file: gfs_file(),
                    len: 4096,
                },
            })),
        },
        FromPm::AckTooLate { sub: 6, serial: 12 },
        FromPm::Refused {
            op: Op::Withdraw,
            cdo: Some(1 << 40 | 2),
            why: Refusal::NotKept("no GFS directory".into()),
        },
        FromPm::GroupMembers {
            group: 2 << 40 | 2,
            names: vec!["m0".into(), "m1".into()],
            attributes: attributes(),
        },
        FromPm::View {
            id: 8,
            view: Box::new(View::Status(crate::view::Status {
                workflow: "wf".into(),
                protocol: VERSION,
                uptime_ms: 1500,
                operations: BTreeMap::from([("offer".into(), 3)]),
                cdos: BTreeMap::from([("offered".into(), 3)]),
                ..Default::default()
            })),
        },
        FromPm::BytesDropped { cdo: 1 << 40 | 3 },
    ]
}

/// `SIDE::Kind hex` lines of each sample's frame.
fn lines<T: serde::Serialize + std::fmt::Debug>(samples: &[T], side: &str) -> Vec<String> {
    samples
        .iter()
        .map(|m| {
            let frame = encode(std::slice::from_ref(m)).expect("encodes");
            let hex: String = frame.iter().map(|b| format!("{b:02x}")).collect();
            format!("{side}::{} {hex}", kind(m))
        })
        .collect()
}

#[test]
fn every_message_kind_has_a_sample() {
    covers_every_variant(&to_pm_samples());
    covers_every_variant(&from_pm_samples());
}

#[test]
fn samples_decode_to_themselves() {
    for m in to_pm_samples() {
        let frame = encode(std::slice::from_ref(&m)).expect("encodes");
        let back: Vec<ToPm> = decode(&frame[HEADER..]).expect("decodes");
        assert_eq!(back, [m]);
    }
    for m in from_pm_samples() {
        let frame = encode(std::slice::from_ref(&m)).expect("encodes");
        let back: Vec<FromPm> = decode(&frame[HEADER..]).expect("decodes");
        assert_eq!(back, [m]);
    }
}

#[test]
fn the_current_version_encodes_as_pinned() {
    let mut now = lines(&to_pm_samples(), "ToPm");
    now.extend(lines(&from_pm_samples(), "FromPm"));
    let text = format!("{}\n", now.join("\n"));
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(format!("src/proto/golden/v{VERSION}.txt"));
    if std::env::var_os("MAESTRO_BLESS").is_some() {
        std::fs::create_dir_all(path.parent().expect("a directory")).expect("mkdir");
        std::fs::write(&path, &text).expect("write the golden file");
    }
    let pinned = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; a new protocol version is pinned with MAESTRO_BLESS=1 cargo test -p pool-core golden",
            path.display()
        )
    });
    for (was, is) in pinned.lines().zip(now.iter()) {
        assert_eq!(
            was, is,
            "the encoding changed under protocol version {VERSION}: bump proto::VERSION (and pin it with MAESTRO_BLESS=1)"
        );
    }
    assert_eq!(
        pinned.lines().count(),
        now.len(),
        "kinds added or removed under version {VERSION}"
    );
}

/// docs/protocol.md's tables name every message kind of the current version.
#[test]
fn the_protocol_docs_name_every_kind() {
    let doc = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/protocol.md"),
    )
    .expect("docs/protocol.md");
    let tables = doc
        .split(&format!("### Messages of protocol {VERSION}"))
        .nth(1)
        .unwrap_or_else(|| panic!("docs/protocol.md has no tables of protocol {VERSION}"));
    let kinds: Vec<String> = to_pm_samples()
        .iter()
        .map(kind)
        .chain(from_pm_samples().iter().map(kind))
        .collect();
    for kind in kinds {
        assert!(
            tables.contains(&format!("| `{kind}` |")),
            "docs/protocol.md does not describe {kind}"
        );
    }
}
