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
//! the pool manager). Values: integers, decimals, `"strings"` (with `\"` and `\\`),
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
//! compiled) and evaluates it for every event.

use std::cmp::Ordering;

use serde::{Deserialize, Serialize};

use crate::attr::{AttrValue, Attributes};
use crate::schema::{AttrType, Schemas};

/// Deepest nesting accepted.
pub const MAX_DEPTH: usize = 32;
/// Most nodes in one selector.
pub const MAX_NODES: usize = 1024;
/// Largest compiled regular expression, in bytes.
const REGEX_SIZE_LIMIT: usize = 1 << 20;

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

/// One term of an [`Expr`] in prefix order: the wire form (see [`Expr`]). Decoding reads
/// owned terms (`Term<String, AttrValue>`); encoding writes terms borrowed from the tree
/// (`Term<&str, &AttrValue>`), which serialize the same.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
enum Term<S = String, V = AttrValue> {
    All,
    Has(S),
    Cmp {
        key: S,
        op: CmpOp,
        value: V,
    },
    Match {
        key: S,
        pattern: S,
    },
    /// `(and ...)` over the next this many expressions.
    And(u32),
    /// `(or ...)` over the next this many expressions.
    Or(u32),
    /// `(not ...)` of the next expression.
    Not,
}

/// An [`Expr`]'s terms in prefix order, as decoding reads them.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(transparent)]
struct Flat(Vec<Term>);

impl Serialize for Expr {
    /// Writes the terms in prefix order, walking the tree with an explicit stack (no
    /// recursion, no copy, however it was built).
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut terms = Vec::new();
        let mut todo = vec![self];
        while let Some(e) = todo.pop() {
            terms.push(match e {
                Expr::All => Term::All,
                Expr::Has(k) => Term::Has(k.as_str()),
                Expr::Cmp { key, op, value } => Term::Cmp {
                    key: key.as_str(),
                    op: *op,
                    value,
                },
                Expr::Match { key, pattern } => Term::Match {
                    key: key.as_str(),
                    pattern: pattern.as_str(),
                },
                Expr::And(v) => {
                    todo.extend(v.iter().rev());
                    Term::And(count(v))
                }
                Expr::Or(v) => {
                    todo.extend(v.iter().rev());
                    Term::Or(count(v))
                }
                Expr::Not(x) => {
                    todo.push(x);
                    Term::Not
                }
            });
        }
        terms.serialize(s)
    }
}

/// An operand count as the wire carries it (no selector has 2^32 operands: the decoder
/// refuses more than [`MAX_NODES`] terms).
fn count(v: &[Expr]) -> u32 {
    u32::try_from(v.len()).unwrap_or(u32::MAX)
}

impl TryFrom<Flat> for Expr {
    type Error = SelectorError;

    /// Rebuilds the tree with an explicit stack, refusing too deep or too large input.
    fn try_from(Flat(terms): Flat) -> Result<Expr, SelectorError> {
        /// A term whose operands are still being read: `(and ...)`/`(or ...)` (its
        /// constructor, the operands so far, how many it has) or `(not ...)`.
        enum Open {
            List(fn(Vec<Expr>) -> Expr, Vec<Expr>, usize),
            Not,
        }
        let too_big = || {
            whole(format!(
                "more than {MAX_DEPTH} levels or {MAX_NODES} terms; split the subscription"
            ))
        };
        if terms.len() > MAX_NODES {
            return Err(too_big());
        }
        let mut stack: Vec<Open> = Vec::new();
        let mut terms = terms.into_iter();
        loop {
            let term = terms
                .next()
                .ok_or_else(|| whole("the selector ends inside an (and/or/not ...)".into()))?;
            if stack.len() > MAX_DEPTH {
                return Err(too_big());
            }
            let mut done = match term {
                Term::All => Expr::All,
                Term::Has(k) => Expr::Has(k),
                Term::Cmp { key, op, value } => Expr::Cmp { key, op, value },
                Term::Match { key, pattern } => Expr::Match { key, pattern },
                Term::And(0) => Expr::And(Vec::new()),
                Term::Or(0) => Expr::Or(Vec::new()),
                Term::And(n) => {
                    stack.push(Open::List(Expr::And, Vec::new(), n as usize));
                    continue;
                }
                Term::Or(n) => {
                    stack.push(Open::List(Expr::Or, Vec::new(), n as usize));
                    continue;
                }
                Term::Not => {
                    stack.push(Open::Not);
                    continue;
                }
            };
            // Hand the finished expression to the terms it completes.
            loop {
                match stack.pop() {
                    None if terms.next().is_some() => {
                        return Err(whole("terms after the selector's end".into()));
                    }
                    None => return Ok(done),
                    Some(Open::Not) => done = Expr::Not(Box::new(done)),
                    Some(Open::List(make, mut v, n)) => {
                        v.push(done);
                        if v.len() < n {
                            stack.push(Open::List(make, v, n));
                            break;
                        }
                        done = make(v);
                    }
                }
            }
        }
    }
}

/// Why a selector was refused: where and what, and what to write instead.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("selector column {column}: {message}\n  {text}\n  {caret:>width$}", caret = "^", width = column)]
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
}

/// The evaluated form: [`Expr`] with regexes compiled.
#[derive(Clone, Debug)]
enum Node {
    All,
    Has(String),
    Cmp(String, CmpOp, AttrValue),
    Match(String, regex::Regex),
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
        let tokens = tokenize(text)?;
        if tokens.is_empty() {
            return Ok(Selector::all());
        }
        let mut p = Parser {
            text,
            tokens: &tokens,
            at: 0,
            namespace,
            schemas,
            nodes: 0,
        };
        let expr = p.expr(0)?;
        if let Some(t) = tokens.get(p.at) {
            return Err(p.error(t.column, "text after the selector's closing ')'; combine selectors with (and ...) or (or ...)"));
        }
        Selector::compile(expr).map_err(|mut e| {
            e.text = shorten(text);
            e
        })
    }

    /// Checks and compiles an [`Expr`] received from elsewhere (the pool manager does this
    /// with what applications send).
    ///
    /// # Errors
    /// [`SelectorError`] (column 0) for too deep or too large selectors and bad regexes.
    pub fn compile(expr: Expr) -> Result<Selector, SelectorError> {
        let mut nodes = 0;
        let node = compile(&expr, 0, &mut nodes)?;
        Ok(Selector { expr, node })
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

fn whole(message: String) -> SelectorError {
    SelectorError {
        column: 0,
        message,
        text: String::new(),
    }
}

fn compile(e: &Expr, depth: usize, nodes: &mut usize) -> Result<Node, SelectorError> {
    *nodes += 1;
    if depth > MAX_DEPTH || *nodes > MAX_NODES {
        return Err(whole(format!(
            "more than {MAX_DEPTH} levels or {MAX_NODES} terms; split the subscription"
        )));
    }
    let all = |v: &[Expr], nodes: &mut usize| {
        v.iter()
            .map(|x| compile(x, depth + 1, nodes))
            .collect::<Result<Vec<_>, _>>()
    };
    Ok(match e {
        Expr::All => Node::All,
        Expr::Has(k) => Node::Has(k.clone()),
        Expr::Cmp { key, op, value } => Node::Cmp(key.clone(), *op, value.clone()),
        Expr::Match { key, pattern } => {
            let re = regex::RegexBuilder::new(pattern)
                .size_limit(REGEX_SIZE_LIMIT)
                .build()
                .map_err(|e| whole(format!("bad regular expression {pattern:?}: {e}")))?;
            Node::Match(key.clone(), re)
        }
        Expr::And(v) => Node::And(all(v, nodes)?),
        Expr::Or(v) => Node::Or(all(v, nodes)?),
        Expr::Not(x) => Node::Not(Box::new(compile(x, depth + 1, nodes)?)),
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

/// One token with its 1-based column.
#[derive(Debug, PartialEq)]
struct Token {
    column: usize,
    kind: Tok,
}

#[derive(Debug, PartialEq)]
enum Tok {
    Open,
    Close,
    Atom(String),
    Quoted(String),
}

fn shorten(text: &str) -> String {
    text.chars().take(120).collect()
}

fn tokenize(text: &str) -> Result<Vec<Token>, SelectorError> {
    let err = |column: usize, message: &str| SelectorError {
        column,
        message: message.to_string(),
        text: shorten(text),
    };
    let mut out = Vec::new();
    let mut chars = text.chars().enumerate().peekable();
    while let Some((i, c)) = chars.next() {
        let column = i + 1;
        match c {
            '(' => out.push(Token {
                column,
                kind: Tok::Open,
            }),
            ')' => out.push(Token {
                column,
                kind: Tok::Close,
            }),
            c if c.is_whitespace() => {}
            '"' => {
                let mut s = String::new();
                loop {
                    match chars.next() {
                        None => {
                            return Err(err(column, "string without its closing '\"'"));
                        }
                        Some((_, '"')) => break,
                        Some((j, '\\')) => match chars.next() {
                            Some((_, e @ ('"' | '\\'))) => s.push(e),
                            Some((_, 'n')) => s.push('\n'),
                            Some((_, 't')) => s.push('\t'),
                            _ => {
                                return Err(err(j + 1, "unknown escape; use \\\" \\\\ \\n or \\t"));
                            }
                        },
                        Some((_, ch)) => s.push(ch),
                    }
                }
                out.push(Token {
                    column,
                    kind: Tok::Quoted(s),
                });
            }
            c => {
                let mut s = String::from(c);
                while let Some(&(_, n)) = chars.peek() {
                    if n.is_whitespace() || n == '(' || n == ')' || n == '"' {
                        break;
                    }
                    s.push(n);
                    chars.next();
                }
                out.push(Token {
                    column,
                    kind: Tok::Atom(s),
                });
            }
        }
    }
    Ok(out)
}

struct Parser<'a> {
    text: &'a str,
    tokens: &'a [Token],
    at: usize,
    namespace: &'a str,
    schemas: &'a Schemas,
    nodes: usize,
}

/// What may follow `(`.
enum Head {
    And,
    Or,
    Not,
    Has,
    Op(Option<CmpOp>),
    Key(String),
}

impl<'a> Parser<'a> {
    fn error(&self, column: usize, message: impl Into<String>) -> SelectorError {
        SelectorError {
            column,
            message: message.into(),
            text: shorten(self.text),
        }
    }

    /// The column just past the text, for "expected more" errors.
    fn end(&self) -> usize {
        self.text.chars().count() + 1
    }

    fn next(&mut self, what: &str) -> Result<&'a Token, SelectorError> {
        let t = self.tokens.get(self.at).ok_or_else(|| {
            self.error(
                self.end(),
                format!("the selector ends where {what} should be; close every '('"),
            )
        })?;
        self.at += 1;
        Ok(t)
    }

    fn close(&mut self, what: &str) -> Result<(), SelectorError> {
        let t = self.next("')'")?;
        match &t.kind {
            Tok::Close => Ok(()),
            _ => {
                let column = t.column;
                Err(self.error(column, format!("expected ')' after {what}")))
            }
        }
    }

    fn key(&self, atom: &str) -> String {
        if atom.starts_with('.') {
            atom.to_string()
        } else {
            format!("{}{atom}", self.namespace)
        }
    }

    fn expr(&mut self, depth: usize) -> Result<Expr, SelectorError> {
        self.nodes += 1;
        let open = self.next("'('")?;
        let column = open.column;
        if open.kind != Tok::Open {
            return Err(self.error(
                column,
                "expected '(' to start a term such as (has KEY) or (KEY = VALUE)",
            ));
        }
        if depth > MAX_DEPTH || self.nodes > MAX_NODES {
            return Err(self.error(
                column,
                format!(
                    "more than {MAX_DEPTH} levels or {MAX_NODES} terms; split the subscription"
                ),
            ));
        }
        let head_tok = self.next("an operator or a key")?;
        let head_column = head_tok.column;
        let head = match &head_tok.kind {
            Tok::Atom(a) => match a.as_str() {
                "and" => Head::And,
                "or" => Head::Or,
                "not" => Head::Not,
                "has" => Head::Has,
                "~=" => Head::Op(None),
                a => match CmpOp::parse(a) {
                    Some(op) => Head::Op(Some(op)),
                    None => Head::Key(a.to_string()),
                },
            },
            _ => {
                return Err(self.error(
                    head_column,
                    "expected and, or, not, has, an operator or a key after '('",
                ));
            }
        };
        match head {
            Head::And | Head::Or => {
                let mut parts = Vec::new();
                while self
                    .tokens
                    .get(self.at)
                    .is_some_and(|t| t.kind == Tok::Open)
                {
                    parts.push(self.expr(depth + 1)?);
                }
                self.close("the terms of and/or")?;
                Ok(if matches!(head, Head::And) {
                    Expr::And(parts)
                } else {
                    Expr::Or(parts)
                })
            }
            Head::Not => {
                let inner = self.expr(depth + 1)?;
                self.close("the term of not (it takes exactly one)")?;
                Ok(Expr::Not(Box::new(inner)))
            }
            Head::Has => {
                let key = self.key_atom("has")?;
                self.close("(has KEY)")?;
                Ok(Expr::Has(key))
            }
            Head::Op(op) => {
                let key = self.key_atom("the operator")?;
                self.comparison(key, op)
            }
            Head::Key(atom) => {
                let key = self.key(&atom);
                let t = self.next("an operator")?;
                let (column, op) = (
                    t.column,
                    match &t.kind {
                        Tok::Atom(a) if a == "~=" => Some(None),
                        Tok::Atom(a) => CmpOp::parse(a).map(Some),
                        _ => None,
                    },
                );
                let Some(op) = op else {
                    return Err(self.error(
                        column,
                        format!("expected an operator (= != < <= > >= ~=) after the key {key}"),
                    ));
                };
                self.comparison(key, op)
            }
        }
    }

    fn key_atom(&mut self, after: &str) -> Result<String, SelectorError> {
        let t = self.next("a key")?;
        match &t.kind {
            Tok::Atom(a) if CmpOp::parse(a).is_none() => Ok(self.key(a)),
            _ => {
                let column = t.column;
                Err(self.error(column, format!("expected a key after {after}")))
            }
        }
    }

    /// The value and ')' of `(KEY OP VALUE)`; `op` `None` is `~=`.
    fn comparison(&mut self, key: String, op: Option<CmpOp>) -> Result<Expr, SelectorError> {
        let t = self.next("a value")?;
        let column = t.column;
        let (text, quoted) = match &t.kind {
            Tok::Atom(a) => (a.clone(), false),
            Tok::Quoted(s) => (s.clone(), true),
            _ => return Err(self.error(column, format!("expected a value to compare {key} with"))),
        };
        let declared = self.schemas.spec(&key).map(|s| s.ty);
        let expr = match op {
            None => {
                if !quoted {
                    return Err(self.error(
                        column,
                        "a regular expression must be quoted: (KEY ~= \"^a.*\")",
                    ));
                }
                if declared.is_some_and(|t| t != AttrType::Str) {
                    return Err(self.error(
                        column,
                        format!("{key} is not a str(); ~= matches strings only"),
                    ));
                }
                Expr::Match { key, pattern: text }
            }
            Some(op) => {
                let value = self.literal(&key, &text, quoted, declared, column)?;
                Expr::Cmp { key, op, value }
            }
        };
        self.close("the value")?;
        Ok(expr)
    }

    /// Types a literal: by the key's schema when declared, else by its spelling.
    fn literal(
        &self,
        key: &str,
        text: &str,
        quoted: bool,
        declared: Option<AttrType>,
        column: usize,
    ) -> Result<AttrValue, SelectorError> {
        let spelled = if quoted {
            AttrValue::Str(text.to_string())
        } else if let Ok(i) = text.parse::<i64>() {
            AttrValue::Int(i)
        } else if let Ok(u) = text.parse::<u64>() {
            AttrValue::Uint(u)
        } else if let Some(d) = text.parse::<f64>().ok().filter(|d| d.is_finite()) {
            AttrValue::Double(d)
        } else if text == "true" || text == "false" {
            AttrValue::Bool(text == "true")
        } else {
            return Err(self.error(
                column,
                format!("{text:?} is not a number or true/false; quote strings: \"{text}\""),
            ));
        };
        let Some(ty) = declared else {
            return Ok(spelled);
        };
        let numeric = |t: AttrType| matches!(t, AttrType::Int | AttrType::Uint | AttrType::Double);
        let spelled_ty = AttrType::of(&spelled);
        if spelled_ty == ty || (numeric(ty) && numeric(spelled_ty)) {
            return Ok(spelled);
        }
        // A quoted value for a typed key: parse it as that type (timestamps, for one).
        let spec = self
            .schemas
            .spec(key)
            .ok_or_else(|| self.error(column, "schema changed"))?;
        match (quoted, ty) {
            (true, _) | (false, AttrType::Timestamp) => crate::schema::parse_unchecked(spec, text)
                .map_err(|e| self.error(column, format!("{e}"))),
            _ => Err(self.error(column, format!("{key} is {ty}; {text} is a {spelled_ty}"))),
        }
    }
}

#[cfg(test)]
mod tests {
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
        let e =
            Selector::parse("(taken < \"yesterday\")", ".user.", &schemas()).expect_err("typed");
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
                let again =
                    Selector::compile(sel.expr().clone()).expect("a parsed selector compiles");
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
        let text =
            r#"(and (step >= 2) (not (kind = "draft")) (or) (and) (or (has .x) (.y ~= "^a")))"#;
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
}
