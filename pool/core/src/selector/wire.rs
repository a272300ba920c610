//! Selectors on the wire: an [`Expr`] travels flat, as its terms in prefix order, so that
//! decoding one needs no recursion and is bounded by [`MAX_NODES`] and [`MAX_DEPTH`].

use serde::{Deserialize, Serialize};

use super::{CmpOp, Expr, MAX_DEPTH, MAX_NODES, SelectorError, whole};
use crate::attr::AttrValue;

/// One term of an [`Expr`] in prefix order: the wire form (see [`Expr`]). Decoding reads
/// owned terms (`Term<String, AttrValue>`); encoding writes terms borrowed from the tree
/// (`Term<&str, &AttrValue>`), which serialize the same.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(super) enum Term<S = String, V = AttrValue> {
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
pub(super) struct Flat(pub(super) Vec<Term>);

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
