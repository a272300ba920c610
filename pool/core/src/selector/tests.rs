//! Parsing, typing, evaluation and the wire form of selectors.

use super::wire::{Flat, Term};
use super::*;

const SCHEMA: &str = "schema-name: sel
schema-version: 1
schema-namespace: .user.
maestro-attributes:
  - key: step
    type: int()
  - key: kind
    type: str()
  - key: taken
    type: timestamp()
  - key: ratio
    type: double()
";

fn schemas() -> Schemas {
    let mut s = Schemas::builtin();
    s.load_str(SCHEMA, "sel").expect("schema");
    s
}

fn sel(text: &str) -> Selector {
    Selector::parse(text, ".user.", &schemas()).unwrap_or_else(|e| panic!("{text}: {e}"))
}

fn attrs(pairs: &[(&str, AttrValue)]) -> Attributes {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_string(), v.clone()))
        .collect()
}

#[test]
fn infix_prefix_and_relative_keys_agree() {
    let a = attrs(&[(".user.step", AttrValue::Int(2))]);
    for text in [
        "(.user.step = 2)",
        "(= .user.step 2)",
        "(step = 2)",
        "(step >= 2)",
        "(<= step 2)",
        "(step != 3)",
    ] {
        assert!(sel(text).matches(&a), "{text}");
    }
    for text in ["(step < 2)", "(step > 2)", "(step = 3)", "(other = 2)"] {
        assert!(!sel(text).matches(&a), "{text}");
    }
}

/// A namespace is taken with or without its dots: `maestro.core.cdo` and
/// `.maestro.core.cdo.` both make `name` the key `.maestro.core.cdo.name`.
#[test]
fn a_namespace_is_taken_with_or_without_its_dots() {
    let a = attrs(&[(".maestro.core.cdo.name", AttrValue::Str("f".into()))]);
    for ns in [
        "maestro.core.cdo",
        ".maestro.core.cdo",
        "maestro.core.cdo.",
        ".maestro.core.cdo.",
    ] {
        let s = Selector::parse("(name = \"f\")", ns, &schemas()).expect(ns);
        assert_eq!(s.expr.keys(), [".maestro.core.cdo.name"], "{ns}");
        assert!(s.matches(&a), "{ns}");
    }
}

/// A regular expression that does not parse says what the regex parser found, not where
/// in a list of patterns nobody wrote.
#[test]
fn a_bad_regular_expression_says_what_is_wrong() {
    let e = Selector::parse("(name ~= \"a(\")", ".user.", &schemas()).expect_err("a(");
    let said = e.to_string();
    assert!(
        said.contains("bad regular expression \"a(\": unclosed group"),
        "{said}"
    );
    assert!(
        !said.contains("column 0") && !said.contains("pattern 0"),
        "{said}"
    );
}

#[test]
fn boolean_structure_and_has() {
    let a = attrs(&[
        (".maestro.core.cdo.name", AttrValue::Str("field-12".into())),
        (".user.kind", AttrValue::Str("final".into())),
    ]);
    assert!(sel("(has .maestro.core.cdo.name)").matches(&a));
    assert!(!sel("(has step)").matches(&a));
    assert!(sel("(and (has kind) (not (kind = \"draft\")))").matches(&a));
    assert!(sel("(or (step = 1) (.maestro.core.cdo.name ~= \"^field-[0-9]+$\"))").matches(&a));
    assert!(!sel("(or)").matches(&a));
    assert!(sel("(and)").matches(&a));
    assert!(sel("").matches(&a));
    assert!(
        sel("(not (step = 1))").matches(&a),
        "missing key: the comparison is false"
    );
}

#[test]
fn numbers_compare_across_types_and_others_within() {
    let a = attrs(&[
        (".user.ratio", AttrValue::Double(0.5)),
        (".x.u", AttrValue::Uint(u64::MAX)),
        (".x.flag", AttrValue::Bool(true)),
    ]);
    assert!(sel("(ratio < 1)").matches(&a));
    assert!(sel("(ratio > 0.25)").matches(&a));
    assert!(sel("(.x.u > -1)").matches(&a));
    assert!(sel("(.x.u = 18446744073709551615)").matches(&a));
    assert!(sel("(.x.flag = true)").matches(&a));
    assert!(
        sel("(.x.flag != \"true\")").matches(&a),
        "a str is never equal to a bool"
    );
    assert!(!sel("(.x.flag < \"true\")").matches(&a));
}

#[test]
fn literals_take_the_schema_type() {
    let s = sel("(taken < \"2026-01-01T00:00:00Z\")");
    let Expr::Cmp { value, .. } = s.expr() else {
        panic!("{:?}", s.expr());
    };
    assert!(matches!(value, AttrValue::Timestamp(_)), "{value:?}");
    let before = attrs(&[(".user.taken", AttrValue::Timestamp(1_000))]);
    assert!(s.matches(&before));
    let e = Selector::parse("(kind = 3)", ".user.", &schemas()).expect_err("typed");
    assert!(e.message.contains("str()"), "{e}");
    let e = Selector::parse("(step ~= \"a\")", ".user.", &schemas()).expect_err("typed");
    assert!(e.message.contains("~= matches strings only"), "{e}");
    let e = Selector::parse("(taken < \"yesterday\")", ".user.", &schemas()).expect_err("typed");
    assert!(e.message.contains("timestamp"), "{e}");
}

#[test]
fn errors_point_at_the_column() {
    let cases: &[(&str, usize, &str)] = &[
        ("(step = 2", 10, "close every '('"),
        ("(step 2)", 7, "expected an operator"),
        ("step = 2", 1, "expected '('"),
        ("(and (step = 1) x)", 17, "expected ')'"),
        ("(step = two)", 9, "quote strings"),
        ("(kind = \"abc)", 9, "closing '\"'"),
        ("(kind ~= abc)", 10, "must be quoted"),
        ("(step = 1) (step = 2)", 12, "combine selectors"),
        ("(not (step = 1) (step = 2))", 17, "exactly one"),
        ("(\"k\" = 1)", 2, "after '('"),
        ("(has)", 5, "expected a key"),
        ("(kind = \"a\\q\")", 11, "unknown escape"),
    ];
    for (text, column, what) in cases {
        let e = Selector::parse(text, ".user.", &schemas()).expect_err(text);
        assert_eq!(e.column, *column, "{text}: {e}");
        assert!(e.message.contains(what), "{text}: {e}");
        let shown = e.to_string();
        assert!(shown.contains(text), "the message shows the text: {shown}");
        let caret = shown.lines().last().unwrap_or_default();
        assert_eq!(
            caret.len(),
            2 + column,
            "the caret sits under the column: {shown}"
        );
    }
    let e = Selector::parse("(kind ~= \"(\")", ".user.", &schemas()).expect_err("regex");
    assert!(e.message.contains("bad regular expression"), "{e}");
}

#[test]
fn received_selectors_are_bounded() {
    let mut deep = Expr::All;
    for _ in 0..(MAX_DEPTH + 2) {
        deep = Expr::Not(Box::new(deep));
    }
    assert!(Selector::compile(deep).is_err());
    let wide = Expr::And(vec![Expr::Has(".a".into()); MAX_NODES + 1]);
    assert!(Selector::compile(wide).is_err());
    let text = format!(
        "{}(has a){}",
        "(not ".repeat(MAX_DEPTH + 2),
        ")".repeat(MAX_DEPTH + 2)
    );
    assert!(Selector::parse(&text, "", &schemas()).is_err());
}

/// Random token soup and mutations of valid selectors: parsing never panics, and what
/// parses survives compile and evaluation.
#[test]
fn fuzzed_input_never_panics() {
    let pieces = [
        "(",
        ")",
        "(",
        ")",
        " ",
        "and",
        "or",
        "not",
        "has",
        "=",
        "!=",
        "<",
        "<=",
        ">",
        ">=",
        "~=",
        "step",
        ".user.kind",
        "kind",
        "\"",
        "\"x\"",
        "\"^a+\"",
        "\\",
        "1",
        "-2",
        "3.5",
        "1e309",
        "true",
        "18446744073709551616",
        "\"2026-01-01T00:00:00Z\"",
        "taken",
        "ü",
        "\t",
    ];
    let valid = [
        "(and (step >= 2) (not (kind = \"draft\")))",
        "(or (.maestro.core.cdo.name ~= \"^f\") (has .user.urgent))",
        "(taken < \"2026-01-01T00:00:00Z\")",
    ];
    let s = schemas();
    let a = attrs(&[
        (".user.step", AttrValue::Int(3)),
        (".user.kind", AttrValue::Str("aaa".into())),
        (".user.taken", AttrValue::Timestamp(5)),
    ]);
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut rand = move |n: usize| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % n as u64) as usize
    };
    let mut parsed = 0;
    for round in 0..50_000 {
        let text: String = if round % 2 == 0 {
            (0..rand(24))
                .map(|_| pieces[rand(pieces.len())])
                .collect::<Vec<_>>()
                .join(if rand(2) == 0 { " " } else { "" })
        } else {
            let mut t: Vec<char> = valid[rand(valid.len())].chars().collect();
            for _ in 0..=rand(3) {
                let at = rand(t.len() + 1);
                match rand(3) {
                    0 if at < t.len() => {
                        t.remove(at);
                    }
                    1 => t.insert(at, pieces[rand(pieces.len())].chars().next().unwrap_or(' ')),
                    _ => t.truncate(at),
                }
            }
            t.into_iter().collect()
        };
        if let Ok(sel) = Selector::parse(&text, ".user.", &s) {
            parsed += 1;
            let again = Selector::compile(sel.expr().clone()).expect("a parsed selector compiles");
            assert_eq!(again.matches(&a), sel.matches(&a));
        }
    }
    assert!(
        parsed > 100,
        "the fuzzer should also produce valid selectors ({parsed})"
    );
}

fn wire(e: &Expr) -> Vec<u8> {
    postcard::to_allocvec(e).expect("encodes")
}

#[test]
fn expressions_travel_flat_and_come_back_whole() {
    let s = schemas();
    let text = r#"(and (step >= 2) (not (kind = "draft")) (or) (and) (or (has .x) (.y ~= "^a")))"#;
    let sel = Selector::parse(text, ".user.", &s).expect("parses");
    let back: Expr = postcard::from_bytes(&wire(sel.expr())).expect("decodes");
    assert_eq!(&back, sel.expr());
    let json = serde_json::to_string(sel.expr()).expect("json");
    assert_eq!(
        &serde_json::from_str::<Expr>(&json).expect("json back"),
        sel.expr()
    );
}

#[test]
fn deep_or_broken_wire_selectors_are_refused_without_recursion() {
    // 20,000 nested nots, as a crafted frame would carry them: refused, no stack overflow.
    let mut bytes = postcard::to_allocvec(&20_001u32).expect("count"); // varint count
    for _ in 0..20_000 {
        bytes.extend(postcard::to_allocvec(&Term::<String>::Not).expect("term"));
    }
    bytes.extend(postcard::to_allocvec(&Term::<String>::All).expect("term"));
    assert!(
        postcard::from_bytes::<Expr>(&bytes).is_err(),
        "20,000 levels refused"
    );
    // Encoding a tree that deep (a program may build one) neither recurses nor copies.
    let mut tree = Expr::All;
    for _ in 0..20_000 {
        tree = Expr::Not(Box::new(tree));
    }
    assert_eq!(wire(&tree), bytes);
    // (Dropping it would recurse as deep: left to the process's end.)
    std::mem::forget(tree);
    // Within the term budget but too deep.
    let deep = Flat(
        std::iter::repeat_n(Term::Not, MAX_DEPTH + 1)
            .chain([Term::All])
            .collect(),
    );
    let err = Expr::try_from(deep).expect_err("too deep");
    assert!(err.message.contains("levels"), "{err}");
    // Exactly the deepest allowed.
    let ok = Flat(
        std::iter::repeat_n(Term::Not, MAX_DEPTH)
            .chain([Term::All])
            .collect(),
    );
    let ok = Expr::try_from(ok).expect("MAX_DEPTH levels");
    Selector::compile(ok).expect("compiles at the limit");
    // Truncated and trailing terms.
    let err = Expr::try_from(Flat(vec![Term::And(2), Term::All])).expect_err("truncated");
    assert!(err.message.contains("ends inside"), "{err}");
    let err = Expr::try_from(Flat(vec![Term::All, Term::All])).expect_err("trailing");
    assert!(err.message.contains("after"), "{err}");
    // A huge announced operand count allocates nothing up front.
    let err = Expr::try_from(Flat(vec![Term::Or(u32::MAX), Term::All])).expect_err("short");
    assert!(err.message.contains("ends inside"), "{err}");
}

fn regexes(n: usize, pattern: &str) -> Expr {
    Expr::Or(
        (0..n)
            .map(|i| Expr::Match {
                key: format!(".user.k{i}"),
                pattern: pattern.to_string(),
            })
            .collect(),
    )
}

#[test]
fn regex_terms_are_bounded_in_number_size_and_memory() {
    // Issue #36's selector: 1,024 Unicode `\w{20}` terms; and 17 small ones.
    Selector::compile(regexes(1024, r"\w{20}")).expect_err("too big");
    let e = Selector::compile(regexes(MAX_REGEXES + 1, "[a-z]")).expect_err("too many");
    assert!(
        e.message.contains("more than 16 regular expressions"),
        "{e}"
    );
    // One alone compiles too big, and the message says what to write instead.
    let e = Selector::compile(regexes(1, r"\w{20}")).expect_err("too big");
    assert!(e.message.contains("[A-Za-z0-9_]"), "{e}");
    // Sixteen ASCII ones fit, and their price is known.
    let s = Selector::compile(regexes(MAX_REGEXES, r"[A-Za-z0-9_]{20}")).expect("fits");
    assert!(
        s.memory() > 0 && s.memory() <= MAX_SELECTOR_MEMORY,
        "{}",
        s.memory()
    );
    assert_eq!(s.weight(), 1 + MAX_REGEXES * 9);
    let mut a = Attributes::new();
    a.insert(
        ".user.k3".into(),
        AttrValue::Str("abcdefghijklmnopqrst".into()),
    );
    assert!(s.matches(&a));
    assert_eq!(Selector::all().memory(), 0);
}

#[test]
fn a_selectors_keys_are_listed_once_in_the_order_written() {
    let s = Selector::parse(
        "(and (.user.b = 1) (or (has .user.a) (not (.user.b = 2))) (.user.c ~= \"x\"))",
        ".user.",
        &crate::schema::Schemas::builtin(),
    )
    .expect("selector");
    assert_eq!(s.expr().keys(), [".user.b", ".user.a", ".user.c"]);
    assert!(Selector::all().expr().keys().is_empty());
}
