//! Parsing Maestro's s-expressions into an [`Expr`]: tokens with their columns, then a
//! recursive-descent parser bounded by [`MAX_DEPTH`], typing literals by the schemas.

use super::{CmpOp, Expr, MAX_DEPTH, MAX_NODES, SelectorError};
use crate::attr::AttrValue;
use crate::schema::{AttrType, Schemas};

/// Parses `text` (relative keys get `namespace` in front, literals the type `schemas`
/// declare); `None` for blank text.
///
/// # Errors
/// [`SelectorError`] pointing at the column of the problem.
pub(super) fn expr(
    text: &str,
    namespace: &str,
    schemas: &Schemas,
) -> Result<Option<Expr>, SelectorError> {
    let tokens = tokenize(text)?;
    if tokens.is_empty() {
        return Ok(None);
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
        return Err(p.error(
            t.column,
            "text after the selector's closing ')'; combine selectors with (and ...) or (or ...)",
        ));
    }
    Ok(Some(expr))
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

pub(super) fn shorten(text: &str) -> String {
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

    /// The key an atom names: absolute (a leading `.`) as it is; relative under the
    /// namespace, which is taken with or without its dots (`.user.`, `.user`, `user`).
    fn key(&self, atom: &str) -> String {
        if atom.starts_with('.') || self.namespace.is_empty() {
            return atom.to_string();
        }
        let ns = self.namespace.trim_end_matches('.');
        let lead = if ns.starts_with('.') { "" } else { "." };
        format!("{lead}{ns}.{atom}")
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
        let head = self.head()?;
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
            Head::Key(atom) => self.infix(&atom),
        }
    }

    /// What follows `(`: and, or, not, has, a prefix operator, or a key (infix).
    fn head(&mut self) -> Result<Head, SelectorError> {
        let head_tok = self.next("an operator or a key")?;
        let head_column = head_tok.column;
        Ok(match &head_tok.kind {
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
        })
    }

    /// An infix comparison after its key `atom`: `(KEY OP VALUE)`.
    fn infix(&mut self, atom: &str) -> Result<Expr, SelectorError> {
        let key = self.key(atom);
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
