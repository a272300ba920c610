//! Selectors: Maestro's s-expression queries over CDO attributes, used by subscriptions.
//!
//! ```text
//! (has .maestro.core.cdo.name)
//! (.user.step = 2)                  ; infix, as in Maestro
//! (>= .user.step 2)                 ; prefix works too
//! (and (step >= 2) (not (kind = "draft")))
//! (or (.maestro.core.cdo.name ~= "^field-[0-9]+$") (has .user.urgent))
//! (.user.taken < "2026-01-01T00:00:00Z")   ; typed by the schema: a timestamp
//! ```
//!
//! Keys starting with `.` are absolute; others are relative to the namespace the selector
//! is parsed in (as `mstro_cdo_selector_create`'s `nspace`). Operators: `= != < <= > >=`
//! and `~=` (regular expression match, `regex` crate syntax: linear time, safe to run on
//! the pool manager; at most [`MAX_REGEXES`] per selector, each compiled within
//! [`REGEX_SIZE_LIMIT`] bytes). Values: integers, decimals, `"strings"` (with `\"` and `\\`),
//! `true`/`false`. With [`Schemas`] the literal takes the key's declared type (a quoted
//! timestamp becomes a timestamp, a number given for a `str()` key is an error).
//!
//! Semantics: a comparison on a key the CDO does not have is false (so `(not (k = 1))` is
//! true there); numbers compare across int/uint/double; other types compare only with
//! their own type, and `!=` is true between different types. An empty selector matches
//! everything.
//!
//! The application parses (errors point at the column); the parsed [`Expr`] travels to the
//! pool manager, which [`Selector::compile`]s it again (bounded depth and size, regexes
//! compiled) and evaluates it for every event. What a compiled selector costs the manager
//! is known ([`Selector::memory`], [`Selector::weight`]): the manager charges the first
//! to the subscriber's quota and paces its scans by the second.

mod parse;
#[cfg(test)]
mod tests;
mod wire;

use std::cmp::Ordering;

use serde::{Deserialize, Serialize};

use crate::attr::{AttrValue, Attributes};
use crate::schema::Schemas;
use parse::shorten;
use wire::Flat;

/// Deepest nesting accepted.
pub const MAX_DEPTH: usize = 32;
/// Most nodes in one selector.
pub const MAX_NODES: usize = 1024;
/// Most regular expressions in one selector.
pub const MAX_REGEXES: usize = 16;
/// Largest compiled regular expression (its automaton), in bytes: `\w{20}` with Unicode
/// classes does not fit (write `[A-Za-z0-9_]{20}` or `(?-u:\w){20}`).
pub const REGEX_SIZE_LIMIT: usize = 64 << 10;
/// The lazy DFA's cache of one regular expression, in bytes (past it the search goes on
/// in linear time without it).
const REGEX_CACHE: usize = 32 << 10;
/// Most bytes one compiled selector may take.
pub const MAX_SELECTOR_MEMORY: usize = 2 << 20;

/// A comparison operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum CmpOp {
    /// `=`
    Eq,
    /// `!=`
    Ne,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
}

impl CmpOp {
    fn parse(s: &str) -> Option<CmpOp> {
        Some(match s {
            "=" | "==" => CmpOp::Eq,
            "!=" => CmpOp::Ne,
            "<" => CmpOp::Lt,
            "<=" => CmpOp::Le,
            ">" => CmpOp::Gt,
            ">=" => CmpOp::Ge,
            _ => return None,
        })
    }

    fn holds(self, o: Ordering) -> bool {
        match self {
            CmpOp::Eq => o == Ordering::Equal,
            CmpOp::Ne => o != Ordering::Equal,
            CmpOp::Lt => o == Ordering::Less,
            CmpOp::Le => o != Ordering::Greater,
            CmpOp::Gt => o == Ordering::Greater,
            CmpOp::Ge => o != Ordering::Less,
        }
    }
}

/// A parsed selector, as it travels to the pool manager.
///
/// On the wire (and in any serde format) an `Expr` is flat: its terms in prefix order
/// (`Term`), so neither encoding nor decoding recurses as deep as the tree is. Decoding
/// rebuilds the tree with an explicit stack and refuses more than [`MAX_DEPTH`] levels or
/// [`MAX_NODES`] terms, so a crafted frame can neither overflow the decoder's stack nor
/// build a tree whose drop would.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(try_from = "Flat")]
pub enum Expr {
    /// Matches everything (the empty selector).
    All,
    /// `(has KEY)`
    Has(String),
    /// `(KEY OP VALUE)`
    Cmp {
        /// The absolute key.
        key: String,
        /// The operator.
        op: CmpOp,
        /// The typed value.
        value: AttrValue,
    },
    /// `(KEY ~= "regex")`
    Match {
        /// The absolute key.
        key: String,
        /// The regular expression.
        pattern: String,
    },
    /// `(and ...)`: all hold (true when empty).
    And(Vec<Expr>),
    /// `(or ...)`: one holds (false when empty).
    Or(Vec<Expr>),
    /// `(not X)`
    Not(Box<Expr>),
}

impl Expr {
    /// The keys the selector looks at, in the order written, each once (walked with a
    /// stack of its own: no recursion however deep the expression).
    pub fn keys(&self) -> Vec<&str> {
        let mut keys: Vec<&str> = Vec::new();
        let mut todo = vec![self];
        while let Some(e) = todo.pop() {
            match e {
                Expr::All => {}
                Expr::Has(key) | Expr::Cmp { key, .. } | Expr::Match { key, .. } => {
                    if !keys.contains(&key.as_str()) {
                        keys.push(key);
                    }
                }
                Expr::And(es) | Expr::Or(es) => todo.extend(es.iter().rev()),
                Expr::Not(e) => todo.push(e),
            }
        }
        keys
    }
}

/// Why a selector was refused: where and what, and what to write instead.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SelectorError {
    /// The 1-based column (in characters) of the offending token; 0 for whole-selector
    /// problems found after parsing.
    pub column: usize,
    /// What is wrong and what to do.
    pub message: String,
    /// The selector text (shortened).
    pub text: String,
}

/// A compiled selector, ready to evaluate.
#[derive(Clone, Debug)]
pub struct Selector {
    expr: Expr,
    node: Node,
    /// Bytes its compiled form takes (regexes with their caches).
    memory: usize,
    /// Its terms (each evaluation looks at up to this many), regexes counted 8 each.
    weight: usize,
}

/// The evaluated form: [`Expr`] with regexes compiled.
#[derive(Clone, Debug)]
enum Node {
    All,
    Has(String),
    Cmp(String, CmpOp, AttrValue),
    Match(String, regex_automata::meta::Regex),
    And(Vec<Node>),
    Or(Vec<Node>),
    Not(Box<Node>),
}

impl Selector {
    /// The selector that matches everything.
    pub fn all() -> Selector {
        Selector {
            expr: Expr::All,
            node: Node::All,
            memory: 0,
            weight: 1,
        }
    }

    /// Parses `text`; relative keys get `namespace` in front; literals take the type
    /// `schemas` declare for their key. Blank text matches everything.
    ///
    /// # Errors
    /// [`SelectorError`] pointing at the column of the problem.
    pub fn parse(
        text: &str,
        namespace: &str,
        schemas: &Schemas,
    ) -> Result<Selector, SelectorError> {
        let Some(expr) = parse::expr(text, namespace, schemas)? else {
            return Ok(Selector::all());
        };
        Selector::compile(expr).map_err(|mut e| {
            e.text = shorten(text);
            e
        })
    }

    /// Checks and compiles an [`Expr`] received from elsewhere (the pool manager does this
    /// with what applications send).
    ///
    /// # Errors
    /// [`SelectorError`] (column 0) for too deep or too large selectors, bad regexes,
    /// more than [`MAX_REGEXES`] of them, one larger than [`REGEX_SIZE_LIMIT`] compiled, or
    /// all together more than [`MAX_SELECTOR_MEMORY`].
    pub fn compile(expr: Expr) -> Result<Selector, SelectorError> {
        let mut cost = Cost::default();
        let node = compile(&expr, 0, &mut cost)?;
        Ok(Selector {
            expr,
            node,
            memory: cost.memory,
            weight: cost.nodes + 8 * cost.regexes,
        })
    }

    /// Bytes the compiled form takes beyond the wire form: each regex's automaton and its
    /// search cache (what a subscription is charged for it).
    pub fn memory(&self) -> usize {
        self.memory
    }

    /// How much one evaluation may cost, in terms looked at (a regex counting 8): at
    /// least 1. Scans over many CDOs divide their budget by it.
    pub fn weight(&self) -> usize {
        self.weight.max(1)
    }

    /// The parsed form, to send to the pool manager.
    pub fn expr(&self) -> &Expr {
        &self.expr
    }

    /// Whether a CDO with `attrs` matches.
    pub fn matches(&self, attrs: &Attributes) -> bool {
        self.node.eval(attrs)
    }
}

/// `selector column C: MESSAGE`, the text and a caret under the column; a problem of the
/// whole selector (column 0) as `selector: MESSAGE` alone.
impl std::fmt::Display for SelectorError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.column == 0 {
            return write!(f, "selector: {}", self.message);
        }
        write!(
            f,
            "selector column {}: {}\n  {}\n  {:>width$}",
            self.column,
            self.message,
            self.text,
            "^",
            width = self.column
        )
    }
}

impl std::error::Error for SelectorError {}

pub(super) fn whole(message: String) -> SelectorError {
    SelectorError {
        column: 0,
        message,
        text: String::new(),
    }
}

/// What compiling a selector took so far.
#[derive(Default)]
struct Cost {
    nodes: usize,
    regexes: usize,
    memory: usize,
}

fn compile(e: &Expr, depth: usize, cost: &mut Cost) -> Result<Node, SelectorError> {
    cost.nodes += 1;
    if depth > MAX_DEPTH || cost.nodes > MAX_NODES {
        return Err(whole(format!(
            "more than {MAX_DEPTH} levels or {MAX_NODES} terms; split the subscription"
        )));
    }
    let all = |v: &[Expr], cost: &mut Cost| {
        v.iter()
            .map(|x| compile(x, depth + 1, cost))
            .collect::<Result<Vec<_>, _>>()
    };
    Ok(match e {
        Expr::All => Node::All,
        Expr::Has(k) => Node::Has(k.clone()),
        Expr::Cmp { key, op, value } => Node::Cmp(key.clone(), *op, value.clone()),
        Expr::Match { key, pattern } => {
            cost.regexes += 1;
            if cost.regexes > MAX_REGEXES {
                return Err(whole(format!(
                    "more than {MAX_REGEXES} regular expressions; split the subscription or match fewer"
                )));
            }
            let re = compile_regex(pattern)?;
            cost.memory += re.memory_usage() + REGEX_CACHE;
            if cost.memory > MAX_SELECTOR_MEMORY {
                return Err(whole(format!(
                    "its regular expressions take more than {} KiB compiled; simplify them (ASCII classes such as [A-Za-z0-9_] are far smaller than Unicode's \\w) or split the subscription",
                    MAX_SELECTOR_MEMORY >> 10
                )));
            }
            Node::Match(key.clone(), re)
        }
        Expr::And(v) => Node::And(all(v, cost)?),
        Expr::Or(v) => Node::Or(all(v, cost)?),
        Expr::Not(x) => Node::Not(Box::new(compile(x, depth + 1, cost)?)),
    })
}

/// Compiles one regular expression within [`REGEX_SIZE_LIMIT`] and [`REGEX_CACHE`].
fn compile_regex(pattern: &str) -> Result<regex_automata::meta::Regex, SelectorError> {
    use regex_automata::meta;
    let config = meta::Config::new()
        .nfa_size_limit(Some(REGEX_SIZE_LIMIT))
        .onepass_size_limit(Some(REGEX_SIZE_LIMIT))
        .dfa(false)
        .hybrid_cache_capacity(REGEX_CACHE);
    meta::Regex::builder()
        .configure(config)
        .build(pattern)
        .map_err(|e| {
            let why = match (e.size_limit(), e.syntax_error()) {
                (Some(limit), _) => format!(
                    "it compiles to more than {} KiB (Unicode classes such as \\w repeated are large: use [A-Za-z0-9_] or (?-u:\\w))",
                    limit >> 10
                ),
                // The parser's own words: the pattern with a caret and `error: WHAT`.
                (None, Some(syntax)) => syntax
                    .to_string()
                    .lines()
                    .find_map(|l| l.strip_prefix("error: "))
                    .unwrap_or("it does not parse")
                    .to_string(),
                (None, None) => e.to_string(),
            };
            whole(format!("bad regular expression {pattern:?}: {why}"))
        })
}

impl Node {
    fn eval(&self, attrs: &Attributes) -> bool {
        match self {
            Node::All => true,
            Node::Has(k) => attrs.contains_key(k),
            Node::Cmp(k, op, v) => attrs.get(k).is_some_and(|a| match compare(a, v) {
                Some(o) => op.holds(o),
                None => *op == CmpOp::Ne,
            }),
            Node::Match(k, re) => matches!(attrs.get(k), Some(AttrValue::Str(s)) if re.is_match(s)),
            Node::And(v) => v.iter().all(|n| n.eval(attrs)),
            Node::Or(v) => v.iter().any(|n| n.eval(attrs)),
            Node::Not(n) => !n.eval(attrs),
        }
    }
}

/// Orders two values: numbers across their types, others within their own type.
fn compare(a: &AttrValue, b: &AttrValue) -> Option<Ordering> {
    use AttrValue as V;
    let int = |v: &V| match v {
        V::Int(i) => Some(i128::from(*i)),
        V::Uint(u) => Some(i128::from(*u)),
        _ => None,
    };
    let float = |v: &V| match v {
        V::Double(d) => Some(*d),
        V::Int(i) => Some(*i as f64),
        V::Uint(u) => Some(*u as f64),
        _ => None,
    };
    match (a, b) {
        (V::Str(x), V::Str(y)) => Some(x.cmp(y)),
        (V::Bool(x), V::Bool(y)) => Some(x.cmp(y)),
        (V::Timestamp(x), V::Timestamp(y)) => Some(x.cmp(y)),
        (V::Blob(x), V::Blob(y)) => Some(x.cmp(y)),
        _ => match (int(a), int(b)) {
            (Some(x), Some(y)) => Some(x.cmp(&y)),
            _ => float(a)?.partial_cmp(&float(b)?),
        },
    }
}
