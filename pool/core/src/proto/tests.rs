//! The wire protocol's round trips and refusals.

use super::*;
use crate::attr::{AttrValue, Attributes};
use fabric_types::{Address, MemoryFile};

#[test]
fn runs_of_done_are_packed_in_order() {
    let done = |op, cdo| FromPm::Done { op, cdo };
    let mut batch = vec![
        done(Op::Offer, 1),
        done(Op::Offer, 2),
        done(Op::Offer, 3),
        FromPm::Ready { cdo: 4 },
        done(Op::Offer, 5),
        done(Op::Seal, 6),
        done(Op::Seal, 7),
        done(Op::Offer, 8),
    ];
    pack_done(&mut batch);
    assert_eq!(
        batch,
        [
            FromPm::DoneMany {
                op: Op::Offer,
                cdos: vec![1, 2, 3]
            },
            FromPm::Ready { cdo: 4 },
            done(Op::Offer, 5),
            FromPm::DoneMany {
                op: Op::Seal,
                cdos: vec![6, 7]
            },
            done(Op::Offer, 8),
        ]
    );
    let mut empty = Vec::new();
    pack_done(&mut empty);
    assert!(empty.is_empty());
}

/// Messages are moved through queues and channels by value: the rare big ones (JOIN,
/// subscriptions, events) are boxed so the frequent ones stay small. The largest
/// frequent one is `SealOffer` (CDO, attributes, region, the thin extras): 72 bytes
/// with the tag; boxing its attributes instead would cost an allocation per offer. From
/// the PM the largest is `Ticket` (endpoint, region, attributes, the boxed
/// process-memory announcement): 136 bytes.
#[test]
fn messages_stay_small() {
    assert!(
        std::mem::size_of::<ToPm>() <= 72,
        "{}",
        std::mem::size_of::<ToPm>()
    );
    assert!(
        std::mem::size_of::<FromPm>() <= 136,
        "{}",
        std::mem::size_of::<FromPm>()
    );
}

fn sample() -> Vec<ToPm> {
    let mut attributes = Attributes::default();
    attributes.insert(".user.step".into(), AttrValue::Int(2));
    vec![
        ToPm::Declare {
            cdo: 7,
            name: "temperature".into(),
        },
        ToPm::Seal { cdo: 7, attributes },
        ToPm::Offer {
            cdo: 7,
            region: RemoteRegion {
                addr: 0,
                key: 9,
                len: 4096,
            },
            extras: OfferExtras::new(
                vec![RemoteRegion {
                    addr: 0,
                    key: 10,
                    len: 4096,
                }],
                Some(MemoryFile {
                    fd: 12,
                    inode: std::num::NonZeroU64::new(99).expect("non-zero"),
                    slab: None,
                }),
            ),
        },
        ToPm::Join(Box::new(Join {
            workflow: "wf".into(),
            component: "c".into(),
            index: -1,
            host: "n1".into(),
            process: 42,
            job: "slurm.pmix.7.0".into(),
            endpoint: Some(FabricEndpoint {
                provider: "tcp;ofi_rxm".into(),
                address: Address(vec![1, 2, 3]),
            }),
            alternates: Vec::new(),
            networks: vec![Some("10.0.0.1/24".parse().expect("subnet"))],
            memory: Some(ProcessMemory {
                pid: 4242,
                token: 7,
                token_addr: 0x7fff_0000_1000,
            }),
            credential: None,
            nics: Nics::default(),
            gfs: Some("/scratch/wf".into()),
            role: Role::App,
            proof: vec![0; 32],
            reclaim: Some(crate::proto::Reclaim {
                app: 3,
                generation: 77,
                last_serial: 9,
            }),
            member: Some(3),
        })),
        ToPm::TransferDone {
            transfer: 3,
            error: Some("peer gone".into()),
            direct: None,
        },
        ToPm::Withdraw {
            cdo: 4,
            keep: Some("/scratch/wf/maestro-gfs-n1_7-00/4".into()),
        },
        ToPm::Spilled {
            cdo: 5,
            file: Err("disk full".into()),
        },
    ]
}

#[test]
fn batches_round_trip_and_stream_split() {
    let a = encode(&sample()).expect("encode");
    let b = encode(&[ToPm::Leave]).expect("encode");
    let mut stream = [a.clone(), b].concat();
    stream.extend_from_slice(&a[..5]); // a partial third frame
    let mut got: Vec<ToPm> = Vec::new();
    drain_frames(&mut stream, |m| got.push(m)).expect("decode");
    let n = sample().len();
    assert_eq!(got.len(), n + 1);
    assert_eq!(&got[..n], &sample()[..]);
    assert_eq!(got[n], ToPm::Leave);
    assert_eq!(stream, a[..5]);
}

#[test]
fn large_batches_split_into_frames_that_fit() {
    let chunk = |i: u64| {
        ToPm::Chunk(Chunk {
            transfer: i,
            offset: 0,
            data: vec![i as u8; 3 << 20],
        })
    };
    let batch: Vec<ToPm> = (0..12).map(chunk).collect();
    assert!(matches!(encode(&batch), Err(FrameError::TooLarge(_))));
    // Appended to what the buffer held.
    let mut stream = encode(&[ToPm::Leave]).expect("encode");
    encode_split_into(&batch, &mut stream).expect("split");
    let mut frames = 0;
    let mut at = 0;
    while at < stream.len() {
        let header: [u8; HEADER] = stream[at..at + HEADER].try_into().expect("header");
        at += HEADER + payload_len(&header).expect("a frame");
        frames += 1;
    }
    assert_eq!(at, stream.len());
    assert!(frames >= 4, "{frames} frames");
    let mut got: Vec<ToPm> = Vec::new();
    drain_frames(&mut stream, |m| got.push(m)).expect("decode");
    assert_eq!(got[0], ToPm::Leave);
    assert_eq!(got[1..], batch[..]);
    let huge = ToPm::Chunk(Chunk {
        transfer: 1,
        offset: 0,
        data: vec![0; MAX_FRAME],
    });
    // A failed frame leaves nothing behind.
    let mut out = vec![1, 2, 3];
    assert!(matches!(
        encode_split_into(&[huge], &mut out),
        Err(FrameError::TooLarge(_))
    ));
    assert_eq!(out, [1, 2, 3]);
}

#[test]
fn bad_frames_are_errors() {
    let good = encode(&[ToPm::Leave]).expect("encode");
    let mut bad = good.clone();
    bad[0] = b'X';
    assert!(matches!(
        drain_frames::<ToPm>(&mut bad, drop),
        Err(FrameError::BadMagic(_))
    ));
    let mut v = good.clone();
    v[4] = 99;
    assert_eq!(
        drain_frames::<ToPm>(&mut v, drop),
        Err(FrameError::Version { got: 99 })
    );
    let mut big = good.clone();
    big[5..9].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(matches!(
        drain_frames::<ToPm>(&mut big, drop),
        Err(FrameError::TooLarge(_))
    ));
    let mut junk = encode(&[ToPm::Leave]).expect("encode");
    junk[HEADER] = 200; // an impossible enum tag
    assert!(matches!(
        drain_frames::<ToPm>(&mut junk, drop),
        Err(FrameError::Payload(_))
    ));
}

#[test]
fn random_bytes_never_panic() {
    // A deterministic generator: many short and long garbage streams.
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for round in 0..20_000 {
        let len = (round % 64) + 1;
        let mut buf: Vec<u8> = (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        if round % 3 == 0 {
            // A valid header over random payload.
            let mut h = MAGIC.to_vec();
            h.push(VERSION);
            h.extend_from_slice(&((len as u32).to_le_bytes()));
            buf = [h, buf].concat();
        }
        let _ = drain_frames::<ToPm>(&mut buf, drop);
        let _ = decode::<FromPm>(&buf);
    }
}

#[test]
fn a_first_frame_is_a_lone_join_or_nothing() {
    let join = sample()
        .into_iter()
        .find(|m| matches!(m, ToPm::Join(_)))
        .expect("the sample has a JOIN");
    let ToPm::Join(j) = &join else {
        unreachable!("found above")
    };
    let frame = encode(std::slice::from_ref(&join)).expect("encodes");
    assert_eq!(&decode_join(&frame[HEADER..]).expect("a JOIN"), j);
    let two = encode(&[join.clone(), ToPm::Leave]).expect("encodes");
    assert!(decode_join(&two[HEADER..]).is_err());
    let none = encode::<ToPm>(&[]).expect("encodes");
    assert!(decode_join(&none[HEADER..]).is_err());
    let other = encode(&[ToPm::Leave]).expect("encodes");
    let e = decode_join(&other[HEADER..]).expect_err("not a JOIN");
    assert!(e.to_string().contains("one JOIN"), "{e}");
    // The frame that overflowed the PM's stack before protocol 7's flat selectors: a
    // Subscribe whose selector nests 20,000 nots. Refused before JOIN, and harmless
    // (an error, no recursion) from a joined app.
    let mut payload = vec![1u8, 14, 0, 0];
    payload.extend(std::iter::repeat_n(6u8, 20_000));
    payload.extend([0u8; 4]);
    assert!(decode_join(&payload).is_err());
    let _ = decode::<ToPm>(&payload);
}

// The views observers get, over the wire.
fn page() -> crate::view::View {
    crate::view::View::Cdos(crate::view::CdoPage {
        cdos: vec![crate::view::CdoView {
            id: 1 << 40 | 1,
            name: "field".into(),
            app: "producer:0".into(),
            size: Some(4096),
            state: "offered".into(),
            providers: vec!["producer:0".into()],
            waiting: 2,
            age_s: 3,
            attributes: Attributes::from([(".user.step".into(), AttrValue::Int(7))]),
        }],
        next: Some(5),
        total: 9,
    })
}

#[test]
fn views_cross_the_wire_and_read_as_plain_json() {
    let msg = FromPm::View {
        id: 3,
        view: Box::new(page()),
    };
    let mut frame = encode(std::slice::from_ref(&msg)).expect("encode");
    let mut got: Vec<FromPm> = Vec::new();
    drain_frames(&mut frame, |m| got.push(m)).expect("decode");
    assert_eq!(got, [msg]);
    let json = serde_json::to_value(page()).expect("json");
    assert_eq!(json["Cdos"]["cdos"][0]["attributes"][".user.step"], 7);
    assert_eq!(json["Cdos"]["next"], 5);
}

#[test]
fn inline_bytes_round_trip_in_frames_and_json() {
    let ticket = FromPm::Ticket {
        transfer: 9,
        cdo: 3,
        source: Source::Inline {
            bytes: InlineBytes((0..=255u8).collect::<Vec<_>>().into()),
        },
        attributes: crate::attr::Attributes::new(),
        provider: "p:0".into(),
        completes_demand: true,
    };
    let mut frame = encode(std::slice::from_ref(&ticket)).expect("encode");
    let mut got: Vec<FromPm> = Vec::new();
    drain_frames(&mut frame, |m| got.push(m)).expect("decode");
    assert_eq!(got, std::slice::from_ref(&ticket));
    // A format that writes bytes as a sequence of numbers reads them back too.
    let json = serde_json::to_string(&ticket).expect("json");
    assert_eq!(
        serde_json::from_str::<FromPm>(&json).expect("from json"),
        ticket
    );
}

/// An endpoint address travels as its bytes (length and bytes), not as hex: every RMA ticket
/// carries one.
#[test]
fn addresses_travel_as_bytes() {
    let address = Address((0..=255).collect());
    let bytes = postcard::to_allocvec(&address).expect("encode");
    assert_eq!(bytes.len(), 2 + 256, "a varint length and the bytes");
    assert_eq!(&bytes[2..], &address.0[..]);
    let back: Address = postcard::from_bytes(&bytes).expect("decode");
    assert_eq!(back, address);
}

#[test]
fn a_name_is_one_to_4096_bytes_without_a_nul() {
    assert_eq!(check_name("t2m/step-6"), Ok(()));
    assert_eq!(check_name(&"x".repeat(MAX_NAME)), Ok(()));
    for bad in [String::new(), "x".repeat(MAX_NAME + 1), "a\0b".into()] {
        assert_eq!(check_name(&bad), Err(Refusal::BadName), "{bad:.10?}");
    }
}
