//! The Maestro layer end to end in one process (a local pool: no PMIx host, no
//! `MSTRO_POOL_MANAGER_INFO`): the instance's life, typed staged attributes, lent memory on
//! both sides, a demand that times out, events and acknowledgements, and the errors of
//! calls out of order. One test function: the instance is process-wide.

use std::time::Duration;

use mstro::{Attr, Status, SubscriptionOptions};
use pool::attr::{AttrValue, LAYOUT_ORDER, LOCAL_SIZE, NAME};
use pool::events::EventKind;
use pool::layout;

fn status<T: std::fmt::Debug>(r: mstro::Result<T>) -> Status {
    match r {
        Ok(v) => panic!("expected an error, got {v:?}"),
        Err(e) => e.status,
    }
}

#[test]
fn the_layer_in_a_local_pool() {
    assert_eq!(status(mstro::cdo_declare("x")), Status::Uninit);
    assert_eq!(status(mstro::finalize()), Status::Uninit);
    mstro::init(Some("layer-test"), Some("tester"), 3).expect("init");
    assert_eq!(status(mstro::init(None, None, 0)), Status::NotTwice);
    assert_eq!(status(mstro::pm_getinfo()), Status::Invstate);

    // Events of this app (no NO_LOCAL): offers and withdrawals of CDOs whose order is 1.
    let sel =
        mstro::selector_create(Some(".maestro.core.cdo."), "(layout.order = 1)").expect("selector");
    let kinds = EventKind::Offer.bit() | EventKind::Withdraw.bit();
    let sub = mstro::subscribe(Some(sel), kinds, SubscriptionOptions::default()).expect("sub");
    mstro::selector_dispose(sel).expect("dispose selector");
    assert!(mstro::subscription_poll(sub).expect("poll").is_empty());
    assert_eq!(
        status(mstro::subscription_wait(
            sub,
            Some(Duration::from_millis(50))
        )),
        Status::Timeout
    );

    // A producer lends its memory; attributes are typed by the built-in schema.
    let mut bytes: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
    let p = mstro::cdo_declare("field").expect("declare");
    assert_eq!(
        status(mstro::cdo_attribute_set(
            p,
            LAYOUT_ORDER,
            AttrValue::Uint(1)
        )),
        Status::Invarg,
        "layout.order is int()"
    );
    assert_eq!(
        status(mstro::cdo_attribute_set(p, ".user.nope", AttrValue::Int(1))),
        Status::Noent
    );
    mstro::cdo_attribute_set(p, LAYOUT_ORDER, AttrValue::Int(1)).expect("order");
    // SAFETY: `bytes` outlives the offer (withdrawn below) and is not written meanwhile.
    unsafe { mstro::cdo_set_user_memory(p, bytes.as_mut_ptr(), Some(bytes.len()), false, None) }
        .expect("lend");
    assert_eq!(
        mstro::cdo_attribute_get(p, LAYOUT_ORDER).expect("staged"),
        Attr::Value(AttrValue::Int(1))
    );
    assert_eq!(
        mstro::cdo_attribute_get(p, NAME).expect("name"),
        Attr::Value(AttrValue::Str("field".into()))
    );
    assert_eq!(
        status(mstro::cdo_offer(p)),
        Status::Invstate,
        "offer before seal"
    );
    mstro::cdo_seal(p).expect("seal");
    assert_eq!(
        status(mstro::cdo_attribute_set(p, LAYOUT_ORDER, AttrValue::Int(0))),
        Status::Invstate,
        "frozen after seal"
    );
    mstro::cdo_offer(p).expect("offer");
    let events = mstro::subscription_wait(sub, Some(Duration::from_secs(10))).expect("event");
    assert_eq!(events[0].kind, EventKind::Offer);
    assert_eq!(events[0].cdo.as_deref(), Some("field"));
    mstro::subscription_ack(sub, &events.iter().collect::<Vec<_>>()).expect("ack");

    // A consumer in this process: without lent memory it reads the provider's bytes in
    // place; with lent memory they land in it.
    let c = mstro::cdo_declare("field").expect("declare consumer");
    mstro::cdo_require(c).expect("require");
    mstro::cdo_demand(c).expect("demand");
    let (ptr, len) = mstro::cdo_access(c).expect("access");
    assert_eq!(
        (ptr, len),
        (bytes.as_ptr(), bytes.len()),
        "zero copy in-process"
    );
    assert_eq!(
        mstro::cdo_attribute_get(c, LOCAL_SIZE).expect("size"),
        Attr::Value(AttrValue::Uint(bytes.len() as u64))
    );
    assert_eq!(
        mstro::cdo_attribute_get(c, LAYOUT_ORDER).expect("sealed attribute travelled"),
        Attr::Value(AttrValue::Int(1))
    );
    assert_eq!(
        status(mstro::cdo_demand(c)),
        Status::Invstate,
        "demanded already"
    );
    mstro::cdo_dispose(c).expect("dispose consumer");

    let mut landing = vec![0u8; 200_000];
    let c2 = mstro::cdo_declare("field").expect("declare consumer 2");
    // SAFETY: `landing` outlives the CDO and is untouched until dispose.
    unsafe {
        mstro::cdo_set_user_memory(c2, landing.as_mut_ptr(), Some(landing.len()), true, None)
    }
    .expect("lend landing");
    mstro::cdo_demand(c2).expect("demand into lent memory");
    let (ptr, len) = mstro::cdo_access(c2).expect("access");
    assert_eq!((ptr, len), (landing.as_ptr(), bytes.len()));
    mstro::cdo_dispose(c2).expect("dispose consumer 2");
    assert_eq!(&landing[..bytes.len()], &bytes[..]);

    assert_eq!(
        status(mstro::cdo_dispose(p)),
        Status::Invstate,
        "dispose while offered"
    );
    mstro::cdo_withdraw(p).expect("withdraw");
    mstro::cdo_dispose(p).expect("dispose");
    assert_eq!(
        status(mstro::cdo_seal(p)),
        Status::Invarg,
        "use after dispose"
    );
    let withdrawn = mstro::subscription_wait(sub, Some(Duration::from_secs(10))).expect("event");
    assert_eq!(withdrawn[0].kind, EventKind::Withdraw);

    // A row-major 2x3 matrix of u16 read by a consumer that declared it column-major.
    let mut matrix: Vec<u8> = (0u16..6).flat_map(u16::to_ne_bytes).collect();
    let row = layout::Layout {
        order: layout::Order::RowMajor,
        element_size: 2,
        dims: vec![2, 3],
    };
    let col = layout::Layout {
        order: layout::Order::ColumnMajor,
        ..row.clone()
    };
    let set = |cdo, l: &layout::Layout| {
        let mut attrs = pool::attr::Attributes::new();
        l.to_attributes(&mut attrs);
        for (k, v) in attrs {
            mstro::cdo_attribute_set(cdo, &k, v).expect("layout attribute");
        }
    };
    let m = mstro::cdo_declare("matrix").expect("declare");
    set(m, &row);
    // SAFETY: `matrix` outlives the offer (withdrawn below) and is not written meanwhile.
    unsafe { mstro::cdo_set_user_memory(m, matrix.as_mut_ptr(), Some(12), false, None) }
        .expect("lend");
    mstro::cdo_seal(m).expect("seal");
    mstro::cdo_offer(m).expect("offer");
    let c = mstro::cdo_declare("matrix").expect("declare consumer");
    set(c, &col);
    mstro::cdo_demand(c).expect("demand");
    let arrived = mstro::cdo_bytes(c).expect("bytes");
    // SAFETY: `arrived` keeps the library's memory alive and unwritten while viewed.
    let view = unsafe { std::slice::from_raw_parts(arrived.as_ptr(), arrived.len()) };
    let got: Vec<u16> = view
        .chunks_exact(2)
        .map(|b| u16::from_ne_bytes([b[0], b[1]]))
        .collect();
    assert_eq!(got, [0, 3, 1, 4, 2, 5]);
    drop(arrived);
    assert_eq!(
        mstro::cdo_attribute_get(c, LAYOUT_ORDER).expect("order"),
        Attr::Value(AttrValue::Int(1)),
        "the consumer's layout"
    );
    mstro::cdo_dispose(c).expect("dispose consumer");
    // Only an order: which array it wants cannot be told.
    let c = mstro::cdo_declare("matrix").expect("declare consumer");
    mstro::cdo_attribute_set(c, LAYOUT_ORDER, AttrValue::Int(1)).expect("order");
    let e = mstro::cdo_demand(c).expect_err("incomplete layout");
    assert_eq!(e.status, Status::Invarg);
    assert!(
        e.message.contains("row-major 2x3 of 2-byte elements"),
        "{e:?}"
    );
    assert!(e.message.contains("element-size is missing"), "{e:?}");
    mstro::cdo_dispose(c).expect("dispose consumer");
    mstro::cdo_withdraw(m).expect("withdraw");
    mstro::cdo_dispose(m).expect("dispose");

    // Nobody offers this one.
    let lonely = mstro::cdo_declare("nobody-offers-this").expect("declare");
    assert_eq!(
        status(mstro::cdo_demand_within(
            lonely,
            Some(Duration::from_millis(100))
        )),
        Status::Timeout
    );
    mstro::cdo_retract(lonely).expect("retract");
    mstro::cdo_dispose(lonely).expect("dispose");

    assert_eq!(
        status(mstro::pm_start()),
        Status::NotTwice,
        "joined a local pool already"
    );
    mstro::subscription_dispose(sub).expect("dispose subscription");
    assert_eq!(status(mstro::subscription_poll(sub)), Status::Invarg);
    mstro::finalize().expect("finalize");
    assert_eq!(status(mstro::finalize()), Status::Uninit);
    mstro::init(Some("layer-test"), Some("again"), 0).expect("init after finalize");
    mstro::finalize().expect("finalize again");
    drop(bytes);
}
