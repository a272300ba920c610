//! The selector parser on any text, with the built-in schemas and a user schema of every
//! type: it parses or says where the problem is, never panics, and what parses compiles
//! again from its parsed form (as the pool manager does with what it receives).
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use pool::schema::Schemas;
use pool::selector::Selector;

const USER_SCHEMA: &str = "schema-name: fuzz
schema-version: 1
schema-namespace: .fuzz.
maestro-attributes:
  - key: count
    type: int()
  - key: size
    type: uint()
  - key: ratio
    type: double()
  - key: label
    type: str()
  - key: flag
    type: bool()
  - key: when
    type: timestamp()
";

fn schemas() -> &'static Schemas {
    static S: OnceLock<Schemas> = OnceLock::new();
    S.get_or_init(|| {
        let mut s = Schemas::builtin();
        s.load_str(USER_SCHEMA, "fuzz")
            .expect("the fuzz schema loads");
        s
    })
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    for namespace in ["", ".fuzz."] {
        if let Ok(sel) = Selector::parse(&text, namespace, schemas()) {
            Selector::compile(sel.expr().clone()).expect("a parsed selector compiles again");
        }
    }
});
